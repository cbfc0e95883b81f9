// libFuzzer target: PortalsHeader::decode, decode_compact and decode_tiny on
// hostile bytes (see roundtrip.hpp; the shorter forms are checked the same way here).
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

/// The tiny forms: whatever decodes encodes back to the same bytes.
int tiny_roundtrip(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> in(reinterpret_cast<const std::byte*>(data), size);
  auto decoded = PortalsHeader::decode_tiny(in, size);
  if (!decoded) {
    if (decoded.status() != pier::Status::malformed) __builtin_trap();
    return 0;
  }
  if (decoded->tiny_length() != size) __builtin_trap();
  std::byte out[PortalsHeader::tiny_get_size];
  auto n = encode_tiny(*decoded, out);
  if (!n || *n != size) __builtin_trap();
  if (std::memcmp(out, data, size) != 0) __builtin_trap();
  return 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  (void)compact_roundtrip(data, size);
  (void)tiny_roundtrip(data, size);
  return pier::wire::fuzz::roundtrip<PortalsHeader>(data, size);
}
