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

INSTANTIATE_TEST_SUITE_P(Drivers, PortJob, ::testing::Values("shm", "tcp"),
                         [](const auto& cell) { return cell.param; });

}  // namespace
}  // namespace pier::multiproc
