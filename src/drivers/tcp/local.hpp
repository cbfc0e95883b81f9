// pier tcp: the driver's own packets (seed 003). A local frame's payload is
// a src/wire driver-local packet; this parser hands it to the handler of its
// subtype in a wire::HandlerTable. A connection being set up knows only
// hello, an established one only keep-alive: anything else is malformed.
#pragma once

#include "drivers/tcp/codec.hpp"
#include "wire/packet_registry.hpp"

namespace pier::drivers::tcp {

class LocalParser {
 public:
  enum class Role : std::uint8_t { handshake, connected };
  /// Allocates the parser's staging buffer: call at set-up, not per packet.
  explicit LocalParser(Role role);
  LocalParser(const LocalParser&) = delete;
  LocalParser& operator=(const LocalParser&) = delete;

  /// One whole local frame payload. ok, or the wire's verdict (malformed,
  /// version_mismatch); once failed it stays failed.
  Status feed(std::span<const std::byte> payload) noexcept;
  /// In the handshake role, after feed() answered ok: the hello it carried.
  const Result<Hello>& hello() const noexcept { return hello_; }

 private:
  static Status on_hello(void* self, const wire::Incoming& in, wire::Continuation& rest) noexcept;
  static Status on_keepalive(void* self, const wire::Incoming& in,
                             wire::Continuation& rest) noexcept;

  wire::CoreHandlers core_;  ///< empty: a core packet in a local frame is malformed
  wire::HandlerTable table_{static_cast<std::uint16_t>(LocalType::count)};
  wire::StreamParser parser_;
  Result<Hello> hello_ = Status::malformed;
};

}  // namespace pier::drivers::tcp
