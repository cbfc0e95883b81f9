// libFuzzer target: PortalsHeader::decode and decode_compact on hostile bytes
// (see roundtrip.hpp; the compact form is checked the same way here).
#include "roundtrip.hpp"
#include "wire/wire.hpp"

namespace {

using pier::wire::PortalsHeader;

int compact_roundtrip(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> in(reinterpret_cast<const std::byte*>(data), size);
  auto decoded = PortalsHeader::decode_compact(in);
  if (!decoded) {
    const pier::Status st = decoded.status();
    if (st != pier::Status::malformed && st != pier::Status::version_mismatch) __builtin_trap();
    return 0;
  }
  if (size != PortalsHeader::compact_size || !decoded->fits_compact()) __builtin_trap();
  std::byte out[PortalsHeader::compact_size];
  auto n = encode_compact(*decoded, out);
  if (!n || *n != PortalsHeader::compact_size) __builtin_trap();
  if (std::memcmp(out, data, PortalsHeader::compact_size) != 0) __builtin_trap();
  return 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  (void)compact_roundtrip(data, size);
  return pier::wire::fuzz::roundtrip<PortalsHeader>(data, size);
}
