// pier: the monotonic clock and deadlines. Every blocking wait in pier takes a
// Deadline, so no wait can hang forever by accident.
#pragma once

#include <chrono>
#include <cstdint>
#include <limits>

namespace pier::base {

using Clock = std::chrono::steady_clock;  // CLOCK_MONOTONIC on Linux

/// Nanoseconds on the monotonic clock since an arbitrary origin.
inline std::int64_t now_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

/// A point in time after which a wait gives up.
class Deadline {
 public:
  /// `timeout_ms` from now; a negative timeout means never.
  static Deadline after_ms(std::int64_t timeout_ms) noexcept {
    if (timeout_ms < 0) return never();
    std::int64_t now = now_ns();
    std::int64_t max_ms = (std::numeric_limits<std::int64_t>::max() - now) / 1'000'000;
    if (timeout_ms >= max_ms) return never();
    return Deadline(now + timeout_ms * 1'000'000);
  }
  static Deadline never() noexcept { return Deadline(std::numeric_limits<std::int64_t>::max()); }
  /// At `at_ns` on now_ns()'s clock.
  static Deadline at(std::int64_t at_ns) noexcept { return Deadline(at_ns); }
  /// Already expired: for polling without waiting.
  static Deadline now() noexcept { return Deadline(now_ns()); }

  bool expired() const noexcept { return !is_never() && now_ns() >= at_ns_; }
  bool is_never() const noexcept { return at_ns_ == std::numeric_limits<std::int64_t>::max(); }
  /// Time left, 0 once expired; INT64_MAX for never.
  std::int64_t remaining_ns() const noexcept {
    if (is_never()) return std::numeric_limits<std::int64_t>::max();
    std::int64_t left = at_ns_ - now_ns();
    return left > 0 ? left : 0;
  }
  /// Time left rounded up to whole milliseconds (for poll/epoll_wait), -1 for never.
  int remaining_ms() const noexcept {
    if (is_never()) return -1;
    std::int64_t ms = (remaining_ns() + 999'999) / 1'000'000;
    return ms > std::numeric_limits<int>::max() ? std::numeric_limits<int>::max()
                                                : static_cast<int>(ms);
  }
  std::int64_t at_ns() const noexcept { return at_ns_; }
  /// The same instant as a std::chrono time point (pier::driver::Deadline).
  Clock::time_point time_point() const noexcept {
    if (is_never()) return Clock::time_point::max();
    return Clock::time_point(std::chrono::nanoseconds(at_ns_));
  }

 private:
  explicit Deadline(std::int64_t at_ns) noexcept : at_ns_(at_ns) {}
  std::int64_t at_ns_;
};

}  // namespace pier::base
