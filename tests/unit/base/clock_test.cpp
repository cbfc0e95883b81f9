#include "base/clock.hpp"

#include <gtest/gtest.h>

#include <thread>

namespace {

using pier::base::Deadline;

TEST(Clock, IsMonotonic) {
  std::int64_t a = pier::base::now_ns();
  std::int64_t b = pier::base::now_ns();
  EXPECT_LE(a, b);
}

TEST(Deadline, ExpiresAfterItsTimeout) {
  Deadline d = Deadline::after_ms(1);
  // Bounded wait: a clock that never advances fails the test instead of hanging.
  Deadline guard = Deadline::after_ms(10'000);
  while (!d.expired() && !guard.expired()) std::this_thread::yield();
  EXPECT_TRUE(d.expired());
  EXPECT_EQ(d.remaining_ns(), 0);
  EXPECT_EQ(d.remaining_ms(), 0);
}

TEST(Deadline, FarDeadlineHasTimeLeft) {
  Deadline d = Deadline::after_ms(3'600'000);
  EXPECT_FALSE(d.expired());
  EXPECT_GT(d.remaining_ns(), 0);
  EXPECT_GT(d.remaining_ms(), 0);
  EXPECT_LE(d.remaining_ms(), 3'600'000);
}

TEST(Deadline, NeverAndNow) {
  EXPECT_FALSE(Deadline::never().expired());
  EXPECT_TRUE(Deadline::never().is_never());
  EXPECT_EQ(Deadline::never().remaining_ms(), -1);
  EXPECT_FALSE(Deadline::after_ms(-1).expired());
  EXPECT_TRUE(Deadline::after_ms(std::numeric_limits<std::int64_t>::max()).is_never());
  EXPECT_TRUE(Deadline::now().expired());
}

TEST(Deadline, TimePointMatchesNanoseconds) {
  Deadline d = Deadline::after_ms(5);
  EXPECT_EQ(d.time_point().time_since_epoch(), std::chrono::nanoseconds(d.at_ns()));
  EXPECT_EQ(Deadline::never().time_point(), pier::base::Clock::time_point::max());
}

}  // namespace
