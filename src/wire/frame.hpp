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

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace pier::wire {

/// The protocol version every header of this file and of portals.hpp and
/// port.hpp carries in its first byte. Bumped on any incompatible change.
inline constexpr std::uint8_t version = 1;

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
bool is_packet_type(std::uint8_t raw) noexcept;
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
std::uint32_t min_payload(PacketType t) noexcept;
std::uint32_t max_payload(PacketType t) noexcept;

}  // namespace pier::wire
