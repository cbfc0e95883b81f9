// PORTALS4.md §6.2 addressing (R-P*) and §6.3 portal table and flow
// control (R-F*) across two processes: rank 0 is the target, rank 1 the
// initiator.
#include <cstring>
#include <initializer_list>

#include "rules_job.hpp"

namespace pier::portals::rules {
namespace {

constexpr ptl_pt_index_t flow_pt = 5;  ///< a flow-controlled index

/// R-P1/R-M2 on a physical NI: match_id names nid and pid, and each
/// wildcard covers its own field only.
void physical_match_id(Job& j) {
  if (j.logical) return j.fail(__LINE__, "this rule needs a physical NI");
  unsigned char src[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  if (j.target()) {
    static unsigned char buf[6][8];
    int tags[6] = {};
    const ptl_nid_t nid = j.my_phys.phys.nid;
    ptl_nid_t other_nid = nid + 1;
    if (other_nid == PTL_NID_ANY) other_nid += 1;
    const ptl_pid_t mine = j.my_phys.phys.pid, theirs = j.peer_phys.phys.pid;
    auto entry = [&](ptl_nid_t n, ptl_pid_t p, ptl_match_bits_t bits, int k) {
      ptl_me_t m = j.me_for(buf[k], 8, PTL_ME_OP_PUT, bits);
      m.match_id.phys.nid = n;
      m.match_id.phys.pid = p;
      j.add(m, PTL_PRIORITY_LIST, &tags[k]);
    };
    entry(nid, mine, 1, 0);               // another process: never matches
    entry(PTL_NID_ANY, theirs, 1, 1);     // any nid, the initiator's pid
    entry(other_nid, PTL_PID_ANY, 2, 2);  // another node: never matches
    entry(nid, PTL_PID_ANY, 2, 3);        // this node, any pid
    entry(nid, theirs, 3, 4);             // exactly the initiator
    entry(nid, mine, 4, 5);               // only ourselves: the put is dropped
    if (!j.sync()) return;
    for (int k : {1, 3, 4}) {
      const ptl_event_t ev = j.expect(j.teq, PTL_EVENT_PUT, __LINE__);
      RULE_EQ(j, ev.user_ptr, &tags[k]);
      j.check_initiator(ev, __LINE__);
      RULE_BYTES(j, buf[k], src, 8);
    }
    j.sync();
    j.expect_quiet(j.teq, __LINE__);
    for (int k : {0, 2, 5}) RULE_EQ(j, buf[k][0], 0);
    return;
  }
  const ptl_handle_md_t md = j.bind(src, sizeof src);
  if (!j.sync()) return;
  for (ptl_match_bits_t bits : {1, 2, 3})
    RULE_EQ(j, j.put_acked(md, 0, 8, bits, 0, __LINE__).ni_fail_type, PTL_NI_OK);
  RULE_EQ(j, j.put_acked(md, 0, 8, 4, 0, __LINE__).ni_fail_type, PTL_NI_DROPPED);
  j.sync();
}

/// R-P2/R-M2 on a logical NI: match_id names a rank or PTL_RANK_ANY, and
/// target events carry the initiator's rank.
void logical_match_id(Job& j) {
  if (!j.logical) return j.fail(__LINE__, "this rule needs a logical NI");
  unsigned char src[8] = {9, 8, 7, 6, 5, 4, 3, 2};
  if (j.target()) {
    static unsigned char buf[4][8];
    int tags[4] = {};
    auto entry = [&](ptl_rank_t rank, ptl_match_bits_t bits, int k) {
      ptl_me_t m = j.me_for(buf[k], 8, PTL_ME_OP_PUT, bits);
      m.match_id.rank = rank;
      j.add(m, PTL_PRIORITY_LIST, &tags[k]);
    };
    entry(j.me.rank, 1, 0);    // ourselves: never matches the peer
    entry(j.peer.rank, 1, 1);  // the initiator
    entry(PTL_RANK_ANY, 2, 2);
    entry(j.me.rank, 3, 3);  // only ourselves: the put is dropped
    if (!j.sync()) return;
    for (int k : {1, 2}) {
      const ptl_event_t ev = j.expect(j.teq, PTL_EVENT_PUT, __LINE__);
      RULE_EQ(j, ev.user_ptr, &tags[k]);
      RULE_EQ(j, ev.initiator.rank, 1);
      RULE_BYTES(j, buf[k], src, 8);
    }
    j.sync();
    j.expect_quiet(j.teq, __LINE__);
    RULE_EQ(j, buf[0][0], 0);
    RULE_EQ(j, buf[3][0], 0);
    return;
  }
  const ptl_handle_md_t md = j.bind(src, sizeof src);
  if (!j.sync()) return;
  for (ptl_match_bits_t bits : {1, 2})
    RULE_EQ(j, j.put_acked(md, 0, 8, bits, 0, __LINE__).ni_fail_type, PTL_NI_OK);
  RULE_EQ(j, j.put_acked(md, 0, 8, 3, 0, __LINE__).ni_fail_type, PTL_NI_DROPPED);
  j.sync();
}

void rule_m2(Job& j) {
  j.logical ? logical_match_id(j) : physical_match_id(j);
}

/// R-P4: each rank's logical id is the index of its physical id in the
/// map, and the map names the peer by the physical id the peer reports.
void rule_p4(Job& j) {
  if (!j.logical) return j.fail(__LINE__, "this rule needs a logical NI");
  ptl_process_t map[4] = {};
  ptl_size_t n = 0;
  RULE_CALL(j, PtlGetMap(j.ni, 4, map, &n));
  RULE_EQ(j, n, 2);
  RULE_EQ(j, map[j.me.rank].phys.nid, j.my_phys.phys.nid);
  RULE_EQ(j, map[j.me.rank].phys.pid, j.my_phys.phys.pid);
  if (j.target()) {
    ptl_process_t reported{};
    int tag = 0;
    j.add(j.me_for(&reported, sizeof reported, PTL_ME_OP_PUT), PTL_PRIORITY_LIST, &tag);
    if (!j.sync()) return;
    const ptl_event_t ev = j.expect(j.teq, PTL_EVENT_PUT, __LINE__);
    RULE_EQ(j, ev.initiator.rank, j.peer.rank);
    RULE_EQ(j, map[j.peer.rank].phys.nid, reported.phys.nid);
    RULE_EQ(j, map[j.peer.rank].phys.pid, reported.phys.pid);
    j.sync();
    return;
  }
  ptl_process_t mine = j.my_phys;
  const ptl_handle_md_t md = j.bind(&mine, sizeof mine);
  if (!j.sync()) return;
  RULE_EQ(j, j.put_acked(md, 0, sizeof mine, 0, 0, __LINE__).ni_fail_type, PTL_NI_OK);
  j.sync();
}

/// R-F1: an unallocated index drops puts and gets: the initiator sees
/// PTL_NI_DROPPED, the target counts two drops and posts no event.
void rule_f1(Job& j) {
  if (j.target()) {
    const ptl_sr_value_t drops = j.status(PTL_SR_DROP_COUNT);
    if (!j.sync() || !j.sync()) return;
    RULE_EQ(j, j.status(PTL_SR_DROP_COUNT) - drops, 2);
    j.expect_quiet(j.teq, __LINE__);
    return;
  }
  unsigned char buf[8] = {};
  const ptl_handle_md_t md = j.bind(buf, sizeof buf);
  if (!j.sync()) return;
  RULE_EQ(j, j.put_acked(md, 0, 8, 0, 0, __LINE__, 0, unallocated_pt).ni_fail_type, PTL_NI_DROPPED);
  RULE_EQ(j, j.get_reply(md, 0, 8, 0, 0, __LINE__, unallocated_pt).ni_fail_type, PTL_NI_DROPPED);
  j.expect_quiet(j.ieq, __LINE__);
  j.sync();
}

/// R-F2: a disabled index drops puts and gets (DROP_COUNT per message, no
/// target event); the initiator's ACK, REPLY and ACK counter say
/// PTL_NI_PT_DISABLED; once enabled it takes messages again.
void rule_f2(Job& j) {
  unsigned char buf[8] = {};
  if (j.target()) {
    int tag = 0;
    j.add(j.me_for(buf, sizeof buf, PTL_ME_OP_PUT | PTL_ME_OP_GET), PTL_PRIORITY_LIST, &tag);
    RULE_CALL(j, PtlPTDisable(j.ni, rule_pt));
    const ptl_sr_value_t drops = j.status(PTL_SR_DROP_COUNT);
    if (!j.sync() || !j.sync()) return;
    RULE_EQ(j, j.status(PTL_SR_DROP_COUNT) - drops, 3);
    j.expect_quiet(j.teq, __LINE__);
    RULE_CALL(j, PtlPTEnable(j.ni, rule_pt));
    if (!j.sync()) return;
    const ptl_event_t ev = j.expect(j.teq, PTL_EVENT_PUT, __LINE__);
    RULE_EQ(j, ev.user_ptr, &tag);
    j.sync();
    return;
  }
  const ptl_handle_ct_t ct = j.new_ct();
  const ptl_handle_md_t md = j.bind(buf, sizeof buf);
  const ptl_handle_md_t counted = j.bind_to(buf, sizeof buf, PTL_MD_EVENT_CT_ACK, PTL_EQ_NONE, ct);
  if (!j.sync()) return;
  RULE_EQ(j, j.put_acked(md, 0, 8, 0, 0, __LINE__).ni_fail_type, PTL_NI_PT_DISABLED);
  RULE_EQ(j, j.get_reply(md, 0, 8, 0, 0, __LINE__).ni_fail_type, PTL_NI_PT_DISABLED);
  RULE_CALL(j, PtlPut(counted, 0, 8, PTL_CT_ACK_REQ, j.peer, rule_pt, 0, 0, nullptr, 0));
  const ptl_ct_event_t v = j.ct_reach(ct, 1, __LINE__);
  RULE_EQ(j, v.success, 0);
  RULE_EQ(j, v.failure, 1);
  if (!j.sync() || !j.sync()) return;
  RULE_EQ(j, j.put_acked(md, 0, 8, 0, 0, __LINE__).ni_fail_type, PTL_NI_OK);
  j.sync();
}

/// R-F3: on a flow-controlled index, a message that matches nothing
/// disables it: that message and the next fail with PTL_NI_PT_DISABLED,
/// and a single PT_DISABLED event names the index.
void rule_f3(Job& j) {
  unsigned char buf[8] = {};
  if (j.target()) {
    ptl_pt_index_t pt;
    RULE_CALL(j, PtlPTAlloc(j.ni, PTL_PT_FLOWCTRL, j.teq, flow_pt, &pt));
    int tag = 0;
    j.add(j.me_for(buf, sizeof buf, PTL_ME_OP_PUT, 1), PTL_PRIORITY_LIST, &tag, flow_pt);
    if (!j.sync() || !j.sync()) return;
    const ptl_event_t ev = j.expect(j.teq, PTL_EVENT_PT_DISABLED, __LINE__);
    RULE_EQ(j, ev.pt_index, flow_pt);
    RULE_EQ(j, ev.ni_fail_type, PTL_NI_PT_DISABLED);
    j.expect_quiet(j.teq, __LINE__);  // one event for the disable
    RULE_EQ(j, buf[0], 0);
    return;
  }
  unsigned char src[8] = {5, 5, 5, 5, 5, 5, 5, 5};
  const ptl_handle_md_t md = j.bind(src, sizeof src);
  if (!j.sync()) return;
  RULE_EQ(j, j.put_acked(md, 0, 8, 2, 0, __LINE__, 0, flow_pt).ni_fail_type, PTL_NI_PT_DISABLED);
  RULE_EQ(j, j.put_acked(md, 0, 8, 2, 0, __LINE__, 0, flow_pt).ni_fail_type, PTL_NI_PT_DISABLED);
  RULE_EQ(j, j.put_acked(md, 0, 8, 1, 0, __LINE__, 0, flow_pt).ni_fail_type, PTL_NI_PT_DISABLED);
  j.sync();
}

void one_unexpected_header(ptl_ni_limits_t& l) {
  l.max_unexpected_headers = 1;
}

/// R-F3 the other way: a message that would need an unexpected header
/// beyond max_unexpected_headers (rank 0 has one) disables the index too.
void rule_f3_headers(Job& j) {
  unsigned char src[8] = {6, 6, 6, 6, 6, 6, 6, 6};
  if (j.target()) {
    static unsigned char over[64];
    ptl_pt_index_t pt;
    RULE_CALL(j, PtlPTAlloc(j.ni, PTL_PT_FLOWCTRL, j.teq, flow_pt, &pt));
    int tag = 0;
    j.add(j.me_for(over, sizeof over, PTL_ME_OP_PUT | PTL_ME_MANAGE_LOCAL, 0, ~ptl_match_bits_t{0}),
          PTL_OVERFLOW_LIST, &tag, flow_pt);
    if (!j.sync() || !j.sync()) return;
    RULE_EQ(j, j.expect(j.teq, PTL_EVENT_PUT, __LINE__).user_ptr, &tag);
    const ptl_event_t ev = j.expect(j.teq, PTL_EVENT_PT_DISABLED, __LINE__);
    RULE_EQ(j, ev.pt_index, flow_pt);
    RULE_EQ(j, ev.ni_fail_type, PTL_NI_PT_DISABLED);
    j.expect_quiet(j.teq, __LINE__);
    RULE_BYTES(j, over, src, 8);
    RULE_EQ(j, over[8], 0);
    return;
  }
  const ptl_handle_md_t md = j.bind(src, sizeof src);
  if (!j.sync()) return;
  RULE_EQ(j, j.put_acked(md, 0, 8, 1, 0, __LINE__, 0, flow_pt).ni_fail_type, PTL_NI_OK);
  RULE_EQ(j, j.put_acked(md, 0, 8, 2, 0, __LINE__, 0, flow_pt).ni_fail_type, PTL_NI_PT_DISABLED);
  j.sync();
}

/// R-F4: a disabled flow-controlled index drops every message, matching
/// or not, until PtlPTEnable; then matching resumes and the unexpected
/// header that came before the disable is still there.
void rule_f4(Job& j) {
  unsigned char buf[16] = {}, over[16] = {};
  if (j.target()) {
    ptl_pt_index_t pt;
    RULE_CALL(j, PtlPTAlloc(j.ni, PTL_PT_FLOWCTRL, j.teq, flow_pt, &pt));
    int tag = 0, otag = 0, late_tag = 0;
    j.add(j.me_for(buf, sizeof buf, PTL_ME_OP_PUT, 1), PTL_PRIORITY_LIST, &tag, flow_pt);
    j.add(j.me_for(over, sizeof over, PTL_ME_OP_PUT, 5), PTL_OVERFLOW_LIST, &otag, flow_pt);
    if (!j.sync() || !j.sync()) return;
    RULE_EQ(j, j.expect(j.teq, PTL_EVENT_PUT, __LINE__).user_ptr, &otag);
    RULE_EQ(j, j.expect(j.teq, PTL_EVENT_PT_DISABLED, __LINE__).pt_index, flow_pt);
    j.expect_quiet(j.teq, __LINE__);
    RULE_EQ(j, buf[0], 0);
    RULE_CALL(j, PtlPTEnable(j.ni, flow_pt));
    unsigned char late[16] = {};
    j.append(j.me_for(late, sizeof late, PTL_ME_OP_PUT | PTL_ME_USE_ONCE, 5), PTL_PRIORITY_LIST,
             &late_tag, flow_pt);
    const ptl_event_t ov = j.expect(j.teq, PTL_EVENT_PUT_OVERFLOW, __LINE__);
    RULE_EQ(j, ov.user_ptr, &late_tag);
    RULE_EQ(j, ov.hdr_data, 55);
    RULE_EQ(j, j.expect(j.teq, PTL_EVENT_AUTO_UNLINK, __LINE__).user_ptr, &late_tag);
    if (!j.sync()) return;
    RULE_EQ(j, j.expect(j.teq, PTL_EVENT_PUT, __LINE__).user_ptr, &tag);
    RULE_EQ(j, buf[0], 7);
    j.sync();
    return;
  }
  unsigned char src[8] = {7, 7, 7, 7, 7, 7, 7, 7};
  const ptl_handle_md_t md = j.bind(src, sizeof src);
  if (!j.sync()) return;
  RULE_EQ(j, j.put_acked(md, 0, 8, 5, 0, __LINE__, 55, flow_pt).ni_fail_type, PTL_NI_OK);
  RULE_EQ(j, j.put_acked(md, 0, 8, 9, 0, __LINE__, 0, flow_pt).ni_fail_type, PTL_NI_PT_DISABLED);
  RULE_EQ(j, j.put_acked(md, 0, 8, 1, 0, __LINE__, 0, flow_pt).ni_fail_type, PTL_NI_PT_DISABLED);
  if (!j.sync() || !j.sync()) return;
  RULE_EQ(j, j.put_acked(md, 0, 8, 1, 0, __LINE__, 0, flow_pt).ni_fail_type, PTL_NI_OK);
  j.sync();
}

/// R-F5: without PTL_PT_FLOWCTRL a message that matches nothing is only
/// dropped; the index stays enabled and posts no PT_DISABLED.
void rule_f5(Job& j) {
  unsigned char buf[8] = {};
  if (j.target()) {
    int tag = 0;
    j.add(j.me_for(buf, sizeof buf, PTL_ME_OP_PUT, 1), PTL_PRIORITY_LIST, &tag);
    if (!j.sync() || !j.sync()) return;
    RULE_EQ(j, j.expect(j.teq, PTL_EVENT_PUT, __LINE__).user_ptr, &tag);
    j.expect_quiet(j.teq, __LINE__);
    return;
  }
  const ptl_handle_md_t md = j.bind(buf, sizeof buf);
  if (!j.sync()) return;
  RULE_EQ(j, j.put_acked(md, 0, 8, 2, 0, __LINE__).ni_fail_type, PTL_NI_DROPPED);
  RULE_EQ(j, j.put_acked(md, 0, 8, 1, 0, __LINE__).ni_fail_type, PTL_NI_OK);
  j.sync();
}

/// R-F6: a flow-controlled index whose queue holds `count` unread events
/// is disabled; its PT_DISABLED still gets into the full queue.
void rule_f6(Job& j) {
  unsigned char buf[8] = {};
  if (j.target()) {
    ptl_handle_eq_t small;
    RULE_CALL(j, PtlEQAlloc(j.ni, 2, &small));
    ptl_pt_index_t pt;
    RULE_CALL(j, PtlPTAlloc(j.ni, PTL_PT_FLOWCTRL, small, flow_pt, &pt));
    int tag = 0;
    j.append(j.me_for(buf, sizeof buf, PTL_ME_OP_PUT | PTL_ME_EVENT_LINK_DISABLE),
             PTL_PRIORITY_LIST, &tag, flow_pt);
    if (!j.sync() || !j.sync()) return;
    RULE_EQ(j, j.expect(small, PTL_EVENT_PUT, __LINE__).user_ptr, &tag);
    RULE_EQ(j, j.expect(small, PTL_EVENT_PUT, __LINE__).user_ptr, &tag);
    RULE_EQ(j, j.expect(small, PTL_EVENT_PT_DISABLED, __LINE__).pt_index, flow_pt);
    j.expect_quiet(small, __LINE__);
    RULE_CALL(j, PtlPTEnable(j.ni, flow_pt));
    if (!j.sync()) return;
    RULE_EQ(j, j.expect(small, PTL_EVENT_PUT, __LINE__).user_ptr, &tag);
    j.sync();
    return;
  }
  const ptl_handle_md_t md = j.bind(buf, sizeof buf);
  if (!j.sync()) return;
  RULE_EQ(j, j.put_acked(md, 0, 8, 0, 0, __LINE__, 0, flow_pt).ni_fail_type, PTL_NI_OK);
  RULE_EQ(j, j.put_acked(md, 0, 8, 0, 0, __LINE__, 0, flow_pt).ni_fail_type, PTL_NI_OK);
  RULE_EQ(j, j.put_acked(md, 0, 8, 0, 0, __LINE__, 0, flow_pt).ni_fail_type, PTL_NI_PT_DISABLED);
  if (!j.sync() || !j.sync()) return;
  RULE_EQ(j, j.put_acked(md, 0, 8, 0, 0, __LINE__, 0, flow_pt).ni_fail_type, PTL_NI_OK);
  j.sync();
}

/// R-F7: PtlPTDisable posts no PT_DISABLED, and messages arriving at the
/// disabled index leave no trace on it: no event, no count.
void rule_f7(Job& j) {
  unsigned char buf[8] = {};
  if (j.target()) {
    const ptl_handle_ct_t ct = j.new_ct();
    int tag = 0;
    j.add(j.me_for(buf, sizeof buf, PTL_ME_OP_PUT | PTL_ME_EVENT_CT_COMM, 0, 0, ct),
          PTL_PRIORITY_LIST, &tag);
    RULE_CALL(j, PtlPTDisable(j.ni, rule_pt));
    j.expect_quiet(j.teq, __LINE__);
    if (!j.sync() || !j.sync()) return;
    j.expect_quiet(j.teq, __LINE__);
    j.ct_stays(ct, ptl_ct_event_t{0, 0}, __LINE__);
    RULE_EQ(j, buf[0], 0);
    return;
  }
  unsigned char src[8] = {3, 3, 3, 3, 3, 3, 3, 3};
  const ptl_handle_md_t md = j.bind(src, sizeof src);
  if (!j.sync()) return;
  for (int i = 0; i < 2; ++i)
    RULE_EQ(j, j.put_acked(md, 0, 8, 0, 0, __LINE__).ni_fail_type, PTL_NI_PT_DISABLED);
  j.sync();
}

}  // namespace

const Rule addressing_rules[] = {
    {"R-P1", physical_match_id}, {"R-P2", logical_match_id},
    {"R-M2", rule_m2},           {"R-P4", rule_p4},
    {"R-F1", rule_f1},           {"R-F2", rule_f2},
    {"R-F3", rule_f3},           {"R-F3-HEADERS", rule_f3_headers, true, one_unexpected_header},
    {"R-F4", rule_f4},           {"R-F5", rule_f5},
    {"R-F6", rule_f6},           {"R-F7", rule_f7},
    {nullptr, nullptr},
};

}  // namespace pier::portals::rules
