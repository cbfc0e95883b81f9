// PORTALS4.md §6.4 matching (R-M*) across two processes: rank 0 is the
// target, rank 1 the initiator. R-M2 is in rules_flow.cpp with R-P1/R-P2.
#include <initializer_list>

#include "rules_job.hpp"

namespace pier::portals::rules {
namespace {

/// R-M1: an ME matches iff ((incoming ^ bits) & ~ignore) == 0; the event
/// carries the incoming bits. R-M7 for the one that matches nothing.
void rule_m1(Job& j) {
  unsigned char src[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  if (j.target()) {
    static unsigned char a[8], b[8];
    int ta = 0, tb = 0;
    j.add(j.me_for(a, 8, PTL_ME_OP_PUT, 0xf0, 0x0f), PTL_PRIORITY_LIST, &ta);
    j.add(j.me_for(b, 8, PTL_ME_OP_PUT, 0x100), PTL_PRIORITY_LIST, &tb);
    const ptl_sr_value_t drops = j.status(PTL_SR_DROP_COUNT);
    if (!j.sync()) return;
    ptl_event_t ev = j.expect(j.teq, PTL_EVENT_PUT, __LINE__);
    RULE_EQ(j, ev.user_ptr, &ta);
    RULE_EQ(j, ev.match_bits, 0xf7);  // the low bits are ignored
    ev = j.expect(j.teq, PTL_EVENT_PUT, __LINE__);
    RULE_EQ(j, ev.user_ptr, &ta);
    RULE_EQ(j, ev.match_bits, 0xf0);
    ev = j.expect(j.teq, PTL_EVENT_PUT, __LINE__);
    RULE_EQ(j, ev.user_ptr, &tb);
    RULE_EQ(j, ev.match_bits, 0x100);
    RULE_BYTES(j, a, src, 8);
    RULE_BYTES(j, b, src, 8);
    j.sync();
    j.expect_quiet(j.teq, __LINE__);
    RULE_EQ(j, j.status(PTL_SR_DROP_COUNT) - drops, 2);
    return;
  }
  const ptl_handle_md_t md = j.bind(src, sizeof src);
  if (!j.sync()) return;
  for (ptl_match_bits_t bits : {0xf7, 0xf0, 0x100})
    RULE_EQ(j, j.put_acked(md, 0, 8, bits, 0, __LINE__).ni_fail_type, PTL_NI_OK);
  // A bit outside the ignore mask differs: neither entry matches.
  for (ptl_match_bits_t bits : {0x1f0, 0xe0})
    RULE_EQ(j, j.put_acked(md, 0, 8, bits, 0, __LINE__).ni_fail_type, PTL_NI_DROPPED);
  j.sync();
}

/// R-M3: a NO_TRUNCATE entry does not match a message that does not fit
/// from its offset (the remote offset, or the local one with MANAGE_LOCAL);
/// the search goes on to the next entry.
void rule_m3(Job& j) {
  unsigned char src[32];
  for (int i = 0; i < 32; ++i) src[i] = static_cast<unsigned char>(100 + i);
  if (j.target()) {
    static unsigned char small[16], big[64], local[16], big2[64];
    int ts = 0, tb = 0, tl = 0, tb2 = 0;
    j.add(j.me_for(small, 16, PTL_ME_OP_PUT | PTL_ME_NO_TRUNCATE, 1), PTL_PRIORITY_LIST, &ts);
    j.add(j.me_for(big, 64, PTL_ME_OP_PUT, 1), PTL_PRIORITY_LIST, &tb);
    j.add(j.me_for(local, 16, PTL_ME_OP_PUT | PTL_ME_NO_TRUNCATE | PTL_ME_MANAGE_LOCAL, 2),
          PTL_PRIORITY_LIST, &tl);
    j.add(j.me_for(big2, 64, PTL_ME_OP_PUT, 2), PTL_PRIORITY_LIST, &tb2);
    if (!j.sync()) return;
    // 12 bytes at 4 fit the 16 of `small`; 13 do not.
    ptl_event_t ev = j.expect(j.teq, PTL_EVENT_PUT, __LINE__);
    RULE_EQ(j, ev.user_ptr, &ts);
    RULE_EQ(j, ev.mlength, 12);
    ev = j.expect(j.teq, PTL_EVENT_PUT, __LINE__);
    RULE_EQ(j, ev.user_ptr, &tb);
    RULE_EQ(j, ev.mlength, 13);
    RULE_BYTES(j, small + 4, src, 12);
    RULE_BYTES(j, big + 4, src, 13);
    // MANAGE_LOCAL: the first 10 bytes fit at local offset 0, the next 10
    // would end at 20 and go on to big2 (the remote offset of 100 counts
    // for neither check on `local`).
    ev = j.expect(j.teq, PTL_EVENT_PUT, __LINE__);
    RULE_EQ(j, ev.user_ptr, &tl);
    RULE_EQ(j, ev.start, local);
    ev = j.expect(j.teq, PTL_EVENT_PUT, __LINE__);
    RULE_EQ(j, ev.user_ptr, &tb2);
    RULE_EQ(j, ev.mlength, 10);
    RULE_BYTES(j, local, src, 10);
    RULE_BYTES(j, big2 + 1, src, 10);
    j.sync();
    j.expect_quiet(j.teq, __LINE__);
    return;
  }
  const ptl_handle_md_t md = j.bind(src, sizeof src);
  if (!j.sync()) return;
  RULE_EQ(j, j.put_acked(md, 0, 12, 1, 4, __LINE__).mlength, 12);
  RULE_EQ(j, j.put_acked(md, 0, 13, 1, 4, __LINE__).mlength, 13);
  RULE_EQ(j, j.put_acked(md, 0, 10, 2, 1, __LINE__).remote_offset, 0);
  RULE_EQ(j, j.put_acked(md, 0, 10, 2, 1, __LINE__).remote_offset, 1);
  j.sync();
}

/// R-M4: on a non-matching NI every LE matches whatever bits come; the
/// head LE takes every message until it unlinks (use-once LEs in order).
void rule_m4(Job& j) {
  if (j.target()) {
    static unsigned char a[8], b[8], c[16];
    int ta = 0, tb = 0, tc = 0;
    ptl_le_t la{a, 8, PTL_CT_NONE, PTL_UID_ANY, PTL_LE_OP_PUT | PTL_LE_USE_ONCE};
    ptl_le_t lb{b, 8, PTL_CT_NONE, PTL_UID_ANY, PTL_LE_OP_PUT | PTL_LE_USE_ONCE};
    ptl_le_t lc{c, 16, PTL_CT_NONE, PTL_UID_ANY, PTL_LE_OP_PUT};
    ptl_handle_le_t h;
    RULE_CALL(j, PtlLEAppend(j.ni, rule_pt, &la, PTL_PRIORITY_LIST, &ta, &h));
    RULE_CALL(j, PtlLEAppend(j.ni, rule_pt, &lb, PTL_PRIORITY_LIST, &tb, &h));
    RULE_CALL(j, PtlLEAppend(j.ni, rule_pt, &lc, PTL_PRIORITY_LIST, &tc, &h));
    for (int i = 0; i < 3; ++i) j.expect(j.teq, PTL_EVENT_LINK, __LINE__);
    if (!j.sync()) return;
    RULE_EQ(j, j.expect(j.teq, PTL_EVENT_PUT, __LINE__).user_ptr, &ta);
    RULE_EQ(j, j.expect(j.teq, PTL_EVENT_AUTO_UNLINK, __LINE__).user_ptr, &ta);
    RULE_EQ(j, j.expect(j.teq, PTL_EVENT_PUT, __LINE__).user_ptr, &tb);
    RULE_EQ(j, j.expect(j.teq, PTL_EVENT_AUTO_UNLINK, __LINE__).user_ptr, &tb);
    RULE_EQ(j, j.expect(j.teq, PTL_EVENT_PUT, __LINE__).user_ptr, &tc);
    const ptl_event_t last = j.expect(j.teq, PTL_EVENT_PUT, __LINE__);
    RULE_EQ(j, last.user_ptr, &tc);
    RULE_EQ(j, last.remote_offset, 8);
    j.sync();
    j.expect_quiet(j.teq, __LINE__);
    RULE_EQ(j, a[0], 'x');
    RULE_EQ(j, b[0], 'y');
    RULE_EQ(j, c[0], 'z');
    RULE_EQ(j, c[8], 'w');
    return;
  }
  unsigned char src[8];
  const ptl_handle_md_t md = j.bind(src, sizeof src);
  if (!j.sync()) return;
  const char fill[] = {'x', 'y', 'z', 'w'};
  const ptl_match_bits_t bits[] = {0xdead, 0xbeef, 0, 77};  // ignored
  for (int i = 0; i < 4; ++i) {
    for (unsigned char& c : src) c = static_cast<unsigned char>(fill[i]);
    RULE_EQ(j, j.put_acked(md, 0, 8, bits[i], i == 3 ? 8 : 0, __LINE__).ni_fail_type, PTL_NI_OK);
  }
  j.sync();
}

/// R-M5: the priority list is searched before the overflow list, each
/// from its head, and the first matching entry takes the message.
void rule_m5(Job& j) {
  if (j.target()) {
    static unsigned char over[16], p1[16], p2[16];
    int to = 0, t1 = 0, t2 = 0;
    j.add(j.me_for(over, 16, PTL_ME_OP_PUT, 0, ~ptl_match_bits_t{0}), PTL_OVERFLOW_LIST, &to);
    j.add(j.me_for(p1, 16, PTL_ME_OP_PUT, 7), PTL_PRIORITY_LIST, &t1);
    j.add(j.me_for(p2, 16, PTL_ME_OP_PUT, 7), PTL_PRIORITY_LIST, &t2);
    if (!j.sync()) return;
    for (int i = 0; i < 2; ++i) {
      const ptl_event_t ev = j.expect(j.teq, PTL_EVENT_PUT, __LINE__);
      RULE_EQ(j, ev.user_ptr, &t1);
      RULE_EQ(j, ev.ptl_list, PTL_PRIORITY_LIST);
    }
    const ptl_event_t ev = j.expect(j.teq, PTL_EVENT_PUT, __LINE__);
    RULE_EQ(j, ev.user_ptr, &to);
    RULE_EQ(j, ev.ptl_list, PTL_OVERFLOW_LIST);
    j.sync();
    j.expect_quiet(j.teq, __LINE__);
    RULE_EQ(j, p2[0], 0);
    return;
  }
  unsigned char src[8] = {1, 1, 1, 1, 1, 1, 1, 1};
  const ptl_handle_md_t md = j.bind(src, sizeof src);
  if (!j.sync()) return;
  for (int i = 0; i < 2; ++i)
    RULE_EQ(j, j.put_acked(md, 0, 8, 7, 0, __LINE__).ptl_list, PTL_PRIORITY_LIST);
  RULE_EQ(j, j.put_acked(md, 0, 8, 8, 0, __LINE__).ptl_list, PTL_OVERFLOW_LIST);
  j.sync();
}

/// R-M6: only the first matching entry's permissions count: a uid
/// mismatch gives PTL_NI_PERM_VIOLATION, a missing operation
/// PTL_NI_OP_VIOLATION, each in its own register and not in DROP_COUNT;
/// later entries are not tried. A matching uid is accepted and reported.
void rule_m6(Job& j) {
  if (j.target()) {
    static unsigned char a[8], b[8], c[8], d[8], e[8];
    int ta = 0, tb = 0, tc = 0, td = 0, te = 0;
    ptl_me_t wrong_uid = j.me_for(a, 8, PTL_ME_OP_PUT, 1);
    wrong_uid.uid = j.uid + 1;
    j.add(wrong_uid, PTL_PRIORITY_LIST, &ta);
    j.add(j.me_for(b, 8, PTL_ME_OP_PUT, 1), PTL_PRIORITY_LIST, &tb);  // never tried
    j.add(j.me_for(c, 8, PTL_ME_OP_GET, 2), PTL_PRIORITY_LIST, &tc);
    j.add(j.me_for(d, 8, PTL_ME_OP_PUT, 3), PTL_PRIORITY_LIST, &td);
    // Both ranks run as the same user under pier-run.
    ptl_me_t same_uid = j.me_for(e, 8, PTL_ME_OP_PUT, 4);
    same_uid.uid = j.uid;
    j.add(same_uid, PTL_PRIORITY_LIST, &te);
    const ptl_sr_value_t drops = j.status(PTL_SR_DROP_COUNT);
    const ptl_sr_value_t perms = j.status(PTL_SR_PERMISSION_VIOLATIONS);
    const ptl_sr_value_t ops = j.status(PTL_SR_OPERATION_VIOLATIONS);
    if (!j.sync()) return;
    const ptl_event_t ev = j.expect(j.teq, PTL_EVENT_PUT, __LINE__);
    RULE_EQ(j, ev.user_ptr, &te);
    RULE_EQ(j, ev.uid, j.uid);
    j.sync();
    j.expect_quiet(j.teq, __LINE__);
    RULE_EQ(j, j.status(PTL_SR_PERMISSION_VIOLATIONS) - perms, 1);
    RULE_EQ(j, j.status(PTL_SR_OPERATION_VIOLATIONS) - ops, 2);
    RULE_EQ(j, j.status(PTL_SR_DROP_COUNT) - drops, 0);
    RULE_EQ(j, a[0] | b[0] | c[0] | d[0], 0);
    RULE_EQ(j, e[0], 9);
    return;
  }
  unsigned char src[8] = {9, 9, 9, 9, 9, 9, 9, 9};
  const ptl_handle_md_t md = j.bind(src, sizeof src);
  if (!j.sync()) return;
  RULE_EQ(j, j.put_acked(md, 0, 8, 1, 0, __LINE__).ni_fail_type, PTL_NI_PERM_VIOLATION);
  RULE_EQ(j, j.put_acked(md, 0, 8, 2, 0, __LINE__).ni_fail_type, PTL_NI_OP_VIOLATION);
  RULE_EQ(j, j.get_reply(md, 0, 8, 3, 0, __LINE__).ni_fail_type, PTL_NI_OP_VIOLATION);
  RULE_EQ(j, j.put_acked(md, 0, 8, 4, 0, __LINE__).ni_fail_type, PTL_NI_OK);
  j.sync();
}

/// R-M7: a message that matches no entry on either list is dropped
/// (PTL_NI_DROPPED in the ACK, the REPLY and the ACK counter's failure),
/// DROP_COUNT counts it and the target posts no event.
void rule_m7(Job& j) {
  if (j.target()) {
    static unsigned char pri[8], over[8];
    int tp = 0, to = 0;
    j.add(j.me_for(pri, 8, PTL_ME_OP_PUT | PTL_ME_OP_GET, 1), PTL_PRIORITY_LIST, &tp);
    j.add(j.me_for(over, 8, PTL_ME_OP_PUT | PTL_ME_OP_GET, 2), PTL_OVERFLOW_LIST, &to);
    const ptl_sr_value_t drops = j.status(PTL_SR_DROP_COUNT);
    if (!j.sync() || !j.sync()) return;
    j.expect_quiet(j.teq, __LINE__);
    RULE_EQ(j, j.status(PTL_SR_DROP_COUNT) - drops, 3);
    RULE_EQ(j, pri[0] | over[0], 0);
    return;
  }
  unsigned char buf[8] = {4, 4, 4, 4, 4, 4, 4, 4};
  const ptl_handle_ct_t ct = j.new_ct();
  const ptl_handle_md_t md = j.bind(buf, sizeof buf);
  const ptl_handle_md_t counted = j.bind_to(buf, sizeof buf, PTL_MD_EVENT_CT_ACK, PTL_EQ_NONE, ct);
  if (!j.sync()) return;
  RULE_EQ(j, j.put_acked(md, 0, 8, 3, 0, __LINE__).ni_fail_type, PTL_NI_DROPPED);
  RULE_EQ(j, j.get_reply(md, 0, 8, 3, 0, __LINE__).ni_fail_type, PTL_NI_DROPPED);
  RULE_CALL(j, PtlPut(counted, 0, 8, PTL_CT_ACK_REQ, j.peer, rule_pt, 3, 0, nullptr, 0));
  const ptl_ct_event_t v = j.ct_reach(ct, 1, __LINE__);
  RULE_EQ(j, v.success, 0);
  RULE_EQ(j, v.failure, 1);
  j.sync();
}

/// R-M9: an index with PTL_PT_MATCH_UNORDERED still delivers each message
/// to an entry whose bits match it (exact entries or a wildcard one).
void rule_m9(Job& j) {
  constexpr ptl_pt_index_t unordered_pt = 6;
  if (j.target()) {
    ptl_pt_index_t pt;
    RULE_CALL(j, PtlPTAlloc(j.ni, PTL_PT_MATCH_UNORDERED, j.teq, unordered_pt, &pt));
    static unsigned char buf[5][8];
    int tags[5] = {};
    for (int k = 0; k < 4; ++k)
      j.add(j.me_for(buf[k], 8, PTL_ME_OP_PUT, ptl_match_bits_t(0x1000 + k)), PTL_PRIORITY_LIST,
            &tags[k], unordered_pt);
    j.add(j.me_for(buf[4], 8, PTL_ME_OP_PUT, 0, ~ptl_match_bits_t{0}), PTL_PRIORITY_LIST, &tags[4],
          unordered_pt);
    if (!j.sync()) return;
    for (int k : {3, 0, 4, 2, 1}) {
      const ptl_event_t ev = j.expect(j.teq, PTL_EVENT_PUT, __LINE__);
      RULE_EQ(j, ev.user_ptr, &tags[k]);
      RULE_EQ(j, ev.pt_index, unordered_pt);
      RULE_EQ(j, buf[k][0], 0x10 + k);
    }
    j.sync();
    j.expect_quiet(j.teq, __LINE__);
    return;
  }
  unsigned char src[8];
  const ptl_handle_md_t md = j.bind(src, sizeof src);
  if (!j.sync()) return;
  for (int k : {3, 0, 4, 2, 1}) {
    for (unsigned char& c : src) c = static_cast<unsigned char>(0x10 + k);
    const ptl_match_bits_t bits = k == 4 ? 0xabc : ptl_match_bits_t(0x1000 + k);
    RULE_EQ(j, j.put_acked(md, 0, 8, bits, 0, __LINE__, 0, unordered_pt).ni_fail_type, PTL_NI_OK);
  }
  j.sync();
}

}  // namespace

const Rule matching_rules[] = {
    {"R-M1", rule_m1}, {"R-M3", rule_m3}, {"R-M4", rule_m4, false}, {"R-M5", rule_m5},
    {"R-M6", rule_m6}, {"R-M7", rule_m7}, {"R-M9", rule_m9},        {nullptr, nullptr},
};

}  // namespace pier::portals::rules
