// base::pins (the C API's Pin): counts per thread, slots handed back by
// exiting threads, and the teardown protocol PtlFini follows: clear the
// gate, fence, wait for no pin, free. Readers that pinned and found the
// object must never see it freed or poisoned (ASan reports a use after free
// too). Labelled tsan as well (this folder), where pins take the locked
// path.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "base/pins.hpp"

namespace pier::base {
namespace {

using namespace std::chrono_literals;

TEST(PinsStress, CountsThisThreadsPins) {
  (void)pins::prepare();
  const std::int64_t before = pins::held();
  pins::enter();
  pins::enter();
  EXPECT_EQ(pins::held(), before + 2);
  pins::leave();
  EXPECT_EQ(pins::held(), before + 1);
  pins::leave();
  EXPECT_EQ(pins::held(), before);
}

TEST(PinsStress, AnotherThreadsPinIsCountedUntilItLeaves) {
  (void)pins::prepare();
  std::atomic<int> step{0};
  std::thread t([&] {
    pins::enter();
    step.store(1);
    while (step.load() != 2) std::this_thread::yield();
    pins::leave();
    step.store(3);
  });
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (step.load() != 1 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  ASSERT_EQ(step.load(), 1);
  EXPECT_EQ(pins::held(), 1);
  step.store(2);
  while (step.load() != 3 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  ASSERT_EQ(step.load(), 3);
  EXPECT_EQ(pins::held(), 0);
  t.join();
}

TEST(PinsStress, ExitedThreadsGiveTheirSlotsBack) {
  (void)pins::prepare();
  // Many short-lived threads, one after the other: each takes a slot and
  // gives it back, so the count stays right and nothing is left held.
  for (int i = 0; i < 200; ++i) {
    std::thread t([] {
      pins::enter();
      pins::leave();
    });
    t.join();
  }
  EXPECT_EQ(pins::held(), 0);
}

struct Guarded {
  static constexpr std::uint64_t alive = 0xa11ce, dead = 0xdead;
  std::atomic<std::uint64_t> magic{alive};
};

TEST(PinsStress, ATeardownWaitsForEveryReaderThatMaySeeTheObject) {
  const bool light = pins::prepare();
  std::printf("pins: %s mode\n", light ? "membarrier" : "locked");
  std::atomic<Guarded*> gate{nullptr};
  std::atomic<bool> stop{false};
  std::atomic<long> bad{0}, seen{0};
  constexpr int readers = 2;
  std::vector<std::thread> ts;
  ts.reserve(readers);
  for (int r = 0; r < readers; ++r)
    ts.emplace_back([&] {
      while (!stop.load(std::memory_order_relaxed)) {
        pins::enter();
        if (Guarded* g = gate.load(std::memory_order_seq_cst)) {
          // Twice, with time in between: a teardown that did not wait for
          // us would poison it in the gap.
          const std::uint64_t first = g->magic.load(std::memory_order_relaxed);
          for (int spin = 0; spin < 50; ++spin) std::atomic_signal_fence(std::memory_order_seq_cst);
          const std::uint64_t second = g->magic.load(std::memory_order_relaxed);
          if (first != Guarded::alive || second != Guarded::alive) bad.fetch_add(1);
          seen.fetch_add(1, std::memory_order_relaxed);
        }
        pins::leave();
        // Two cores here: the teardown's thread must get turns too.
        std::this_thread::yield();
      }
    });
  for (int round = 0; round < 1000; ++round) {
    auto* g = new Guarded;
    gate.store(g, std::memory_order_release);
    std::this_thread::sleep_for(20us);
    gate.exchange(nullptr, std::memory_order_seq_cst);
    pins::fence();
    // The readers pin again at once, but find the gate empty: a zero seen
    // once is enough (as in PtlFini).
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    bool clear = false;
    while (!(clear = pins::held() == 0) && std::chrono::steady_clock::now() < deadline)
      std::this_thread::yield();
    ASSERT_TRUE(clear) << "a reader kept its pin for 10 s";
    g->magic.store(Guarded::dead, std::memory_order_relaxed);
    delete g;
  }
  stop.store(true);
  for (auto& t : ts) t.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_GT(seen.load(), 0);  // the readers did meet the object
}

}  // namespace
}  // namespace pier::base
