// shm: encoders and decoders of the driver's own messages (see codec.hpp).
#include "drivers/shm/codec.hpp"

#include "wire/bytes.hpp"
#include "wire/frame.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace pier::drivers::shm {

using wire::all_zero;
using wire::load_u32;
using wire::load_u64;
using wire::load_u8;
using wire::store_u32;
using wire::store_u64;
using wire::store_u8;

namespace {

constexpr std::array<std::byte, 4> url_magic{std::byte{'p'}, std::byte{'s'}, std::byte{'h'},
                                             std::byte{'m'}};
constexpr std::array<std::byte, 4> hello_magic{std::byte{'p'}, std::byte{'s'}, std::byte{'H'},
                                               std::byte{'L'}};
constexpr std::array<std::byte, 4> reply_magic{std::byte{'p'}, std::byte{'s'}, std::byte{'R'},
                                               std::byte{'P'}};

bool has_magic(std::span<const std::byte> in, const std::array<std::byte, 4>& magic) noexcept {
  return std::equal(magic.begin(), magic.end(), in.begin());
}

void put_magic(std::span<std::byte> out, const std::array<std::byte, 4>& magic) noexcept {
  std::copy(magic.begin(), magic.end(), out.begin());
}

static_assert(control_prefix == wire::driver_local_prefix);

/// Writes the prefix of a control message; the body follows it.
void put_prefix(std::span<std::byte> out, LocalType type, std::size_t body) noexcept {
  // Cannot fail: the buffer holds the prefix and the body is small.
  (void)wire::encode_driver_local(static_cast<std::uint16_t>(type),
                                  static_cast<std::uint32_t>(body), out);
}

}  // namespace

Result<Control> decode_control(std::span<const std::byte> msg) noexcept {
  Result<wire::FrameHeader> frame = wire::FrameHeader::decode(msg);
  if (!frame) return frame.status();
  if (frame->type != wire::PacketType::driver_local ||
      frame->payload_length != msg.size() - wire::FrameHeader::size)
    return Status::malformed;
  Result<wire::DriverLocalHeader> local =
      wire::DriverLocalHeader::decode(msg.subspan(wire::FrameHeader::size));
  if (!local) return local.status();
  if (local->length != msg.size() - control_prefix) return Status::malformed;
  if (local->subtype < static_cast<std::uint16_t>(LocalType::hello) ||
      local->subtype > static_cast<std::uint16_t>(LocalType::wake))
    return Status::malformed;
  return Control{static_cast<LocalType>(local->subtype), msg.subspan(control_prefix)};
}

std::array<std::byte, control_prefix> encode_wake() noexcept {
  std::array<std::byte, control_prefix> out{};
  put_prefix(out, LocalType::wake, 0);
  return out;
}

std::vector<std::byte> encode_url(const Url& url) {
  std::vector<std::byte> out(Url::size);
  std::span<std::byte> o(out);
  put_magic(o, url_magic);
  store_u8(o, 4, codec_version);
  std::copy(url.boot_id.begin(), url.boot_id.end(), out.begin() + 8);
  store_u32(o, 24, url.pid);
  store_u32(o, 28, url.max_packet);
  store_u64(o, 32, url.nonce);
  store_u64(o, 40, url.probe_addr);
  store_u64(o, 48, url.probe_value);
  return out;
}

Result<Url> decode_url(std::span<const std::byte> in) noexcept {
  if (in.size() != Url::size || !has_magic(in, url_magic)) return Status::malformed;
  if (load_u8(in, 4) != codec_version) return Status::version_mismatch;
  if (!all_zero(in, 5, 3)) return Status::malformed;
  Url url;
  std::copy(in.begin() + 8, in.begin() + 24, url.boot_id.begin());
  url.pid = load_u32(in, 24);
  url.max_packet = load_u32(in, 28);
  url.nonce = load_u64(in, 32);
  url.probe_addr = load_u64(in, 40);
  url.probe_value = load_u64(in, 48);
  if (url.pid == 0 || url.max_packet == 0) return Status::malformed;
  return url;
}

std::string socket_name(std::uint32_t pid, std::uint64_t nonce) {
  return fmt::format("pier-shm-{}-{:016x}", pid, nonce);
}

std::array<std::byte, control_prefix + Hello::size> encode_hello(const Hello& h) noexcept {
  std::array<std::byte, control_prefix + Hello::size> out{};
  put_prefix(out, LocalType::hello, Hello::size);
  std::span<std::byte> o = std::span<std::byte>(out).subspan(control_prefix);
  put_magic(o, hello_magic);
  store_u8(o, 4, codec_version);
  store_u8(o, 5, static_cast<std::uint8_t>(h.track));
  store_u8(o, 6, h.call_back ? 1 : 0);
  std::copy(h.url.begin(), h.url.end(), o.begin() + 8);
  store_u32(o, 64, h.ring_lines);
  store_u32(o, 68, h.max_packet);
  store_u64(o, 72, h.segment_size);
  return out;
}

Result<Hello> decode_hello(std::span<const std::byte> in) noexcept {
  if (in.size() != Hello::size || !has_magic(in, hello_magic)) return Status::malformed;
  if (load_u8(in, 4) != codec_version) return Status::version_mismatch;
  const std::uint8_t track = load_u8(in, 5);
  const std::uint8_t flags = load_u8(in, 6);
  if (track > 1 || flags > 1 || !all_zero(in, 7, 1)) return Status::malformed;
  Hello h;
  h.call_back = flags == 1;
  h.track = static_cast<driver::Track>(track);
  std::copy(in.begin() + 8, in.begin() + 64, h.url.begin());
  h.ring_lines = load_u32(in, 64);
  h.max_packet = load_u32(in, 68);
  h.segment_size = load_u64(in, 72);
  return h;
}

std::array<std::byte, control_prefix + Reply::size> encode_reply(const Reply& r) noexcept {
  std::array<std::byte, control_prefix + Reply::size> out{};
  put_prefix(out, LocalType::reply, Reply::size);
  std::span<std::byte> o = std::span<std::byte>(out).subspan(control_prefix);
  put_magic(o, reply_magic);
  store_u8(o, 4, codec_version);
  store_u8(o, 5, static_cast<std::uint8_t>(r.answer));
  return out;
}

Result<Reply> decode_reply(std::span<const std::byte> in) noexcept {
  if (in.size() != Reply::size || !has_magic(in, reply_magic)) return Status::malformed;
  if (load_u8(in, 4) != codec_version) return Status::version_mismatch;
  const std::uint8_t answer = load_u8(in, 5);
  if (answer > 2 || !all_zero(in, 6, 2)) return Status::malformed;
  return Reply{static_cast<Answer>(answer)};
}

void encode_rdv(const Rdv& r, driver::Packet& pkt) noexcept {
  std::span<std::byte> o(pkt.rdv_data.data(), Rdv::size);
  std::fill(o.begin(), o.end(), std::byte{0});
  store_u8(o, 0, Rdv::kind_cma);
  store_u8(o, 1, r.can_pull ? Rdv::flag_can_pull : 0);
  store_u32(o, 4, r.iov_count);
  store_u64(o, 8, r.token);
  store_u64(o, 16, r.addr);
  store_u64(o, 24, r.capacity);
  store_u32(o, 32, r.pid);
  pkt.rdv_len = static_cast<std::uint8_t>(Rdv::size);
}

Result<Rdv> decode_rdv(const driver::Packet& pkt) noexcept {
  if (pkt.rdv_len != Rdv::size) return Status::malformed;
  std::span<const std::byte> in(pkt.rdv_data.data(), Rdv::size);
  const std::uint8_t flags = load_u8(in, 1);
  if (load_u8(in, 0) != Rdv::kind_cma || (flags & ~Rdv::flag_can_pull) != 0 ||
      !all_zero(in, 2, 2) || !all_zero(in, 36, 4))
    return Status::malformed;
  Rdv r;
  r.can_pull = (flags & Rdv::flag_can_pull) != 0;
  r.iov_count = load_u32(in, 4);
  r.token = load_u64(in, 8);
  r.addr = load_u64(in, 16);
  r.capacity = load_u64(in, 24);
  r.pid = load_u32(in, 32);
  if (r.token == 0) return Status::malformed;
  return r;
}

void encode_done(const Done& d, std::span<std::byte> out) noexcept {
  store_u64(out, 0, d.token);
  store_u64(out, 8, d.written);
  store_u64(out, 16, d.total);
}

Result<Done> decode_done(std::span<const std::byte> in) noexcept {
  if (in.size() != Done::size) return Status::malformed;
  Done d{load_u64(in, 0), load_u64(in, 8), load_u64(in, 16)};
  if (d.written > d.total) return Status::malformed;
  return d;
}

void encode_split(const Split& sp, std::span<std::byte> out) noexcept {
  store_u64(out, 0, sp.token);
  store_u64(out, 8, sp.offset);
  store_u64(out, 16, sp.len);
  store_u64(out, 24, sp.addr);
}

Result<Split> decode_split(std::span<const std::byte> in) noexcept {
  if (in.size() != Split::size) return Status::malformed;
  Split sp{load_u64(in, 0), load_u64(in, 8), load_u64(in, 16), load_u64(in, 24)};
  if (sp.len == 0 || sp.offset + sp.len < sp.offset) return Status::malformed;
  return sp;
}

}  // namespace pier::drivers::shm
