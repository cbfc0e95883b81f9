// PORTALS4.md R-M8: MDs and entries that bind all of memory (start NULL,
// length PTL_SIZE_MAX), as OpenSHMEM binds them: offsets are addresses.
#include <cstdint>

#include "fixture.hpp"

namespace pier::portals::test {
namespace {

class Memory : public Portals {
 protected:
  static ptl_size_t at(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }
};

TEST_P(Memory, R_M8_BindInaccessibleIsOfferedAndAllOfMemoryBinds) {
  EXPECT_NE(limits_.features & PTL_TARGET_BIND_INACCESSIBLE, 0u);
  ptl_handle_me_t h = append(me(nullptr, PTL_SIZE_MAX, PTL_ME_OP_PUT | PTL_ME_OP_GET));
  ASSERT_NE(h, PTL_INVALID_HANDLE);
  EXPECT_EQ(next_event(teq_).type, PTL_EVENT_LINK);
  ptl_handle_md_t md = bind(nullptr, PTL_SIZE_MAX);

  // Put: local offset and remote offset are addresses.
  std::uint64_t src = 0x1122334455667788, dst = 0;
  ptl_event_t ack = put_acked(md, sizeof src, 0, at(&dst), at(&src));
  EXPECT_EQ(ack.ni_fail_type, PTL_NI_OK);
  EXPECT_EQ(ack.mlength, sizeof src);
  EXPECT_EQ(dst, src);
  ptl_event_t put = next_event(teq_);
  EXPECT_EQ(put.type, PTL_EVENT_PUT);
  EXPECT_EQ(put.start, static_cast<void*>(&dst));

  // Get lands at the address given as local offset.
  std::uint64_t remote = 42, local = 0;
  ASSERT_EQ(PtlGet(md, at(&local), sizeof local, self_, pt_, 0, at(&remote), nullptr), PTL_OK);
  auto evs = events_until(ieq_, PTL_EVENT_REPLY);
  ASSERT_FALSE(evs.empty());
  EXPECT_EQ(evs.back().type, PTL_EVENT_REPLY);
  EXPECT_EQ(local, 42u);
  EXPECT_EQ(next_event(teq_).type, PTL_EVENT_GET);

  // Atomics apply at the address.
  std::int64_t sum = 5, add = 7;
  ASSERT_EQ(PtlAtomic(md, at(&add), sizeof add, PTL_ACK_REQ, self_, pt_, 0, at(&sum), nullptr, 0,
                      PTL_SUM, PTL_INT64_T),
            PTL_OK);
  evs = events_until(ieq_, PTL_EVENT_ACK);
  ASSERT_FALSE(evs.empty());
  EXPECT_EQ(evs.back().ni_fail_type, PTL_NI_OK);
  EXPECT_EQ(sum, 12);
  EXPECT_EQ(next_event(teq_).type, PTL_EVENT_ATOMIC);
}

TEST_P(Memory, R_M8_NullAddressIsRefused) {
  append(me(nullptr, PTL_SIZE_MAX, PTL_ME_OP_PUT | PTL_ME_OP_GET));
  (void)next_event(teq_);
  ptl_handle_md_t md = bind(nullptr, PTL_SIZE_MAX);
  std::uint64_t src = 1;
  // At the initiator, a null local address is an argument error.
  EXPECT_EQ(PtlPut(md, 0, sizeof src, PTL_ACK_REQ, self_, pt_, 0, at(&src), nullptr, 0),
            PTL_ARG_INVALID);
  // At the target, the put is refused and acked as a segmentation violation.
  ptl_sr_value_t drops = 0, violations = 0;
  ASSERT_EQ(PtlNIStatus(ni_, PTL_SR_DROP_COUNT, &drops), PTL_OK);
  ptl_event_t ack = put_acked(md, sizeof src, 0, 0, at(&src));
  EXPECT_EQ(ack.ni_fail_type, PTL_NI_SEGV);
  EXPECT_TRUE(eq_empty(teq_));
  // R-S1: a dropped request that is neither a permission nor an operation
  // violation is a drop (it was counted as an operation violation).
  ptl_sr_value_t now = 0;
  ASSERT_EQ(PtlNIStatus(ni_, PTL_SR_DROP_COUNT, &now), PTL_OK);
  EXPECT_EQ(now, drops + 1);
  ASSERT_EQ(PtlNIStatus(ni_, PTL_SR_OPERATION_VIOLATIONS, &violations), PTL_OK);
  EXPECT_EQ(violations, 0);
}

INSTANTIATE_TEST_SUITE_P(Cells, Memory, ::testing::Bool(), cell_name);

}  // namespace
}  // namespace pier::portals::test
