#include "wire/frame.hpp"

#include "wire/bytes.hpp"

#include <limits>

namespace pier::wire {

static_assert(FrameHeader::size == 24);
static_assert(RtsHeader::size == 16);
static_assert(RtrHeader::size == 32 + RtrHeader::rdv_capacity);
static_assert(DataHeader::size == 16);
static_assert(AckHeader::size == 16);
static_assert(DriverLocalHeader::size == 8);
static_assert(driver_local_prefix == 32);

std::string_view to_string(PacketType t) noexcept {
  switch (t) {
    case PacketType::data:
      return "data";
    case PacketType::eager:
      return "eager";
    case PacketType::rts:
      return "rts";
    case PacketType::rtr:
      return "rtr";
    case PacketType::ack:
      return "ack";
    case PacketType::credit:
      return "credit";
    case PacketType::driver_local:
      return "driver_local";
  }
  return "unknown";
}

std::string_view to_string(AckResult r) noexcept {
  switch (r) {
    case AckResult::ok:
      return "ok";
    case AckResult::rejected:
      return "rejected";
    case AckResult::truncated:
      return "truncated";
    case AckResult::canceled:
      return "canceled";
  }
  return "unknown";
}

// ---- FrameHeader -----------------------------------------------------------

Result<std::size_t> encode(const FrameHeader& h, std::span<std::byte> out) noexcept {
  if (out.size() < FrameHeader::size) return Status::invalid_argument;
  if (!encode_into(h, out.first<FrameHeader::size>())) return Status::invalid_argument;
  return FrameHeader::size;
}

// ---- RtsHeader -------------------------------------------------------------

Result<std::size_t> encode(const RtsHeader& h, std::span<std::byte> out) noexcept {
  if (out.size() < RtsHeader::size) return Status::invalid_argument;
  store_u64(out, 0, h.message_id);
  store_u64(out, 8, h.total_length);
  return RtsHeader::size;
}

Result<RtsHeader> RtsHeader::decode(std::span<const std::byte> in) noexcept {
  if (in.size() < size) return Status::malformed;
  return RtsHeader{load_u64(in, 0), load_u64(in, 8)};
}

// ---- RtrHeader -------------------------------------------------------------

namespace {
constexpr std::size_t rtr_off_rdv_len = 24;
constexpr std::size_t rtr_off_reserved = 25;
constexpr std::size_t rtr_reserved_len = 7;
constexpr std::size_t rtr_off_rdv_data = 32;
}  // namespace

Result<std::size_t> encode(const RtrHeader& h, std::span<std::byte> out) noexcept {
  if (out.size() < RtrHeader::size || h.rdv_len > RtrHeader::rdv_capacity)
    return Status::invalid_argument;
  // The offset is unchecked against the length on purpose: overflow of
  // offset + length is the receiver's to reject, against its own message.
  store_u64(out, 0, h.message_id);
  store_u64(out, 8, h.offset);
  store_u64(out, 16, h.length);
  store_u8(out, rtr_off_rdv_len, h.rdv_len);
  store_zero(out, rtr_off_reserved, rtr_reserved_len);
  // Bytes past rdv_len go out as zero whatever the caller left there, so no
  // stale memory crosses the wire.
  for (std::size_t i = 0; i < RtrHeader::rdv_capacity; ++i)
    out[rtr_off_rdv_data + i] = i < h.rdv_len ? h.rdv_data[i] : std::byte{0};
  return RtrHeader::size;
}

Result<RtrHeader> RtrHeader::decode(std::span<const std::byte> in) noexcept {
  if (in.size() < size) return Status::malformed;
  RtrHeader h;
  h.message_id = load_u64(in, 0);
  h.offset = load_u64(in, 8);
  h.length = load_u64(in, 16);
  h.rdv_len = load_u8(in, rtr_off_rdv_len);
  if (h.rdv_len > rdv_capacity) return Status::malformed;
  if (!all_zero(in, rtr_off_reserved, rtr_reserved_len)) return Status::malformed;
  if (!all_zero(in, rtr_off_rdv_data + h.rdv_len, rdv_capacity - h.rdv_len))
    return Status::malformed;
  for (std::size_t i = 0; i < h.rdv_len; ++i) h.rdv_data[i] = in[rtr_off_rdv_data + i];
  return h;
}

// ---- DataHeader ------------------------------------------------------------

Result<std::size_t> encode(const DataHeader& h, std::span<std::byte> out) noexcept {
  if (out.size() < DataHeader::size) return Status::invalid_argument;
  store_u64(out, 0, h.message_id);
  store_u64(out, 8, h.offset);
  return DataHeader::size;
}

Result<DataHeader> DataHeader::decode(std::span<const std::byte> in) noexcept {
  if (in.size() < size) return Status::malformed;
  return DataHeader{load_u64(in, 0), load_u64(in, 8)};
}

// ---- AckHeader -------------------------------------------------------------

Result<std::size_t> encode(const AckHeader& h, std::span<std::byte> out) noexcept {
  if (out.size() < AckHeader::size || static_cast<std::uint8_t>(h.result) >= ack_result_limit)
    return Status::invalid_argument;
  store_u64(out, 0, h.message_id);
  store_u8(out, 8, static_cast<std::uint8_t>(h.result));
  store_zero(out, 9, 7);
  return AckHeader::size;
}

Result<AckHeader> AckHeader::decode(std::span<const std::byte> in) noexcept {
  if (in.size() < size) return Status::malformed;
  const std::uint8_t result = load_u8(in, 8);
  if (result >= ack_result_limit || !all_zero(in, 9, 7)) return Status::malformed;
  return AckHeader{load_u64(in, 0), static_cast<AckResult>(result)};
}

// ---- DriverLocalHeader -----------------------------------------------------

Result<std::size_t> encode(const DriverLocalHeader& h, std::span<std::byte> out) noexcept {
  if (out.size() < DriverLocalHeader::size) return Status::invalid_argument;
  store_u16(out, 0, h.subtype);
  store_zero(out, 2, 2);
  store_u32(out, 4, h.length);
  return DriverLocalHeader::size;
}

Result<DriverLocalHeader> DriverLocalHeader::decode(std::span<const std::byte> in) noexcept {
  if (in.size() < size) return Status::malformed;
  if (!all_zero(in, 2, 2)) return Status::malformed;
  return DriverLocalHeader{load_u16(in, 0), load_u32(in, 4)};
}

Result<std::size_t> encode_driver_local(std::uint16_t subtype, std::uint32_t body_length,
                                        std::span<std::byte> out) noexcept {
  if (out.size() < driver_local_prefix ||
      body_length > std::numeric_limits<std::uint32_t>::max() - DriverLocalHeader::size)
    return Status::invalid_argument;
  FrameHeader frame;
  frame.type = PacketType::driver_local;
  frame.payload_length = body_length + static_cast<std::uint32_t>(DriverLocalHeader::size);
  if (Result<std::size_t> n = encode(frame, out); !n) return n.status();
  Result<std::size_t> n =
      encode(DriverLocalHeader{subtype, body_length}, out.subspan(FrameHeader::size));
  if (!n) return n.status();
  return driver_local_prefix;
}

}  // namespace pier::wire
