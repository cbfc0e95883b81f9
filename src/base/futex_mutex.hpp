// pier: a mutex whose free path is inline, one atomic instruction each way.
// std::mutex costs a call into glibc each way (pthread_mutex_trylock about
// 34 instructions, unlock about 23, callgrind), which a lock taken on every
// message pays: the ofi context's lock (three times per message) and the
// core's critical section (each Portals call and each wait's turn).
// It is still a mutex: a thread that finds it held sleeps in the kernel
// (futex), never spins, so threads wait for each other exactly as with
// std::mutex (a spinning lock would burn a core while the holder sleeps in
// a wait or is descheduled: this machine has two).
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>

namespace pier::base {

/// A futex mutex (Drepper, "Futexes are tricky", mutex 3): 0 free, 1 held,
/// 2 held and maybe waited for. BasicLockable and Lockable, for
/// std::lock_guard and std::unique_lock.
class FutexMutex {
 public:
  FutexMutex() = default;
  FutexMutex(const FutexMutex&) = delete;
  FutexMutex& operator=(const FutexMutex&) = delete;

  void lock() noexcept {
    int c = 0;
    if (state_.compare_exchange_strong(c, 1, std::memory_order_acquire, std::memory_order_relaxed))
      return;
    lock_contended(c);
  }
  bool try_lock() noexcept {
    int c = 0;
    return state_.compare_exchange_strong(c, 1, std::memory_order_acquire,
                                          std::memory_order_relaxed);
  }
  void unlock() noexcept {
    // Someone may sleep on it (2): wake one, which marks it 2 again when it
    // takes it, so that the waiters after it are woken in turn.
    if (state_.exchange(0, std::memory_order_release) == 2) wake_one();
  }

 private:
  void lock_contended(int c) noexcept {
    if (c != 2) c = state_.exchange(2, std::memory_order_acquire);
    while (c != 0) {
      // Sleeps only while the word still says 2 (held, waited for).
      (void)::syscall(SYS_futex, word(), FUTEX_WAIT_PRIVATE, 2, nullptr, nullptr, 0);
      c = state_.exchange(2, std::memory_order_acquire);
    }
  }
  void wake_one() noexcept {
    (void)::syscall(SYS_futex, word(), FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
  }
  int* word() noexcept { return reinterpret_cast<int*>(&state_); }

  static_assert(sizeof(std::atomic<int>) == sizeof(int) && std::atomic<int>::is_always_lock_free);
  std::atomic<int> state_{0};
};

}  // namespace pier::base
