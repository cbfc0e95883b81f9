// pier::port: the answers and controls that travel in get_reply headers.
//
// wire::PortKind has no kind for acknowledgements or for the resume/drop
// controls of the fault-tolerance extension, so until src/wire grows one
// they ride in a get_reply whose cookie has bit 63 set (a real get reply
// carries an op handle, below 2^32):
//   bit 63      1: control
//   bits 56-59  code: ack, nack, resume, drop
//   bits 48-55  nack: the pier::Status that failed the op
//   bits 0-31   ack: how many ops it answers
// Answers are positional: a receiving port answers every op of a stream
// (priority, sending port, receiving port) exactly once, in arrival order,
// and the sender matches them to its in-flight FIFO.
#pragma once

#include <pier/status.hpp>

#include <cstdint>
#include <optional>

namespace pier::port {

enum class Control : std::uint8_t { ack = 1, nack = 2, resume = 3, drop = 4 };

inline constexpr std::uint64_t control_bit = std::uint64_t{1} << 63;

constexpr std::uint64_t encode_control(Control c, Status s, std::uint32_t count) noexcept {
  return control_bit | (std::uint64_t{static_cast<std::uint8_t>(c)} << 56) |
         (std::uint64_t{static_cast<std::uint8_t>(s)} << 48) | count;
}

struct DecodedControl {
  Control code;
  Status status;
  std::uint32_t count;
};

/// nullopt for a cookie that is no valid control (hostile or a real reply).
constexpr std::optional<DecodedControl> decode_control(std::uint64_t cookie) noexcept {
  if ((cookie & control_bit) == 0) return std::nullopt;
  const auto code = static_cast<std::uint8_t>((cookie >> 56) & 0x7f);
  const auto status = static_cast<std::uint8_t>((cookie >> 48) & 0xff);
  if (code < 1 || code > 4 || status >= status_count) return std::nullopt;
  if ((cookie & 0x0000'ffff'0000'0000) != 0) return std::nullopt;
  return DecodedControl{static_cast<Control>(code), static_cast<Status>(status),
                        static_cast<std::uint32_t>(cookie)};
}

}  // namespace pier::port
