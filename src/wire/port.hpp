// pier wire: the header of the GM-style port layer (seed 004), carried as the
// upper-layer header of eager and rts packets (FrameHeader::upper = port).
// Layout table in docs/wire.md.
#pragma once

#include <pier/result.hpp>
#include <pier/status.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace pier::wire {

// Every op (send, put, get_request) a receiving port takes from a stream
// (priority, sending port, receiving port) is answered exactly once, in
// arrival order: by ack, nack or get_reply. resume and drop travel from the
// sender after a reported failure; the receiver acks them like an op.
enum class PortKind : std::uint8_t {
  send = 1,         ///< into a receive buffer of exactly (size_class, priority)
  put = 2,          ///< directed send: written at remote_address
  get_request = 3,  ///< read `length` bytes at remote_address, answer with get_reply
  get_reply = 4,    ///< the data of a get; cookie names the request
  ack = 5,          ///< answers the next `tag` ops of the stream: done (1 <= tag < 2^32)
  nack = 6,         ///< answers the stream's next op: failed with pier::Status `tag`
  resume = 7,       ///< the sender enables the stream again after a failure
  drop = 8,         ///< as resume, and what the stream holds is answered "dropped"
};
inline constexpr std::uint8_t port_kind_limit = 9;
/// "send", "put", ...; "unknown" for a value that names no kind (for logs).
std::string_view to_string(PortKind k) noexcept;

/// GM sizes: a message of size s is at most 2^s - 8 bytes, so 3 is the
/// smallest useful size and 32 covers the largest message, 2^31 - 1 bytes.
inline constexpr std::uint8_t min_size_class = 3;
inline constexpr std::uint8_t max_size_class = 32;
inline constexpr std::uint32_t max_port_message = 0x7fff'ffff;

/// Largest length a message of size class `s` may have (gm_max_length_for_size).
constexpr std::uint64_t max_length_for_size(std::uint8_t s) noexcept {
  return s < min_size_class || s > max_size_class ? 0 : (std::uint64_t{1} << s) - 8;
}

/// The fields of a port header that the core's frame already carries.
struct PortRouting {
  std::uint8_t priority = 0;
  std::uint16_t sending_port = 0;
  std::uint16_t receiving_port = 0;
  std::uint64_t length = 0;  ///< the message's payload bytes
};

struct PortHeader {
  static constexpr std::size_t size = 40;
  /// A send (eager or rts): the frame carries its routing, so its header
  /// shrinks to this and an 8-byte send fits one 64-byte shm line.
  static constexpr std::size_t compact_size = 16;

  PortKind kind = PortKind::send;
  std::uint8_t priority = 0;    ///< 0 low, 1 high
  std::uint8_t size_class = 0;  ///< send only; 0 for the other kinds
  std::uint16_t sending_port = 0;
  std::uint16_t receiving_port = 0;
  std::uint32_t length = 0;  ///< at most max_port_message
  /// The incarnation of the sending port (a number opened again gets a new
  /// one); 0 from a node answering for a port that is not open.
  std::uint16_t epoch = 0;
  /// The incarnation of the receiving port that an answer (or a send's
  /// piggybacked acks) is for: an answer to a closed port is not taken by
  /// the port opened next with its number. 0 for ops and controls.
  std::uint16_t peer_epoch = 0;
  /// send: acks the sender owes the receiver's stream back (piggybacked);
  /// ack: how many ops it answers; nack: the failure's pier::Status.
  std::uint64_t tag = 0;
  std::uint64_t remote_address = 0;  ///< put and get_request only
  std::uint64_t cookie = 0;          ///< get_request, echoed by get_reply

  bool operator==(const PortHeader&) const = default;
  static Result<PortHeader> decode(std::span<const std::byte> in) noexcept;
  /// The compact form (a send only); the routing fields come from `r`.
  static Result<PortHeader> decode_compact(std::span<const std::byte> in,
                                           const PortRouting& r) noexcept;
};
Result<std::size_t> encode(const PortHeader& h, std::span<std::byte> out) noexcept;
/// A send in compact_size bytes; invalid_argument for another kind, a field
/// out of range or a short buffer.
Result<std::size_t> encode_compact(const PortHeader& h, std::span<std::byte> out) noexcept;
/// encode_compact() of a send from its own fields, without the checks
/// (made in debug builds only): for a sender whose fields were checked when
/// the op started (a port's send). The receiver checks everything again.
void write_compact_send(std::span<std::byte, PortHeader::compact_size> out, std::uint8_t size_class,
                        std::uint16_t epoch, std::uint16_t peer_epoch, std::uint64_t tag) noexcept;

}  // namespace pier::wire
