// PORTALS4.md §6.11-§6.13: atomics, triggered operations, size limits.
#include <atomic>
#include <chrono>
#include <complex>
#include <cstdint>
#include <cstring>
#include <thread>

#include "fixture.hpp"

namespace pier::portals::test {
namespace {

class Atomics : public Portals {
 protected:
  void SetUp() override {
    Portals::SetUp();
    append(me(target_, sizeof target_, PTL_ME_OP_PUT | PTL_ME_OP_GET));
    (void)next_event(teq_);
    put_md_ = bind(source_, sizeof source_);
    get_md_ = bind(fetched_, sizeof fetched_);
  }
  /// Waits for the ACK of an atomic (or the REPLY of a fetch).
  void finish(ptl_event_kind_t kind) {
    auto evs = events_until(ieq_, kind);
    ASSERT_FALSE(evs.empty());
    ASSERT_EQ(evs.back().type, kind);
    EXPECT_EQ(evs.back().ni_fail_type, PTL_NI_OK);
  }
  template <class T>
  void atomic(ptl_op_t op, ptl_datatype_t type, std::size_t n) {
    ASSERT_EQ(
        PtlAtomic(put_md_, 0, n * sizeof(T), PTL_ACK_REQ, self_, pt_, 0, 0, nullptr, 0, op, type),
        PTL_OK);
    finish(PTL_EVENT_ACK);
  }
  template <class T>
  T* t() {
    return reinterpret_cast<T*>(target_);
  }
  template <class T>
  T* s() {
    return reinterpret_cast<T*>(source_);
  }
  template <class T>
  T* f() {
    return reinterpret_cast<T*>(fetched_);
  }

  alignas(16) unsigned char target_[256]{};
  alignas(16) unsigned char source_[256]{};
  alignas(16) unsigned char fetched_[256]{};
  ptl_handle_md_t put_md_ = PTL_INVALID_HANDLE, get_md_ = PTL_INVALID_HANDLE;
};

/// R-A1 restated: may `fn` (0 atomic, 1 fetch, 2 swap) apply op to type?
bool table_allows(int fn, ptl_op_t op, ptl_datatype_t type) {
  bool integer = type <= PTL_UINT32_T || type == PTL_INT64_T || type == PTL_UINT64_T;
  bool complex =
      type == PTL_FLOAT_COMPLEX || type == PTL_DOUBLE_COMPLEX || type == PTL_LONG_DOUBLE_COMPLEX;
  bool swap_fn = fn == 2;
  switch (op) {
    case PTL_MIN:
    case PTL_MAX:
      return !swap_fn && !complex;
    case PTL_SUM:
    case PTL_PROD:
      return !swap_fn;
    case PTL_SWAP:
    case PTL_CSWAP:
    case PTL_CSWAP_NE:
      return swap_fn;
    case PTL_CSWAP_LE:
    case PTL_CSWAP_LT:
    case PTL_CSWAP_GE:
    case PTL_CSWAP_GT:
      return swap_fn && !complex;
    case PTL_MSWAP:
      return swap_fn && integer;
    default:
      return !swap_fn && integer;  // logical and bitwise
  }
}

TEST_P(Atomics, R_A1_EveryOperationAndDatatype) {
  std::size_t sizes[] = {
      1, 1, 2, 2, 4, 4, 4, 8, 8, 8, 8, 16, sizeof(long double), sizeof(std::complex<long double>)};
  ptl_md_t d{source_, sizeof source_, 0, PTL_EQ_NONE, PTL_CT_NONE};
  ptl_handle_md_t quiet_put, quiet_get;
  ASSERT_EQ(PtlMDBind(ni_, &d, &quiet_put), PTL_OK);
  d.start = fetched_;
  ASSERT_EQ(PtlMDBind(ni_, &d, &quiet_get), PTL_OK);
  alignas(16) unsigned char operand[32] = {};
  for (ptl_op_t op = 0; op < PTL_OP_LAST; ++op)
    for (ptl_datatype_t type = 0; type < PTL_DATATYPE_LAST; ++type) {
      ptl_size_t len = sizes[type];
      int rcs[3] = {
          PtlAtomic(quiet_put, 0, len, PTL_NO_ACK_REQ, self_, pt_, 0, 0, nullptr, 0, op, type),
          PtlFetchAtomic(quiet_get, 0, quiet_put, 0, len, self_, pt_, 0, 0, nullptr, 0, op, type),
          PtlSwap(quiet_get, 0, quiet_put, 0, len, self_, pt_, 0, 0, nullptr, 0, operand, op,
                  type)};
      for (int fn = 0; fn < 3; ++fn)
        EXPECT_EQ(rcs[fn], table_allows(fn, op, type) ? PTL_OK : PTL_ARG_INVALID)
            << "function " << fn << " op " << int(op) << " type " << int(type);
    }
}

TEST_P(Atomics, R_A1_LegalityTable) {
  auto call = [&](ptl_op_t op, ptl_datatype_t type) {
    return PtlAtomic(put_md_, 0, 8, PTL_NO_ACK_REQ, self_, pt_, 0, 0, nullptr, 0, op, type);
  };
  EXPECT_EQ(call(PTL_BXOR, PTL_DOUBLE), PTL_ARG_INVALID);
  EXPECT_EQ(call(PTL_LAND, PTL_FLOAT), PTL_ARG_INVALID);
  EXPECT_EQ(call(PTL_MIN, PTL_FLOAT_COMPLEX), PTL_ARG_INVALID);
  EXPECT_EQ(call(PTL_SWAP, PTL_INT32_T), PTL_ARG_INVALID);  // swap family: PtlSwap only
  EXPECT_EQ(call(PTL_OP_LAST, PTL_INT32_T), PTL_ARG_INVALID);
  EXPECT_EQ(call(PTL_SUM, PTL_DATATYPE_LAST), PTL_ARG_INVALID);
  // Whole elements only: 6 bytes are one and a half int32.
  EXPECT_EQ(
      PtlAtomic(put_md_, 0, 6, PTL_NO_ACK_REQ, self_, pt_, 0, 0, nullptr, 0, PTL_SUM, PTL_INT32_T),
      PTL_ARG_INVALID);
  alignas(16) unsigned char operand[32] = {};
  EXPECT_EQ(PtlSwap(get_md_, 0, put_md_, 0, 8, self_, pt_, 0, 0, nullptr, 0, &operand, PTL_SUM,
                    PTL_INT64_T),
            PTL_ARG_INVALID);
  EXPECT_EQ(PtlSwap(get_md_, 0, put_md_, 0, 8, self_, pt_, 0, 0, nullptr, 0, &operand, PTL_MSWAP,
                    PTL_DOUBLE),
            PTL_ARG_INVALID);
  EXPECT_EQ(PtlSwap(get_md_, 0, put_md_, 0, 8, self_, pt_, 0, 0, nullptr, 0, &operand, PTL_CSWAP_GT,
                    PTL_DOUBLE_COMPLEX),
            PTL_ARG_INVALID);
  // CSWAP* and MSWAP: one element at most.
  EXPECT_EQ(PtlSwap(get_md_, 0, put_md_, 0, 16, self_, pt_, 0, 0, nullptr, 0, &operand, PTL_CSWAP,
                    PTL_INT64_T),
            PTL_ARG_INVALID);
  // R-L2: the size limit.
  EXPECT_EQ(PtlAtomic(put_md_, 0, limits_.max_atomic_size + 8, PTL_NO_ACK_REQ, self_, pt_, 0, 0,
                      nullptr, 0, PTL_SUM, PTL_INT64_T),
            PTL_ARG_INVALID);
}

TEST_P(Atomics, R_A2_ElementWiseOperations) {
  for (int i = 0; i < 4; ++i) {
    t<std::int32_t>()[i] = 10 * i - 5;
    s<std::int32_t>()[i] = 3;
  }
  atomic<std::int32_t>(PTL_SUM, PTL_INT32_T, 4);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(t<std::int32_t>()[i], 10 * i - 2);
  atomic<std::int32_t>(PTL_MIN, PTL_INT32_T, 4);
  EXPECT_EQ(t<std::int32_t>()[0], -2);
  EXPECT_EQ(t<std::int32_t>()[3], 3);
  t<double>()[0] = 1.5;
  s<double>()[0] = 2.5;
  atomic<double>(PTL_MAX, PTL_DOUBLE, 1);
  EXPECT_EQ(t<double>()[0], 2.5);
  atomic<double>(PTL_PROD, PTL_DOUBLE, 1);
  EXPECT_EQ(t<double>()[0], 6.25);
  t<std::uint8_t>()[0] = 0xf0;
  s<std::uint8_t>()[0] = 0x3c;
  atomic<std::uint8_t>(PTL_BXOR, PTL_UINT8_T, 1);
  EXPECT_EQ(t<std::uint8_t>()[0], 0xcc);
  atomic<std::uint8_t>(PTL_LAND, PTL_UINT8_T, 1);
  EXPECT_EQ(t<std::uint8_t>()[0], 1);  // logical ops yield 0/1
  t<std::int64_t>()[0] = INT64_MAX;
  s<std::int64_t>()[0] = 1;
  atomic<std::int64_t>(PTL_SUM, PTL_INT64_T, 1);  // wraps like the hardware
  EXPECT_EQ(t<std::int64_t>()[0], INT64_MIN);
  using C = std::complex<double>;
  t<C>()[0] = C(1, 2);
  s<C>()[0] = C(3, 4);
  atomic<C>(PTL_PROD, PTL_DOUBLE_COMPLEX, 1);
  EXPECT_EQ(t<C>()[0], C(-5, 10));
  ptl_event_t ev = next_event(teq_);
  EXPECT_EQ(ev.type, PTL_EVENT_ATOMIC);
  EXPECT_EQ(ev.atomic_operation, PTL_SUM);
  EXPECT_EQ(ev.atomic_type, PTL_INT32_T);
}

TEST_P(Atomics, R_A6_FetchAtomicReturnsThePriorValue) {
  t<std::uint64_t>()[0] = 40;
  s<std::uint64_t>()[0] = 2;
  ASSERT_EQ(PtlFetchAtomic(get_md_, 8, put_md_, 0, 8, self_, pt_, 0, 0, nullptr, 0, PTL_SUM,
                           PTL_UINT64_T),
            PTL_OK);
  finish(PTL_EVENT_REPLY);
  EXPECT_EQ(f<std::uint64_t>()[1], 40u);
  EXPECT_EQ(t<std::uint64_t>()[0], 42u);
  ptl_event_t ev = next_event(teq_);
  EXPECT_EQ(ev.type, PTL_EVENT_FETCH_ATOMIC);
}

TEST_P(Atomics, R_A3_ConditionalSwapsCompareOperandWithTarget) {
  struct Case {
    ptl_op_t op;
    std::int32_t target, operand;
    bool swaps;
  } cases[] = {{PTL_CSWAP, 5, 5, true},    {PTL_CSWAP, 5, 6, false},    {PTL_CSWAP_NE, 5, 6, true},
               {PTL_CSWAP_LE, 5, 4, true}, {PTL_CSWAP_LE, 5, 6, false}, {PTL_CSWAP_LT, 5, 5, false},
               {PTL_CSWAP_GE, 5, 5, true}, {PTL_CSWAP_GT, 5, 6, true}};
  for (const auto& c : cases) {
    t<std::int32_t>()[0] = c.target;
    s<std::int32_t>()[0] = 99;
    ASSERT_EQ(PtlSwap(get_md_, 0, put_md_, 0, 4, self_, pt_, 0, 0, nullptr, 0, &c.operand, c.op,
                      PTL_INT32_T),
              PTL_OK);
    finish(PTL_EVENT_REPLY);
    EXPECT_EQ(f<std::int32_t>()[0], c.target) << "op " << int(c.op);
    EXPECT_EQ(t<std::int32_t>()[0], c.swaps ? 99 : c.target) << "op " << int(c.op);
  }
}

TEST_P(Atomics, R_A4_MaskedSwapAndR_A5_Swap) {
  t<std::uint16_t>()[0] = 0x1234;
  s<std::uint16_t>()[0] = 0xabcd;
  std::uint16_t mask = 0x0ff0;
  ASSERT_EQ(PtlSwap(get_md_, 0, put_md_, 0, 2, self_, pt_, 0, 0, nullptr, 0, &mask, PTL_MSWAP,
                    PTL_UINT16_T),
            PTL_OK);
  finish(PTL_EVENT_REPLY);
  EXPECT_EQ(t<std::uint16_t>()[0], 0x1bc4);
  EXPECT_EQ(f<std::uint16_t>()[0], 0x1234);
  for (int i = 0; i < 4; ++i) s<float>()[i] = float(i);
  ASSERT_EQ(PtlSwap(get_md_, 0, put_md_, 0, 16, self_, pt_, 0, 0, nullptr, 0, nullptr, PTL_SWAP,
                    PTL_FLOAT),
            PTL_OK);
  finish(PTL_EVENT_REPLY);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(t<float>()[i], float(i));
}

TEST_P(Atomics, R_A8_FetchNeedsPutAndGetOnTheEntry) {
  std::uint64_t only_put[1] = {};
  ptl_pt_index_t pt2;
  ASSERT_EQ(PtlPTAlloc(ni_, 0, teq_, PTL_PT_ANY, &pt2), PTL_OK);
  ptl_me_t m = me(only_put, sizeof only_put, PTL_ME_OP_PUT);
  ptl_handle_me_t h;
  ASSERT_EQ(PtlMEAppend(ni_, pt2, &m, PTL_PRIORITY_LIST, nullptr, &h), PTL_OK);
  ASSERT_EQ(PtlFetchAtomic(get_md_, 0, put_md_, 0, 8, self_, pt2, 0, 0, nullptr, 0, PTL_SUM,
                           PTL_UINT64_T),
            PTL_OK);
  auto evs = events_until(ieq_, PTL_EVENT_REPLY);
  ASSERT_FALSE(evs.empty());
  EXPECT_EQ(evs.back().ni_fail_type, PTL_NI_OP_VIOLATION);
}

// Triggered operations.

TEST_P(Atomics, R_T1_TriggeredPutWaitsForThresholdAndR_T3_ReadsAtRelease) {
  ptl_handle_ct_t trig;
  ASSERT_EQ(PtlCTAlloc(ni_, &trig), PTL_OK);
  s<std::uint32_t>()[0] = 1;
  ASSERT_EQ(PtlTriggeredPut(put_md_, 0, 4, PTL_ACK_REQ, self_, pt_, 0, 16, nullptr, 0, trig, 2),
            PTL_OK);
  s<std::uint32_t>()[0] = 2;
  ASSERT_EQ(PtlCTInc(trig, ptl_ct_event_t{1, 0}), PTL_OK);
  EXPECT_TRUE(eq_empty(ieq_));
  ASSERT_EQ(PtlCTInc(trig, ptl_ct_event_t{0, 1}), PTL_OK);  // success + failure counts
  finish(PTL_EVENT_ACK);
  EXPECT_EQ(t<std::uint32_t>()[4], 2u);
}

TEST_P(Atomics, R_T2_ReachedThresholdFiresAtOnceAndR_T4_InIssueOrder) {
  ptl_handle_ct_t trig;
  ASSERT_EQ(PtlCTAlloc(ni_, &trig), PTL_OK);
  s<std::uint32_t>()[0] = 7;
  ASSERT_EQ(PtlTriggeredPut(put_md_, 0, 4, PTL_ACK_REQ, self_, pt_, 0, 0, nullptr, 0, trig, 0),
            PTL_OK);
  finish(PTL_EVENT_ACK);
  EXPECT_EQ(t<std::uint32_t>()[0], 7u);
  int a = 1, b = 2;
  ASSERT_EQ(PtlTriggeredPut(put_md_, 0, 4, PTL_ACK_REQ, self_, pt_, 0, 0, &a, 0, trig, 1), PTL_OK);
  ASSERT_EQ(PtlTriggeredPut(put_md_, 0, 4, PTL_ACK_REQ, self_, pt_, 0, 0, &b, 0, trig, 1), PTL_OK);
  ASSERT_EQ(PtlCTInc(trig, ptl_ct_event_t{1, 0}), PTL_OK);
  auto evs = events_until(ieq_, PTL_EVENT_SEND);
  ASSERT_FALSE(evs.empty());
  EXPECT_EQ(evs.back().user_ptr, &a);
}

TEST_P(Atomics, R_T5_CounterChaining) {
  ptl_handle_ct_t a, b, c;
  ASSERT_EQ(PtlCTAlloc(ni_, &a), PTL_OK);
  ASSERT_EQ(PtlCTAlloc(ni_, &b), PTL_OK);
  ASSERT_EQ(PtlCTAlloc(ni_, &c), PTL_OK);
  ASSERT_EQ(PtlTriggeredCTInc(b, ptl_ct_event_t{1, 0}, a, 2), PTL_OK);
  ASSERT_EQ(PtlTriggeredCTSet(c, ptl_ct_event_t{10, 0}, b, 1), PTL_OK);
  EXPECT_EQ(PtlTriggeredCTInc(b, ptl_ct_event_t{1, 1}, a, 2), PTL_ARG_INVALID);  // R-T8
  ASSERT_EQ(PtlCTInc(a, ptl_ct_event_t{1, 0}), PTL_OK);
  ptl_ct_event_t v{};
  ASSERT_EQ(PtlCTGet(c, &v), PTL_OK);
  EXPECT_EQ(v.success, 0u);
  ASSERT_EQ(PtlCTInc(a, ptl_ct_event_t{1, 0}), PTL_OK);
  ASSERT_EQ(PtlCTGet(c, &v), PTL_OK);
  EXPECT_EQ(v.success, 10u);
}

/// R-T1 with counts near the top of their range: success + failure wrapped
/// to a small sum, and a threshold the true sum passed was never reached.
TEST_P(Atomics, R_T1_ASumBeyondTheRangeStillReachesTheThreshold) {
  ptl_handle_ct_t a, b;
  ASSERT_EQ(PtlCTAlloc(ni_, &a), PTL_OK);
  ASSERT_EQ(PtlCTAlloc(ni_, &b), PTL_OK);
  ASSERT_EQ(PtlTriggeredCTInc(b, ptl_ct_event_t{1, 0}, a, 5), PTL_OK);
  ASSERT_EQ(PtlCTSet(a, ptl_ct_event_t{~ptl_size_t{0}, 1}), PTL_OK);  // wraps to 0
  ptl_ct_event_t v{};
  ASSERT_EQ(PtlCTGet(b, &v), PTL_OK);
  EXPECT_EQ(v.success, 1u);
}

TEST_P(Atomics, R_T6_CancelDestroysPendingOperations) {
  ptl_handle_ct_t trig;
  ASSERT_EQ(PtlCTAlloc(ni_, &trig), PTL_OK);
  ASSERT_EQ(PtlTriggeredPut(put_md_, 0, 4, PTL_ACK_REQ, self_, pt_, 0, 0, nullptr, 0, trig, 1),
            PTL_OK);
  ASSERT_EQ(PtlCTCancelTriggered(trig), PTL_OK);
  ASSERT_EQ(PtlCTInc(trig, ptl_ct_event_t{5, 0}), PTL_OK);
  ptl_ct_event_t v{};
  ASSERT_EQ(PtlCTGet(trig, &v), PTL_OK);
  EXPECT_EQ(v.success, 5u);  // the value is untouched by the cancel
  EXPECT_TRUE(eq_empty(ieq_));
  // Later triggered operations work as usual.
  ASSERT_EQ(PtlTriggeredPut(put_md_, 0, 4, PTL_ACK_REQ, self_, pt_, 0, 0, nullptr, 0, trig, 6),
            PTL_OK);
  ASSERT_EQ(PtlCTInc(trig, ptl_ct_event_t{1, 0}), PTL_OK);
  finish(PTL_EVENT_ACK);
}

TEST_P(Atomics, R_T8_ArgumentErrorsAtCallTime) {
  ptl_handle_ct_t trig;
  ASSERT_EQ(PtlCTAlloc(ni_, &trig), PTL_OK);
  EXPECT_EQ(PtlTriggeredPut(put_md_, 0, 4096, PTL_ACK_REQ, self_, pt_, 0, 0, nullptr, 0, trig, 1),
            PTL_ARG_INVALID);
  EXPECT_EQ(
      PtlTriggeredPut(put_md_, 0, 4, PTL_ACK_REQ, self_, pt_, 0, 0, nullptr, 0, PTL_CT_NONE, 1),
      PTL_ARG_INVALID);
  EXPECT_EQ(PtlTriggeredAtomic(put_md_, 0, 8, PTL_NO_ACK_REQ, self_, pt_, 0, 0, nullptr, 0,
                               PTL_BXOR, PTL_DOUBLE, trig, 1),
            PTL_ARG_INVALID);
  ASSERT_EQ(PtlCTFree(trig), PTL_OK);  // R-T7 nothing pending here; frees cleanly
}

TEST_P(Atomics, TriggeredAtomicAndFetchRun) {
  ptl_handle_ct_t trig;
  ASSERT_EQ(PtlCTAlloc(ni_, &trig), PTL_OK);
  t<std::int64_t>()[0] = 5;
  s<std::int64_t>()[0] = 3;
  ASSERT_EQ(PtlTriggeredAtomic(put_md_, 0, 8, PTL_ACK_REQ, self_, pt_, 0, 0, nullptr, 0, PTL_SUM,
                               PTL_INT64_T, trig, 1),
            PTL_OK);
  ASSERT_EQ(PtlTriggeredFetchAtomic(get_md_, 0, put_md_, 0, 8, self_, pt_, 0, 0, nullptr, 0,
                                    PTL_SUM, PTL_INT64_T, trig, 1),
            PTL_OK);
  std::int64_t operand = 11;
  ASSERT_EQ(PtlTriggeredSwap(get_md_, 8, put_md_, 0, 8, self_, pt_, 0, 0, nullptr, 0, &operand,
                             PTL_CSWAP, PTL_INT64_T, trig, 1),
            PTL_OK);
  ASSERT_EQ(PtlCTInc(trig, ptl_ct_event_t{1, 0}), PTL_OK);
  auto evs = events_until(ieq_, PTL_EVENT_ACK);
  (void)events_until(ieq_, PTL_EVENT_REPLY);
  (void)events_until(ieq_, PTL_EVENT_REPLY);
  EXPECT_EQ(f<std::int64_t>()[0], 8);   // 5 + 3 applied first, in issue order
  EXPECT_EQ(f<std::int64_t>()[1], 11);  // 8 + 3, then compared with 11
  EXPECT_EQ(t<std::int64_t>()[0], 3);   // 11 == 11: swapped in the put value
}

TEST_P(Atomics, TriggeredMEAppendAndUnlink) {
  ptl_handle_ct_t trig;
  ASSERT_EQ(PtlCTAlloc(ni_, &trig), PTL_OK);
  std::uint32_t slot[2] = {};
  ptl_me_t m = me(slot, sizeof slot, PTL_ME_OP_PUT, 0x77);
  ptl_handle_me_t h = PTL_INVALID_HANDLE;
  int tag = 0;
  ASSERT_EQ(PtlTriggeredMEAppend(ni_, pt_, &m, PTL_PRIORITY_LIST, &tag, &h, trig, 1), PTL_OK);
  EXPECT_TRUE(eq_empty(teq_));
  ASSERT_EQ(PtlCTInc(trig, ptl_ct_event_t{1, 0}), PTL_OK);
  ptl_event_t link = next_event(teq_);
  EXPECT_EQ(link.type, PTL_EVENT_LINK);
  EXPECT_EQ(link.user_ptr, &tag);
  ASSERT_NE(h, PTL_INVALID_HANDLE);
  ASSERT_EQ(PtlTriggeredMEUnlink(h, trig, 2), PTL_OK);
  ASSERT_EQ(PtlCTInc(trig, ptl_ct_event_t{1, 0}), PTL_OK);
  EXPECT_EQ(PtlMEUnlink(h), PTL_ARG_INVALID);  // already gone
}

/// A triggered append released by a message's count (counted on whichever
/// thread progressed the message) has written its handle by the time the
/// count can be seen: the CT waits read the count without the LIB's lock.
TEST_P(Atomics, ATriggeredAppendReleasedByAMessageIsDoneWhenItsCountShows) {
  ptl_handle_ct_t ct;
  ASSERT_EQ(PtlCTAlloc(ni_, &ct), PTL_OK);
  std::uint32_t slot[2] = {};
  ptl_me_t counting =
      me(slot, sizeof slot, PTL_ME_OP_PUT | PTL_ME_EVENT_CT_COMM | PTL_ME_EVENT_COMM_DISABLE, 0x78);
  counting.ct_handle = ct;
  ptl_handle_me_t counting_handle = PTL_INVALID_HANDLE;
  ASSERT_EQ(PtlMEAppend(ni_, pt_, &counting, PTL_PRIORITY_LIST, nullptr, &counting_handle), PTL_OK);
  ASSERT_EQ(next_event(teq_).type, PTL_EVENT_LINK);
  ptl_handle_md_t quiet =
      bind(source_, sizeof source_, PTL_MD_EVENT_SEND_DISABLE | PTL_MD_EVENT_SUCCESS_DISABLE);
  std::uint32_t other[2] = {};
  ptl_me_t released = me(other, sizeof other, PTL_ME_OP_PUT | PTL_ME_EVENT_LINK_DISABLE, 0x99);
  for (ptl_size_t i = 1; i <= 32; ++i) {
    ptl_handle_me_t h = PTL_INVALID_HANDLE;
    ASSERT_EQ(PtlTriggeredMEAppend(ni_, pt_, &released, PTL_PRIORITY_LIST, nullptr, &h, ct, i),
              PTL_OK);
    ASSERT_EQ(PtlPut(quiet, 0, 4, PTL_NO_ACK_REQ, self_, pt_, 0x78, 0, nullptr, 0), PTL_OK);
    // Time for the progress thread, when there is one, to count it.
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ASSERT_EQ(ct_wait(ct, i).success, i);
    ASSERT_NE(h, PTL_INVALID_HANDLE) << "count " << i << " seen before its append ran";
    ASSERT_EQ(PtlMEUnlink(h), PTL_OK);
  }
}

/// R-T1 for a triggered unlink released by the entry's own counting event:
/// the message that counted is still landing (the count comes first), so
/// the unlink met PTL_IN_USE and was dropped; the entry stayed and took the
/// next put. It now leaves its list at once and goes when idle.
TEST_P(Atomics, R_T1_ATriggeredUnlinkReleasedByItsOwnEntrysCountHappens) {
  ptl_handle_ct_t ct;
  ASSERT_EQ(PtlCTAlloc(ni_, &ct), PTL_OK);
  std::uint32_t slot[2] = {};
  ptl_me_t m = me(slot, sizeof slot, PTL_ME_OP_PUT | PTL_ME_EVENT_CT_COMM, 0x78);
  m.ct_handle = ct;
  ptl_handle_me_t h = PTL_INVALID_HANDLE;
  ASSERT_EQ(PtlMEAppend(ni_, pt_, &m, PTL_PRIORITY_LIST, nullptr, &h), PTL_OK);
  ASSERT_EQ(next_event(teq_).type, PTL_EVENT_LINK);
  ASSERT_EQ(PtlTriggeredMEUnlink(h, ct, 1), PTL_OK);
  ASSERT_EQ(PtlPut(put_md_, 0, 4, PTL_ACK_REQ, self_, pt_, 0x78, 0, nullptr, 0), PTL_OK);
  (void)events_until(ieq_, PTL_EVENT_ACK);
  ct_wait(ct, 1);
  (void)next_event(teq_);  // the PUT
  // Gone: the explicit unlink finds nothing, and the next put is dropped.
  EXPECT_EQ(PtlMEUnlink(h), PTL_ARG_INVALID);
  ptl_sr_value_t before = 0, after = 0;
  ASSERT_EQ(PtlNIStatus(ni_, PTL_SR_DROP_COUNT, &before), PTL_OK);
  ASSERT_EQ(PtlPut(put_md_, 0, 4, PTL_ACK_REQ, self_, pt_, 0x78, 0, nullptr, 0), PTL_OK);
  auto evs = events_until(ieq_, PTL_EVENT_ACK);
  ASSERT_FALSE(evs.empty());
  EXPECT_NE(evs.back().ni_fail_type, PTL_NI_OK);
  ASSERT_EQ(PtlNIStatus(ni_, PTL_SR_DROP_COUNT, &after), PTL_OK);
  EXPECT_EQ(after, before + 1);
}

TEST_P(Atomics, R_T7_FreeingTheCounterDestroysItsOperations) {
  ptl_handle_ct_t trig, other;
  ASSERT_EQ(PtlCTAlloc(ni_, &trig), PTL_OK);
  ASSERT_EQ(PtlCTAlloc(ni_, &other), PTL_OK);
  ASSERT_EQ(PtlTriggeredPut(put_md_, 0, 4, PTL_ACK_REQ, self_, pt_, 0, 0, nullptr, 0, trig, 1),
            PTL_OK);
  ASSERT_EQ(PtlTriggeredCTInc(other, ptl_ct_event_t{1, 0}, trig, 1), PTL_OK);
  ASSERT_EQ(PtlCTFree(trig), PTL_OK);
  // A new counter in the same slot must not inherit them.
  ptl_handle_ct_t again;
  ASSERT_EQ(PtlCTAlloc(ni_, &again), PTL_OK);
  ASSERT_EQ(PtlCTInc(again, ptl_ct_event_t{5, 0}), PTL_OK);
  ptl_ct_event_t v{};
  ASSERT_EQ(PtlCTGet(other, &v), PTL_OK);
  EXPECT_EQ(v.success, 0u);
  EXPECT_TRUE(eq_empty(ieq_));
}

// PTL_COHERENT_ATOMICS: while Portals atomics add to memory, another thread
// of the process adds to it with the host's own atomic instruction; no add
// of either is lost. Before the LIB used the host's instructions, its plain
// load and store lost the other thread's adds that came between them.

/// Sends `adds` PtlAtomic SUMs of `md` (`length` bytes of `type`) to the
/// entry of `bits`, counting on `landed`, while a thread runs `host_add`
/// in a loop; every add has landed when it returns. The thread's count of
/// adds goes to `host_adds`.
template <class HostAdd>
void race_with_host(ptl_handle_md_t md, ptl_size_t length, ptl_datatype_t type,
                    ptl_match_bits_t bits, ptl_handle_ct_t landed, std::uint64_t adds,
                    ptl_process_t self, ptl_pt_index_t pt, HostAdd host_add,
                    std::uint64_t& host_adds) {
  std::atomic<bool> stop{false};
  std::atomic<bool> started{false};
  host_adds = 0;
  std::jthread host([&] {
    while (!stop.load(std::memory_order_relaxed)) {
      host_add();
      ++host_adds;
      started.store(true, std::memory_order_release);
    }
  });
  // Stops and joins the thread on every way out, a failed ASSERT's too.
  struct Stop {
    std::atomic<bool>& flag;
    std::jthread& thread;
    ~Stop() {
      flag = true;
      if (thread.joinable()) thread.join();
    }
  } stopper{stop, host};
  std::uint64_t sent = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  // The host's adds race with ours only once its thread runs: on a loaded
  // machine it was not scheduled before all of ours had landed (1 run in 30
  // with two CPU hogs), and the test saw no host add at all.
  while (!started.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  while (sent < adds && std::chrono::steady_clock::now() < deadline) {
    const int rc =
        PtlAtomic(md, 0, length, PTL_NO_ACK_REQ, self, pt, bits, 0, nullptr, 0, PTL_SUM, type);
    if (rc == PTL_NO_SPACE) {
      ptl_ct_event_t v{};
      (void)PtlCTGet(landed, &v);  // lets progress run
      continue;
    }
    ASSERT_EQ(rc, PTL_OK);
    ++sent;
  }
  const ptl_ct_event_t v = ct_wait(landed, adds);
  EXPECT_EQ(v.success, adds);
  EXPECT_EQ(v.failure, 0u);
}

TEST_P(Atomics, CoherentAtomicsLoseNoAddOfTheHostsOwnAtomics) {
  ASSERT_NE(limits_.features & PTL_COHERENT_ATOMICS, 0u);
  constexpr ptl_match_bits_t bits = 7;
  constexpr std::uint64_t portals_adds = 40000;
  alignas(8) static std::uint64_t word;
  word = 0;
  ptl_handle_ct_t landed;
  ASSERT_EQ(PtlCTAlloc(ni_, &landed), PTL_OK);
  append(me(&word, sizeof word, PTL_ME_OP_PUT | PTL_ME_EVENT_COMM_DISABLE | PTL_ME_EVENT_CT_COMM,
            bits, 0, landed));
  (void)next_event(teq_);  // the LINK event
  alignas(8) static std::uint64_t one = 1;
  const ptl_handle_md_t md = bind(&one, sizeof one, PTL_MD_EVENT_SUCCESS_DISABLE);
  std::uint64_t host_adds = 0;
  race_with_host(
      md, sizeof one, PTL_UINT64_T, bits, landed, portals_adds, self_, pt_,
      [] { std::atomic_ref<std::uint64_t>(word).fetch_add(1); }, host_adds);
  EXPECT_GT(host_adds, 0u);
  EXPECT_EQ(std::atomic_ref<std::uint64_t>(word).load(), portals_adds + host_adds)
      << (portals_adds + host_adds - word) << " adds lost";
  EXPECT_EQ(PtlCTFree(landed), PTL_OK);
}

// The same for 16-byte elements: Portals add (1, 0) to a double complex
// while a thread adds (0, 1) with the host's 16-byte compare-and-swap. Each
// part counts one side's adds, so a lost update shows in its own part.
TEST_P(Atomics, CoherentAtomicsLoseNoAddOfTheHostsOwnSixteenByteAtomics) {
  using Word = unsigned __int128;
  using Complex = std::complex<double>;
  constexpr ptl_match_bits_t bits = 8;
  constexpr std::uint64_t portals_adds = 20000;
  alignas(16) static Complex value;
  value = Complex(0, 0);
  ptl_handle_ct_t landed;
  ASSERT_EQ(PtlCTAlloc(ni_, &landed), PTL_OK);
  append(me(&value, sizeof value, PTL_ME_OP_PUT | PTL_ME_EVENT_COMM_DISABLE | PTL_ME_EVENT_CT_COMM,
            bits, 0, landed));
  (void)next_event(teq_);  // the LINK event
  alignas(16) static Complex one(1, 0);
  const ptl_handle_md_t md = bind(&one, sizeof one, PTL_MD_EVENT_SUCCESS_DISABLE);
  const auto host_add = [] {
    auto* word = reinterpret_cast<Word*>(&value);
    Word seen = __atomic_load_n(word, __ATOMIC_RELAXED);
    for (;;) {
      Complex c;
      std::memcpy(static_cast<void*>(&c), &seen, sizeof c);
      c += Complex(0, 1);
      Word next;
      std::memcpy(&next, &c, sizeof c);
      if (__atomic_compare_exchange_n(word, &seen, next, true, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
        return;
    }
  };
  std::uint64_t host_adds = 0;
  race_with_host(md, sizeof one, PTL_DOUBLE_COMPLEX, bits, landed, portals_adds, self_, pt_,
                 host_add, host_adds);
  EXPECT_GT(host_adds, 0u);
  const Word last = __atomic_load_n(reinterpret_cast<Word*>(&value), __ATOMIC_SEQ_CST);
  Complex final;
  std::memcpy(static_cast<void*>(&final), &last, sizeof final);
  EXPECT_EQ(final.real(), static_cast<double>(portals_adds)) << "Portals adds lost";
  EXPECT_EQ(final.imag(), static_cast<double>(host_adds))
      << (static_cast<double>(host_adds) - final.imag()) << " host adds lost";
  EXPECT_EQ(PtlCTFree(landed), PTL_OK);
}

// And for long double, whose padding bytes the LIB stores as zero: the
// thread's compare-and-swap, which compares all 16 bytes, still succeeds.
TEST_P(Atomics, CoherentAtomicsLoseNoAddOfTheHostsOwnLongDoubleAtomics) {
  using Word = unsigned __int128;
  if (sizeof(long double) != sizeof(Word)) GTEST_SKIP() << "long double is not 16 bytes here";
  constexpr ptl_match_bits_t bits = 10;
  constexpr std::uint64_t portals_adds = 20000;
  alignas(16) static long double value;
  value = 0;
  ptl_handle_ct_t landed;
  ASSERT_EQ(PtlCTAlloc(ni_, &landed), PTL_OK);
  append(me(&value, sizeof value, PTL_ME_OP_PUT | PTL_ME_EVENT_COMM_DISABLE | PTL_ME_EVENT_CT_COMM,
            bits, 0, landed));
  (void)next_event(teq_);  // the LINK event
  alignas(16) static long double one = 1;
  const ptl_handle_md_t md = bind(&one, sizeof one, PTL_MD_EVENT_SUCCESS_DISABLE);
  const auto host_add = [] {
    auto* word = reinterpret_cast<Word*>(&value);
    Word seen = __atomic_load_n(word, __ATOMIC_RELAXED);
    for (;;) {
      long double v;
      std::memcpy(static_cast<void*>(&v), &seen, sizeof v);
      v += 1;
      Word next = 0;
      std::memcpy(&next, &v, 10);  // the value's bytes; the padding stays zero
      if (__atomic_compare_exchange_n(word, &seen, next, true, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
        return;
    }
  };
  std::uint64_t host_adds = 0;
  race_with_host(md, sizeof one, PTL_LONG_DOUBLE, bits, landed, portals_adds, self_, pt_, host_add,
                 host_adds);
  EXPECT_GT(host_adds, 0u);
  const Word last = __atomic_load_n(reinterpret_cast<Word*>(&value), __ATOMIC_SEQ_CST);
  long double final = 0;
  std::memcpy(static_cast<void*>(&final), &last, sizeof final);
  EXPECT_EQ(final, static_cast<long double>(portals_adds + host_adds))
      << static_cast<double>(static_cast<long double>(portals_adds + host_adds) - final)
      << " adds lost";
  EXPECT_EQ(last >> 80, Word{0}) << "padding bytes left non-zero";
  EXPECT_EQ(PtlCTFree(landed), PTL_OK);
}

// An atomic over a range across two iovec elements: each element of the
// datatype inside one iovec element is updated in place with the host's
// compare-and-swap. The range was gathered into a copy, operated on and
// scattered back, losing the adds a thread made meanwhile.
TEST_P(Atomics, CoherentAtomicsAcrossIovecElementsLoseNoAddOfTheHost) {
  constexpr ptl_match_bits_t bits = 9;
  constexpr std::uint64_t portals_adds = 20000;
  alignas(64) static std::uint64_t first;
  alignas(64) static std::uint64_t second;
  first = second = 0;
  ptl_iovec_t target[2] = {{&first, sizeof first}, {&second, sizeof second}};
  ptl_handle_ct_t landed;
  ASSERT_EQ(PtlCTAlloc(ni_, &landed), PTL_OK);
  append(me(target, 2, PTL_IOVEC | PTL_ME_OP_PUT | PTL_ME_EVENT_COMM_DISABLE | PTL_ME_EVENT_CT_COMM,
            bits, 0, landed));
  (void)next_event(teq_);  // the LINK event
  alignas(8) static std::uint64_t ones[2] = {1, 1};
  const ptl_handle_md_t md = bind(ones, sizeof ones, PTL_MD_EVENT_SUCCESS_DISABLE);
  std::uint64_t host_adds = 0;
  race_with_host(
      md, sizeof ones, PTL_UINT64_T, bits, landed, portals_adds, self_, pt_,
      [] { std::atomic_ref<std::uint64_t>(second).fetch_add(1); }, host_adds);
  EXPECT_GT(host_adds, 0u);
  EXPECT_EQ(std::atomic_ref<std::uint64_t>(first).load(), portals_adds);
  EXPECT_EQ(std::atomic_ref<std::uint64_t>(second).load(), portals_adds + host_adds)
      << (portals_adds + host_adds - second) << " adds lost";
  EXPECT_EQ(PtlCTFree(landed), PTL_OK);
}

INSTANTIATE_TEST_SUITE_P(Cells, Atomics, ::testing::Values(false, true), cell_name);

}  // namespace
}  // namespace pier::portals::test
