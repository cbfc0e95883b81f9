// pier nal: the progress-thread protection domain. Requests live in slots
// fixed at construction; their indices travel on a lock-free MPSC queue to
// the thread, which answers them between progress passes and wakes the
// caller. A caller whose deadline passes before the thread took its request
// abandons it (the thread then drops it unread); once taken, a request is
// always waited for, since dispatch never blocks.
#include <algorithm>
#include <chrono>
#include <cstring>

#include "base/log.hpp"
#include "nal/nal.hpp"

namespace pier::nal {

namespace {
// Operations the NAL itself runs on the LIB's thread (the core is single
// threaded): above any LIB operation number.
constexpr std::uint32_t op_validate = 0xffff'fff0;
constexpr std::uint32_t op_invalidate = 0xffff'fff1;
}  // namespace

struct ProgressThread::Request {
  enum class State : std::uint8_t { free, queued, taken, answered, abandoned };
  State state = State::free;  ///< under mu_
  std::uint32_t op = 0;
  std::span<const std::byte> args;
  std::span<std::byte> ret;
  Status status = Status::in_progress;
  void* base = nullptr;  ///< validate
  std::size_t extent = 0;
  core::Region region;  ///< validate's answer, invalidate's argument
};

ProgressThread::ProgressThread(core::Core& core, Lib& lib, std::size_t queue_depth)
    : core_(core),
      lib_(lib),
      slots_(std::make_unique<Request[]>(queue_depth)),
      free_(std::make_unique<std::uint32_t[]>(queue_depth)),
      free_count_(queue_depth),
      queue_(queue_depth) {
  for (std::size_t i = 0; i < queue_depth; ++i) free_[i] = static_cast<std::uint32_t>(i);
  thread_ = std::thread([this] { run(); });
}

ProgressThread::~ProgressThread() {
  stop_.store(true, std::memory_order_release);
  core_.wake();  // an idle thread sleeps up to CORE_IDLE_SLEEP_MS
  if (thread_.joinable()) thread_.join();
}

void ProgressThread::drain() noexcept {
  std::uint32_t index = 0;
  while (queue_.try_pop(index)) {
    queued_.fetch_sub(1, std::memory_order_acq_rel);
    Request& r = slots_[index];
    {
      std::lock_guard lock(mu_);
      if (r.state == Request::State::abandoned) {
        r.state = Request::State::free;
        free_[free_count_++] = index;
        cv_.notify_all();
        continue;
      }
      r.state = Request::State::taken;
    }
    Status s;
    if (r.op == op_validate) {
      auto v = core_.validate(r.base, r.extent);
      if (v) r.region = *v;
      s = v.status();
    } else if (r.op == op_invalidate) {
      s = core_.invalidate(r.region);
    } else {
      s = lib_.dispatch(r.op, r.args, r.ret);
    }
    answered_.fetch_add(1, std::memory_order_relaxed);
    {
      std::lock_guard lock(mu_);
      r.status = s;
      r.state = Request::State::answered;
    }
    cv_.notify_all();
  }
}

void ProgressThread::run() noexcept {
  // After a turn in which nothing happened the next one sleeps at once: a
  // spin at the start of every turn kept an idle process busy 2.5% of the
  // time (50 us every 2 ms).
  bool quiet = false;
  for (;;) {
    // A caller drives the core in wait(): stay out of its way (on a 2-core
    // machine a second spinning thread halves its speed), but keep an ear
    // on stop and on the caller leaving.
    if (waiters_.load(std::memory_order_acquire) != 0) {
      std::unique_lock lock(mu_);
      cv_.wait_for(lock, std::chrono::milliseconds(1), [this] {
        return waiters_.load(std::memory_order_acquire) == 0 ||
               stop_.load(std::memory_order_acquire);
      });
      if (!stop_.load(std::memory_order_acquire)) continue;
    }
    core_.enter_critical();
    drain();
    const bool done =
        stop_.load(std::memory_order_acquire) && queued_.load(std::memory_order_acquire) == 0;
    if (!done) {
      (void)core_.progress();
      // Idle: sleep in the drivers (a packet wakes it), until a request,
      // a stop or a waiting caller (forward() and wait() call wake()).
      const auto woken = [this] {
        return interrupted() || waiters_.load(std::memory_order_acquire) != 0 ||
               core_.contended_urgently();
      };
      // Quiet: the turn ended by its clock, with no arrival and no finalize.
      const auto activity = [this] { return core_.stats().activity(); };
      const std::uint64_t before = activity();
      if (woken() || core_.pending() != 0) {
        quiet = false;
      } else if (quiet) {
        quiet = core_.wait_sleeping(woken, base::Deadline::after_ms(100)) == Status::timeout &&
                activity() == before;
      } else {
        quiet = core_.wait(woken, base::Deadline::after_ms(2)) == Status::timeout &&
                activity() == before;
      }
    }
    core_.leave_critical();
    if (done) break;
    // A caller asked for the lock (it ended our turn): let it in first.
    for (int i = 0; i < 1000 && core_.contended(); ++i) std::this_thread::yield();
  }
}

Status ProgressThread::wait(Done done, void* arg, base::Deadline deadline) noexcept {
  waiters_.fetch_add(1, std::memory_order_acq_rel);
  core_.wake();  // the thread leaves its sleep and the critical section
  Status result = Status::timeout;
  for (;;) {
    core_.enter_critical();
    drain();
    bool ok = done(arg);
    if (!ok) {
      // Slices of at most a millisecond, so a request forwarded meanwhile
      // (whose sender wakes this sleep) is answered between them.
      const base::Deadline slice =
          deadline.remaining_ns() < 1'000'000 ? deadline : base::Deadline::after_ms(1);
      (void)core_.wait([&] { return done(arg) || interrupted(); }, slice);
      drain();
      ok = done(arg);
    }
    core_.leave_critical();
    if (ok) {
      result = Status::ok;
      break;
    }
    if (deadline.expired()) break;
  }
  if (waiters_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    std::lock_guard lock(mu_);  // the thread sleeps on cv_ under mu_
    cv_.notify_all();
  }
  return result;
}

template <class Fill, class Read>
Status ProgressThread::submit(Fill fill, Read read, base::Deadline deadline) noexcept {
  std::uint32_t index = 0;
  {
    std::unique_lock lock(mu_);
    if (!cv_.wait_until(lock, deadline.time_point(), [&] { return free_count_ > 0; }))
      return Status::timeout;
    index = free_[--free_count_];
    Request& r = slots_[index];
    r = Request{};
    fill(r);
    r.state = Request::State::queued;
  }
  queued_.fetch_add(1, std::memory_order_acq_rel);
  // Never full: the queue has as many cells as there are slots.
  (void)queue_.try_push(index);
  // Whoever drives the core (the thread, or a caller in wait()) may sleep
  // in a driver: end that sleep so the request is answered now.
  core_.wake();
  Request& r = slots_[index];
  std::unique_lock lock(mu_);
  bool done = cv_.wait_until(lock, deadline.time_point(),
                             [&] { return r.state == Request::State::answered; });
  if (!done && r.state == Request::State::queued) {
    r.state = Request::State::abandoned;  // the thread frees it unread
    return Status::timeout;
  }
  // Taken: dispatch does not block, the answer comes.
  cv_.wait(lock, [&] { return r.state == Request::State::answered; });
  Status s = r.status;
  read(r);
  r.state = Request::State::free;
  free_[free_count_++] = index;
  lock.unlock();
  cv_.notify_all();
  return s;
}

Status ProgressThread::forward(std::uint32_t op, std::span<const std::byte> args,
                               std::span<std::byte> ret, base::Deadline deadline) noexcept {
  if (op >= op_validate) return Status::invalid_argument;
  return submit(
      [&](Request& r) {
        r.op = op;
        r.args = args;
        r.ret = ret;
      },
      [](Request&) {}, deadline);
}

Result<core::Region> ProgressThread::validate(void* base, std::size_t extent) noexcept {
  core::Region region;
  Status s = submit(
      [&](Request& r) {
        r.op = op_validate;
        r.base = base;
        r.extent = extent;
      },
      [&](Request& r) { region = r.region; }, base::Deadline::after_ms(60000));
  if (s != Status::ok) return s;
  return region;
}

Status ProgressThread::invalidate(const core::Region& region) noexcept {
  return submit(
      [&](Request& r) {
        r.op = op_invalidate;
        r.region = region;
      },
      [](Request&) {}, base::Deadline::after_ms(60000));
}

}  // namespace pier::nal
