#include "base/mutex.hpp"

#include <gtest/gtest.h>

#include <thread>

namespace {

using pier::base::LockGuard;
using pier::base::Mutex;

TEST(Mutex, GuardExcludesOtherThreads) {
  Mutex mutex;
  bool other_got_it = true;
  {
    LockGuard lock(mutex);
    std::thread other([&] {
      other_got_it = false;
      if (mutex.try_lock()) {
        other_got_it = true;
        mutex.unlock();
      }
    });
    other.join();
  }
  EXPECT_FALSE(other_got_it);
  bool released = false;  // at the end of the scope
  if (mutex.try_lock()) {
    released = true;
    mutex.unlock();
  }
  EXPECT_TRUE(released);
}

}  // namespace
