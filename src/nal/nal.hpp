// pier::nal: the protection-domain boundary of seed 000. The API side
// reaches the LIB only through Api::forward(op, args, ret); the LIB side
// runs Lib::dispatch(op, args, ret). Memory crosses the boundary only as
// Regions from validate(), which the LIB hands to the core with offsets.
//
// Two implementations:
//   Direct          the LIB runs in the caller's thread; forward() is a call,
//                   with no copy beyond the argument block the caller built.
//   ProgressThread  the LIB and the core run on their own thread, so messages
//                   progress while the application computes; forward() posts
//                   a request on a lock-free queue and waits for its answer.
// The third, Daemon (the LIB in another process), is designed in
// docs/core.md and not built yet.
//
// Threads: an Api may be used by several application threads at once
// (ProgressThread serialises them on its thread; Direct takes the core's
// critical section). Lib::dispatch always runs with the core's critical
// section held, on one thread at a time.
#pragma once

#include <pier/result.hpp>
#include <pier/status.hpp>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <thread>

#include "base/clock.hpp"
#include "base/mpsc_queue.hpp"
#include "core/core.hpp"

namespace pier::nal {

/// The LIB side: what forward() reaches.
class Lib {
 public:
  virtual ~Lib() = default;
  /// Runs operation `op` on the argument block, filling the return block.
  /// Called with the core's critical section held.
  virtual Status dispatch(std::uint32_t op, std::span<const std::byte> args,
                          std::span<std::byte> ret) noexcept = 0;
};

/// The API side.
class Api {
 public:
  virtual ~Api() = default;
  /// Ships (op, args) to the LIB side and waits for ret, or the deadline
  /// (timeout: the request is still answered later, into nothing).
  virtual Status forward(std::uint32_t op, std::span<const std::byte> args,
                         std::span<std::byte> ret, base::Deadline deadline) noexcept = 0;
  /// Translates user memory for the LIB (seed 000's validate).
  virtual Result<core::Region> validate(void* base, std::size_t extent) noexcept = 0;
  virtual Status invalidate(const core::Region& region) noexcept = 0;
  /// Lets communication progress (Direct: runs the core; ProgressThread:
  /// nothing to do, its thread does it).
  virtual Status poll() noexcept = 0;

  /// A predicate for wait(): evaluated with the core's critical section
  /// held, so it may read what the LIB writes (an event queue, a counter).
  using Done = bool (*)(void* arg) noexcept;
  /// Blocks the calling thread until done(arg) is true (ok) or the deadline
  /// passes (timeout), driving progress itself: no request crosses a queue
  /// and no other thread needs to be woken when the answer arrives. It
  /// spins CORE_SPIN_US, then sleeps in the drivers. Under ProgressThread
  /// the progress thread backs off while a caller waits here, and the
  /// caller answers the requests other threads forward meanwhile; Direct
  /// releases the critical section at least every millisecond.
  virtual Status wait(Done done, void* arg, base::Deadline deadline) noexcept = 0;
  /// wait() with any callable `bool()`.
  template <class Pred>
  Status wait_until(Pred& pred, base::Deadline deadline) noexcept {
    return wait([](void* p) noexcept { return static_cast<bool>((*static_cast<Pred*>(p))()); },
                &pred, deadline);
  }
};

/// Same thread, no queue.
class Direct final : public Api {
 public:
  Direct(core::Core& core, Lib& lib) : core_(core), lib_(lib) {}
  /// Inline, for callers that hold a Direct (the C API's state): every
  /// Portals call crosses here, and as a call it kept its six arguments
  /// across the lock in saved registers.
  Status forward(std::uint32_t op, std::span<const std::byte> args, std::span<std::byte> ret,
                 base::Deadline deadline) noexcept override {
    (void)deadline;  // a direct call cannot wait on anything but itself
    core_.enter_critical();
    const Status s = lib_.dispatch(op, args, ret);
    core_.leave_critical();
    return s;
  }
  Result<core::Region> validate(void* base, std::size_t extent) noexcept override;
  Status invalidate(const core::Region& region) noexcept override;
  Status poll() noexcept override;
  Status wait(Done done, void* arg, base::Deadline deadline) noexcept override;

 private:
  core::Core& core_;
  Lib& lib_;
};

/// The LIB and the core on their own thread.
class ProgressThread final : public Api {
 public:
  /// Starts the thread; `queue_depth` is a power of two (requests in flight).
  ProgressThread(core::Core& core, Lib& lib, std::size_t queue_depth = 256);
  /// Stops the thread after the requests already queued.
  ~ProgressThread() override;
  ProgressThread(const ProgressThread&) = delete;
  ProgressThread& operator=(const ProgressThread&) = delete;

  Status forward(std::uint32_t op, std::span<const std::byte> args, std::span<std::byte> ret,
                 base::Deadline deadline) noexcept override;
  Result<core::Region> validate(void* base, std::size_t extent) noexcept override;
  Status invalidate(const core::Region& region) noexcept override;
  Status poll() noexcept override { return Status::ok; }
  Status wait(Done done, void* arg, base::Deadline deadline) noexcept override;

  /// Requests answered, by the thread or by waiting callers (for tests).
  std::uint64_t answered() const noexcept { return answered_.load(std::memory_order_relaxed); }

  struct Request;

 private:
  void run() noexcept;
  /// Answers every queued request; the core's critical section is held
  /// (which also makes the holder the queue's single consumer).
  void drain() noexcept;
  /// Whoever drives the core sleeps until one of these: a request, a stop,
  /// or (for the thread) a caller that wants to drive it.
  bool interrupted() const noexcept {
    return queued_.load(std::memory_order_acquire) != 0 || stop_.load(std::memory_order_acquire);
  }
  /// Fills a free request slot with `fill`, queues it and waits.
  template <class Fill, class Read>
  Status submit(Fill fill, Read read, base::Deadline deadline) noexcept;

  core::Core& core_;
  Lib& lib_;
  std::unique_ptr<Request[]> slots_;       ///< fixed at construction
  std::unique_ptr<std::uint32_t[]> free_;  ///< free slot indices, under mu_
  std::size_t free_count_ = 0;
  base::MpscQueue<std::uint32_t> queue_;
  std::atomic<std::size_t> queued_{0};
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> answered_{0};
  /// Callers inside wait(): the thread backs off while there are any.
  std::atomic<std::uint32_t> waiters_{0};
  std::mutex mu_;  ///< with cv_, where requesters sleep for their answer
  std::condition_variable cv_;
  std::thread thread_;
};

}  // namespace pier::nal
