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
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "base/config.hpp"
#include "through.hpp"

namespace {

using pier::Status;
using namespace pier::bench;

long lat_iters = 20000;
bool latency_only = false;
constexpr std::size_t bw_total = 256u << 20;
const std::size_t bw_sizes[] = {1u << 20, 16u << 20};

int run(int rank, const Pipe& p, int reps) {
  pin(rank);
  Bare bare;
  bare.setup("shm", rank, [&](const std::vector<std::byte>& url) { return p.exchange(url); });
  Through through;
  through.setup(p, rank, bw_sizes[1]);
  std::vector<std::byte> buf(16u << 20, std::byte{1});
  Series lat_bare, lat_core;
  Series bw_bare[2], bw_core[2];
  for (int r = 0; r < reps; ++r) {
    p.sync();
    lat_bare.v.push_back(bare_latency(bare, rank, lat_iters));
    p.sync();
    lat_core.v.push_back(core_latency(through, rank, lat_iters));
    for (int s = 0; s < 2 && !latency_only; ++s) {
      p.sync();
      bw_bare[s].v.push_back(
          bare_bandwidth(bare, rank, std::span(buf).first(bw_sizes[s]), bw_total));
      p.sync();
      bw_core[s].v.push_back(core_bandwidth(through, rank, bw_sizes[s], bw_total));
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
