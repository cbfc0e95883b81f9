// boot_probe: a small program run by pier-run in the multiproc tests; it
// exercises the bootstrap exchange and misbehaves on request.
//   boot_probe exchange              put / commit / fence / get, two epochs
//   boot_probe fail R CODE           exchange, then rank R exits with CODE
//   boot_probe signal R              exchange, then rank R kills itself
//   boot_probe absent R SECONDS      rank R never opens the exchange; the
//                                    others fence with a SECONDS deadline
//   boot_probe leave R               rank R exits 0 without fencing
//   boot_probe sleep                 exchange, then sleep (signal tests)
//   boot_probe badversion            speak boot protocol version 9 to
//                                    pier-run and print its refusal
//   boot_probe badlib R              rank R says hello as pier 9.9.9; the
//                                    others run the exchange
//   boot_probe claim R               every rank but R first says hello as
//                                    rank R (R waits a second) and prints
//                                    whether pier-run refused it; then the
//                                    exchange
//   boot_probe flood                 holds as many connections to pier-run
//                                    as this process may open for 1.5 s and
//                                    prints the CPU time pier-run used
//                                    meanwhile; then the exchange
//   boot_probe queryflood            says hello, then sends queries for
//                                    1.5 s without reading the answers and
//                                    prints how much pier-run grew
//   boot_probe stubborn              leaves a child that ignores SIGTERM
//                                    running, and exits
//   boot_probe deaf                  ignores SIGTERM and sleeps 60 s
//   boot_probe impostor              (root) a child that became `nobody`
//                                    connects to pier-run's socket and
//                                    reports whether it was closed at once;
//                                    then the exchange
// Prints "probe rank R: ..." lines; exits 0 on success, 2 when the exchange
// failed (the bootstrap's error is printed), 1 on wrong data or usage.
#include "boot/boot.hpp"
#include "boot/proto.hpp"
#include "boot/socket.hpp"

#include <fmt/format.h>

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

using pier::boot::Bootstrap;
using pier::boot::Clock;

std::string text_of(const std::vector<std::byte>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size());
}

/// Two epochs: every rank publishes a value, then a second one.
int exchange(Bootstrap& boot, int fence_seconds) {
  const auto me = boot.rank();
  for (int epoch = 1; epoch <= 2; ++epoch) {
    const std::string key = fmt::format("probe.{}", epoch);
    if (boot.put(key, fmt::format("rank {} epoch {}", me, epoch)) != pier::Status::ok ||
        boot.commit() != pier::Status::ok) {
      fmt::print("probe rank {}: put/commit failed: {}\n", me, boot.last_error());
      return 2;
    }
    const pier::Status s = boot.fence(Clock::now() + std::chrono::seconds(fence_seconds));
    if (s != pier::Status::ok) {
      fmt::print("probe rank {}: fence failed ({}): {}\n", me, pier::to_string(s),
                 boot.last_error());
      return 2;
    }
    for (std::uint32_t r = 0; r < boot.size(); ++r) {
      auto v = boot.get(r, key);
      const std::string want = fmt::format("rank {} epoch {}", r, epoch);
      if (!v || text_of(*v) != want) {
        fmt::print("probe rank {}: wrong value from rank {} in epoch {}\n", me, r, epoch);
        return 1;
      }
    }
  }
  // A key never put is reported, not invented.
  if (boot.get(0, "probe.none").status() != pier::Status::not_found) return 1;
  fmt::print("probe rank {}: exchange ok (size {}, method {})\n", me, boot.size(), boot.method());
  return 0;
}

/// Connects like a rank from another pier and prints pier-run's answer:
/// with `library` empty it speaks protocol version 9; otherwise it speaks
/// version 1 but claims that library version.
int bad_version(long my_rank, long size, const std::string& library) {
  auto address = pier::boot::parse_unix_address(std::getenv("PIER_RUN_SOCKET"));
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  if (!address || fd < 0 ||
      ::connect(fd, reinterpret_cast<const ::sockaddr*>(&address->addr), address->len) != 0)
    return 2;
  // Length 0, version 9, then bytes this version would not understand.
  std::vector<std::byte> frame = {std::byte{0}, std::byte{0},    std::byte{0},    std::byte{0},
                                  std::byte{9}, std::byte{0xee}, std::byte{0xee}, std::byte{0xee}};
  if (!library.empty()) {
    frame = pier::boot::proto::encode_hello({static_cast<std::uint32_t>(my_rank),
                                             static_cast<std::uint32_t>(size),
                                             static_cast<std::uint32_t>(::getpid()),
                                             library,
                                             {}});
  }
  if (::write(fd, frame.data(), frame.size()) != static_cast<::ssize_t>(frame.size())) return 2;
  pier::boot::proto::FrameReader reader;
  std::byte buf[4096];
  for (;;) {
    const ::ssize_t n = ::read(fd, buf, sizeof buf);  // pier-run answers, then closes
    if (n <= 0) break;
    reader.append(std::span(buf, static_cast<std::size_t>(n)));
  }
  ::close(fd);
  auto frame_in = reader.next();
  if (!frame_in || !*frame_in) return 2;
  auto err = pier::boot::proto::decode_error((*frame_in)->body);
  if (!err) return 2;
  fmt::print("probe rank {}: refused: {}\n", my_rank, err->text);
  return err->why == pier::boot::proto::Refusal::version_mismatch ? 0 : 1;
}

/// A process of another user at pier-run's socket: 0 when pier-run closes
/// it at once, 1 when it is still open after 3 s.
int impostor(long my_rank) {
  if (::geteuid() != 0) {
    fmt::print("probe rank {}: impostor skipped (not root)\n", my_rank);
    return 0;
  }
  const char* name = std::getenv("PIER_RUN_SOCKET");
  auto address = name ? pier::boot::parse_unix_address(name) : pier::Status::invalid_argument;
  if (!address) return 1;
  const pid_t child = ::fork();
  if (child < 0) return 1;
  if (child == 0) {
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(3);
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd < 0 ||
        ::connect(fd, reinterpret_cast<const ::sockaddr*>(&address->addr), address->len) != 0)
      ::_exit(4);
    ::pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 3000) != 1) ::_exit(1);  // still open
    char c = 0;
    ::_exit(::recv(fd, &c, 1, 0) == 0 ? 0 : 2);
  }
  int status = 0;
  (void)::waitpid(child, &status, 0);
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 9;
  fmt::print("probe rank {}: impostor {}\n", my_rank,
             code == 0 ? "refused" : fmt::format("not refused ({})", code));
  return code == 0 ? 0 : 1;
}

/// A connection to pier-run's socket (PIER_RUN_SOCKET), or -1.
int dial_pier_run() {
  auto address = pier::boot::parse_unix_address(std::getenv("PIER_RUN_SOCKET"));
  if (!address) return -1;
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (::connect(fd, reinterpret_cast<const ::sockaddr*>(&address->addr), address->len) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

/// Says hello as `claimed` (this pier's version) on a connection of its
/// own: 0 when pier-run refuses it within 3 s, 1 when it does not.
int claim(long my_rank, long size, long claimed) {
  const int fd = dial_pier_run();
  if (fd < 0) return 2;
  const auto frame = pier::boot::proto::encode_hello({static_cast<std::uint32_t>(claimed),
                                                      static_cast<std::uint32_t>(size),
                                                      static_cast<std::uint32_t>(::getpid()),
                                                      std::string(pier::boot::library_version()),
                                                      {}});
  if (::write(fd, frame.data(), frame.size()) != static_cast<::ssize_t>(frame.size())) return 2;
  pier::boot::proto::FrameReader reader;
  std::byte buf[4096];
  const auto until = Clock::now() + std::chrono::seconds(3);
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
    ::pollfd p{fd, POLLIN, 0};
    if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) != 1) break;
    const ::ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) break;
    reader.append(std::span(buf, static_cast<std::size_t>(n)));
  }
  ::close(fd);
  auto frame_in = reader.next();
  if (frame_in && *frame_in) {
    if (auto err = pier::boot::proto::decode_error((*frame_in)->body)) {
      fmt::print("probe rank {}: claim of rank {} refused: {}\n", my_rank, claimed, err->text);
      return 0;
    }
  }
  fmt::print("probe rank {}: claim of rank {} accepted\n", my_rank, claimed);
  return 1;
}

/// CPU time so far, in clock ticks, of the process whose /proc/<pid>/stat
/// `stat_fd` is open on (opened beforehand: the flood leaves no descriptor
/// free); -1 if unknown.
long cpu_ticks(int stat_fd) {
  char text[1024] = {};
  const ::ssize_t n = ::pread(stat_fd, text, sizeof text - 1, 0);
  // Fields after the command name (which may hold spaces) start past ')'.
  const char* p = n > 0 ? std::strrchr(text, ')') : nullptr;
  if (p == nullptr) return -1;
  long utime = 0, stime = 0;
  // state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime
  if (std::sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %ld %ld", &utime, &stime) !=
      2)
    return -1;
  return utime + stime;
}

/// Connects to pier-run until a connect fails or this process runs out of
/// descriptors (pier-run, limited alike, runs out first), holds them, and
/// reports how much CPU pier-run spent meanwhile (it used to spin on the
/// readable listening socket it could not accept from).
int flood(long my_rank) {
  auto address = pier::boot::parse_unix_address(std::getenv("PIER_RUN_SOCKET"));
  const int stat_fd = ::open(fmt::format("/proc/{}/stat", ::getppid()).c_str(), O_RDONLY);
  if (!address || stat_fd < 0) return 2;
  std::vector<int> held;
  for (int i = 0; i < 100000; ++i) {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) break;
    if (::connect(fd, reinterpret_cast<const ::sockaddr*>(&address->addr), address->len) != 0) {
      ::close(fd);
      break;
    }
    held.push_back(fd);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const long before = cpu_ticks(stat_fd);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  const long after = cpu_ticks(stat_fd);
  for (int fd : held) ::close(fd);
  ::close(stat_fd);
  if (before < 0 || after < 0) return 2;
  const long ms = (after - before) * 1000 / ::sysconf(_SC_CLK_TCK);
  fmt::print("probe rank {}: flood of {} connections: pier-run used {} ms of CPU in 1500 ms\n",
             my_rank, held.size(), ms);
  return 0;
}

/// VmRSS of the process whose /proc/<pid>/status is `path`, in KiB; -1 if unknown.
long rss_kib(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) return -1;
  char line[256];
  long kib = -1;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "VmRSS: %ld kB", &kib) == 1) break;
  std::fclose(f);
  return kib;
}

/// Says hello as itself, then sends queries without reading an answer for
/// 1.5 s (or until pier-run stops taking them for 0.5 s) and reports how
/// much pier-run's resident memory grew: it kept every answer queued.
int query_flood(long my_rank, long size) {
  const int fd = dial_pier_run();
  if (fd < 0) return 2;
  const auto hello = pier::boot::proto::encode_hello({static_cast<std::uint32_t>(my_rank),
                                                      static_cast<std::uint32_t>(size),
                                                      static_cast<std::uint32_t>(::getpid()),
                                                      std::string(pier::boot::library_version()),
                                                      {}});
  if (::write(fd, hello.data(), hello.size()) != static_cast<::ssize_t>(hello.size())) return 2;
  const std::string status = fmt::format("/proc/{}/status", ::getppid());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const long before = rss_kib(status);
  (void)::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  std::vector<std::byte> batch;
  const auto query = pier::boot::proto::encode_query(0);
  for (int i = 0; i < 256; ++i) batch.insert(batch.end(), query.begin(), query.end());
  std::size_t sent = 0, at = 0;
  const auto end = Clock::now() + std::chrono::milliseconds(1500);
  auto last_progress = Clock::now();
  while (Clock::now() < end && Clock::now() - last_progress < std::chrono::milliseconds(500)) {
    const ::ssize_t n = ::send(fd, batch.data() + at, batch.size() - at, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<std::size_t>(n);
      at = (at + static_cast<std::size_t>(n)) % batch.size();
      last_progress = Clock::now();
    } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
      break;
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  const long after = rss_kib(status);
  ::close(fd);
  if (before < 0 || after < 0) return 2;
  fmt::print("probe rank {}: query flood: {} queries sent, pier-run grew by {} KiB\n", my_rank,
             sent / query.size(), after - before);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  if (argc < 2) return 1;
  const std::string mode = argv[1];
  const long target = argc > 2 ? std::strtol(argv[2], nullptr, 10) : -1;
  const long arg = argc > 3 ? std::strtol(argv[3], nullptr, 10) : 0;
  const char* env_rank = std::getenv("PIER_RUN_RANK");
  const long my_rank = env_rank ? std::strtol(env_rank, nullptr, 10) : 0;

  if (mode == "absent" && my_rank == target) {
    // Never opens the exchange; pier-run ends it when the others give up.
    std::this_thread::sleep_for(std::chrono::seconds(60));
    return 0;
  }
  const char* env_size = std::getenv("PIER_RUN_SIZE");
  const long size = env_size ? std::strtol(env_size, nullptr, 10) : 1;
  if (mode == "badversion") return bad_version(my_rank, size, "");
  if (mode == "badlib" && my_rank == target) return bad_version(my_rank, size, "9.9.9");
  if (mode == "impostor")
    if (int rc = impostor(my_rank); rc != 0) return rc;
  if (mode == "flood")
    if (int rc = flood(my_rank); rc != 0) return rc;
  if (mode == "queryflood") return query_flood(my_rank, size);
  if (mode == "deaf") {
    std::signal(SIGTERM, SIG_IGN);
    std::this_thread::sleep_for(std::chrono::seconds(60));
    return 0;
  }
  if (mode == "stubborn") {
    // Ignored before the fork, so the child ignores it from its first
    // instruction: set in the child, a SIGTERM from pier-run could come
    // first on a loaded machine, and the job ended at once (seen once in a
    // full parallel ctest: the test failed in 0.03 s).
    std::signal(SIGTERM, SIG_IGN);
    const pid_t child = ::fork();
    if (child == 0) {
      const int null = ::open("/dev/null", O_WRONLY);
      ::dup2(null, STDOUT_FILENO);
      ::dup2(null, STDERR_FILENO);
      std::this_thread::sleep_for(std::chrono::seconds(100));
      ::_exit(0);
    }
    fmt::print("probe rank {}: left pid {} running\n", my_rank, child);
    return child > 0 ? 0 : 2;
  }
  if (mode == "claim" && my_rank != target)
    if (int rc = claim(my_rank, size, target); rc != 0) return rc;
  if (mode == "claim" && my_rank == target) std::this_thread::sleep_for(std::chrono::seconds(1));
  auto boot = Bootstrap::open();
  if (!boot) {
    fmt::print("probe rank {}: open failed: {}\n", my_rank, pier::to_string(boot.status()));
    return 2;
  }
  if (mode == "leave" && my_rank == target) return 0;
  const int fence_seconds = mode == "absent" ? static_cast<int>(arg) : 30;
  const int rc = exchange(**boot, fence_seconds);
  if (rc != 0) return rc;
  if (mode == "fail" && my_rank == target) return static_cast<int>(arg);
  if (mode == "signal" && my_rank == target) ::kill(::getpid(), SIGKILL);
  if (mode == "sleep") fmt::print("probe rank {}: sleeping\n", my_rank);
  if (mode == "fail" || mode == "signal" || mode == "sleep")
    std::this_thread::sleep_for(std::chrono::seconds(60));
  return 0;
}
