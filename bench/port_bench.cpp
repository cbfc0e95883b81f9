// port_bench: the port layer against the bare driver, side by side in one
// run. Two processes (parent on cpu 0, forked child on cpu 1), per driver:
//   latency    8-byte ping-pong, busy polling, one-way = round trip / 2;
//              bare: the driver's small track (send_buf or an iovec post;
//              buffer receive or a posted receive);
//              core: Core::send + progress (as core_bench);
//              port: Port::send + receive(), the buffer provided again after
//              each event, SENT events handed to unknown();
//   bandwidth  1 MiB messages streamed one way, then an 8-byte answer;
//              bare: per message the large track (with the minimal rendezvous
//              the driver asks for, as in core_bench);
//              core: Core::send of every message at once (as core_bench);
//              port: sends pipelined up to the send tokens, --buffers
//              buffers (8 by default) at the receiver provided again as
//              they fill; the bare and core receivers land the messages in
//              turn in as many buffers, so all three columns write the same
//              memory (eight 1 MiB buffers written in turn cost a receiver
//              up to a third of its bandwidth, against one written again).
// The core column splits the port layer's own cost from the core's.
// Each figure is the median of --reps repetitions (min and max shown).
// With "self" among the drivers, the same ping-pong also runs in one process
// over self (both sides on one thread): the core's and the port layer's own
// cost, free of the scheduling noise of two processes.
// usage: port_bench [--reps N] [--drivers self,shm,tcp] [--iters N] [--buffers N]
// (--iters: latency round trips per repetition, 20000 by default)
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>
#include <pier/port.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "base/config.hpp"
#include "through.hpp"

namespace {

using pier::Status;
using namespace pier::bench;
namespace core = pier::core;
namespace port = pier::port;

long lat_iters = 20000;
int bw_buffers = 8;
constexpr std::size_t bw_size = 1u << 20;
constexpr std::size_t bw_total = 256u << 20;

// ---- through the port layer ----------------------------------------------------

struct Ports {
  std::unique_ptr<core::Core> c;
  std::unique_ptr<port::Node> node;
  std::unique_ptr<port::Port> p;
  std::vector<std::byte> small_buf = std::vector<std::byte>(64);
  std::vector<std::vector<std::byte>> big_bufs;
  std::vector<std::byte> outbox = std::vector<std::byte>(bw_size, std::byte{1});
  long sent_done = 0;

  static void on_sent(port::Port&, void* ctx, Status s) {
    if (s != Status::ok) die("port send", s);
    ++static_cast<Ports*>(ctx)->sent_done;
  }

  void setup(const Pipe& pipe, int rank) {
    auto made = core::Core::create(static_cast<core::Rank>(rank), 2);
    if (!made) die("core create", made.status());
    c = std::move(*made);
    pipe.put(c->address());
    auto peer = pipe.get();
    std::vector<std::vector<std::byte>> all(2);
    all[rank] = c->address();
    all[1 - rank] = peer;
    check(c->connect(all), "core connect");
    auto n = port::Node::attach(*c);
    if (!n) die("node", n.status());
    node = std::move(*n);
    auto opened = node->open(1);
    if (!opened) die("open", opened.status());
    p = std::move(*opened);
    check(p->provide_receive_buffer(small_buf.data(), 4, port::Priority::low, 0), "provide");
    for (int i = 0; i < bw_buffers; ++i) {
      big_bufs.emplace_back(bw_size + 8);
      check(p->provide_receive_buffer(big_bufs.back().data(), 21, port::Priority::low, 1),
            "provide big");
    }
  }
  ~Ports() {
    p.reset();
    node.reset();
    c.reset();
  }

  void send(int rank, const void* data, unsigned size, std::size_t len) {
    Status s;
    while ((s = p->send(data, size, len, port::Priority::low, static_cast<std::uint32_t>(1 - rank),
                        1, on_sent, this)) == Status::no_resource)
      poll_once();
    check(s, "port send");
  }
  /// One receive call; returns the receive event's size, 0 for none.
  unsigned poll_once() {
    const port::Event& e = p->receive();
    if (e.type == PIER_PORT_NO_RECV_EVENT) return 0;
    if (!port::is_receive_event(e.type)) {
      p->unknown(e);
      return 0;
    }
    const unsigned size = e.size;
    // Provide the buffer again at once (GM's usual loop).
    check(p->provide_receive_buffer(e.buffer, e.size, port::Priority::low, e.tag), "re-provide");
    return size;
  }
  void wait_recv(unsigned size) {
    while (poll_once() != size) {
    }
  }
  /// Until every send completed; then polls a little longer so the peer gets
  /// the acknowledgements we still owe (they leave on our next poll).
  void drain() {
    const long want = sent_done + static_cast<long>(p->send_tokens() - p->send_tokens_held());
    while (sent_done < want) (void)poll_once();
    auto until = Clock::now() + std::chrono::milliseconds(5);
    while (Clock::now() < until) (void)poll_once();
  }
};

double port_latency(Ports& t, int rank) {
  char msg[8] = {};
  auto t0 = Clock::now();
  for (long i = 0; i < lat_iters; ++i) {
    if (rank == 0) {
      t.send(rank, msg, 4, 8);
      t.wait_recv(4);
    } else {
      t.wait_recv(4);
      t.send(rank, msg, 4, 8);
    }
  }
  double us = since(t0) / lat_iters / 2 * 1e6;
  t.drain();
  return us;
}

double port_bandwidth(Ports& t, int rank) {
  const long count = static_cast<long>(bw_total / bw_size);
  char ack[8] = {};
  auto t0 = Clock::now();
  if (rank == 0) {
    for (long k = 0; k < count; ++k) t.send(rank, t.outbox.data(), 21, bw_size);
    t.wait_recv(4);
  } else {
    for (long k = 0; k < count; ++k) t.wait_recv(21);
    t.send(rank, ack, 4, 8);
  }
  double mbps = static_cast<double>(count) * static_cast<double>(bw_size) / since(t0) / 1e6;
  t.drain();
  return mbps;
}

int run(const std::string& driver, int rank, const Pipe& pipe, int reps) {
  pin(rank);
  Bare bare;
  bare.setup(driver, rank, [&](const std::vector<std::byte>& url) { return pipe.exchange(url); });
  Through through;
  through.setup(pipe, rank, bw_size, bw_buffers);
  Ports ports;
  ports.setup(pipe, rank);
  std::vector<std::byte> buf(bw_size * static_cast<std::size_t>(bw_buffers), std::byte{1});
  Series lat[3], bw[3];  // bare, core, port
  for (int r = 0; r < reps; ++r) {
    pipe.sync();
    lat[0].v.push_back(bare_latency(bare, rank, lat_iters));
    pipe.sync();
    lat[1].v.push_back(core_latency(through, rank, lat_iters));
    pipe.sync();
    lat[2].v.push_back(port_latency(ports, rank));
    pipe.sync();
    bw[0].v.push_back(bare_bandwidth(bare, rank, buf, bw_total, bw_buffers));
    pipe.sync();
    bw[1].v.push_back(core_bandwidth(through, rank, bw_size, bw_total));
    pipe.sync();
    bw[2].v.push_back(port_bandwidth(ports, rank));
  }
  pipe.sync();
  if (rank != 0) return 0;
  auto show = [&](const char* what, Series* s, const char* unit) {
    double b = s[0].median(), c = s[1].median(), p = s[2].median();
    std::printf(
        "| %s | %s | %.3f [%.3f, %.3f] | %.3f [%.3f, %.3f] | %.3f [%.3f, %.3f] | %s | %.3f | %.3f "
        "|\n",
        driver.c_str(), what, b, s[0].v.front(), s[0].v.back(), c, s[1].v.front(), s[1].v.back(), p,
        s[2].v.front(), s[2].v.back(), unit, p / b, p / c);
  };
  show("latency 8 B one-way", lat, "us");
  show("bandwidth 1 MiB", bw, "MB/s");
  std::fflush(stdout);
  return 0;
}

// ---- in one process over self: the layers' own cost, free of scheduling ------

// The two timed loops of inprocess_latency, each a function of its own so
// that callgrind (`--toggle-collect` or the inclusive cost of these) counts
// one of them alone: instructions per one-way = inclusive / (2 * iters).
template <class Send, class Cores, class S>
[[gnu::noinline]] void self_core_pingpong(Send& send, Cores& cores, S& s0, S& s1) {
  for (long i = 1; i <= lat_iters; ++i) {
    send(0);
    while (s1.parsed < i) (void)cores[1]->progress(), (void)cores[0]->progress();
    send(1);
    while (s0.parsed < i) (void)cores[0]->progress(), (void)cores[1]->progress();
  }
}

template <class Cb, class Wait>
[[gnu::noinline]] void self_port_pingpong(port::Port* (&ports)[2], const char* msg, Cb cb,
                                          Wait& wait) {
  for (long i = 0; i < lat_iters; ++i) {
    check(ports[0]->send(msg, 4, 8, port::Priority::low, 1, 1, cb, nullptr), "send");
    wait(1);
    check(ports[1]->send(msg, 4, 8, port::Priority::low, 0, 1, cb, nullptr), "send");
    wait(0);
  }
}

/// Two cores over self in this process, one thread; 8-byte ping-pong through
/// the core (Sink) and through ports. Returns {core, port} one-way in us.
std::pair<double, double> inprocess_latency() {
  if (pier::config::set("CORE_DRIVERS", "self") != Status::ok) die("config");
  std::vector<std::unique_ptr<core::Core>> cores;
  for (core::Rank r = 0; r < 2; ++r) {
    auto c = core::Core::create(r, 2);
    if (!c) die("core create", c.status());
    cores.push_back(std::move(*c));
  }
  std::vector<std::vector<std::byte>> addresses{cores[0]->address(), cores[1]->address()};
  for (auto& c : cores) check(c->connect(addresses), "connect");
  double core_us = 0, port_us = 0;
  {
    Sink s0(*cores[0]), s1(*cores[1]);
    check(cores[0]->attach(pier::wire::Upper::portals, &s0, 0), "attach");
    check(cores[1]->attach(pier::wire::Upper::portals, &s1, 0), "attach");
    std::vector<std::byte> in0(64), in1(64), out(64);
    s0.region = *cores[0]->validate(in0.data(), in0.size());
    s1.region = *cores[1]->validate(in1.data(), in1.size());
    core::Region o0 = *cores[0]->validate(out.data(), out.size());
    core::Region o1 = *cores[1]->validate(out.data(), out.size());
    auto send = [&](int from) {
      core::SendArgs a;
      a.cookie = &a;
      a.peer = static_cast<core::Rank>(1 - from);
      a.upper = pier::wire::Upper::portals;
      a.region = from == 0 ? &o0 : &o1;
      a.length = 8;
      check(cores[from]->send(a), "core send");
    };
    auto t0 = Clock::now();
    self_core_pingpong(send, cores, s0, s1);
    core_us = since(t0) / lat_iters / 2 * 1e6;
    while (cores[0]->pending() + cores[1]->pending() != 0)
      (void)cores[0]->progress(), (void)cores[1]->progress();
  }
  {
    auto n0 = port::Node::attach(*cores[0]), n1 = port::Node::attach(*cores[1]);
    if (!n0 || !n1) die("node");
    auto p0 = (*n0)->open(1), p1 = (*n1)->open(1);
    if (!p0 || !p1) die("open");
    port::Port* ports[2] = {p0->get(), p1->get()};
    std::vector<std::byte> b0(64), b1(64);
    check(ports[0]->provide_receive_buffer(b0.data(), 4, port::Priority::low, 0), "provide");
    check(ports[1]->provide_receive_buffer(b1.data(), 4, port::Priority::low, 0), "provide");
    char msg[8] = {};
    auto cb = [](port::Port&, void*, Status st) { check(st, "port send"); };
    auto wait = [&](int who) {
      for (;;) {
        const port::Event& e = ports[who]->receive();
        if (port::is_receive_event(e.type)) {
          check(ports[who]->provide_receive_buffer(e.buffer, e.size, port::Priority::low, 0),
                "re-provide");
          return;
        }
        if (e.type != PIER_PORT_NO_RECV_EVENT) ports[who]->unknown(e);
        (void)cores[1 - who]->progress();
      }
    };
    auto t0 = Clock::now();
    self_port_pingpong(ports, msg, cb, wait);
    port_us = since(t0) / lat_iters / 2 * 1e6;
  }
  return {core_us, port_us};
}

int run_driver(const std::string& driver, int reps) {
  if (pier::config::set("CORE_DRIVERS", driver) != Status::ok) die("config");
  int a[2], b[2];
  if (::pipe(a) != 0 || ::pipe(b) != 0) die("pipe");
  std::fflush(stdout);
  pid_t child = ::fork();
  if (child < 0) die("fork");
  if (child == 0) ::_exit(run(driver, 1, Pipe{b[1], a[0]}, reps));
  int rc = run(driver, 0, Pipe{a[1], b[0]}, reps);
  int status = 0;
  ::waitpid(child, &status, 0);
  ::close(a[0]);
  ::close(a[1]);
  ::close(b[0]);
  ::close(b[1]);
  return rc != 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 5;
  std::string drivers = "self,shm,tcp";
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--reps") reps = std::max(1, std::atoi(argv[i + 1]));
    if (std::string(argv[i]) == "--drivers") drivers = argv[i + 1];
    if (std::string(argv[i]) == "--iters") lat_iters = std::max(1, std::atoi(argv[i + 1]));
    if (std::string(argv[i]) == "--buffers") bw_buffers = std::max(1, std::atoi(argv[i + 1]));
  }
  // A loaded machine may leave the receiver's buffers unprovided for a
  // while: a send timeout is no figure of speed.
  if (pier::config::set("PORT_SEND_TIMEOUT_MS", "600000") != Status::ok) die("config");
  std::printf("port_bench: median of %d repetitions [min, max]\n\n", reps);
  std::printf("| driver | figure | bare driver | core | port | unit | port/bare | port/core |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  int rc = 0;
  if (drivers.find("self") != std::string::npos) {
    Series core_s, port_s;
    for (int r = 0; r < reps; ++r) {
      auto [c, p] = inprocess_latency();
      core_s.v.push_back(c);
      port_s.v.push_back(p);
    }
    double c = core_s.median(), p = port_s.median();
    std::printf(
        "| self (1 process) | latency 8 B one-way | - | %.3f [%.3f, %.3f] | %.3f [%.3f, %.3f] | us "
        "| - | %.3f |\n",
        c, core_s.v.front(), core_s.v.back(), p, port_s.v.front(), port_s.v.back(), p / c);
  }
  std::size_t start = 0;
  while (start <= drivers.size()) {
    std::size_t comma = drivers.find(',', start);
    if (comma == std::string::npos) comma = drivers.size();
    const std::string name = drivers.substr(start, comma - start);
    if (comma > start && name != "self") rc |= run_driver(name, reps);
    start = comma + 1;
  }
  return rc;
}
