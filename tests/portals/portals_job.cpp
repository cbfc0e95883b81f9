// A Portals job started by pier-run, public API only. Rank 0 is the target:
// it exposes a buffer and two counters, then makes no pier call at all until
// every other rank says it is done (it only reads its own memory), so every
// put, get and atomic below completes through the progress thread.
// Usage: portals_job logical|physical [pingpong BYTES]. Prints "rank R: ok"
// and exits 0; the ping-pong also prints latency percentiles from rank 0.
#include <portals4.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace {

constexpr ptl_pt_index_t pt_index = 5;
constexpr ptl_size_t slot = 64;
constexpr ptl_match_bits_t data_bits = 1, counter_bits = 2;
constexpr auto limit = std::chrono::seconds(30);

int fail(int rank, const char* what, int rc) {
  std::fprintf(stderr, "rank %d: %s failed (%d)\n", rank, what, rc);
  return 1;
}

#define TRY(what)                                     \
  do {                                                \
    int rc_ = (what);                                 \
    if (rc_ != PTL_OK) return fail(rank, #what, rc_); \
  } while (0)

struct Job {
  ptl_handle_ni_t ni;
  ptl_handle_eq_t eq;
  bool logical;
  int rank, size;

  ptl_process_t target() const {
    ptl_process_t p{};
    if (logical) {
      p.rank = 0;
    } else {
      // Rank 0's physical id: pier's pid is the rank, its nid names the host.
      ptl_process_t me{};
      PtlGetPhysId(ni, &me);
      p.phys.nid = me.phys.nid;
      p.phys.pid = 0;
    }
    return p;
  }

  /// An entry over [start, start + length) that any process may reach,
  /// counting on `ct` (or PTL_CT_NONE), matching `bits` exactly.
  ptl_me_t entry(void* start, ptl_size_t length, ptl_handle_ct_t ct, unsigned options,
                 ptl_match_bits_t bits = 0) const {
    ptl_me_t me{};
    me.start = start;
    me.length = length;
    me.ct_handle = ct;
    me.uid = PTL_UID_ANY;
    me.options = options;
    if (logical) {
      me.match_id.rank = PTL_RANK_ANY;
    } else {
      me.match_id.phys.nid = PTL_NID_ANY;
      me.match_id.phys.pid = PTL_PID_ANY;
    }
    me.match_bits = bits;
    return me;
  }

  /// Waits for the next event of `kind`; returns its ni_fail_type or -1.
  int await(ptl_event_kind_t kind) {
    for (int i = 0; i < 16; ++i) {
      ptl_event_t ev{};
      unsigned which;
      if (PtlEQPoll(&eq, 1, 20000, &ev, &which) != PTL_OK) return -1;
      if (ev.type == kind) return ev.ni_fail_type;
    }
    return -1;
  }
};

int run_target(Job& j, int rank) {
  static unsigned char buffer[64 * slot];
  static std::uint64_t counters[2];  // [0] sum of fetch-adds, [1] ranks done
  const unsigned options = PTL_ME_OP_PUT | PTL_ME_OP_GET | PTL_ME_EVENT_COMM_DISABLE;
  // The counters' entry first: initiators retry their first put until the
  // data entry takes it, and only then send the atomics, which are not
  // retried. In the other order an atomic could slip in between the two
  // appends (a target preempted there on a loaded machine) and be dropped.
  ptl_handle_me_t h1, h2;
  ptl_me_t me = j.entry(counters, sizeof counters, PTL_CT_NONE, options, counter_bits);
  TRY(PtlMEAppend(j.ni, pt_index, &me, PTL_PRIORITY_LIST, nullptr, &h2));
  me = j.entry(buffer, sizeof buffer, PTL_CT_NONE, options, data_bits);
  TRY(PtlMEAppend(j.ni, pt_index, &me, PTL_PRIORITY_LIST, nullptr, &h1));
  // No pier call from here until everyone is done.
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (__atomic_load_n(&counters[1], __ATOMIC_ACQUIRE) != std::uint64_t(j.size - 1)) {
    if (std::chrono::steady_clock::now() > deadline)
      return fail(rank, "waiting for the other ranks", -1);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::uint64_t want = 0;
  for (int r = 1; r < j.size; ++r) {
    want += std::uint64_t(r);
    for (ptl_size_t i = 0; i < slot; ++i)
      if (buffer[r * slot + i] != static_cast<unsigned char>(r + i))
        return fail(rank, "checking the data put by a rank", r);
  }
  if (__atomic_load_n(&counters[0], __ATOMIC_ACQUIRE) != want)
    return fail(rank, "checking the fetch-add sum", int(counters[0]));
  return 0;
}

int run_initiator(Job& j, int rank) {
  unsigned char out[slot], back[slot];
  std::uint64_t add = std::uint64_t(rank), one = 1, prior = ~0ull;
  for (ptl_size_t i = 0; i < slot; ++i) out[i] = static_cast<unsigned char>(rank + i);
  std::memset(back, 0, sizeof back);
  ptl_md_t d{out, sizeof out, 0, j.eq, PTL_CT_NONE};
  ptl_handle_md_t md_out, md_back, md_add, md_one, md_prior;
  TRY(PtlMDBind(j.ni, &d, &md_out));
  d.start = back;
  TRY(PtlMDBind(j.ni, &d, &md_back));
  d.start = &add;
  d.length = 8;
  TRY(PtlMDBind(j.ni, &d, &md_add));
  d.start = &one;
  TRY(PtlMDBind(j.ni, &d, &md_one));
  d.start = &prior;
  TRY(PtlMDBind(j.ni, &d, &md_prior));
  ptl_process_t t = j.target();
  // The target may not have appended yet: a dropped put is retried.
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (true) {
    TRY(PtlPut(md_out, 0, slot, PTL_ACK_REQ, t, pt_index, data_bits, rank * slot, nullptr, 0));
    if (j.await(PTL_EVENT_SEND) != PTL_NI_OK) return fail(rank, "put (SEND)", -1);
    int f = j.await(PTL_EVENT_ACK);
    if (f == PTL_NI_OK) break;
    if (f < 0 || std::chrono::steady_clock::now() > deadline) return fail(rank, "put (ACK)", f);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  TRY(PtlGet(md_back, 0, slot, t, pt_index, data_bits, rank * slot, nullptr));
  if (j.await(PTL_EVENT_REPLY) != PTL_NI_OK || std::memcmp(back, out, slot) != 0)
    return fail(rank, "get", -1);
  TRY(PtlFetchAtomic(md_prior, 0, md_add, 0, 8, t, pt_index, counter_bits, 0, nullptr, 0, PTL_SUM,
                     PTL_UINT64_T));
  if (j.await(PTL_EVENT_REPLY) != PTL_NI_OK || prior == ~0ull)
    return fail(rank, "fetch-atomic", -1);
  TRY(PtlAtomic(md_one, 0, 8, PTL_ACK_REQ, t, pt_index, counter_bits, 8, nullptr, 0, PTL_SUM,
                PTL_UINT64_T));
  if (j.await(PTL_EVENT_ACK) != PTL_NI_OK) return fail(rank, "atomic", -1);
  return 0;
}

/// Ping-pong of `bytes`-byte puts between ranks 0 and 1, each side waiting
/// on its entry's counter; prints the one-way latency percentiles.
int run_pingpong(Job& j, int rank, std::size_t bytes) {
  if (j.size < 2 || rank > 1) return 0;
  static unsigned char in[1 << 20], out[1 << 20];
  bytes = std::min(bytes, sizeof in);
  ptl_handle_ct_t ct;
  TRY(PtlCTAlloc(j.ni, &ct));
  ptl_me_t me =
      j.entry(in, sizeof in, ct, PTL_ME_OP_PUT | PTL_ME_EVENT_CT_COMM | PTL_ME_EVENT_COMM_DISABLE);
  ptl_handle_me_t h;
  TRY(PtlMEAppend(j.ni, pt_index, &me, PTL_PRIORITY_LIST, nullptr, &h));
  ptl_md_t d{out, bytes, PTL_MD_EVENT_SEND_DISABLE, PTL_EQ_NONE, PTL_CT_NONE};
  ptl_handle_md_t md;
  TRY(PtlMDBind(j.ni, &d, &md));
  ptl_process_t peer = j.target();
  if (j.logical)
    peer.rank = rank == 0 ? 1 : 0;
  else
    peer.phys.pid = rank == 0 ? 1 : 0;
  // The peer may not have appended yet: rank 0 repeats its first ping until
  // rank 1 answers it.
  constexpr int warmup = 200, rounds = 2000;
  std::vector<double> us;
  us.reserve(rounds);
  ptl_ct_event_t v{};
  for (int i = 1; i <= warmup + rounds; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    if (rank == 0) {
      while (true) {
        TRY(PtlPut(md, 0, bytes, PTL_NO_ACK_REQ, peer, pt_index, 0, 0, nullptr, 0));
        ptl_size_t test = ptl_size_t(i);
        unsigned which;
        int rc = PtlCTPoll(&ct, &test, 1, i == 1 ? 100 : 20000, &v, &which);
        if (rc == PTL_OK) break;
        if (i != 1 || std::chrono::steady_clock::now() - t0 > limit)
          return fail(rank, "waiting for a pong", rc);
      }
    } else {
      TRY(PtlCTWait(ct, ptl_size_t(i), &v));
      TRY(PtlPut(md, 0, bytes, PTL_NO_ACK_REQ, peer, pt_index, 0, 0, nullptr, 0));
    }
    auto t1 = std::chrono::steady_clock::now();
    if (i > warmup) us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / 2);
  }
  if (rank == 0) {
    std::sort(us.begin(), us.end());
    std::printf("pingpong %zu bytes: one-way median %.2f us, p10 %.2f, p90 %.2f (%d rounds)\n",
                bytes, us[us.size() / 2], us[us.size() / 10], us[us.size() * 9 / 10], rounds);
  } else {
    // Stay until rank 0 has its last pong: its PtlFini drains, ours too.
  }
  return 0;
}

/// Unexpected messages across processes: every other rank puts to rank 0,
/// which has only an overflow entry; rank 0 then appends a priority entry
/// per rank and must see each header as PUT_OVERFLOW with the right
/// initiator, match bits, header data and the data in its overflow buffer.
int run_unexpected(Job& j, int rank) {
  static unsigned char over[64 * slot];
  if (rank != 0) {
    unsigned char out[slot];
    for (ptl_size_t i = 0; i < slot; ++i) out[i] = static_cast<unsigned char>(rank * 3 + i);
    ptl_md_t d{out, slot, 0, j.eq, PTL_CT_NONE};
    ptl_handle_md_t md;
    TRY(PtlMDBind(j.ni, &d, &md));
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (true) {
      TRY(PtlPut(md, 0, slot, PTL_ACK_REQ, j.target(), pt_index, 100 + rank, 0, nullptr,
                 1000 + rank));
      if (j.await(PTL_EVENT_SEND) != PTL_NI_OK) return fail(rank, "put (SEND)", -1);
      int f = j.await(PTL_EVENT_ACK);
      if (f == PTL_NI_OK) return 0;
      if (f < 0 || std::chrono::steady_clock::now() > deadline) return fail(rank, "put", f);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  ptl_handle_eq_t teq;
  TRY(PtlEQAlloc(j.ni, 256, &teq));
  ptl_pt_index_t pt = 6;
  TRY(PtlPTAlloc(j.ni, 0, teq, pt_index + 1, &pt));
  ptl_handle_ct_t ct;
  TRY(PtlCTAlloc(j.ni, &ct));
  ptl_me_t me = j.entry(
      over, sizeof over, ct,
      PTL_ME_OP_PUT | PTL_ME_MANAGE_LOCAL | PTL_ME_EVENT_CT_COMM | PTL_ME_EVENT_COMM_DISABLE);
  me.ignore_bits = ~ptl_match_bits_t{0};
  ptl_handle_me_t h;
  // The initiators target pt_index: move this overflow entry there only now,
  // so the puts that came early were dropped and retried, not half-matched.
  TRY(PtlPTFree(j.ni, pt));
  TRY(PtlPTFree(j.ni, pt_index));
  TRY(PtlPTAlloc(j.ni, 0, teq, pt_index, &pt));
  TRY(PtlMEAppend(j.ni, pt_index, &me, PTL_OVERFLOW_LIST, nullptr, &h));
  ptl_ct_event_t v{};
  TRY(PtlCTWait(ct, ptl_size_t(j.size - 1), &v));
  for (int r = 1; r < j.size; ++r) {
    static unsigned char late[slot];
    ptl_me_t p = me;
    p.start = late;
    p.length = slot;
    p.ct_handle = PTL_CT_NONE;
    p.options = PTL_ME_OP_PUT | PTL_ME_USE_ONCE;
    p.match_bits = ptl_match_bits_t(100 + r);
    p.ignore_bits = 0;
    ptl_handle_me_t ph;
    TRY(PtlMEAppend(j.ni, pt_index, &p, PTL_PRIORITY_LIST, nullptr, &ph));
    ptl_event_t ev{};
    unsigned which;
    do {
      TRY(PtlEQPoll(&teq, 1, 20000, &ev, &which));
    } while (ev.type == PTL_EVENT_LINK);
    if (ev.type != PTL_EVENT_PUT_OVERFLOW || ev.hdr_data != ptl_hdr_data_t(1000 + r) ||
        ev.match_bits != ptl_match_bits_t(100 + r) || ev.mlength != slot)
      return fail(rank, "checking an overflow event", r);
    if ((j.logical ? int(ev.initiator.rank) : int(ev.initiator.phys.pid)) != r)
      return fail(rank, "checking the initiator of an overflow event", r);
    const auto* data = static_cast<const unsigned char*>(ev.start);
    for (ptl_size_t i = 0; i < slot; ++i)
      if (data[i] != static_cast<unsigned char>(r * 3 + i))
        return fail(rank, "checking overflow data", r);
    TRY(PtlEQPoll(&teq, 1, 20000, &ev, &which));
    if (ev.type != PTL_EVENT_AUTO_UNLINK) return fail(rank, "waiting for AUTO_UNLINK", ev.type);
  }
  return 0;
}

/// Run with a fault plan that kills the link: rank 1's acked puts must end
/// with a failure event (SEND or ACK), never wait for ever.
int run_deadlink(Job& j, int rank) {
  static unsigned char buffer[64];
  if (rank == 0) {
    ptl_handle_ct_t ct;
    TRY(PtlCTAlloc(j.ni, &ct));
    ptl_me_t me = j.entry(buffer, sizeof buffer, ct, PTL_ME_OP_PUT | PTL_ME_EVENT_CT_COMM);
    ptl_handle_me_t h;
    TRY(PtlMEAppend(j.ni, pt_index, &me, PTL_PRIORITY_LIST, nullptr, &h));
    ptl_ct_event_t v{};
    ptl_size_t never = 1u << 30;
    unsigned which;
    (void)PtlCTPoll(&ct, &never, 1, 3000, &v, &which);  // linger, then leave
    return 0;
  }
  if (rank != 1) return 0;
  ptl_md_t d{buffer, 8, 0, j.eq, PTL_CT_NONE};
  ptl_handle_md_t md;
  TRY(PtlMDBind(j.ni, &d, &md));
  ptl_process_t t = j.target();
  for (int i = 0; i < 200; ++i) {
    TRY(PtlPut(md, 0, 8, PTL_ACK_REQ, t, pt_index, 0, 0, nullptr, 0));
    int send = j.await(PTL_EVENT_SEND);
    if (send < 0) return fail(rank, "waiting for SEND", send);
    int ack = j.await(PTL_EVENT_ACK);
    if (ack < 0) return fail(rank, "waiting for ACK", ack);
    if (send == PTL_NI_UNDELIVERABLE || ack == PTL_NI_UNDELIVERABLE) {
      std::printf("rank 1: failure reported after %d puts\n", i);
      return 0;
    }
    if (ack != PTL_NI_OK && ack != PTL_NI_DROPPED) return fail(rank, "unexpected ACK", ack);
  }
  return fail(rank, "the link never died", -1);
}

/// Rank 0 dies (exits without PtlFini) while rank 1 waits for an ack and a
/// reply it made rank 0 unable to send: rank 0 runs without the progress
/// thread and makes no pier call once it saw rank 1's hello. Rank 1 only
/// polls its EQ (PtlEQGet, no blocking call), so nothing but the core's
/// peer failure can end its two operations; they must end with
/// PTL_NI_UNDELIVERABLE within 10 s.
int run_peerdeath(Job& j, int rank) {
  static unsigned char buffer[64];
  using Clock = std::chrono::steady_clock;
  if (rank == 0) {
    ptl_handle_ct_t ct;
    TRY(PtlCTAlloc(j.ni, &ct));
    ptl_me_t me =
        j.entry(buffer, sizeof buffer, ct, PTL_ME_OP_PUT | PTL_ME_OP_GET | PTL_ME_EVENT_CT_COMM);
    ptl_handle_me_t h;
    TRY(PtlMEAppend(j.ni, pt_index, &me, PTL_PRIORITY_LIST, nullptr, &h));
    ptl_ct_event_t v{};
    ptl_size_t one = 1;
    unsigned which;
    TRY(PtlCTPoll(&ct, &one, 1, 20000, &v, &which));
    // Linger a little so the hello's ack leaves, then fall silent and die.
    ptl_size_t never = 1u << 30;
    (void)PtlCTPoll(&ct, &never, 1, 300, &v, &which);
    std::this_thread::sleep_for(std::chrono::milliseconds(2000));
    std::printf("rank 0: exits without PtlFini\n");
    std::fflush(stdout);
    std::_Exit(0);
  }
  if (rank != 1) return 0;
  ptl_md_t d{buffer, sizeof buffer, 0, j.eq, PTL_CT_NONE};
  ptl_handle_md_t md;
  TRY(PtlMDBind(j.ni, &d, &md));
  ptl_process_t t = j.target();
  // Hello until acked: rank 0's ME may not be appended yet.
  for (int i = 0;; ++i) {
    TRY(PtlPut(md, 0, 8, PTL_ACK_REQ, t, pt_index, 0, 0, nullptr, 0));
    if (j.await(PTL_EVENT_SEND) != PTL_NI_OK) return fail(rank, "hello SEND", -1);
    int ack = j.await(PTL_EVENT_ACK);
    if (ack == PTL_NI_OK) break;
    if (ack != PTL_NI_DROPPED || i > 2000) return fail(rank, "hello ACK", ack);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));  // rank 0 is silent now
  TRY(PtlPut(md, 0, 8, PTL_ACK_REQ, t, pt_index, 0, 0, nullptr, 0));
  TRY(PtlGet(md, 8, 8, t, pt_index, 0, 0, nullptr));
  const auto start = Clock::now();
  int ack = -1, reply = -1;
  while (ack < 0 || reply < 0) {
    if (Clock::now() - start > std::chrono::seconds(10))
      return fail(rank, "an ACK and a REPLY within 10 s of rank 0's death", ack * 100 + reply);
    ptl_event_t ev{};
    int rc = PtlEQGet(j.eq, &ev);
    if (rc == PTL_EQ_EMPTY) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      continue;
    }
    if (rc != PTL_OK) return fail(rank, "PtlEQGet", rc);
    if (ev.type == PTL_EVENT_ACK) ack = ev.ni_fail_type;
    if (ev.type == PTL_EVENT_REPLY) reply = ev.ni_fail_type;
  }
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
  if (ack != PTL_NI_UNDELIVERABLE || reply != PTL_NI_UNDELIVERABLE)
    return fail(rank, "ACK and REPLY undeliverable", ack * 100 + reply);
  std::printf("rank 1: ack and reply undeliverable after %lld ms\n", static_cast<long long>(ms));
  return 0;
}

/// iovec ranges across processes: rank 0 exposes, for each element length
/// L of 1, 544, 545, 64 KiB and 1 MiB, an ME of three L-byte elements
/// (match bits L) and makes no pier call until rank 1 is done; rank 1 puts
/// 2L bytes from the middle of its own three-element iovec across them,
/// gets them back into a third iovec and checks them. Rank 0 then checks
/// what landed in its elements.
int run_iovec(Job& j, int rank) {
  constexpr std::size_t lengths[] = {1, 544, 545, 64 * 1024, 1024 * 1024};
  constexpr ptl_match_bits_t done_bits = 3, hello_bits = 7;
  auto pattern = [](std::size_t len, std::size_t k) {
    return static_cast<unsigned char>((k * 131 + len * 7 + 1) % 251);
  };
  struct Three {
    std::vector<unsigned char> bytes[3];
    ptl_iovec_t iov[3];
    void make(std::size_t len) {
      for (int i = 0; i < 3; ++i) {
        bytes[i].assign(len, 0);
        iov[i] = {bytes[i].data(), len};
      }
    }
    unsigned char& at(std::size_t k) { return bytes[k / bytes[0].size()][k % bytes[0].size()]; }
  };
  auto entry = [&](void* start, ptl_size_t length, unsigned options, ptl_match_bits_t bits,
                   ptl_handle_ct_t ct) {
    return j.entry(start, length, ct,
                   options | PTL_ME_EVENT_COMM_DISABLE | PTL_ME_EVENT_LINK_DISABLE, bits);
  };
  if (rank == 0) {
    static Three dst[5];
    static unsigned char flag[8];
    ptl_handle_me_t h;
    for (int i = 0; i < 5; ++i) {
      dst[i].make(lengths[i]);
      ptl_me_t me =
          entry(dst[i].iov, 3, PTL_ME_OP_PUT | PTL_ME_OP_GET | PTL_IOVEC, lengths[i], PTL_CT_NONE);
      TRY(PtlMEAppend(j.ni, pt_index, &me, PTL_PRIORITY_LIST, nullptr, &h));
    }
    ptl_handle_ct_t done;
    TRY(PtlCTAlloc(j.ni, &done));
    ptl_me_t d = entry(flag, sizeof flag, PTL_ME_OP_PUT | PTL_ME_EVENT_CT_COMM, done_bits, done);
    TRY(PtlMEAppend(j.ni, pt_index, &d, PTL_PRIORITY_LIST, nullptr, &h));
    ptl_me_t hello = entry(flag, sizeof flag, PTL_ME_OP_PUT, hello_bits, PTL_CT_NONE);
    TRY(PtlMEAppend(j.ni, pt_index, &hello, PTL_PRIORITY_LIST, nullptr, &h));  // last
    ptl_ct_event_t v{};
    ptl_size_t one = 1;
    unsigned which;
    TRY(PtlCTPoll(&done, &one, 1, 60000, &v, &which));
    for (int i = 0; i < 5; ++i) {
      std::size_t len = lengths[i], local = len / 2, remote = (len + 1) / 2, n = 2 * len;
      for (std::size_t k = 0; k < 3 * len; ++k) {
        bool inside = k >= remote && k < remote + n;
        if (dst[i].at(k) != (inside ? pattern(len, k - remote + local) : 0))
          return fail(rank, "checking what landed across the iovec elements", int(len));
      }
    }
    std::printf("rank 0: iovec data ok\n");
    return 0;
  }
  if (rank != 1) return 0;
  static unsigned char hello_src[8];
  ptl_md_t hd{hello_src, sizeof hello_src, 0, j.eq, PTL_CT_NONE};
  ptl_handle_md_t hmd;
  TRY(PtlMDBind(j.ni, &hd, &hmd));
  ptl_process_t t = j.target();
  for (int i = 0;; ++i) {  // until rank 0's entries are all appended
    TRY(PtlPut(hmd, 0, 8, PTL_ACK_REQ, t, pt_index, hello_bits, 0, nullptr, 0));
    if (j.await(PTL_EVENT_SEND) != PTL_NI_OK) return fail(rank, "hello SEND", -1);
    int ack = j.await(PTL_EVENT_ACK);
    if (ack == PTL_NI_OK) break;
    if (ack != PTL_NI_DROPPED || i > 2000) return fail(rank, "hello ACK", ack);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (std::size_t len : lengths) {
    std::size_t n = 2 * len, local = len / 2, remote = (len + 1) / 2;
    static Three src, back;
    src.make(len);
    back.make(len);
    for (std::size_t k = 0; k < 3 * len; ++k) src.at(k) = pattern(len, k);
    ptl_md_t sd{src.iov, 3, PTL_IOVEC, j.eq, PTL_CT_NONE};
    ptl_md_t bd{back.iov, 3, PTL_IOVEC, j.eq, PTL_CT_NONE};
    ptl_handle_md_t smd, bmd;
    TRY(PtlMDBind(j.ni, &sd, &smd));
    TRY(PtlMDBind(j.ni, &bd, &bmd));
    TRY(PtlPut(smd, local, n, PTL_ACK_REQ, t, pt_index, len, remote, nullptr, 0));
    if (j.await(PTL_EVENT_SEND) != PTL_NI_OK) return fail(rank, "iovec put SEND", int(len));
    if (j.await(PTL_EVENT_ACK) != PTL_NI_OK) return fail(rank, "iovec put ACK", int(len));
    TRY(PtlGet(bmd, local, n, t, pt_index, len, remote, nullptr));
    if (j.await(PTL_EVENT_REPLY) != PTL_NI_OK) return fail(rank, "iovec get REPLY", int(len));
    for (std::size_t k = 0; k < 3 * len; ++k) {
      bool inside = k >= local && k < local + n;
      if (back.at(k) != (inside ? pattern(len, k) : 0))
        return fail(rank, "checking the iovec get", int(len));
    }
    TRY(PtlMDRelease(smd));
    TRY(PtlMDRelease(bmd));
  }
  TRY(PtlPut(hmd, 0, 8, PTL_ACK_REQ, t, pt_index, done_bits, 0, nullptr, 0));
  if (j.await(PTL_EVENT_ACK) != PTL_NI_OK) return fail(rank, "done ACK", -1);
  std::printf("rank 1: iovec puts and gets ok\n");
  return 0;
}

// incast: every other rank bursts puts at rank 0 at once, far more than the
// message pool (PIER_LIB_MESSAGES in the test) holds; rank 0's counter must
// count every one of them (a request without a state waits, parked).
constexpr ptl_size_t incast_puts = 2000;
constexpr ptl_match_bits_t incast_bits = 7;

int run_incast(Job& j, int rank) {
  static std::uint64_t sink[8];
  if (rank == 0) {
    ptl_handle_ct_t landed;
    TRY(PtlCTAlloc(j.ni, &landed));
    ptl_me_t me =
        j.entry(sink, sizeof sink, landed,
                PTL_ME_OP_PUT | PTL_ME_EVENT_COMM_DISABLE | PTL_ME_EVENT_CT_COMM, incast_bits);
    ptl_handle_me_t h;
    TRY(PtlMEAppend(j.ni, pt_index, &me, PTL_PRIORITY_LIST, nullptr, &h));
    // Each initiator's first (acked, retried) put, then its burst.
    ptl_size_t want = ptl_size_t(j.size - 1) * (incast_puts + 1);
    ptl_ct_event_t v{};
    unsigned which = 0;
    int rc = PtlCTPoll(&landed, &want, 1, 30000, &v, &which);
    if (rc != PTL_OK) {
      std::fprintf(stderr, "rank 0: %llu of %llu puts landed\n",
                   static_cast<unsigned long long>(v.success),
                   static_cast<unsigned long long>(want));
      return fail(rank, "counting the incast", rc);
    }
    if (v.failure != 0) return fail(rank, "incast puts that failed", int(v.failure));
    std::printf("rank 0: %llu incast puts landed\n", static_cast<unsigned long long>(v.success));
    return 0;
  }
  std::uint64_t value = std::uint64_t(rank);
  // First one put, acked and retried until rank 0's entry is there.
  ptl_md_t d{&value, sizeof value, 0, j.eq, PTL_CT_NONE};
  ptl_handle_md_t hello;
  TRY(PtlMDBind(j.ni, &d, &hello));
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (true) {
    TRY(PtlPut(hello, 0, sizeof value, PTL_ACK_REQ, j.target(), pt_index, incast_bits, 0, nullptr,
               0));
    if (j.await(PTL_EVENT_SEND) != PTL_NI_OK) return fail(rank, "first put (SEND)", -1);
    if (j.await(PTL_EVENT_ACK) == PTL_NI_OK) break;
    if (std::chrono::steady_clock::now() > deadline) return fail(rank, "first put (ACK)", -1);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  // Then the burst, as fast as PtlPut takes it.
  ptl_handle_ct_t sent;
  TRY(PtlCTAlloc(j.ni, &sent));
  ptl_md_t b{&value, sizeof value,
             PTL_MD_EVENT_SEND_DISABLE | PTL_MD_EVENT_SUCCESS_DISABLE | PTL_MD_EVENT_CT_SEND,
             PTL_EQ_NONE, sent};
  ptl_handle_md_t burst;
  TRY(PtlMDBind(j.ni, &b, &burst));
  for (ptl_size_t i = 0; i < incast_puts;) {
    int rc = PtlPut(burst, 0, sizeof value, PTL_NO_ACK_REQ, j.target(), pt_index, incast_bits, 0,
                    nullptr, 0);
    if (rc == PTL_OK) {
      ++i;
      continue;
    }
    if (rc != PTL_NO_SPACE) return fail(rank, "burst put", rc);
    if (std::chrono::steady_clock::now() > deadline) return fail(rank, "burst put (no space)", rc);
    ptl_ct_event_t v{};
    TRY(PtlCTGet(sent, &v));
  }
  ptl_size_t want = incast_puts;
  ptl_ct_event_t v{};
  unsigned which = 0;
  TRY(PtlCTPoll(&sent, &want, 1, 30000, &v, &which));
  if (v.failure != 0) return fail(rank, "burst sends that failed", int(v.failure));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int rank = -1;
  if (argc < 2) return fail(rank, "usage: portals_job logical|physical", 2);
  Job j{};
  j.logical = std::strcmp(argv[1], "logical") == 0;
  // deadlink: the fault plan (PORTALS_JOB_RANK0_FAULTS) applies to rank 0
  // only, so its link dies while rank 1 waits for an ack it will not get.
  const char* faults = std::getenv("PORTALS_JOB_RANK0_FAULTS");
  const char* my_rank = std::getenv("PIER_RUN_RANK");
  if (faults && my_rank && std::strcmp(my_rank, "0") == 0) setenv("PIER_FAULT_PLAN", faults, 1);
  // peerdeath: rank 0 must not answer once it fell silent.
  if (argc > 2 && std::strcmp(argv[2], "peerdeath") == 0 && my_rank &&
      std::strcmp(my_rank, "0") == 0)
    setenv("PIER_CAPI_PROGRESS_THREAD", "0", 1);
  TRY(PtlInit());
  unsigned options = PTL_NI_MATCHING | (j.logical ? PTL_NI_LOGICAL : PTL_NI_PHYSICAL);
  TRY(PtlNIInit(PTL_IFACE_DEFAULT, options, PTL_PID_ANY, nullptr, nullptr, &j.ni));
  ptl_process_t id{};
  TRY(PtlGetId(j.ni, &id));
  rank = int(j.logical ? id.rank : id.phys.pid);
  j.rank = rank;
  ptl_size_t size = 0;
  if (j.logical) {
    TRY(PtlGetMap(j.ni, 0, nullptr, &size));
  } else {
    const char* s = std::getenv("PIER_RUN_SIZE");
    size = s ? std::strtoull(s, nullptr, 10) : 1;
  }
  j.size = int(size);
  TRY(PtlEQAlloc(j.ni, 64, &j.eq));
  ptl_pt_index_t pt;
  TRY(PtlPTAlloc(j.ni, 0, PTL_EQ_NONE, pt_index, &pt));
  int rc = 0;
  if (argc > 2 && std::strcmp(argv[2], "unexpected") == 0)
    rc = run_unexpected(j, rank);
  else if (argc > 2 && std::strcmp(argv[2], "deadlink") == 0)
    rc = run_deadlink(j, rank);
  else if (argc > 2 && std::strcmp(argv[2], "peerdeath") == 0)
    rc = run_peerdeath(j, rank);
  else if (argc > 2 && std::strcmp(argv[2], "iovec") == 0)
    rc = run_iovec(j, rank);
  else if (argc > 2 && std::strcmp(argv[2], "incast") == 0)
    rc = run_incast(j, rank);
  else if (argc > 2 && std::strcmp(argv[2], "silent") == 0)
    // The target makes no call from its appends on; the initiators start
    // only after 300 ms, when its helper thread sleeps in the core (after
    // PIER_CAPI_HELPER_DEEP_MS): their connections and puts must wake it.
    rc = rank == 0 ? run_target(j, rank)
                   : (std::this_thread::sleep_for(std::chrono::milliseconds(300)),
                      run_initiator(j, rank));
  else if (argc > 2 && std::strcmp(argv[2], "pingpong") == 0)
    rc = run_pingpong(j, rank, argc > 3 ? std::strtoull(argv[3], nullptr, 10) : 8);
  else
    rc = rank == 0 ? run_target(j, rank) : run_initiator(j, rank);
  PtlNIFini(j.ni);
  PtlFini();
  if (rc == 0) std::printf("rank %d: ok\n", rank);
  return rc;
}
