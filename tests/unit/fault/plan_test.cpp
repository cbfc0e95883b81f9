// Unit tests of the fault driver's plan (parsing, deterministic decisions)
// and of its registry entry (inner driver lookup, configuration keys).
#include <gtest/gtest.h>

#include <pier/driver.hpp>

#include "base/config.hpp"
#include "drivers/fault/fault.hpp"
#include "loopback.hpp"

#include <chrono>
#include <string>
#include <vector>

namespace pier::drivers::fault {
namespace {

using namespace std::chrono_literals;

// --- the plan ---------------------------------------------------------------

TEST(FaultPlan, ParsesTheIssueExample) {
  Result<Plan> p = parse_plan(
      "drop=0.01,delay=0.05,dup=0.01,reorder=0.01,truncate@5,corrupt@7,"
      "no_resource=0.1,connect_fail@1,death@100");
  ASSERT_TRUE(p.has_value());
  EXPECT_DOUBLE_EQ(p->probability[static_cast<int>(Fault::drop)], 0.01);
  EXPECT_DOUBLE_EQ(p->probability[static_cast<int>(Fault::no_resource)], 0.1);
  EXPECT_EQ(p->at[static_cast<int>(Fault::truncate)], std::vector<std::uint64_t>{5});
  EXPECT_EQ(p->at[static_cast<int>(Fault::death)], std::vector<std::uint64_t>{100});
  EXPECT_FALSE(p->empty());
}

TEST(FaultPlan, FormatRoundTrips) {
  Plan plan;
  plan.seed = 42;
  plan.set(Fault::dup, 0.125).fire_at(Fault::drop, 3).fire_at(Fault::drop, 9);
  plan.delay_packets = 5;
  plan.delay_time = 0us;
  plan.late_polls = 7;
  plan.track = TrackFilter::large;
  plan.slots = 3;
  plan.slot_bytes = 128;
  Result<Plan> back = parse_plan(format_plan(plan));
  ASSERT_TRUE(back.has_value()) << format_plan(plan);
  EXPECT_EQ(back->seed, 42u);
  EXPECT_EQ(back->probability, plan.probability);
  EXPECT_EQ(back->at, plan.at);
  EXPECT_EQ(back->delay_packets, 5u);
  EXPECT_EQ(back->delay_time, 0us);
  EXPECT_EQ(back->late_polls, 7u);
  EXPECT_EQ(back->track, TrackFilter::large);
  EXPECT_EQ(back->slots, 3u);
  EXPECT_EQ(back->slot_bytes, 128u);
}

TEST(FaultPlan, RejectsBadText) {
  for (const char* text :
       {"drop=2", "drop=-0.1", "drop@0", "drop@x", "bogus=1", "drop", "delay_packets=0",
        "late_polls=0", "track=medium", "slots=0", "dup=0.5x"}) {
    std::string error;
    EXPECT_EQ(parse_plan(text, &error).status(), Status::invalid_argument) << text;
    EXPECT_FALSE(error.empty()) << text;
  }
  EXPECT_TRUE(parse_plan("").has_value());
  EXPECT_TRUE(parse_plan(" drop = 0.5 , dup@2 ,").has_value());
  EXPECT_TRUE(parse_plan("").value().empty());
}

TEST(FaultPlan, TrackFilter) {
  Plan p = *parse_plan("drop=1,track=small");
  EXPECT_TRUE(p.covers(driver::Track::small));
  EXPECT_FALSE(p.covers(driver::Track::large));
}

TEST(FaultInjector, SameSeedSameDecisionsOtherSeedOthers) {
  Plan a = *parse_plan("seed=7,drop=0.25");
  Plan b = a;
  Plan c = *parse_plan("seed=8,drop=0.25");
  Injector ia(a), ib(b), ic(c);
  int fired = 0, differ = 0;
  for (std::uint64_t stream = 0; stream < 4; ++stream) {
    for (std::uint64_t n = 1; n <= 2500; ++n) {
      const bool x = ia.fires(Fault::drop, stream, n);
      EXPECT_EQ(x, ib.fires(Fault::drop, stream, n));
      fired += x;
      differ += x != ic.fires(Fault::drop, stream, n);
      EXPECT_FALSE(ia.fires(Fault::dup, stream, n));  // no rule for dup
    }
  }
  // 10000 draws at p = 0.25; the bounds are far outside any plausible spread.
  EXPECT_GT(fired, 2000);
  EXPECT_LT(fired, 3000);
  EXPECT_GT(differ, 1000);
}

TEST(FaultInjector, ProbabilitiesStartAtFrom) {
  Plan p = *parse_plan("drop=1,dup@2,from=5");
  Injector inj(p);
  for (std::uint64_t n = 1; n <= 10; ++n) {
    EXPECT_EQ(inj.fires(Fault::drop, 0, n), n >= 5) << n;
    EXPECT_EQ(inj.fires(Fault::dup, 0, n), n == 2) << n;  // "@N" ignores from
  }
  EXPECT_EQ(parse_plan(format_plan(p))->from, 5u);
  EXPECT_EQ(parse_plan("from=0").status(), Status::invalid_argument);
}

TEST(FaultInjector, FixedNumbersFireExactly) {
  Plan p = *parse_plan("truncate@5,truncate@7");
  Injector inj(p);
  for (std::uint64_t n = 1; n <= 20; ++n)
    EXPECT_EQ(inj.fires(Fault::truncate, 0, n), n == 5 || n == 7) << n;
}

// --- the registry entry and the configuration -----------------------------

bool self_built() {
  for (const driver::DriverEntry& e : driver::builtin_drivers())
    if (e.name == "self") return true;
  return false;
}

TEST(FaultEntry, NeedsAKnownInnerDriver) {
  EXPECT_EQ(entry().name, "fault");
  EXPECT_EQ(entry().make("").status(), Status::invalid_argument);
  EXPECT_EQ(entry().make("no_such_driver").status(), Status::not_found);
}

TEST(FaultEntry, WrapsAWrapper) {
  if (!self_built()) GTEST_SKIP() << "self driver is not built";
  Result<std::unique_ptr<driver::Context>> c = entry().make("fault:self");
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ((*c)->name(), "fault");
  Result<driver::Properties> p = (*c)->properties({});
  ASSERT_TRUE(p.has_value());
  EXPECT_TRUE(p->caps.recv_post);
  ASSERT_TRUE((*c)->init().has_value());
  EXPECT_EQ((*c)->close(), Status::ok);
}

TEST(FaultEntry, ReadsThePlanFromTheConfiguration) {
  if (!self_built()) GTEST_SKIP() << "self driver is not built";
  config::ScopedSet plan("FAULT_PLAN", "dup@1,delay_packets=4");
  config::ScopedSet seed("FAULT_SEED", "99");
  ASSERT_EQ(plan.status(), Status::ok);
  Result<std::unique_ptr<driver::Context>> c = entry().make("self");
  ASSERT_TRUE(c.has_value());
  const auto* fc = dynamic_cast<const Context*>(c->get());
  ASSERT_NE(fc, nullptr);
  EXPECT_EQ(fc->plan().seed, 99u);
  EXPECT_EQ(fc->plan().delay_packets, 4u);
  EXPECT_EQ(fc->plan().at[static_cast<int>(Fault::dup)], std::vector<std::uint64_t>{1});
}

TEST(FaultEntry, RejectsABadConfiguredPlan) {
  if (!self_built()) GTEST_SKIP() << "self driver is not built";
  config::ScopedSet plan("FAULT_PLAN", "dup=7");
  EXPECT_EQ(entry().make("self").status(), Status::invalid_argument);
}

TEST(FaultEntry, InstallOnlyBeforeInitAndOnlyOnFaultContexts) {
  auto c = wrap(std::make_unique<testing::LoopContext>(), Plan{});
  EXPECT_EQ(install(*c, *parse_plan("drop@1")), Status::ok);
  ASSERT_TRUE(c->properties({}).has_value());
  ASSERT_TRUE(c->init().has_value());
  EXPECT_EQ(install(*c, Plan{}), Status::in_use);
  testing::LoopContext plain;
  EXPECT_EQ(install(plain, Plan{}), Status::invalid_argument);
  EXPECT_EQ(stats(plain).status(), Status::invalid_argument);
  EXPECT_EQ(c->close(), Status::ok);
}

}  // namespace
}  // namespace pier::drivers::fault
