// bench/bare.hpp: what the two-process benchmarks share: the reference
// column (a driver used bare, the least any layer above it can cost), the
// pipe two forked processes exchange urls over, and medians.
//   bare latency    8-byte ping-pong on the small track (send_buf or an
//                   iovec post; buffer receive or a posted receive);
//   bare bandwidth  messages streamed on the large track: per message the
//                   receiver posts, sends its rdv_data on the small track
//                   when the driver asks for a rendezvous, the sender moves
//                   the data; then an 8-byte answer.
// Header-only: each benchmark is one program.
#pragma once

#include <errno.h>
#include <sched.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "driver/driver.hpp"

namespace pier::bench {

using Clock = std::chrono::steady_clock;

[[noreturn]] inline void die(const char* what, Status s = Status::internal) {
  std::fprintf(stderr, "%s: %s: %s\n", program_invocation_short_name, what,
               std::string(to_string(s)).c_str());
  std::exit(2);
}
inline void check(Status s, const char* what) {
  if (s != Status::ok && s != Status::in_progress) die(what, s);
}

inline void pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  (void)sched_setaffinity(0, sizeof set, &set);
}

inline double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

/// One end of the two pipes between a forked parent and child.
struct Pipe {
  int w, r;
  void put(const std::vector<std::byte>& v) const {
    std::uint32_t n = static_cast<std::uint32_t>(v.size());
    if (::write(w, &n, 4) != 4 || ::write(w, v.data(), n) != static_cast<ssize_t>(n))
      die("pipe write");
  }
  std::vector<std::byte> get() const {
    std::uint32_t n = 0;
    if (::read(r, &n, 4) != 4) die("pipe read");
    std::vector<std::byte> v(n);
    std::size_t got = 0;
    while (got < n) {
      ssize_t k = ::read(r, v.data() + got, n - got);
      if (k <= 0) die("pipe read");
      got += static_cast<std::size_t>(k);
    }
    return v;
  }
  /// Both sides meet here before a measurement.
  void sync() const {
    char c = 's';
    if (::write(w, &c, 1) != 1 || ::read(r, &c, 1) != 1) die("pipe sync");
  }
  /// Sends our url, returns the peer's.
  std::vector<std::byte> exchange(const std::vector<std::byte>& mine) const {
    put(mine);
    return get();
  }
};

/// A driver context with one connected instance per track.
struct Bare {
  std::unique_ptr<driver::Context> ctx;
  std::unique_ptr<driver::Instance> small, large;
  driver::Caps caps;

  /// `exchange` sends our url to the peer and returns its url.
  void setup(const std::string& name, int rank,
             const std::function<std::vector<std::byte>(const std::vector<std::byte>&)>& exchange) {
    auto c = driver::make_context(name);
    if (!c) die("context", c.status());
    ctx = std::move(*c);
    driver::Hints hints;
    hints.session_size = 2;
    hints.rank = static_cast<std::uint32_t>(rank);
    auto props = ctx->properties(hints);
    if (!props) die("properties", props.status());
    caps = props->caps;
    auto url = ctx->init();
    if (!url) die("init", url.status());
    auto peer = exchange(*url);
    auto s_inst = ctx->open_instance(driver::Track::small);
    auto l_inst = ctx->open_instance(driver::Track::large);
    if (!s_inst || !l_inst) die("open_instance");
    small = std::move(*s_inst);
    large = std::move(*l_inst);
    check(small->connect_async(peer), "connect small");
    check(large->connect_async(peer), "connect large");
    auto deadline = Clock::now() + std::chrono::seconds(20);
    for (auto* i : {small.get(), large.get()}) {
      Status s;
      while ((s = i->connect_wait(Clock::now())) == Status::in_progress || s == Status::timeout)
        if (Clock::now() > deadline) die("connect timeout");
      if (s != Status::ok && s != Status::unsupported) die("connect", s);
    }
  }
  ~Bare() {
    small.reset();
    large.reset();
    if (ctx) (void)ctx->close();
  }

  void send_small(const void* data, std::size_t n) {
    driver::Packet p;
    Status s;
    if (caps.send_buf) {
      while ((s = small->send_buf_get(p)) == Status::no_resource) {
      }
      check(s, "send_buf_get");
      std::memcpy(p.buf, data, n);
      s = small->send_buf_post(p, n);
    } else {
      ::iovec v{const_cast<void*>(data), n};
      p.set_iovec(&v, 1);
      while ((s = small->send_post(p)) == Status::no_resource) {
      }
    }
    while (s == Status::in_progress) s = small->send_poll(p);
    check(s, "send small");
  }
  std::size_t recv_small(void* out, std::size_t cap) {
    driver::Packet p;
    Status s;
    if (caps.recv_buf) {
      while ((s = small->recv_poll(p)) == Status::in_progress) {
      }
      check(s, "recv_poll");
      std::size_t n = std::min(cap, p.buf_len);
      std::memcpy(out, p.buf, n);
      (void)small->recv_buf_release(p);
      return n;
    }
    ::iovec v{out, cap};
    p.set_iovec(&v, 1);
    check(small->recv_post(p), "recv_post");
    while ((s = small->recv_poll(p)) == Status::in_progress) {
    }
    check(s, "recv small");
    return cap;
  }
};

/// One-way latency in us of `iters` 8-byte round trips.
// Not inlined: callgrind can count it alone (--toggle-collect).
[[gnu::noinline]] inline double bare_latency(Bare& b, int rank, long iters) {
  char msg[8] = {};
  auto t0 = Clock::now();
  for (long i = 0; i < iters; ++i) {
    if (rank == 0) {
      b.send_small(msg, 8);
      b.recv_small(msg, 8);
    } else {
      b.recv_small(msg, 8);
      b.send_small(msg, 8);
    }
  }
  return since(t0) / static_cast<double>(iters) / 2 * 1e6;
}

/// MB/s of `total` bytes in messages of `buf.size() / buffers` bytes, rank 0
/// to 1; the receiver lands message k in part k % buffers of `buf`, so a
/// layer measured next to it can be given the same memory footprint.
inline double bare_bandwidth(Bare& b, int rank, std::span<std::byte> buf, std::size_t total,
                             int buffers = 1) {
  const std::size_t size = buf.size() / static_cast<std::size_t>(buffers);
  const std::size_t count = std::max<std::size_t>(1, total / size);
  auto t0 = Clock::now();
  for (std::size_t k = 0; k < count; ++k) {
    const std::size_t part = rank == 1 ? k % static_cast<std::size_t>(buffers) : 0;
    ::iovec v{buf.data() + part * size, size};
    if (rank == 1) {
      driver::Packet r;
      r.set_iovec(&v, 1);
      check(b.large->recv_post(r), "recv_post");
      if (b.caps.needs_rdv) {
        std::byte rdv[1 + driver::Packet::rdv_capacity];
        rdv[0] = static_cast<std::byte>(r.rdv_len);
        std::memcpy(rdv + 1, r.rdv_data.data(), r.rdv_len);
        b.send_small(rdv, 1 + r.rdv_len);
      }
      Status s;
      while ((s = b.large->recv_poll(r)) == Status::in_progress) {
      }
      check(s, "large recv_poll");
    } else {
      driver::Packet d;
      d.set_iovec(&v, 1);
      if (b.caps.needs_rdv) {
        std::byte rdv[1 + driver::Packet::rdv_capacity];
        b.recv_small(rdv, sizeof rdv);
        d.rdv_len = static_cast<std::uint8_t>(rdv[0]);
        std::memcpy(d.rdv_data.data(), rdv + 1, d.rdv_len);
      }
      Status s;
      while ((s = b.large->send_post(d)) == Status::no_resource) {
      }
      while (s == Status::in_progress) s = b.large->send_poll(d);
      check(s, "large send");
    }
  }
  char ack[8] = {};
  if (rank == 1)
    b.send_small(ack, 8);
  else
    b.recv_small(ack, 8);
  return static_cast<double>(count * size) / since(t0) / 1e6;
}

/// The repetitions of one figure.
struct Series {
  std::vector<double> v;
  double median() {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  }
};

}  // namespace pier::bench
