#include "wire/port.hpp"

#include <cassert>

#include "wire/bytes.hpp"
#include "wire/frame.hpp"

namespace pier::wire {

namespace {

constexpr std::size_t off_version = 0;
constexpr std::size_t off_kind = 1;
constexpr std::size_t off_priority = 2;
constexpr std::size_t off_size_class = 3;
constexpr std::size_t off_sending_port = 4;
constexpr std::size_t off_receiving_port = 6;
constexpr std::size_t off_length = 8;
constexpr std::size_t off_epoch = 12;
constexpr std::size_t off_peer_epoch = 14;
constexpr std::size_t off_tag = 16;
constexpr std::size_t off_remote_address = 24;
constexpr std::size_t off_cookie = 32;
static_assert(off_cookie + 8 == PortHeader::size);

// The compact send: version, kind, size_class, a reserved byte, epoch,
// peer_epoch, tag.
constexpr std::size_t compact_off_size_class = 2;
constexpr std::size_t compact_off_reserved = 3;
constexpr std::size_t compact_off_epoch = 4;
constexpr std::size_t compact_off_peer_epoch = 6;
constexpr std::size_t compact_off_tag = 8;
static_assert(compact_off_tag + 8 == PortHeader::compact_size);
static_assert(max_length_for_size(max_size_class) >= max_port_message);
static_assert(max_length_for_size(min_size_class) == 0);

/// The answers and controls carry no data, size, address or cookie.
bool answer_fields_zero(const PortHeader& h) noexcept {
  return h.size_class == 0 && h.length == 0 && h.remote_address == 0 && h.cookie == 0;
}

/// Each kind uses its own fields and leaves the others zero, so no byte is
/// ignored on receive.
bool fields_valid(const PortHeader& h) noexcept {
  if (h.priority >= priority_count || h.length > max_port_message) return false;
  switch (h.kind) {
    case PortKind::send:
      // peer_epoch names the port the piggybacked acks answer: none, none.
      return h.size_class >= min_size_class && h.size_class <= max_size_class &&
             h.length <= max_length_for_size(h.size_class) && h.remote_address == 0 &&
             h.cookie == 0 && (h.tag != 0 || h.peer_epoch == 0);
    case PortKind::put:
      return h.size_class == 0 && h.tag == 0 && h.cookie == 0 && h.peer_epoch == 0;
    case PortKind::get_request:
      return h.size_class == 0 && h.tag == 0 && h.peer_epoch == 0;
    case PortKind::get_reply:
      return h.size_class == 0 && h.tag == 0 && h.remote_address == 0;
    case PortKind::ack:
      return answer_fields_zero(h) && h.tag >= 1 && h.tag <= 0xffff'ffff;
    case PortKind::nack:
      // Any failure pier::Status names; "ok" is no nack.
      return answer_fields_zero(h) && h.tag >= 1 && h.tag < status_count;
    case PortKind::resume:
    case PortKind::drop:
      return answer_fields_zero(h) && h.tag == 0 && h.peer_epoch == 0;
  }
  return false;
}

}  // namespace

std::string_view to_string(PortKind k) noexcept {
  switch (k) {
    case PortKind::send:
      return "send";
    case PortKind::put:
      return "put";
    case PortKind::get_request:
      return "get_request";
    case PortKind::get_reply:
      return "get_reply";
    case PortKind::ack:
      return "ack";
    case PortKind::nack:
      return "nack";
    case PortKind::resume:
      return "resume";
    case PortKind::drop:
      return "drop";
  }
  return "unknown";
}

Result<std::size_t> encode(const PortHeader& h, std::span<std::byte> out) noexcept {
  if (out.size() < PortHeader::size || !fields_valid(h)) return Status::invalid_argument;
  store_u8(out, off_version, version);
  store_u8(out, off_kind, static_cast<std::uint8_t>(h.kind));
  store_u8(out, off_priority, h.priority);
  store_u8(out, off_size_class, h.size_class);
  store_u16(out, off_sending_port, h.sending_port);
  store_u16(out, off_receiving_port, h.receiving_port);
  store_u32(out, off_length, h.length);
  store_u16(out, off_epoch, h.epoch);
  store_u16(out, off_peer_epoch, h.peer_epoch);
  store_u64(out, off_tag, h.tag);
  store_u64(out, off_remote_address, h.remote_address);
  store_u64(out, off_cookie, h.cookie);
  return PortHeader::size;
}

Result<PortHeader> PortHeader::decode(std::span<const std::byte> in) noexcept {
  if (in.empty()) return Status::malformed;
  if (load_u8(in, off_version) != version) return Status::version_mismatch;
  if (in.size() < size) return Status::malformed;
  PortHeader h;
  h.kind = static_cast<PortKind>(load_u8(in, off_kind));
  h.priority = load_u8(in, off_priority);
  h.size_class = load_u8(in, off_size_class);
  h.sending_port = load_u16(in, off_sending_port);
  h.receiving_port = load_u16(in, off_receiving_port);
  h.length = load_u32(in, off_length);
  h.epoch = load_u16(in, off_epoch);
  h.peer_epoch = load_u16(in, off_peer_epoch);
  h.tag = load_u64(in, off_tag);
  h.remote_address = load_u64(in, off_remote_address);
  h.cookie = load_u64(in, off_cookie);
  if (!fields_valid(h)) return Status::malformed;
  return h;
}

Result<std::size_t> encode_compact(const PortHeader& h, std::span<std::byte> out) noexcept {
  if (out.size() < PortHeader::compact_size || h.kind != PortKind::send || !fields_valid(h))
    return Status::invalid_argument;
  write_compact_send(out.first<PortHeader::compact_size>(), h.size_class, h.epoch, h.peer_epoch,
                     h.tag);
  return PortHeader::compact_size;
}

void write_compact_send(std::span<std::byte, PortHeader::compact_size> fixed,
                        std::uint8_t size_class, std::uint16_t epoch, std::uint16_t peer_epoch,
                        std::uint64_t tag) noexcept {
  assert(size_class >= min_size_class && size_class <= max_size_class &&
         (tag != 0 || peer_epoch == 0));
  const std::span<std::byte> out(fixed);
  store_u8(out, off_version, version);
  store_u8(out, off_kind, static_cast<std::uint8_t>(PortKind::send));
  store_u8(out, compact_off_size_class, size_class);
  store_zero(out, compact_off_reserved, 1);
  store_u16(out, compact_off_epoch, epoch);
  store_u16(out, compact_off_peer_epoch, peer_epoch);
  store_u64(out, compact_off_tag, tag);
}

Result<PortHeader> PortHeader::decode_compact(std::span<const std::byte> in,
                                              const PortRouting& r) noexcept {
  if (in.empty()) return Status::malformed;
  if (load_u8(in, off_version) != version) return Status::version_mismatch;
  if (in.size() < compact_size) return Status::malformed;
  if (load_u8(in, off_kind) != static_cast<std::uint8_t>(PortKind::send) ||
      !all_zero(in, compact_off_reserved, 1) || r.length > max_port_message)
    return Status::malformed;
  PortHeader h;
  h.kind = PortKind::send;
  h.priority = r.priority;
  h.size_class = load_u8(in, compact_off_size_class);
  h.sending_port = r.sending_port;
  h.receiving_port = r.receiving_port;
  h.length = static_cast<std::uint32_t>(r.length);
  h.epoch = load_u16(in, compact_off_epoch);
  h.peer_epoch = load_u16(in, compact_off_peer_epoch);
  h.tag = load_u64(in, compact_off_tag);
  if (!fields_valid(h)) return Status::malformed;
  return h;
}

}  // namespace pier::wire
