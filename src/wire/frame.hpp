// pier wire: the frame that starts every core packet on a small track, and
// the fixed sub-headers that follow it for each packet type. Layouts, byte
// by byte, are in docs/wire.md; this header is the only definition.
//
// A packet on a small track is: FrameHeader, then payload_length bytes. The
// payload of rts, rtr, data, ack and driver_local packets starts with the
// sub-header of that type; eager and credit packets have none. Sub-headers
// carry no version byte of their own: the frame's version covers them.
//
// Decoders read the first `size` bytes of their input (anything after it is
// payload), trust no field, and answer malformed or version_mismatch. They
// never assert. Encoders write exactly `size` bytes, reserved bytes zero, and
// answer invalid_argument for a field out of range or a short buffer.
#pragma once

#include <pier/result.hpp>
#include <pier/status.hpp>

#include "wire/bytes.hpp"

#include <array>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string_view>

namespace pier::wire {

/// The protocol version every header of this file and of portals.hpp and
/// port.hpp carries in its first byte. Bumped on any incompatible change.
inline constexpr std::uint8_t version = 2;

/// Core packet types. The values follow nmad's protocol ids where the meaning
/// matches (data 0x01, short data 0x02, rdv 0x04, rtr 0x05, ack 0x06); 0x00
/// and 0x03 are never valid, so a zeroed buffer is rejected.
enum class PacketType : std::uint8_t {
  data = 0x01,          ///< rendezvous chunk: DataHeader, then the bytes
  eager = 0x02,         ///< upper-layer header and payload, whole message
  rts = 0x04,           ///< request to send: RtsHeader, then the upper-layer header
  rtr = 0x05,           ///< ready to receive: RtrHeader only
  ack = 0x06,           ///< AckHeader only
  credit = 0x07,        ///< no payload; the frame's credit_return is the point
  driver_local = 0x08,  ///< seed 003 wrapper: DriverLocalHeader, then the body
};
/// One past the largest PacketType value: the size of a table indexed by type.
inline constexpr std::size_t packet_type_limit = 0x09;
/// Whether `raw` names a PacketType.
constexpr bool is_packet_type(std::uint8_t raw) noexcept {
  switch (static_cast<PacketType>(raw)) {
    case PacketType::data:
    case PacketType::eager:
    case PacketType::rts:
    case PacketType::rtr:
    case PacketType::ack:
    case PacketType::credit:
    case PacketType::driver_local:
      return true;
  }
  return false;
}
/// "eager", "rts", ...; "unknown" for a value that names no type (for logs).
std::string_view to_string(PacketType t) noexcept;

/// Frame flags; any other bit set is malformed (a new flag needs a version).
inline constexpr std::uint8_t flag_last_chunk = 0x10;   ///< data: the message's last chunk
inline constexpr std::uint8_t flag_ack_request = 0x40;  ///< eager/rts: answer with an ack
inline constexpr std::uint8_t known_flags = flag_last_chunk | flag_ack_request;

/// Two priorities, as in GM: replies travel high so they never wait behind requests.
inline constexpr std::uint8_t priority_count = 2;

/// Which upper layer the eager or rts packet is for (the core dispatches on it).
enum class Upper : std::uint8_t { none = 0, portals = 1, port = 2 };
inline constexpr std::uint8_t upper_limit = 3;

/// Starts every core packet. Ordering and flow control are per (gate,
/// priority): `sequence` counts the packets the sender sent on this gate at
/// this priority (wrapping), and `credit_return` gives back that many receive
/// slots of the same priority to the peer. Ports refine ordering to
/// (priority, source_port, destination_port), as GM requires.
struct FrameHeader {
  static constexpr std::size_t size = 24;

  PacketType type = PacketType::eager;
  std::uint8_t flags = 0;
  std::uint8_t priority = 0;
  Upper upper = Upper::none;
  /// eager: bytes of upper-layer header at the start of the payload (an
  /// upper layer may send a shorter header when the frame already carries
  /// some of its fields); 0 for the other types.
  std::uint8_t upper_length = 0;
  std::uint16_t credit_return = 0;
  std::uint32_t payload_length = 0;  ///< bytes after this header
  std::uint32_t sequence = 0;
  std::uint32_t source_endpoint = 0;  ///< the sender's rank
  std::uint16_t source_port = 0;
  std::uint16_t destination_port = 0;

  bool operator==(const FrameHeader&) const = default;
  static Result<FrameHeader> decode(std::span<const std::byte> in) noexcept;
};
Result<std::size_t> encode(const FrameHeader& h, std::span<std::byte> out) noexcept;
// (decode and encode_into, the hot halves, are inline at the end of this file.)

/// rts: asks the receiver to post a receive of total_length bytes.
struct RtsHeader {
  static constexpr std::size_t size = 16;
  std::uint64_t message_id = 0;  ///< the sender's id, echoed in rtr, data and ack
  std::uint64_t total_length = 0;
  bool operator==(const RtsHeader&) const = default;
  static Result<RtsHeader> decode(std::span<const std::byte> in) noexcept;
};
Result<std::size_t> encode(const RtsHeader& h, std::span<std::byte> out) noexcept;

/// rtr: the receiver is ready for [offset, offset + length) of the message.
/// rdv_data is what the receiving driver filled in (driver::Packet::rdv_data).
struct RtrHeader {
  static constexpr std::size_t size = 80;
  static constexpr std::size_t rdv_capacity = 48;
  std::uint64_t message_id = 0;
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  std::uint8_t rdv_len = 0;  ///< at most rdv_capacity; bytes beyond it are zero
  std::array<std::byte, rdv_capacity> rdv_data{};
  bool operator==(const RtrHeader&) const = default;
  static Result<RtrHeader> decode(std::span<const std::byte> in) noexcept;
};
Result<std::size_t> encode(const RtrHeader& h, std::span<std::byte> out) noexcept;

/// data: a rendezvous chunk carried on a small track; the bytes follow.
struct DataHeader {
  static constexpr std::size_t size = 16;
  std::uint64_t message_id = 0;
  std::uint64_t offset = 0;
  bool operator==(const DataHeader&) const = default;
  static Result<DataHeader> decode(std::span<const std::byte> in) noexcept;
};
Result<std::size_t> encode(const DataHeader& h, std::span<std::byte> out) noexcept;

/// How the receiver ended a message the sender asked an ack for.
enum class AckResult : std::uint8_t { ok = 0, rejected = 1, truncated = 2, canceled = 3 };
inline constexpr std::uint8_t ack_result_limit = 4;
std::string_view to_string(AckResult r) noexcept;

struct AckHeader {
  static constexpr std::size_t size = 16;
  std::uint64_t message_id = 0;
  AckResult result = AckResult::ok;
  bool operator==(const AckHeader&) const = default;
  static Result<AckHeader> decode(std::span<const std::byte> in) noexcept;
};
Result<std::size_t> encode(const AckHeader& h, std::span<std::byte> out) noexcept;

/// The seed 003 wrapper: a driver's own packet. Subtypes are the driver's
/// business (each gate instance has its own HandlerTable); `length` is the
/// body after this header and must equal the frame's payload_length - size.
struct DriverLocalHeader {
  static constexpr std::size_t size = 8;
  std::uint16_t subtype = 0;
  std::uint32_t length = 0;
  bool operator==(const DriverLocalHeader&) const = default;
  static Result<DriverLocalHeader> decode(std::span<const std::byte> in) noexcept;
};
Result<std::size_t> encode(const DriverLocalHeader& h, std::span<std::byte> out) noexcept;

/// Bytes before the body of a driver-local packet (frame plus wrapper).
inline constexpr std::size_t driver_local_prefix = FrameHeader::size + DriverLocalHeader::size;
/// Writes the frame and wrapper of a driver-local packet whose body of
/// `body_length` bytes the caller writes after them; other frame fields are
/// zero. Returns driver_local_prefix.
Result<std::size_t> encode_driver_local(std::uint16_t subtype, std::uint32_t body_length,
                                        std::span<std::byte> out) noexcept;

/// Smallest payload_length a frame of this type may have, and the largest
/// (fixed-size packets have both equal). Used by the frame decoder.
constexpr std::uint32_t min_payload(PacketType t) noexcept {
  switch (t) {
    case PacketType::data:
      return DataHeader::size;
    case PacketType::eager:
      return 0;
    case PacketType::rts:
      return RtsHeader::size;
    case PacketType::rtr:
      return RtrHeader::size;
    case PacketType::ack:
      return AckHeader::size;
    case PacketType::credit:
      return 0;
    case PacketType::driver_local:
      return DriverLocalHeader::size;
  }
  return 0;
}
constexpr std::uint32_t max_payload(PacketType t) noexcept {
  switch (t) {
    case PacketType::rtr:
    case PacketType::ack:
    case PacketType::credit:
      return min_payload(t);
    case PacketType::data:
    case PacketType::eager:
    case PacketType::rts:
    case PacketType::driver_local:
      return std::numeric_limits<std::uint32_t>::max();
  }
  return 0;
}

// ---- FrameHeader, inline ----------------------------------------------------
// Every packet of every small track is encoded and decoded here, so the
// frame codec is inline: out of line, each call returned its Result through
// the stack, and reading the status byte back as a word stalled the store
// forwarding on every send (seen in perf over core_bench).

namespace frame_layout {
// Frame layout (docs/wire.md keeps the same table).
inline constexpr std::size_t off_version = 0;
inline constexpr std::size_t off_type = 1;
inline constexpr std::size_t off_flags = 2;
inline constexpr std::size_t off_priority = 3;
inline constexpr std::size_t off_upper = 4;
inline constexpr std::size_t off_upper_length = 5;
inline constexpr std::size_t off_credit = 6;
inline constexpr std::size_t off_payload = 8;
inline constexpr std::size_t off_sequence = 12;
inline constexpr std::size_t off_source = 16;
inline constexpr std::size_t off_source_port = 20;
inline constexpr std::size_t off_destination_port = 22;
static_assert(off_destination_port + 2 == FrameHeader::size);

constexpr bool carries_upper(PacketType t) noexcept {
  return t == PacketType::eager || t == PacketType::rts;
}

/// The rules a frame obeys on both sides of the wire.
constexpr bool fields_valid(const FrameHeader& h) noexcept {
  if (!is_packet_type(static_cast<std::uint8_t>(h.type))) return false;
  if ((h.flags & ~known_flags) != 0) return false;
  if (h.priority >= priority_count) return false;
  if (static_cast<std::uint8_t>(h.upper) >= upper_limit) return false;
  if (!carries_upper(h.type) && h.upper != Upper::none) return false;
  if (h.upper_length != 0 &&
      (h.type != PacketType::eager || h.upper == Upper::none || h.upper_length > h.payload_length))
    return false;
  return h.payload_length >= min_payload(h.type) && h.payload_length <= max_payload(h.type);
}
}  // namespace frame_layout

/// The frame into exactly its size in bytes; false (nothing written) for a
/// field out of range. The checked encode() above is this with a size check;
/// the core's send paths call this one on their fixed-size prefix.
inline bool encode_into(const FrameHeader& h,
                        std::span<std::byte, FrameHeader::size> fixed) noexcept;

/// encode_into() without the check, for a sender whose every field is
/// in range by construction (the core's eager fast path: checked in debug
/// builds).
inline void write_frame(const FrameHeader& h,
                        std::span<std::byte, FrameHeader::size> fixed) noexcept {
  using namespace frame_layout;
  assert(fields_valid(h));
  const std::span<std::byte> out(fixed);
  store_u8(out, off_version, version);
  store_u8(out, off_type, static_cast<std::uint8_t>(h.type));
  store_u8(out, off_flags, h.flags);
  store_u8(out, off_priority, h.priority);
  store_u8(out, off_upper, static_cast<std::uint8_t>(h.upper));
  store_u8(out, off_upper_length, h.upper_length);
  store_u16(out, off_credit, h.credit_return);
  store_u32(out, off_payload, h.payload_length);
  store_u32(out, off_sequence, h.sequence);
  store_u32(out, off_source, h.source_endpoint);
  store_u16(out, off_source_port, h.source_port);
  store_u16(out, off_destination_port, h.destination_port);
}

inline bool encode_into(const FrameHeader& h,
                        std::span<std::byte, FrameHeader::size> fixed) noexcept {
  if (!frame_layout::fields_valid(h)) return false;
  write_frame(h, fixed);
  return true;
}

inline Result<FrameHeader> FrameHeader::decode(std::span<const std::byte> in) noexcept {
  using namespace frame_layout;
  // The version is checked before the length so that a peer of another
  // version whose frame happens to be shorter is still named as such.
  if (in.empty()) return Status::malformed;
  if (load_u8(in, off_version) != version) return Status::version_mismatch;
  if (in.size() < size) return Status::malformed;
  FrameHeader h;
  h.type = static_cast<PacketType>(load_u8(in, off_type));
  h.flags = load_u8(in, off_flags);
  h.priority = load_u8(in, off_priority);
  h.upper = static_cast<Upper>(load_u8(in, off_upper));
  h.upper_length = load_u8(in, off_upper_length);
  h.credit_return = load_u16(in, off_credit);
  h.payload_length = load_u32(in, off_payload);
  h.sequence = load_u32(in, off_sequence);
  h.source_endpoint = load_u32(in, off_source);
  h.source_port = load_u16(in, off_source_port);
  h.destination_port = load_u16(in, off_destination_port);
  if (!fields_valid(h)) return Status::malformed;
  return h;
}

}  // namespace pier::wire
