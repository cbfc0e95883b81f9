// tests/multiproc: pier-run and the bootstrap exchange, end to end. Every
// job runs with pier-run --timeout and under run_command's own deadline.
#include "run_command.hpp"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace pier::multiproc {
namespace {

Outcome launch(std::vector<std::string> args, int ranks, std::string extra_option = {}) {
  RunSpec spec;
  spec.argv = {PIER_RUN_PATH, "-n",           std::to_string(ranks), "--timeout",
               "30",          "--tag-output", "--kill-grace",        "2"};
  if (!extra_option.empty()) spec.argv.push_back(extra_option);
  spec.argv.push_back(BOOT_PROBE_PATH);
  spec.argv.insert(spec.argv.end(), args.begin(), args.end());
  spec.limit = std::chrono::seconds(60);
  return run_command(spec);
}

bool has(const Outcome& o, const std::string& text) {
  return o.output.find(text) != std::string::npos;
}

/// Runs `spec`; the CPU time in ms that it (pier-run and what it reaped)
/// used goes to *cpu_ms.
Outcome run_counting_cpu(const RunSpec& spec, long* cpu_ms) {
  ::rusage before{}, after{};
  (void)::getrusage(RUSAGE_CHILDREN, &before);
  Outcome o = run_command(spec);
  (void)::getrusage(RUSAGE_CHILDREN, &after);
  auto ms = [](const ::timeval& t) { return t.tv_sec * 1000L + t.tv_usec / 1000; };
  *cpu_ms = ms(after.ru_utime) + ms(after.ru_stime) - ms(before.ru_utime) - ms(before.ru_stime);
  return o;
}

TEST(PierRun, ExchangeReachesEveryRank) {
  const Outcome o = launch({"exchange"}, 4);
  ASSERT_FALSE(o.timed_out) << o.output;
  EXPECT_EQ(o.exit_code, 0) << o.output;
  for (int r = 0; r < 4; ++r) {
    EXPECT_TRUE(has(o, "[" + std::to_string(r) + "] probe rank " + std::to_string(r) +
                           ": exchange ok (size 4, method pier-run)"))
        << o.output;
  }
}

TEST(PierRun, BindCoreStillRuns) {
  const Outcome o = launch({"exchange"}, 3, "--bind=core");
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_TRUE(has(o, "[2] probe rank 2: exchange ok")) << o.output;
}

TEST(PierRun, RankExitingNonZeroEndsTheJob) {
  const Outcome o = launch({"fail", "1", "7"}, 3);
  ASSERT_FALSE(o.timed_out) << o.output;
  EXPECT_EQ(o.exit_code, 7) << o.output;
  EXPECT_TRUE(has(o, "pier-run: rank 1 (pid ")) << o.output;
  EXPECT_TRUE(has(o, "exited with status 7; terminating ranks 0, 2")) << o.output;
}

TEST(PierRun, RankKilledBySignalEndsTheJob) {
  const Outcome o = launch({"signal", "1"}, 2);
  ASSERT_FALSE(o.timed_out) << o.output;
  EXPECT_EQ(o.exit_code, 128 + SIGKILL) << o.output;
  EXPECT_TRUE(has(o, "was killed by signal 9")) << o.output;
  EXPECT_TRUE(has(o, "rank 1 (pid ")) << o.output;
}

TEST(PierRun, FenceTimeoutNamesTheAbsentRank) {
  const Outcome o = launch({"absent", "2", "1"}, 3);
  ASSERT_FALSE(o.timed_out) << o.output;
  EXPECT_NE(o.exit_code, 0) << o.output;
  EXPECT_TRUE(has(o, "fence failed (timeout)")) << o.output;
  EXPECT_TRUE(has(o, "rank 2 never connected to the exchange")) << o.output;
}

TEST(PierRun, RankLeavingFailsTheFenceAtOnce) {
  const Outcome o = launch({"leave", "1"}, 2);
  ASSERT_FALSE(o.timed_out) << o.output;
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_TRUE(has(o, "fence failed (broken)")) << o.output;
  EXPECT_TRUE(has(o, "rank 1 ended before joining fence 1")) << o.output;
}

TEST(PierRun, ForeignProtocolVersionIsRefusedClearly) {
  const Outcome o = launch({"badversion"}, 1);
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_TRUE(has(o, "refused: a process speaks boot protocol version 9, this pier-run version 2"))
      << o.output;
}

TEST(PierRun, RanksOfDifferentPierVersionsAreRefused) {
  // Rank 1 claims pier 9.9.9. Whichever rank says hello second is refused,
  // naming both versions; the job fails either way.
  const Outcome o = launch({"badlib", "1"}, 2);
  ASSERT_FALSE(o.timed_out) << o.output;
  EXPECT_NE(o.exit_code, 0) << o.output;
  EXPECT_TRUE(has(o, "runs pier 9.9.9 but rank 0 runs pier") ||
              has(o, "runs pier 0.1.0 but rank 1 runs pier 9.9.9") ||
              has(o, "but rank 1 runs pier 9.9.9"))
      << o.output;
}

TEST(PierRun, ForwardsSigtermToTheRanks) {
  RunSpec spec;
  spec.argv = {PIER_RUN_PATH,   "-n",   "2", "--timeout", "30", "--tag-output",
               BOOT_PROBE_PATH, "sleep"};
  spec.signal_after = "[1] probe rank 1: sleeping";
  spec.signal = SIGTERM;
  const Outcome o = run_command(spec);
  ASSERT_FALSE(o.timed_out) << o.output;
  EXPECT_EQ(o.exit_code, 128 + SIGTERM) << o.output;
  EXPECT_TRUE(has(o, "got SIGTERM, forwarding it to the ranks")) << o.output;
}

TEST(PierRun, JobTimeoutIsReported) {
  RunSpec spec;
  spec.argv = {PIER_RUN_PATH,   "-n",   "2", "--timeout", "1", "--kill-grace", "1",
               BOOT_PROBE_PATH, "sleep"};
  const Outcome o = run_command(spec);
  ASSERT_FALSE(o.timed_out) << o.output;
  EXPECT_EQ(o.exit_code, 124) << o.output;
  EXPECT_TRUE(has(o, "timeout after 1 s; still running: ranks 0, 1")) << o.output;
}

/// A timeout too large for the clock is refused at the command line
/// (before, 1e10 s overflowed and the job was killed at once).
TEST(PierRun, AnAbsurdTimeoutIsRefused) {
  RunSpec spec;
  spec.argv = {PIER_RUN_PATH, "-n", "1", "--timeout", "1e10", BOOT_PROBE_PATH, "sleep"};
  const Outcome o = run_command(spec);
  ASSERT_FALSE(o.timed_out) << o.output;
  EXPECT_NE(o.exit_code, 0) << o.output;
  EXPECT_NE(o.exit_code, 124) << o.output;
  EXPECT_TRUE(has(o, "--timeout")) << o.output;
}

/// pier-run's socket is abstract: a process of another user that connects
/// is closed at once (before, it could say hello as any rank and take that
/// rank's place in the exchange); the job goes on.
TEST(PierRun, AnotherUsersConnectionIsRefused) {
  RunSpec spec;
  spec.argv = {PIER_RUN_PATH, "-n", "1", "--timeout", "30", BOOT_PROBE_PATH, "impostor"};
  const Outcome o = run_command(spec);
  ASSERT_FALSE(o.timed_out) << o.output;
  if (has(o, "impostor skipped")) GTEST_SKIP() << "needs root to become another user";
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_TRUE(has(o, "probe rank 0: impostor refused")) << o.output;
}

/// A process of the same user that pier-run did not start as rank 1 (here
/// rank 0) says hello as rank 1 before rank 1 does: refused (before, it
/// took rank 1's place and the real rank 1 was refused as connecting
/// twice); the job then runs.
TEST(PierRun, AProcessClaimingAnotherRankIsRefused) {
  RunSpec spec;
  spec.argv = {PIER_RUN_PATH, "-n", "2", "--timeout", "30", BOOT_PROBE_PATH, "claim", "1"};
  const Outcome o = run_command(spec);
  ASSERT_FALSE(o.timed_out) << o.output;
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_TRUE(has(o, "probe rank 0: claim of rank 1 refused: a process (pid ")) << o.output;
  EXPECT_TRUE(has(o, "probe rank 1: exchange ok")) << o.output;
}

/// --tag-output with a stdout nobody reads (a pager that stopped, a pipe
/// into a stuck program): pier-run wrote the ranks' lines with blocking
/// writes, so its whole loop stopped and the job's timeout never fired.
/// The lines now wait in a queue (the ranks wait on their pipes) and the
/// loop goes on: the timeout ends the job.
TEST(PierRun, AStdoutNobodyReadsDoesNotStopTheTimeout) {
  int out[2];
  ASSERT_EQ(::pipe(out), 0);
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::dup2(out[1], STDOUT_FILENO);
    ::close(out[0]);
    ::close(out[1]);
    ::execl(PIER_RUN_PATH, PIER_RUN_PATH, "-n", "1", "--timeout", "2", "--kill-grace", "1",
            "--tag-output", "/bin/sh", "-c", "yes pier | head -c 20000000; sleep 30",
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(out[1]);  // out[0] stays open and unread
  int status = 0;
  pid_t done = 0;
  while ((done = ::waitpid(pid, &status, WNOHANG)) == 0 &&
         std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (done == 0) {
    ::kill(pid, SIGKILL);
    (void)::waitpid(pid, &status, 0);
  }
  ::close(out[0]);
  ASSERT_EQ(done, pid) << "pier-run was still running after 20 s";
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 124);  // the timeout's code
}

namespace {

/// Runs pier-run in a child set up by `setup` (between fork and exec);
/// `during(pid)` runs once the child started. Waits at most 20 s, then
/// kills it. Returns the wait status, or -1 when it had to be killed.
template <class Setup, class During>
int run_guarded(const std::vector<const char*>& argv, Setup setup, During during,
                std::chrono::steady_clock::duration* took) {
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  if (pid < 0) return -2;
  if (pid == 0) {
    setup();
    std::vector<char*> args;
    for (const char* a : argv) args.push_back(const_cast<char*>(a));
    args.push_back(nullptr);
    ::execv(PIER_RUN_PATH, args.data());
    ::_exit(127);
  }
  during(pid);
  int status = 0;
  pid_t done = 0;
  while ((done = ::waitpid(pid, &status, WNOHANG)) == 0 &&
         std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  *took = std::chrono::steady_clock::now() - t0;
  if (done == 0) {
    ::kill(pid, SIGKILL);
    (void)::waitpid(pid, &status, 0);
    return -1;
  }
  return status;
}

}  // namespace

/// pier-run's own notes (the timeout's, a signal's, a rank's failure) were
/// blocking writes to its stderr, made before acting: with a stderr nobody
/// reads, filled by the ranks' lines, the timeout never fired and SIGTERM
/// was never forwarded. A note that would block is now dropped.
TEST(PierRun, AStderrNobodyReadsDoesNotStopTheTimeoutOrASignal) {
  for (const bool by_signal : {false, true}) {
    SCOPED_TRACE(by_signal ? "SIGTERM" : "timeout");
    int err[2];
    ASSERT_EQ(::pipe(err), 0);
    std::vector<const char*> argv{PIER_RUN_PATH, "-n", "1", "--kill-grace", "1", "--tag-output"};
    if (!by_signal) argv.insert(argv.end(), {"--timeout", "2"});
    argv.insert(argv.end(), {"/bin/sh", "-c", "yes pier | head -c 20000000 >&2; sleep 30"});
    std::chrono::steady_clock::duration took{};
    const int status = run_guarded(
        argv,
        [&] {
          const int null = ::open("/dev/null", O_WRONLY);
          ::dup2(null, STDOUT_FILENO);
          ::dup2(err[1], STDERR_FILENO);
          ::close(err[0]);
          ::close(err[1]);
        },
        [&](pid_t pid) {
          ::close(err[1]);  // err[0] stays open and unread
          if (by_signal) {
            std::this_thread::sleep_for(std::chrono::seconds(2));
            ::kill(pid, SIGTERM);
          }
        },
        &took);
    ::close(err[0]);
    ASSERT_NE(status, -1) << "pier-run was still running after 20 s";
    EXPECT_LT(took, std::chrono::seconds(10));
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), by_signal ? 128 + SIGTERM : 124);
  }
}

/// A parent that ignores SIGCHLD passes that on through exec: the kernel
/// then reaped the ranks itself, pier-run never saw them end, and the job
/// never did, --timeout included. pier-run restores the default.
TEST(PierRun, AnIgnoredSigchldDoesNotHideTheRanks) {
  std::chrono::steady_clock::duration took{};
  const int status = run_guarded(
      {PIER_RUN_PATH, "-n", "2", "--timeout", "5", "/bin/sh", "-c", "exit 3"},
      [] {
        const int null = ::open("/dev/null", O_WRONLY);
        ::dup2(null, STDERR_FILENO);
        ::signal(SIGCHLD, SIG_IGN);
      },
      [](pid_t) {}, &took);
  ASSERT_NE(status, -1) << "pier-run was still running after 20 s";
  EXPECT_LT(took, std::chrono::seconds(4));
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 3);
}

namespace {
/// Whether `pid` is still a live process (a zombie nobody reaps is not).
bool alive(pid_t pid) {
  std::FILE* f = std::fopen(("/proc/" + std::to_string(pid) + "/stat").c_str(), "r");
  if (f == nullptr) return false;
  char text[512] = {};
  const std::size_t n = std::fread(text, 1, sizeof text - 1, f);
  std::fclose(f);
  const char* paren = std::strrchr(text, ')');
  return n > 0 && paren != nullptr && paren[1] == ' ' && paren[2] != 'Z';
}
}  // namespace

/// pier-run killed outright (SIGKILL): its ranks died with it
/// (PR_SET_PDEATHSIG), but what they had started ran on, adopted by init.
/// A watchdog process now kills the ranks' process groups.
TEST(PierRun, WhatRanksStartedEndsWhenPierRunIsKilled) {
  char dir[] = "/tmp/pier_run_killed_XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string file = std::string(dir) + "/pid";
  const std::string script = "sleep 300 & echo $! > " + file + "; wait";
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, STDOUT_FILENO);
    ::dup2(null, STDERR_FILENO);
    ::execl(PIER_RUN_PATH, PIER_RUN_PATH, "-n", "1", "--timeout", "60", "/bin/sh", "-c",
            script.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  pid_t sleeper = 0;
  for (int i = 0; i < 500 && sleeper <= 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (std::FILE* f = std::fopen(file.c_str(), "r")) {
      long v = 0;
      if (std::fscanf(f, "%ld", &v) == 1) sleeper = static_cast<pid_t>(v);
      std::fclose(f);
    }
  }
  ::kill(pid, SIGKILL);
  int status = 0;
  (void)::waitpid(pid, &status, 0);
  ASSERT_GT(sleeper, 0) << "the rank never started its sleep";
  bool gone = false;
  for (int i = 0; i < 100 && !gone; ++i) {
    gone = !alive(sleeper);
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!gone) ::kill(sleeper, SIGKILL);  // the test leaves nothing behind either
  EXPECT_TRUE(gone) << "pid " << sleeper << " outlived pier-run";
  std::remove(file.c_str());
  ::rmdir(dir);
}

/// A large -n with a soft descriptor limit below what it needs (each rank
/// takes a few: PMI socket pair, exchange connection, output pipes): the
/// job could not start. pier-run raises its soft limit to the hard one.
TEST(PierRun, ALowSoftDescriptorLimitIsRaised) {
  rlimit l{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &l), 0);
  if (l.rlim_max != RLIM_INFINITY && l.rlim_max < 2048)
    GTEST_SKIP() << "the hard limit (" << l.rlim_max << ") leaves no room to raise";
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    rlimit low = l;
    low.rlim_cur = 256;
    (void)::setrlimit(RLIMIT_NOFILE, &low);
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, STDOUT_FILENO);
    ::execl(PIER_RUN_PATH, PIER_RUN_PATH, "-n", "200", "--timeout", "60", "--tag-output",
            "/bin/true", static_cast<char*>(nullptr));
    ::_exit(126);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

/// pier-run out of descriptors with connections waiting to be accepted:
/// the listening socket stays readable and every accept failed EMFILE, so
/// its loop spun on one core. It now leaves the socket alone for 100 ms at
/// a time. (Both run with a hard limit of 64 descriptors; the rank holds
/// every connection it can open for 1.5 s.)
TEST(PierRun, RunningOutOfDescriptorsDoesNotSpin) {
  RunSpec spec;
  spec.argv = {"/usr/bin/prlimit", "--nofile=64:64", PIER_RUN_PATH, "-n", "1", "--timeout", "60",
               BOOT_PROBE_PATH,    "flood"};
  spec.limit = std::chrono::seconds(60);
  const Outcome o = run_command(spec);
  ASSERT_FALSE(o.timed_out) << o.output;
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_TRUE(has(o, "cannot accept a connection: Too many open files")) << o.output;
  const auto at = o.output.find("pier-run used ");
  ASSERT_NE(at, std::string::npos) << o.output;
  const long ms = std::strtol(o.output.c_str() + at + 14, nullptr, 10);
  // Spinning takes the whole 1500 ms; waiting, a few.
  EXPECT_LT(ms, 500) << o.output;
  EXPECT_TRUE(has(o, "probe rank 0: exchange ok")) << o.output;
}

/// A connection that sends queries and never reads the answers: pier-run
/// read on and queued every answer (hundreds of MiB in 1.5 s). Past 256
/// answers queued it stops reading that connection, so the sender waits.
TEST(PierRun, QueriesNobodyReadsDoNotGrowPierRunWithoutBound) {
  RunSpec spec;
  spec.argv = {PIER_RUN_PATH, "-n", "1", "--timeout", "60", BOOT_PROBE_PATH, "queryflood"};
  const Outcome o = run_command(spec);
  ASSERT_FALSE(o.timed_out) << o.output;
  const auto at = o.output.find("pier-run grew by ");
  ASSERT_NE(at, std::string::npos) << o.output;
  const long kib = std::strtol(o.output.c_str() + at + 17, nullptr, 10);
  EXPECT_LT(kib, 16 * 1024) << o.output;
}

/// Ranks that exit leaving a process running (a background job, a daemon):
/// it outlived the job. pier-run is now the ranks' subreaper and ends what
/// they leave (SIGTERM, then SIGKILL after the grace) before it exits.
TEST(PierRun, WhatRanksLeaveRunningEndsWithTheJob) {
  RunSpec spec;
  spec.argv = {PIER_RUN_PATH, "-n",      "2",  "--timeout",
               "30",          "/bin/sh", "-c", "sleep 100 >/dev/null 2>&1 & echo leftpid $!"};
  const Outcome o = run_command(spec);
  ASSERT_FALSE(o.timed_out) << o.output;
  EXPECT_EQ(o.exit_code, 0) << o.output;
  std::vector<pid_t> pids;
  for (std::size_t at = o.output.find("leftpid "); at != std::string::npos;
       at = o.output.find("leftpid ", at + 8))
    pids.push_back(static_cast<pid_t>(std::strtol(o.output.c_str() + at + 8, nullptr, 10)));
  ASSERT_EQ(pids.size(), 2u) << o.output;
  for (pid_t p : pids) {
    // Still there, and still our sleep (the pid may have been reused since).
    std::string command;
    if (std::FILE* f = std::fopen(("/proc/" + std::to_string(p) + "/cmdline").c_str(), "r")) {
      char text[64] = {};
      command.assign(text, std::fread(text, 1, sizeof text - 1, f));
      std::fclose(f);
    }
    const bool outlived = p > 1 && command.rfind("sleep", 0) == 0;
    if (outlived) ::kill(p, SIGKILL);  // the test leaves nothing behind either
    EXPECT_FALSE(outlived) << "pid " << p << " outlived the job\n" << o.output;
  }
  EXPECT_TRUE(has(o, "the ranks left 2 processes running; terminating them")) << o.output;
}

/// A leftover that ignores SIGTERM waits for SIGKILL at the end of the
/// grace; pier-run spun meanwhile (its wake-up time was already past).
TEST(PierRun, WaitingForALeftoverToDieDoesNotSpin) {
  RunSpec spec;
  spec.argv = {PIER_RUN_PATH, "-n", "1", "--kill-grace", "2", BOOT_PROBE_PATH, "stubborn"};
  long used = 0;
  const auto t0 = std::chrono::steady_clock::now();
  const Outcome o = run_counting_cpu(spec, &used);
  const auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_FALSE(o.timed_out) << o.output;
  EXPECT_TRUE(has(o, "the ranks left 1 process running")) << o.output;
  EXPECT_GE(took, std::chrono::milliseconds(1500)) << "the grace was not waited for";
  EXPECT_LT(used, 500) << "pier-run used " << used << " ms of CPU in a 2 s grace";
}

/// After --timeout, while a rank that ignores SIGTERM waits for its
/// SIGKILL, pier-run spun (the job's deadline, past, was still its wake-up
/// time; found by a review).
TEST(PierRun, WaitingForARankToDieAfterTheTimeoutDoesNotSpin) {
  RunSpec spec;
  spec.argv = {PIER_RUN_PATH,   "-n",  "1", "--timeout", "1", "--kill-grace", "2",
               BOOT_PROBE_PATH, "deaf"};
  long used = 0;
  const Outcome o = run_counting_cpu(spec, &used);
  ASSERT_FALSE(o.timed_out) << o.output;
  EXPECT_TRUE(has(o, "timeout after")) << o.output;
  EXPECT_LT(used, 500) << "pier-run used " << used << " ms of CPU in a 3 s job";
}

TEST(PierRun, MissingProgramIsReported) {
  RunSpec spec;
  spec.argv = {PIER_RUN_PATH, "-n", "2", "--timeout", "10", "/nonexistent/pier-program"};
  const Outcome o = run_command(spec);
  EXPECT_EQ(o.exit_code, 127) << o.output;
  EXPECT_TRUE(has(o, "rank 0: cannot execute '/nonexistent/pier-program'")) << o.output;
}

TEST(Singleton, ProcessStartedAloneIsRankZeroOfOne) {
  RunSpec spec;
  spec.argv = {BOOT_PROBE_PATH, "exchange"};
  spec.limit = std::chrono::seconds(30);
  const Outcome o = run_command(spec);
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_TRUE(has(o, "probe rank 0: exchange ok (size 1, method singleton)")) << o.output;
}

}  // namespace
}  // namespace pier::multiproc
