// portals_bench: Portals 4 latency and bandwidth between two processes, next
// to the bare driver measured in the same run by the same processes.
// Run under pier-run, once per driver:
//   pier-run -n 2 --bind core portals_bench --driver shm [--reps N] [--latency-only]
//            [--iters N]   (round trips per latency figure, 20000 by default)
// Figures (rank 0 prints them; one-way = round trip / 2):
//   put 8 B        ping-pong of PtlPut without ack, each side waiting in
//                  PtlCTWait on the counter of its ME: one-way;
//   put 8 B + ack  PtlPut with PTL_CT_ACK_REQ until its ack is counted on
//                  the MD: a round trip (the bare column is a bare round
//                  trip); the target waits in PtlCTWait on another counter;
//   get 8 B        PtlGet until its reply is counted: a round trip;
//   put bandwidth  64 KiB, 1 MiB and 4 MiB puts streamed, at most 16 in
//                  flight, then an 8-byte answer; the bare column streams
//                  the same sizes on the driver's large track with the
//                  minimal rendezvous it asks for (as core_bench).
// The bare driver is set up from urls exchanged through Portals puts.
// Each figure is the median of --reps repetitions, [min, max].
#include <portals4.h>
#include <sys/uio.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bare.hpp"
#include "base/config.hpp"

namespace {

using pier::Status;
using Clock = pier::bench::Clock;

long lat_iters = 20000;  // --iters
constexpr std::size_t bw_total = 256u << 20;
constexpr std::size_t bw_sizes[] = {64u << 10, 1u << 20, 4u << 20};
constexpr std::size_t max_size = 4u << 20;
constexpr ptl_size_t window = 16;
constexpr ptl_pt_index_t pt = 5;
constexpr ptl_match_bits_t data_bits = 1, url_bits = 2, done_bits = 3;

[[noreturn]] void die(const char* what, int rc = 0) {
  std::fprintf(stderr, "portals_bench: %s (%d)\n", what, rc);
  std::exit(2);
}
void ok(int rc, const char* what) {
  if (rc != PTL_OK) die(what, rc);
}
using pier::bench::since;

// ---- Portals ---------------------------------------------------------------------

struct Portals {
  int rank = 0;
  ptl_handle_ni_t ni{};
  ptl_process_t peer{};
  std::vector<unsigned char> in = std::vector<unsigned char>(max_size);
  std::vector<unsigned char> out = std::vector<unsigned char>(max_size, 1);
  unsigned char url_in[4096] = {}, url_out[4096] = {}, done_in[8] = {};
  ptl_handle_ct_t ct_in{}, ct_url{}, ct_done{}, ct_ack{}, ct_reply{}, ct_send{};
  ptl_handle_md_t md_plain{}, md_ack{}, md_get{}, md_send{}, md_url{};
  ptl_handle_eq_t eq{};
  ptl_size_t in_seen = 0, done_seen = 0, ack_seen = 0, reply_seen = 0, send_seen = 0;

  void append(void* start, ptl_size_t len, ptl_handle_ct_t ct, ptl_match_bits_t bits) {
    ptl_me_t me{};
    me.start = start;
    me.length = len;
    me.ct_handle = ct;
    me.uid = PTL_UID_ANY;
    me.match_id.rank = PTL_RANK_ANY;
    me.match_bits = bits;
    me.options = PTL_ME_OP_PUT | PTL_ME_OP_GET | PTL_ME_EVENT_CT_COMM | PTL_ME_EVENT_COMM_DISABLE;
    ptl_handle_me_t h;
    ok(PtlMEAppend(ni, pt, &me, PTL_PRIORITY_LIST, nullptr, &h), "PtlMEAppend");
  }
  ptl_handle_md_t bind(void* start, ptl_size_t len, unsigned options, ptl_handle_ct_t ct,
                       ptl_handle_eq_t q = PTL_EQ_NONE) {
    ptl_md_t d{start, len, options, q, ct};
    ptl_handle_md_t h;
    ok(PtlMDBind(ni, &d, &h), "PtlMDBind");
    return h;
  }
  void setup() {
    ok(PtlInit(), "PtlInit");
    ok(PtlNIInit(PTL_IFACE_DEFAULT, PTL_NI_MATCHING | PTL_NI_LOGICAL, PTL_PID_ANY, nullptr, nullptr,
                 &ni),
       "PtlNIInit");
    ptl_process_t me;
    ok(PtlGetId(ni, &me), "PtlGetId");
    rank = static_cast<int>(me.rank);
    peer.rank = rank == 0 ? 1 : 0;
    ok(PtlEQAlloc(ni, 64, &eq), "PtlEQAlloc");
    ptl_pt_index_t index;
    ok(PtlPTAlloc(ni, 0, PTL_EQ_NONE, pt, &index), "PtlPTAlloc");
    for (auto* ct : {&ct_in, &ct_url, &ct_done, &ct_ack, &ct_reply, &ct_send})
      ok(PtlCTAlloc(ni, ct), "PtlCTAlloc");
    append(in.data(), in.size(), ct_in, data_bits);
    append(url_in, sizeof url_in, ct_url, url_bits);
    append(done_in, sizeof done_in, ct_done, done_bits);
    unsigned quiet = PTL_MD_EVENT_SEND_DISABLE | PTL_MD_EVENT_SUCCESS_DISABLE;
    md_plain = bind(out.data(), out.size(), quiet, PTL_CT_NONE);
    md_ack = bind(out.data(), out.size(), quiet | PTL_MD_EVENT_CT_ACK, ct_ack);
    md_get = bind(in.data(), in.size(), quiet | PTL_MD_EVENT_CT_REPLY, ct_reply);
    md_send = bind(out.data(), out.size(), quiet | PTL_MD_EVENT_CT_SEND, ct_send);
    md_url = bind(url_out, sizeof url_out, PTL_MD_EVENT_SEND_DISABLE, PTL_CT_NONE, eq);
  }
  /// Puts `n` bytes of url_out into the peer's url ME, again until the peer
  /// had appended it (a put that finds no entry is acked as dropped).
  void send_url(std::size_t n) {
    auto deadline = Clock::now() + std::chrono::seconds(30);
    while (Clock::now() < deadline) {
      ok(PtlPut(md_url, 0, n, PTL_ACK_REQ, peer, pt, url_bits, 0, nullptr, 0), "PtlPut url");
      ptl_event_t ev{};
      ok(PtlEQWait(eq, &ev), "PtlEQWait");
      if (ev.type == PTL_EVENT_ACK && ev.ni_fail_type == PTL_NI_OK) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    die("peer never took the url");
  }
  std::vector<std::byte> exchange(const std::vector<std::byte>& mine) {
    if (mine.size() + 4 > sizeof url_out) die("url too long");
    auto n = static_cast<std::uint32_t>(mine.size());
    std::memcpy(url_out, &n, 4);
    std::memcpy(url_out + 4, mine.data(), n);
    send_url(n + 4);
    ptl_ct_event_t v;
    ok(PtlCTWait(ct_url, 1, &v), "PtlCTWait url");
    ok(PtlCTSet(ct_url, ptl_ct_event_t{0, 0}), "PtlCTSet");
    std::memcpy(&n, url_in, 4);
    const auto* p = reinterpret_cast<const std::byte*>(url_in + 4);
    return std::vector<std::byte>(p, p + n);
  }
  void wait(ptl_handle_ct_t ct, ptl_size_t& seen, ptl_size_t more) {
    ptl_ct_event_t v;
    seen += more;
    ok(PtlCTWait(ct, seen, &v), "PtlCTWait");
    if (v.failure != 0) die("a counted operation failed");
  }
  void put(ptl_handle_md_t md, std::size_t n, ptl_match_bits_t bits, ptl_ack_req_t ack) {
    ok(PtlPut(md, 0, n, ack, peer, pt, bits, 0, nullptr, 0), "PtlPut");
  }
  /// A put that ends a phase: it must have left before this rank turns to
  /// the bare driver, since with the direct NAL (PIER_CAPI_PROGRESS_THREAD=0)
  /// nothing moves Portals traffic outside a Portals call.
  void put_flushed(ptl_match_bits_t bits) {
    put(md_send, 8, bits, PTL_NO_ACK_REQ);
    wait(ct_send, send_seen, 1);
  }
  /// Rank 1 waits (driving progress) while rank 0 measures, then rank 0
  /// releases it.
  void hold_peer(bool measuring_side) {
    if (measuring_side)
      put_flushed(done_bits);
    else
      wait(ct_done, done_seen, 1);
  }
};

// Not inlined: callgrind can count it alone (--toggle-collect='*put_latency*').
[[gnu::noinline]] double put_latency(Portals& p) {
  auto t0 = Clock::now();
  for (long i = 0; i < lat_iters; ++i) {
    if (p.rank == 0) {
      p.put(p.md_plain, 8, data_bits, PTL_NO_ACK_REQ);
      p.wait(p.ct_in, p.in_seen, 1);
    } else {
      p.wait(p.ct_in, p.in_seen, 1);
      p.put(p.md_plain, 8, data_bits, PTL_NO_ACK_REQ);
    }
  }
  return since(t0) / lat_iters / 2 * 1e6;
}

/// Round trips of `one` (a put with ack or a get), rank 1 waiting aside.
template <class One>
double round_trip(Portals& p, One one) {
  if (p.rank != 0) {
    p.hold_peer(false);
    // Rank 0's acked puts and gets were counted on our ME too: catch up,
    // or the next ping-pong would answer pings that never came.
    ptl_ct_event_t v;
    ok(PtlCTGet(p.ct_in, &v), "PtlCTGet");
    p.in_seen = v.success;
    return 0;
  }
  auto t0 = Clock::now();
  for (long i = 0; i < lat_iters; ++i) one();
  double us = since(t0) / lat_iters * 1e6;
  p.hold_peer(true);
  return us;
}

double put_bandwidth(Portals& p, std::size_t size) {
  const auto count = static_cast<ptl_size_t>(bw_total / size);
  auto t0 = Clock::now();
  if (p.rank == 0) {
    ptl_size_t base = p.send_seen;
    for (ptl_size_t k = 0; k < count; ++k) {
      if (k >= window) {
        ptl_ct_event_t v;
        ok(PtlCTWait(p.ct_send, base + k - window + 1, &v), "PtlCTWait send");
      }
      p.put(p.md_send, size, data_bits, PTL_NO_ACK_REQ);
    }
    p.wait(p.ct_send, p.send_seen, count);
    p.wait(p.ct_in, p.in_seen, 1);
    // Rank 1 stays in Portals until the last rendezvous has ended here:
    // with the direct NAL, the answers that end it only leave within
    // its Portals calls.
    p.hold_peer(true);
  } else {
    p.wait(p.ct_in, p.in_seen, count);
    p.put_flushed(data_bits);
    p.hold_peer(false);
  }
  return static_cast<double>(count * size) / since(t0) / 1e6;  // MB/s
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 5;
  std::string driver = "shm";
  // --latency-only: the put 8 B one-way figure and its bare reference only
  // (for profiling the small-message path).
  bool latency_only = false;
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--latency-only") latency_only = true;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--reps") reps = std::max(1, std::atoi(argv[i + 1]));
    if (std::string(argv[i]) == "--driver") driver = argv[i + 1];
    if (std::string(argv[i]) == "--iters") lat_iters = std::max(1, std::atoi(argv[i + 1]));
  }
  if (pier::config::set("CORE_DRIVERS", driver) != Status::ok) die("config");
  Portals p;
  p.setup();
  pier::bench::Bare bare;
  bare.setup(driver, p.rank, [&](const std::vector<std::byte>& url) { return p.exchange(url); });
  // bare one-way, put one-way, bare round trip (for ack and get), put+ack, get
  using pier::bench::Series;
  Series bare_lat, put_lat, ack_rt, get_rt, bare_bw[3], put_bw[3];
  for (int r = 0; r < reps; ++r) {
    bare_lat.v.push_back(pier::bench::bare_latency(bare, p.rank, lat_iters));
    put_lat.v.push_back(put_latency(p));
    if (latency_only) continue;
    ack_rt.v.push_back(round_trip(p, [&] {
      p.put(p.md_ack, 8, data_bits, PTL_CT_ACK_REQ);
      p.wait(p.ct_ack, p.ack_seen, 1);
    }));
    get_rt.v.push_back(round_trip(p, [&] {
      ok(PtlGet(p.md_get, 0, 8, p.peer, pt, data_bits, 0, nullptr), "PtlGet");
      p.wait(p.ct_reply, p.reply_seen, 1);
    }));
    for (std::size_t k = 0; k < 3; ++k) {
      bare_bw[k].v.push_back(pier::bench::bare_bandwidth(
          bare, p.rank, std::as_writable_bytes(std::span(p.in)).first(bw_sizes[k]), bw_total));
      put_bw[k].v.push_back(put_bandwidth(p, bw_sizes[k]));
    }
  }
  if (p.rank == 0) {
    auto row = [&](const char* what, Series& b, double scale, Series& s, const char* unit) {
      double bm = b.median() * scale, sm = s.median();
      std::printf("| %s | %s | %.3f [%.3f, %.3f] | %.3f [%.3f, %.3f] | %s | %.2f |\n",
                  driver.c_str(), what, bm, b.v.front() * scale, b.v.back() * scale, sm,
                  s.v.front(), s.v.back(), unit, sm / bm);
    };
    std::printf("portals_bench: median of %d repetitions [min, max]\n\n", reps);
    std::printf("| driver | figure | bare driver | portals | unit | portals/bare |\n");
    std::printf("|---|---|---|---|---|---|\n");
    row("put 8 B one-way", bare_lat, 1, put_lat, "us");
    if (latency_only) {
      std::fflush(stdout);
      p.hold_peer(true);
      PtlFini();
      return 0;
    }
    row("put 8 B + ack round trip", bare_lat, 2, ack_rt, "us");
    row("get 8 B round trip", bare_lat, 2, get_rt, "us");
    const char* names[] = {"put bandwidth 64 KiB", "put bandwidth 1 MiB", "put bandwidth 4 MiB"};
    for (std::size_t k = 0; k < 3; ++k) row(names[k], bare_bw[k], 1, put_bw[k], "MB/s");
    std::fflush(stdout);
  }
  if (latency_only && p.rank != 0) {
    p.hold_peer(false);
    PtlFini();
    return 0;
  }
  // The peer must not leave while the last answer is under way.
  p.hold_peer(p.rank == 0);
  PtlFini();
  return 0;
}
