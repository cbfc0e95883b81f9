// The property every decoder fuzz target checks: decoding hostile bytes
// never crashes, and whatever it accepts is canonical, so encoding the result
// gives back exactly the bytes it read. A bug traps, which libFuzzer reports.
#pragma once

#include <pier/status.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

namespace pier::wire::fuzz {

template <class H>
int roundtrip(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> in(reinterpret_cast<const std::byte*>(data), size);
  auto decoded = H::decode(in);
  if (!decoded) {
    const Status st = decoded.status();
    if (st != Status::malformed && st != Status::version_mismatch) __builtin_trap();
    return 0;
  }
  if (size < H::size) __builtin_trap();  // accepted a short buffer
  std::byte out[H::size];
  auto n = encode(*decoded, std::span<std::byte>(out, H::size));
  if (!n || *n != H::size) __builtin_trap();
  if (std::memcmp(out, data, H::size) != 0) __builtin_trap();
  auto again = H::decode(std::span<const std::byte>(out, H::size));
  if (!again || !(*again == *decoded)) __builtin_trap();
  return 0;
}

}  // namespace pier::wire::fuzz
