// PORTALS4.md §6.13 size limits and ordering (R-L*) and §6.14 status
// registers (R-S1) where a second process makes them observable: rank 0 is
// the target, rank 1 the initiator.
#include <cstdint>
#include <cstring>
#include <vector>

#include "rules_job.hpp"

namespace pier::portals::rules {
namespace {

/// R-L3: a volatile MD may be rewritten as soon as PtlPut returns (up to
/// max_volatile_size): rank 0 gets what the buffer held at the call.
void rule_l3(Job& j) {
  static unsigned char landed[1024];
  if (j.target()) {
    int tag = 0;
    j.add(j.me_for(landed, sizeof landed, PTL_ME_OP_PUT | PTL_ME_EVENT_COMM_DISABLE),
          PTL_PRIORITY_LIST, &tag);
    if (!j.sync() || !j.sync()) return;
    const std::vector<unsigned char> first(16, 'a'), second(512, 'c');
    RULE_BYTES(j, landed, first.data(), 16);
    RULE_BYTES(j, landed + 16, second.data(), 512);
    return;
  }
  std::vector<unsigned char> src(j.limits.max_volatile_size, 'a');
  RULE_EQ(j, j.limits.max_volatile_size, 512);
  const ptl_handle_md_t md = j.bind(src.data(), src.size(), PTL_MD_VOLATILE);
  if (!j.sync()) return;
  RULE_CALL(j, PtlPut(md, 0, 16, PTL_ACK_REQ, j.peer, rule_pt, 0, 0, nullptr, 0));
  std::memset(src.data(), 'b', src.size());  // allowed at once
  j.expect(j.ieq, PTL_EVENT_SEND, __LINE__);
  RULE_EQ(j, j.expect(j.ieq, PTL_EVENT_ACK, __LINE__).mlength, 16);
  std::memset(src.data(), 'c', src.size());
  RULE_CALL(j, PtlPut(md, 0, src.size(), PTL_ACK_REQ, j.peer, rule_pt, 0, 16, nullptr, 0));
  std::memset(src.data(), 'd', src.size());
  j.expect(j.ieq, PTL_EVENT_SEND, __LINE__);
  RULE_EQ(j, j.expect(j.ieq, PTL_EVENT_ACK, __LINE__).mlength, 512);
  j.sync();
}

/// R-L4: writes to the same address up to max_waw_ordered_size land in
/// issue order (the last put wins), and a get issued before a put to the
/// same 8 bytes (max_war_ordered_size) reads the old value.
void rule_l4(Job& j) {
  alignas(8) static unsigned char memory[16];
  if (j.target()) {
    int tag = 0;
    j.add(
        j.me_for(memory, sizeof memory, PTL_ME_OP_PUT | PTL_ME_OP_GET | PTL_ME_EVENT_COMM_DISABLE),
        PTL_PRIORITY_LIST, &tag);
    if (!j.sync() || !j.sync()) return;
    std::uint64_t last, war;
    std::memcpy(&last, memory, 8);
    std::memcpy(&war, memory + 8, 8);
    RULE_EQ(j, last, 64);
    RULE_EQ(j, war, 9);
    return;
  }
  constexpr int writes = 64;
  std::uint64_t values[writes];
  for (int i = 0; i < writes; ++i) values[i] = std::uint64_t(i + 1);
  const ptl_handle_ct_t acks = j.new_ct();
  const ptl_handle_md_t md =
      j.bind_to(values, sizeof values, PTL_MD_EVENT_CT_ACK, PTL_EQ_NONE, acks);
  if (!j.sync()) return;
  RULE_TRUE(j, j.limits.max_waw_ordered_size >= 8);
  // Back to back, no wait in between.
  for (int i = 0; i < writes; ++i)
    RULE_CALL(j, PtlPut(md, i * 8, 8, PTL_CT_ACK_REQ, j.peer, rule_pt, 0, 0, nullptr, 0));
  const ptl_ct_event_t v = j.ct_reach(acks, writes, __LINE__);
  RULE_EQ(j, v.failure, 0);
  std::uint64_t seen = 0, old_value = 7, new_value = 9, fetched = 0;
  const ptl_handle_md_t gmd = j.bind(&seen, 8);
  RULE_EQ(j, j.get_reply(gmd, 0, 8, 0, 0, __LINE__).ni_fail_type, PTL_NI_OK);
  RULE_EQ(j, seen, 64);
  // Write-after-read.
  const ptl_handle_md_t old_md = j.bind(&old_value, 8), new_md = j.bind(&new_value, 8);
  const ptl_handle_md_t fetch_md = j.bind(&fetched, 8);
  RULE_EQ(j, j.put_acked(old_md, 0, 8, 0, 8, __LINE__).ni_fail_type, PTL_NI_OK);
  RULE_CALL(j, PtlGet(fetch_md, 0, 8, j.peer, rule_pt, 0, 8, nullptr));
  RULE_CALL(j, PtlPut(new_md, 0, 8, PTL_ACK_REQ, j.peer, rule_pt, 0, 8, nullptr, 0));
  int replies = 0, acked = 0;
  for (int i = 0; i < 3; ++i) {
    const ptl_event_t ev = j.next(j.ieq, __LINE__);
    replies += ev.type == PTL_EVENT_REPLY;
    acked += ev.type == PTL_EVENT_ACK;
  }
  RULE_EQ(j, replies, 1);
  RULE_EQ(j, acked, 1);
  RULE_EQ(j, fetched, 7);
  j.sync();
}

void small_messages(ptl_ni_limits_t& l) {
  l.max_msg_size = 4096;
  l.max_atomic_size = 8;
  l.max_fetch_atomic_size = 8;
}

/// R-L5: the target clamps too: rank 0 takes at most its max_msg_size of a
/// longer put from rank 1, and one element of a longer atomic.
void rule_l5(Job& j) {
  static unsigned char memory[8192];
  alignas(8) static std::uint64_t counters[4];
  if (j.target()) {
    RULE_EQ(j, j.limits.max_msg_size, 4096);
    int tm = 0, tc = 0;
    j.add(j.me_for(memory, sizeof memory, PTL_ME_OP_PUT, 1), PTL_PRIORITY_LIST, &tm);
    j.add(j.me_for(counters, sizeof counters, PTL_ME_OP_PUT, 2), PTL_PRIORITY_LIST, &tc);
    if (!j.sync() || !j.sync()) return;
    ptl_event_t ev = j.expect(j.teq, PTL_EVENT_PUT, __LINE__);
    RULE_EQ(j, ev.rlength, 8192);
    RULE_EQ(j, ev.mlength, 4096);
    RULE_EQ(j, memory[4095], 1);
    RULE_EQ(j, memory[4096], 0);
    ev = j.expect(j.teq, PTL_EVENT_ATOMIC, __LINE__);
    RULE_EQ(j, ev.rlength, 32);
    RULE_EQ(j, ev.mlength, 8);
    RULE_EQ(j, counters[0], 3);
    RULE_EQ(j, counters[1], 0);
    return;
  }
  std::vector<unsigned char> big(8192, 1);
  alignas(8) std::uint64_t adds[4] = {3, 3, 3, 3};
  RULE_TRUE(j, j.limits.max_msg_size > 8192 && j.limits.max_atomic_size >= 32);
  const ptl_handle_md_t md = j.bind(big.data(), big.size()), amd = j.bind(adds, sizeof adds);
  if (!j.sync()) return;
  RULE_EQ(j, j.put_acked(md, 0, 8192, 1, 0, __LINE__).mlength, 4096);
  RULE_CALL(j, PtlAtomic(amd, 0, 32, PTL_ACK_REQ, j.peer, rule_pt, 2, 0, nullptr, 0, PTL_SUM,
                         PTL_UINT64_T));
  j.expect(j.ieq, PTL_EVENT_SEND, __LINE__);
  RULE_EQ(j, j.expect(j.ieq, PTL_EVENT_ACK, __LINE__).mlength, 8);
  j.sync();
}

/// R-S1: DROP_COUNT counts every dropped request from the peer (no match,
/// unallocated index, disabled index, put or get) but neither permission
/// nor operation violations, which have their own registers; a search
/// that finds nothing counts nowhere.
void rule_s1(Job& j) {
  constexpr ptl_pt_index_t disabled_pt = 5;
  if (j.target()) {
    static unsigned char a[8], b[8];
    int ta = 0, tb = 0;
    ptl_me_t wrong_uid = j.me_for(a, 8, PTL_ME_OP_PUT, 1);
    wrong_uid.uid = j.uid + 1;
    j.add(wrong_uid, PTL_PRIORITY_LIST, &ta);
    j.add(j.me_for(b, 8, PTL_ME_OP_GET, 2), PTL_PRIORITY_LIST, &tb);
    ptl_pt_index_t pt;
    RULE_CALL(j, PtlPTAlloc(j.ni, 0, j.teq, disabled_pt, &pt));
    RULE_CALL(j, PtlPTDisable(j.ni, disabled_pt));
    const ptl_sr_value_t drops = j.status(PTL_SR_DROP_COUNT);
    const ptl_sr_value_t perms = j.status(PTL_SR_PERMISSION_VIOLATIONS);
    const ptl_sr_value_t ops = j.status(PTL_SR_OPERATION_VIOLATIONS);
    if (!j.sync() || !j.sync()) return;
    ptl_me_t probe = j.me_for(nullptr, 0, PTL_ME_OP_PUT, 77);
    RULE_CALL(j, PtlMESearch(j.ni, rule_pt, &probe, PTL_SEARCH_ONLY, nullptr));
    RULE_EQ(j, j.expect(j.teq, PTL_EVENT_SEARCH, __LINE__).ni_fail_type, PTL_NI_NO_MATCH);
    RULE_EQ(j, j.status(PTL_SR_DROP_COUNT) - drops, 4);
    RULE_EQ(j, j.status(PTL_SR_PERMISSION_VIOLATIONS) - perms, 1);
    RULE_EQ(j, j.status(PTL_SR_OPERATION_VIOLATIONS) - ops, 1);
    return;
  }
  unsigned char src[8] = {};
  const ptl_handle_md_t md = j.bind(src, 8);
  if (!j.sync()) return;
  RULE_EQ(j, j.put_acked(md, 0, 8, 9, 0, __LINE__).ni_fail_type, PTL_NI_DROPPED);
  RULE_EQ(j, j.get_reply(md, 0, 8, 9, 0, __LINE__).ni_fail_type, PTL_NI_DROPPED);
  RULE_EQ(j, j.put_acked(md, 0, 8, 0, 0, __LINE__, 0, unallocated_pt).ni_fail_type, PTL_NI_DROPPED);
  RULE_EQ(j, j.put_acked(md, 0, 8, 0, 0, __LINE__, 0, disabled_pt).ni_fail_type,
          PTL_NI_PT_DISABLED);
  RULE_EQ(j, j.put_acked(md, 0, 8, 1, 0, __LINE__).ni_fail_type, PTL_NI_PERM_VIOLATION);
  RULE_EQ(j, j.put_acked(md, 0, 8, 2, 0, __LINE__).ni_fail_type, PTL_NI_OP_VIOLATION);
  j.sync();
}

}  // namespace

const Rule limit_rules[] = {
    {"R-L3", rule_l3}, {"R-L4", rule_l4},  {"R-L5", rule_l5, true, small_messages},
    {"R-S1", rule_s1}, {nullptr, nullptr},
};

}  // namespace pier::portals::rules
