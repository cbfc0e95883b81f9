// shm: futex and membarrier wrappers (see wake.hpp).
#include "drivers/shm/wake.hpp"

#include <linux/futex.h>
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <ctime>

#if defined(__SANITIZE_THREAD__)
#define PIER_SHM_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define PIER_SHM_TSAN 1
#endif
#endif

namespace pier::drivers::shm {

namespace {

long membarrier(int cmd) noexcept {
  return ::syscall(__NR_membarrier, cmd, 0, 0);
}

// The pid that registered: registration belongs to an address space, and a
// forked child has a new one.
std::atomic<pid_t> registered_pid{0};

}  // namespace

bool register_light_publisher() noexcept {
#ifdef PIER_SHM_TSAN
  // ThreadSanitizer models neither fences nor membarrier: publishers use
  // locked stores, whose ordering it does see.
  return false;
#endif
  const pid_t self = ::getpid();
  if (registered_pid.load(std::memory_order_acquire) == self) return true;
  const long cmds = membarrier(MEMBARRIER_CMD_QUERY);
  if (cmds < 0 || (cmds & MEMBARRIER_CMD_GLOBAL_EXPEDITED) == 0 ||
      (cmds & MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED) == 0)
    return false;
  if (membarrier(MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED) != 0) return false;
  registered_pid.store(self, std::memory_order_release);
  return true;
}

bool heavy_fence() noexcept {
#ifdef PIER_SHM_TSAN
  // No fence under ThreadSanitizer (it rejects them); the publishers' locked
  // stores and the sleeper's seq_cst raise of its word already order both.
  return false;
#else
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) == 0;
#endif
}

void futex_wait(std::uint32_t* word, std::uint32_t expect,
                std::chrono::nanoseconds timeout) noexcept {
  const auto ns = timeout.count() > 0 ? timeout.count() : 0;
  const ::timespec ts{static_cast<std::time_t>(ns / 1000000000),
                      static_cast<long>(ns % 1000000000)};
  // Not FUTEX_PRIVATE_FLAG: the word lives in a segment shared with the peer.
  (void)::syscall(SYS_futex, word, FUTEX_WAIT, expect, &ts, nullptr, 0);
}

void futex_wake_all(std::uint32_t* word) noexcept {
  (void)::syscall(SYS_futex, word, FUTEX_WAKE, 0x7fffffff, nullptr, nullptr, 0);
}

}  // namespace pier::drivers::shm
