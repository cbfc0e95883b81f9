#include "wire/portals.hpp"

#include <cassert>

#include "wire/bytes.hpp"
#include "wire/frame.hpp"

namespace pier::wire {

namespace {

constexpr std::size_t off_version = 0;
constexpr std::size_t off_op = 1;
constexpr std::size_t off_ack_request = 2;
constexpr std::size_t off_matching = 3;
constexpr std::size_t off_addressing = 4;
constexpr std::size_t off_atomic_op = 5;
constexpr std::size_t off_atomic_type = 6;
constexpr std::size_t off_ni_fail = 7;
constexpr std::size_t off_initiator_nid = 8;
constexpr std::size_t off_initiator_pid = 12;
constexpr std::size_t off_target_nid = 16;
constexpr std::size_t off_target_pid = 20;
constexpr std::size_t off_uid = 24;
constexpr std::size_t off_pt_index = 28;
constexpr std::size_t off_match_bits = 32;
constexpr std::size_t off_hdr_data = 40;
constexpr std::size_t off_remote_offset = 48;
constexpr std::size_t off_length = 56;
constexpr std::size_t off_mlength = 64;
constexpr std::size_t off_cookie = 72;
constexpr std::size_t off_operand_length = 80;
constexpr std::size_t off_reserved = 84;
constexpr std::size_t reserved_len = 4;
static_assert(off_reserved + reserved_len == PortalsHeader::size);
// The compact form: the first 40 bytes as above (up to match_bits), then
// length and cookie.
constexpr std::size_t compact_off_length = 40;
constexpr std::size_t compact_off_cookie = 48;
static_assert(compact_off_cookie + 8 == PortalsHeader::compact_size);
static_assert(off_match_bits + 8 == compact_off_length);
static_assert(PortalsHeader::size % 8 == 0, "keeps the payload after it 8-byte aligned");
// The tiny forms. The form byte: bit 0 non-matching, bit 1 physical, bits
// 2-3 the kind, bit 4 the overflow list (answers only), bits 5-7 zero.
constexpr std::uint8_t tiny_non_matching = 1;
constexpr std::uint8_t tiny_physical = 2;
constexpr unsigned tiny_kind_shift = 2;
constexpr std::uint8_t tiny_kind_mask = 3;
constexpr std::uint8_t tiny_overflow = 16;
constexpr std::uint8_t tiny_unused_bits = 0xe0;
enum TinyKind : std::uint8_t { tiny_put = 0, tiny_get = 1, tiny_answer = 2 };
constexpr std::size_t tiny_off_form = 0;
// put and get: pt_index, the logical initiator (0 when physical), uid,
// match_bits; a get then its cookie and length.
constexpr std::size_t tiny_off_pt_index = 1;
constexpr std::size_t tiny_off_initiator = 2;
constexpr std::size_t tiny_off_uid = 4;
constexpr std::size_t tiny_off_match_bits = 8;
constexpr std::size_t tiny_off_get_cookie = 16;
constexpr std::size_t tiny_off_get_length = 20;
// answer: op, ni_fail, pt_index, cookie, mlength, remote_offset.
constexpr std::size_t tiny_off_answer_op = 1;
constexpr std::size_t tiny_off_answer_ni_fail = 2;
constexpr std::size_t tiny_off_answer_pt_index = 3;
constexpr std::size_t tiny_off_answer_cookie = 4;
constexpr std::size_t tiny_off_answer_mlength = 8;
constexpr std::size_t tiny_off_answer_offset = 12;
static_assert(tiny_off_match_bits + 8 == PortalsHeader::tiny_size);
static_assert(tiny_off_get_length + 4 == PortalsHeader::tiny_get_size);
static_assert(tiny_off_answer_offset + 4 == PortalsHeader::tiny_size);
static_assert(PortalsHeader::tiny_size % 8 == 0 && PortalsHeader::tiny_get_size % 8 == 0,
              "keeps the payload after it 8-byte aligned");

bool in_range(AtomicOp op, AtomicOp lo, AtomicOp hi) noexcept {
  return static_cast<std::uint8_t>(op) >= static_cast<std::uint8_t>(lo) &&
         static_cast<std::uint8_t>(op) <= static_cast<std::uint8_t>(hi);
}

/// The atomic fields must name an operation this op can carry, and be
/// absent (none) everywhere else, so no byte is ever ignored on receive.
bool atomic_fields_valid(const PortalsHeader& h) noexcept {
  const auto op = static_cast<std::uint8_t>(h.atomic_op);
  const auto type = static_cast<std::uint8_t>(h.atomic_type);
  if (op >= atomic_op_limit || type >= atomic_type_limit) return false;
  switch (h.op) {
    case PortalsOp::atomic:
    case PortalsOp::fetch_atomic:
      return h.atomic_type != AtomicType::none &&
             in_range(h.atomic_op, AtomicOp::min, AtomicOp::bxor) && h.operand_length == 0;
    case PortalsOp::swap:
      // Plain swap needs no operand; the compare and mask forms need one.
      return h.atomic_type != AtomicType::none &&
             in_range(h.atomic_op, AtomicOp::swap, AtomicOp::mswap) &&
             h.operand_length <= max_operand_length &&
             (h.atomic_op == AtomicOp::swap) == (h.operand_length == 0);
    case PortalsOp::put:
    case PortalsOp::get:
    case PortalsOp::reply:
    case PortalsOp::ack:
    case PortalsOp::ct_ack:
    case PortalsOp::oc_ack:
      return h.atomic_op == AtomicOp::none && h.atomic_type == AtomicType::none &&
             h.operand_length == 0;
  }
  return false;
}

bool fields_valid(const PortalsHeader& h) noexcept {
  const auto op = static_cast<std::uint8_t>(h.op);
  if (op == 0 || op >= portals_op_limit) return false;
  if (static_cast<std::uint8_t>(h.ack_request) >= ack_request_limit) return false;
  // Only put and atomic take an ack request (PtlPut, PtlAtomic).
  if (h.ack_request != AckRequest::none && h.op != PortalsOp::put && h.op != PortalsOp::atomic)
    return false;
  if (static_cast<std::uint8_t>(h.matching) > 1 || static_cast<std::uint8_t>(h.addressing) > 1)
    return false;
  if (h.addressing == Addressing::logical && (h.initiator_pid != 0 || h.target_pid != 0))
    return false;
  if (static_cast<std::uint8_t>(h.ni_fail) >= ni_fail_limit) return false;
  if (is_answer(h.op)) {
    if (h.mlength > h.length) return false;
  } else if (h.ni_fail != NiFail::ok || h.mlength != 0) {
    return false;
  }
  return atomic_fields_valid(h);
}

}  // namespace

std::string_view to_string(PortalsOp op) noexcept {
  switch (op) {
    case PortalsOp::put:
      return "put";
    case PortalsOp::get:
      return "get";
    case PortalsOp::atomic:
      return "atomic";
    case PortalsOp::fetch_atomic:
      return "fetch_atomic";
    case PortalsOp::swap:
      return "swap";
    case PortalsOp::reply:
      return "reply";
    case PortalsOp::ack:
      return "ack";
    case PortalsOp::ct_ack:
      return "ct_ack";
    case PortalsOp::oc_ack:
      return "oc_ack";
  }
  return "unknown";
}

std::string_view to_string(NiFail f) noexcept {
  switch (f) {
    case NiFail::ok:
      return "ok";
    case NiFail::undeliverable:
      return "undeliverable";
    case NiFail::dropped:
      return "dropped";
    case NiFail::pt_disabled:
      return "pt_disabled";
    case NiFail::perm_violation:
      return "perm_violation";
    case NiFail::op_violation:
      return "op_violation";
    case NiFail::no_match:
      return "no_match";
    case NiFail::segv:
      return "segv";
  }
  return "unknown";
}

namespace {

/// The fields both forms carry at the same offsets.
void store_common(const PortalsHeader& h, std::span<std::byte> out) noexcept {
  store_u8(out, off_version, version);
  store_u8(out, off_op, static_cast<std::uint8_t>(h.op));
  store_u8(out, off_ack_request, static_cast<std::uint8_t>(h.ack_request));
  store_u8(out, off_matching, static_cast<std::uint8_t>(h.matching));
  store_u8(out, off_addressing, static_cast<std::uint8_t>(h.addressing));
  store_u8(out, off_atomic_op, static_cast<std::uint8_t>(h.atomic_op));
  store_u8(out, off_atomic_type, static_cast<std::uint8_t>(h.atomic_type));
  store_u8(out, off_ni_fail, static_cast<std::uint8_t>(h.ni_fail));
  store_u32(out, off_initiator_nid, h.initiator_nid);
  store_u32(out, off_initiator_pid, h.initiator_pid);
  store_u32(out, off_target_nid, h.target_nid);
  store_u32(out, off_target_pid, h.target_pid);
  store_u32(out, off_uid, h.uid);
  store_u32(out, off_pt_index, h.pt_index);
  store_u64(out, off_match_bits, h.match_bits);
}

void load_common(std::span<const std::byte> in, PortalsHeader& h) noexcept {
  h.op = static_cast<PortalsOp>(load_u8(in, off_op));
  h.ack_request = static_cast<AckRequest>(load_u8(in, off_ack_request));
  h.matching = static_cast<Matching>(load_u8(in, off_matching));
  h.addressing = static_cast<Addressing>(load_u8(in, off_addressing));
  h.atomic_op = static_cast<AtomicOp>(load_u8(in, off_atomic_op));
  h.atomic_type = static_cast<AtomicType>(load_u8(in, off_atomic_type));
  h.ni_fail = static_cast<NiFail>(load_u8(in, off_ni_fail));
  h.initiator_nid = load_u32(in, off_initiator_nid);
  h.initiator_pid = load_u32(in, off_initiator_pid);
  h.target_nid = load_u32(in, off_target_nid);
  h.target_pid = load_u32(in, off_target_pid);
  h.uid = load_u32(in, off_uid);
  h.pt_index = load_u32(in, off_pt_index);
  h.match_bits = load_u64(in, off_match_bits);
}

}  // namespace

Result<std::size_t> encode(const PortalsHeader& h, std::span<std::byte> out) noexcept {
  if (out.size() < PortalsHeader::size || !fields_valid(h)) return Status::invalid_argument;
  store_common(h, out);
  store_u64(out, off_hdr_data, h.hdr_data);
  store_u64(out, off_remote_offset, h.remote_offset);
  store_u64(out, off_length, h.length);
  store_u64(out, off_mlength, h.mlength);
  store_u64(out, off_cookie, h.cookie);
  store_u32(out, off_operand_length, h.operand_length);
  store_zero(out, off_reserved, reserved_len);
  return PortalsHeader::size;
}

Result<PortalsHeader> PortalsHeader::decode(std::span<const std::byte> in) noexcept {
  if (in.empty()) return Status::malformed;
  if (load_u8(in, off_version) != version) return Status::version_mismatch;
  if (in.size() < size || !all_zero(in, off_reserved, reserved_len)) return Status::malformed;
  PortalsHeader h;
  load_common(in, h);
  h.hdr_data = load_u64(in, off_hdr_data);
  h.remote_offset = load_u64(in, off_remote_offset);
  h.length = load_u64(in, off_length);
  h.mlength = load_u64(in, off_mlength);
  h.cookie = load_u64(in, off_cookie);
  h.operand_length = load_u32(in, off_operand_length);
  if (!fields_valid(h)) return Status::malformed;
  return h;
}

Result<std::size_t> encode_compact(const PortalsHeader& h, std::span<std::byte> out) noexcept {
  if (out.size() < PortalsHeader::compact_size || !h.fits_compact() || !fields_valid(h))
    return Status::invalid_argument;
  store_common(h, out);
  store_u64(out, compact_off_length, h.length);
  store_u64(out, compact_off_cookie, h.cookie);
  return PortalsHeader::compact_size;
}

std::size_t write_compact(const PortalsHeader& h,
                          std::span<std::byte, PortalsHeader::compact_size> fixed) noexcept {
  assert(h.fits_compact() && fields_valid(h));
  const std::span<std::byte> out(fixed);
  store_common(h, out);
  store_u64(out, compact_off_length, h.length);
  store_u64(out, compact_off_cookie, h.cookie);
  return PortalsHeader::compact_size;
}

Result<PortalsHeader> PortalsHeader::decode_compact(std::span<const std::byte> in) noexcept {
  if (in.empty()) return Status::malformed;
  if (load_u8(in, off_version) != version) return Status::version_mismatch;
  if (in.size() != compact_size) return Status::malformed;
  PortalsHeader h;
  load_common(in, h);
  h.length = load_u64(in, compact_off_length);
  h.cookie = load_u64(in, compact_off_cookie);
  if (!fields_valid(h)) return Status::malformed;
  return h;
}

namespace {
/// Writes the tiny form of `h` (h.tiny_length() > 0); returns its size.
std::size_t store_tiny(const PortalsHeader& h, std::span<std::byte> out) noexcept {
  const bool physical = h.addressing == Addressing::physical;
  const bool answer = is_answer(h.op);
  const TinyKind kind = answer ? tiny_answer : h.op == PortalsOp::get ? tiny_get : tiny_put;
  store_u8(
      out, tiny_off_form,
      static_cast<std::uint8_t>((h.matching == Matching::non_matching ? tiny_non_matching : 0) |
                                (physical ? tiny_physical : 0) | (kind << tiny_kind_shift) |
                                (answer && h.hdr_data != 0 ? tiny_overflow : 0)));
  if (answer) {
    store_u8(out, tiny_off_answer_op, static_cast<std::uint8_t>(h.op));
    store_u8(out, tiny_off_answer_ni_fail, static_cast<std::uint8_t>(h.ni_fail));
    store_u8(out, tiny_off_answer_pt_index, static_cast<std::uint8_t>(h.pt_index));
    store_u32(out, tiny_off_answer_cookie, static_cast<std::uint32_t>(h.cookie));
    store_u32(out, tiny_off_answer_mlength, static_cast<std::uint32_t>(h.mlength));
    store_u32(out, tiny_off_answer_offset, static_cast<std::uint32_t>(h.remote_offset));
    return PortalsHeader::tiny_size;
  }
  store_u8(out, tiny_off_pt_index, static_cast<std::uint8_t>(h.pt_index));
  store_u16(out, tiny_off_initiator,
            physical ? std::uint16_t{0} : static_cast<std::uint16_t>(h.initiator_nid));
  store_u32(out, tiny_off_uid, h.uid);
  store_u64(out, tiny_off_match_bits, h.match_bits);
  if (kind == tiny_put) return PortalsHeader::tiny_size;
  store_u32(out, tiny_off_get_cookie, static_cast<std::uint32_t>(h.cookie));
  store_u32(out, tiny_off_get_length, static_cast<std::uint32_t>(h.length));
  return PortalsHeader::tiny_get_size;
}
}  // namespace

Result<std::size_t> encode_tiny(const PortalsHeader& h, std::span<std::byte> out) noexcept {
  const std::size_t n = h.tiny_length();
  if (n == 0 || out.size() < n || !fields_valid(h)) return Status::invalid_argument;
  return store_tiny(h, out);
}

std::size_t write_tiny(const PortalsHeader& h,
                       std::span<std::byte, PortalsHeader::tiny_get_size> out) noexcept {
  assert(h.fits_tiny() && fields_valid(h));
  return store_tiny(h, std::span<std::byte>(out));
}

Result<PortalsHeader> PortalsHeader::decode_tiny(std::span<const std::byte> in,
                                                 std::uint64_t data_length) noexcept {
  if (in.size() != tiny_size && in.size() != tiny_get_size) return Status::malformed;
  const std::uint8_t form = load_u8(in, tiny_off_form);
  const auto kind = static_cast<std::uint8_t>((form >> tiny_kind_shift) & tiny_kind_mask);
  if ((form & tiny_unused_bits) != 0 || kind > tiny_answer ||
      in.size() != (kind == tiny_get ? tiny_get_size : tiny_size) ||
      ((form & tiny_overflow) != 0 && kind != tiny_answer))
    return Status::malformed;
  PortalsHeader h;
  h.matching = (form & tiny_non_matching) ? Matching::non_matching : Matching::matching;
  h.addressing = (form & tiny_physical) ? Addressing::physical : Addressing::logical;
  if (kind == tiny_answer) {
    h.op = static_cast<PortalsOp>(load_u8(in, tiny_off_answer_op));
    h.ni_fail = static_cast<NiFail>(load_u8(in, tiny_off_answer_ni_fail));
    if (!is_answer(h.op) || static_cast<std::uint8_t>(h.ni_fail) >= ni_fail_limit)
      return Status::malformed;
    h.pt_index = load_u8(in, tiny_off_answer_pt_index);
    h.cookie = load_u32(in, tiny_off_answer_cookie);
    h.mlength = load_u32(in, tiny_off_answer_mlength);
    h.length = h.mlength;
    h.remote_offset = load_u32(in, tiny_off_answer_offset);
    h.hdr_data = (form & tiny_overflow) ? 1 : 0;
    return h;
  }
  h.op = kind == tiny_get ? PortalsOp::get : PortalsOp::put;
  h.pt_index = load_u8(in, tiny_off_pt_index);
  h.initiator_nid = load_u16(in, tiny_off_initiator);
  // A physical initiator is the sending rank's: a value here would be one
  // the receiver ignores, so it is refused instead.
  if (h.addressing == Addressing::physical && h.initiator_nid != 0) return Status::malformed;
  h.uid = load_u32(in, tiny_off_uid);
  h.match_bits = load_u64(in, tiny_off_match_bits);
  if (kind == tiny_put) {
    h.length = data_length;
  } else {
    h.cookie = load_u32(in, tiny_off_get_cookie);
    h.length = load_u32(in, tiny_off_get_length);
  }
  return h;
}

}  // namespace pier::wire
