// ofi_pingpong: the ofi driver against libfabric's own fi_pingpong on the
// same provider, side by side in one run (repetitions alternate between the
// two, so load on the machine hits both alike). Two processes each:
//   latency    8 B ping-pong, busy polling; one-way = round trip / 2
//              (fi_pingpong's "usec/xfer");
//   bandwidth  1 MiB ping-pong; MB/s = size / one-way time (fi_pingpong's
//              "MB/sec"). pier moves it twice: "rdv" is what the core does
//              (the receiver posts a large-track receive, its rdv_data goes to
//              the sender over the small track, the sender writes by RMA),
//              "msg" is one tagged message on a small track (max_packet
//              raised), the same path fi_pingpong takes.
// Each figure is the median of --reps repetitions, with min and max.
// usage: ofi_pingpong [--providers tcp,shm] [--reps N] [--lat-iters N] [--bw-iters N]
//                     [--latency-only]
// --latency-only runs the 8-byte phases alone: under callgrind the 1 MiB
// copies of the bandwidth phases would swamp what a small message costs.
// On a loaded machine, `chrt -f 10 ofi_pingpong ...` keeps other tenants off
// the cores for the run (every process of both programs inherits it; all spin).
#include "base/config.hpp"
#include "drivers/ofi/ofi.hpp"

#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace {

using pier::Status;
using pier::driver::Instance;
using pier::driver::Packet;
using pier::driver::Track;
using Clock = std::chrono::steady_clock;

int reps = 5;
long lat_iters = 5000;
long bw_iters = 200;
bool latency_only = false;
constexpr std::size_t bw_size = 1 << 20;
constexpr std::size_t page = 4096;

struct Free {
  void operator()(std::byte* p) const noexcept { std::free(p); }
};

[[noreturn]] void die(const char* what, Status s = Status::internal) {
  std::fprintf(stderr, "ofi_pingpong: %s (%s)\n", what, std::string(pier::to_string(s)).c_str());
  std::_Exit(3);
}

void write_all(int fd, const void* p, std::size_t n) {
  if (::write(fd, p, n) != static_cast<ssize_t>(n)) die("pipe write");
}
void read_all(int fd, void* p, std::size_t n) {
  auto* c = static_cast<char*>(p);
  while (n > 0) {
    const ssize_t r = ::read(fd, c, n);
    if (r <= 0) die("pipe read");
    c += r;
    n -= static_cast<std::size_t>(r);
  }
}

// --- fi_pingpong -----------------------------------------------------------

struct Figures {
  double lat_us = 0;
  double mbps = 0;
};

/// Runs a fi_pingpong server and client for one size; usec/xfer and MB/sec
/// from the client's result line, or zeros when it failed.
Figures run_fi_pingpong(const std::string& provider, std::size_t size, long iters, int port) {
  const std::string common = "fi_pingpong -p " + provider + " -e rdm -I " + std::to_string(iters) +
                             " -S " + std::to_string(size);
  std::fflush(stdout);
  const pid_t server = ::fork();
  if (server == 0) {
    const std::string cmd = common + " -B " + std::to_string(port) + " >/dev/null 2>&1";
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    std::_Exit(127);
  }
  ::usleep(300000);
  const std::string cmd = common + " -P " + std::to_string(port) + " 127.0.0.1 2>/dev/null";
  Figures f;
  if (FILE* p = ::popen(cmd.c_str(), "r")) {
    char line[512];
    while (std::fgets(line, sizeof line, p) != nullptr) {
      char bytes[32], sent[32], ack[32], total[32], time[32];
      double mbps = 0, usec = 0;
      if (std::sscanf(line, "%31s %31s %31s %31s %31s %lf %lf", bytes, sent, ack, total, time,
                      &mbps, &usec) == 7) {
        f.mbps = mbps;
        f.lat_us = usec;
      }
    }
    ::pclose(p);
  }
  ::waitpid(server, nullptr, 0);
  return f;
}

// --- pier ------------------------------------------------------------------

struct Side {
  std::unique_ptr<pier::driver::Context> ctx;
  std::unique_ptr<Instance> small, large;
  pier::driver::Caps caps;
};

/// Brings up a context of "ofi:<provider>" and connects a small and a large
/// instance to the peer, trading urls over the pipes.
void bring_up(Side& s, const std::string& provider, int in, int out) {
  auto ctx = pier::driver::make_context("ofi:" + provider);
  if (!ctx) die("make_context", ctx.status());
  s.ctx = std::move(*ctx);
  auto props = s.ctx->properties({});
  if (!props) die("properties", props.status());
  s.caps = props->caps;
  auto url = s.ctx->init();
  if (!url) die("init", url.status());
  const std::uint32_t len = static_cast<std::uint32_t>(url->size());
  write_all(out, &len, 4);
  write_all(out, url->data(), len);
  std::uint32_t peer_len = 0;
  read_all(in, &peer_len, 4);
  std::vector<std::byte> peer(peer_len);
  read_all(in, peer.data(), peer_len);
  s.small = std::move(*s.ctx->open_instance(Track::small));
  s.large = std::move(*s.ctx->open_instance(Track::large));
  for (Instance* i : {s.small.get(), s.large.get()})
    if (Status st = i->connect_async(peer); !pier::is_success(st)) die("connect_async", st);
  for (Instance* i : {s.small.get(), s.large.get()}) {
    Status st = Status::in_progress;
    const auto limit = Clock::now() + std::chrono::seconds(20);
    while (st != Status::ok) {
      st = i->connect_wait(Clock::now() + std::chrono::milliseconds(10));
      if (st != Status::ok && st != Status::timeout && st != Status::in_progress)
        die("connect_wait", st);
      if (Clock::now() > limit) die("connect timeout");
    }
  }
}

void send_now(Instance& inst, Packet& pkt) {
  Status st = inst.send_post(pkt);
  while (st == Status::no_resource) st = inst.send_post(pkt);
  while (st == Status::in_progress) st = inst.send_poll(pkt);
  if (st != Status::ok) die("send", st);
}

void recv_now(Instance& inst, Packet& pkt) {
  Status st = Status::in_progress;
  while (st == Status::in_progress) st = inst.recv_poll(pkt);
  if (st != Status::ok) die("receive", st);
}

/// One side of a ping-pong of `iters` (+10% warm-up) messages of `size`
/// bytes; `rdv` moves them as the core would (rendezvous on the large
/// track), else as one small-track message. Returns seconds for `iters`.
double pingpong(Side& s, std::size_t size, long iters, bool rdv, bool ping) {
  // Page-aligned, as a fresh process's large malloc is (fi_pingpong's
  // case). Heap buffers of a later phase sat at other offsets within their
  // page on the two sides, and a copy between addresses that differ mod 64
  // ran at a fifth of the speed here (rdv 1.4 against 7.2 GB/s, measured):
  // the figure then said where malloc put the buffer, not what pier costs.
  const std::size_t rounded = (size + page - 1) / page * page;
  const std::unique_ptr<std::byte, Free> out_mem(
      static_cast<std::byte*>(std::aligned_alloc(page, rounded)));
  const std::unique_ptr<std::byte, Free> in_mem(
      static_cast<std::byte*>(std::aligned_alloc(page, rounded)));
  if (!out_mem || !in_mem) die("aligned_alloc");
  std::memset(out_mem.get(), 1, size);
  std::memset(in_mem.get(), 0, size);
  ::iovec oiov{out_mem.get(), size}, iiov{in_mem.get(), size};
  const long warm = iters / 10 + 1;
  // rdv: every side keeps one large receive posted and its rdv_data sent.
  std::array<std::byte, Packet::rdv_capacity + 1> rdv_out{}, rdv_in{};
  ::iovec roiov{rdv_out.data(), rdv_out.size()}, riiov{rdv_in.data(), rdv_in.size()};
  Packet big_r, ctl_r;
  auto post_large = [&] {
    big_r = Packet{};
    big_r.set_iovec(&iiov, 1);
    if (Status st = s.large->recv_post(big_r); st != Status::in_progress) die("large recv", st);
    rdv_out[0] = static_cast<std::byte>(big_r.rdv_len);
    std::memcpy(rdv_out.data() + 1, big_r.rdv_data.data(), Packet::rdv_capacity);
    Packet c;
    c.set_iovec(&roiov, 1);
    send_now(*s.small, c);
  };
  auto post_ctl = [&] {
    ctl_r = Packet{};
    ctl_r.set_iovec(rdv ? &riiov : &iiov, 1);
    // ok: a packet was already waiting; recv_poll() answers ok again.
    if (Status st = s.small->recv_post(ctl_r); st != Status::in_progress && st != Status::ok)
      die("recv", st);
  };
  auto send_one = [&] {
    Packet p;
    p.set_iovec(&oiov, 1);
    if (rdv) {
      recv_now(*s.small, ctl_r);  // the peer's rdv_data
      p.rdv_len = static_cast<std::uint8_t>(rdv_in[0]);
      std::memcpy(p.rdv_data.data(), rdv_in.data() + 1, Packet::rdv_capacity);
      post_ctl();
      send_now(*s.large, p);
    } else {
      send_now(*s.small, p);
    }
  };
  auto recv_one = [&] {
    if (rdv) {
      recv_now(*s.large, big_r);
      post_large();
    } else {
      recv_now(*s.small, ctl_r);
      post_ctl();
    }
  };
  post_ctl();
  if (rdv) post_large();
  Clock::time_point t0 = Clock::now();
  for (long i = 0; i < iters + warm; ++i) {
    if (i == warm) t0 = Clock::now();
    if (ping) {
      send_one();
      recv_one();
    } else {
      recv_one();
      send_one();
    }
  }
  const double t = std::chrono::duration<double>(Clock::now() - t0).count();
  // Leave nothing posted: cancel the receives that wait for a next round.
  (void)s.small->recv_cancel(ctl_r);
  if (rdv) (void)s.large->recv_cancel(big_r);
  return t;
}

/// pier's figures for one provider: 8 B latency, 1 MiB rdv and msg bandwidth.
struct PierFigures {
  double lat_us = 0, rdv_mbps = 0, msg_mbps = 0;
};

PierFigures run_pier(const std::string& provider) {
  int to_child[2], to_parent[2];
  if (::pipe(to_child) != 0 || ::pipe(to_parent) != 0) die("pipe");
  std::fflush(stdout);  // or the child prints the parent's buffer again
  const pid_t pid = ::fork();
  const bool parent = pid != 0;
  const int in = parent ? to_parent[0] : to_child[0];
  const int out = parent ? to_child[1] : to_parent[1];
  // A fresh pair of contexts per phase: the rendezvous phase ends with each
  // side's next rdv_data in flight, which must not reach the next phase.
  auto phase = [&](std::size_t size, long iters, bool rdv, const char* max_packet) {
    std::unique_ptr<pier::config::ScopedSet> big;
    if (max_packet != nullptr)
      big = std::make_unique<pier::config::ScopedSet>("OFI_MAX_PACKET", max_packet);
    Side s;
    bring_up(s, provider, in, out);
    const double t = pingpong(s, size, iters, rdv, parent);
    // Both sides must be done before either goes: the last pong may still
    // be in flight for the other.
    char done = 1;
    write_all(out, &done, 1);
    read_all(in, &done, 1);
    s.small.reset();
    s.large.reset();
    (void)s.ctx->close();
    return t;
  };
  PierFigures f;
  const double lat = phase(8, lat_iters, false, nullptr);
  const double rdv = latency_only ? 0 : phase(bw_size, bw_iters, true, nullptr);
  // Small-track messages of 1 MiB for the "msg" figure.
  const double msg = latency_only ? 0 : phase(bw_size, bw_iters, false, "1M");
  f.lat_us = lat / static_cast<double>(lat_iters) / 2 * 1e6;
  const auto mbps = [](double t) {
    return static_cast<double>(bw_size) / (t / static_cast<double>(bw_iters) / 2) / 1e6;
  };
  f.rdv_mbps = mbps(rdv);
  f.msg_mbps = mbps(msg);
  if (!parent) std::_Exit(0);
  ::waitpid(pid, nullptr, 0);
  for (int fd : {to_child[0], to_child[1], to_parent[0], to_parent[1]}) ::close(fd);
  return f;
}

struct Stat {
  double med, min, max;
};
Stat stat(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.front(), v.back()};
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> providers = {"tcp", "shm"};
  for (int i = 1; i < argc; ++i) {
    const std::string opt = argv[i];
    if (opt == "--latency-only") {  // the one option without a value
      latency_only = true;
      continue;
    }
    if (i + 1 == argc) break;
    const char* value = argv[++i];
    if (opt == "--reps") reps = std::max(1, std::atoi(value));
    if (opt == "--lat-iters") lat_iters = std::max(10, std::atoi(value));
    if (opt == "--bw-iters") bw_iters = std::max(10, std::atoi(value));
    if (opt == "--providers") {
      providers.clear();
      std::string list = value;
      for (std::size_t at = 0; at <= list.size();) {
        const std::size_t comma = std::min(list.find(',', at), list.size());
        if (comma > at) providers.push_back(list.substr(at, comma - at));
        at = comma + 1;
      }
    }
  }
  std::printf(
      "ofi_pingpong: %d repetitions, median [min, max]; latency one-way us, bandwidth "
      "MB/s\n",
      reps);
  int port = 47700 + static_cast<int>(::getpid() % 200) * 4;
  for (const std::string& provider : providers) {
    std::vector<double> fl, fb, pl, pr, pm;
    for (int r = 0; r < reps; ++r) {
      const Figures lat = run_fi_pingpong(provider, 8, lat_iters, port++);
      const Figures bw =
          latency_only ? Figures{} : run_fi_pingpong(provider, bw_size, bw_iters, port++);
      const PierFigures p = run_pier(provider);
      fl.push_back(lat.lat_us);
      fb.push_back(bw.mbps);
      pl.push_back(p.lat_us);
      pr.push_back(p.rdv_mbps);
      pm.push_back(p.msg_mbps);
    }
    const Stat a = stat(fl), b = stat(fb), c = stat(pl), d = stat(pr), e = stat(pm);
    std::printf("\nprovider %s\n", provider.c_str());
    std::printf(
        "  8 B latency   fi_pingpong %9.2f [%.2f, %.2f]   pier %9.2f [%.2f, %.2f]   "
        "pier/fi %.2fx\n",
        a.med, a.min, a.max, c.med, c.min, c.max, a.med > 0 ? c.med / a.med : 0.0);
    if (latency_only) continue;
    std::printf(
        "  1 MiB bw      fi_pingpong %9.1f [%.1f, %.1f]   pier rdv %7.1f [%.1f, %.1f]   "
        "pier/fi %.2fx\n",
        b.med, b.min, b.max, d.med, d.min, d.max, b.med > 0 ? d.med / b.med : 0.0);
    std::printf(
        "                                                      pier msg %7.1f [%.1f, "
        "%.1f]   pier/fi %.2fx\n",
        e.med, e.min, e.max, b.med > 0 ? e.med / b.med : 0.0);
  }
  return 0;
}
