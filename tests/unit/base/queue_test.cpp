// Single-thread semantics of the SPSC and MPSC queues.
#include "base/mpsc_queue.hpp"
#include "base/spsc_queue.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <string>

namespace {

using pier::base::MpscQueue;
using pier::base::SpscQueue;

template <class Q>
class QueueSemantics : public testing::Test {};
using QueueTypes = testing::Types<SpscQueue<int>, MpscQueue<int>>;
TYPED_TEST_SUITE(QueueSemantics, QueueTypes);

TYPED_TEST(QueueSemantics, FifoUntilFullThenEmpty) {
  TypeParam q(8);
  EXPECT_EQ(q.capacity(), 8u);
  int out = -1;
  EXPECT_FALSE(q.try_pop(out));
  for (int i = 0; i < 8; ++i) EXPECT_TRUE(q.try_push(i)) << i;
  EXPECT_FALSE(q.try_push(8));
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(q.try_pop(out));
    EXPECT_EQ(out, i);
  }
  EXPECT_FALSE(q.try_pop(out));
}

TYPED_TEST(QueueSemantics, WrapsAroundManyTimes) {
  TypeParam q(4);
  int next_in = 0, next_out = 0, out = 0;
  for (int round = 0; round < 1000; ++round) {
    while (q.try_push(next_in)) ++next_in;
    for (int k = 0; k < 3 && q.try_pop(out); ++k) EXPECT_EQ(out, next_out++);
  }
  while (q.try_pop(out)) EXPECT_EQ(out, next_out++);
  EXPECT_EQ(next_in, next_out);
}

TYPED_TEST(QueueSemantics, CapacityMustBeAPowerOfTwo) {
  EXPECT_THROW(TypeParam(0), std::invalid_argument);
  EXPECT_THROW(TypeParam(6), std::invalid_argument);
  EXPECT_NO_THROW(TypeParam(1));
}

TEST(SpscQueue, SizeApprox) {
  SpscQueue<int> q(4);
  EXPECT_TRUE(q.empty_approx());
  ASSERT_TRUE(q.try_push(1));
  ASSERT_TRUE(q.try_push(2));
  EXPECT_EQ(q.size_approx(), 2u);
}

TEST(SpscQueue, MovesOnlyElementsAndDestroysLeftovers) {
  auto tracker = std::make_shared<int>(0);
  {
    SpscQueue<std::shared_ptr<int>> q(4);
    ASSERT_TRUE(q.try_push(tracker));
    ASSERT_TRUE(q.try_push(tracker));
    EXPECT_EQ(tracker.use_count(), 3);
    std::shared_ptr<int> out;
    ASSERT_TRUE(q.try_pop(out));
    EXPECT_EQ(tracker.use_count(), 3);
    out.reset();
    EXPECT_EQ(tracker.use_count(), 2);
  }
  EXPECT_EQ(tracker.use_count(), 1);  // the destructor released the leftover
}

TEST(MpscQueue, MovesOnlyElementsAndDestroysLeftovers) {
  auto tracker = std::make_shared<int>(0);
  {
    MpscQueue<std::unique_ptr<std::string>> q(2);
    ASSERT_TRUE(q.try_push(std::make_unique<std::string>("a")));
    ASSERT_TRUE(q.try_push(std::make_unique<std::string>("b")));
    std::unique_ptr<std::string> out;
    ASSERT_TRUE(q.try_pop(out));
    EXPECT_EQ(*out, "a");
    MpscQueue<std::shared_ptr<int>> shared(4);
    ASSERT_TRUE(shared.try_push(tracker));
    EXPECT_EQ(tracker.use_count(), 2);
  }
  EXPECT_EQ(tracker.use_count(), 1);
}

}  // namespace
