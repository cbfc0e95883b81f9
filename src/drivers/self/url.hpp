// pier self driver: the url of a context. It never leaves the process, but
// it is still decoded defensively: a url is bytes from the launcher.
//
// Layout (20 bytes, little-endian): "PSLF", version 1, 3 reserved zero bytes,
// u32 process id, u64 context id.
#pragma once

#include <pier/result.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

namespace pier::drivers::self {

struct Url {
  std::uint32_t pid = 0;
  std::uint64_t context_id = 0;
};

inline constexpr std::size_t url_size = 20;

std::array<std::byte, url_size> encode_url(const Url& url) noexcept;
/// invalid_argument when the bytes are not a self url.
Result<Url> decode_url(std::span<const std::byte> bytes) noexcept;

}  // namespace pier::drivers::self
