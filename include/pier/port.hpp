// pier/port.hpp: the C++ API of the GM-style port layer (seed 004). The model
// is the one of pier/port.h (tokens, size classes, priorities, events,
// callbacks that run only inside unknown(), fault-tolerant resume/drop);
// docs/port.md describes it with the rules G1-G10 its tests check.
//
// A Node is one process of the job, over one core::Core; it opens Ports by
// number. Ports must be closed (destroyed) before their Node. One thread uses
// a Node and its Ports at a time. Calls return a Status: ok, no_resource (the
// call needs a token the client does not hold, or room that progress frees),
// invalid_argument, in_use (port number open), not_found, not_initialized.
// Asynchronous results arrive as callback statuses: ok, timeout (no matching
// buffer in time), rejected (size not accepted), closed (target port closed),
// broken (target node unreachable), dropped (drop_sends), permission_denied
// (put/get outside the target's registered memory).
#pragma once

#include <pier/port.h>
#include <pier/result.hpp>
#include <pier/status.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace pier::core {
class Core;
}

namespace pier::port {

enum class Priority : std::uint8_t { low = 0, high = 1 };
inline constexpr unsigned priority_count = 2;
/// Sizes 3..32: size s holds at most 2^s - 8 bytes.
inline constexpr unsigned min_size = 3;
inline constexpr unsigned max_size = 32;
inline constexpr std::uint64_t max_message = 0x7fff'ffff;

using Event = pier_port_event_t;
using Alarm = pier_port_alarm_t;

class Port;
class Node;
/// Runs inside Port::unknown(); the send token is back before it runs.
using Callback = void (*)(Port& port, void* context, Status status);
using AlarmCallback = void (*)(void* context);

/// The largest length a message of size `size` may have; 0 for no size.
constexpr std::uint64_t max_length_for_size(unsigned size) noexcept {
  return size < min_size || size > max_size ? 0 : (std::uint64_t{1} << size) - 8;
}
/// ceil(log2(length + 8)): the smallest size holding `length` bytes.
constexpr unsigned min_size_for_length(std::uint64_t length) noexcept {
  unsigned s = min_size;
  while (s < 63 && (std::uint64_t{1} << s) - 8 < length) ++s;
  return s;
}

/// True for the receive event types (every other event goes to unknown()).
constexpr bool is_receive_event(std::uint8_t type) noexcept {
  return type >= PIER_PORT_RECV_EVENT && type <= PIER_PORT_FAST_HIGH_PEER_RECV_EVENT;
}

class Node {
 public:
  /// Joins the job through the bootstrap (pier-run or singleton) and owns
  /// the Core it makes.
  static Result<std::unique_ptr<Node>> create();
  /// Over a Core the caller owns and keeps alive longer than the Node.
  /// in_use when another port layer is attached to it.
  static Result<std::unique_ptr<Node>> attach(core::Core& core);
  ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  /// Opens port `port_id` (< port_limit()): in_use when it is open,
  /// invalid_argument when out of range.
  Result<std::unique_ptr<Port>> open(unsigned port_id);
  unsigned port_limit() const noexcept;
  std::uint32_t node_id() const noexcept;
  std::uint32_t node_count() const noexcept;
  Result<std::string> host_name(std::uint32_t node_id) const;
  /// The lowest node id running on `host`.
  Result<std::uint32_t> node_id_of_host(std::string_view host) const;
  /// The core under the node, for a program that drives it itself. While
  /// no port is open a caretaker thread polls the node
  /// (PIER_PORT_IDLE_POLL_MS): use the core only while a port is open, or
  /// with that key at 0.
  core::Core& core() noexcept;

  class Impl;
  Impl& impl() noexcept { return *impl_; }

 private:
  explicit Node(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

class Port {
 public:
  /// Closes the port (see pier_port_close).
  ~Port();
  Port(const Port&) = delete;
  Port& operator=(const Port&) = delete;

  unsigned id() const noexcept;
  Node& node() noexcept;
  /// (node id << 16) | port id
  std::uint32_t global_id() const noexcept;

  unsigned send_tokens() const noexcept;
  unsigned receive_tokens() const noexcept;
  unsigned send_tokens_held() const noexcept;
  unsigned receive_tokens_held() const noexcept;
  /// Messages up to this many bytes arrive as FAST events.
  std::size_t fast_max() const noexcept;
  /// Bit s of `mask` accepts size s; sends of other sizes complete rejected.
  Status set_acceptable_sizes(Priority priority, std::uint64_t mask) noexcept;

  /// Put and get targets: [ptr, ptr + len) becomes reachable by peers.
  Status register_memory(void* ptr, std::size_t len) noexcept;
  Status deregister_memory(void* ptr, std::size_t len) noexcept;

  /// Each takes a send token (no_resource when none is held); the callback
  /// runs inside unknown() once the target answered or the send failed.
  Status send(const void* message, unsigned size, std::size_t length, Priority priority,
              std::uint32_t node, unsigned port, Callback callback, void* context) noexcept;
  Status send_to_peer(const void* message, unsigned size, std::size_t length, Priority priority,
                      std::uint32_t node, Callback callback, void* context) noexcept;
  Status put(const void* local, std::uint64_t remote, std::size_t length, Priority priority,
             std::uint32_t node, unsigned port, Callback callback, void* context) noexcept;
  Status get(std::uint64_t remote, void* local, std::size_t length, Priority priority,
             std::uint32_t node, unsigned port, Callback callback, void* context) noexcept;
  /// Once per reported failure on (priority, node, port); invalid_argument
  /// when that connection has no unanswered failure. Callback status: ok.
  Status resume_sending(Priority priority, std::uint32_t node, unsigned port, Callback callback,
                        void* context) noexcept;
  Status drop_sends(Priority priority, std::uint32_t node, unsigned port, Callback callback,
                    void* context) noexcept;

  /// Takes a receive token (no_resource when none is held).
  Status provide_receive_buffer(void* buffer, unsigned size, Priority priority,
                                std::uint8_t tag) noexcept;
  /// Never blocks. The event stays valid until the next receive call.
  const Event& receive() noexcept;
  /// Polls PORT_SPIN_US, then sleeps; a NO_RECV event after timeout_ms
  /// (negative: no limit).
  const Event& blocking_receive(int timeout_ms) noexcept;
  const Event& blocking_receive_no_spin(int timeout_ms) noexcept;
  /// Runs the callback of an ALARM or SENT event; a receive event given here
  /// provides its buffer again (its token goes back to pier).
  void unknown(const Event& event) noexcept;
  bool receive_pending() noexcept;
  /// The type of the next event, 0 when none; its sender node in *sender.
  int next_event_peek(std::uint32_t* sender) noexcept;

  /// (Re)arms: exactly one ALARM event after `usecs`.
  Status set_alarm(Alarm& alarm, std::uint64_t usecs, AlarmCallback callback,
                   void* context) noexcept;
  void cancel_alarm(Alarm& alarm) noexcept;

  class Impl;
  Impl& impl() noexcept { return *impl_; }

 private:
  friend class Node;
  explicit Port(Impl* impl) noexcept : impl_(impl) {}
  Impl* impl_;
};

}  // namespace pier::port
