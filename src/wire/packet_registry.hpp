// pier wire: the packet-type registry of seed 003, and the parser that turns
// a byte stream into handler calls.
//
// Core packet types go to handlers the core registers in a CoreHandlers
// table (one entry per PacketType). A driver's own packets travel as the one
// wrapper type PacketType::driver_local with a 16-bit subtype, and go to the
// HandlerTable of the gate instance the bytes arrived on. A driver defines its
// subtypes in its own folder (an enum of uint16_t values) and registers a
// handler for each in the table it owns; nothing here changes for that.
//
// Handler contract (the CH3 handler, made deterministic):
//   The parser calls a handler once per packet with the decoded frame, the
//   subtype (driver_local only), the packet's body length and `head`: the
//   first min(body length, head capacity) bytes of the body, contiguous and
//   valid only during the call. The head capacity is fixed when the parser is
//   built, so the call does not depend on how the stream was fragmented.
//   The handler answers a Status: anything but ok stops the parser, which
//   returns that status from then on (the caller marks the peer broken).
//   On ok it fills `rest`:
//     - consumed: head bytes it used (at most head.size());
//     - if bytes remain after those, exactly one of:
//         dest: the parser copies the following bytes there (at most what
//               remains, else the packet is malformed); when dest is full it
//               calls on_done(ctx, next), which may point `next` at more
//               room; when nothing remains on_done is the completion call;
//         discard: the parser drops the rest of the packet.
//   Bytes left with no room for them is a handler bug: Status::internal, as
//   is a `consumed` set by on_done (it applies to the head only).
//   A handler or on_done must not feed the parser that called it.
//
// Threads: a table may be read by many parsers at once once registration is
// done; a parser belongs to one stream and one thread at a time.
// No allocation happens after construction.
#pragma once

#include "wire/frame.hpp"

#include <pier/status.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

namespace pier::wire {

/// One packet as a handler sees it.
struct Incoming {
  FrameHeader frame;
  std::uint16_t subtype = 0;      ///< driver_local only
  std::uint32_t body_length = 0;  ///< bytes after the frame (and wrapper, if driver_local)
  std::span<const std::byte> head;
  void* source = nullptr;  ///< the parser's owner (a gate, a connection), as given to it
};

/// Where the body bytes after those the handler consumed go.
struct Continuation {
  std::size_t consumed = 0;
  std::span<std::byte> dest;
  bool discard = false;
  /// Called when dest is full; may fill `next.dest` or set `next.discard`.
  Status (*on_done)(void* ctx, Continuation& next) noexcept = nullptr;
  void* ctx = nullptr;
};

struct Handler {
  Status (*fn)(void* ctx, const Incoming& in, Continuation& rest) noexcept = nullptr;
  void* ctx = nullptr;
  explicit operator bool() const noexcept { return fn != nullptr; }
};

/// Handlers of the core packet types, registered once by the core.
class CoreHandlers {
 public:
  /// invalid_argument for driver_local (it goes through a HandlerTable) or a
  /// handler without a function; in_use when the type already has one.
  Status register_handler(PacketType type, Handler handler) noexcept;
  /// The handler of a type, or nullptr.
  const Handler* find(PacketType type) const noexcept;

 private:
  std::array<Handler, packet_type_limit> handlers_{};
};

/// A gate instance's table of driver-local handlers, indexed by subtype.
class HandlerTable {
 public:
  /// Subtypes [0, slots) may be registered; the table is allocated here.
  explicit HandlerTable(std::uint16_t slots);
  HandlerTable(const HandlerTable&) = delete;
  HandlerTable& operator=(const HandlerTable&) = delete;

  /// invalid_argument for a subtype >= slots() or a handler without a
  /// function; in_use when the subtype already has one.
  Status register_handler(std::uint16_t subtype, Handler handler) noexcept;
  /// The handler of a subtype, or nullptr (out of range or unregistered).
  const Handler* find(std::uint16_t subtype) const noexcept;
  std::uint16_t slots() const noexcept { return slots_; }

 private:
  std::unique_ptr<Handler[]> handlers_;
  std::uint16_t slots_;
};

/// Feeds a byte stream, in fragments of any size, to the handlers.
class StreamParser {
 public:
  /// The smallest head capacity: every fixed sub-header plus the largest
  /// upper-layer header fits, so a handler always sees those whole.
  static constexpr std::size_t min_head_capacity = 256;

  /// `core` and `local` (may be null: then every driver-local packet is
  /// malformed) must outlive the parser. `head_capacity` is raised to
  /// min_head_capacity if smaller; the staging buffer is allocated here.
  StreamParser(const CoreHandlers& core, const HandlerTable* local, std::size_t head_capacity,
               void* source = nullptr);
  StreamParser(const StreamParser&) = delete;
  StreamParser& operator=(const StreamParser&) = delete;

  /// Consumes all of `bytes`. ok, or the status that stopped the parser:
  /// malformed / version_mismatch for bad input (an unknown type or a
  /// subtype without a handler included), a handler's own failure, or
  /// internal for a handler that left bytes without room. Once stopped,
  /// every call returns the same status and consumes nothing.
  Status feed(std::span<const std::byte> bytes) noexcept;
  /// As feed(), for a transport that preserves packet boundaries: `packet`
  /// must hold whole packets only (else malformed).
  Status feed_packet(std::span<const std::byte> packet) noexcept;

  /// True between packets (nothing partial is buffered or expected).
  bool at_boundary() const noexcept { return state_ == State::frame && staged_ == 0; }
  /// ok while running, else why it stopped.
  Status status() const noexcept { return status_; }
  std::size_t head_capacity() const noexcept { return head_capacity_; }

 private:
  enum class State : std::uint8_t { frame, wrapper, head, rest, stopped };

  bool gather(std::span<const std::byte>& in, std::size_t need,
              std::span<const std::byte>& out) noexcept;
  Status on_frame(std::span<const std::byte> bytes) noexcept;
  Status on_wrapper(std::span<const std::byte> bytes) noexcept;
  Status on_head(std::span<const std::byte> head) noexcept;
  Status accept(const Continuation& c, bool first) noexcept;
  Status deliver(std::span<const std::byte>& in) noexcept;
  Status stop(Status why) noexcept;

  const CoreHandlers& core_;
  const HandlerTable* local_;
  void* source_;
  std::size_t head_capacity_;
  std::unique_ptr<std::byte[]> staging_;
  std::size_t staged_ = 0;

  State state_ = State::frame;
  Status status_ = Status::ok;
  Incoming packet_{};
  const Handler* handler_ = nullptr;
  std::uint64_t remaining_ = 0;  ///< body bytes not yet given to the current continuation
  Continuation cont_{};
  std::size_t filled_ = 0;  ///< bytes of cont_.dest already written
};

}  // namespace pier::wire
