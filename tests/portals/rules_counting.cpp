// PORTALS4.md §6.9 counting events (R-C*) across two processes: rank 0 is
// the target, rank 1 the initiator (R-C8: both).
#include <chrono>
#include <initializer_list>

#include "rules_job.hpp"

namespace pier::portals::rules {
namespace {

constexpr ptl_pt_index_t silent_pt = 8;
constexpr ptl_match_bits_t all_bits = ~ptl_match_bits_t{0};

/// R-C1: success counts one per event, or bytes with CT_BYTES; a failure
/// counts one failure, never bytes.
void rule_c1(Job& j) {
  if (j.target()) {
    static unsigned char a[32], b[32];
    int ta = 0, tb = 0;
    const ptl_handle_ct_t ops = j.new_ct(), bytes = j.new_ct();
    j.add(j.me_for(a, 32, PTL_ME_OP_PUT | PTL_ME_EVENT_CT_COMM | PTL_ME_EVENT_COMM_DISABLE, 1, 0,
                   ops),
          PTL_PRIORITY_LIST, &ta);
    j.add(j.me_for(b, 32,
                   PTL_ME_OP_PUT | PTL_ME_EVENT_CT_COMM | PTL_ME_EVENT_CT_BYTES |
                       PTL_ME_EVENT_COMM_DISABLE,
                   2, 0, bytes),
          PTL_PRIORITY_LIST, &tb);
    if (!j.sync() || !j.sync()) return;
    RULE_EQ(j, j.ct_reach(ops, 2, __LINE__).success, 2);
    RULE_EQ(j, j.ct_reach(bytes, 17, __LINE__).success, 17);
    j.ct_stays(ops, ptl_ct_event_t{2, 0}, __LINE__);
    j.ct_stays(bytes, ptl_ct_event_t{17, 0}, __LINE__);
    return;
  }
  unsigned char src[16] = {};
  const ptl_handle_ct_t acks = j.new_ct();
  const ptl_handle_md_t md =
      j.bind_to(src, sizeof src, PTL_MD_EVENT_CT_ACK | PTL_MD_EVENT_CT_BYTES, PTL_EQ_NONE, acks);
  if (!j.sync()) return;
  const struct {
    ptl_match_bits_t bits;
    ptl_size_t length;
  } sends[] = {{1, 16}, {1, 16}, {2, 8}, {2, 9}};
  ptl_size_t total = 0;
  for (const auto& s : sends) {
    RULE_CALL(j, PtlPut(md, 0, s.length, PTL_CT_ACK_REQ, j.peer, rule_pt, s.bits, 0, nullptr, 0));
    total += s.length;
    j.ct_reach(acks, total, __LINE__);
  }
  RULE_EQ(j, j.ct_get(acks).success, 49);
  RULE_CALL(j, PtlPut(md, 0, 16, PTL_CT_ACK_REQ, j.peer, rule_pt, 3, 0, nullptr, 0));
  const ptl_ct_event_t v = j.ct_reach(acks, 1000, __LINE__);
  RULE_EQ(j, v.success, 49);
  RULE_EQ(j, v.failure, 1);
  j.sync();
}

/// R-C2: in bytes, SEND counts the requested length; ACK, REPLY and the
/// target's comm count the length that matched (truncated here).
void rule_c2(Job& j) {
  if (j.target()) {
    static unsigned char buf[16];
    int tag = 0;
    const ptl_handle_ct_t ct = j.new_ct();
    j.add(j.me_for(buf, 16,
                   PTL_ME_OP_PUT | PTL_ME_OP_GET | PTL_ME_EVENT_CT_COMM | PTL_ME_EVENT_CT_BYTES |
                       PTL_ME_EVENT_COMM_DISABLE,
                   0, 0, ct),
          PTL_PRIORITY_LIST, &tag);
    if (!j.sync() || !j.sync()) return;
    // Two puts and a get of 32 bytes each matched 16.
    RULE_EQ(j, j.ct_reach(ct, 48, __LINE__).success, 48);
    return;
  }
  unsigned char src[32] = {};
  const ptl_handle_ct_t sent = j.new_ct(), acked = j.new_ct(), replied = j.new_ct();
  const unsigned quiet = PTL_MD_EVENT_CT_BYTES;
  const ptl_handle_md_t smd =
      j.bind_to(src, 32, quiet | PTL_MD_EVENT_CT_SEND | PTL_MD_EVENT_CT_ACK, PTL_EQ_NONE, sent);
  const ptl_handle_md_t amd = j.bind_to(src, 32, quiet | PTL_MD_EVENT_CT_ACK, PTL_EQ_NONE, acked);
  const ptl_handle_md_t gmd =
      j.bind_to(src, 32, quiet | PTL_MD_EVENT_CT_REPLY, PTL_EQ_NONE, replied);
  if (!j.sync()) return;
  RULE_CALL(j, PtlPut(smd, 0, 32, PTL_NO_ACK_REQ, j.peer, rule_pt, 0, 0, nullptr, 0));
  RULE_EQ(j, j.ct_reach(sent, 32, __LINE__).success, 32);  // rlength
  RULE_CALL(j, PtlPut(amd, 0, 32, PTL_CT_ACK_REQ, j.peer, rule_pt, 0, 0, nullptr, 0));
  RULE_EQ(j, j.ct_reach(acked, 16, __LINE__).success, 16);  // mlength
  RULE_CALL(j, PtlGet(gmd, 0, 32, j.peer, rule_pt, 0, 0, nullptr));
  RULE_EQ(j, j.ct_reach(replied, 16, __LINE__).success, 16);
  j.ct_stays(sent, ptl_ct_event_t{32, 0}, __LINE__);
  j.ct_stays(acked, ptl_ct_event_t{16, 0}, __LINE__);
  j.sync();
}

/// R-C3: counting needs the counter and its option only: an MD without a
/// queue counts, and so does one whose events are all disabled; an entry
/// counts on an index without a queue; CT_OVERFLOW counts an overflow
/// event on an append.
void rule_c3(Job& j) {
  if (j.target()) {
    ptl_pt_index_t pt;
    RULE_CALL(j, PtlPTAlloc(j.ni, 0, PTL_EQ_NONE, silent_pt, &pt));
    static unsigned char quiet[8], over[64], late[8];
    int tq = 0, to = 0, tl = 0;
    const ptl_handle_ct_t comm = j.new_ct(), overflow = j.new_ct();
    j.append(j.me_for(quiet, 8, PTL_ME_OP_PUT | PTL_ME_EVENT_CT_COMM, 0, 0, comm),
             PTL_PRIORITY_LIST, &tq, silent_pt);
    j.add(j.me_for(over, 64, PTL_ME_OP_PUT, 0, all_bits), PTL_OVERFLOW_LIST, &to);
    if (!j.sync() || !j.sync()) return;
    RULE_EQ(j, j.ct_reach(comm, 2, __LINE__).success, 2);
    RULE_EQ(j, j.expect(j.teq, PTL_EVENT_PUT, __LINE__).user_ptr, &to);
    j.append(j.me_for(late, 8, PTL_ME_OP_PUT | PTL_ME_USE_ONCE | PTL_ME_EVENT_CT_OVERFLOW, 5, 0,
                      overflow),
             PTL_PRIORITY_LIST, &tl);
    RULE_EQ(j, j.expect(j.teq, PTL_EVENT_PUT_OVERFLOW, __LINE__).user_ptr, &tl);
    RULE_EQ(j, j.ct_reach(overflow, 1, __LINE__).success, 1);
    return;
  }
  unsigned char src[8] = {};
  const ptl_handle_ct_t bare = j.new_ct(), hushed = j.new_ct();
  const ptl_handle_md_t no_eq = j.bind_to(src, 8, PTL_MD_EVENT_CT_SEND, PTL_EQ_NONE, bare);
  const ptl_handle_md_t silent =
      j.bind(src, 8,
             PTL_MD_EVENT_CT_SEND | PTL_MD_EVENT_CT_ACK | PTL_MD_EVENT_SEND_DISABLE |
                 PTL_MD_EVENT_SUCCESS_DISABLE,
             hushed);
  if (!j.sync()) return;
  RULE_CALL(j, PtlPut(no_eq, 0, 8, PTL_NO_ACK_REQ, j.peer, silent_pt, 0, 0, nullptr, 0));
  RULE_EQ(j, j.ct_reach(bare, 1, __LINE__).success, 1);
  RULE_CALL(j, PtlPut(silent, 0, 8, PTL_ACK_REQ, j.peer, silent_pt, 0, 0, nullptr, 0));
  RULE_EQ(j, j.ct_reach(hushed, 2, __LINE__).success, 2);  // SEND and ACK
  j.expect_quiet(j.ieq, __LINE__);
  RULE_CALL(j, PtlPut(silent, 0, 8, PTL_ACK_REQ, j.peer, rule_pt, 5, 0, nullptr, 0));
  RULE_EQ(j, j.ct_reach(hushed, 4, __LINE__).success, 4);
  j.sync();
}

/// R-C4 and R-C5: a wait on a counter ends when success reaches the test
/// or when any failure comes; PtlCTPoll returns the lowest index
/// satisfied and PTL_CT_NONE_REACHED after its timeout.
void rule_c4(Job& j) {
  if (j.target()) {
    static unsigned char a[8], b[8];
    int ta = 0, tb = 0;
    ptl_handle_ct_t cts[2] = {j.new_ct(), j.new_ct()};
    j.add(j.me_for(a, 8, PTL_ME_OP_PUT | PTL_ME_EVENT_CT_COMM | PTL_ME_EVENT_COMM_DISABLE, 0, 0,
                   cts[0]),
          PTL_PRIORITY_LIST, &ta);
    j.add(j.me_for(b, 8, PTL_ME_OP_PUT | PTL_ME_EVENT_CT_COMM | PTL_ME_EVENT_COMM_DISABLE, 1, 0,
                   cts[1]),
          PTL_PRIORITY_LIST, &tb);
    if (!j.sync()) return;
    // The peer puts to b only: the poll names index 1.
    ptl_size_t tests[2] = {1, 1};
    ptl_ct_event_t v{};
    unsigned which = 9;
    RULE_EQ(j, PtlCTPoll(cts, tests, 2, j.wait_ms(), &v, &which), PTL_OK);
    RULE_EQ(j, which, 1);
    RULE_EQ(j, v.success, 1);
    // Nothing reaches 2 on either: the poll times out after its 50 ms.
    ptl_size_t higher[2] = {2, 2};
    const auto t0 = std::chrono::steady_clock::now();
    RULE_EQ(j, PtlCTPoll(cts, higher, 2, 50, &v, &which), PTL_CT_NONE_REACHED);
    RULE_TRUE(j, std::chrono::steady_clock::now() - t0 >= std::chrono::milliseconds(50));
    if (!j.sync() || !j.sync()) return;
    // The peer put to a too: both are satisfied and the lowest index wins.
    RULE_EQ(j, PtlCTPoll(cts, tests, 2, j.wait_ms(), &v, &which), PTL_OK);
    RULE_EQ(j, which, 0);
    // PtlCTWait (the condition already holds, so it cannot block).
    RULE_EQ(j, PtlCTWait(cts[0], 1, &v), PTL_OK);
    RULE_EQ(j, v.success, 1);
    return;
  }
  unsigned char src[8] = {};
  const ptl_handle_ct_t acks = j.new_ct();
  const ptl_handle_md_t md = j.bind_to(src, 8, PTL_MD_EVENT_CT_ACK, PTL_EQ_NONE, acks);
  if (!j.sync()) return;
  RULE_CALL(j, PtlPut(md, 0, 8, PTL_CT_ACK_REQ, j.peer, rule_pt, 1, 0, nullptr, 0));
  RULE_EQ(j, j.ct_reach(acks, 1, __LINE__).success, 1);
  if (!j.sync()) return;
  RULE_CALL(j, PtlPut(md, 0, 8, PTL_CT_ACK_REQ, j.peer, rule_pt, 0, 0, nullptr, 0));
  RULE_EQ(j, j.ct_reach(acks, 2, __LINE__).success, 2);
  // A failure ends a wait for far more successes.
  RULE_CALL(j, PtlPut(md, 0, 8, PTL_CT_ACK_REQ, j.peer, rule_pt, 7, 0, nullptr, 0));
  ptl_ct_event_t v = j.ct_reach(acks, 1000, __LINE__);
  RULE_EQ(j, v.success, 2);
  RULE_EQ(j, v.failure, 1);
  RULE_EQ(j, PtlCTWait(acks, 1000, &v), PTL_OK);  // holds already: returns at once
  RULE_EQ(j, v.failure, 1);
  j.sync();
}

/// R-C6: a new counter reads {0,0}; remote arrivals add to what PtlCTSet
/// wrote, and PtlCTInc adds to the one field it names.
void rule_c6(Job& j) {
  if (j.target()) {
    static unsigned char buf[8];
    int tag = 0;
    const ptl_handle_ct_t ct = j.new_ct();
    const ptl_ct_event_t fresh = j.ct_get(ct);
    RULE_EQ(j, fresh.success + fresh.failure, 0);
    RULE_CALL(j, PtlCTSet(ct, ptl_ct_event_t{10, 2}));
    j.add(j.me_for(buf, 8, PTL_ME_OP_PUT | PTL_ME_EVENT_CT_COMM | PTL_ME_EVENT_COMM_DISABLE, 0, 0,
                   ct),
          PTL_PRIORITY_LIST, &tag);
    if (!j.sync() || !j.sync()) return;
    ptl_ct_event_t v = j.ct_reach(ct, 11, __LINE__);
    RULE_EQ(j, v.success, 11);
    RULE_EQ(j, v.failure, 2);
    RULE_CALL(j, PtlCTInc(ct, ptl_ct_event_t{0, 1}));
    v = j.ct_get(ct);
    RULE_EQ(j, v.success, 11);
    RULE_EQ(j, v.failure, 3);
    return;
  }
  unsigned char src[8] = {};
  const ptl_handle_md_t md = j.bind(src, 8);
  if (!j.sync()) return;
  RULE_EQ(j, j.put_acked(md, 0, 8, 0, 0, __LINE__).ni_fail_type, PTL_NI_OK);
  j.sync();
}

/// R-C8: one counter shared by an MD and an entry counts both the ACKs of
/// this rank's puts and the arrivals of the peer's (both ranks).
void rule_c8(Job& j) {
  static unsigned char in[8];
  unsigned char out[8] = {};
  int tag = 0;
  const ptl_handle_ct_t shared = j.new_ct();
  j.add(j.me_for(in, 8, PTL_ME_OP_PUT | PTL_ME_EVENT_CT_COMM | PTL_ME_EVENT_COMM_DISABLE, 0, 0,
                 shared),
        PTL_PRIORITY_LIST, &tag);
  const ptl_handle_md_t md = j.bind_to(out, 8, PTL_MD_EVENT_CT_ACK, PTL_EQ_NONE, shared);
  if (!j.sync()) return;
  for (int i = 0; i < 3; ++i)
    RULE_CALL(j, PtlPut(md, 0, 8, PTL_CT_ACK_REQ, j.peer, rule_pt, 0, 0, nullptr, 0));
  const ptl_ct_event_t v = j.ct_reach(shared, 6, __LINE__);  // 3 acks + 3 arrivals
  RULE_EQ(j, v.success, 6);
  RULE_EQ(j, v.failure, 0);
  j.sync();
  j.ct_stays(shared, ptl_ct_event_t{6, 0}, __LINE__);
}

/// R-C9: search counting on headers that came from the peer: persistent
/// search-only {3,1}; use-once search-delete {1,0}; no match {0,1}.
void rule_c9(Job& j) {
  if (!j.target()) {
    unsigned char src[8] = {};
    const ptl_handle_md_t md = j.bind(src, 8);
    if (!j.sync()) return;
    for (int i = 0; i < 3; ++i) j.put_acked(md, 0, 4, 5, 0, __LINE__);
    j.sync();
    return;
  }
  static unsigned char over[64];
  int to = 0;
  j.add(j.me_for(over, 64, PTL_ME_OP_PUT | PTL_ME_MANAGE_LOCAL, 0, all_bits), PTL_OVERFLOW_LIST,
        &to);
  if (!j.sync() || !j.sync()) return;
  for (int i = 0; i < 3; ++i) j.expect(j.teq, PTL_EVENT_PUT, __LINE__);
  const ptl_handle_ct_t ct = j.new_ct();
  ptl_me_t probe = j.me_for(nullptr, 0, PTL_ME_EVENT_CT_OVERFLOW, 5, 0, ct);
  RULE_CALL(j, PtlMESearch(j.ni, rule_pt, &probe, PTL_SEARCH_ONLY, nullptr));
  for (int i = 0; i < 3; ++i) {
    const ptl_event_t s = j.expect(j.teq, PTL_EVENT_SEARCH, __LINE__);
    RULE_EQ(j, s.ni_fail_type, PTL_NI_OK);
    RULE_EQ(j, s.rlength, 4);
    j.check_initiator(s, __LINE__);
  }
  ptl_ct_event_t v = j.ct_get(ct);
  RULE_EQ(j, v.success, 3);
  RULE_EQ(j, v.failure, 1);
  RULE_CALL(j, PtlCTSet(ct, ptl_ct_event_t{0, 0}));
  probe.options |= PTL_ME_USE_ONCE;
  RULE_CALL(j, PtlMESearch(j.ni, rule_pt, &probe, PTL_SEARCH_DELETE, nullptr));
  RULE_EQ(j, j.expect(j.teq, PTL_EVENT_PUT_OVERFLOW, __LINE__).rlength, 4);
  v = j.ct_get(ct);
  RULE_EQ(j, v.success, 1);
  RULE_EQ(j, v.failure, 0);
  RULE_CALL(j, PtlCTSet(ct, ptl_ct_event_t{0, 0}));
  probe.match_bits = 99;
  RULE_CALL(j, PtlMESearch(j.ni, rule_pt, &probe, PTL_SEARCH_DELETE, nullptr));
  RULE_EQ(j, j.expect(j.teq, PTL_EVENT_SEARCH, __LINE__).ni_fail_type, PTL_NI_NO_MATCH);
  v = j.ct_get(ct);
  RULE_EQ(j, v.success, 0);
  RULE_EQ(j, v.failure, 1);
  j.expect_quiet(j.teq, __LINE__);
}

}  // namespace

const Rule counting_rules[] = {
    {"R-C1", rule_c1}, {"R-C2", rule_c2}, {"R-C3", rule_c3}, {"R-C4", rule_c4},  {"R-C5", rule_c4},
    {"R-C6", rule_c6}, {"R-C8", rule_c8}, {"R-C9", rule_c9}, {nullptr, nullptr},
};

}  // namespace pier::portals::rules
