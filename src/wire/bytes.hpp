// pier wire: little-endian loads and stores at explicit offsets. Every codec
// in src/wire goes through these, so no struct is ever cast onto a buffer and
// the layout cannot depend on the host's endianness, padding or build flags.
// Callers check the buffer size once (against the header's constexpr size)
// before any load or store.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

namespace pier::wire {

namespace detail {

template <class T>
constexpr T byteswap(T v) noexcept {
  T out = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i) {
    out = static_cast<T>((out << 8) | (v & 0xff));
    v = static_cast<T>(v >> 8);
  }
  return out;
}

// memcpy of a fixed size compiles to one unaligned load or store; the swap
// vanishes on little-endian hosts and makes the bytes little-endian elsewhere.
template <class T>
inline void store(std::span<std::byte> out, std::size_t at, T v) noexcept {
  if constexpr (std::endian::native == std::endian::big) v = byteswap(v);
  std::memcpy(out.data() + at, &v, sizeof v);
}

template <class T>
inline T load(std::span<const std::byte> in, std::size_t at) noexcept {
  T v;
  std::memcpy(&v, in.data() + at, sizeof v);
  if constexpr (std::endian::native == std::endian::big) v = byteswap(v);
  return v;
}

}  // namespace detail

inline void store_u8(std::span<std::byte> out, std::size_t at, std::uint8_t v) noexcept {
  out[at] = static_cast<std::byte>(v);
}
inline void store_u16(std::span<std::byte> out, std::size_t at, std::uint16_t v) noexcept {
  detail::store(out, at, v);
}
inline void store_u32(std::span<std::byte> out, std::size_t at, std::uint32_t v) noexcept {
  detail::store(out, at, v);
}
inline void store_u64(std::span<std::byte> out, std::size_t at, std::uint64_t v) noexcept {
  detail::store(out, at, v);
}
inline void store_zero(std::span<std::byte> out, std::size_t at, std::size_t len) noexcept {
  if (len > 0) std::memset(out.data() + at, 0, len);
}

inline std::uint8_t load_u8(std::span<const std::byte> in, std::size_t at) noexcept {
  return static_cast<std::uint8_t>(in[at]);
}
inline std::uint16_t load_u16(std::span<const std::byte> in, std::size_t at) noexcept {
  return detail::load<std::uint16_t>(in, at);
}
inline std::uint32_t load_u32(std::span<const std::byte> in, std::size_t at) noexcept {
  return detail::load<std::uint32_t>(in, at);
}
inline std::uint64_t load_u64(std::span<const std::byte> in, std::size_t at) noexcept {
  return detail::load<std::uint64_t>(in, at);
}

/// True when every byte of [at, at + len) is zero: reserved bytes are checked
/// on receive so that a later version can give them a meaning safely.
inline bool all_zero(std::span<const std::byte> in, std::size_t at, std::size_t len) noexcept {
  for (std::size_t i = 0; i < len; ++i)
    if (in[at + i] != std::byte{0}) return false;
  return true;
}

}  // namespace pier::wire
