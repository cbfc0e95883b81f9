// pier: pins, a count of the threads inside a library's calls that a rare
// teardown waits on, without a locked instruction on the frequent side.
//
// A call pins the library state on entry and unpins on return; the last
// PtlFini clears the state, then waits until no pin is left before freeing
// it. Every Portals call pins, twice per ping-pong step, and a locked
// read-modify-write each way (the obvious shared counter) cost a put about
// 20 ns one way on this project's VMs (measured: portals_bench, shm). So
// each thread counts in a slot of its own with plain stores, and the
// teardown pays instead: after its store it runs a barrier on every CPU
// running this process (membarrier), so either a thread's count is visible
// to it or that thread's read comes after the store (an asymmetric Dekker
// pair, as in the shm driver's wake-ups).
//
// Where the kernel has no private expedited membarrier, or under
// ThreadSanitizer (which models neither), every pin is a sequentially
// consistent read-modify-write instead, as before.
#pragma once

#include <atomic>
#include <cstdint>

namespace pier::base::pins {

/// One thread's count. Slots are taken on a thread's first pin, handed back
/// when it exits and reused; never freed. A line each: two threads pinning
/// at once do not pass a line back and forth.
struct alignas(64) Slot {
  constexpr Slot() = default;
  /// The shared slot: taken for good.
  constexpr explicit Slot(bool is_shared) : taken{is_shared}, shared{is_shared} {}
  std::atomic<std::int64_t> held{0};
  std::atomic<bool> taken{false};
  /// The one slot for threads that found no memory for their own: counted
  /// with locked instructions, as several threads share it.
  bool shared = false;
  Slot* next = nullptr;
};

namespace detail {
/// Set once, by prepare(), before the state a pin guards is published.
extern std::atomic<bool> light;
extern thread_local Slot* mine;
Slot* take_slot() noexcept;
}  // namespace detail

/// Readies the light mode (registers for membarrier) where the kernel has
/// it; idempotent. Call it before publishing what pins guard, under the
/// same lock as the teardown's fence(), so that a teardown uses the barrier
/// whenever a pin may have used plain stores. True in the light mode.
bool prepare() noexcept;

/// Marks the calling thread inside; the caller then reads the published
/// state (and must see a teardown's clearing, or be seen by its held()).
inline void enter() noexcept {
  Slot* s = detail::mine;
  if (s == nullptr) s = detail::take_slot();
  if (detail::light.load(std::memory_order_relaxed) && !s->shared) {
    s->held.store(s->held.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    // Only the compiler must keep the caller's read after the store; the
    // teardown's membarrier orders the CPU.
    std::atomic_signal_fence(std::memory_order_seq_cst);
  } else {
    s->held.fetch_add(1, std::memory_order_seq_cst);
  }
}

/// Undoes one enter() of this thread. Release: everything the pin's holder
/// did happens before a teardown that sees the count drop.
inline void leave() noexcept {
  Slot* s = detail::mine;
  if (detail::light.load(std::memory_order_relaxed) && !s->shared)
    s->held.store(s->held.load(std::memory_order_relaxed) - 1, std::memory_order_release);
  else
    s->held.fetch_sub(1, std::memory_order_seq_cst);
}

/// The teardown's half, after the store that makes later pins find nothing:
/// from here on held() counts every thread that may still see the old state.
void fence() noexcept;

/// Pins held now, over all threads.
std::int64_t held() noexcept;

}  // namespace pier::base::pins
