// PORTALS4.md §6.8 acknowledgments (R-K*) across two processes: rank 0 is
// the target, rank 1 the initiator.
#include "rules_job.hpp"

namespace pier::portals::rules {
namespace {

/// R-K1: PTL_ACK_REQ returns mlength, the offset used, the list and the
/// failure in the ACK, and with CT_ACK also counts on the MD's counter.
void rule_k1(Job& j) {
  if (j.target()) {
    static unsigned char m[16], over[16];
    int tm = 0, to = 0;
    j.add(j.me_for(m, 16, PTL_ME_OP_PUT | PTL_ME_MANAGE_LOCAL, 1), PTL_PRIORITY_LIST, &tm);
    j.add(j.me_for(over, 16, PTL_ME_OP_PUT, 2), PTL_OVERFLOW_LIST, &to);
    if (!j.sync()) return;
    j.sync();
    return;
  }
  unsigned char src[32] = {};
  const ptl_handle_ct_t ct = j.new_ct();
  const ptl_handle_md_t md = j.bind(src, sizeof src, PTL_MD_EVENT_CT_ACK, ct);
  if (!j.sync()) return;
  ptl_event_t ack = j.put_acked(md, 0, 4, 1, 100, __LINE__);
  RULE_EQ(j, ack.remote_offset, 0);
  ack = j.put_acked(md, 0, 32, 1, 100, __LINE__);
  RULE_EQ(j, ack.remote_offset, 4);
  RULE_EQ(j, ack.mlength, 12);
  RULE_EQ(j, ack.ptl_list, PTL_PRIORITY_LIST);
  ack = j.put_acked(md, 0, 8, 2, 0, __LINE__);
  RULE_EQ(j, ack.ptl_list, PTL_OVERFLOW_LIST);
  RULE_EQ(j, j.put_acked(md, 0, 8, 3, 0, __LINE__).ni_fail_type, PTL_NI_DROPPED);
  const ptl_ct_event_t v = j.ct_get(ct);
  RULE_EQ(j, v.success, 3);
  RULE_EQ(j, v.failure, 1);
  j.sync();
}

/// R-K2: PTL_CT_ACK_REQ counts (bytes with CT_BYTES: the mlength) and
/// posts no full ACK though the MD has a queue; a target-side failure
/// counts one failure.
void rule_k2(Job& j) {
  if (j.target()) {
    static unsigned char m[16];
    int tm = 0;
    j.add(j.me_for(m, 16, PTL_ME_OP_PUT | PTL_ME_EVENT_COMM_DISABLE, 1), PTL_PRIORITY_LIST, &tm);
    if (!j.sync()) return;
    j.sync();
    return;
  }
  unsigned char src[32] = {};
  const ptl_handle_ct_t bytes = j.new_ct(), ops = j.new_ct();
  const ptl_handle_md_t by_bytes =
      j.bind(src, sizeof src,
             PTL_MD_EVENT_CT_ACK | PTL_MD_EVENT_CT_BYTES | PTL_MD_EVENT_SEND_DISABLE, bytes);
  const ptl_handle_md_t by_ops =
      j.bind(src, sizeof src, PTL_MD_EVENT_CT_ACK | PTL_MD_EVENT_SEND_DISABLE, ops);
  if (!j.sync()) return;
  RULE_CALL(j, PtlPut(by_bytes, 0, 32, PTL_CT_ACK_REQ, j.peer, rule_pt, 1, 0, nullptr, 0));
  RULE_EQ(j, j.ct_reach(bytes, 16, __LINE__).success, 16);  // truncated to 16
  RULE_CALL(j, PtlPut(by_bytes, 0, 8, PTL_CT_ACK_REQ, j.peer, rule_pt, 9, 0, nullptr, 0));
  ptl_ct_event_t v = j.ct_reach(bytes, 100, __LINE__);  // the failure ends the wait
  RULE_EQ(j, v.success, 16);
  RULE_EQ(j, v.failure, 1);
  RULE_CALL(j, PtlPut(by_ops, 0, 32, PTL_CT_ACK_REQ, j.peer, rule_pt, 1, 0, nullptr, 0));
  v = j.ct_reach(ops, 1, __LINE__);
  RULE_EQ(j, v.success, 1);
  RULE_EQ(j, v.failure, 0);
  j.expect_quiet(j.ieq, __LINE__);
  j.sync();
}

/// R-K3: PTL_OC_ACK_REQ counts operations, not bytes, and comes even for
/// a dropped message or a permission violation (as a failure, Ref).
void rule_k3(Job& j) {
  if (j.target()) {
    static unsigned char m[16], a[16];
    int tm = 0, ta = 0;
    j.add(j.me_for(m, 16, PTL_ME_OP_PUT | PTL_ME_EVENT_COMM_DISABLE, 1), PTL_PRIORITY_LIST, &tm);
    ptl_me_t wrong_uid = j.me_for(a, 16, PTL_ME_OP_PUT, 2);
    wrong_uid.uid = j.uid + 1;
    j.add(wrong_uid, PTL_PRIORITY_LIST, &ta);
    if (!j.sync()) return;
    j.sync();
    return;
  }
  unsigned char src[16] = {};
  const ptl_handle_ct_t ct = j.new_ct();
  const ptl_handle_md_t md = j.bind(
      src, sizeof src, PTL_MD_EVENT_CT_ACK | PTL_MD_EVENT_CT_BYTES | PTL_MD_EVENT_SEND_DISABLE, ct);
  if (!j.sync()) return;
  RULE_CALL(j, PtlPut(md, 0, 16, PTL_OC_ACK_REQ, j.peer, rule_pt, 1, 0, nullptr, 0));
  ptl_ct_event_t v = j.ct_reach(ct, 1, __LINE__);
  RULE_EQ(j, v.success, 1);  // one operation, not 16 bytes
  RULE_CALL(j, PtlPut(md, 0, 16, PTL_OC_ACK_REQ, j.peer, rule_pt, 7, 0, nullptr, 0));
  v = j.ct_reach(ct, 100, __LINE__);
  RULE_EQ(j, v.failure, 1);
  const ptl_handle_ct_t perm_ct = j.new_ct();
  const ptl_handle_md_t perm_md =
      j.bind(src, sizeof src, PTL_MD_EVENT_CT_ACK | PTL_MD_EVENT_SEND_DISABLE, perm_ct);
  RULE_CALL(j, PtlPut(perm_md, 0, 16, PTL_OC_ACK_REQ, j.peer, rule_pt, 2, 0, nullptr, 0));
  v = j.ct_reach(perm_ct, 100, __LINE__);
  RULE_EQ(j, v.success, 0);
  RULE_EQ(j, v.failure, 1);
  j.expect_quiet(j.ieq, __LINE__);
  j.sync();
}

/// R-K4: a get has no ACK: its REPLY is the completion; an MD counting
/// ACKs does not count it, one counting REPLYs does.
void rule_k4(Job& j) {
  if (j.target()) {
    alignas(8) static unsigned char m[16];
    int tm = 0;
    j.add(j.me_for(m, 16, PTL_ME_OP_PUT | PTL_ME_OP_GET | PTL_ME_EVENT_COMM_DISABLE),
          PTL_PRIORITY_LIST, &tm);
    if (!j.sync()) return;
    j.sync();
    return;
  }
  alignas(8) unsigned char back[16] = {};
  const ptl_handle_ct_t acks = j.new_ct(), replies = j.new_ct();
  const ptl_handle_md_t md = j.bind(back, sizeof back, PTL_MD_EVENT_CT_ACK, acks);
  const ptl_handle_md_t counted = j.bind(back, sizeof back, PTL_MD_EVENT_CT_REPLY, replies);
  if (!j.sync()) return;
  RULE_EQ(j, j.get_reply(md, 0, 16, 0, 0, __LINE__).ni_fail_type, PTL_NI_OK);
  RULE_CALL(
      j, PtlFetchAtomic(md, 0, md, 8, 8, j.peer, rule_pt, 0, 0, nullptr, 0, PTL_SUM, PTL_UINT64_T));
  j.expect(j.ieq, PTL_EVENT_SEND, __LINE__);
  j.expect(j.ieq, PTL_EVENT_REPLY, __LINE__);
  j.expect_quiet(j.ieq, __LINE__);  // no ACK event
  j.ct_stays(acks, ptl_ct_event_t{0, 0}, __LINE__);
  RULE_CALL(j, PtlGet(counted, 0, 8, j.peer, rule_pt, 0, 0, nullptr));
  RULE_EQ(j, j.ct_reach(replies, 1, __LINE__).success, 1);
  j.sync();
}

/// R-K5: the target cannot refuse an ACK: an entry with every event
/// disabled still acks, full and counting.
void rule_k5(Job& j) {
  if (j.target()) {
    static unsigned char m[16];
    int tm = 0;
    j.append(
        j.me_for(m, 16,
                 PTL_ME_OP_PUT | PTL_ME_EVENT_COMM_DISABLE | PTL_ME_EVENT_SUCCESS_DISABLE |
                     PTL_ME_EVENT_LINK_DISABLE | PTL_ME_EVENT_UNLINK_DISABLE | PTL_ME_ACK_DISABLE),
        PTL_PRIORITY_LIST, &tm);
    if (!j.sync() || !j.sync()) return;
    j.expect_quiet(j.teq, __LINE__);
    return;
  }
  unsigned char src[16] = {};
  const ptl_handle_ct_t ct = j.new_ct();
  const ptl_handle_md_t md = j.bind(src, sizeof src, PTL_MD_EVENT_CT_ACK, ct);
  if (!j.sync()) return;
  RULE_EQ(j, j.put_acked(md, 0, 16, 0, 0, __LINE__).mlength, 16);
  RULE_CALL(j, PtlPut(md, 0, 16, PTL_CT_ACK_REQ, j.peer, rule_pt, 0, 0, nullptr, 0));
  RULE_EQ(j, j.ct_reach(ct, 2, __LINE__).success, 2);
  j.sync();
}

}  // namespace

const Rule ack_rules[] = {
    {"R-K1", rule_k1}, {"R-K2", rule_k2}, {"R-K3", rule_k3},
    {"R-K4", rule_k4}, {"R-K5", rule_k5}, {nullptr, nullptr},
};

}  // namespace pier::portals::rules
