// tcp_bench: the tcp driver against bare sockets, measured side by side in
// one run. Two processes (parent pinned to one cpu, a forked child to
// another) over loopback:
//   latency    8 B .. 64 KiB ping-pong, busy polling, one-way = round trip / 2;
//              bare: send()/recv() with MSG_DONTWAIT retried in a loop, TCP_NODELAY;
//   bandwidth  streaming 64 KiB and 1 MiB messages, 256 MiB per size, then a
//              1-byte ack; bare: back-to-back send() of each message, the
//              receiver drains with 4 MiB recv() calls.
// Each figure is the median of --reps repetitions, with min and max.
// usage: tcp_bench [--reps N] [--cpus A,B] [--lat S1,S2..] [--bw S1,S2..]
//   (an empty list, e.g. --bw "", skips that part)
#include "drivers/tcp/tcp.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace {

using pier::Status;
using pier::driver::Packet;
using pier::driver::Track;
using Clock = std::chrono::steady_clock;

std::vector<std::size_t> lat_sizes = {8, 4096, 65536};
std::vector<std::size_t> bw_sizes = {65536, 1048576};
constexpr std::size_t bw_total = 256u << 20;

int cpu_parent = 0;
int cpu_child = 1;

void pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof set, &set) != 0) std::perror("sched_setaffinity");
}

long lat_iters(std::size_t size) {
  return size <= 4096 ? 20000 : 5000;
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "tcp_bench: %s\n", what);
  std::_Exit(3);
}

// --- bare sockets ---------------------------------------------------------

void spin_write(int fd, const char* p, std::size_t n) {
  while (n > 0) {
    const ssize_t w = ::send(fd, p, n, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      die("send");
    }
    p += w;
    n -= static_cast<std::size_t>(w);
  }
}

void spin_read(int fd, char* p, std::size_t n) {
  while (n > 0) {
    const ssize_t r = ::recv(fd, p, n, MSG_DONTWAIT);
    if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (r <= 0) die("recv");
    p += r;
    n -= static_cast<std::size_t>(r);
  }
}

/// A connected TCP_NODELAY pair across fork: returns the parent's fd, and
/// runs `child(fd)` in the child.
template <class Fn>
int bare_pair(Fn child, pid_t* pid) {
  const int lfd = ::socket(AF_INET, SOCK_STREAM, 0);
  ::sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t al = sizeof a;
  if (::bind(lfd, reinterpret_cast<::sockaddr*>(&a), sizeof a) != 0 || ::listen(lfd, 1) != 0)
    die("bind");
  ::getsockname(lfd, reinterpret_cast<::sockaddr*>(&a), &al);
  int one = 1;
  *pid = ::fork();
  if (*pid == 0) {
    pin(cpu_child);
    const int fd = ::accept(lfd, nullptr, nullptr);
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    child(fd);
    std::_Exit(0);
  }
  ::close(lfd);
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (::connect(fd, reinterpret_cast<::sockaddr*>(&a), sizeof a) != 0) die("connect");
  return fd;
}

double bare_latency_us(std::size_t size) {
  const long iters = lat_iters(size), warm = iters / 10;
  std::vector<char> buf(size, 5);
  pid_t pid = 0;
  const int fd = bare_pair(
      [&](int cfd) {
        for (long i = 0; i < iters + warm; ++i) {
          spin_read(cfd, buf.data(), size);
          spin_write(cfd, buf.data(), size);
        }
      },
      &pid);
  Clock::time_point t0;
  for (long i = 0; i < iters + warm; ++i) {
    if (i == warm) t0 = Clock::now();
    spin_write(fd, buf.data(), size);
    spin_read(fd, buf.data(), size);
  }
  const double t = seconds_since(t0);
  ::close(fd);
  ::waitpid(pid, nullptr, 0);
  return t / static_cast<double>(iters) / 2 * 1e6;
}

double bare_bandwidth_gbs(std::size_t size) {
  const std::size_t count = std::max<std::size_t>(1, bw_total / size);
  std::vector<char> buf(std::max<std::size_t>(size, 4u << 20), 5);
  pid_t pid = 0;
  const int fd = bare_pair(
      [&](int cfd) {
        std::size_t got = 0;
        while (got < count * size) {
          const ssize_t r = ::recv(cfd, buf.data(), buf.size(), MSG_DONTWAIT);
          if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
          if (r <= 0) die("recv");
          got += static_cast<std::size_t>(r);
        }
        spin_write(cfd, "k", 1);
      },
      &pid);
  const auto t0 = Clock::now();
  for (std::size_t i = 0; i < count; ++i) spin_write(fd, buf.data(), size);
  char ack = 0;
  spin_read(fd, &ack, 1);
  const double t = seconds_since(t0);
  ::close(fd);
  ::waitpid(pid, nullptr, 0);
  return static_cast<double>(count * size) / t / 1e9;
}

// --- pier tcp -------------------------------------------------------------

struct Node {
  std::unique_ptr<pier::driver::Context> ctx;
  std::unique_ptr<pier::driver::Instance> inst;
};

/// Brings up a context in this process, swaps urls through the pipes and
/// connects one instance of `track`.
Node pier_connect(int write_fd, int read_fd, Track track) {
  Node n;
  auto made = pier::drivers::tcp::entry().make("");
  if (!made) die("make");
  n.ctx = std::move(*made);
  if (!n.ctx->properties(pier::driver::Hints{})) die("properties");
  auto url = n.ctx->init();
  if (!url) die("init");
  if (::write(write_fd, url->data(), url->size()) != static_cast<ssize_t>(url->size()))
    die("write url");
  std::vector<std::byte> peer(url->size());
  std::size_t got = 0;
  while (got < peer.size()) {
    const ssize_t r = ::read(read_fd, peer.data() + got, peer.size() - got);
    if (r <= 0) die("read url");
    got += static_cast<std::size_t>(r);
  }
  auto inst = n.ctx->open_instance(track);
  if (!inst) die("open_instance");
  n.inst = std::move(*inst);
  if (!pier::is_success(n.inst->connect_async(peer))) die("connect_async");
  if (n.inst->connect_wait(Clock::now() + std::chrono::seconds(10)) != Status::ok)
    die("connect_wait");
  return n;
}

/// Forks; the child runs `child(node)`, the parent gets its own node.
template <class Fn>
Node pier_pair(Track track, Fn child, pid_t* pid) {
  int up[2], down[2];
  if (::pipe(up) != 0 || ::pipe(down) != 0) die("pipe");
  *pid = ::fork();
  if (*pid == 0) {
    pin(cpu_child);
    Node n = pier_connect(up[1], down[0], track);
    child(n);
    n.inst.reset();
    (void)n.ctx->close();
    std::_Exit(0);
  }
  Node n = pier_connect(down[1], up[0], track);
  ::close(up[0]);
  ::close(up[1]);
  ::close(down[0]);
  ::close(down[1]);
  return n;
}

struct Buf {
  std::vector<std::byte> bytes;
  ::iovec iov{};
  Packet pkt;
  explicit Buf(std::size_t n) : bytes(n, std::byte{5}) {
    iov = ::iovec{bytes.data(), n};
    pkt.set_iovec(&iov, 1);
  }
};

void spin_send(pier::driver::Instance& inst, Packet& pkt) {
  Status s = inst.send_post(pkt);
  while (s == Status::in_progress) s = inst.send_poll(pkt);
  if (s != Status::ok) die("send");
}

void spin_recv(pier::driver::Instance& inst, Packet& pkt) {
  Status s = inst.recv_post(pkt);
  while (s == Status::in_progress) s = inst.recv_poll(pkt);
  if (s != Status::ok) die("recv");
}

double pier_latency_us(std::size_t size) {
  const long iters = lat_iters(size), warm = iters / 10;
  pid_t pid = 0;
  Node n = pier_pair(
      Track::small,
      [&](Node& c) {
        Buf in(size), out(size);
        for (long i = 0; i < iters + warm; ++i) {
          spin_recv(*c.inst, in.pkt);
          spin_send(*c.inst, out.pkt);
        }
      },
      &pid);
  Buf in(size), out(size);
  Clock::time_point t0;
  for (long i = 0; i < iters + warm; ++i) {
    if (i == warm) t0 = Clock::now();
    // The receive is posted first, as the core pre-posts on a small track.
    Status r = n.inst->recv_post(in.pkt);
    spin_send(*n.inst, out.pkt);
    while (r == Status::in_progress) r = n.inst->recv_poll(in.pkt);
    if (r != Status::ok) die("recv");
  }
  const double t = seconds_since(t0);
  n.inst.reset();
  ::waitpid(pid, nullptr, 0);
  return t / static_cast<double>(iters) / 2 * 1e6;
}

double pier_bandwidth_gbs(std::size_t size) {
  const std::size_t count = std::max<std::size_t>(1, bw_total / size);
  pid_t pid = 0;
  Node n = pier_pair(
      Track::large,
      [&](Node& c) {
        Buf in(size), ack(1);
        for (std::size_t i = 0; i < count; ++i) spin_recv(*c.inst, in.pkt);
        spin_send(*c.inst, ack.pkt);
      },
      &pid);
  // A window of sends over one buffer: the driver's ring keeps the socket busy.
  constexpr std::size_t window = 16;
  std::vector<std::byte> data(size, std::byte{5});
  std::vector<::iovec> iov(window, ::iovec{data.data(), size});
  std::vector<Packet> pkts(window);
  for (std::size_t i = 0; i < window; ++i) pkts[i].set_iovec(&iov[i], 1);
  Buf ack(1);
  Status ack_status = n.inst->recv_post(ack.pkt);
  const auto t0 = Clock::now();
  std::size_t posted = 0, done = 0;
  while (done < count) {
    while (posted < count && posted - done < window) {
      const Status s = n.inst->send_post(pkts[posted % window]);
      if (s == Status::no_resource) break;
      if (!pier::is_success(s)) die("send_post");
      ++posted;
    }
    const Status s = n.inst->send_poll(pkts[done % window]);
    if (s == Status::ok) {
      ++done;
    } else if (s != Status::in_progress) {
      die("send_poll");
    }
  }
  while (ack_status == Status::in_progress) ack_status = n.inst->recv_poll(ack.pkt);
  if (ack_status != Status::ok) die("ack");
  const double t = seconds_since(t0);
  n.inst.reset();
  ::waitpid(pid, nullptr, 0);
  return static_cast<double>(count * size) / t / 1e9;
}

struct Stat {
  double median, min, max;
};

Stat stat_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return Stat{v[v.size() / 2], v.front(), v.back()};
}

/// Runs the two measures alternately (ABBA...), so that load drifting over
/// the run weighs on both alike.
template <class FnA, class FnB>
std::pair<Stat, Stat> measure_pair(int reps, FnA a, FnB b) {
  std::vector<double> va, vb;
  for (int r = 0; r < reps; ++r) {
    if (r % 2 == 0) {
      va.push_back(a());
      vb.push_back(b());
    } else {
      vb.push_back(b());
      va.push_back(a());
    }
  }
  return {stat_of(va), stat_of(vb)};
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--reps" && i + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++i]));
    } else if (arg == "--cpus" && i + 1 < argc) {
      if (std::sscanf(argv[++i], "%d,%d", &cpu_parent, &cpu_child) != 2) die("--cpus A,B");
    } else if ((arg == "--lat" || arg == "--bw") && i + 1 < argc) {
      std::vector<std::size_t>& list = arg == "--lat" ? lat_sizes : bw_sizes;
      list.clear();
      for (const char* p = argv[++i]; *p != '\0';) {
        char* end = nullptr;
        const unsigned long long v = std::strtoull(p, &end, 0);
        if (end == p || v == 0) die("sizes are positive numbers separated by commas");
        list.push_back(static_cast<std::size_t>(v));
        p = *end == ',' ? end + 1 : end;
      }
    } else {
      std::fprintf(stderr, "usage: tcp_bench [--reps N] [--cpus A,B] [--lat S,..] [--bw S,..]\n");
      return 2;
    }
  }
  pin(cpu_parent);
  std::printf("| measure | size | bare | pier tcp | pier/bare |\n|---|---|---|---|---|\n");
  for (std::size_t size : lat_sizes) {
    const auto [bare, pier] = measure_pair(
        reps, [&] { return bare_latency_us(size); }, [&] { return pier_latency_us(size); });
    std::printf("| latency us | %zu | %.2f [%.2f-%.2f] | %.2f [%.2f-%.2f] | %.3f |\n", size,
                bare.median, bare.min, bare.max, pier.median, pier.min, pier.max,
                pier.median / bare.median);
    std::fflush(stdout);
  }
  for (std::size_t size : bw_sizes) {
    const auto [bare, pier] = measure_pair(
        reps, [&] { return bare_bandwidth_gbs(size); }, [&] { return pier_bandwidth_gbs(size); });
    std::printf("| bandwidth GB/s | %zu | %.2f [%.2f-%.2f] | %.2f [%.2f-%.2f] | %.3f |\n", size,
                bare.median, bare.min, bare.max, pier.median, pier.min, pier.max,
                pier.median / bare.median);
    std::fflush(stdout);
  }
  return 0;
}
