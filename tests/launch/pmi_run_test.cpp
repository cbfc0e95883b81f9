// tests/launch: pier-run serving PMI-1 and PMI-2 to an independent client
// (pmi_client.c), 2 to 4 ranks, and the failures a PMI job can meet.
#include "run_command.hpp"

#include <gtest/gtest.h>
#include <chrono>

namespace pier::multiproc {
namespace {

bool has(const Outcome& o, const std::string& text) {
  return o.output.find(text) != std::string::npos;
}

int count(const Outcome& o, const std::string& text) {
  int n = 0;
  for (std::size_t at = o.output.find(text); at != std::string::npos;
       at = o.output.find(text, at + 1))
    ++n;
  return n;
}

Outcome run(std::vector<std::string> client_args, int ranks) {
  RunSpec spec;
  spec.argv = {PIER_RUN_PATH, "-n", std::to_string(ranks), "--timeout", "60", PMI_CLIENT_PATH};
  spec.argv.insert(spec.argv.end(), client_args.begin(), client_args.end());
  spec.limit = std::chrono::seconds(90);
  return run_command(spec);
}

class PmiRanks : public ::testing::TestWithParam<int> {};

TEST_P(PmiRanks, Pmi1ExchangeReachesEveryRank) {
  const Outcome o = run({"v1"}, GetParam());
  ASSERT_FALSE(o.timed_out) << o.output;
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_EQ(count(o, ": v1 ok, size " + std::to_string(GetParam())), GetParam()) << o.output;
}

TEST_P(PmiRanks, Pmi2ExchangeReachesEveryRank) {
  const Outcome o = run({"v2"}, GetParam());
  ASSERT_FALSE(o.timed_out) << o.output;
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_EQ(count(o, ": v2 ok, size " + std::to_string(GetParam())), GetParam()) << o.output;
}

TEST_P(PmiRanks, Pmi1NameServiceAndRefusedSpawn) {
  const Outcome o = run({"names1"}, GetParam());
  ASSERT_FALSE(o.timed_out) << o.output;
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_EQ(count(o, ": names v1 ok"), GetParam()) << o.output;
  EXPECT_TRUE(has(o, "pmi rank 0: spawn refused: spawn_is_not_supported_by_pier-run")) << o.output;
  EXPECT_TRUE(has(o, "pier-run: rank 0 asked PMI to spawn 2 processes of /bin/true")) << o.output;
}

TEST_P(PmiRanks, Pmi2NameServiceAndRefusedSpawn) {
  const Outcome o = run({"names2"}, GetParam());
  ASSERT_FALSE(o.timed_out) << o.output;
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_EQ(count(o, ": names v2 ok"), GetParam()) << o.output;
  EXPECT_TRUE(has(o, "pmi rank 0: spawn refused: spawn is not supported by pier-run")) << o.output;
}

/// A rank that sends PMI requests and never reads the answers: pier-run
/// queued every answer, growing by hundreds of MiB a second. It now stops
/// reading that rank while 1 MiB of answers waits.
TEST(PmiRun, RequestsNobodyAnswersDoNotGrowPierRunWithoutBound) {
  const Outcome o = run({"flood"}, 1);
  ASSERT_FALSE(o.timed_out) << o.output;
  EXPECT_EQ(o.exit_code, 0) << o.output;
  const auto at = o.output.find("pier-run grew by ");
  ASSERT_NE(at, std::string::npos) << o.output;
  const long kib = std::strtol(o.output.c_str() + at + 17, nullptr, 10);
#ifdef __SANITIZE_ADDRESS__
  // ASan keeps freed blocks in quarantine: every answer parsed and sent
  // adds to pier-run's resident size though nothing is queued.
  constexpr long bound_kib = 64 * 1024;
#else
  constexpr long bound_kib = 16 * 1024;
#endif
  EXPECT_LT(kib, bound_kib) << o.output;
}

INSTANTIATE_TEST_SUITE_P(Sizes, PmiRanks, ::testing::Values(2, 3, 4),
                         [](const auto& p) { return "n" + std::to_string(p.param); });

TEST(PmiRun, AbortIsReportedAndEndsTheJob) {
  const Outcome o = run({"abort", "1"}, 3);
  ASSERT_FALSE(o.timed_out) << o.output;
  EXPECT_EQ(o.exit_code, 7) << o.output;
  EXPECT_TRUE(has(o, "pier-run: rank 1 aborted the job through PMI (exit code 7): test abort"))
      << o.output;
  EXPECT_FALSE(has(o, "the barrier completed")) << o.output;
}

/// MPI_Abort(comm, 0): the rank says abort and exits 0. It was not taken
/// for a failure, and the others waited in their barrier until the job's
/// timeout; the abort itself now ends the job, with the code it gave.
TEST(PmiRun, AbortWithExitCodeZeroStillEndsTheJob) {
  RunSpec spec;
  spec.argv = {PIER_RUN_PATH, "-n", "3", "--timeout", "30", PMI_CLIENT_PATH, "abort0", "1"};
  spec.limit = std::chrono::seconds(60);
  const auto t0 = std::chrono::steady_clock::now();
  const Outcome o = run_command(spec);
  const auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_FALSE(o.timed_out) << o.output;
  EXPECT_FALSE(has(o, "timeout after")) << o.output;
  EXPECT_LT(took, std::chrono::seconds(15)) << o.output;
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_TRUE(has(o, "rank 1 aborted the job through PMI (exit code 0): abort with zero"))
      << o.output;
  EXPECT_FALSE(has(o, "the barrier completed")) << o.output;
}

TEST(PmiRun, RankLeavingFailsTheBarrierInsteadOfHanging) {
  const Outcome o = run({"leave", "2"}, 3);
  ASSERT_FALSE(o.timed_out) << o.output;
  EXPECT_EQ(o.exit_code, 3) << o.output;
  EXPECT_TRUE(has(o, "PMI barrier 1 failed: rank 2 closed its PMI connection")) << o.output;
  EXPECT_TRUE(has(o, "barrier failed: connection closed")) << o.output;
}

TEST(PmiRun, RankThatNeverStartsEndsAJobWaitingInABarrier) {
  // Rank 2's program does not exist; ranks 0 and 1 wait in a PMI barrier
  // that can never complete. The job must end at once, saying which rank.
  RunSpec spec;
  spec.argv = {PIER_RUN_PATH,
               "-n",
               "3",
               "--timeout",
               "60",
               "/bin/sh",
               "-c",
               "if [ \"$PMI_RANK\" = 2 ]; then exec /nonexistent/pier-program; fi; exec \"$0\" v1",
               PMI_CLIENT_PATH};
  spec.limit = std::chrono::seconds(90);
  const Outcome o = run_command(spec);
  ASSERT_FALSE(o.timed_out) << o.output;
  EXPECT_EQ(o.exit_code, 127) << o.output;
  EXPECT_TRUE(has(o, "pier-run: rank 2 (pid ")) << o.output;
  EXPECT_TRUE(has(o, ") exited with status 127")) << o.output;
  EXPECT_FALSE(has(o, "timeout after")) << o.output;
}

TEST(PmiRun, ProgramThatIsNotExecutableIsReported) {
  RunSpec spec;
  // A file that exists but cannot be executed: the message carries errno.
  spec.argv = {PIER_RUN_PATH, "-n", "2", "--timeout", "60", PMI_RUN_TEST_SOURCE};
  spec.limit = std::chrono::seconds(90);
  const Outcome o = run_command(spec);
  ASSERT_FALSE(o.timed_out) << o.output;
  EXPECT_EQ(o.exit_code, 127) << o.output;
  EXPECT_TRUE(has(
      o, std::string("rank 0: cannot execute '") + PMI_RUN_TEST_SOURCE + "': Permission denied"))
      << o.output;
}

TEST(PmiRun, SlurmsPmi2LibraryRunsUnchanged) {
  if (std::string(SLURM_PMI2_CLIENT_PATH).empty())
    GTEST_SKIP() << "Slurm's libpmi2 is not installed (Debian: libpmi2-0-dev)";
  RunSpec spec;
  spec.argv = {PIER_RUN_PATH, "-n", "3", "--timeout", "60", SLURM_PMI2_CLIENT_PATH};
  spec.limit = std::chrono::seconds(90);
  const Outcome o = run_command(spec);
  ASSERT_FALSE(o.timed_out) << o.output;
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_EQ(count(o, "/3: ok, spawned 0, appnum 0"), 3) << o.output;
}

}  // namespace
}  // namespace pier::multiproc
