// tests/launch: src/boot's external back ends end to end: PMI-1 through
// pier-run's PMI server, PMIx through Open MPI's mpirun (skipped when mpirun
// cannot run here), and the choice Bootstrap::open() makes.
#include "run_command.hpp"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <sstream>

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

TEST(PmiBackEnd, ThreeRanksExchangeThroughPierRunsPmiServer) {
  RunSpec spec;
  spec.argv = {PIER_RUN_PATH, "-n", "3", "--timeout", "60", BOOT_EXCHANGE_PATH, "pmi"};
  spec.env = {"PIER_BOOT_METHOD=pmi"};
  spec.limit = std::chrono::seconds(90);
  const Outcome o = run_command(spec);
  ASSERT_FALSE(o.timed_out) << o.output;
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_EQ(count(o, "/3 via pmi: ok"), 3) << o.output;
}

TEST(PmiBackEnd, AutoKeepsPierRunsOwnExchange) {
  RunSpec spec;
  spec.argv = {PIER_RUN_PATH, "-n", "2", "--timeout", "60", BOOT_EXCHANGE_PATH, "pier-run"};
  spec.limit = std::chrono::seconds(90);
  const Outcome o = run_command(spec);
  ASSERT_FALSE(o.timed_out) << o.output;
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_EQ(count(o, "/2 via pier-run: ok"), 2) << o.output;
}

TEST(PmiBackEnd, RankLeavingBreaksTheFenceWithAClearError) {
  RunSpec spec;
  spec.argv = {PIER_RUN_PATH,
               "-n",
               "2",
               "--timeout",
               "60",
               "/bin/sh",
               "-c",
               "if [ \"$PMI_RANK\" = 1 ]; then exit 0; fi; exec \"$0\" pmi",
               BOOT_EXCHANGE_PATH};
  spec.env = {"PIER_BOOT_METHOD=pmi"};
  spec.limit = std::chrono::seconds(90);
  const Outcome o = run_command(spec);
  ASSERT_FALSE(o.timed_out) << o.output;
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_TRUE(has(o, "PMI barrier 1 failed: rank 1 closed its PMI connection")) << o.output;
  EXPECT_TRUE(has(o, "fence failed (broken): PMI barrier_in: the PMI server closed the connection"))
      << o.output;
}

/// mpirun from PATH, or "" when there is none.
std::string find_mpirun() {
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "/usr/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const std::string candidate = dir + "/mpirun";
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return {};
}

RunSpec mpirun_spec(const std::string& mpirun, int ranks, std::vector<std::string> command) {
  RunSpec spec;
  spec.argv = {mpirun, "--oversubscribe", "-n", std::to_string(ranks),
               // Under ASan: libpmix's own leaks are not pier's (lsan_pmix.supp).
               "-x", std::string("LSAN_OPTIONS=suppressions=") + LAUNCH_LSAN_PMIX_SUPP};
  if (::geteuid() == 0) spec.argv.insert(spec.argv.begin() + 1, "--allow-run-as-root");
  spec.argv.insert(spec.argv.end(), command.begin(), command.end());
  spec.env = {"OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1",
              // Open MPI's tcp wire-up needs nothing from us: keep it on loopback.
              "OMPI_MCA_btl_tcp_if_include=lo", "OMPI_MCA_oob_tcp_if_include=lo"};
  spec.limit = std::chrono::seconds(90);
  return spec;
}

TEST(PmixBackEnd, MpirunStartsTwoRanksThatExchangeThroughPmix) {
  const std::string mpirun = find_mpirun();
  if (mpirun.empty()) GTEST_SKIP() << "no mpirun in PATH (Open MPI not installed)";
  const Outcome probe = run_command(mpirun_spec(mpirun, 1, {"/bin/true"}));
  if (probe.timed_out || probe.exit_code != 0)
    GTEST_SKIP() << "mpirun cannot run a job here (exit " << probe.exit_code
                 << (probe.timed_out ? ", timed out" : "") << "): " << probe.output;
  const Outcome o = run_command(mpirun_spec(mpirun, 2, {BOOT_EXCHANGE_PATH, "pmix"}));
  ASSERT_FALSE(o.timed_out) << o.output;
  if (!LAUNCH_HAVE_PMIX) {
    // Without libpmix the ranks must say so, not pretend to be singletons.
    EXPECT_NE(o.exit_code, 0) << o.output;
    EXPECT_TRUE(has(o, "this pier was built without libpmix")) << o.output;
    return;
  }
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_EQ(count(o, "/2 via pmix: ok"), 2) << o.output;
}

TEST(PmixBackEnd, RanksOfAnotherPierVersionFailTheirFirstFence) {
  if (!LAUNCH_HAVE_PMIX) GTEST_SKIP() << "pier built without libpmix";
  const std::string mpirun = find_mpirun();
  if (mpirun.empty()) GTEST_SKIP() << "no mpirun in PATH (Open MPI not installed)";
  const Outcome probe = run_command(mpirun_spec(mpirun, 1, {"/bin/true"}));
  if (probe.timed_out || probe.exit_code != 0)
    GTEST_SKIP() << "mpirun cannot run a job here (exit " << probe.exit_code << ")";
  // Rank 0 claims pier 9.9.9: rank 1 must stop at its first fence, naming
  // both versions, and the job must end (mpirun stops rank 0).
  const Outcome o = run_command(mpirun_spec(mpirun, 2, {BOOT_EXCHANGE_PATH, "pmix-fake-version"}));
  ASSERT_FALSE(o.timed_out) << o.output;
  EXPECT_NE(o.exit_code, 0) << o.output;
  EXPECT_TRUE(has(o,
                  "exchange rank 1: fence failed (version_mismatch): rank 0 runs pier 9.9.9, "
                  "pmix keys 1 but this process (rank 1) runs pier "))
      << o.output;
}

}  // namespace
}  // namespace pier::multiproc
