// pier capi: the helper thread (capi/helper.hpp).
#include "capi/helper.hpp"

#include <algorithm>
#include <chrono>

#include "base/config.hpp"

namespace pier::capi {

inline const config::IntKey helper_sleep_key{
    "CAPI_HELPER_SLEEP_US", 200, 1, 100'000,
    "longest sleep of the helper thread between two polls of an idle core: the worst delay a "
    "target that makes no pier call adds to an incoming put, get or atomic"};

inline const config::IntKey helper_deep_key{
    "CAPI_HELPER_DEEP_MS", 20, 0, 3'600'000,
    "after this long with no application call and nothing under way, the helper sleeps in the "
    "core (an arrival wakes it; the next call wakes it and waits for it, once); 0: never"};

inline const config::IntKey helper_aside_key{
    "CAPI_HELPER_ASIDE_US", 2000, 1, 1'000'000,
    "sleep of the helper thread while an application thread waits in pier (and drives the core "
    "itself): the longest a put landing just after that wait ended waits for the helper. Each "
    "wake of the helper costs the application thread beside it on a shared core"};

Helper::Helper(core::Core& core, bool (*app_waiting)() noexcept,
               std::uint64_t (*app_calls)() noexcept)
    : core_(core), app_waiting_(app_waiting), app_calls_(app_calls) {
  thread_ = std::thread([this] { run(); });
}

Helper::~Helper() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  stopping_.store(true, std::memory_order_release);
  core_.wake();  // out of a sleep in the core
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool Helper::poll_once() noexcept {
  core_.enter_critical();
  const std::uint64_t before = core_.stats().activity();
  (void)core_.progress();
  const bool own_work = core_.stats().activity() != before;
  const std::size_t pending = core_.pending();
  core_.leave_critical();
  last_pending_ = pending;
  polls_.fetch_add(1, std::memory_order_relaxed);
  // Transfers under way while the application makes no call (a large put
  // landing while it computes) need the helper's pace; while it makes
  // calls, they progress it.
  const std::uint64_t calls = app_calls_();
  const bool app_idle = calls == seen_calls_;
  seen_calls_ = calls;
  return own_work || (pending > 0 && app_idle);
}

bool Helper::sleep_in_core() noexcept {
  const std::uint64_t calls = seen_calls_;
  const auto by_app = [&] {
    return core_.contended_urgently() || app_calls_() != calls || app_waiting_();
  };
  const auto woken = [&] {
    return stopping_.load(std::memory_order_acquire) || by_app() || core_.pending() != 0;
  };
  in_core_.store(true, std::memory_order_seq_cst);
  core_.enter_critical();
  if (!woken()) (void)core_.wait_sleeping(woken, base::Deadline::after_ms(100));
  in_core_.store(false, std::memory_order_relaxed);
  last_pending_ = core_.pending();
  const bool app = by_app();
  core_.leave_critical();
  // A caller asked for the lock: let it in before our next poll.
  for (int i = 0; i < 1000 && core_.contended(); ++i) std::this_thread::yield();
  return app;
}

void Helper::run() noexcept {
  // The helper's polls never cut an application thread's waiting turn short.
  (void)core::Core::set_patient(true);
  const std::int64_t max_ns = std::int64_t{helper_sleep_key.get()} * 1000;
  const std::int64_t aside_ns = std::int64_t{helper_aside_key.get()} * 1000;
  const std::int64_t deep_ns = std::int64_t{helper_deep_key.get()} * 1'000'000;
  std::int64_t sleep_ns = 1000;
  std::int64_t quiet_ns = 0;  // since the last work, call or wait seen
  std::unique_lock lock(mu_);
  while (!stop_) {
    if (app_waiting_()) {
      // A waiter drives the core; polling too would only take the
      // critical section (and on a shared core, the CPU) from it. Every
      // wake costs that thread a context switch, so look back rarely.
      sleep_ns = aside_ns;
      quiet_ns = 0;
    } else if (deep_ns > 0 && quiet_ns >= deep_ns) {
      lock.unlock();
      // The application woke it (a call, even one that counts no call, such
      // as PtlCTGet): poll again for a quiet spell before the next sleep, or
      // every such call would wake it anew.
      const bool app = sleep_in_core();
      lock.lock();
      const std::uint64_t calls = app_calls_();
      if (app || calls != seen_calls_ || last_pending_ != 0) quiet_ns = 0;
      seen_calls_ = calls;
      sleep_ns = 1000;
      continue;
    } else {
      lock.unlock();
      const std::uint64_t calls = seen_calls_;
      bool found = poll_once();
      lock.lock();
      // Work comes in bursts: after some, poll again soon; when idle, back
      // off to the bound, so an idle process costs almost nothing.
      sleep_ns = found ? 1000 : std::min(sleep_ns * 2, max_ns);
      const bool quiet = !found && seen_calls_ == calls && last_pending_ == 0;
      quiet_ns = quiet ? quiet_ns + sleep_ns : 0;
    }
    cv_.wait_for(lock, std::chrono::nanoseconds(sleep_ns), [&] { return stop_; });
  }
}

}  // namespace pier::capi
