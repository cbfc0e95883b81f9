// bench/shm_pingpong: the shm driver between two processes pinned to two
// cores, against raw references measured in the same run:
//   - a bare shared-memory ping-pong, one cache line per side;
//   - memcpy bandwidth, and process_vm_writev (bare single copy) bandwidth;
//   - pier shm: one-way 8 B latency (send_buf_get/post, recv_poll on the
//     cell itself) and streaming bandwidth on a large track (the receiver
//     posts, its rdv data goes back on the small track, the sender moves the
//     bytes), with single copy and with the pipelined copy through cells.
// Each figure is the median of --reps runs, with min and max.
//
// usage: shm_pingpong [--iters N] [--reps R] [--cpus A,B] [--only latency|bandwidth]
// On a loaded machine, `chrt -f 10 shm_pingpong ...` keeps other tenants off
// the two cores for the run (both processes spin).
#include "drivers/shm/shm.hpp"

#include "base/config.hpp"

#include <pier/driver.hpp>

#include <sched.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace {

using pier::Status;
using pier::driver::Clock;
using pier::driver::Instance;
using pier::driver::Packet;
using pier::driver::Track;

int cpu_a = 0;
int cpu_b = 1;
long iters = 200000;
int reps = 5;
std::string only;
const std::size_t sizes[] = {64 * 1024, 1024 * 1024, 16 * 1024 * 1024};

double now_s() {
  return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
}

void pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof set, &set) != 0) std::perror("sched_setaffinity");
}

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "shm_pingpong: %s\n", what);
  std::_Exit(2);
}

/// Runs `child` in a forked process; returns its pid.
pid_t spawn(const std::function<void()>& child) {
  const pid_t pid = fork();
  if (pid < 0) die("fork");
  if (pid == 0) {
    pin(cpu_b);
    child();
    std::_Exit(0);
  }
  // Also from here: under a real-time policy (chrt) a child still on our
  // core would never run while we spin.
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu_b, &set);
  (void)sched_setaffinity(pid, sizeof set, &set);
  return pid;
}

void reap(pid_t pid) {
  int st = 0;
  waitpid(pid, &st, 0);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) die("child failed");
}

struct Stat {
  double median, lo, hi;
};
Stat stat_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.front(), v.back()};
}

// --- references -----------------------------------------------------------

/// `relax`: a pause instruction in the empty polls (as pier's receive
/// spins), which on some cores lets the writer's line through sooner.
double bare_pingpong_ns(bool relax) {
  struct alignas(64) Line {
    std::atomic<std::uint64_t> v;
  };
  auto* lines = static_cast<Line*>(
      mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  if (lines == MAP_FAILED) die("mmap");
  new (&lines[0]) Line{};
  new (&lines[2]) Line{};  // a line apart from the other side's (no adjacent-line sharing)
  const long total = iters + iters / 10;
  const pid_t pid = spawn([&] {
    for (long i = 1; i <= total; ++i) {
      while (lines[0].v.load(std::memory_order_acquire) != static_cast<std::uint64_t>(i)) {
        if (relax) __builtin_ia32_pause();
      }
      lines[2].v.store(static_cast<std::uint64_t>(i), std::memory_order_release);
    }
  });
  double t0 = 0;
  for (long i = 1; i <= total; ++i) {
    if (i == iters / 10 + 1) t0 = now_s();
    lines[0].v.store(static_cast<std::uint64_t>(i), std::memory_order_release);
    while (lines[2].v.load(std::memory_order_acquire) != static_cast<std::uint64_t>(i)) {
      if (relax) __builtin_ia32_pause();
    }
  }
  const double t = now_s() - t0;
  reap(pid);
  munmap(lines, 4096);
  return t / static_cast<double>(iters) / 2 * 1e9;
}

long count_for(std::size_t size) {
  return std::max<long>(20, static_cast<long>((4ull << 30) / size / 4));
}

double memcpy_gbps(std::size_t size) {
  std::vector<char> a(size, 1), b(size, 2);
  const long n = count_for(size);
  const double t0 = now_s();
  for (long i = 0; i < n; ++i) {
    std::memcpy(b.data(), a.data(), size);
    asm volatile("" : : "r"(b.data()) : "memory");
  }
  return static_cast<double>(size) * static_cast<double>(n) / (now_s() - t0) / 1e9;
}

double cma_gbps(std::size_t size) {
  std::vector<char> local(size, 3);
  std::vector<char> remote(size, 4);  // the child's copy after fork is its own
  int go[2];
  if (pipe(go) != 0) die("pipe");
  const pid_t pid = spawn([&] {
    std::memset(remote.data(), 5, size);  // fault its pages in
    char c;
    if (read(go[0], &c, 1) < 0) std::_Exit(1);
  });
  usleep(20000);
  const long n = count_for(size);
  iovec l{local.data(), size};
  iovec r{remote.data(), size};
  double t0 = now_s();
  for (long i = 0; i < n; ++i)
    if (process_vm_writev(pid, &l, 1, &r, 1, 0) != static_cast<ssize_t>(size)) die("writev");
  const double t = now_s() - t0;
  if (write(go[1], "x", 1) != 1) die("pipe write");
  reap(pid);
  close(go[0]);
  close(go[1]);
  return static_cast<double>(size) * static_cast<double>(n) / t / 1e9;
}

// --- pier shm -------------------------------------------------------------

struct End {
  std::unique_ptr<pier::driver::Context> ctx;
  std::unique_ptr<Instance> small;
  std::unique_ptr<Instance> large;
};

/// Both processes call this with their ends of two pipes.
End connect_end(int out, int in) {
  End e;
  auto ctx = pier::drivers::shm::entry().make("");
  if (!ctx) die("make");
  e.ctx = std::move(*ctx);
  if (!e.ctx->properties(pier::driver::Hints{})) die("properties");
  auto url = e.ctx->init();
  if (!url) die("init");
  const std::uint32_t n = static_cast<std::uint32_t>(url->size());
  if (write(out, &n, 4) != 4 || write(out, url->data(), n) != n) die("url write");
  std::uint32_t m = 0;
  if (read(in, &m, 4) != 4 || m > 1024) die("url read");
  std::vector<std::byte> peer(m);
  if (read(in, peer.data(), m) != m) die("url read");
  e.small = std::move(*e.ctx->open_instance(Track::small));
  e.large = std::move(*e.ctx->open_instance(Track::large));
  (void)e.small->connect_async(peer);
  (void)e.large->connect_async(peer);
  const auto end = Clock::now() + std::chrono::seconds(10);
  if (e.small->connect_wait(end) != Status::ok || e.large->connect_wait(end) != Status::ok)
    die("connect");
  return e;
}

void send_small(Instance& inst, const void* data, std::size_t len) {
  Packet s;
  while (inst.send_buf_get(s) == Status::no_resource) {
  }
  std::memcpy(s.buf, data, len);
  if (inst.send_buf_post(s, len) != Status::ok) die("send_buf_post");
}

Packet recv_small(Instance& inst) {
  Packet r;
  Status st;
  while ((st = inst.recv_poll(r)) == Status::in_progress) {
  }
  if (st != Status::ok) die("recv_poll");
  return r;
}

/// Runs `parent` and `child` connected to each other; returns parent's value.
double with_pair(const std::function<void(End&)>& child,
                 const std::function<double(End&)>& parent) {
  int up[2], down[2];
  if (pipe(up) != 0 || pipe(down) != 0) die("pipe");
  const pid_t pid = spawn([&] {
    End e = connect_end(up[1], down[0]);
    child(e);
  });
  pin(cpu_a);
  End e = connect_end(down[1], up[0]);
  const double v = parent(e);
  e.small.reset();
  e.large.reset();
  reap(pid);
  for (int fd : {up[0], up[1], down[0], down[1]}) close(fd);
  return v;
}

double pier_latency_ns() {
  const long total = iters + iters / 10;
  return with_pair(
      [&](End& e) {
        for (long i = 0; i < total; ++i) {
          Packet r = recv_small(*e.small);
          std::uint64_t v = 0;
          std::memcpy(&v, r.buf, 8);
          if (e.small->recv_buf_release(r) != Status::ok) die("release");
          send_small(*e.small, &v, 8);
        }
      },
      [&](End& e) {
        double t0 = 0;
        for (long i = 0; i < total; ++i) {
          if (i == iters / 10) t0 = now_s();
          const std::uint64_t v = static_cast<std::uint64_t>(i);
          send_small(*e.small, &v, 8);
          Packet r = recv_small(*e.small);
          if (e.small->recv_buf_release(r) != Status::ok) die("release");
        }
        return (now_s() - t0) / static_cast<double>(iters) / 2 * 1e9;
      });
}

/// The child receives `n` messages of `size` on the large track, each after
/// posting and sending its rdv data on the small track; then acknowledges.
double pier_stream_gbps(std::size_t size) {
  const long n = count_for(size);
  const long warm = std::max<long>(2, n / 10);
  return with_pair(
      [&](End& e) {
        std::vector<std::byte> buf(size);
        std::memset(buf.data(), 1, size);
        for (long i = 0; i < n + warm; ++i) {
          Packet r;
          iovec v{buf.data(), size};
          r.set_iovec(&v, 1);
          if (e.large->recv_post(r) != Status::in_progress) die("recv_post");
          std::byte msg[1 + Packet::rdv_capacity];
          msg[0] = static_cast<std::byte>(r.rdv_len);
          std::memcpy(msg + 1, r.rdv_data.data(), r.rdv_len);
          send_small(*e.small, msg, 1 + r.rdv_len);
          Status st;
          while ((st = e.large->recv_poll(r)) == Status::in_progress) {
          }
          if (st != Status::ok || r.length != size) die("large receive");
        }
        const char ack = 'A';
        send_small(*e.small, &ack, 1);
      },
      [&](End& e) {
        std::vector<std::byte> buf(size);
        std::memset(buf.data(), 2, size);
        double t0 = 0;
        for (long i = 0; i < n + warm; ++i) {
          if (i == warm) t0 = now_s();
          Packet rdv = recv_small(*e.small);
          Packet s;
          iovec v{buf.data(), size};
          s.set_iovec(&v, 1);
          s.rdv_len = static_cast<std::uint8_t>(rdv.buf[0]);
          std::memcpy(s.rdv_data.data(), rdv.buf + 1, s.rdv_len);
          if (e.small->recv_buf_release(rdv) != Status::ok) die("release");
          Status st = e.large->send_post(s);
          while (st == Status::in_progress) st = e.large->send_poll(s);
          if (st != Status::ok) die("large send");
        }
        Packet ack = recv_small(*e.small);
        const double t = now_s() - t0;
        (void)e.small->recv_buf_release(ack);
        return static_cast<double>(size) * static_cast<double>(n) / t / 1e9;
      });
}

void row(const char* name, const char* unit, const std::function<double()>& f) {
  std::vector<double> v;
  for (int i = 0; i < reps; ++i) v.push_back(f());
  const Stat s = stat_of(v);
  std::printf("| %s | %.3f | %.3f | %.3f | %s |\n", name, s.median, s.lo, s.hi, unit);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--iters")
      iters = std::atol(argv[i + 1]);
    else if (a == "--reps")
      reps = std::max(1, std::atoi(argv[i + 1]));
    else if (a == "--cpus")
      std::sscanf(argv[i + 1], "%d,%d", &cpu_a, &cpu_b);
    else if (a == "--only")
      only = argv[i + 1];
  }
  pin(cpu_a);
  std::printf("shm_pingpong: cores %d,%d, %ld round trips, median of %d runs (min, max)\n\n", cpu_a,
              cpu_b, iters, reps);
  std::printf("| measure | median | min | max | unit |\n|---|---|---|---|---|\n");
  if (only != "bandwidth") {
    row("bare ping-pong, one line per side, one-way", "ns", [] { return bare_pingpong_ns(false); });
    row("bare ping-pong, pause in the empty polls, one-way", "ns",
        [] { return bare_pingpong_ns(true); });
    row("pier shm 8 B one-way latency", "ns", pier_latency_ns);
  }
  if (only == "latency") return 0;
  for (std::size_t size : sizes) {
    const std::string k = std::to_string(size / 1024) + " KiB";
    row(("memcpy " + k).c_str(), "GB/s", [&] { return memcpy_gbps(size); });
    row(("bare process_vm_writev " + k).c_str(), "GB/s", [&] { return cma_gbps(size); });
    {
      pier::config::ScopedSet all("SHM_CMA_MIN", "0");
      row(("pier shm stream, single copy " + k).c_str(), "GB/s",
          [&] { return pier_stream_gbps(size); });
      pier::config::ScopedSet whole("SHM_SPLIT_MIN", "0");
      row(("pier shm stream, single copy unsplit " + k).c_str(), "GB/s",
          [&] { return pier_stream_gbps(size); });
    }
    row(("pier shm stream, defaults " + k).c_str(), "GB/s", [&] { return pier_stream_gbps(size); });
    {
      pier::config::ScopedSet off("SHM_CMA", "false");
      row(("pier shm stream, copy through cells " + k).c_str(), "GB/s",
          [&] { return pier_stream_gbps(size); });
    }
  }
  return 0;
}
