// pier fault driver: the injection plan and the pure decision function.
//
// A plan names faults either by probability ("drop=0.01": each operation of
// the fault's kind draws) or by position ("truncate@5": exactly the 5th).
// Decisions are a pure function of (seed, stream, fault, number), so the same
// seed and the same sequence of calls give the same faults, whatever the
// timing. See docs/fault.md for what is numbered.
#pragma once

#include <pier/driver.hpp>
#include <pier/result.hpp>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pier::drivers::fault {

/// Every fault the wrapper injects. The order is the precedence when several
/// fire on one operation (death first; at most one of dup/reorder/delay).
enum class Fault : std::uint8_t {
  death,         ///< every operation of the instance answers broken from now on
  connect_fail,  ///< connect_async answers broken
  no_resource,   ///< the send answers no_resource, nothing done
  drop,          ///< reported sent, never delivered
  truncate,      ///< the first half of the bytes is delivered
  corrupt,       ///< one bit flipped in the delivered bytes
  dup,           ///< delivered twice
  reorder,       ///< held and delivered after the next send
  delay,         ///< held and delivered after delay_packets later sends or delay_time
  late,          ///< delivered, but the post answers in_progress until late_polls polls
};
inline constexpr std::size_t fault_count = 10;

std::string_view to_string(Fault f) noexcept;

/// Which counter numbers a fault's operations (see docs/fault.md).
enum class Counter : std::uint8_t {
  connect,  ///< connect_async calls on the context
  op,       ///< connect_async, send_post, send_buf_post, recv_post of an instance
  send,     ///< send_post, send_buf_post of an instance
};
Counter counter_of(Fault f) noexcept;

/// Restricts a plan to one track.
enum class TrackFilter : std::uint8_t { any, small, large };

struct Plan {
  std::uint64_t seed = 1;
  /// Probability per operation of each fault, in [0, 1].
  std::array<double, fault_count> probability{};
  /// Operation numbers (1-based) at which each fault fires for certain.
  std::array<std::vector<std::uint64_t>, fault_count> at{};
  /// A delayed packet is delivered after this many later sends of its
  /// instance, or after delay_time, whichever comes first.
  std::uint32_t delay_packets = 3;
  /// Zero means no time limit (fully deterministic delivery order; a held
  /// packet then waits for later sends).
  std::chrono::microseconds delay_time{10000};
  /// A late send's post and its first late_polls - 1 polls answer
  /// in_progress; the late_polls-th poll (or a wait) completes it.
  std::uint32_t late_polls = 2;
  TrackFilter track = TrackFilter::any;
  /// Probabilities apply from this operation number on (each fault's own
  /// counter), so a set-up phase (handshakes) can run clean; "@N" rules
  /// are not affected.
  std::uint64_t from = 1;
  /// Per-instance bounded buffer for held and modified packets, allocated
  /// when the instance is opened; a packet larger than slot_bytes, or a fault
  /// finding no free slot, is delivered unmodified (logged).
  std::uint32_t slots = 16;
  std::size_t slot_bytes = std::size_t{64} * 1024;

  Plan& set(Fault f, double p) {
    probability[static_cast<std::size_t>(f)] = p;
    return *this;
  }
  Plan& fire_at(Fault f, std::uint64_t number) {
    at[static_cast<std::size_t>(f)].push_back(number);
    return *this;
  }
  /// True when no fault can ever fire: the wrapper is a pure pass-through.
  bool empty() const noexcept;
  /// True when the plan applies to instances of this track.
  bool covers(driver::Track t) const noexcept;
};

/// Parses "drop=0.01,truncate@5,delay_packets=2,seed=7" (see docs/fault.md).
/// On error returns invalid_argument and, when `error` is given, says why.
Result<Plan> parse_plan(std::string_view text, std::string* error = nullptr);
/// The plan as parse_plan() text, for logs and replay.
std::string format_plan(const Plan& plan);

/// The deterministic decision: does `f` fire at operation `number` (1-based)
/// of `stream` (an instance's ordinal on its context, or connect_stream)?
class Injector {
 public:
  static constexpr std::uint64_t connect_stream = ~std::uint64_t{0};

  explicit Injector(const Plan& plan) : plan_(plan) {}
  bool fires(Fault f, std::uint64_t stream, std::uint64_t number) const noexcept;
  /// A deterministic 64-bit value for choices inside a fault (which bit to
  /// corrupt), drawn apart from the decisions.
  std::uint64_t draw(Fault f, std::uint64_t stream, std::uint64_t number) const noexcept;

 private:
  const Plan& plan_;
};

}  // namespace pier::drivers::fault
