// pier::capi: the helper thread of the default mode.
//
// API calls run the LIB in the calling thread (nal::Direct) and a thread
// blocked in a wait drives the core itself, so a ping-pong on two cores
// never waits for a third thread to be scheduled. The helper covers the
// rest: while no application thread is inside a wait, it polls the core so
// a target completes puts, gets and atomics while the application computes.
// It never sleeps holding the core's critical section (an API call would
// wait behind it): it polls, releases, and sleeps a back-off that restarts
// whenever its own poll found work. Work the application's calls did does
// not count: in a ping-pong the application progresses itself, and a helper
// polling every microsecond beside it took its core (on a job with one core
// per process) and made an 8-byte put 50 % slower.
//
// Once the application has made no call for a while and the core has
// nothing under way, the helper sleeps in the core instead (holding the
// critical section, on the drivers' descriptors: an arrival wakes it at
// once): its 200 us polls cost an idle process 5 % of a core. An API call
// then wakes it (enter_critical) and waits for it to let go, once per
// quiet spell.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

#include "core/core.hpp"

namespace pier::capi {

class Helper {
 public:
  /// Starts the thread. `app_waiting` says whether an application thread
  /// drives progress now (the helper then stays out of its way);
  /// `app_calls` changes with every API call.
  Helper(core::Core& core, bool (*app_waiting)() noexcept, std::uint64_t (*app_calls)() noexcept);
  /// Stops and joins the thread.
  ~Helper();
  Helper(const Helper&) = delete;
  Helper& operator=(const Helper&) = delete;

  /// Polls done by the helper (tests: it did run).
  std::uint64_t polls() const noexcept { return polls_.load(std::memory_order_relaxed); }
  /// Whether the helper is in (or entering) its sleep in the core.
  bool in_core() const noexcept { return in_core_.load(std::memory_order_seq_cst); }

 private:
  void run() noexcept;
  /// One poll under the critical section; true when it found work.
  bool poll_once() noexcept;
  /// Sleeps in the core while nothing happens and nobody calls; true when
  /// the application ended the sleep.
  bool sleep_in_core() noexcept;

  core::Core& core_;
  bool (*app_waiting_)() noexcept;
  std::uint64_t (*app_calls_)() noexcept;
  std::uint64_t seen_calls_ = 0;
  std::size_t last_pending_ = 0;  ///< core_.pending() at the last look (helper thread only)
  std::atomic<std::uint64_t> polls_{0};
  std::atomic<bool> stopping_{false};  ///< stop_, readable without mu_
  std::atomic<bool> in_core_{false};   ///< in (or entering) sleep_in_core()
  std::mutex mu_;                      ///< with cv_, the back-off sleep that stop interrupts
  std::condition_variable cv_;
  bool stop_ = false;  ///< under mu_
  std::thread thread_;
};

}  // namespace pier::capi
