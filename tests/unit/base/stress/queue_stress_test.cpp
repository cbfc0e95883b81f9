// Multi-thread stress of the SPSC and MPSC queues: every element arrives
// exactly once and, per producer, in order. Every wait has a deadline, so a
// lost element fails the test instead of hanging it. Run under TSan by
// `ctest -L tsan`.
#include "base/clock.hpp"
#include "base/config.hpp"
#include "base/log.hpp"
#include "base/mpsc_queue.hpp"
#include "base/spsc_queue.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

namespace {

using pier::base::Deadline;

constexpr std::int64_t deadline_ms = 60'000;

TEST(SpscQueueStress, EveryElementOnceInOrder) {
  constexpr std::uint64_t count = 200'000;
  pier::base::SpscQueue<std::uint64_t> q(64);
  Deadline deadline = Deadline::after_ms(deadline_ms);
  std::atomic<bool> gave_up{false};
  std::thread producer([&] {
    for (std::uint64_t i = 0; i < count;) {
      if (q.try_push(i)) {
        ++i;
      } else if (deadline.expired()) {
        gave_up = true;
        return;
      } else {
        std::this_thread::yield();
      }
    }
  });
  std::uint64_t expected = 0, sum = 0;
  bool in_order = true;
  while (expected < count && !deadline.expired()) {
    std::uint64_t v;
    if (!q.try_pop(v)) {
      std::this_thread::yield();
      continue;
    }
    in_order = in_order && v == expected;
    sum += v;
    ++expected;
  }
  producer.join();
  EXPECT_FALSE(gave_up.load());
  EXPECT_EQ(expected, count);
  EXPECT_TRUE(in_order);
  EXPECT_EQ(sum, count * (count - 1) / 2);
  std::uint64_t extra;
  EXPECT_FALSE(q.try_pop(extra));
}

TEST(MpscQueueStress, EveryElementOnceInOrderPerProducer) {
  constexpr int producers = 4;
  constexpr std::uint64_t per_producer = 50'000;
  // Elements carry (producer << 32 | sequence).
  pier::base::MpscQueue<std::uint64_t> q(128);
  Deadline deadline = Deadline::after_ms(deadline_ms);
  std::atomic<int> gave_up{0};
  std::vector<std::thread> threads;
  for (int p = 0; p < producers; ++p) {
    threads.emplace_back([&, p] {
      for (std::uint64_t i = 0; i < per_producer;) {
        if (q.try_push((std::uint64_t(p) << 32) | i)) {
          ++i;
        } else if (deadline.expired()) {
          gave_up.fetch_add(1);
          return;
        } else {
          std::this_thread::yield();
        }
      }
    });
  }
  std::vector<std::uint64_t> next(producers, 0);
  std::uint64_t received = 0;
  bool in_order = true, valid = true;
  while (received < producers * per_producer && !deadline.expired()) {
    std::uint64_t v;
    if (!q.try_pop(v)) {
      std::this_thread::yield();
      continue;
    }
    auto p = static_cast<std::size_t>(v >> 32);
    if (p >= next.size()) {
      valid = false;
      break;
    }
    in_order = in_order && (v & 0xffffffffu) == next[p];
    ++next[p];
    ++received;
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(gave_up.load(), 0);
  EXPECT_TRUE(valid);
  EXPECT_TRUE(in_order);
  EXPECT_EQ(received, producers * per_producer);
  for (std::size_t p = 0; p < next.size(); ++p) EXPECT_EQ(next[p], per_producer) << p;
  std::uint64_t extra;
  EXPECT_FALSE(q.try_pop(extra));
}

TEST(LogStress, ConfigureWhileOtherThreadsLog) {
  // enabled() is lock-free against configure(); TSan checks the seqlock.
  Deadline deadline = Deadline::after_ms(deadline_ms);
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> seen_enabled{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 2; ++r) {
    readers.emplace_back([&] {
      while (!stop.load(std::memory_order_relaxed) && !deadline.expired())
        if (pier::log::enabled("stress", pier::log::Level::debug)) seen_enabled.fetch_add(1);
    });
  }
  for (int i = 0; i < 2000 && !deadline.expired(); ++i)
    ASSERT_TRUE(pier::log::configure(i % 2 ? "stress=debug" : "stress=error,x=info"));
  ASSERT_TRUE(pier::log::configure("stress=debug"));
  // Once the last configure is published, every reader sees debug enabled.
  std::uint64_t before = seen_enabled.load();
  while (seen_enabled.load() < before + 100 && !deadline.expired()) std::this_thread::yield();
  stop = true;
  for (auto& t : readers) t.join();
  EXPECT_GE(seen_enabled.load(), before + 100);
  EXPECT_TRUE(pier::log::configure("warn"));
}

TEST(ConfigStress, SetGetAndDumpFromManyThreads) {
  // The registry is a set-up path guarded by a mutex; TSan checks it is.
  static const pier::config::IntKey key{"TESTSTRESS_VALUE", 1, 1, 1000, "stress"};
  Deadline deadline = Deadline::after_ms(deadline_ms);
  std::atomic<bool> bad_value{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 300 && !deadline.expired(); ++i) {
        if (t == 0) {
          if (pier::config::set("TESTSTRESS_VALUE", std::to_string(1 + i % 999)) !=
              pier::Status::ok)
            bad_value = true;
        } else if (t == 1) {
          std::int64_t v = key.get();
          if (v < 1 || v > 1000) bad_value = true;
        } else {
          if (pier::config::dump().empty()) bad_value = true;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_FALSE(bad_value.load());
  EXPECT_EQ(pier::config::unset("TESTSTRESS_VALUE"), pier::Status::ok);
  EXPECT_EQ(key.get(), 1);
}

}  // namespace
