// PORTALS4.md §6.6 unexpected messages (R-U*) across two processes: rank 1
// puts to rank 0's overflow entries, then rank 0 appends and searches.
#include <cstdint>
#include <cstring>
#include <initializer_list>

#include "rules_job.hpp"

namespace pier::portals::rules {
namespace {

constexpr ptl_match_bits_t all_bits = ~ptl_match_bits_t{0};

void fill(unsigned char* p, std::size_t n, unsigned seed) {
  for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<unsigned char>(seed + i * 3);
}

/// R-U1: a message matching an overflow entry lands there; the PUT event
/// says PTL_OVERFLOW_LIST with that entry's user_ptr, and so does the ACK.
/// With UNEXPECTED_HDR_DISABLE no header is kept for a later append.
void rule_u1(Job& j) {
  unsigned char src[16];
  fill(src, 16, 20);
  if (j.target()) {
    static unsigned char over[64], quiet[16], late[16];
    int to = 0, tq = 0, tl = 0;
    j.add(j.me_for(over, 64, PTL_ME_OP_PUT | PTL_ME_MANAGE_LOCAL, 0x42), PTL_OVERFLOW_LIST, &to);
    j.add(j.me_for(quiet, 16, PTL_ME_OP_PUT | PTL_ME_UNEXPECTED_HDR_DISABLE, 0x43),
          PTL_OVERFLOW_LIST, &tq);
    if (!j.sync() || !j.sync()) return;
    ptl_event_t ev = j.expect(j.teq, PTL_EVENT_PUT, __LINE__);
    RULE_EQ(j, ev.ptl_list, PTL_OVERFLOW_LIST);
    RULE_EQ(j, ev.user_ptr, &to);
    RULE_EQ(j, ev.start, over);
    RULE_EQ(j, ev.hdr_data, 0x5eed);
    j.check_initiator(ev, __LINE__);
    RULE_BYTES(j, over, src, 16);
    ev = j.expect(j.teq, PTL_EVENT_PUT, __LINE__);
    RULE_EQ(j, ev.user_ptr, &tq);
    RULE_EQ(j, ev.ptl_list, PTL_OVERFLOW_LIST);
    // No header of 0x43 was kept: the append just links.
    j.add(j.me_for(late, 16, PTL_ME_OP_PUT, 0x43), PTL_PRIORITY_LIST, &tl);
    j.expect_quiet(j.teq, __LINE__);
    return;
  }
  const ptl_handle_md_t md = j.bind(src, sizeof src);
  if (!j.sync()) return;
  RULE_EQ(j, j.put_acked(md, 0, 16, 0x42, 0, __LINE__, 0x5eed).ptl_list, PTL_OVERFLOW_LIST);
  RULE_EQ(j, j.put_acked(md, 0, 16, 0x43, 0, __LINE__).ptl_list, PTL_OVERFLOW_LIST);
  j.sync();
}

/// R-U2: a priority append takes the unexpected headers that match, in
/// arrival order, as *_OVERFLOW events with the new entry's user_ptr and
/// the original header; the data stays in the overflow buffer.
void rule_u2(Job& j) {
  unsigned char src[16];
  fill(src, 16, 30);
  if (j.target()) {
    alignas(8) static unsigned char over[64];
    int to = 0;
    fill(over + 40, 8, 77);  // what the get will read
    ptl_me_t o = j.me_for(over, 64, PTL_ME_OP_PUT | PTL_ME_OP_GET, 0, all_bits);
    j.add(o, PTL_OVERFLOW_LIST, &to);
    if (!j.sync() || !j.sync()) return;
    for (ptl_event_kind_t k : {PTL_EVENT_PUT, PTL_EVENT_PUT, PTL_EVENT_GET, PTL_EVENT_ATOMIC})
      RULE_EQ(j, j.expect(j.teq, k, __LINE__).ptl_list, PTL_OVERFLOW_LIST);
    struct Claim {
      ptl_match_bits_t bits;
      unsigned options;
      ptl_event_kind_t kind;
      ptl_size_t length;
      ptl_hdr_data_t hdr;
    } claims[] = {{0x42, PTL_ME_OP_PUT, PTL_EVENT_PUT_OVERFLOW, 16, 1},
                  {0x42, PTL_ME_OP_PUT, PTL_EVENT_PUT_OVERFLOW, 8, 2},
                  {0x99, PTL_ME_OP_GET, PTL_EVENT_GET_OVERFLOW, 8, 0},
                  {0x77, PTL_ME_OP_PUT, PTL_EVENT_ATOMIC_OVERFLOW, 8, 3}};
    static unsigned char late[16];
    for (const Claim& c : claims) {
      int tag = 0;
      j.append(j.me_for(late, 16, c.options | PTL_ME_USE_ONCE, c.bits), PTL_PRIORITY_LIST, &tag);
      const ptl_event_t ev = j.expect(j.teq, c.kind, __LINE__);
      RULE_EQ(j, ev.user_ptr, &tag);
      RULE_EQ(j, ev.match_bits, c.bits);
      RULE_EQ(j, ev.rlength, c.length);
      RULE_EQ(j, ev.mlength, c.length);
      RULE_EQ(j, ev.ptl_list, PTL_OVERFLOW_LIST);
      if (c.kind != PTL_EVENT_GET_OVERFLOW) RULE_EQ(j, ev.hdr_data, c.hdr);
      j.check_initiator(ev, __LINE__);
      if (c.hdr == 1) RULE_EQ(j, ev.start, over);
      if (c.hdr == 2) RULE_EQ(j, ev.start, over + 16);
      if (c.kind == PTL_EVENT_ATOMIC_OVERFLOW) {
        RULE_EQ(j, ev.atomic_operation, PTL_SUM);
        RULE_EQ(j, ev.atomic_type, PTL_UINT64_T);
      }
      RULE_EQ(j, j.expect(j.teq, PTL_EVENT_AUTO_UNLINK, __LINE__).user_ptr, &tag);
    }
    RULE_BYTES(j, over, src, 16);
    RULE_BYTES(j, over + 16, src, 8);
    const unsigned char zeros[16] = {};
    RULE_BYTES(j, late, zeros, 16);  // nothing was copied
    j.expect_quiet(j.teq, __LINE__);
    return;
  }
  unsigned char back[8] = {}, want[8];
  fill(want, 8, 77);
  std::uint64_t one = 1;
  const ptl_handle_md_t md = j.bind(src, sizeof src);
  const ptl_handle_md_t gmd = j.bind(back, sizeof back);
  const ptl_handle_md_t amd = j.bind(&one, sizeof one);
  if (!j.sync()) return;
  j.put_acked(md, 0, 16, 0x42, 0, __LINE__, 1);
  j.put_acked(md, 0, 8, 0x42, 16, __LINE__, 2);
  RULE_EQ(j, j.get_reply(gmd, 0, 8, 0x99, 40, __LINE__).ni_fail_type, PTL_NI_OK);
  RULE_BYTES(j, back, want, 8);
  RULE_CALL(j, PtlAtomic(amd, 0, 8, PTL_ACK_REQ, j.peer, rule_pt, 0x77, 48, nullptr, 3, PTL_SUM,
                         PTL_UINT64_T));
  j.expect(j.ieq, PTL_EVENT_SEND, __LINE__);
  RULE_EQ(j, j.expect(j.ieq, PTL_EVENT_ACK, __LINE__).ni_fail_type, PTL_NI_OK);
  j.sync();
}

/// Rank 1 puts `n` messages of `length` bytes with `bits` (hdr_data
/// 1..n) to the overflow entry rank 0 appended before the first sync.
void put_unexpected(Job& j, int n, ptl_size_t length, ptl_match_bits_t bits) {
  unsigned char src[16] = {};
  const ptl_handle_md_t md = j.bind(src, sizeof src);
  for (int i = 1; i <= n; ++i)
    RULE_EQ(j, j.put_acked(md, 0, length, bits, 0, __LINE__, ptl_hdr_data_t(i)).ptl_list,
            PTL_OVERFLOW_LIST);
}

/// Rank 0's overflow entry for any bits, and the PUT of each of `n`
/// unexpected messages once rank 1 has sent them.
bool overflow_then_puts(Job& j, int n, int* tag, unsigned extra = 0) {
  static unsigned char over[256];
  j.add(j.me_for(over, sizeof over, PTL_ME_OP_PUT | PTL_ME_MANAGE_LOCAL | extra, 0, all_bits),
        PTL_OVERFLOW_LIST, tag);
  if (!j.sync() || !j.sync()) return false;
  for (int i = 0; i < n; ++i) RULE_EQ(j, j.expect(j.teq, PTL_EVENT_PUT, __LINE__).user_ptr, tag);
  return true;
}

/// R-U3: a persistent append takes every matching header, then links; a
/// use-once one takes one header, unlinks and never links.
void rule_u3(Job& j) {
  if (!j.target()) {
    if (!j.sync()) return;
    put_unexpected(j, 3, 4, 7);
    put_unexpected(j, 2, 4, 8);
    j.sync();
    return;
  }
  int to = 0;
  if (!overflow_then_puts(j, 5, &to)) return;
  static unsigned char p[16], q[16];
  int tp = 0, tq = 0;
  j.append(j.me_for(p, 16, PTL_ME_OP_PUT, 7), PTL_PRIORITY_LIST, &tp);
  for (ptl_hdr_data_t h : {1, 2, 3}) {
    const ptl_event_t ev = j.expect(j.teq, PTL_EVENT_PUT_OVERFLOW, __LINE__);
    RULE_EQ(j, ev.user_ptr, &tp);
    RULE_EQ(j, ev.hdr_data, h);
  }
  RULE_EQ(j, j.expect(j.teq, PTL_EVENT_LINK, __LINE__).user_ptr, &tp);
  for (ptl_hdr_data_t h : {1, 2}) {
    j.append(j.me_for(q, 16, PTL_ME_OP_PUT | PTL_ME_USE_ONCE, 8), PTL_PRIORITY_LIST, &tq);
    RULE_EQ(j, j.expect(j.teq, PTL_EVENT_PUT_OVERFLOW, __LINE__).hdr_data, h);
    RULE_EQ(j, j.expect(j.teq, PTL_EVENT_AUTO_UNLINK, __LINE__).user_ptr, &tq);
  }
  j.expect_quiet(j.teq, __LINE__);
}

/// R-U4: an append to the overflow list and a search that matches
/// nothing leave the unexpected list as it was.
void rule_u4(Job& j) {
  if (!j.target()) {
    if (!j.sync()) return;
    put_unexpected(j, 1, 4, 5);
    j.sync();
    return;
  }
  int to = 0, t2 = 0, tp = 0;
  if (!overflow_then_puts(j, 1, &to)) return;
  static unsigned char o2[16], p[16];
  j.add(j.me_for(o2, 16, PTL_ME_OP_PUT, 5), PTL_OVERFLOW_LIST, &t2);  // LINK only
  ptl_me_t probe = j.me_for(nullptr, 0, PTL_ME_OP_PUT, 6);
  int ts = 0;
  RULE_CALL(j, PtlMESearch(j.ni, rule_pt, &probe, PTL_SEARCH_DELETE, &ts));
  const ptl_event_t s = j.expect(j.teq, PTL_EVENT_SEARCH, __LINE__);
  RULE_EQ(j, s.ni_fail_type, PTL_NI_NO_MATCH);
  j.append(j.me_for(p, 16, PTL_ME_OP_PUT | PTL_ME_USE_ONCE, 5), PTL_PRIORITY_LIST, &tp);
  RULE_EQ(j, j.expect(j.teq, PTL_EVENT_PUT_OVERFLOW, __LINE__).hdr_data, 1);
  RULE_EQ(j, j.expect(j.teq, PTL_EVENT_AUTO_UNLINK, __LINE__).user_ptr, &tp);
  j.expect_quiet(j.teq, __LINE__);
}

/// R-U5: every append yields overflow events or LINK or both: none found
/// (LINK), use-once found (overflow, AUTO_UNLINK), persistent found
/// (overflow, LINK), persistent found with LINK_DISABLE (overflow only).
void rule_u5(Job& j) {
  if (!j.target()) {
    if (!j.sync()) return;
    put_unexpected(j, 1, 4, 1);
    put_unexpected(j, 1, 4, 2);
    put_unexpected(j, 1, 4, 3);
    j.sync();
    return;
  }
  int to = 0;
  if (!overflow_then_puts(j, 3, &to)) return;
  static unsigned char buf[4][16];
  int tags[4] = {};
  j.add(j.me_for(buf[0], 16, PTL_ME_OP_PUT, 9), PTL_PRIORITY_LIST, &tags[0]);
  j.append(j.me_for(buf[1], 16, PTL_ME_OP_PUT | PTL_ME_USE_ONCE, 1), PTL_PRIORITY_LIST, &tags[1]);
  RULE_EQ(j, j.expect(j.teq, PTL_EVENT_PUT_OVERFLOW, __LINE__).user_ptr, &tags[1]);
  RULE_EQ(j, j.expect(j.teq, PTL_EVENT_AUTO_UNLINK, __LINE__).user_ptr, &tags[1]);
  j.append(j.me_for(buf[2], 16, PTL_ME_OP_PUT, 2), PTL_PRIORITY_LIST, &tags[2]);
  RULE_EQ(j, j.expect(j.teq, PTL_EVENT_PUT_OVERFLOW, __LINE__).user_ptr, &tags[2]);
  RULE_EQ(j, j.expect(j.teq, PTL_EVENT_LINK, __LINE__).user_ptr, &tags[2]);
  j.append(j.me_for(buf[3], 16, PTL_ME_OP_PUT | PTL_ME_EVENT_LINK_DISABLE, 3), PTL_PRIORITY_LIST,
           &tags[3]);
  RULE_EQ(j, j.expect(j.teq, PTL_EVENT_PUT_OVERFLOW, __LINE__).user_ptr, &tags[3]);
  j.expect_quiet(j.teq, __LINE__);
}

/// R-U6: LOCAL_INC_UH_RLENGTH advances the offset by each header's
/// rlength; below min_free the entry is not linked and unlinks.
void rule_u6(Job& j) {
  if (!j.target()) {
    if (!j.sync()) return;
    put_unexpected(j, 2, 10, 3);
    j.sync();
    return;
  }
  int to = 0, tag = 0;
  if (!overflow_then_puts(j, 2, &to)) return;
  static unsigned char late[32];
  ptl_me_t m =
      j.me_for(late, 32, PTL_ME_OP_PUT | PTL_ME_MANAGE_LOCAL | PTL_ME_LOCAL_INC_UH_RLENGTH, 3);
  m.min_free = 15;  // 32 - 10 = 22 stays; 32 - 20 = 12 < 15 unlinks
  j.append(m, PTL_PRIORITY_LIST, &tag);
  RULE_EQ(j, j.expect(j.teq, PTL_EVENT_PUT_OVERFLOW, __LINE__).hdr_data, 1);
  RULE_EQ(j, j.expect(j.teq, PTL_EVENT_PUT_OVERFLOW, __LINE__).hdr_data, 2);
  RULE_EQ(j, j.expect(j.teq, PTL_EVENT_AUTO_UNLINK, __LINE__).user_ptr, &tag);
  j.expect_quiet(j.teq, __LINE__);
}

/// R-U7: a use-once overflow entry says AUTO_UNLINK when it unlinks and
/// AUTO_FREE once its last header is taken; UNLINK_DISABLE hides both.
void rule_u7(Job& j) {
  if (!j.target()) {
    if (!j.sync()) return;
    put_unexpected(j, 1, 8, 1);
    put_unexpected(j, 1, 8, 2);
    j.sync();
    return;
  }
  static unsigned char o1[8], o2[8], p[8];
  int t1 = 0, t2 = 0, tp = 0;
  j.add(j.me_for(o1, 8, PTL_ME_OP_PUT | PTL_ME_USE_ONCE, 1), PTL_OVERFLOW_LIST, &t1);
  j.add(j.me_for(o2, 8, PTL_ME_OP_PUT | PTL_ME_USE_ONCE | PTL_ME_EVENT_UNLINK_DISABLE, 2),
        PTL_OVERFLOW_LIST, &t2);
  if (!j.sync() || !j.sync()) return;
  RULE_EQ(j, j.expect(j.teq, PTL_EVENT_PUT, __LINE__).user_ptr, &t1);
  RULE_EQ(j, j.expect(j.teq, PTL_EVENT_AUTO_UNLINK, __LINE__).user_ptr, &t1);
  RULE_EQ(j, j.expect(j.teq, PTL_EVENT_PUT, __LINE__).user_ptr, &t2);
  j.expect_quiet(j.teq, __LINE__);  // the headers still sit in o1 and o2
  j.append(j.me_for(p, 8, PTL_ME_OP_PUT | PTL_ME_USE_ONCE, 1), PTL_PRIORITY_LIST, &tp);
  RULE_EQ(j, j.expect(j.teq, PTL_EVENT_PUT_OVERFLOW, __LINE__).user_ptr, &tp);
  RULE_EQ(j, j.expect(j.teq, PTL_EVENT_AUTO_FREE, __LINE__).user_ptr, &t1);
  RULE_EQ(j, j.expect(j.teq, PTL_EVENT_AUTO_UNLINK, __LINE__).user_ptr, &tp);
  j.append(j.me_for(p, 8, PTL_ME_OP_PUT | PTL_ME_USE_ONCE, 2), PTL_PRIORITY_LIST, &tp);
  RULE_EQ(j, j.expect(j.teq, PTL_EVENT_PUT_OVERFLOW, __LINE__).user_ptr, &tp);
  RULE_EQ(j, j.expect(j.teq, PTL_EVENT_AUTO_UNLINK, __LINE__).user_ptr, &tp);
  j.expect_quiet(j.teq, __LINE__);
}

}  // namespace

const Rule unexpected_rules[] = {
    {"R-U1", rule_u1}, {"R-U2", rule_u2}, {"R-U3", rule_u3}, {"R-U4", rule_u4},
    {"R-U5", rule_u5}, {"R-U6", rule_u6}, {"R-U7", rule_u7}, {nullptr, nullptr},
};

}  // namespace pier::portals::rules
