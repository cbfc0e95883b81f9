// core_bench: the core's own cost, measured against the bare shm driver in
// the same run. Two processes (parent on cpu 0, forked child on cpu 1):
//   latency    8-byte ping-pong, busy polling, one-way = round trip / 2;
//              bare: send_buf on the small track, buffer receive;
//              core: Core::send + progress, lib_parse answers recv() at once;
//   bandwidth  1 MiB and 16 MiB messages streamed, then an 8-byte ack;
//              bare: per message a large-track receive is posted and its
//              rdv_data sent on the small track, then the data (the minimal
//              rendezvous a driver with needs_rdv demands);
//              core: Core::send of every message at once (rts/rtr/data/ack).
// Each figure is the median of --reps repetitions (min and max shown).
// usage: core_bench [--reps N] [--iters N] [--latency-only]
// (--iters: latency round trips per repetition, 20000 by default)
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "base/config.hpp"
#include "core/core.hpp"
#include "driver/driver.hpp"

namespace {

using pier::Status;
using pier::driver::Packet;
using pier::driver::Track;
using Clock = std::chrono::steady_clock;
namespace core = pier::core;

long lat_iters = 20000;
bool latency_only = false;
constexpr std::size_t bw_total = 256u << 20;
const std::size_t bw_sizes[] = {1u << 20, 16u << 20};

[[noreturn]] void die(const char* what, Status s = Status::internal) {
  std::fprintf(stderr, "core_bench: %s: %s\n", what, std::string(pier::to_string(s)).c_str());
  std::exit(2);
}
void check(Status s, const char* what) {
  if (s != Status::ok && s != Status::in_progress) die(what, s);
}

void pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  (void)sched_setaffinity(0, sizeof set, &set);
}

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
  void sync() const {
    char c = 's';
    if (::write(w, &c, 1) != 1 || ::read(r, &c, 1) != 1) die("pipe sync");
  }
};

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// ---- bare shm driver --------------------------------------------------------

struct Bare {
  std::unique_ptr<pier::driver::Context> ctx;
  std::unique_ptr<pier::driver::Instance> small, large;

  void setup(const Pipe& p) {
    auto c = pier::driver::make_context("shm");
    if (!c) die("shm context", c.status());
    ctx = std::move(*c);
    if (auto props = ctx->properties({}); !props) die("shm properties", props.status());
    auto url = ctx->init();
    if (!url) die("shm init", url.status());
    p.put(*url);
    auto peer = p.get();
    small = std::move(*ctx->open_instance(Track::small));
    large = std::move(*ctx->open_instance(Track::large));
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
    Packet p;
    Status s;
    while ((s = small->send_buf_get(p)) == Status::no_resource) {
    }
    check(s, "send_buf_get");
    std::memcpy(p.buf, data, n);
    s = small->send_buf_post(p, n);
    while (s == Status::in_progress) s = small->send_poll(p);
    check(s, "send_buf_post");
  }
  std::size_t recv_small(void* out, std::size_t cap) {
    Packet p;
    Status s;
    while ((s = small->recv_poll(p)) == Status::in_progress) {
    }
    check(s, "recv_poll");
    std::size_t n = std::min(cap, p.buf_len);
    std::memcpy(out, p.buf, n);
    (void)small->recv_buf_release(p);
    return n;
  }
};

double bare_latency(Bare& b, int rank) {
  char msg[8] = {};
  auto t0 = Clock::now();
  for (long i = 0; i < lat_iters; ++i) {
    if (rank == 0) {
      b.send_small(msg, 8);
      b.recv_small(msg, 8);
    } else {
      b.recv_small(msg, 8);
      b.send_small(msg, 8);
    }
  }
  return since(t0) / lat_iters / 2 * 1e6;
}

double bare_bandwidth(Bare& b, int rank, std::vector<std::byte>& buf, std::size_t size) {
  const std::size_t count = std::max<std::size_t>(1, bw_total / size);
  auto t0 = Clock::now();
  for (std::size_t k = 0; k < count; ++k) {
    if (rank == 1) {
      Packet r;
      ::iovec v{buf.data(), size};
      r.set_iovec(&v, 1);
      check(b.large->recv_post(r), "recv_post");
      std::byte rdv[1 + Packet::rdv_capacity];
      rdv[0] = static_cast<std::byte>(r.rdv_len);
      std::memcpy(rdv + 1, r.rdv_data.data(), r.rdv_len);
      b.send_small(rdv, 1 + r.rdv_len);
      Status s;
      while ((s = b.large->recv_poll(r)) == Status::in_progress) {
      }
      check(s, "large recv_poll");
    } else {
      std::byte rdv[1 + Packet::rdv_capacity];
      b.recv_small(rdv, sizeof rdv);
      Packet d;
      ::iovec v{buf.data(), size};
      d.set_iovec(&v, 1);
      d.rdv_len = static_cast<std::uint8_t>(rdv[0]);
      std::memcpy(d.rdv_data.data(), rdv + 1, d.rdv_len);
      Status s = b.large->send_post(d);
      while (s == Status::in_progress) s = b.large->send_poll(d);
      check(s, "large send");
    }
  }
  char ack[8] = {};
  if (rank == 1)
    b.send_small(ack, 8);
  else
    b.recv_small(ack, 8);
  return static_cast<double>(count * size) / since(t0) / 1e6;  // MB/s
}

// ---- through the core ---------------------------------------------------------

class Sink final : public core::Client {
 public:
  explicit Sink(core::Core& c) : core_(c) {}
  void lib_parse(const core::Arrival& a) noexcept override {
    (void)core_.recv(a.handle, this, &region, 0, static_cast<std::size_t>(a.length),
                     static_cast<std::size_t>(a.length));
    ++parsed;
  }
  void lib_finalize(void*, Status s) noexcept override {
    if (s != Status::ok) die("finalize", s);
    ++finalized;
  }
  core::Region region;
  long parsed = 0, finalized = 0;

 private:
  core::Core& core_;
};

struct Through {
  std::unique_ptr<core::Core> c;
  std::unique_ptr<Sink> sink;
  std::vector<std::byte> inbox = std::vector<std::byte>(16u << 20);
  std::vector<std::byte> outbox = std::vector<std::byte>(16u << 20);
  core::Region out_region;

  void setup(const Pipe& p, int rank) {
    auto made = core::Core::create(static_cast<core::Rank>(rank), 2);
    if (!made) die("core create", made.status());
    c = std::move(*made);
    p.put(c->address());
    auto peer = p.get();
    std::vector<std::vector<std::byte>> all(2);
    all[rank] = c->address();
    all[1 - rank] = peer;
    check(c->connect(all), "core connect");
    sink = std::make_unique<Sink>(*c);
    check(c->attach(pier::wire::Upper::port, sink.get(), 0), "attach");
    sink->region = *c->validate(inbox.data(), inbox.size());
    out_region = *c->validate(outbox.data(), outbox.size());
  }
  void send(int rank, std::size_t n) {
    core::SendArgs a;
    a.cookie = this;
    a.peer = static_cast<core::Rank>(1 - rank);
    a.upper = pier::wire::Upper::port;
    a.region = &out_region;
    a.length = n;
    Status s;
    while ((s = c->send(a)) == Status::no_resource) (void)c->progress();
    check(s, "core send");
  }
  void wait_parsed(long n) {
    while (sink->parsed < n) (void)c->progress();
  }
};

double core_latency(Through& t, int rank) {
  long base = t.sink->parsed;
  auto t0 = Clock::now();
  for (long i = 1; i <= lat_iters; ++i) {
    if (rank == 0) {
      t.send(rank, 8);
      t.wait_parsed(base + i);
    } else {
      t.wait_parsed(base + i);
      t.send(rank, 8);
    }
  }
  return since(t0) / lat_iters / 2 * 1e6;
}

double core_bandwidth(Through& t, int rank, std::size_t size) {
  const long count = static_cast<long>(std::max<std::size_t>(1, bw_total / size));
  long base = t.sink->parsed;
  auto t0 = Clock::now();
  if (rank == 0) {
    for (long k = 0; k < count; ++k) t.send(rank, size);
    t.wait_parsed(base + 1);  // the ack
  } else {
    long fin = t.sink->finalized;
    while (t.sink->finalized < fin + count) (void)t.c->progress();
    t.send(rank, 8);
  }
  // Drain our own completions so the next round starts idle.
  while (t.c->pending() != 0) (void)t.c->progress();
  return static_cast<double>(count) * static_cast<double>(size) / since(t0) / 1e6;
}

struct Series {
  std::vector<double> v;
  double median() {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  }
};

int run(int rank, const Pipe& p, int reps) {
  pin(rank);
  Bare bare;
  bare.setup(p);
  Through through;
  through.setup(p, rank);
  std::vector<std::byte> buf(16u << 20, std::byte{1});
  Series lat_bare, lat_core;
  Series bw_bare[2], bw_core[2];
  for (int r = 0; r < reps; ++r) {
    p.sync();
    lat_bare.v.push_back(bare_latency(bare, rank));
    p.sync();
    lat_core.v.push_back(core_latency(through, rank));
    for (int s = 0; s < 2 && !latency_only; ++s) {
      p.sync();
      bw_bare[s].v.push_back(bare_bandwidth(bare, rank, buf, bw_sizes[s]));
      p.sync();
      bw_core[s].v.push_back(core_bandwidth(through, rank, bw_sizes[s]));
    }
  }
  if (rank != 0) return 0;
  auto show = [](const char* what, Series& bare_s, Series& core_s, const char* unit) {
    double b = bare_s.median(), c = core_s.median();
    std::printf("%-22s bare %9.3f [%9.3f, %9.3f]  core %9.3f [%9.3f, %9.3f] %s  core/bare %.3f\n",
                what, b, bare_s.v.front(), bare_s.v.back(), c, core_s.v.front(), core_s.v.back(),
                unit, c / b);
  };
  std::printf("core_bench over shm, median of %d repetitions [min, max]\n", reps);
  show("latency 8 B one-way", lat_bare, lat_core, "us");
  if (latency_only) return 0;
  show("bandwidth 1 MiB", bw_bare[0], bw_core[0], "MB/s");
  show("bandwidth 16 MiB", bw_bare[1], bw_core[1], "MB/s");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--latency-only") latency_only = true;
    if (i + 1 >= argc) continue;
    if (arg == "--reps") reps = std::max(1, std::atoi(argv[i + 1]));
    if (arg == "--iters") lat_iters = std::max(1, std::atoi(argv[i + 1]));
  }
  if (pier::config::set("CORE_DRIVERS", "shm") != Status::ok) die("config");
  int a[2], b[2];
  if (::pipe(a) != 0 || ::pipe(b) != 0) die("pipe");
  pid_t child = ::fork();
  if (child < 0) die("fork");
  if (child == 0) ::_exit(run(1, Pipe{b[1], a[0]}, reps));
  int rc = run(0, Pipe{a[1], b[0]}, reps);
  int status = 0;
  ::waitpid(child, &status, 0);
  return rc != 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0;
}
