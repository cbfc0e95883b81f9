#include "base/log.hpp"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cerrno>
#include <string>

// Defined in log_ceiling_test.cpp, compiled with PIER_LOG_CEILING=2 (warn).
int ceiling_evaluations();

namespace {

namespace log = pier::log;
using log::Level;

/// Starts and ends each test at the default levels, whatever PIER_LOG says.
class Log : public testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(log::configure("warn")); }
  void TearDown() override { ASSERT_TRUE(log::configure("warn")); }
};

TEST_F(Log, DefaultLevelIsWarn) {
  ASSERT_TRUE(log::configure(""));
  EXPECT_TRUE(log::enabled("shm", Level::error));
  EXPECT_TRUE(log::enabled("shm", Level::warn));
  EXPECT_FALSE(log::enabled("shm", Level::info));
  EXPECT_FALSE(log::enabled("shm", Level::off));
}

TEST_F(Log, PerTagLevels) {
  ASSERT_TRUE(log::configure("shm=debug, core=trace"));
  EXPECT_TRUE(log::enabled("shm", Level::debug));
  EXPECT_FALSE(log::enabled("shm", Level::trace));
  EXPECT_TRUE(log::enabled("core", Level::trace));
  EXPECT_FALSE(log::enabled("core", Level::data));
  EXPECT_TRUE(log::enabled("tcp", Level::warn));  // others keep the default
  EXPECT_FALSE(log::enabled("tcp", Level::info));
  EXPECT_FALSE(log::enabled("sh", Level::debug));  // no prefix matching
  EXPECT_FALSE(log::enabled("shmx", Level::debug));
}

TEST_F(Log, StarAndBareLevelSetTheDefault) {
  ASSERT_TRUE(log::configure("*=info"));
  EXPECT_TRUE(log::enabled("anything", Level::info));
  EXPECT_FALSE(log::enabled("anything", Level::debug));
  ASSERT_TRUE(log::configure("error,tcp=data"));
  EXPECT_FALSE(log::enabled("shm", Level::warn));
  EXPECT_TRUE(log::enabled("tcp", Level::data));
  ASSERT_TRUE(log::configure("off"));
  EXPECT_FALSE(log::enabled("shm", Level::error));
  ASSERT_TRUE(log::configure("shm=info,shm=error"));  // the last mention wins
  EXPECT_FALSE(log::enabled("shm", Level::warn));
  ASSERT_TRUE(log::configure("DEBUG"));  // case does not matter
  EXPECT_TRUE(log::enabled("x", Level::debug));
}

TEST_F(Log, BadSpecChangesNothing) {
  ASSERT_TRUE(log::configure("shm=debug"));
  EXPECT_FALSE(log::configure("shm=loud"));
  EXPECT_FALSE(log::configure("verbose"));
  EXPECT_FALSE(log::configure("=debug"));
  EXPECT_FALSE(log::configure("a_tag_longer_than_sixteen=debug"));
  std::string many;
  for (int i = 0; i < 40; ++i) many += fmt::format("t{}=info,", i);
  EXPECT_FALSE(log::configure(many));
  EXPECT_TRUE(log::enabled("shm", Level::debug));
  EXPECT_FALSE(log::enabled("t1", Level::info));
}

TEST_F(Log, LongTagsUseTheDefault) {
  ASSERT_TRUE(log::configure("info"));
  EXPECT_TRUE(log::enabled("a_tag_longer_than_sixteen", Level::info));
  EXPECT_FALSE(log::enabled("a_tag_longer_than_sixteen", Level::debug));
}

TEST_F(Log, WriteFormatsOneLineAndCounts) {
  std::uint64_t errors = log::error_count(), warnings = log::warn_count();
  testing::internal::CaptureStderr();
  PIER_LOG(error, "shm", "cannot map {}: {}", "/pier-42", "no space left on device");
  PIER_LOG(warn, "tcp", "peer {} slow", 3);
  PIER_LOG(info, "tcp", "not shown at warn");
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(err, fmt::format("pier[{0}] shm error: cannot map /pier-42: no space left on device\n"
                             "pier[{0}] tcp warn: peer 3 slow\n",
                             getpid()));
  EXPECT_EQ(log::error_count(), errors + 1);
  EXPECT_EQ(log::warn_count(), warnings + 1);
}

TEST_F(Log, ArgumentsAreNotEvaluatedWhenDisabled) {
  ASSERT_TRUE(log::configure("warn"));
  int evaluated = 0;
  auto count = [&] { return ++evaluated; };
  PIER_LOG(debug, "shm", "{}", count());
  EXPECT_EQ(evaluated, 0);
  testing::internal::CaptureStderr();
  PIER_LOG(warn, "shm", "{}", count());
  testing::internal::GetCapturedStderr();
  EXPECT_EQ(evaluated, 1);
}

TEST_F(Log, WritePreservesErrno) {
  testing::internal::CaptureStderr();
  errno = EAGAIN;
  PIER_LOG(error, "test", "errno must survive");
  int after = errno;
  testing::internal::GetCapturedStderr();
  EXPECT_EQ(after, EAGAIN);
}

TEST_F(Log, LevelNames) {
  EXPECT_EQ(log::to_string(Level::off), "off");
  EXPECT_EQ(log::to_string(Level::warn), "warn");
  EXPECT_EQ(log::to_string(Level::data), "data");
}

TEST_F(Log, CompileTimeCeilingRemovesLevelsAboveIt) {
  ASSERT_TRUE(log::configure("data"));  // the runtime level would let everything through
  testing::internal::CaptureStderr();
  int evaluated = ceiling_evaluations();
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(evaluated, 2);  // error and warn only
  EXPECT_NE(err.find("ceiling warn: kept"), std::string::npos) << err;
  EXPECT_EQ(err.find("stripped"), std::string::npos) << err;
}

}  // namespace
