// The registry's own tests. Only these set environment variables (with names
// no other test uses), because the environment layer is what they test;
// every other test pushes and pops config through ScopedSet.
#include "base/config.hpp"
#include "base/log.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <limits>

namespace {

namespace config = pier::config;
using pier::Status;

inline const config::IntKey cells{"TESTCFG_CELLS", 64, 1, 4096, "cells per queue"};
inline const config::IntKey eager{"TESTCFG_EAGER", 16384,         0,
                                  1 << 30,         "eager limit", config::Type::size};
inline const config::BoolKey spin{"TESTCFG_SPIN", false, "spin before sleeping"};
inline const config::StringKey iface{"TESTCFG_IFACE", "lo", "interface"};

/// Sets an environment variable for one test; the config tests are the only
/// place that does, since the environment layer is what they test.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) { setenv(name, value, 1); }
  ~ScopedEnv() { unsetenv(name_); }

 private:
  const char* name_;
};

config::Entry entry(std::string_view name) {
  for (auto& e : config::dump())
    if (e.name == name) return e;
  ADD_FAILURE() << name << " not in the dump";
  return {};
}

TEST(Config, DefaultsWhenNothingIsSet) {
  EXPECT_EQ(cells.get(), 64);
  EXPECT_EQ(eager.get(), 16384);
  EXPECT_FALSE(spin.get());
  EXPECT_EQ(iface.get(), "lo");
  auto e = entry("PIER_TESTCFG_CELLS");
  EXPECT_EQ(e.source, config::Source::default_value);
  EXPECT_EQ(e.value, "64");
  EXPECT_EQ(e.default_value, "64");
}

TEST(Config, ApiBeatsEnvironmentBeatsDefault) {
  ScopedEnv env("PIER_TESTCFG_CELLS", "128");
  EXPECT_EQ(cells.get(), 128);
  EXPECT_EQ(entry("PIER_TESTCFG_CELLS").source, config::Source::environment);
  {
    config::ScopedSet set("TESTCFG_CELLS", "256");
    ASSERT_EQ(set.status(), Status::ok);
    EXPECT_EQ(cells.get(), 256);
    EXPECT_EQ(entry("PIER_TESTCFG_CELLS").source, config::Source::api);
  }
  EXPECT_EQ(cells.get(), 128);
  EXPECT_EQ(config::unset("TESTCFG_CELLS"), Status::ok);
  EXPECT_EQ(cells.get(), 128);
}

TEST(Config, ScopedSetRestoresThePreviousApiValue) {
  ASSERT_EQ(config::set("PIER_TESTCFG_CELLS", "10"), Status::ok);  // prefix accepted
  {
    config::ScopedSet inner("TESTCFG_CELLS", "20");
    EXPECT_EQ(cells.get(), 20);
  }
  EXPECT_EQ(cells.get(), 10);
  EXPECT_EQ(config::unset("TESTCFG_CELLS"), Status::ok);
  EXPECT_EQ(cells.get(), 64);
}

TEST(Config, SetRejectsUnknownKeysAndBadValues) {
  EXPECT_EQ(config::set("TESTCFG_NOPE", "1"), Status::not_found);
  EXPECT_EQ(config::unset("TESTCFG_NOPE"), Status::not_found);
  EXPECT_EQ(config::get_text("TESTCFG_NOPE").status(), Status::not_found);
  EXPECT_EQ(config::set("TESTCFG_CELLS", "0"), Status::invalid_argument);     // below min
  EXPECT_EQ(config::set("TESTCFG_CELLS", "4097"), Status::invalid_argument);  // above max
  EXPECT_EQ(config::set("TESTCFG_CELLS", "12x"), Status::invalid_argument);
  EXPECT_EQ(config::set("TESTCFG_CELLS", ""), Status::invalid_argument);
  EXPECT_EQ(config::set("TESTCFG_CELLS", "99999999999999999999"), Status::invalid_argument);
  EXPECT_EQ(config::set("TESTCFG_SPIN", "maybe"), Status::invalid_argument);
  config::ScopedSet bad("TESTCFG_CELLS", "-3");
  EXPECT_EQ(bad.status(), Status::invalid_argument);
  EXPECT_EQ(cells.get(), 64);
}

TEST(Config, BooleansAcceptTheUsualSpellings) {
  for (const char* yes : {"1", "true", "yes", "on", "TRUE", "On"}) {
    config::ScopedSet s("TESTCFG_SPIN", yes);
    ASSERT_EQ(s.status(), Status::ok) << yes;
    EXPECT_TRUE(spin.get()) << yes;
  }
  for (const char* no : {"0", "false", "no", "off", "False", "NO"}) {
    config::ScopedSet s("TESTCFG_SPIN", no);
    ASSERT_EQ(s.status(), Status::ok) << no;
    EXPECT_FALSE(spin.get()) << no;
  }
}

TEST(Config, SizesAcceptSuffixes) {
  struct Case {
    const char* text;
    std::int64_t value;
  };
  for (auto [text, value] : {Case{"4096", 4096}, Case{"4k", 4096}, Case{"4K", 4096},
                             Case{"2m", 2 << 20}, Case{"1g", 1 << 30}, Case{" 8k ", 8192}}) {
    config::ScopedSet s("TESTCFG_EAGER", text);
    ASSERT_EQ(s.status(), Status::ok) << text;
    EXPECT_EQ(eager.get(), value) << text;
  }
  EXPECT_EQ(config::set("TESTCFG_EAGER", "2g"), Status::invalid_argument);  // above 1 GiB
  EXPECT_EQ(config::set("TESTCFG_EAGER", "k"), Status::invalid_argument);
  EXPECT_EQ(config::set("TESTCFG_EAGER", "1t"), Status::invalid_argument);
  EXPECT_EQ(config::set("TESTCFG_EAGER", "9999999999g"), Status::invalid_argument);
  // Plain integers take no suffix.
  EXPECT_EQ(config::set("TESTCFG_CELLS", "1k"), Status::invalid_argument);
}

TEST(Config, BadEnvironmentValueIsReportedOnceAndIgnored) {
  ScopedEnv env("PIER_TESTCFG_CELLS", "99999");
  std::uint64_t warnings = pier::log::warn_count();
  testing::internal::CaptureStderr();
  EXPECT_EQ(cells.get(), 64);
  EXPECT_EQ(cells.get(), 64);
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(pier::log::warn_count(), warnings + 1);
  EXPECT_NE(err.find("PIER_TESTCFG_CELLS=99999"), std::string::npos) << err;
  EXPECT_NE(err.find("[1, 4096]"), std::string::npos) << err;
  EXPECT_EQ(entry("PIER_TESTCFG_CELLS").source, config::Source::default_value);
}

TEST(Config, UnparsableEnvironmentBooleanFallsBack) {
  ScopedEnv env("PIER_TESTCFG_SPIN", "sometimes");
  testing::internal::CaptureStderr();
  EXPECT_FALSE(spin.get());
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("PIER_TESTCFG_SPIN=sometimes"), std::string::npos) << err;
}

TEST(Config, UnknownEnvironmentSuggestsTheClosestKey) {
  ScopedEnv typo("PIER_TESTCFG_CELS", "8");
  ScopedEnv junk("PIER_ZZZZZZZZZZZZZZZZZZZZZZZZZZ", "1");
  ScopedEnv real("PIER_TESTCFG_IFACE", "eth0");
  auto unknown = config::unknown_environment();
  auto has = [&](std::string_view text) {
    return std::find(unknown.begin(), unknown.end(), text) != unknown.end();
  };
  EXPECT_TRUE(has("PIER_TESTCFG_CELS is unknown; did you mean PIER_TESTCFG_CELLS?"));
  EXPECT_TRUE(has("PIER_ZZZZZZZZZZZZZZZZZZZZZZZZZZ is unknown"));
  for (const auto& line : unknown) EXPECT_NE(line.rfind("PIER_TESTCFG_IFACE", 0), 0u) << line;
}

TEST(Config, ReservedPrefixesAreNotUnknown) {
  ScopedEnv launcher("PIER_TESTRUN_RANK", "3");
  config::reserve_environment("PIER_TESTRUN_");
  for (const auto& line : config::unknown_environment())
    EXPECT_EQ(line.find("PIER_TESTRUN_RANK"), std::string::npos) << line;
}

TEST(Config, ClosestKeyByEditDistance) {
  EXPECT_EQ(config::closest_key("TESTCFG_CELS"), "PIER_TESTCFG_CELLS");
  EXPECT_EQ(config::closest_key("PIER_TESTCFG_EAGRE"), "PIER_TESTCFG_EAGER");
  EXPECT_EQ(config::closest_key("TESTCFG_SPIN"), "PIER_TESTCFG_SPIN");
  EXPECT_EQ(config::closest_key("COMPLETELY_DIFFERENT_THING_AT_ALL"), "");
}

TEST(Config, DumpListsEveryKeySortedWithAllFields) {
  auto entries = config::dump();
  EXPECT_TRUE(std::is_sorted(entries.begin(), entries.end(),
                             [](auto& a, auto& b) { return a.name < b.name; }));
  auto e = entry("PIER_TESTCFG_EAGER");
  EXPECT_EQ(e.type, config::Type::size);
  EXPECT_EQ(e.bounds, "[0, 1073741824]");
  EXPECT_EQ(e.help, "eager limit");
  EXPECT_EQ(entry("PIER_TESTCFG_SPIN").bounds, "");
  EXPECT_EQ(entry("PIER_TESTCFG_SPIN").value, "false");
  EXPECT_EQ(entry("PIER_TESTCFG_IFACE").type, config::Type::string);
  EXPECT_EQ(entry("PIER_LOG").default_value, "warn");  // logging's own key
  EXPECT_EQ(*config::get_text("TESTCFG_IFACE"), "lo");
}

TEST(Config, LocalKeysUnregisterWhenDestroyed) {
  {
    config::IntKey local{"TESTCFG_LOCAL", 5, 0, 10, "a key with a scope"};
    EXPECT_EQ(local.get(), 5);
    EXPECT_EQ(*config::get_text("TESTCFG_LOCAL"), "5");
  }
  EXPECT_EQ(config::get_text("TESTCFG_LOCAL").status(), Status::not_found);
}

TEST(Config, UnboundedIntegersHaveNoBoundsText) {
  config::IntKey wide{"TESTCFG_WIDE", -1, std::numeric_limits<std::int64_t>::min(),
                      std::numeric_limits<std::int64_t>::max(), "anything"};
  EXPECT_EQ(entry("PIER_TESTCFG_WIDE").bounds, "");
  EXPECT_EQ(config::set("TESTCFG_WIDE", "-9223372036854775808"), Status::ok);
  EXPECT_EQ(wide.get(), std::numeric_limits<std::int64_t>::min());
  EXPECT_EQ(config::unset("TESTCFG_WIDE"), Status::ok);
}

TEST(Config, TypeAndSourceNames) {
  EXPECT_EQ(config::to_string(config::Type::size), "size");
  EXPECT_EQ(config::to_string(config::Type::boolean), "boolean");
  EXPECT_EQ(config::to_string(config::Source::environment), "environment");
  EXPECT_EQ(config::to_string(config::Source::default_value), "default");
}

}  // namespace
