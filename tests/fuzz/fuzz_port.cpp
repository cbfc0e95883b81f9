// libFuzzer target: PortHeader::decode on hostile bytes (see roundtrip.hpp).
// Inputs whose first byte is compact_marker take the compact path instead:
// 9 bytes of routing (priority, sending port, receiving port, length), then
// the bytes PortHeader::decode_compact reads.
#include "roundtrip.hpp"
#include "wire/bytes.hpp"
#include "wire/wire.hpp"

namespace {

constexpr std::uint8_t compact_marker = 0xc0;
constexpr std::size_t routing_bytes = 9;

int compact_roundtrip(std::span<const std::byte> in) {
  using namespace pier::wire;
  if (in.size() < routing_bytes) return 0;
  PortRouting r;
  r.priority = load_u8(in, 0);
  r.sending_port = load_u16(in, 1);
  r.receiving_port = load_u16(in, 3);
  r.length = load_u32(in, 5);
  const auto header = in.subspan(routing_bytes);
  auto decoded = PortHeader::decode_compact(header, r);
  if (!decoded) {
    const pier::Status st = decoded.status();
    if (st != pier::Status::malformed && st != pier::Status::version_mismatch) __builtin_trap();
    return 0;
  }
  if (header.size() < PortHeader::compact_size) __builtin_trap();
  if (decoded->priority != r.priority || decoded->sending_port != r.sending_port ||
      decoded->receiving_port != r.receiving_port || decoded->length != r.length)
    __builtin_trap();
  std::byte out[PortHeader::compact_size];
  auto n = encode_compact(*decoded, out);
  if (!n || *n != PortHeader::compact_size) __builtin_trap();
  if (std::memcmp(out, header.data(), PortHeader::compact_size) != 0) __builtin_trap();
  return 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > 0 && data[0] == compact_marker)
    return compact_roundtrip(
        std::span<const std::byte>(reinterpret_cast<const std::byte*>(data) + 1, size - 1));
  return pier::wire::fuzz::roundtrip<pier::wire::PortHeader>(data, size);
}
