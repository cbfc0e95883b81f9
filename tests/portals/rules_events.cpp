// PORTALS4.md §6.7 events (R-E*) across two processes: rank 0 is the target, rank 1 the initiator.
#include <cstdint>
#include <initializer_list>

#include "rules_job.hpp"

namespace pier::portals::rules {
namespace {

constexpr ptl_pt_index_t second_pt = 7, silent_pt = 8, flow_pt = 5;

void two_unexpected_headers(ptl_ni_limits_t& l) {
  l.max_unexpected_headers = 2;
}

/// R-E1: target events go to the queue of the entry's index; an index
/// without a queue has no full events (not even LINK) but still counts.
void rule_e1(Job& j) {
  if (j.target()) {
    ptl_handle_eq_t eq2;
    ptl_pt_index_t pt;
    RULE_CALL(j, PtlEQAlloc(j.ni, 16, &eq2));
    RULE_CALL(j, PtlPTAlloc(j.ni, 0, eq2, second_pt, &pt));
    RULE_CALL(j, PtlPTAlloc(j.ni, 0, PTL_EQ_NONE, silent_pt, &pt));
    static unsigned char a[8], b[8], c[8];
    int ta = 0, tb = 0, tc = 0;
    const ptl_handle_ct_t ct = j.new_ct();
    j.add(j.me_for(a, 8, PTL_ME_OP_PUT), PTL_PRIORITY_LIST, &ta);
    j.append(j.me_for(b, 8, PTL_ME_OP_PUT), PTL_PRIORITY_LIST, &tb, second_pt);
    RULE_EQ(j, j.expect(eq2, PTL_EVENT_LINK, __LINE__).user_ptr, &tb);
    j.append(j.me_for(c, 8, PTL_ME_OP_PUT | PTL_ME_EVENT_CT_COMM, 0, 0, ct), PTL_PRIORITY_LIST, &tc,
             silent_pt);
    if (!j.sync() || !j.sync()) return;
    RULE_EQ(j, j.expect(j.teq, PTL_EVENT_PUT, __LINE__).user_ptr, &ta);
    const ptl_event_t ev = j.expect(eq2, PTL_EVENT_PUT, __LINE__);
    RULE_EQ(j, ev.user_ptr, &tb);
    RULE_EQ(j, ev.pt_index, second_pt);
    RULE_EQ(j, j.ct_reach(ct, 1, __LINE__).success, 1);
    j.expect_quiet(j.teq, __LINE__);
    j.expect_quiet(eq2, __LINE__);
    RULE_EQ(j, a[0] + b[0] + c[0], 3);
    return;
  }
  unsigned char one[8] = {1};
  const ptl_handle_md_t md = j.bind(one, sizeof one);
  if (!j.sync()) return;
  for (ptl_pt_index_t pt : {rule_pt, second_pt, silent_pt})
    RULE_EQ(j, j.put_acked(md, 0, 8, 0, 0, __LINE__, 0, pt).ni_fail_type, PTL_NI_OK);
  j.sync();
}

/// R-E2: a comm event per matched message unless COMM_DISABLE (counting
/// goes on) or SUCCESS_DISABLE; a dropped message posts none.
void rule_e2(Job& j) {
  if (j.target()) {
    static unsigned char buf[3][8];
    int tags[3] = {};
    const ptl_handle_ct_t ct = j.new_ct();
    j.add(j.me_for(buf[0], 8, PTL_ME_OP_PUT | PTL_ME_EVENT_COMM_DISABLE | PTL_ME_EVENT_CT_COMM, 1,
                   0, ct),
          PTL_PRIORITY_LIST, &tags[0]);
    j.add(j.me_for(buf[1], 8, PTL_ME_OP_PUT | PTL_ME_EVENT_SUCCESS_DISABLE, 2), PTL_PRIORITY_LIST,
          &tags[1]);
    j.add(j.me_for(buf[2], 8, PTL_ME_OP_PUT, 3), PTL_PRIORITY_LIST, &tags[2]);
    if (!j.sync() || !j.sync()) return;
    RULE_EQ(j, j.expect(j.teq, PTL_EVENT_PUT, __LINE__).user_ptr, &tags[2]);
    j.expect_quiet(j.teq, __LINE__);
    RULE_EQ(j, j.ct_get(ct).success, 1);
    RULE_EQ(j, buf[0][0] + buf[1][0] + buf[2][0], 3);
    return;
  }
  unsigned char one[8] = {1};
  const ptl_handle_md_t md = j.bind(one, sizeof one);
  if (!j.sync()) return;
  for (ptl_match_bits_t bits : {1, 2, 3})
    RULE_EQ(j, j.put_acked(md, 0, 8, bits, 0, __LINE__).ni_fail_type, PTL_NI_OK);
  RULE_EQ(j, j.put_acked(md, 0, 8, 4, 0, __LINE__).ni_fail_type, PTL_NI_DROPPED);
  j.sync();
}

/// R-E3: LINK_DISABLE, OVER_DISABLE, UNLINK_DISABLE and FLOWCTRL_DISABLE
/// each suppress their events and nothing else.
void rule_e3(Job& j) {
  if (j.target()) {
    static unsigned char over[64], a[8], b[8], c[8];
    int to = 0, ta = 0, tb = 0, tc = 0;
    j.add(j.me_for(over, 64, PTL_ME_OP_PUT | PTL_ME_MANAGE_LOCAL, 9), PTL_OVERFLOW_LIST, &to);
    j.append(j.me_for(a, 8, PTL_ME_OP_PUT | PTL_ME_EVENT_LINK_DISABLE, 1), PTL_PRIORITY_LIST, &ta);
    j.append(j.me_for(b, 8, PTL_ME_OP_PUT | PTL_ME_USE_ONCE | PTL_ME_EVENT_UNLINK_DISABLE, 2),
             PTL_PRIORITY_LIST, &tb);
    RULE_EQ(j, j.expect(j.teq, PTL_EVENT_LINK, __LINE__).user_ptr, &tb);
    // A flow-controlled index that runs out of unexpected headers (rank 0
    // has two, the put of bits 9 took one): no PT_DISABLED event.
    ptl_handle_eq_t small;
    RULE_CALL(j, PtlEQAlloc(j.ni, 8, &small));
    ptl_pt_index_t pt;
    RULE_CALL(j, PtlPTAlloc(j.ni, PTL_PT_FLOWCTRL, small, flow_pt, &pt));
    int tf = 0;
    static unsigned char f[64];
    j.append(j.me_for(f, 64,
                      PTL_ME_OP_PUT | PTL_ME_MANAGE_LOCAL | PTL_ME_EVENT_LINK_DISABLE |
                          PTL_ME_EVENT_FLOWCTRL_DISABLE),
             PTL_OVERFLOW_LIST, &tf, flow_pt);
    if (!j.sync() || !j.sync()) return;
    RULE_EQ(j, j.expect(j.teq, PTL_EVENT_PUT, __LINE__).user_ptr, &to);  // unexpected
    RULE_EQ(j, j.expect(j.teq, PTL_EVENT_PUT, __LINE__).user_ptr, &ta);
    RULE_EQ(j, j.expect(j.teq, PTL_EVENT_PUT, __LINE__).user_ptr, &tb);  // no AUTO_UNLINK
    j.append(j.me_for(c, 8, PTL_ME_OP_PUT | PTL_ME_USE_ONCE | PTL_ME_EVENT_OVER_DISABLE, 9),
             PTL_PRIORITY_LIST, &tc);
    RULE_EQ(j, j.expect(j.teq, PTL_EVENT_AUTO_UNLINK, __LINE__).user_ptr, &tc);
    j.expect_quiet(j.teq, __LINE__);
    RULE_EQ(j, j.expect(small, PTL_EVENT_PUT, __LINE__).user_ptr, &tf);
    j.expect_quiet(small, __LINE__);
    return;
  }
  unsigned char one[8] = {1};
  const ptl_handle_md_t md = j.bind(one, sizeof one);
  if (!j.sync()) return;
  RULE_EQ(j, j.put_acked(md, 0, 8, 9, 0, __LINE__).ni_fail_type, PTL_NI_OK);
  RULE_EQ(j, j.put_acked(md, 0, 8, 0, 0, __LINE__, 0, flow_pt).ni_fail_type, PTL_NI_OK);
  RULE_EQ(j, j.put_acked(md, 0, 8, 1, 0, __LINE__).ni_fail_type, PTL_NI_OK);
  RULE_EQ(j, j.put_acked(md, 0, 8, 2, 0, __LINE__).ni_fail_type, PTL_NI_OK);
  RULE_EQ(j, j.put_acked(md, 0, 8, 0, 0, __LINE__, 0, flow_pt).ni_fail_type, PTL_NI_PT_DISABLED);
  j.sync();
}

/// R-E4 and R-E5: a use-once entry unlinks after its one match, with
/// AUTO_UNLINK after that match's PUT and last for the entry; the next
/// put finds nothing.
void rule_e4(Job& j) {
  if (j.target()) {
    static unsigned char a[8];
    int ta = 0;
    j.add(j.me_for(a, 8, PTL_ME_OP_PUT | PTL_ME_USE_ONCE, 1), PTL_PRIORITY_LIST, &ta);
    if (!j.sync() || !j.sync()) return;
    RULE_EQ(j, j.expect(j.teq, PTL_EVENT_PUT, __LINE__).user_ptr, &ta);
    RULE_EQ(j, j.expect(j.teq, PTL_EVENT_AUTO_UNLINK, __LINE__).user_ptr, &ta);
    j.expect_quiet(j.teq, __LINE__);
    return;
  }
  unsigned char one[8] = {1};
  const ptl_handle_md_t md = j.bind(one, sizeof one);
  if (!j.sync()) return;
  RULE_EQ(j, j.put_acked(md, 0, 8, 1, 0, __LINE__).ni_fail_type, PTL_NI_OK);
  RULE_EQ(j, j.put_acked(md, 0, 8, 1, 0, __LINE__).ni_fail_type, PTL_NI_DROPPED);
  j.sync();
}

/// R-E5: the order at one target queue: comm events before the
/// AUTO_UNLINK they cause (min_free); overflow events before the LINK of
/// the appending entry; AUTO_FREE after the overflow entry's AUTO_UNLINK.
void rule_e5(Job& j) {
  if (j.target()) {
    static unsigned char m[32], over[8], p[16];
    int tm = 0, to = 0, tp = 0;
    ptl_me_t managed = j.me_for(m, 32, PTL_ME_OP_PUT | PTL_ME_MANAGE_LOCAL, 1);
    managed.min_free = 20;
    j.add(managed, PTL_PRIORITY_LIST, &tm);
    j.add(j.me_for(over, 8, PTL_ME_OP_PUT | PTL_ME_USE_ONCE, 2), PTL_OVERFLOW_LIST, &to);
    if (!j.sync() || !j.sync()) return;
    RULE_EQ(j, j.expect(j.teq, PTL_EVENT_PUT, __LINE__).user_ptr, &tm);
    RULE_EQ(j, j.expect(j.teq, PTL_EVENT_PUT, __LINE__).user_ptr, &tm);
    RULE_EQ(j, j.expect(j.teq, PTL_EVENT_AUTO_UNLINK, __LINE__).user_ptr, &tm);
    RULE_EQ(j, j.expect(j.teq, PTL_EVENT_PUT, __LINE__).user_ptr, &to);
    RULE_EQ(j, j.expect(j.teq, PTL_EVENT_AUTO_UNLINK, __LINE__).user_ptr, &to);
    j.expect_quiet(j.teq, __LINE__);
    j.append(j.me_for(p, 16, PTL_ME_OP_PUT, 2), PTL_PRIORITY_LIST, &tp);
    // The overflow event first; the LINK after it; AUTO_FREE of `over`
    // anywhere after it (it came already, above).
    int overflow_at = -1, link_at = -1, free_at = -1;
    for (int i = 0; i < 3; ++i) {
      const ptl_event_t ev = j.next(j.teq, __LINE__);
      if (ev.type == PTL_EVENT_PUT_OVERFLOW) overflow_at = i;
      if (ev.type == PTL_EVENT_LINK) link_at = i;
      if (ev.type == PTL_EVENT_AUTO_FREE) free_at = i;
    }
    RULE_EQ(j, overflow_at, 0);
    RULE_TRUE(j, link_at > overflow_at);
    RULE_TRUE(j, free_at > 0);
    j.expect_quiet(j.teq, __LINE__);
    return;
  }
  unsigned char src[12] = {};
  const ptl_handle_md_t md = j.bind(src, sizeof src);
  if (!j.sync()) return;
  for (int i = 0; i < 2; ++i) j.put_acked(md, 0, 12, 1, 0, __LINE__);  // 8 left < 20
  RULE_EQ(j, j.put_acked(md, 0, 8, 2, 0, __LINE__).ptl_list, PTL_OVERFLOW_LIST);
  j.sync();
}

/// R-E6: initiator events: put gives SEND then ACK (with mlength, offset,
/// list), a put without ack SEND only, get REPLY only, fetch-atomic SEND
/// on the put MD then REPLY on the get MD.
void rule_e6(Job& j) {
  if (j.target()) {
    alignas(8) static unsigned char buf[32];
    int tag = 0;
    j.add(j.me_for(buf, 32, PTL_ME_OP_PUT | PTL_ME_OP_GET | PTL_ME_EVENT_COMM_DISABLE),
          PTL_PRIORITY_LIST, &tag);
    if (!j.sync()) return;
    j.sync();
    return;
  }
  alignas(8) unsigned char src[16] = {}, back[16] = {};
  const ptl_handle_md_t md = j.bind(src, sizeof src);
  const ptl_handle_md_t gmd = j.bind(back, sizeof back);
  if (!j.sync()) return;
  int u1 = 0, u2 = 0, u3 = 0, u4 = 0;
  RULE_CALL(j, PtlPut(md, 0, 16, PTL_ACK_REQ, j.peer, rule_pt, 0, 8, &u1, 0));
  ptl_event_t ev = j.expect(j.ieq, PTL_EVENT_SEND, __LINE__);
  RULE_EQ(j, ev.user_ptr, &u1);
  RULE_EQ(j, ev.ni_fail_type, PTL_NI_OK);
  ev = j.expect(j.ieq, PTL_EVENT_ACK, __LINE__);
  RULE_EQ(j, ev.user_ptr, &u1);
  RULE_EQ(j, ev.mlength, 16);
  RULE_EQ(j, ev.remote_offset, 8);
  RULE_EQ(j, ev.ptl_list, PTL_PRIORITY_LIST);
  RULE_EQ(j, ev.ni_fail_type, PTL_NI_OK);
  RULE_CALL(j, PtlPut(md, 0, 8, PTL_NO_ACK_REQ, j.peer, rule_pt, 0, 0, &u2, 0));
  RULE_EQ(j, j.expect(j.ieq, PTL_EVENT_SEND, __LINE__).user_ptr, &u2);
  j.expect_quiet(j.ieq, __LINE__);
  RULE_CALL(j, PtlGet(gmd, 0, 16, j.peer, rule_pt, 0, 4, &u3));
  ev = j.expect(j.ieq, PTL_EVENT_REPLY, __LINE__);
  RULE_EQ(j, ev.user_ptr, &u3);
  RULE_EQ(j, ev.mlength, 16);
  RULE_EQ(j, ev.remote_offset, 4);
  j.expect_quiet(j.ieq, __LINE__);  // no SEND, no ACK for a get (R-K4)
  RULE_CALL(
      j, PtlFetchAtomic(gmd, 0, md, 0, 8, j.peer, rule_pt, 0, 24, &u4, 0, PTL_SUM, PTL_UINT64_T));
  RULE_EQ(j, j.expect(j.ieq, PTL_EVENT_SEND, __LINE__).user_ptr, &u4);
  ev = j.expect(j.ieq, PTL_EVENT_REPLY, __LINE__);
  RULE_EQ(j, ev.user_ptr, &u4);
  RULE_EQ(j, ev.mlength, 8);
  j.expect_quiet(j.ieq, __LINE__);
  j.sync();
}

/// R-E7: SEND_DISABLE hides successful SENDs only; SUCCESS_DISABLE hides
/// successful SEND, ACK and REPLY but not failures; an MD without a
/// queue has no events at all.
void rule_e7(Job& j) {
  if (j.target()) {
    static unsigned char buf[8];
    int tag = 0;
    j.add(j.me_for(buf, 8, PTL_ME_OP_PUT | PTL_ME_OP_GET), PTL_PRIORITY_LIST, &tag);
    if (!j.sync() || !j.sync()) return;
    // Every message landed, whatever its MD reported: three puts, a get
    // (the silent put and get may land in either order).
    int puts = 0, gets = 0;
    for (int i = 0; i < 4; ++i) {
      const ptl_event_t ev = j.next(j.teq, __LINE__);
      puts += ev.type == PTL_EVENT_PUT;
      gets += ev.type == PTL_EVENT_GET;
    }
    RULE_EQ(j, puts, 3);
    RULE_EQ(j, gets, 1);
    j.expect_quiet(j.teq, __LINE__);
    return;
  }
  unsigned char src[8] = {};
  const ptl_handle_md_t no_send = j.bind(src, 8, PTL_MD_EVENT_SEND_DISABLE);
  const ptl_handle_md_t silent = j.bind(src, 8, PTL_MD_EVENT_SUCCESS_DISABLE);
  const ptl_handle_md_t no_eq = j.bind_to(src, 8, 0, PTL_EQ_NONE, PTL_CT_NONE);
  if (!j.sync()) return;
  RULE_CALL(j, PtlPut(no_send, 0, 8, PTL_ACK_REQ, j.peer, rule_pt, 0, 0, nullptr, 0));
  RULE_EQ(j, j.expect(j.ieq, PTL_EVENT_ACK, __LINE__).ni_fail_type, PTL_NI_OK);
  RULE_CALL(j, PtlPut(silent, 0, 8, PTL_ACK_REQ, j.peer, rule_pt, 0, 0, nullptr, 0));
  RULE_CALL(j, PtlGet(silent, 0, 8, j.peer, rule_pt, 0, 0, nullptr));
  RULE_CALL(j, PtlPut(silent, 0, 8, PTL_ACK_REQ, j.peer, unallocated_pt, 0, 0, nullptr, 0));
  const ptl_event_t ev = j.expect(j.ieq, PTL_EVENT_ACK, __LINE__);  // the failure only
  RULE_EQ(j, ev.ni_fail_type, PTL_NI_DROPPED);
  // PTL_ACK_REQ needs a queue on the MD.
  RULE_EQ(j, PtlPut(no_eq, 0, 8, PTL_ACK_REQ, j.peer, rule_pt, 0, 0, nullptr, 0), PTL_ARG_INVALID);
  RULE_CALL(j, PtlPut(no_eq, 0, 8, PTL_NO_ACK_REQ, j.peer, rule_pt, 0, 0, nullptr, 0));
  j.sync();  // the target waits for the third PUT itself
  j.expect_quiet(j.ieq, __LINE__);
}

/// R-E8: SEND says PTL_NI_OK whatever the target does; the target's
/// verdict (drop, disabled, permission, operation) comes in the ACK.
void rule_e8(Job& j) {
  if (j.target()) {
    static unsigned char a[8], b[8];
    int ta = 0, tb = 0;
    ptl_me_t wrong_uid = j.me_for(a, 8, PTL_ME_OP_PUT, 1);
    wrong_uid.uid = j.uid + 1;
    j.add(wrong_uid, PTL_PRIORITY_LIST, &ta);
    j.add(j.me_for(b, 8, PTL_ME_OP_GET, 2), PTL_PRIORITY_LIST, &tb);
    ptl_pt_index_t pt;
    RULE_CALL(j, PtlPTAlloc(j.ni, 0, j.teq, flow_pt, &pt));
    RULE_CALL(j, PtlPTDisable(j.ni, flow_pt));
    if (!j.sync() || !j.sync()) return;
    j.expect_quiet(j.teq, __LINE__);
    return;
  }
  unsigned char src[8] = {};
  const ptl_handle_md_t md = j.bind(src, 8);
  if (!j.sync()) return;
  // put_acked checks that each SEND says PTL_NI_OK.
  RULE_EQ(j, j.put_acked(md, 0, 8, 3, 0, __LINE__).ni_fail_type, PTL_NI_DROPPED);
  RULE_EQ(j, j.put_acked(md, 0, 8, 0, 0, __LINE__, 0, flow_pt).ni_fail_type, PTL_NI_PT_DISABLED);
  RULE_EQ(j, j.put_acked(md, 0, 8, 1, 0, __LINE__).ni_fail_type, PTL_NI_PERM_VIOLATION);
  RULE_EQ(j, j.put_acked(md, 0, 8, 2, 0, __LINE__).ni_fail_type, PTL_NI_OP_VIOLATION);
  j.sync();
}

/// R-E9: the meaningful fields of PUT, GET, ATOMIC and FETCH_ATOMIC at the
/// target, and of SEND, ACK and REPLY at the initiator.
void rule_e9(Job& j) {
  if (j.target()) {
    alignas(8) static unsigned char buf[64];
    int tag = 0;
    j.add(j.me_for(buf, 64, PTL_ME_OP_PUT | PTL_ME_OP_GET, 0x5a, 0xf), PTL_PRIORITY_LIST, &tag);
    if (!j.sync() || !j.sync()) return;
    struct Want {
      ptl_event_kind_t kind;
      ptl_match_bits_t bits;
      ptl_size_t length, offset;
      ptl_hdr_data_t hdr;
    } wants[] = {{PTL_EVENT_PUT, 0x5b, 16, 8, 0x1111},
                 {PTL_EVENT_GET, 0x5c, 8, 40, 0},
                 {PTL_EVENT_ATOMIC, 0x5d, 8, 48, 0x3333},
                 {PTL_EVENT_FETCH_ATOMIC, 0x5e, 8, 56, 0x4444}};
    for (const Want& w : wants) {
      const ptl_event_t ev = j.expect(j.teq, w.kind, __LINE__);
      RULE_EQ(j, ev.start, buf + w.offset);
      RULE_EQ(j, ev.user_ptr, &tag);
      if (w.kind != PTL_EVENT_GET) RULE_EQ(j, ev.hdr_data, w.hdr);
      RULE_EQ(j, ev.match_bits, w.bits);
      RULE_EQ(j, ev.rlength, w.length);
      RULE_EQ(j, ev.mlength, w.length);
      RULE_EQ(j, ev.remote_offset, w.offset);
      j.check_initiator(ev, __LINE__);
      RULE_EQ(j, ev.uid, j.uid);
      RULE_EQ(j, ev.pt_index, rule_pt);
      RULE_EQ(j, ev.ptl_list, PTL_PRIORITY_LIST);
      RULE_EQ(j, ev.ni_fail_type, PTL_NI_OK);
      if (w.kind == PTL_EVENT_ATOMIC || w.kind == PTL_EVENT_FETCH_ATOMIC) {
        RULE_EQ(j, ev.atomic_operation, w.kind == PTL_EVENT_ATOMIC ? PTL_BOR : PTL_MAX);
        RULE_EQ(j, ev.atomic_type, w.kind == PTL_EVENT_ATOMIC ? PTL_UINT32_T : PTL_INT64_T);
      }
    }
    j.expect_quiet(j.teq, __LINE__);
    return;
  }
  alignas(8) unsigned char src[16] = {}, back[16] = {};
  const ptl_handle_md_t md = j.bind(src, sizeof src);
  const ptl_handle_md_t gmd = j.bind(back, sizeof back);
  if (!j.sync()) return;
  int u = 0;
  RULE_CALL(j, PtlPut(md, 0, 16, PTL_ACK_REQ, j.peer, rule_pt, 0x5b, 8, &u, 0x1111));
  ptl_event_t ev = j.expect(j.ieq, PTL_EVENT_SEND, __LINE__);
  RULE_EQ(j, ev.user_ptr, &u);
  RULE_EQ(j, ev.ni_fail_type, PTL_NI_OK);
  ev = j.expect(j.ieq, PTL_EVENT_ACK, __LINE__);
  RULE_EQ(j, ev.user_ptr, &u);
  RULE_EQ(j, ev.mlength, 16);
  RULE_EQ(j, ev.remote_offset, 8);
  RULE_EQ(j, ev.ptl_list, PTL_PRIORITY_LIST);
  RULE_EQ(j, ev.ni_fail_type, PTL_NI_OK);
  RULE_CALL(j, PtlGet(gmd, 0, 8, j.peer, rule_pt, 0x5c, 40, &u));
  ev = j.expect(j.ieq, PTL_EVENT_REPLY, __LINE__);
  RULE_EQ(j, ev.user_ptr, &u);
  RULE_EQ(j, ev.mlength, 8);
  RULE_EQ(j, ev.remote_offset, 40);
  RULE_EQ(j, ev.ni_fail_type, PTL_NI_OK);
  RULE_CALL(j, PtlAtomic(md, 0, 8, PTL_ACK_REQ, j.peer, rule_pt, 0x5d, 48, &u, 0x3333, PTL_BOR,
                         PTL_UINT32_T));
  j.expect(j.ieq, PTL_EVENT_SEND, __LINE__);
  RULE_EQ(j, j.expect(j.ieq, PTL_EVENT_ACK, __LINE__).mlength, 8);
  RULE_CALL(j, PtlFetchAtomic(gmd, 0, md, 0, 8, j.peer, rule_pt, 0x5e, 56, &u, 0x4444, PTL_MAX,
                              PTL_INT64_T));
  j.expect(j.ieq, PTL_EVENT_SEND, __LINE__);
  ev = j.expect(j.ieq, PTL_EVENT_REPLY, __LINE__);
  RULE_EQ(j, ev.mlength, 8);
  RULE_EQ(j, ev.remote_offset, 56);
  j.sync();
}

}  // namespace

const Rule event_rules[] = {
    {"R-E1", rule_e1},  {"R-E2", rule_e2}, {"R-E3", rule_e3, true, two_unexpected_headers},
    {"R-E4", rule_e4},  {"R-E5", rule_e5}, {"R-E6", rule_e6},
    {"R-E7", rule_e7},  {"R-E8", rule_e8}, {"R-E9", rule_e9},
    {nullptr, nullptr},
};

}  // namespace pier::portals::rules
