#include "drivers/tcp/codec.hpp"

#include "wire/frame.hpp"

namespace pier::drivers::tcp {

static_assert(local_prefix == wire::driver_local_prefix);

namespace {

// Local little-endian helpers; src/wire's versions replace them once its
// packet registry is available to drivers.
void put_u16(std::byte* p, std::uint16_t v) noexcept {
  for (int i = 0; i < 2; ++i) p[i] = static_cast<std::byte>(v >> (8 * i));
}
void put_u32(std::byte* p, std::uint32_t v) noexcept {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<std::byte>(v >> (8 * i));
}
void put_u64(std::byte* p, std::uint64_t v) noexcept {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<std::byte>(v >> (8 * i));
}
std::uint16_t get_u16(const std::byte* p) noexcept {
  return static_cast<std::uint16_t>(static_cast<unsigned>(p[0]) |
                                    (static_cast<unsigned>(p[1]) << 8));
}
std::uint32_t get_u32(const std::byte* p) noexcept {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<std::uint32_t>(p[i]) << (8 * i);
  return v;
}
std::uint64_t get_u64(const std::byte* p) noexcept {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<std::uint64_t>(p[i]) << (8 * i);
  return v;
}
bool zero(const std::byte* p, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i)
    if (p[i] != std::byte{0}) return false;
  return true;
}

}  // namespace

void encode_frame_header(std::span<std::byte, frame_header_size> out,
                         const FrameHeader& h) noexcept {
  std::byte* p = out.data();
  p[0] = static_cast<std::byte>(h.type);
  for (int i = 1; i < 8; ++i) p[i] = std::byte{0};
  put_u64(p + 8, h.length);
}

Result<FrameHeader> decode_frame_header(std::span<const std::byte> in) noexcept {
  if (in.size() < frame_header_size) return Status::malformed;
  const std::byte* p = in.data();
  FrameHeader h;
  h.type = static_cast<std::uint8_t>(p[0]);
  h.length = get_u64(p + 8);
  if (!zero(p + 1, 7)) return Status::malformed;
  if (h.type != frame_data && h.type != frame_local) return Status::malformed;
  return h;
}

UrlBytes encode_url(const Url& url) noexcept {
  UrlBytes out{};
  out[0] = static_cast<std::byte>(url_version);
  out[1] = static_cast<std::byte>(url.family);
  put_u16(out.data() + 2, url.port);
  put_u32(out.data() + 4, url.small_limit);
  put_u64(out.data() + 8, url.context_id);
  for (std::size_t i = 0; i < 16; ++i) out[16 + i] = url.address[i];
  if (url.family == 4)
    for (std::size_t i = 4; i < 16; ++i) out[16 + i] = std::byte{0};
  return out;
}

Result<Url> decode_url(std::span<const std::byte> in) noexcept {
  if (in.size() != url_size) return Status::malformed;
  const std::byte* p = in.data();
  if (static_cast<std::uint8_t>(p[0]) != url_version) return Status::version_mismatch;
  Url url;
  url.family = static_cast<std::uint8_t>(p[1]);
  if (url.family != 4 && url.family != 6) return Status::malformed;
  url.port = get_u16(p + 2);
  url.small_limit = get_u32(p + 4);
  if (url.port == 0 || url.small_limit < min_small_limit) return Status::malformed;
  url.context_id = get_u64(p + 8);
  for (std::size_t i = 0; i < 16; ++i) url.address[i] = p[16 + i];
  if (url.family == 4 && !zero(p + 20, 12)) return Status::malformed;
  return url;
}

std::array<std::byte, hello_frame_size> encode_hello_frame(const Hello& h) noexcept {
  std::array<std::byte, hello_frame_size> out{};
  encode_frame_header(std::span<std::byte, frame_header_size>(out.data(), frame_header_size),
                      FrameHeader{frame_local, local_prefix + hello_size});
  // Cannot fail: the span holds the prefix and the length is small.
  (void)wire::encode_driver_local(static_cast<std::uint16_t>(LocalType::hello), hello_size,
                                  std::span<std::byte>(out).subspan(frame_header_size));
  std::byte* p = out.data() + frame_header_size + local_prefix;
  p[0] = static_cast<std::byte>(1);
  p[1] = static_cast<std::byte>(h.track);
  p[2] = static_cast<std::byte>(h.call_back ? 1 : 0);
  put_u64(p + 8, h.target_id);
  for (std::size_t i = 0; i < url_size; ++i) p[16 + i] = h.connector_url[i];
  return out;
}

std::array<std::byte, keepalive_frame_size> encode_keepalive_frame() noexcept {
  std::array<std::byte, keepalive_frame_size> out{};
  encode_frame_header(std::span<std::byte, frame_header_size>(out.data(), frame_header_size),
                      FrameHeader{frame_local, local_prefix});
  (void)wire::encode_driver_local(static_cast<std::uint16_t>(LocalType::keepalive), 0,
                                  std::span<std::byte>(out).subspan(frame_header_size));
  return out;
}

Result<Hello> decode_hello(std::span<const std::byte> in) noexcept {
  if (in.size() != hello_size) return Status::malformed;
  const std::byte* p = in.data();
  if (static_cast<std::uint8_t>(p[0]) != 1) return Status::version_mismatch;
  const auto track = static_cast<std::uint8_t>(p[1]);
  const auto flags = static_cast<std::uint8_t>(p[2]);
  if (track > 1 || flags > 1 || !zero(p + 3, 5)) return Status::malformed;
  Hello h;
  h.call_back = flags == 1;
  h.track = static_cast<driver::Track>(track);
  h.target_id = get_u64(p + 8);
  for (std::size_t i = 0; i < url_size; ++i) h.connector_url[i] = p[16 + i];
  if (!decode_url(h.connector_url)) return Status::malformed;
  return h;
}

}  // namespace pier::drivers::tcp
