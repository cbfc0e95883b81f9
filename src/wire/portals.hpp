// pier wire: the Portals 4 LIB header (the seeds' ptl_hdr_t), carried as the
// upper-layer header of eager and rts packets (FrameHeader::upper = portals).
// Enumerations here are wire numbers: the LIB maps them to and from the
// PTL_* constants of portals4.h, so the C header may change without breaking
// the wire. Layout table in docs/wire.md.
#pragma once

#include <pier/result.hpp>
#include <pier/status.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace pier::wire {

/// What the packet asks of, or answers to, the target LIB. Requests run
/// initiator to target; reply and the acks run back.
enum class PortalsOp : std::uint8_t {
  put = 1,
  get = 2,
  atomic = 3,
  fetch_atomic = 4,
  swap = 5,
  reply = 6,   ///< data of a get, fetch_atomic or swap
  ack = 7,     ///< full ack: the initiator gets PTL_EVENT_ACK with mlength
  ct_ack = 8,  ///< counting ack: only a counting event at the initiator
  oc_ack = 9,  ///< operation-completed ack (PTL_OC_ACK_REQ)
};
inline constexpr std::uint8_t portals_op_limit = 10;

/// The ack the initiator asked for (PTL_NO_ACK_REQ, PTL_ACK_REQ, ...).
enum class AckRequest : std::uint8_t { none = 0, ack = 1, ct_ack = 2, oc_ack = 3 };
inline constexpr std::uint8_t ack_request_limit = 4;

enum class Matching : std::uint8_t { matching = 0, non_matching = 1 };
/// Logical: the nid fields hold ranks and the pid fields are zero.
enum class Addressing : std::uint8_t { logical = 0, physical = 1 };

/// ptl_op_t in wire numbering; `none` for operations that are not atomic.
enum class AtomicOp : std::uint8_t {
  none = 0,
  min = 1,
  max = 2,
  sum = 3,
  prod = 4,
  lor = 5,
  land = 6,
  bor = 7,
  band = 8,
  lxor = 9,
  bxor = 10,
  swap = 11,
  cswap = 12,
  cswap_ne = 13,
  cswap_le = 14,
  cswap_lt = 15,
  cswap_ge = 16,
  cswap_gt = 17,
  mswap = 18,
};
inline constexpr std::uint8_t atomic_op_limit = 19;

/// ptl_datatype_t in wire numbering.
enum class AtomicType : std::uint8_t {
  none = 0,
  int8 = 1,
  uint8 = 2,
  int16 = 3,
  uint16 = 4,
  int32 = 5,
  uint32 = 6,
  float32 = 7,  // ptl_datatype_t + 1: PTL_FLOAT comes before PTL_INT64_T
  int64 = 8,
  uint64 = 9,
  float64 = 10,
  float_complex = 11,
  double_complex = 12,
  long_double = 13,
  long_double_complex = 14,
};
inline constexpr std::uint8_t atomic_type_limit = 15;

/// ni_fail_type of the event the answer produces at the initiator.
enum class NiFail : std::uint8_t {
  ok = 0,
  undeliverable = 1,
  dropped = 2,
  pt_disabled = 3,
  perm_violation = 4,
  op_violation = 5,
  no_match = 6,
  segv = 7,
};
inline constexpr std::uint8_t ni_fail_limit = 8;

/// Largest swap operand (the compare value or mask): one long double complex.
inline constexpr std::uint32_t max_operand_length = 32;

struct PortalsHeader {
  static constexpr std::size_t size = 88;
  /// The compact form: a header whose hdr_data, remote_offset, mlength and
  /// operand_length are all 0 (most requests) leaves them out, so an 8-byte
  /// put crosses shm in two cache lines instead of three. The length of the
  /// upper header tells the forms apart.
  static constexpr std::size_t compact_size = 56;

  PortalsOp op = PortalsOp::put;
  AckRequest ack_request = AckRequest::none;
  Matching matching = Matching::matching;
  Addressing addressing = Addressing::logical;
  AtomicOp atomic_op = AtomicOp::none;        ///< atomic, fetch_atomic, swap only
  AtomicType atomic_type = AtomicType::none;  ///< atomic, fetch_atomic, swap only
  NiFail ni_fail = NiFail::ok;                ///< answers only
  std::uint32_t initiator_nid = 0;
  std::uint32_t initiator_pid = 0;
  std::uint32_t target_nid = 0;
  std::uint32_t target_pid = 0;
  std::uint32_t uid = 0;
  std::uint32_t pt_index = 0;
  std::uint64_t match_bits = 0;
  std::uint64_t hdr_data = 0;
  std::uint64_t remote_offset = 0;
  std::uint64_t length = 0;   ///< requested length
  std::uint64_t mlength = 0;  ///< manipulated length, answers only
  /// The initiator's id for the operation; answers echo it so the initiator
  /// finds its message state without a search.
  std::uint64_t cookie = 0;
  /// swap: payload bytes of the operand, which precede the data (cswap and
  /// mswap need one; plain swap sends 0).
  std::uint32_t operand_length = 0;

  bool operator==(const PortalsHeader&) const = default;
  static Result<PortalsHeader> decode(std::span<const std::byte> in) noexcept;
  /// Exactly compact_size bytes; the fields it leaves out are 0.
  static Result<PortalsHeader> decode_compact(std::span<const std::byte> in) noexcept;
  /// Whether encode_compact() can carry `h`.
  bool fits_compact() const noexcept {
    return hdr_data == 0 && remote_offset == 0 && mlength == 0 && operand_length == 0;
  }
  /// The tiny forms carry the common small requests and answers in one
  /// cache line over shm with the frame and shm's record header (an 8-byte
  /// put or reply, a get, an ack), where the compact form takes two and an
  /// answer's full form three. They leave out what the packet already says:
  /// a put's length (the data it carries), a physical initiator (the sending
  /// rank and its node), the target of a request (the receiver) and a put's
  /// cookie (a put without an ack is never answered). Each starts with a
  /// form byte that says which it is (docs/wire.md):
  ///   put (16 bytes): no ack request, header data or remote offset;
  ///   get (24 bytes): the same, with a cookie and length below 2^32;
  ///   answer (16 bytes): nothing of the initiator or target, the list in
  ///   hdr_data (0 or 1), mlength equal to length, cookie, mlength and
  ///   offset below 2^32.
  /// All name portal index 255 at most; requests on a logical NI an
  /// initiator rank 65535 at most.
  static constexpr std::size_t tiny_size = 16;
  static constexpr std::size_t tiny_get_size = 24;
  /// Exactly tiny_size or tiny_get_size bytes, as the form byte says;
  /// `data_length` is the data the packet carries (a put's length). A
  /// physical request comes back with its initiator 0, for the receiver to
  /// fill in from the sending rank.
  static Result<PortalsHeader> decode_tiny(std::span<const std::byte> in,
                                           std::uint64_t data_length) noexcept;
  /// The size of the tiny form that carries `h`, or 0 when none does.
  std::size_t tiny_length() const noexcept {
    constexpr std::uint64_t u32_max = 0xffffffffu;
    if (atomic_op != AtomicOp::none || atomic_type != AtomicType::none || operand_length != 0 ||
        pt_index > 0xff || ack_request != AckRequest::none)
      return 0;
    switch (op) {
      case PortalsOp::put:
      case PortalsOp::get:
        if (hdr_data != 0 || remote_offset != 0 || mlength != 0 || ni_fail != NiFail::ok) return 0;
        if (addressing == Addressing::logical &&
            (initiator_nid > 0xffff || initiator_pid != 0 || target_pid != 0))
          return 0;
        if (op == PortalsOp::put) return tiny_size;
        return cookie <= u32_max && length <= u32_max ? tiny_get_size : 0;
      case PortalsOp::reply:
      case PortalsOp::ack:
      case PortalsOp::ct_ack:
      case PortalsOp::oc_ack:
        return initiator_nid == 0 && initiator_pid == 0 && target_nid == 0 && target_pid == 0 &&
                       uid == 0 && match_bits == 0 && hdr_data <= 1 && cookie <= u32_max &&
                       length == mlength && mlength <= u32_max && remote_offset <= u32_max
                   ? tiny_size
                   : 0;
      default:
        return 0;
    }
  }
  bool fits_tiny() const noexcept { return tiny_length() != 0; }
};
Result<std::size_t> encode(const PortalsHeader& h, std::span<std::byte> out) noexcept;
/// compact_size bytes; invalid_argument when !h.fits_compact() or a field is
/// out of range.
Result<std::size_t> encode_compact(const PortalsHeader& h, std::span<std::byte> out) noexcept;
/// encode_compact() without its checks (made in debug builds only), for a
/// sender that built `h` from values it had checked (the LIB: every
/// request and answer it sends fits and is valid by construction). The
/// receiver checks everything again, as it must.
std::size_t write_compact(const PortalsHeader& h,
                          std::span<std::byte, PortalsHeader::compact_size> out) noexcept;

/// h.tiny_length() bytes; invalid_argument when !h.fits_tiny() or a field
/// is out of range. The initiator of a physical request is not written.
Result<std::size_t> encode_tiny(const PortalsHeader& h, std::span<std::byte> out) noexcept;
/// encode_tiny() without its checks, as write_compact(); `out` has room for
/// the longest tiny form.
std::size_t write_tiny(const PortalsHeader& h,
                       std::span<std::byte, PortalsHeader::tiny_get_size> out) noexcept;

/// Names for logs; "unknown" for a value outside the enumeration.
std::string_view to_string(PortalsOp op) noexcept;
std::string_view to_string(NiFail f) noexcept;

// Inline: both ends of every message ask these several times, and as
// calls into portals.cpp they cost a small put about 30 instructions.
/// True for reply, ack, ct_ack and oc_ack.
constexpr bool is_answer(PortalsOp op) noexcept {
  return op == PortalsOp::reply || op == PortalsOp::ack || op == PortalsOp::ct_ack ||
         op == PortalsOp::oc_ack;
}
/// True for atomic, fetch_atomic and swap.
constexpr bool is_atomic(PortalsOp op) noexcept {
  return op == PortalsOp::atomic || op == PortalsOp::fetch_atomic || op == PortalsOp::swap;
}

}  // namespace pier::wire
