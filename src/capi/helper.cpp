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

Helper::Helper(core::Core& core, bool (*app_waiting)() noexcept)
    : core_(core), app_waiting_(app_waiting) {
  thread_ = std::thread([this] { run(); });
}

Helper::~Helper() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool Helper::poll_once() noexcept {
  core_.enter_critical();
  (void)core_.progress();
  core::Stats st = core_.stats();
  std::size_t pending = core_.pending();
  core_.leave_critical();
  polls_.fetch_add(1, std::memory_order_relaxed);
  std::uint64_t work = st.eager_received + st.rdv_received + st.finalized;
  bool found = work != seen_work_ || pending > 0;
  seen_work_ = work;
  return found;
}

void Helper::run() noexcept {
  const std::int64_t max_ns = std::int64_t{helper_sleep_key.get()} * 1000;
  std::int64_t sleep_ns = 1000;
  std::unique_lock lock(mu_);
  while (!stop_) {
    if (app_waiting_()) {
      // A waiter drives the core; polling too would only take the
      // critical section (and on two cores, the CPU) from it.
      sleep_ns = max_ns;
    } else {
      lock.unlock();
      bool found = poll_once();
      lock.lock();
      // Work comes in bursts: after some, poll again soon; when idle, back
      // off to the bound, so an idle process costs almost nothing.
      sleep_ns = found ? 1000 : std::min(sleep_ns * 2, max_ns);
    }
    cv_.wait_for(lock, std::chrono::nanoseconds(sleep_ns), [&] { return stop_; });
  }
}

}  // namespace pier::capi
