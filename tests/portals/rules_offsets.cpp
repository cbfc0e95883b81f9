// PORTALS4.md §6.5 offsets and truncation (R-O*) across two processes:
// rank 0 is the target, rank 1 the initiator.
#include <cstring>
#include <initializer_list>

#include "rules_job.hpp"

namespace pier::portals::rules {
namespace {

constexpr ptl_match_bits_t all_bits = ~ptl_match_bits_t{0};

void fill(unsigned char* p, std::size_t n, unsigned seed) {
  for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<unsigned char>(seed + i * 3);
}

/// R-O1 and R-O6: MANAGE_LOCAL uses the entry's offset, otherwise the
/// remote offset is used; the target event reports the requested offset
/// and where the data starts, the ACK and REPLY the offset used.
void rule_o1(Job& j) {
  unsigned char src[8];
  fill(src, 8, 11);
  if (j.target()) {
    static unsigned char managed[32], plain[32];
    int tm = 0, tp = 0;
    j.add(j.me_for(managed, 32, PTL_ME_OP_PUT | PTL_ME_OP_GET | PTL_ME_MANAGE_LOCAL, 1),
          PTL_PRIORITY_LIST, &tm);
    j.add(j.me_for(plain, 32, PTL_ME_OP_PUT, 2), PTL_PRIORITY_LIST, &tp);
    if (!j.sync()) return;
    struct Want {
      ptl_event_kind_t kind;
      void* tag;
      unsigned char* start;
      ptl_size_t requested;
    } wants[] = {{PTL_EVENT_PUT, &tm, managed, 100},
                 {PTL_EVENT_PUT, &tm, managed + 8, 100},
                 {PTL_EVENT_GET, &tm, managed + 16, 3},
                 {PTL_EVENT_PUT, &tp, plain + 5, 5}};
    for (const Want& w : wants) {
      const ptl_event_t ev = j.expect(j.teq, w.kind, __LINE__);
      RULE_EQ(j, ev.user_ptr, w.tag);
      RULE_EQ(j, ev.start, w.start);
      RULE_EQ(j, ev.remote_offset, w.requested);
    }
    RULE_BYTES(j, managed, src, 8);
    RULE_BYTES(j, managed + 8, src, 8);
    RULE_BYTES(j, plain + 5, src, 8);
    j.sync();
    j.expect_quiet(j.teq, __LINE__);
    return;
  }
  unsigned char back[8] = {};
  const ptl_handle_md_t md = j.bind(src, sizeof src);
  const ptl_handle_md_t gmd = j.bind(back, sizeof back);
  if (!j.sync()) return;
  RULE_EQ(j, j.put_acked(md, 0, 8, 1, 100, __LINE__).remote_offset, 0);
  RULE_EQ(j, j.put_acked(md, 0, 8, 1, 100, __LINE__).remote_offset, 8);
  RULE_EQ(j, j.get_reply(gmd, 0, 4, 1, 3, __LINE__).remote_offset, 16);
  RULE_EQ(j, j.put_acked(md, 0, 8, 2, 5, __LINE__).remote_offset, 5);
  j.sync();
}

/// R-O2: mlength = min(rlength, length - offset), and zero (not a failure)
/// for an offset beyond the entry; gets are truncated the same way.
void rule_o2(Job& j) {
  unsigned char src[32];
  fill(src, 32, 40);
  if (j.target()) {
    static unsigned char buf[16];
    fill(buf, 16, 200);
    unsigned char before[16];
    std::memcpy(before, buf, 16);
    int tag = 0;
    j.add(j.me_for(buf, 16, PTL_ME_OP_PUT | PTL_ME_OP_GET), PTL_PRIORITY_LIST, &tag);
    if (!j.sync()) return;
    ptl_event_t ev = j.expect(j.teq, PTL_EVENT_GET, __LINE__);
    RULE_EQ(j, ev.rlength, 32);
    RULE_EQ(j, ev.mlength, 8);
    ev = j.expect(j.teq, PTL_EVENT_PUT, __LINE__);
    RULE_EQ(j, ev.rlength, 32);
    RULE_EQ(j, ev.mlength, 12);
    ev = j.expect(j.teq, PTL_EVENT_PUT, __LINE__);
    RULE_EQ(j, ev.rlength, 8);
    RULE_EQ(j, ev.mlength, 0);
    RULE_EQ(j, ev.ni_fail_type, PTL_NI_OK);
    RULE_BYTES(j, buf, before, 4);
    RULE_BYTES(j, buf + 4, src, 12);
    j.sync();
    j.expect_quiet(j.teq, __LINE__);
    return;
  }
  unsigned char back[32] = {}, want[16];
  fill(want, 16, 200);
  const ptl_handle_md_t md = j.bind(src, sizeof src);
  const ptl_handle_md_t gmd = j.bind(back, sizeof back);
  if (!j.sync()) return;
  ptl_event_t reply = j.get_reply(gmd, 0, 32, 0, 8, __LINE__);
  RULE_EQ(j, reply.mlength, 8);
  RULE_BYTES(j, back, want + 8, 8);
  RULE_EQ(j, back[8], 0);
  ptl_event_t ack = j.put_acked(md, 0, 32, 0, 4, __LINE__);
  RULE_EQ(j, ack.mlength, 12);
  ack = j.put_acked(md, 0, 8, 0, 100, __LINE__);
  RULE_EQ(j, ack.ni_fail_type, PTL_NI_OK);
  RULE_EQ(j, ack.mlength, 0);
  j.sync();
}

/// R-O3: with MANAGE_LOCAL the one local offset advances by each match's
/// mlength, puts and gets alike.
void rule_o3(Job& j) {
  unsigned char src[16];
  fill(src, 16, 60);
  if (j.target()) {
    static unsigned char buf[32];
    fill(buf, 32, 150);
    int tag = 0;
    j.add(j.me_for(buf, 32, PTL_ME_OP_PUT | PTL_ME_OP_GET | PTL_ME_MANAGE_LOCAL), PTL_PRIORITY_LIST,
          &tag);
    if (!j.sync()) return;
    RULE_EQ(j, j.expect(j.teq, PTL_EVENT_PUT, __LINE__).start, buf);
    RULE_EQ(j, j.expect(j.teq, PTL_EVENT_GET, __LINE__).start, buf + 10);
    RULE_EQ(j, j.expect(j.teq, PTL_EVENT_PUT, __LINE__).start, buf + 16);
    RULE_BYTES(j, buf, src, 10);
    RULE_BYTES(j, buf + 16, src, 4);
    j.sync();
    return;
  }
  unsigned char back[6] = {}, want[32];
  fill(want, 32, 150);
  const ptl_handle_md_t md = j.bind(src, sizeof src);
  const ptl_handle_md_t gmd = j.bind(back, sizeof back);
  if (!j.sync()) return;
  RULE_EQ(j, j.put_acked(md, 0, 10, 0, 0, __LINE__).remote_offset, 0);
  RULE_EQ(j, j.get_reply(gmd, 0, 6, 0, 0, __LINE__).remote_offset, 10);
  RULE_BYTES(j, back, want + 10, 6);
  RULE_EQ(j, j.put_acked(md, 0, 4, 0, 0, __LINE__).remote_offset, 16);
  j.sync();
}

/// R-O4: with min_free, the entry unlinks once less than min_free is left
/// (AUTO_UNLINK after the PUT that did it); the next put finds nothing.
void rule_o4(Job& j) {
  unsigned char src[12] = {};
  if (j.target()) {
    static unsigned char buf[32];
    int tag = 0;
    ptl_me_t m = j.me_for(buf, 32, PTL_ME_OP_PUT | PTL_ME_MANAGE_LOCAL);
    m.min_free = 10;
    j.add(m, PTL_PRIORITY_LIST, &tag);
    if (!j.sync()) return;
    RULE_EQ(j, j.expect(j.teq, PTL_EVENT_PUT, __LINE__).start, buf);
    RULE_EQ(j, j.expect(j.teq, PTL_EVENT_PUT, __LINE__).start, buf + 12);  // 8 left < 10
    RULE_EQ(j, j.expect(j.teq, PTL_EVENT_AUTO_UNLINK, __LINE__).user_ptr, &tag);
    j.sync();
    j.expect_quiet(j.teq, __LINE__);
    return;
  }
  const ptl_handle_md_t md = j.bind(src, sizeof src);
  if (!j.sync()) return;
  RULE_EQ(j, j.put_acked(md, 0, 12, 0, 0, __LINE__).ni_fail_type, PTL_NI_OK);
  RULE_EQ(j, j.put_acked(md, 0, 12, 0, 0, __LINE__).ni_fail_type, PTL_NI_OK);
  RULE_EQ(j, j.put_acked(md, 0, 4, 0, 0, __LINE__).ni_fail_type, PTL_NI_DROPPED);
  j.sync();
}

/// R-O5: an unexpected header taken by a MANAGE_LOCAL append does not
/// advance its offset: the next put lands at offset 0.
void rule_o5(Job& j) {
  unsigned char src[10];
  fill(src, 10, 70);
  if (j.target()) {
    static unsigned char over[32], late[32];
    int to = 0, tl = 0;
    j.add(j.me_for(over, 32, PTL_ME_OP_PUT, 0, all_bits), PTL_OVERFLOW_LIST, &to);
    if (!j.sync() || !j.sync()) return;
    RULE_EQ(j, j.expect(j.teq, PTL_EVENT_PUT, __LINE__).user_ptr, &to);
    j.append(j.me_for(late, 32, PTL_ME_OP_PUT | PTL_ME_MANAGE_LOCAL, 3), PTL_PRIORITY_LIST, &tl);
    RULE_EQ(j, j.expect(j.teq, PTL_EVENT_PUT_OVERFLOW, __LINE__).user_ptr, &tl);
    RULE_EQ(j, j.expect(j.teq, PTL_EVENT_LINK, __LINE__).user_ptr, &tl);
    if (!j.sync()) return;
    const ptl_event_t ev = j.expect(j.teq, PTL_EVENT_PUT, __LINE__);
    RULE_EQ(j, ev.user_ptr, &tl);
    RULE_EQ(j, ev.start, late);
    RULE_BYTES(j, late, src, 8);
    j.sync();
    return;
  }
  const ptl_handle_md_t md = j.bind(src, sizeof src);
  if (!j.sync()) return;
  RULE_EQ(j, j.put_acked(md, 0, 10, 3, 0, __LINE__).ptl_list, PTL_OVERFLOW_LIST);
  if (!j.sync() || !j.sync()) return;
  RULE_EQ(j, j.put_acked(md, 0, 8, 3, 0, __LINE__).remote_offset, 0);
  j.sync();
}

/// R-O6 (also checked by R-O1) for iovec entries: `start` is the address
/// inside the element where the data begins; the event reports the
/// requested offset.
void rule_o6(Job& j) {
  unsigned char src[6];
  fill(src, 6, 90);
  if (j.target()) {
    static unsigned char e0[5], e1[5], e2[5];
    static ptl_iovec_t iov[3] = {{e0, 5}, {e1, 5}, {e2, 5}};
    int tag = 0;
    j.add(j.me_for(iov, 3, PTL_ME_OP_PUT | PTL_IOVEC), PTL_PRIORITY_LIST, &tag);
    if (!j.sync()) return;
    const ptl_event_t ev = j.expect(j.teq, PTL_EVENT_PUT, __LINE__);
    RULE_EQ(j, ev.start, e1 + 2);
    RULE_EQ(j, ev.remote_offset, 7);
    RULE_EQ(j, ev.mlength, 6);
    RULE_BYTES(j, e1 + 2, src, 3);
    RULE_BYTES(j, e2, src + 3, 3);
    j.sync();
    return;
  }
  const ptl_handle_md_t md = j.bind(src, sizeof src);
  if (!j.sync()) return;
  RULE_EQ(j, j.put_acked(md, 0, 6, 0, 7, __LINE__).remote_offset, 7);
  j.sync();
}

/// R-O7: iovec MDs and entries behave as one contiguous region on both
/// sides of a put and of a get.
void rule_o7(Job& j) {
  if (j.target()) {
    static char d1[5], d2[5], d3[5];
    static ptl_iovec_t dst[3] = {{d1, 5}, {d2, 5}, {d3, 5}};
    int tag = 0;
    j.add(j.me_for(dst, 3, PTL_ME_OP_PUT | PTL_ME_OP_GET | PTL_IOVEC), PTL_PRIORITY_LIST, &tag);
    if (!j.sync()) return;
    RULE_EQ(j, j.expect(j.teq, PTL_EVENT_PUT, __LINE__).start, d1 + 2);
    RULE_EQ(j, j.expect(j.teq, PTL_EVENT_GET, __LINE__).mlength, 10);
    // "cdefgh12" + "34" laid from offset 2 across d1|d2|d3.
    RULE_BYTES(j, d1 + 2, "cde", 3);
    RULE_BYTES(j, d2, "fgh12", 5);
    RULE_BYTES(j, d3, "34", 2);
    j.sync();
    return;
  }
  char s1[8] = {'a', 'b', 'c', 'd', 'e', 'f', 'g', 'h'}, s2[4] = {'1', '2', '3', '4'};
  ptl_iovec_t src[2] = {{s1, 8}, {s2, 4}};
  char b1[3] = {}, b2[9] = {};
  ptl_iovec_t back[2] = {{b1, 3}, {b2, 9}};
  const ptl_handle_md_t md = j.bind(src, 2, PTL_IOVEC);
  const ptl_handle_md_t gmd = j.bind(back, 2, PTL_IOVEC);
  if (!j.sync()) return;
  RULE_EQ(j, j.put_acked(md, 2, 10, 0, 2, __LINE__).mlength, 10);
  RULE_EQ(j, j.get_reply(gmd, 1, 10, 0, 2, __LINE__).mlength, 10);
  RULE_BYTES(j, b1 + 1, "cd", 2);
  RULE_BYTES(j, b2, "efgh1234", 8);
  j.sync();
}

}  // namespace

const Rule offset_rules[] = {
    {"R-O1", rule_o1}, {"R-O2", rule_o2}, {"R-O3", rule_o3}, {"R-O4", rule_o4},
    {"R-O5", rule_o5}, {"R-O6", rule_o6}, {"R-O7", rule_o7}, {nullptr, nullptr},
};

}  // namespace pier::portals::rules
