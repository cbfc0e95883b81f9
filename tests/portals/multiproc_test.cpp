// Portals across processes: portals_job under pier-run over shm and tcp,
// logical and physical. basic: the target rank makes no pier call while the
// others put, get and run atomics on it (the progress thread completes
// them). unexpected: puts land on an overflow entry and are claimed later as
// PUT_OVERFLOW events (R-U1, R-U2). iovec: puts and gets across iovec
// elements of 1, 544, 545 bytes, 64 KiB and 1 MiB on both sides (R-O7).
// incast: the other ranks burst puts at rank 0 beyond its message pool;
// every one lands. silent: basic, with the initiators starting only once
// the target's helper thread sleeps in the core.
#include <gtest/gtest.h>

#include <ostream>
#include <string>

#include "run_command.hpp"

namespace pier::portals::test {
namespace {

struct Cell {
  const char* drivers;
  const char* addressing;
  int ranks;
  const char* mode = "basic";  ///< portals_job's second argument
  const char* env = nullptr;   ///< one more NAME=value for every rank
};

/// Shown by ctest and gtest instead of the cell's raw bytes.
void PrintTo(const Cell& c, std::ostream* os) {
  *os << c.drivers << ' ' << c.addressing << ' ' << c.mode << " on " << c.ranks << " ranks";
}

class PortalsJob : public ::testing::TestWithParam<Cell> {};

TEST_P(PortalsJob, EveryRankCompletes) {
  const Cell& c = GetParam();
  multiproc::RunSpec spec;
  spec.argv = {PIER_RUN_PATH,  "-n", std::to_string(c.ranks), "--timeout", "60",
               "--kill-grace", "2",  PORTALS_JOB_PATH,        c.addressing};
  // The mode reaches the job: without it every cell ran the basic job.
  if (std::string(c.mode) != "basic") spec.argv.emplace_back(c.mode);
  spec.env = {std::string("PIER_CORE_DRIVERS=") + c.drivers};
  if (c.env != nullptr) spec.env.emplace_back(c.env);
  spec.limit = std::chrono::seconds(90);
  multiproc::Outcome o = multiproc::run_command(spec);
  ASSERT_FALSE(o.timed_out) << o.output;
  EXPECT_EQ(o.exit_code, 0) << o.output;
  for (int r = 0; r < c.ranks; ++r)
    EXPECT_NE(o.output.find("rank " + std::to_string(r) + ": ok"), std::string::npos) << o.output;
  if (std::string(c.mode) == "incast") {
    EXPECT_NE(o.output.find("incast puts landed"), std::string::npos) << o.output;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cells, PortalsJob,
    ::testing::Values(
        Cell{"self,shm", "logical", 3}, Cell{"self,shm", "physical", 2},
        Cell{"self,tcp", "logical", 3}, Cell{"self,tcp", "physical", 2},
        Cell{"self,shm", "logical", 4, "unexpected"}, Cell{"self,tcp", "physical", 4, "unexpected"},
        Cell{"self,shm", "logical", 2, "iovec"}, Cell{"self,shm", "physical", 2, "iovec"},
        Cell{"self,tcp", "logical", 2, "iovec"},
        // Three ranks burst 2000 puts each at rank 0, whose
        // pool holds 16 message states.
        Cell{"self,shm", "logical", 4, "incast", "PIER_LIB_MESSAGES=16"},
        Cell{"self,tcp", "physical", 3, "incast", "PIER_LIB_MESSAGES=16"},
        // A target silent long enough for its helper to sleep
        // in the core before the first connection and put.
        Cell{"self,shm", "logical", 3, "silent"}, Cell{"self,tcp", "physical", 2, "silent"}),
    [](const ::testing::TestParamInfo<Cell>& cell) {
      std::string d = cell.param.drivers;
      return d.substr(d.find(',') + 1) + "_" + cell.param.addressing + "_" + cell.param.mode;
    });

// R-E8 and "never a hang": rank 0's link dies (fault driver) after rank 1's
// request arrived and before its ack left; rank 1's wait ends with
// PTL_NI_UNDELIVERABLE.
class PortalsDeadLink : public ::testing::TestWithParam<const char*> {};

TEST_P(PortalsDeadLink, R_E8_AckThatCannotComeEndsUndeliverable) {
  multiproc::RunSpec spec;
  spec.argv = {PIER_RUN_PATH,    "-n",      "2",       "--timeout", "60", "--kill-grace", "2",
               PORTALS_JOB_PATH, "logical", "deadlink"};
  spec.env = {std::string("PIER_CORE_DRIVERS=") + GetParam(), "PORTALS_JOB_RANK0_FAULTS=death@3"};
  spec.limit = std::chrono::seconds(90);
  multiproc::Outcome o = multiproc::run_command(spec);
  ASSERT_FALSE(o.timed_out) << o.output;
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("rank 1: failure reported"), std::string::npos) << o.output;
}

INSTANTIATE_TEST_SUITE_P(Cells, PortalsDeadLink, ::testing::Values("fault:shm", "fault:tcp"),
                         [](const ::testing::TestParamInfo<const char*>& cell) {
                           return std::string(cell.param).substr(6);
                         });

// Peer death through the core's peer_failed: rank 0 exits without PtlFini
// while rank 1's acked put and get wait for answers; rank 1 makes no
// blocking call (PtlEQGet only), with and without its progress thread, and
// both operations must end with PTL_NI_UNDELIVERABLE within 10 s.
struct Death {
  const char* drivers;
  bool helper;
};

class PortalsPeerDeath : public ::testing::TestWithParam<Death> {};

TEST_P(PortalsPeerDeath, AnswersFromADeadPeerEndUndeliverable) {
  multiproc::RunSpec spec;
  spec.argv = {PIER_RUN_PATH,    "-n",      "2",        "--timeout", "60", "--kill-grace", "2",
               PORTALS_JOB_PATH, "logical", "peerdeath"};
  spec.env = {std::string("PIER_CORE_DRIVERS=") + GetParam().drivers,
              std::string("PIER_CAPI_PROGRESS_THREAD=") + (GetParam().helper ? "1" : "0")};
  spec.limit = std::chrono::seconds(90);
  multiproc::Outcome o = multiproc::run_command(spec);
  ASSERT_FALSE(o.timed_out) << o.output;
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("rank 0: exits without PtlFini"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("rank 1: ack and reply undeliverable after"), std::string::npos)
      << o.output;
  EXPECT_NE(o.output.find("rank 1: ok"), std::string::npos) << o.output;
}

INSTANTIATE_TEST_SUITE_P(Cells, PortalsPeerDeath,
                         ::testing::Values(Death{"self,shm", true}, Death{"self,tcp", true},
                                           Death{"self,shm", false}),
                         [](const ::testing::TestParamInfo<Death>& cell) {
                           std::string d = cell.param.drivers;
                           return d.substr(d.find(',') + 1) +
                                  (cell.param.helper ? "_helper" : "_no_helper");
                         });

}  // namespace
}  // namespace pier::portals::test
