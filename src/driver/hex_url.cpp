// pier driver helpers: hex url codec.
#include "driver/hex_url.hpp"

namespace pier::driver {

namespace {

int hex_value(char c) noexcept {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::string hex_encode(std::span<const std::byte> bytes) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string text;
  text.reserve(bytes.size() * 2);
  for (std::byte b : bytes) {
    const auto v = static_cast<unsigned>(b);
    text.push_back(digits[v >> 4]);
    text.push_back(digits[v & 0xf]);
  }
  return text;
}

Result<std::vector<std::byte>> hex_decode(std::string_view text) {
  if (text.size() % 2 != 0) return Status::invalid_argument;
  std::vector<std::byte> bytes;
  bytes.reserve(text.size() / 2);
  for (std::size_t i = 0; i < text.size(); i += 2) {
    const int hi = hex_value(text[i]);
    const int lo = hex_value(text[i + 1]);
    if (hi < 0 || lo < 0) return Status::invalid_argument;
    bytes.push_back(static_cast<std::byte>((hi << 4) | lo));
  }
  return bytes;
}

}  // namespace pier::driver
