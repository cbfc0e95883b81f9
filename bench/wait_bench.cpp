// wait_bench: what Portals waits cost when nothing or little happens.
//   wait_bench                      alone (one process):
//     idle           CPU share of a PtlCTPoll of 2 s with nothing coming;
//     two waiters    the same with two threads waiting at once;
//     call           a PtlCTInc from a second thread while one waits:
//                    median and 90th percentile of 200 calls.
//   pier-run -n 2 wait_bench        two processes:
//     idle           rank 1's CPU share in a PtlCTPoll of 2 s after the
//                    ranks connected;
//     sleeping put   a put with ack every 2 ms to a target that waits in
//                    PtlCTWait (asleep between puts): median round trip.
// Run it with PIER_CAPI_PROGRESS_THREAD=0 and =1 to see both NALs.
#include <portals4.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
constexpr ptl_pt_index_t pt_wanted = 5;
constexpr int sleeping_puts = 300;

void ok(int rc, const char* what) {
  if (rc == PTL_OK) return;
  std::fprintf(stderr, "wait_bench: %s (%d)\n", what, rc);
  std::exit(2);
}

double cpu_seconds() {
  rusage r{};
  getrusage(RUSAGE_SELF, &r);
  return static_cast<double>(r.ru_utime.tv_sec + r.ru_stime.tv_sec) +
         static_cast<double>(r.ru_utime.tv_usec + r.ru_stime.tv_usec) / 1e6;
}

/// Percent of one core the process used while `body` ran for `seconds`.
template <class Body>
double cpu_share(double seconds, Body body) {
  const double before = cpu_seconds();
  body();
  return (cpu_seconds() - before) / seconds * 100;
}

void poll_quietly(ptl_handle_ct_t ct, int ms) {
  ptl_size_t test = ~ptl_size_t{0};
  ptl_ct_event_t ev;
  unsigned which = 0;
  (void)PtlCTPoll(&ct, &test, 1, ms, &ev, &which);
}

void alone(ptl_handle_ni_t ni) {
  ptl_handle_ct_t a, b, c;
  ok(PtlCTAlloc(ni, &a), "PtlCTAlloc");
  ok(PtlCTAlloc(ni, &b), "PtlCTAlloc");
  ok(PtlCTAlloc(ni, &c), "PtlCTAlloc");
  std::printf("idle          %5.1f %% of a core\n", cpu_share(2, [&] { poll_quietly(a, 2000); }));
  std::printf("two waiters   %5.1f %% of a core\n", cpu_share(2, [&] {
                std::thread other([&] { poll_quietly(b, 2000); });
                poll_quietly(a, 2000);
                other.join();
              }));
  std::atomic<bool> stop{false};
  std::thread waiter([&] {
    while (!stop.load()) poll_quietly(a, 100);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::vector<double> us;
  for (int i = 0; i < 200; ++i) {
    const auto t0 = Clock::now();
    ok(PtlCTInc(c, ptl_ct_event_t{1, 0}), "PtlCTInc");
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    std::this_thread::sleep_for(std::chrono::microseconds(700));
  }
  stop = true;
  waiter.join();
  std::sort(us.begin(), us.end());
  std::printf("call          median %.1f us, 90th %.1f us (PtlCTInc while a thread waits)\n",
              us[us.size() / 2], us[us.size() * 9 / 10]);
}

void pair(ptl_handle_ni_t ni, ptl_rank_t rank) {
  ptl_process_t peer{};
  peer.rank = rank == 0 ? 1 : 0;
  ptl_pt_index_t pt;
  ok(PtlPTAlloc(ni, 0, PTL_EQ_NONE, pt_wanted, &pt), "PtlPTAlloc");
  ptl_handle_ct_t ct_in, ct_ack;
  ok(PtlCTAlloc(ni, &ct_in), "PtlCTAlloc");
  ok(PtlCTAlloc(ni, &ct_ack), "PtlCTAlloc");
  static char buf[8];
  ptl_me_t me{};
  me.start = buf;
  me.length = sizeof buf;
  me.ct_handle = ct_in;
  me.uid = PTL_UID_ANY;
  me.match_id.rank = PTL_RANK_ANY;
  me.options =
      PTL_ME_OP_PUT | PTL_ME_EVENT_CT_COMM | PTL_ME_EVENT_COMM_DISABLE | PTL_ME_EVENT_LINK_DISABLE;
  ptl_handle_me_t mh;
  ok(PtlMEAppend(ni, pt, &me, PTL_PRIORITY_LIST, nullptr, &mh), "PtlMEAppend");
  ptl_md_t d{buf, sizeof buf,
             PTL_MD_EVENT_SEND_DISABLE | PTL_MD_EVENT_SUCCESS_DISABLE | PTL_MD_EVENT_CT_ACK,
             PTL_EQ_NONE, ct_ack};
  ptl_handle_md_t md;
  ok(PtlMDBind(ni, &d, &md), "PtlMDBind");
  ptl_ct_event_t ev;
  ptl_size_t acks = 0, ins = 0;
  // Each side puts until acked as delivered: the peer's entry may come later.
  auto put_acked = [&] {
    for (;;) {
      ok(PtlPut(md, 0, sizeof buf, PTL_CT_ACK_REQ, peer, pt, 0, 0, nullptr, 0), "PtlPut");
      ok(PtlCTWait(ct_ack, ++acks, &ev), "PtlCTWait");
      if (ev.failure == 0) return;
      ok(PtlCTSet(ct_ack, ptl_ct_event_t{acks, 0}), "PtlCTSet");
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  };
  put_acked();
  ok(PtlCTWait(ct_in, ++ins, &ev), "PtlCTWait");
  if (rank == 1) {
    std::printf("idle          %5.1f %% of a core (rank 1, connected over the job's drivers)\n",
                cpu_share(2, [&] { poll_quietly(ct_ack, 2000); }));
    put_acked();  // rank 0 may go on
    ok(PtlCTWait(ct_in, ins + sleeping_puts, &ev), "PtlCTWait");
  } else {
    ok(PtlCTWait(ct_in, ++ins, &ev), "PtlCTWait");
    std::vector<double> us;
    for (int i = 0; i < sleeping_puts; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      const auto t0 = Clock::now();
      ok(PtlPut(md, 0, sizeof buf, PTL_CT_ACK_REQ, peer, pt, 0, 0, nullptr, 0), "PtlPut");
      ok(PtlCTWait(ct_ack, ++acks, &ev), "PtlCTWait");
      us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    }
    std::sort(us.begin(), us.end());
    std::printf("sleeping put  median %.1f us, 90th %.1f us (put + ack, target asleep)\n",
                us[us.size() / 2], us[us.size() * 9 / 10]);
  }
  // Both sides are done with each other before either leaves.
  put_acked();
  ok(PtlCTWait(ct_in, rank == 1 ? ins + sleeping_puts + 1 : ins + 1, &ev), "PtlCTWait");
  ok(PtlMEUnlink(mh), "PtlMEUnlink");
  ok(PtlMDRelease(md), "PtlMDRelease");
}

}  // namespace

int main() {
  ok(PtlInit(), "PtlInit");
  ptl_handle_ni_t ni;
  ok(PtlNIInit(PTL_IFACE_DEFAULT, PTL_NI_MATCHING | PTL_NI_LOGICAL, PTL_PID_ANY, nullptr, nullptr,
               &ni),
     "PtlNIInit");
  ptl_process_t me;
  ok(PtlGetId(ni, &me), "PtlGetId");
  ptl_rank_t size = 1;
  if (const char* s = std::getenv("PMI_SIZE"))
    size = static_cast<ptl_rank_t>(std::atoi(s));  // pier-run
  if (size <= 1)
    alone(ni);
  else
    pair(ni, me.rank);
  ok(PtlNIFini(ni), "PtlNIFini");
  PtlFini();
  return 0;
}
