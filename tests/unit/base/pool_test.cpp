#include "base/pool.hpp"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace {

using pier::base::Pool;

struct Counted {
  static inline int live = 0;
  explicit Counted(int v) : value(v) { ++live; }
  ~Counted() { --live; }
  int value;
};

TEST(Pool, AcquireUntilExhaustedThenReuse) {
  Pool<Counted> pool(4);
  std::vector<Counted*> got;
  for (int i = 0; i < 4; ++i) {
    Counted* c = pool.acquire(i);
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(c->value, i);
    got.push_back(c);
  }
  EXPECT_EQ(pool.outstanding(), 4u);
  EXPECT_EQ(pool.available(), 0u);
  EXPECT_EQ(pool.acquire(99), nullptr);
  EXPECT_EQ(Counted::live, 4);
  pool.release(got[2]);
  EXPECT_EQ(Counted::live, 3);
  EXPECT_EQ(pool.outstanding(), 3u);
  Counted* again = pool.acquire(7);
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(again->value, 7);
  for (Counted* c : {got[0], got[1], got[3], again}) pool.release(c);
  EXPECT_EQ(pool.outstanding(), 0u);
  EXPECT_EQ(Counted::live, 0);
}

TEST(Pool, DestructorDestroysOutstandingObjects) {
  {
    Pool<Counted> pool(3);
    ASSERT_NE(pool.acquire(1), nullptr);
    ASSERT_NE(pool.acquire(2), nullptr);
    EXPECT_EQ(Counted::live, 2);
  }
  EXPECT_EQ(Counted::live, 0);
}

TEST(Pool, HandlesResolveUntilReleased) {
  Pool<std::string> pool(8);
  std::string* s = pool.acquire("portals");
  ASSERT_NE(s, nullptr);
  auto h = pool.handle_of(s);
  EXPECT_NE(h, Pool<std::string>::invalid_handle);
  EXPECT_EQ(pool.lookup(h), s);
  pool.release(s);
  EXPECT_EQ(pool.lookup(h), nullptr);
  // The slot is reused at once (LIFO); the old handle still fails.
  std::string* t = pool.acquire("again");
  ASSERT_EQ(t, s);
  EXPECT_EQ(pool.lookup(h), nullptr);
  EXPECT_NE(pool.handle_of(t), h);
  EXPECT_EQ(pool.lookup(pool.handle_of(t)), t);
  pool.release(t);
}

TEST(Pool, ReleaseByHandleRejectsStaleAndForged) {
  Pool<int> pool(16);
  int* p = pool.acquire(3);
  ASSERT_NE(p, nullptr);
  auto h = pool.handle_of(p);
  EXPECT_EQ(pool.release(h), pier::Status::ok);
  EXPECT_EQ(pool.release(h), pier::Status::not_found);
  EXPECT_EQ(pool.outstanding(), 0u);
  using H = Pool<int>::Handle;
  EXPECT_EQ(pool.lookup(H{0}), nullptr);
  EXPECT_EQ(pool.lookup(H{0xffffffffu}), nullptr);
  EXPECT_EQ(pool.lookup(H{0x0000000fu}), nullptr);      // index 15, generation 0
  EXPECT_EQ(pool.lookup(H{(1u << 4) | 15u}), nullptr);  // slot 15 never acquired
}

TEST(Pool, StaleHandlesFailAcrossManyGenerations) {
  Pool<int> pool(1);
  std::vector<Pool<int>::Handle> old;
  for (int i = 0; i < 1000; ++i) {
    int* p = pool.acquire(i);
    ASSERT_NE(p, nullptr);
    old.push_back(pool.handle_of(p));
    pool.release(p);
  }
  int* p = pool.acquire(-1);
  ASSERT_NE(p, nullptr);
  for (auto h : old) EXPECT_EQ(pool.lookup(h), nullptr);
  EXPECT_EQ(pool.lookup(pool.handle_of(p)), p);
  pool.release(p);
}

TEST(Pool, OwnsOnlyItsLiveObjects) {
  Pool<int> a(2), b(2);
  int* x = a.acquire(1);
  int outside = 0;
  EXPECT_TRUE(a.owns(x));
  EXPECT_FALSE(b.owns(x));
  EXPECT_FALSE(a.owns(&outside));
  EXPECT_EQ(b.handle_of(x), Pool<int>::invalid_handle);
  a.release(x);
  EXPECT_FALSE(a.owns(x));
  EXPECT_EQ(a.handle_of(x), Pool<int>::invalid_handle);
}

TEST(Pool, RejectsBadCapacities) {
  EXPECT_THROW(Pool<int>(0), std::invalid_argument);
  EXPECT_THROW(Pool<int>(Pool<int>::max_capacity + 1), std::invalid_argument);
  // Refused before any field is derived from it (a shift by 40 index bits).
  EXPECT_THROW(Pool<int>(std::size_t{1} << 40), std::invalid_argument);
}

}  // namespace
