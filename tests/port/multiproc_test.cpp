// The port layer across processes: port_job scenarios started by pier-run
// over shm and tcp (the driver is in the test name). pier-run kills a job
// that outlives its limit, so no test can hang.
#include <gtest/gtest.h>

#include <string>

#include "run_command.hpp"

namespace pier::multiproc {
namespace {

class PortJob : public ::testing::TestWithParam<std::string> {
 protected:
  Outcome run(const std::string& scenario, int ranks, std::vector<std::string> env = {}) {
    RunSpec spec;
    spec.argv = {PIER_RUN_PATH, "-n", std::to_string(ranks), PORT_JOB_PATH, scenario};
    spec.limit = std::chrono::seconds(120);
    env.push_back("PIER_CORE_DRIVERS=" + GetParam());
    spec.env = env;
    return run_command(spec);
  }
};

// One test per GM rule of ../shared/REFERENCE.md §5, each a port_job
// "rules" run of two processes doing only that rule's part (plus the
// hello and bye every run has: the hello checks G2's tokens, the server's
// blocking receive G9, and every receive G5's tag).
class PortRule : public PortJob {
 protected:
  void expect_rule(const char* rule) {
    Outcome o = run_rule(rule);
    EXPECT_FALSE(o.timed_out);
    EXPECT_EQ(o.exit_code, 0) << o.output;
  }
  Outcome run_rule(const char* rule) {
    RunSpec spec;
    spec.argv = {PIER_RUN_PATH, "-n", "2", PORT_JOB_PATH, "rules", rule};
    spec.limit = std::chrono::seconds(120);
    spec.env = {"PIER_CORE_DRIVERS=" + GetParam(), "PIER_PORT_SEND_TIMEOUT_MS=3000"};
    return run_command(spec);
  }
};

TEST_P(PortRule, G1_EachSendTakesATokenThatComesBackWithItsCallback) {
  expect_rule("G1");
}
TEST_P(PortRule, G2_EachBufferTakesAReceiveTokenThatComesBackWithItsEvent) {
  expect_rule("G2");
}
TEST_P(PortRule, G3_CallbacksRunOnlyInsideUnknown) {
  expect_rule("G3");
}
TEST_P(PortRule, G4_AMessageLandsInTheBufferOfItsSizeClass) {
  expect_rule("G4");
}
TEST_P(PortRule, G5_ABufferComesBackWithItsTag) {
  expect_rule("G5");
}
TEST_P(PortRule, G6_OrderPerPriorityAndPortPair) {
  expect_rule("G6");
}
TEST_P(PortRule, G7_MessagesPutsAndGetsArriveIntact) {
  expect_rule("G7");
}
TEST_P(PortRule, G8_ASendWithNoMatchingBufferTimesOutRatherThanHangs) {
  expect_rule("G8");
}
TEST_P(PortRule, G9_ABlockingReceiveWakesForAMessage) {
  expect_rule("G9");
}
TEST_P(PortRule, G10_ResumeAndDropReenableAFailedConnection) {
  expect_rule("G10");
}

INSTANTIATE_TEST_SUITE_P(Drivers, PortRule, ::testing::Values("shm", "tcp"),
                         [](const auto& cell) { return cell.param; });

TEST_P(PortJob, ForwardingOverThreeProcessesOnHighPriorityNeverDeadlocks) {
  Outcome o = run("forward", 3);
  EXPECT_FALSE(o.timed_out);
  EXPECT_EQ(o.exit_code, 0) << o.output;
}

TEST_P(PortJob, DeadTargetNodeIsReportedUnreachableOnce) {
  Outcome o = run("death", 2);
  EXPECT_FALSE(o.timed_out);
  EXPECT_EQ(o.exit_code, 0) << o.output;
}

TEST_P(PortJob, ANodeWithEveryPortClosedStillAnswersPortClosed) {
  Outcome o = run("idle", 2, {"PIER_PORT_SEND_TIMEOUT_MS=20000"});
  EXPECT_FALSE(o.timed_out);
  EXPECT_EQ(o.exit_code, 0) << o.output;
}

// An MPI-and-SHMEM kind of program: Portals puts one way, port messages
// the other, in one process per rank (both_job.cpp).
TEST_P(PortJob, PortsAndPortalsWorkSideBySideInOneProcess) {
  RunSpec spec;
  spec.argv = {PIER_RUN_PATH, "-n", "2", BOTH_JOB_PATH};
  spec.limit = std::chrono::seconds(120);
  spec.env = {"PIER_CORE_DRIVERS=" + GetParam()};
  Outcome o = run_command(spec);
  EXPECT_FALSE(o.timed_out);
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("rank 0: ok"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("rank 1: ok"), std::string::npos) << o.output;
}

INSTANTIATE_TEST_SUITE_P(Drivers, PortJob, ::testing::Values("shm", "tcp"),
                         [](const auto& cell) { return cell.param; });

}  // namespace
}  // namespace pier::multiproc
