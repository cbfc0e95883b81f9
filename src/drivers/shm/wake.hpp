// shm: sleeping and waking across processes without a system call on the
// publishing side of the fast path.
//
// A sleeper raises a sleepers word in the ring control, makes sure it sees
// every record published before that (the store-load half of a Dekker pair),
// looks at the ring once more and sleeps on a futex word next to the sleepers
// word. A publisher stores its record, then reads the sleepers word and only
// when it is non-zero bumps the futex word and wakes: a system call only when
// the peer sleeps.
//
// The store-load ordering on the publisher's side would cost a locked
// instruction per message. Where the kernel offers membarrier's global
// expedited command, the publisher uses a plain store and the (rare) sleeper
// pays instead: heavy_fence() runs a barrier on every CPU running a
// registered process, so either the sleeper sees the record or the publisher
// sees the raised word.
#pragma once

#include <chrono>
#include <cstdint>

namespace pier::drivers::shm {

/// Registers this process for heavy_fence(); true when it may publish with
/// plain stores. Cheap after the first call in a process.
bool register_light_publisher() noexcept;

/// The sleeper's half of the asymmetric fence: after it returns, stores that
/// registered processes made before it are visible here, and our earlier
/// stores are visible to them. False when the kernel lacks it (publishers
/// then use locked stores, and the bounded futex timeout covers the rest).
bool heavy_fence() noexcept;

/// Sleeps while *word == expect, at most `timeout`. Spurious returns happen;
/// the caller looks again.
void futex_wait(std::uint32_t* word, std::uint32_t expect,
                std::chrono::nanoseconds timeout) noexcept;
/// Wakes every sleeper on *word (in any process mapping it).
void futex_wake_all(std::uint32_t* word) noexcept;

}  // namespace pier::drivers::shm
