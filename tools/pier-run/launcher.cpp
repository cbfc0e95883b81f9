// pier-run: the job. One poll() loop serves the exchange socket, the ranks'
// tagged output, signals (through a signalfd, so SIGCHLD and forwarded
// signals are ordinary events) and the two deadlines: the job's timeout and
// the grace between SIGTERM and SIGKILL once the job is ending.
#include "launcher.hpp"

#include "exchange.hpp"
#include "leftovers.hpp"
#include "output.hpp"
#include "pmi_server.hpp"

#include "boot/boot.hpp"
#include "boot/proto.hpp"
#include "boot/socket.hpp"

#include <fmt/format.h>

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#ifdef PIER_RUN_HAVE_HWLOC
#include <hwloc.h>
#include <hwloc/glibc-sched.h>
#endif

#include <algorithm>
#include <array>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <random>

extern char** environ;

namespace pier::run {
namespace {

namespace proto = boot::proto;
using boot::Clock;

constexpr int exit_timeout = 124;
constexpr int exit_cannot_start = 127;
constexpr int exit_status_lost = 1;

std::string describe_wait(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    return fmt::format("was killed by signal {} ({}){}", sig, ::strsignal(sig),
                       WCOREDUMP(status) ? ", core dumped" : "");
  }
  return "ended in an unknown way";
}

/// One cpu set per core that this process may use (hwloc when built with
/// it, so hyperthreads of one core stay together; else one per logical CPU).
std::vector<::cpu_set_t> core_sets() {
  std::vector<::cpu_set_t> sets;
#ifdef PIER_RUN_HAVE_HWLOC
  hwloc_topology_t topo;
  if (hwloc_topology_init(&topo) == 0) {
    if (hwloc_topology_load(topo) == 0) {
      const int n = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
      for (int i = 0; i < n; ++i) {
        hwloc_obj_t core = hwloc_get_obj_by_type(topo, HWLOC_OBJ_CORE, static_cast<unsigned>(i));
        ::cpu_set_t set;
        CPU_ZERO(&set);
        if (core &&
            hwloc_cpuset_to_glibc_sched_affinity(topo, core->cpuset, &set, sizeof set) == 0 &&
            CPU_COUNT(&set) > 0)
          sets.push_back(set);
      }
    }
    hwloc_topology_destroy(topo);
  }
  if (!sets.empty()) return sets;
#endif
  ::cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (::sched_getaffinity(0, sizeof allowed, &allowed) != 0) return sets;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &allowed)) continue;
    ::cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    sets.push_back(one);
  }
  return sets;
}

struct Rank {
  pid_t pid = -1;
  bool running = false;
  int wait_status = 0;
  std::array<int, 2> pipes{-1, -1};  ///< stdout, stderr read ends (--tag-output)
  std::array<std::unique_ptr<LineTagger>, 2> taggers;
};

/// Whether /proc can say who a process's parent is (it is mounted here).
bool proc_readable() {
  return ::access("/proc/self/stat", R_OK) == 0;
}

/// Whether `pid` is `ancestor` or descends from it (parents read from
/// /proc). True when /proc cannot say at all (not mounted): the check must
/// not break jobs where it cannot see. A process whose entry is gone or
/// unreadable while /proc works is refused: a connection handed on by a
/// process that then exited would otherwise pass as anyone's.
bool descends_from(pid_t pid, pid_t ancestor) {
  for (int depth = 0; depth < 64 && pid > 1; ++depth) {
    if (pid == ancestor) return true;
    char path[64];
    std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
    const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return !proc_readable();
    char buf[512];
    const ::ssize_t n = ::read(fd, buf, sizeof buf - 1);
    ::close(fd);
    if (n <= 0) return !proc_readable();
    buf[n] = '\0';
    // "pid (comm) state ppid ...": comm may hold anything, ')' included.
    const char* close_paren = std::strrchr(buf, ')');
    char state = 0;
    int parent = 0;
    if (close_paren == nullptr || std::sscanf(close_paren + 1, " %c %d", &state, &parent) != 2)
      return false;
    pid = parent;
  }
  return pid == ancestor;
}

/// Each rank takes a few descriptors here (PMI socket pair, exchange
/// connection, output pipes): a large -n passes a soft limit of 1024. The
/// soft limit goes up to the hard one; the ranks get the limit we had.
rlimit original_fd_limit{};

void raise_fd_limit() {
  rlimit l{};
  if (::getrlimit(RLIMIT_NOFILE, &l) != 0) return;
  original_fd_limit = l;
  if (l.rlim_cur < l.rlim_max) {
    l.rlim_cur = l.rlim_max;
    (void)::setrlimit(RLIMIT_NOFILE, &l);
  }
}

struct Conn {
  pid_t pid = 0;  ///< the peer process (SO_PEERCRED)
  proto::FrameReader reader;
  std::deque<SharedFrame> pending;  ///< not yet written, the first from `sent` on
  std::size_t sent = 0;
  bool close_after = false;
};

class Job {
 public:
  explicit Job(const Options& o)
      : opt_(o),
        ranks_(o.ranks),
        exchange_(o.ranks, std::string(boot::library_version())),
        pmi_(o.ranks) {
    // A process of our user could otherwise say hello as any rank and take
    // its place: only the rank's process, or one it started, may.
    exchange_.set_identity_check([this](int conn, std::uint32_t rank) {
      auto it = conns_.find(conn);
      if (it == conns_.end() || rank >= ranks_.size() || ranks_[rank].pid <= 0) return false;
      return descends_from(it->second.pid, ranks_[rank].pid);
    });
  }
  ~Job();
  int run();

 private:
  bool listen_socket();
  bool block_signals();
  bool spawn(std::uint32_t rank, const std::vector<::cpu_set_t>& cores);
  void loop();
  void end_job(int code);
  /// `sig` to the running ranks' process groups and to what exited ranks left.
  void signal_job(int sig);
  /// Once no rank runs: terminates what they left; true while some remain.
  bool end_leftovers(Clock::time_point now);
  void on_signal();
  void reap();
  void lost_children();
  void accept_conns();
  void read_conn(int fd);
  void flush_conn(int fd);
  void close_conn(int fd);
  void dispatch(std::vector<Outgoing>& out);
  void read_pipe(Rank& rank, int which);
  bool any_running() const;
  std::vector<std::uint32_t> running_ranks() const;

  Options opt_;
  std::vector<Rank> ranks_;
  Exchange exchange_;
  PmiServer pmi_;  ///< PMI-1/2 over PMI_FD, for programs that bootstrap through PMI
  std::map<int, Conn> conns_;
  std::string socket_name_;
  int listen_fd_ = -1;
  int signal_fd_ = -1;
  ::sigset_t old_mask_{};
  bool ending_ = false;
  int exit_code_ = 0;
  Clock::time_point job_deadline_ = Clock::time_point::max();
  Clock::time_point kill_deadline_ = Clock::time_point::max();
  Clock::time_point drain_deadline_ = Clock::time_point::max();
  /// The ranks' tagged lines on their way to our stdout and stderr.
  std::array<OutputQueue, 2> outputs_{OutputQueue(STDOUT_FILENO), OutputQueue(STDERR_FILENO)};
  bool killed_hard_ = false;
  /// Out of descriptors: the listening socket is left alone until then
  /// (it stays readable, and polling it would spin the loop).
  Clock::time_point accept_paused_until_{};
  /// Processes the ranks left running, once no rank runs: SIGTERM went to
  /// these; SIGKILL goes at the deadline.
  std::vector<pid_t> terminated_;
  Clock::time_point leftover_deadline_ = Clock::time_point::max();
  std::vector<pid_t> leftovers_;  ///< as last read from /proc
  Clock::time_point leftovers_seen_{};
  /// Children this process had before it spawned a rank (a shell's, when it
  /// exec'd pier-run): not the job's, never signalled.
  std::vector<pid_t> inherited_;
  bool said_out_of_descriptors_ = false;
  /// The watchdog (see start_watchdog): its pid and our end of its pipe.
  pid_t watchdog_pid_ = -1;
  int watchdog_fd_ = -1;
  void start_watchdog();
  void tell_watchdog(pid_t group) noexcept;
};

/// Answers queued for one connection beyond which it is not read any more
/// until it takes them: a process that sends queries without reading the
/// answers makes itself wait, not pier-run buffer without bound.
constexpr std::size_t max_pending_answers = 256;

Job::~Job() {
  tell_watchdog(0);  // an early return: nothing of the job is left to end
  for (auto& [fd, conn] : conns_) ::close(fd);
  for (auto& r : ranks_)
    for (int fd : r.pipes)
      if (fd >= 0) ::close(fd);
  if (listen_fd_ >= 0) ::close(listen_fd_);
  if (signal_fd_ >= 0) ::close(signal_fd_);
}

bool Job::listen_socket() {
  // Abstract namespace: no file to clean up, even if pier-run is killed.
  std::random_device rd;
  socket_name_ = fmt::format("@pier-run.{}.{:08x}", ::getpid(), rd());
  auto address = boot::parse_unix_address(socket_name_);
  listen_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (!address || listen_fd_ < 0 ||
      ::bind(listen_fd_, reinterpret_cast<const ::sockaddr*>(&address->addr), address->len) != 0 ||
      ::listen(listen_fd_, 128) != 0) {
    say(fmt::format("cannot listen on {}: {}", socket_name_, std::strerror(errno)));
    return false;
  }
  return true;
}

bool Job::block_signals() {
  // An ignored SIGCHLD survives exec (a parent that set SIG_IGN): the
  // kernel would then reap the ranks itself, waitpid() would never name
  // them, and the job would never end. The ranks inherit the default too.
  struct ::sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  (void)::sigaction(SIGCHLD, &dfl, nullptr);
  ::sigset_t set;
  sigemptyset(&set);
  for (int sig : {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGQUIT}) sigaddset(&set, sig);
  if (::sigprocmask(SIG_BLOCK, &set, &old_mask_) != 0) return false;
  signal_fd_ = ::signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
  // A closed stdout (pier-run | head) must not kill the launcher and orphan
  // the ranks; children get the default disposition back before exec.
  ::signal(SIGPIPE, SIG_IGN);
  return signal_fd_ >= 0;
}

bool Job::spawn(std::uint32_t rank, const std::vector<::cpu_set_t>& cores) {
  // Everything the child needs is prepared here: between fork and exec only
  // async-signal-safe calls are made.
  std::vector<std::string> env_text;
  for (char** e = environ; *e; ++e) {
    std::string_view v(*e);
    if (!v.starts_with("PIER_RUN_SOCKET=") && !v.starts_with("PIER_RUN_RANK=") &&
        !v.starts_with("PIER_RUN_SIZE=") && !PmiServer::overrides(v))
      env_text.emplace_back(v);
  }
  env_text.push_back("PIER_RUN_SOCKET=" + socket_name_);
  env_text.push_back(fmt::format("PIER_RUN_RANK={}", rank));
  env_text.push_back(fmt::format("PIER_RUN_SIZE={}", opt_.ranks));
  for (auto& e : pmi_.environment(rank)) env_text.push_back(std::move(e));
  std::vector<char*> envp, argv;
  for (auto& s : env_text) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = opt_.command;
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  const ::cpu_set_t* core =
      opt_.bind_core && !cores.empty() ? &cores[rank % cores.size()] : nullptr;

  Rank& r = ranks_[rank];
  std::array<std::array<int, 2>, 2> out{{{-1, -1}, {-1, -1}}};
  if (opt_.tag_output) {
    for (auto& p : out) {
      if (::pipe2(p.data(), O_CLOEXEC) != 0) {
        say(fmt::format("cannot create a pipe: {}", std::strerror(errno)));
        return false;
      }
    }
  }
  std::array<int, 2> exec_err{-1, -1};
  if (::pipe2(exec_err.data(), O_CLOEXEC) != 0) return false;
  const int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  const pid_t parent = ::getpid();

  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    // If pier-run dies without cleaning up, its ranks die with it.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(exit_cannot_start);
    if (devnull >= 0) ::dup2(devnull, STDIN_FILENO);
    if (opt_.tag_output) {
      ::dup2(out[0][1], STDOUT_FILENO);
      ::dup2(out[1][1], STDERR_FILENO);
    }
    if (core) (void)::sched_setaffinity(0, sizeof *core, core);
    pmi_.keep_in_child(rank);
    ::signal(SIGPIPE, SIG_DFL);
    ::sigprocmask(SIG_SETMASK, &old_mask_, nullptr);
    if (original_fd_limit.rlim_max != 0) (void)::setrlimit(RLIMIT_NOFILE, &original_fd_limit);
    ::execvpe(argv[0], argv.data(), envp.data());
    const int err = errno;
    (void)!::write(exec_err[1], &err, sizeof err);
    ::_exit(exit_cannot_start);
  }
  if (devnull >= 0) ::close(devnull);
  ::close(exec_err[1]);
  pmi_.forked(rank);
  for (auto& p : out)
    if (p[1] >= 0) ::close(p[1]);
  if (pid < 0) {
    say(fmt::format("cannot fork rank {}: {}", rank, std::strerror(errno)));
    ::close(exec_err[0]);
    for (auto& p : out)
      if (p[0] >= 0) ::close(p[0]);
    return false;
  }
  ::setpgid(pid, pid);  // both sides set it, so no signal races the child's own call
  tell_watchdog(pid);
  r.pid = pid;
  r.running = true;
  for (int i = 0; i < 2; ++i) {
    r.pipes[i] = out[i][0];
    if (r.pipes[i] >= 0) {
      (void)::fcntl(r.pipes[i], F_SETFL, O_NONBLOCK);
      r.taggers[i] = std::make_unique<LineTagger>(rank, outputs_[i]);
    }
  }
  // The write end closes on exec (success) or carries errno (failure).
  int err = 0;
  ::ssize_t n;
  do n = ::read(exec_err[0], &err, sizeof err);
  while (n < 0 && errno == EINTR);
  ::close(exec_err[0]);
  if (n == static_cast<::ssize_t>(sizeof err)) {
    say(fmt::format("rank {}: cannot execute '{}': {}", rank, opt_.command[0], std::strerror(err)));
    return false;
  }
  return true;
}

/// pier-run killed outright (SIGKILL, the OOM killer) cannot end the job:
/// a rank dies with it (PR_SET_PDEATHSIG), but what the rank started does
/// not, and init adopts it. A small process forked first holds the only
/// read end of a pipe that pier-run writes each rank's process group to;
/// at end of file, unless pier-run said the job ended (group 0), it kills
/// every group. Forked before any thread (only then may a child allocate),
/// with pier-run's signals blocked, so a terminal's ^C does not take it.
void Job::start_watchdog() {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return;
  std::vector<pid_t> groups;
  groups.reserve(opt_.ranks);
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(p[0]);
    ::close(p[1]);
    return;
  }
  if (pid == 0) {
    ::close(p[1]);
    if (p[0] != 3) {
      ::dup2(p[0], 3);  // no O_CLOEXEC on the copy, none needed: no exec
      ::close(p[0]);
    }
    (void)::close_range(4, ~0u, 0);
    for (;;) {
      pid_t group = 0;
      const ::ssize_t n = ::read(3, &group, sizeof group);
      if (n < 0 && errno == EINTR) continue;
      if (n == static_cast<::ssize_t>(sizeof group)) {
        if (group == 0) ::_exit(0);  // the job ended in order
        if (group < 0) {             // emptied: its number may be reused
          std::erase(groups, -group);
          continue;
        }
        if (groups.size() < groups.capacity()) groups.push_back(group);
        continue;
      }
      break;  // end of file: pier-run is gone
    }
    for (pid_t g : groups) ::kill(-g, SIGKILL);
    ::_exit(0);
  }
  ::close(p[0]);
  watchdog_pid_ = pid;
  watchdog_fd_ = p[1];
}

void Job::tell_watchdog(pid_t group) noexcept {
  if (watchdog_fd_ < 0) return;
  (void)!::write(watchdog_fd_, &group, sizeof group);
  if (group == 0) {
    ::close(watchdog_fd_);
    watchdog_fd_ = -1;
  }
}

int Job::run() {
  raise_fd_limit();
  if (!block_signals()) return exit_cannot_start;
  start_watchdog();
  if (!listen_socket() || !pmi_.start()) return exit_cannot_start;
  // What a rank leaves running when it exits becomes ours, not init's:
  // it ends with the job. (The watchdog is ours too, but never the job's.)
  inherited_ = own_children({});
  if (!become_subreaper())
    say("cannot become the ranks' subreaper; what they leave running may outlive the job");
  if (opt_.timeout_s > 0)
    job_deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                       std::chrono::duration<double>(opt_.timeout_s));
  const auto cores = opt_.bind_core ? core_sets() : std::vector<::cpu_set_t>{};
  if (opt_.bind_core && cores.empty()) say("--bind core: no usable core found, not binding");
  for (std::uint32_t r = 0; r < opt_.ranks; ++r) {
    if (!spawn(r, cores)) {
      end_job(exit_cannot_start);
      break;
    }
  }
  loop();
  tell_watchdog(0);
  return exit_code_;
}

void Job::end_job(int code) {
  if (ending_) return;
  ending_ = true;
  exit_code_ = code;
  signal_job(SIGTERM);
  kill_deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(opt_.kill_grace_s));
}

void Job::signal_job(int sig) {
  std::vector<pid_t> ranks;
  for (auto& r : ranks_)
    if (r.running) {
      ::kill(-r.pid, sig);
      ranks.push_back(r.pid);
    }
  // And what ranks that exited before left running (ours as subreaper).
  ranks.insert(ranks.end(), inherited_.begin(), inherited_.end());
  for (pid_t p : own_children(ranks)) ::kill(p, sig);
}

bool Job::end_leftovers(Clock::time_point now) {
  // /proc is read at most every 100 ms: output arriving wakes this loop
  // often, and each read visits every process of the host.
  if (now - leftovers_seen_ >= std::chrono::milliseconds(100)) {
    leftovers_ = own_children(inherited_);
    leftovers_seen_ = now;
  }
  const std::vector<pid_t>& left = leftovers_;
  if (left.empty()) return false;
  const auto grace =
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(opt_.kill_grace_s));
  if (leftover_deadline_ == Clock::time_point::max()) {
    leftover_deadline_ = now + grace;
    say(fmt::format("the ranks left {} {} running; terminating {}", left.size(),
                    left.size() == 1 ? "process" : "processes", left.size() == 1 ? "it" : "them"));
  }
  if (now >= leftover_deadline_ + std::chrono::seconds(1)) return false;  // unkillable: give up
  const bool hard = now >= leftover_deadline_;
  for (pid_t p : left) {
    if (hard) {
      ::kill(p, SIGKILL);
    } else if (std::find(terminated_.begin(), terminated_.end(), p) == terminated_.end()) {
      ::kill(p, SIGTERM);
      terminated_.push_back(p);
    }
  }
  return true;
}

std::vector<std::uint32_t> Job::running_ranks() const {
  std::vector<std::uint32_t> out;
  for (std::uint32_t i = 0; i < ranks_.size(); ++i)
    if (ranks_[i].running) out.push_back(i);
  return out;
}

bool Job::any_running() const {
  return !running_ranks().empty();
}

void Job::on_signal() {
  ::signalfd_siginfo info;
  while (::read(signal_fd_, &info, sizeof info) == static_cast<::ssize_t>(sizeof info)) {
    const int sig = static_cast<int>(info.ssi_signo);
    if (sig == SIGCHLD) continue;  // reap() runs after every wake-up
    if (ending_) {
      // A second interrupt: the user does not want to wait for the grace.
      signal_job(SIGKILL);
      continue;
    }
    say(fmt::format("got SIG{}, forwarding it to the ranks", ::sigabbrev_np(sig)));
    ending_ = true;
    exit_code_ = 128 + sig;
    signal_job(sig);
    kill_deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                        std::chrono::duration<double>(opt_.kill_grace_s));
  }
}

void Job::reap() {
  for (;;) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid < 0 && errno == ECHILD) return lost_children();
    if (pid == 0) {
      // Children remain (the watchdog at least), none ended: a rank still
      // "running" whose pid is gone was reaped by someone else.
      for (const Rank& r : ranks_)
        if (r.running && ::kill(r.pid, 0) != 0 && errno == ESRCH) return lost_children();
      return;
    }
    if (pid < 0) return;
    leftovers_seen_ = {};  // a pid reaped may be reused: no signal from an old list
    std::erase(inherited_, pid);
    std::erase(terminated_, pid);
    for (std::uint32_t i = 0; i < ranks_.size(); ++i) {
      Rank& r = ranks_[i];
      if (r.pid != pid || !r.running) continue;
      r.running = false;
      r.wait_status = status;
      // Its group empty (nothing it started lives on in it): the watchdog
      // forgets it, so a later process given that number is never killed.
      if (::kill(-pid, 0) != 0 && errno == ESRCH) tell_watchdog(-pid);
      std::vector<Outgoing> out;
      exchange_.on_rank_exit(i, out);
      dispatch(out);
      const bool clean = WIFEXITED(status) && WEXITSTATUS(status) == 0;
      if (!clean && !ending_) {
        const auto others = running_ranks();
        say(fmt::format(
            "rank {} (pid {}) {}{}", i, pid, describe_wait(status),
            others.empty() ? std::string() : "; terminating ranks " + proto::format_ranks(others)));
        end_job(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
      }
    }
  }
}

void Job::lost_children() {
  // Ranks that count as running but whose pids are gone: someone else
  // reaped them (SIGCHLD ignored before we reset it, a debugger). Their
  // exit status is lost; the job must still end, and not as a success.
  for (std::uint32_t i = 0; i < ranks_.size(); ++i) {
    Rank& r = ranks_[i];
    if (!r.running || ::kill(r.pid, 0) == 0 || errno != ESRCH) continue;
    r.running = false;
    r.wait_status = W_EXITCODE(exit_status_lost, 0);
    say(fmt::format("rank {} (pid {}) was reaped by someone else; its exit status is lost", i,
                    r.pid));
    std::vector<Outgoing> out;
    exchange_.on_rank_exit(i, out);
    dispatch(out);
    if (!ending_) end_job(exit_status_lost);
  }
}

void Job::dispatch(std::vector<Outgoing>& out) {
  for (auto& note : exchange_.take_notes()) say(note);
  for (auto& o : out) {
    auto it = conns_.find(o.conn);
    if (it == conns_.end()) continue;
    if (o.frame && !o.frame->empty()) it->second.pending.push_back(std::move(o.frame));
    it->second.close_after |= o.close_after;
    flush_conn(o.conn);
  }
  out.clear();
}

void Job::accept_conns() {
  for (;;) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0 && errno == EINTR) continue;
    if (fd < 0 && (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)) {
      // The connection waits in the backlog; try again a little later.
      if (!said_out_of_descriptors_)
        say(fmt::format("cannot accept a connection: {}; retrying every 100 ms",
                        std::strerror(errno)));
      said_out_of_descriptors_ = true;
      accept_paused_until_ = Clock::now() + std::chrono::milliseconds(100);
      return;
    }
    if (fd < 0) return;
    // The socket is abstract, so any local user can reach it; only our own
    // user's processes may join (one could otherwise take a rank's place).
    ::ucred cred{};
    ::socklen_t len = sizeof cred;
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || cred.uid != ::geteuid()) {
      say(fmt::format("refused a connection from pid {} of uid {}: only uid {} may join", cred.pid,
                      cred.uid, ::geteuid()));
      ::close(fd);
      continue;
    }
    Conn c;
    c.pid = cred.pid;
    conns_.emplace(fd, std::move(c));
  }
}

void Job::close_conn(int fd) {
  if (conns_.erase(fd) == 0) return;
  ::close(fd);
  accept_paused_until_ = {};  // a descriptor is free again
  std::vector<Outgoing> out;
  exchange_.on_disconnect(fd, out);
  dispatch(out);
}

void Job::flush_conn(int fd) {
  auto it = conns_.find(fd);
  if (it == conns_.end()) return;
  Conn& c = it->second;
  while (!c.pending.empty()) {
    const std::vector<std::byte>& f = *c.pending.front();
    const ::ssize_t n = ::send(fd, f.data() + c.sent, f.size() - c.sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) {
      close_conn(fd);
      return;
    }
    c.sent += static_cast<std::size_t>(n);
    if (c.sent == f.size()) {
      c.pending.pop_front();
      c.sent = 0;
    }
  }
  if (c.close_after) close_conn(fd);
}

void Job::read_conn(int fd) {
  std::array<std::byte, 16384> buf;
  for (;;) {
    auto it = conns_.find(fd);
    if (it == conns_.end() || it->second.pending.size() >= max_pending_answers) return;
    const ::ssize_t n = ::recv(fd, buf.data(), buf.size(), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) {
      close_conn(fd);
      return;
    }
    it->second.reader.append(std::span(buf.data(), static_cast<std::size_t>(n)));
    for (;;) {
      auto c = conns_.find(fd);
      if (c == conns_.end() || c->second.close_after) return;
      auto frame = c->second.reader.next();
      std::vector<Outgoing> out;
      if (!frame) {
        out.push_back(
            {fd, share(proto::encode_error(proto::Refusal::malformed, "undecodable frame")), true});
        say("a rank sent undecodable bytes on the exchange socket; dropping it");
      } else if (!*frame) {
        break;
      } else {
        exchange_.on_frame(fd, **frame, out);
      }
      dispatch(out);
    }
  }
}

void Job::read_pipe(Rank& rank, int which) {
  std::array<char, 16384> buf;
  OutputQueue& out = outputs_[static_cast<std::size_t>(which)];
  for (;;) {
    if (out.full()) return;  // the rest waits in the pipe
    const ::ssize_t n = ::read(rank.pipes[which], buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    if (n <= 0) {
      rank.taggers[which]->finish();
      (void)out.flush();
      ::close(rank.pipes[which]);
      rank.pipes[which] = -1;
      return;
    }
    rank.taggers[which]->feed(std::span(buf.data(), static_cast<std::size_t>(n)));
    (void)out.flush();
  }
}

void Job::loop() {
  enum class Kind { signal, listen, conn, pipe, abort, output };
  struct Source {
    Kind kind;
    int fd;
    std::uint32_t rank;
    int which;
  };
  for (;;) {
    reap();
    const auto now = Clock::now();
    if (!ending_ && now >= job_deadline_) {
      const auto running = running_ranks();
      std::string pending = exchange_.pending_summary();
      say(fmt::format("timeout after {} s; still running: {} {}{}", opt_.timeout_s,
                      running.size() == 1 ? "rank" : "ranks", proto::format_ranks(running),
                      pending.empty() ? "" : "; " + pending));
      end_job(exit_timeout);
    }
    if (ending_ && !killed_hard_ && now >= kill_deadline_) {
      killed_hard_ = true;
      signal_job(SIGKILL);
    }
    bool pipes_open = false;
    for (auto& r : ranks_)
      for (int fd : r.pipes) pipes_open |= fd >= 0;
    for (auto& o : outputs_) pipes_open |= !o.empty();
    if (!any_running()) {
      // The ranks are gone: so goes what they left running (SIGTERM, then
      // SIGKILL after the grace). Their output gets a moment to drain (a
      // reader could stop reading).
      const bool leftovers = end_leftovers(now);
      if (!pipes_open && !leftovers) return;
      if (drain_deadline_ == Clock::time_point::max())
        drain_deadline_ = now + std::chrono::seconds(1);
      if (now >= drain_deadline_ && !leftovers) return;
    }

    std::vector<::pollfd> fds;
    std::vector<Source> sources;
    auto add = [&](int fd, short events, Source s) {
      fds.push_back({fd, events, 0});
      sources.push_back(s);
    };
    add(signal_fd_, POLLIN, {Kind::signal, signal_fd_, 0, 0});
    if (now >= accept_paused_until_) add(listen_fd_, POLLIN, {Kind::listen, listen_fd_, 0, 0});
    if (!ending_) add(pmi_.abort_fd(), POLLIN, {Kind::abort, pmi_.abort_fd(), 0, 0});
    // A refused connection (its error queued, closed once it leaves) is
    // read no more: what it still sends would only pile up in its reader.
    for (auto& [fd, c] : conns_)
      add(fd,
          static_cast<short>(
              (c.pending.size() < max_pending_answers && !c.close_after ? POLLIN : 0) |
              (c.pending.empty() ? 0 : POLLOUT)),
          {Kind::conn, fd, 0, 0});
    // A full queue stops the reading: the ranks wait on their pipes, and
    // this loop goes on serving timeouts and signals.
    const bool backlog = outputs_[0].full() || outputs_[1].full();
    for (std::uint32_t i = 0; i < ranks_.size() && !backlog; ++i)
      for (int w = 0; w < 2; ++w)
        if (ranks_[i].pipes[w] >= 0)
          add(ranks_[i].pipes[w], POLLIN, {Kind::pipe, ranks_[i].pipes[w], i, w});
    for (int w = 0; w < 2; ++w)
      if (!outputs_[w].empty())
        add(outputs_[w].fd(), POLLOUT, {Kind::output, outputs_[w].fd(), 0, w});

    // Wake at least once a second: SIGCHLD is coalesced, reaping is cheap.
    Clock::time_point wake = now + std::chrono::seconds(1);
    if (now < job_deadline_) wake = std::min(wake, job_deadline_);
    if (now < drain_deadline_) wake = std::min(wake, drain_deadline_);
    if (ending_ && !killed_hard_) wake = std::min(wake, kill_deadline_);
    if (now < accept_paused_until_) wake = std::min(wake, accept_paused_until_);
    if (now < leftover_deadline_) wake = std::min(wake, leftover_deadline_);
    if (!leftovers_.empty()) wake = std::min(wake, now + std::chrono::milliseconds(100));
    const int n = ::poll(fds.data(), fds.size(), boot::poll_timeout_ms(wake));
    if (n <= 0) continue;
    for (std::size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      const Source& s = sources[i];
      switch (s.kind) {
        case Kind::signal:
          on_signal();
          break;
        case Kind::listen:
          accept_conns();
          break;
        case Kind::conn:
          // A hang-up with answers queued and reading paused ends in the
          // write, which fails: the connection closes instead of spinning.
          if (fds[i].revents & (POLLOUT | POLLHUP | POLLERR)) flush_conn(s.fd);
          if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) read_conn(s.fd);
          break;
        case Kind::pipe:
          read_pipe(ranks_[s.rank], s.which);
          break;
        case Kind::output: {
          OutputQueue& q = outputs_[static_cast<std::size_t>(s.which)];
          const std::size_t before = q.written();
          (void)q.flush();
          // Draining at the end: a second more for as long as a reader
          // takes what waits (only a reader that takes nothing gives up).
          if (q.written() != before && drain_deadline_ != Clock::time_point::max())
            drain_deadline_ = Clock::now() + std::chrono::seconds(1);
          break;
        }
        case Kind::abort:
          // The abort ends the job even when the rank then exits 0
          // (MPI_Abort(comm, 0)): the others may wait in a barrier.
          if (const auto code = pmi_.take_abort(); code && !ending_) {
            const auto others = running_ranks();
            if (!others.empty())
              say("terminating ranks " + proto::format_ranks(others) + " after the abort");
            end_job(*code);
          }
          break;
      }
    }
  }
}

}  // namespace

int run_job(const Options& options) {
  Job job(options);
  return job.run();
}

}  // namespace pier::run
