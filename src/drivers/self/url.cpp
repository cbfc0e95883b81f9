// pier self driver: url codec.
#include "drivers/self/url.hpp"

namespace pier::drivers::self {

namespace {

constexpr std::array<std::byte, 4> magic{std::byte{'P'}, std::byte{'S'}, std::byte{'L'},
                                         std::byte{'F'}};
constexpr std::uint8_t version = 1;

void store_le(std::span<std::byte> out, std::size_t at, std::uint64_t v, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) out[at + i] = static_cast<std::byte>(v >> (8 * i));
}

std::uint64_t load_le(std::span<const std::byte> in, std::size_t at, std::size_t n) noexcept {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < n; ++i) v |= static_cast<std::uint64_t>(in[at + i]) << (8 * i);
  return v;
}

}  // namespace

std::array<std::byte, url_size> encode_url(const Url& url) noexcept {
  std::array<std::byte, url_size> out{};
  for (std::size_t i = 0; i < magic.size(); ++i) out[i] = magic[i];
  out[4] = std::byte{version};
  store_le(out, 8, url.pid, 4);
  store_le(out, 12, url.context_id, 8);
  return out;
}

Result<Url> decode_url(std::span<const std::byte> bytes) noexcept {
  if (bytes.size() != url_size) return Status::invalid_argument;
  for (std::size_t i = 0; i < magic.size(); ++i)
    if (bytes[i] != magic[i]) return Status::invalid_argument;
  if (bytes[4] != std::byte{version}) return Status::invalid_argument;
  // Reserved bytes must be zero so a later version can use them safely.
  if (load_le(bytes, 5, 3) != 0) return Status::invalid_argument;
  Url url;
  url.pid = static_cast<std::uint32_t>(load_le(bytes, 8, 4));
  url.context_id = load_le(bytes, 12, 8);
  return url;
}

}  // namespace pier::drivers::self
