// PORTALS4.md §6.11 triggered operations (R-T*, and R-C7) across two
// processes. Rank 1 holds the trigger counters and its triggered
// operations go to rank 0; mostly its trigger counts the puts that rank 0
// makes to it ("prompts"), so a remote arrival releases the operation.
// Rank 0 watches its inbox for what the released operations bring.
#include <cstring>
#include <initializer_list>

#include "rules_job.hpp"

namespace pier::portals::rules {
namespace {

constexpr ptl_match_bits_t prompt_bits = 1, inbox_bits = 2, shelf_bits = 3, sink_bits = 4;

/// Rank 0's side: an inbox for triggered puts (MANAGE_LOCAL, counted),
/// a shelf for triggered gets, a sink that posts nothing, and an MD to
/// prompt rank 1 with.
struct Inbox {
  Job& j;
  unsigned char box[64] = {};
  unsigned char shelf[8] = {'s', 'h', 'e', 'l', 'v', 'e', 'd', '!'};
  unsigned char sink[8] = {};
  unsigned char prompt[8] = {};
  int box_tag = 0, shelf_tag = 0;
  ptl_handle_ct_t count = PTL_INVALID_HANDLE;
  ptl_handle_md_t md = PTL_INVALID_HANDLE;

  explicit Inbox(Job& job) : j(job) {
    count = j.new_ct();
    j.add(j.me_for(box, sizeof box, PTL_ME_OP_PUT | PTL_ME_MANAGE_LOCAL | PTL_ME_EVENT_CT_COMM,
                   inbox_bits, 0, count),
          PTL_PRIORITY_LIST, &box_tag);
    j.add(j.me_for(shelf, sizeof shelf, PTL_ME_OP_GET, shelf_bits), PTL_PRIORITY_LIST, &shelf_tag);
    j.append(
        j.me_for(sink, sizeof sink,
                 PTL_ME_OP_PUT | PTL_ME_EVENT_COMM_DISABLE | PTL_ME_EVENT_LINK_DISABLE, sink_bits),
        PTL_PRIORITY_LIST, nullptr);
    md = j.bind(prompt, sizeof prompt);
  }
  void prompt_peer(int line) {
    j.check_eq(line, "prompt ACK", j.put_acked(md, 0, 8, prompt_bits, 0, line).ni_fail_type,
               PTL_NI_OK);
  }
  /// Nothing has arrived in the inbox (within quiet_ms).
  void nothing_came(int line) {
    j.ct_stays(count, ptl_ct_event_t{0, 0}, line);
    j.expect_quiet(j.teq, line);
  }
  /// The next inbox PUT carries `hdr` and 8 bytes of `fill`.
  void expect_put(ptl_hdr_data_t hdr, unsigned char fill, int line) {
    const ptl_event_t ev = j.expect(j.teq, PTL_EVENT_PUT, line);
    j.check_eq(line, "inbox PUT user_ptr", ev.user_ptr, &box_tag);
    j.check_eq(line, "inbox PUT hdr_data", ev.hdr_data, hdr);
    const unsigned char* data = static_cast<const unsigned char*>(ev.start);
    if (data != nullptr) j.check_eq(line, "inbox PUT data", data[0], fill);
  }
};

/// Rank 1's side: a trigger counter counting rank 0's prompts, and an MD
/// holding what the triggered puts send.
struct Trigger {
  Job& j;
  unsigned char landing[8] = {};
  unsigned char payload[8] = {};
  int tag = 0;
  ptl_handle_ct_t prompts = PTL_INVALID_HANDLE;
  ptl_handle_md_t md = PTL_INVALID_HANDLE;

  explicit Trigger(Job& job) : j(job) {
    prompts = j.new_ct();
    j.add(j.me_for(landing, sizeof landing,
                   PTL_ME_OP_PUT | PTL_ME_EVENT_CT_COMM | PTL_ME_EVENT_COMM_DISABLE, prompt_bits, 0,
                   prompts),
          PTL_PRIORITY_LIST, &tag);
    md = j.bind(payload, sizeof payload);
  }
  void fill(unsigned char c) { std::memset(payload, c, sizeof payload); }
  /// A put of the payload to rank 0's inbox once `ct` reaches `threshold`.
  void put_at(ptl_handle_ct_t ct, ptl_size_t threshold, ptl_hdr_data_t hdr, void* user = nullptr,
              ptl_ack_req_t ack = PTL_NO_ACK_REQ) {
    const int rc =
        PtlTriggeredPut(md, 0, 8, ack, j.peer, rule_pt, inbox_bits, 0, user, hdr, ct, threshold);
    j.check_eq(__LINE__, "PtlTriggeredPut", rc, PTL_OK);
  }
};

/// R-T1: released when the counter's success + failure reaches the
/// threshold: by rank 0's second prompt (a put and a get), and by one
/// acked success plus one failure on an MD counter.
void rule_t1(Job& j) {
  if (j.target()) {
    Inbox in(j);
    if (!j.sync()) return;
    in.prompt_peer(__LINE__);
    in.nothing_came(__LINE__);
    in.prompt_peer(__LINE__);
    int puts = 0, gets = 0;
    for (int i = 0; i < 2; ++i) {
      const ptl_event_t ev = j.next(j.teq, __LINE__);
      puts += ev.type == PTL_EVENT_PUT && ev.hdr_data == 0x71 && in.box[0] == 'T';
      gets += ev.type == PTL_EVENT_GET && ev.user_ptr == &in.shelf_tag;
    }
    RULE_EQ(j, puts, 1);
    RULE_EQ(j, gets, 1);
    if (!j.sync()) return;
    in.expect_put(0x72, 'U', __LINE__);
    j.sync();
    return;
  }
  Trigger t(j);
  t.fill('T');
  unsigned char back[8] = {};
  const ptl_handle_md_t gmd = j.bind(back, sizeof back);
  t.put_at(t.prompts, 2, 0x71);
  RULE_CALL(j, PtlTriggeredGet(gmd, 0, 8, j.peer, rule_pt, shelf_bits, 0, nullptr, t.prompts, 2));
  if (!j.sync()) return;
  int sends = 0, replies = 0;
  for (int i = 0; i < 2; ++i) {
    const ptl_event_t ev = j.next(j.ieq, __LINE__);
    sends += ev.type == PTL_EVENT_SEND;
    replies += ev.type == PTL_EVENT_REPLY && ev.ni_fail_type == PTL_NI_OK;
  }
  RULE_EQ(j, sends, 1);
  RULE_EQ(j, replies, 1);
  RULE_BYTES(j, back, "shelved!", 8);
  // A success and a failure (an unallocated index) make 2.
  const ptl_handle_ct_t acks = j.new_ct();
  unsigned char src[8] = {};
  const ptl_handle_md_t counted = j.bind_to(src, 8, PTL_MD_EVENT_CT_ACK, PTL_EQ_NONE, acks);
  t.fill('U');
  t.put_at(acks, 2, 0x72);
  RULE_CALL(j, PtlPut(counted, 0, 8, PTL_CT_ACK_REQ, j.peer, rule_pt, sink_bits, 0, nullptr, 0));
  RULE_CALL(j, PtlPut(counted, 0, 8, PTL_CT_ACK_REQ, j.peer, unallocated_pt, 0, 0, nullptr, 0));
  RULE_EQ(j, j.expect(j.ieq, PTL_EVENT_SEND, __LINE__).ni_fail_type, PTL_NI_OK);
  const ptl_ct_event_t v = j.ct_get(acks);
  RULE_EQ(j, v.success, 1);
  RULE_EQ(j, v.failure, 1);
  if (!j.sync()) return;
  j.sync();
}

/// R-T2: a threshold already reached (or 0) releases the operation at
/// once: rank 0 gets both puts without prompting.
void rule_t2(Job& j) {
  if (j.target()) {
    Inbox in(j);
    if (!j.sync()) return;
    in.expect_put(1, 'R', __LINE__);
    in.expect_put(2, 'R', __LINE__);
    j.sync();
    return;
  }
  Trigger t(j);
  t.fill('R');
  if (!j.sync()) return;
  RULE_CALL(j, PtlCTInc(t.prompts, ptl_ct_event_t{1, 0}));
  t.put_at(t.prompts, 1, 1);
  t.put_at(t.prompts, 0, 2);
  for (int i = 0; i < 2; ++i) j.expect(j.ieq, PTL_EVENT_SEND, __LINE__);
  j.sync();
}

/// R-T3: the operation sends the buffer as it is at release, not at the
/// call.
void rule_t3(Job& j) {
  if (j.target()) {
    Inbox in(j);
    if (!j.sync()) return;
    in.prompt_peer(__LINE__);
    in.expect_put(3, 'b', __LINE__);
    j.sync();
    return;
  }
  Trigger t(j);
  t.fill('a');
  t.put_at(t.prompts, 1, 3);
  t.fill('b');
  if (!j.sync()) return;
  j.expect(j.ieq, PTL_EVENT_SEND, __LINE__);
  j.sync();
}

/// R-T4: operations released by one counter event go in issue order: their
/// SENDs, and the offsets they take in rank 0's locally managed inbox.
void rule_t4(Job& j) {
  if (j.target()) {
    Inbox in(j);
    if (!j.sync()) return;
    in.prompt_peer(__LINE__);
    for (ptl_hdr_data_t hdr : {1u, 2u, 3u}) {
      const ptl_event_t ev = j.expect(j.teq, PTL_EVENT_PUT, __LINE__);
      RULE_EQ(j, ev.hdr_data, hdr);
      RULE_EQ(j, ev.start, in.box + 8 * (hdr - 1));
    }
    j.sync();
    return;
  }
  Trigger t(j);
  int users[3] = {};
  for (int i = 0; i < 3; ++i) t.put_at(t.prompts, 1, ptl_hdr_data_t(i + 1), &users[i]);
  if (!j.sync()) return;
  for (int i = 0; i < 3; ++i)
    RULE_EQ(j, j.expect(j.ieq, PTL_EVENT_SEND, __LINE__).user_ptr, &users[i]);
  j.sync();
}

/// R-T5: chaining: a PtlTriggeredCTInc on the prompt counter at 2 raises
/// a second counter, on which the put waits.
void rule_t5(Job& j) {
  if (j.target()) {
    Inbox in(j);
    if (!j.sync()) return;
    in.prompt_peer(__LINE__);
    in.nothing_came(__LINE__);
    in.prompt_peer(__LINE__);
    in.expect_put(5, 'C', __LINE__);
    j.sync();
    return;
  }
  Trigger t(j);
  t.fill('C');
  const ptl_handle_ct_t chained = j.new_ct();
  RULE_CALL(j, PtlTriggeredCTInc(chained, ptl_ct_event_t{1, 0}, t.prompts, 2));
  t.put_at(chained, 1, 5);
  if (!j.sync()) return;
  RULE_EQ(j, j.ct_reach(chained, 1, __LINE__).success, 1);
  j.sync();
}

/// R-T6: PtlCTCancelTriggered destroys the pending put (nothing reaches
/// rank 0, no event) and leaves the counter to count; a later triggered
/// put on it works.
void rule_t6(Job& j) {
  if (j.target()) {
    Inbox in(j);
    if (!j.sync()) return;
    in.prompt_peer(__LINE__);
    in.nothing_came(__LINE__);
    if (!j.sync()) return;
    in.prompt_peer(__LINE__);
    in.expect_put(6, 'N', __LINE__);
    j.sync();
    return;
  }
  Trigger t(j);
  t.fill('X');
  t.put_at(t.prompts, 1, 66);
  RULE_CALL(j, PtlCTCancelTriggered(t.prompts));
  if (!j.sync()) return;
  const ptl_ct_event_t v = j.ct_reach(t.prompts, 1, __LINE__);
  RULE_EQ(j, v.success, 1);
  j.expect_quiet(j.ieq, __LINE__);
  t.fill('N');
  t.put_at(t.prompts, 2, 6);
  if (!j.sync()) return;
  j.expect(j.ieq, PTL_EVENT_SEND, __LINE__);
  j.sync();
}

/// R-T7: PtlCTFree destroys the counter's pending operations: a counter
/// allocated in its place and raised does not release them.
void rule_t7(Job& j) {
  if (j.target()) {
    Inbox in(j);
    if (!j.sync()) return;
    in.nothing_came(__LINE__);
    j.sync();
    return;
  }
  Trigger t(j);
  const ptl_handle_ct_t doomed = j.new_ct(), other = j.new_ct();
  t.put_at(doomed, 1, 77);
  RULE_CALL(j, PtlTriggeredCTInc(other, ptl_ct_event_t{1, 0}, doomed, 1));
  RULE_CALL(j, PtlCTFree(doomed));
  const ptl_handle_ct_t again = j.new_ct();
  RULE_CALL(j, PtlCTInc(again, ptl_ct_event_t{5, 0}));
  if (!j.sync()) return;
  j.ct_stays(other, ptl_ct_event_t{0, 0}, __LINE__);
  j.expect_quiet(j.ieq, __LINE__);
  j.sync();
}

/// R-C7: PtlCTInc and PtlCTSet re-evaluate the pending operations at once:
/// an increment short of the threshold releases nothing, a set to it does.
void rule_c7(Job& j) {
  if (j.target()) {
    Inbox in(j);
    if (!j.sync()) return;
    in.nothing_came(__LINE__);
    if (!j.sync()) return;
    in.expect_put(7, 'S', __LINE__);
    j.sync();
    return;
  }
  Trigger t(j);
  t.fill('S');
  const ptl_handle_ct_t ct = j.new_ct();
  t.put_at(ct, 2, 7);
  RULE_CALL(j, PtlCTInc(ct, ptl_ct_event_t{1, 0}));
  j.expect_quiet(j.ieq, __LINE__);
  // Only once rank 0 has seen nothing come.
  if (!j.sync() || !j.sync()) return;
  RULE_CALL(j, PtlCTSet(ct, ptl_ct_event_t{2, 0}));
  j.expect(j.ieq, PTL_EVENT_SEND, __LINE__);
  j.sync();
}

}  // namespace

const Rule triggered_rules[] = {
    {"R-T1", rule_t1}, {"R-T2", rule_t2}, {"R-T3", rule_t3}, {"R-T4", rule_t4},  {"R-T5", rule_t5},
    {"R-T6", rule_t6}, {"R-T7", rule_t7}, {"R-C7", rule_c7}, {nullptr, nullptr},
};

}  // namespace pier::portals::rules
