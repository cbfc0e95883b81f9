// PORTALS4.md R-O7: an iovec MD or entry behaves as one contiguous range,
// whatever the lengths of its elements. Puts and gets whose ranges cross
// elements of 1, 544, 545 bytes, 64 KiB and 1 MiB, on both sides at once:
// ranges up to half a bounce slot (544 bytes) are staged per message,
// longer ones through the LIB's staging pool (LIB_STAGING_KIB).
#include <cstdint>
#include <cstring>
#include <vector>

#include "fixture.hpp"

namespace pier::portals::test {
namespace {

class Iovec : public Portals {};

/// Three elements of `len` bytes each.
struct Three {
  explicit Three(std::size_t len)
      : bytes{std::vector<unsigned char>(len), std::vector<unsigned char>(len),
              std::vector<unsigned char>(len)} {
    for (int i = 0; i < 3; ++i) iov[i] = {bytes[i].data(), len};
  }
  unsigned char& at(std::size_t k) {
    std::size_t len = bytes[0].size();
    return bytes[k / len][k % len];
  }
  std::vector<unsigned char> bytes[3];
  ptl_iovec_t iov[3];
};

unsigned char pattern(std::size_t len, std::size_t k) {
  return static_cast<unsigned char>((k * 131 + len * 7 + 1) % 251);
}

constexpr std::size_t lengths[] = {1, 544, 545, 64 * 1024, 1024 * 1024};

TEST_P(Iovec, R_O7_PutsAndGetsCrossElementsOfAnyLength) {
  for (std::size_t len : lengths) {
    SCOPED_TRACE("elements of " + std::to_string(len) + " bytes");
    // 2 * len bytes from the middle of the first element to the middle of
    // the third (len 1: both boundaries), landing across the target's
    // elements at another offset.
    const std::size_t n = 2 * len;
    const std::size_t local = len / 2, remote = (len + 1) / 2;
    Three src(len), dst(len), back(len);
    for (std::size_t k = 0; k < 3 * len; ++k) src.at(k) = pattern(len, k);

    ptl_handle_me_t h = append(me(dst.iov, 3, PTL_ME_OP_PUT | PTL_ME_OP_GET | PTL_IOVEC, len));
    ASSERT_EQ(next_event(teq_).type, PTL_EVENT_LINK);
    ptl_handle_md_t md = bind(src.iov, 3, PTL_IOVEC);

    ptl_event_t ack = put_acked(md, n, len, remote, local);
    EXPECT_EQ(ack.ni_fail_type, PTL_NI_OK);
    EXPECT_EQ(ack.mlength, n);
    ptl_event_t put = next_event(teq_);
    EXPECT_EQ(put.type, PTL_EVENT_PUT);
    EXPECT_EQ(put.mlength, n);
    EXPECT_EQ(put.start, static_cast<void*>(&dst.at(remote)));
    std::size_t wrong = 0;
    for (std::size_t k = 0; k < 3 * len; ++k) {
      bool inside = k >= remote && k < remote + n;
      wrong += dst.at(k) != (inside ? pattern(len, k - remote + local) : 0);
    }
    EXPECT_EQ(wrong, 0u) << "bytes misplaced by the put";

    // Back again: a get of the same range into a third iovec, at `local`.
    ptl_handle_md_t gmd = bind(back.iov, 3, PTL_IOVEC);
    ASSERT_EQ(PtlGet(gmd, local, n, self_, pt_, len, remote, nullptr), PTL_OK);
    auto evs = events_until(ieq_, PTL_EVENT_REPLY);
    ASSERT_FALSE(evs.empty());
    EXPECT_EQ(evs.back().type, PTL_EVENT_REPLY);
    EXPECT_EQ(evs.back().ni_fail_type, PTL_NI_OK);
    EXPECT_EQ(evs.back().mlength, n);
    ptl_event_t get = next_event(teq_);
    EXPECT_EQ(get.type, PTL_EVENT_GET);
    EXPECT_EQ(get.mlength, n);
    wrong = 0;
    for (std::size_t k = 0; k < 3 * len; ++k) {
      bool inside = k >= local && k < local + n;
      wrong += back.at(k) != (inside ? pattern(len, k) : 0);
    }
    EXPECT_EQ(wrong, 0u) << "bytes misplaced by the get";

    EXPECT_EQ(PtlMDRelease(md), PTL_OK);
    EXPECT_EQ(PtlMDRelease(gmd), PTL_OK);
    EXPECT_EQ(PtlMEUnlink(h), PTL_OK);
    EXPECT_TRUE(eq_empty(teq_));
    EXPECT_TRUE(eq_empty(ieq_));
  }
}

// Atomics whose target range crosses the entry's elements, with one
// datatype element straddling the boundary: applied to every element, and a
// fetch returns the old values of the whole range.
TEST_P(Iovec, AtomicsAcrossElementsApplyToTheWholeRange) {
  // Elements of 12 and 20 bytes; the range is bytes 8..24: the first
  // uint64 has 4 bytes in each element.
  unsigned char first[12] = {}, second[20] = {};
  ptl_iovec_t iov[2] = {{first, sizeof first}, {second, sizeof second}};
  auto value = [&](int k) {  // the k-th uint64 of the range
    unsigned char b[8];
    for (int i = 0; i < 8; ++i) {
      std::size_t at = 8 + 8 * static_cast<std::size_t>(k) + static_cast<std::size_t>(i);
      b[i] = at < sizeof first ? first[at] : second[at - sizeof first];
    }
    std::uint64_t v = 0;
    std::memcpy(&v, b, 8);
    return v;
  };
  auto set = [&](int k, std::uint64_t v) {
    unsigned char b[8];
    std::memcpy(b, &v, 8);
    for (int i = 0; i < 8; ++i) {
      std::size_t at = 8 + 8 * static_cast<std::size_t>(k) + static_cast<std::size_t>(i);
      (at < sizeof first ? first[at] : second[at - sizeof first]) = b[i];
    }
  };
  set(0, 0x0102030405060708u);
  set(1, 1000);
  ptl_handle_me_t h = append(me(iov, 2, PTL_ME_OP_PUT | PTL_ME_OP_GET | PTL_IOVEC, 9));
  ASSERT_EQ(next_event(teq_).type, PTL_EVENT_LINK);

  std::uint64_t add[2] = {0x1010101010101010u, 24}, old[2] = {};
  ptl_handle_md_t put_md = bind(add, sizeof add, 0);
  ptl_handle_md_t get_md = bind(old, sizeof old, 0);
  ASSERT_EQ(PtlAtomic(put_md, 0, sizeof add, PTL_ACK_REQ, self_, pt_, 9, 8, nullptr, 0, PTL_SUM,
                      PTL_UINT64_T),
            PTL_OK);
  auto evs = events_until(ieq_, PTL_EVENT_ACK);
  ASSERT_FALSE(evs.empty());
  EXPECT_EQ(evs.back().ni_fail_type, PTL_NI_OK);
  EXPECT_EQ(evs.back().mlength, sizeof add);
  EXPECT_EQ(next_event(teq_).type, PTL_EVENT_ATOMIC);
  EXPECT_EQ(value(0), 0x1112131415161718u);
  EXPECT_EQ(value(1), 1024u);

  ASSERT_EQ(PtlFetchAtomic(get_md, 0, put_md, 0, sizeof add, self_, pt_, 9, 8, nullptr, 0, PTL_SUM,
                           PTL_UINT64_T),
            PTL_OK);
  evs = events_until(ieq_, PTL_EVENT_REPLY);
  ASSERT_FALSE(evs.empty());
  EXPECT_EQ(evs.back().ni_fail_type, PTL_NI_OK);
  EXPECT_EQ(evs.back().mlength, sizeof add);
  EXPECT_EQ(next_event(teq_).type, PTL_EVENT_FETCH_ATOMIC);
  EXPECT_EQ(old[0], 0x1112131415161718u);
  EXPECT_EQ(old[1], 1024u);
  EXPECT_EQ(value(0), 0x2122232425262728u);
  EXPECT_EQ(value(1), 1048u);
  // Bytes outside the range are untouched.
  for (int i = 0; i < 8; ++i) EXPECT_EQ(first[i], 0) << i;
  for (std::size_t i = 12; i < sizeof second; ++i) EXPECT_EQ(second[i], 0) << i;

  EXPECT_EQ(PtlMDRelease(put_md), PTL_OK);
  EXPECT_EQ(PtlMDRelease(get_md), PTL_OK);
  EXPECT_EQ(PtlMEUnlink(h), PTL_OK);
}

// Many crossing puts of 1 MiB in flight at once: more than the staging
// pool holds at a time is either staged or refused with PTL_NO_SPACE at the
// call, never lost; every put that was accepted lands whole.
TEST_P(Iovec, LongCrossingPutsInFlightAreStagedOrRefusedAtTheCall) {
  constexpr std::size_t len = 1024 * 1024, count = 24;
  Three src(len);
  for (std::size_t k = 0; k < 3 * len; ++k) src.at(k) = pattern(len, k);
  std::vector<Three> dst;
  dst.reserve(count);
  for (std::size_t i = 0; i < count; ++i) dst.emplace_back(len);
  ptl_handle_md_t md = bind(src.iov, 3, PTL_IOVEC);
  for (std::size_t i = 0; i < count; ++i) {
    append(me(dst[i].iov, 3, PTL_ME_OP_PUT | PTL_IOVEC | PTL_ME_EVENT_LINK_DISABLE, i));
  }
  std::vector<bool> sent(count);
  std::size_t accepted = 0;
  for (std::size_t i = 0; i < count; ++i) {
    int rc = PtlPut(md, len / 2, 2 * len, PTL_ACK_REQ, self_, pt_, i, len / 2, nullptr, 0);
    ASSERT_TRUE(rc == PTL_OK || rc == PTL_NO_SPACE) << rc;
    sent[i] = rc == PTL_OK;
    accepted += sent[i];
  }
  ASSERT_GT(accepted, 0u);
  std::size_t acks = 0;
  for (int guard = 0; acks < accepted && guard < 4 * int(count); ++guard) {
    ptl_event_t ev = next_event(ieq_);
    if (ev.type == 0xff) break;
    if (ev.type != PTL_EVENT_ACK) continue;
    EXPECT_EQ(ev.ni_fail_type, PTL_NI_OK);
    EXPECT_EQ(ev.mlength, 2 * len);
    ++acks;
  }
  EXPECT_EQ(acks, accepted);
  for (std::size_t i = 0; i < count; ++i) {
    if (!sent[i]) continue;
    std::size_t wrong = 0;
    for (std::size_t k = len / 2; k < len / 2 + 2 * len; ++k)
      wrong += dst[i].at(k) != pattern(len, k);
    EXPECT_EQ(wrong, 0u) << "put " << i;
  }
}

// Puts from a contiguous MD into 24 entries whose 2 MiB ranges cross
// elements: 48 MiB land through a target staging half of 8 MiB, so most
// wait, matched, for a run to be released (without the progress thread all
// of them arrive at once). None is refused and every one lands whole.
TEST_P(Iovec, LongCrossingRangesBeyondTheTargetsStagingWaitTheirTurn) {
  constexpr std::size_t len = 1024 * 1024, count = 24;
  std::vector<unsigned char> src(2 * len);
  for (std::size_t k = 0; k < src.size(); ++k) src[k] = pattern(len, k + len / 2);
  std::vector<Three> dst;
  dst.reserve(count);
  for (std::size_t i = 0; i < count; ++i) dst.emplace_back(len);
  ptl_handle_md_t md = bind(src.data(), src.size());
  for (std::size_t i = 0; i < count; ++i)
    append(me(dst[i].iov, 3, PTL_ME_OP_PUT | PTL_IOVEC | PTL_ME_EVENT_LINK_DISABLE, i));
  for (std::size_t i = 0; i < count; ++i)
    ASSERT_EQ(PtlPut(md, 0, 2 * len, PTL_ACK_REQ, self_, pt_, i, len / 2, nullptr, 0), PTL_OK);
  std::size_t acks = 0;
  for (int guard = 0; acks < count && guard < 4 * int(count); ++guard) {
    ptl_event_t ev = next_event(ieq_);
    if (ev.type == 0xff) break;
    if (ev.type != PTL_EVENT_ACK) continue;
    EXPECT_EQ(ev.ni_fail_type, PTL_NI_OK);
    EXPECT_EQ(ev.mlength, 2 * len);
    ++acks;
  }
  EXPECT_EQ(acks, count);
  for (std::size_t i = 0; i < count; ++i) {
    std::size_t wrong = 0;
    for (std::size_t k = 0; k < 3 * len; ++k) {
      bool inside = k >= len / 2 && k < len / 2 + 2 * len;
      wrong += dst[i].at(k) != (inside ? pattern(len, k) : 0);
    }
    EXPECT_EQ(wrong, 0u) << "put " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Cells, Iovec, ::testing::Bool(), cell_name);

}  // namespace
}  // namespace pier::portals::test
