// pier: pins (see pins.hpp).
#include "base/pins.hpp"

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <new>

#include "base/log.hpp"

#if defined(__SANITIZE_THREAD__)
#define PIER_PINS_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define PIER_PINS_TSAN 1
#endif
#endif

namespace pier::base::pins {

namespace detail {
std::atomic<bool> light{false};
thread_local Slot* mine = nullptr;
}  // namespace detail

namespace {

/// Heads the list of every slot; shared_slot is its first element.
constinit Slot shared_slot{true};
std::atomic<Slot*> slots{&shared_slot};

#ifndef PIER_PINS_TSAN
long membarrier(int cmd) noexcept {
  return ::syscall(__NR_membarrier, cmd, 0, 0);
}
#endif

/// Gives the thread's slot back when it exits (a pin never outlives its
/// call, so the count is 0 by then).
struct SlotReturn {
  ~SlotReturn() {
    if (detail::mine == nullptr || detail::mine->shared) return;
    detail::mine->taken.store(false, std::memory_order_release);
    detail::mine = nullptr;
  }
};

}  // namespace

Slot* detail::take_slot() noexcept {
  thread_local SlotReturn on_exit;
  (void)on_exit;
  for (Slot* s = slots.load(std::memory_order_acquire); s != nullptr; s = s->next) {
    bool free = false;
    if (s->taken.compare_exchange_strong(free, true, std::memory_order_acq_rel)) {
      mine = s;
      return s;
    }
  }
  // A thread's first call: not on a data path.
  auto* s = new (std::nothrow) Slot;
  if (s == nullptr) {
    mine = &shared_slot;
    return mine;
  }
  s->taken.store(true, std::memory_order_relaxed);
  Slot* head = slots.load(std::memory_order_relaxed);
  do {
    s->next = head;
  } while (!slots.compare_exchange_weak(head, s, std::memory_order_acq_rel));
  mine = s;
  return s;
}

bool prepare() noexcept {
#ifdef PIER_PINS_TSAN
  return false;
#else
  if (detail::light.load(std::memory_order_acquire)) return true;
  const long cmds = membarrier(MEMBARRIER_CMD_QUERY);
  if (cmds < 0 || (cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0 ||
      (cmds & MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0)
    return false;
  if (membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) != 0) return false;
  detail::light.store(true, std::memory_order_seq_cst);
  return true;
#endif
}

void fence() noexcept {
#ifndef PIER_PINS_TSAN
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (!detail::light.load(std::memory_order_seq_cst)) return;
  if (membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0) return;
  // A forked child keeps its parent's registration on Linux; should it
  // not, registering again makes the barrier available.
  if (membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0 &&
      membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0)
    return;
  PIER_LOG(error, "pins",
           "membarrier failed after it was registered: a thread entering now may not be seen");
#endif
}

std::int64_t held() noexcept {
  std::int64_t n = 0;
  for (Slot* s = slots.load(std::memory_order_acquire); s != nullptr; s = s->next)
    n += s->held.load(std::memory_order_acquire);
  return n;
}

}  // namespace pier::base::pins
