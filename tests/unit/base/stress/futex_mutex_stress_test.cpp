// base::FutexMutex (the ofi context's lock and the core's critical
// section): mutual exclusion under contention, waiters that sleep while
// the holder sleeps, try_lock, and std::unique_lock's unlock/lock as
// OfiContext::wait() uses it. Labelled tsan too (this folder): TSan checks
// that what one holder wrote is seen by the next.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "base/futex_mutex.hpp"

namespace pier::base {
namespace {

TEST(FutexMutexStress, ExcludesUnderContention) {
  FutexMutex mu;
  long counter = 0;  // plain: only the lock keeps the increments whole
  constexpr int threads = 4;
  constexpr int rounds = 100000;
  std::vector<std::thread> ts;
  ts.reserve(threads);
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([&] {
      for (int i = 0; i < rounds; ++i) {
        std::lock_guard lock(mu);
        ++counter;
      }
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(counter, long{threads} * rounds);
}

TEST(FutexMutexStress, WaitersSleepUntilTheHolderLetsGo) {
  FutexMutex mu;
  std::unique_lock held(mu);
  EXPECT_FALSE(mu.try_lock());
  std::atomic<bool> entered{false};
  std::thread waiter([&] {
    std::lock_guard lock(mu);
    entered = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  // The waiter is asleep on the futex, not inside.
  EXPECT_FALSE(entered);
  held.unlock();
  waiter.join();
  EXPECT_TRUE(entered);
  held.lock();  // as wait() does after its sleep
  EXPECT_TRUE(held.owns_lock());
  held.unlock();
  EXPECT_TRUE(mu.try_lock());
  mu.unlock();
}

}  // namespace
}  // namespace pier::base
