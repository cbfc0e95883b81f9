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

TEST_P(PortJob, RulesAcrossTwoProcesses) {
  Outcome o = run("rules", 2, {"PIER_PORT_SEND_TIMEOUT_MS=3000"});
  EXPECT_FALSE(o.timed_out);
  EXPECT_EQ(o.exit_code, 0) << o.output;
}

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
