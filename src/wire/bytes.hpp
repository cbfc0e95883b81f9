// pier wire: little-endian loads and stores at explicit offsets. Every codec
// in src/wire goes through these, so no struct is ever cast onto a buffer and
// the layout cannot depend on the host's endianness, padding or build flags.
// Callers check the buffer size once (against the header's constexpr size)
// before any load or store.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace pier::wire {

inline void store_u8(std::span<std::byte> out, std::size_t at, std::uint8_t v) noexcept {
  out[at] = static_cast<std::byte>(v);
}

inline void store_u16(std::span<std::byte> out, std::size_t at, std::uint16_t v) noexcept {
  for (std::size_t i = 0; i < 2; ++i) out[at + i] = static_cast<std::byte>(v >> (8 * i));
}

inline void store_u32(std::span<std::byte> out, std::size_t at, std::uint32_t v) noexcept {
  for (std::size_t i = 0; i < 4; ++i) out[at + i] = static_cast<std::byte>(v >> (8 * i));
}

inline void store_u64(std::span<std::byte> out, std::size_t at, std::uint64_t v) noexcept {
  for (std::size_t i = 0; i < 8; ++i) out[at + i] = static_cast<std::byte>(v >> (8 * i));
}

inline void store_zero(std::span<std::byte> out, std::size_t at, std::size_t len) noexcept {
  for (std::size_t i = 0; i < len; ++i) out[at + i] = std::byte{0};
}

inline std::uint8_t load_u8(std::span<const std::byte> in, std::size_t at) noexcept {
  return static_cast<std::uint8_t>(in[at]);
}

inline std::uint16_t load_u16(std::span<const std::byte> in, std::size_t at) noexcept {
  std::uint16_t v = 0;
  for (std::size_t i = 0; i < 2; ++i)
    v = static_cast<std::uint16_t>(v | (static_cast<std::uint16_t>(in[at + i]) << (8 * i)));
  return v;
}

inline std::uint32_t load_u32(std::span<const std::byte> in, std::size_t at) noexcept {
  std::uint32_t v = 0;
  for (std::size_t i = 0; i < 4; ++i) v |= static_cast<std::uint32_t>(in[at + i]) << (8 * i);
  return v;
}

inline std::uint64_t load_u64(std::span<const std::byte> in, std::size_t at) noexcept {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < 8; ++i) v |= static_cast<std::uint64_t>(in[at + i]) << (8 * i);
  return v;
}

/// True when every byte of [at, at + len) is zero: reserved bytes are checked
/// on receive so that a later version can give them a meaning safely.
inline bool all_zero(std::span<const std::byte> in, std::size_t at, std::size_t len) noexcept {
  for (std::size_t i = 0; i < len; ++i)
    if (in[at + i] != std::byte{0}) return false;
  return true;
}

}  // namespace pier::wire
