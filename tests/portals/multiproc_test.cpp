// Portals across processes: portals_job under pier-run over shm and tcp,
// logical and physical. The target rank makes no pier call while the others
// put, get and run atomics on it (the progress thread completes them).
#include <gtest/gtest.h>

#include "run_command.hpp"

namespace pier::portals::test {
namespace {

struct Cell {
  const char* drivers;
  const char* addressing;
  int ranks;
};

class PortalsJob : public ::testing::TestWithParam<Cell> {};

TEST_P(PortalsJob, PutGetAtomicsCompleteWithoutTargetCalls) {
  const Cell& c = GetParam();
  multiproc::RunSpec spec;
  spec.argv = {PIER_RUN_PATH,  "-n", std::to_string(c.ranks), "--timeout", "60",
               "--kill-grace", "2",  PORTALS_JOB_PATH,        c.addressing};
  spec.env = {std::string("PIER_CORE_DRIVERS=") + c.drivers};
  spec.limit = std::chrono::seconds(90);
  multiproc::Outcome o = multiproc::run_command(spec);
  ASSERT_FALSE(o.timed_out) << o.output;
  EXPECT_EQ(o.exit_code, 0) << o.output;
  for (int r = 0; r < c.ranks; ++r)
    EXPECT_NE(o.output.find("rank " + std::to_string(r) + ": ok"), std::string::npos) << o.output;
}

INSTANTIATE_TEST_SUITE_P(Cells, PortalsJob,
                         ::testing::Values(Cell{"self,shm", "logical", 3},
                                           Cell{"self,shm", "physical", 2},
                                           Cell{"self,tcp", "logical", 3},
                                           Cell{"self,tcp", "physical", 2}),
                         [](const ::testing::TestParamInfo<Cell>& cell) {
                           std::string d = cell.param.drivers;
                           return d.substr(d.find(',') + 1) + "_" + cell.param.addressing;
                         });

}  // namespace
}  // namespace pier::portals::test
