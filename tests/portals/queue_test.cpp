// PORTALS4.md §6.9-§6.10 (local): event queues, counting events, PtlAbort.
#include <array>
#include <chrono>
#include <future>
#include <thread>

#include "fixture.hpp"

namespace pier::portals::test {
namespace {

class Queues : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(PtlInit(), PTL_OK);
    ASSERT_EQ(PtlNIInit(PTL_IFACE_DEFAULT, PTL_NI_MATCHING | PTL_NI_PHYSICAL, PTL_PID_ANY, nullptr,
                        nullptr, &ni_),
              PTL_OK);
  }
  void TearDown() override {
    PtlNIFini(ni_);
    PtlFini();
  }
  /// `n` LINK events on `eq`, user_ptr 1..n, from appends to a fresh index.
  void links(ptl_handle_eq_t eq, int n) {
    ptl_pt_index_t pt;
    ASSERT_EQ(PtlPTAlloc(ni_, 0, eq, PTL_PT_ANY, &pt), PTL_OK);
    for (int i = 1; i <= n; ++i) {
      ptl_me_t m{};
      m.ct_handle = PTL_CT_NONE;
      m.uid = PTL_UID_ANY;
      m.options = PTL_ME_OP_PUT;
      m.match_id.phys.nid = PTL_NID_ANY;
      m.match_id.phys.pid = PTL_PID_ANY;
      ptl_handle_me_t h;
      ASSERT_EQ(PtlMEAppend(ni_, pt, &m, PTL_PRIORITY_LIST, reinterpret_cast<void*>(i), &h),
                PTL_OK);
    }
  }
  ptl_handle_ni_t ni_ = PTL_INVALID_HANDLE;
};

TEST_F(Queues, R_Q1_EventsComeInPostedOrder) {
  ptl_handle_eq_t eq;
  ASSERT_EQ(PtlEQAlloc(ni_, 16, &eq), PTL_OK);
  links(eq, 5);
  for (long i = 1; i <= 5; ++i) {
    ptl_event_t ev{};
    ASSERT_EQ(PtlEQWait(eq, &ev), PTL_OK);
    EXPECT_EQ(ev.type, PTL_EVENT_LINK);
    EXPECT_EQ(ev.user_ptr, reinterpret_cast<void*>(i));
  }
}

TEST_F(Queues, R_Q2_FullQueueOverwritesOldestAndR_Q6_DroppedConsumesOne) {
  ptl_handle_eq_t eq;
  ASSERT_EQ(PtlEQAlloc(ni_, 2, &eq), PTL_OK);
  links(eq, 4);
  ptl_event_t ev{};
  ASSERT_EQ(PtlEQGet(eq, &ev), PTL_EQ_DROPPED);
  EXPECT_EQ(ev.user_ptr, reinterpret_cast<void*>(3));
  ASSERT_EQ(PtlEQGet(eq, &ev), PTL_OK);
  EXPECT_EQ(ev.user_ptr, reinterpret_cast<void*>(4));
  EXPECT_EQ(PtlEQGet(eq, &ev), PTL_EQ_EMPTY);  // R-Q3
}

TEST_F(Queues, R_Q4_PollTimesOutEmptyAndNamesTheQueue) {
  ptl_handle_eq_t eqs[2];
  ASSERT_EQ(PtlEQAlloc(ni_, 4, &eqs[0]), PTL_OK);
  ASSERT_EQ(PtlEQAlloc(ni_, 4, &eqs[1]), PTL_OK);
  ptl_event_t ev{};
  unsigned which = 99;
  EXPECT_EQ(PtlEQPoll(eqs, 2, 20, &ev, &which), PTL_EQ_EMPTY);
  EXPECT_EQ(PtlEQPoll(eqs, 2, 0, &ev, &which), PTL_EQ_EMPTY);
  links(eqs[1], 1);
  ASSERT_EQ(PtlEQPoll(eqs, 2, wait_ms, &ev, &which), PTL_OK);
  EXPECT_EQ(which, 1u);
  EXPECT_EQ(PtlEQPoll(eqs, 0, 0, &ev, &which), PTL_ARG_INVALID);
}

/// A poll without room for the event is refused and takes nothing (it
/// took the event off the queue and dropped it; found by a review).
TEST_F(Queues, APollWithoutAnEventToFillLosesNothing) {
  ptl_handle_eq_t eq;
  ASSERT_EQ(PtlEQAlloc(ni_, 4, &eq), PTL_OK);
  links(eq, 1);
  unsigned which = 0;
  EXPECT_EQ(PtlEQPoll(&eq, 1, 0, nullptr, &which), PTL_ARG_INVALID);
  ptl_event_t ev{};
  ASSERT_EQ(PtlEQGet(eq, &ev), PTL_OK);
  EXPECT_EQ(ev.type, PTL_EVENT_LINK);
}

TEST_F(Queues, R_Q5_PollAcrossNIsIsInvalid) {
  ptl_handle_ni_t other;
  ASSERT_EQ(PtlNIInit(PTL_IFACE_DEFAULT, PTL_NI_NO_MATCHING | PTL_NI_PHYSICAL, PTL_PID_ANY, nullptr,
                      nullptr, &other),
            PTL_OK);
  ptl_handle_eq_t eqs[2];
  ASSERT_EQ(PtlEQAlloc(ni_, 4, &eqs[0]), PTL_OK);
  ASSERT_EQ(PtlEQAlloc(other, 4, &eqs[1]), PTL_OK);
  ptl_event_t ev{};
  unsigned which;
  EXPECT_EQ(PtlEQPoll(eqs, 2, 0, &ev, &which), PTL_ARG_INVALID);
  ptl_handle_ct_t cts[2];
  ptl_size_t tests[2] = {1, 1};
  ASSERT_EQ(PtlCTAlloc(ni_, &cts[0]), PTL_OK);
  ASSERT_EQ(PtlCTAlloc(other, &cts[1]), PTL_OK);
  ptl_ct_event_t v;
  EXPECT_EQ(PtlCTPoll(cts, tests, 2, 0, &v, &which), PTL_ARG_INVALID);
  PtlNIFini(other);
}

TEST_F(Queues, R_C6_NewSetAndIncrement) {
  ptl_handle_ct_t ct;
  ASSERT_EQ(PtlCTAlloc(ni_, &ct), PTL_OK);
  ptl_ct_event_t v{9, 9};
  ASSERT_EQ(PtlCTGet(ct, &v), PTL_OK);
  EXPECT_EQ(v.success, 0u);
  EXPECT_EQ(v.failure, 0u);
  ASSERT_EQ(PtlCTSet(ct, ptl_ct_event_t{5, 2}), PTL_OK);
  ASSERT_EQ(PtlCTInc(ct, ptl_ct_event_t{3, 0}), PTL_OK);
  ASSERT_EQ(PtlCTInc(ct, ptl_ct_event_t{0, 1}), PTL_OK);
  EXPECT_EQ(PtlCTInc(ct, ptl_ct_event_t{1, 1}), PTL_ARG_INVALID);
  ASSERT_EQ(PtlCTGet(ct, &v), PTL_OK);
  EXPECT_EQ(v.success, 8u);
  EXPECT_EQ(v.failure, 3u);
}

// CT values are read from API-side mirrors the LIB writes: a read must still
// refuse every handle the LIB would, and a CT allocated again at the same
// index must not show the old one's value.
TEST_F(Queues, CountReadsRefuseStaleAndForeignHandles) {
  ptl_handle_ct_t ct;
  ASSERT_EQ(PtlCTAlloc(ni_, &ct), PTL_OK);
  ASSERT_EQ(PtlCTSet(ct, ptl_ct_event_t{7, 0}), PTL_OK);
  ptl_ct_event_t v{};
  ptl_size_t test = 1;
  unsigned which = 0;
  ASSERT_EQ(PtlCTGet(ct, &v), PTL_OK);
  EXPECT_EQ(v.success, 7u);
  ASSERT_EQ(PtlCTFree(ct), PTL_OK);
  v = ptl_ct_event_t{42, 42};
  EXPECT_EQ(PtlCTGet(ct, &v), PTL_ARG_INVALID);
  EXPECT_EQ(v.success, 42u) << "an output written on failure";
  EXPECT_EQ(PtlCTWait(ct, 1, &v), PTL_ARG_INVALID);
  EXPECT_EQ(PtlCTPoll(&ct, &test, 1, 0, &v, &which), PTL_ARG_INVALID);
  // The slot again, under a new handle: fresh value, old handle still dead.
  ptl_handle_ct_t again;
  ASSERT_EQ(PtlCTAlloc(ni_, &again), PTL_OK);
  EXPECT_NE(again, ct);
  ASSERT_EQ(PtlCTGet(again, &v), PTL_OK);
  EXPECT_EQ(v.success, 0u);
  EXPECT_EQ(PtlCTGet(ct, &v), PTL_ARG_INVALID);
  // A handle of another kind, or forged bits, never reads a counter.
  ptl_handle_eq_t eq;
  ASSERT_EQ(PtlEQAlloc(ni_, 4, &eq), PTL_OK);
  EXPECT_EQ(PtlCTGet(eq, &v), PTL_ARG_INVALID);
  EXPECT_EQ(PtlCTGet(again ^ 0x00010000u, &v), PTL_ARG_INVALID);
  EXPECT_EQ(PtlCTGet(PTL_CT_NONE, &v), PTL_ARG_INVALID);
  // Mixed NIs in one poll stay invalid, as in the LIB.
  ptl_handle_ni_t other;
  ASSERT_EQ(PtlNIInit(PTL_IFACE_DEFAULT, PTL_NI_NO_MATCHING | PTL_NI_PHYSICAL, PTL_PID_ANY, nullptr,
                      nullptr, &other),
            PTL_OK);
  ptl_handle_ct_t theirs;
  ASSERT_EQ(PtlCTAlloc(other, &theirs), PTL_OK);
  ASSERT_EQ(PtlCTSet(theirs, ptl_ct_event_t{5, 0}), PTL_OK);
  const ptl_handle_ct_t mixed[2] = {again, theirs};
  const ptl_size_t tests[2] = {1, 1};
  EXPECT_EQ(PtlCTPoll(mixed, tests, 2, 0, &v, &which), PTL_ARG_INVALID);
  // Finalizing an NI ends its counters at once.
  PtlNIFini(other);
  EXPECT_EQ(PtlCTGet(theirs, &v), PTL_ARG_INVALID);
  EXPECT_EQ(PtlCTWait(theirs, 1, &v), PTL_ARG_INVALID);
}

// An NI finalized with messages in flight lingers until they end; its CTs
// are invalid at once all the same, even when those messages still count
// on them (here the acked put's send, then its ack).
TEST_F(Queues, CountsOfAFinalizedNIStayInvalidWhileItsMessagesEnd) {
  ptl_handle_ct_t ct;
  ASSERT_EQ(PtlCTAlloc(ni_, &ct), PTL_OK);
  char src[8] = {};
  ptl_md_t d{src, sizeof src, PTL_MD_EVENT_CT_SEND | PTL_MD_EVENT_CT_ACK, PTL_EQ_NONE, ct};
  ptl_handle_md_t md;
  ASSERT_EQ(PtlMDBind(ni_, &d, &md), PTL_OK);
  ptl_process_t self{};
  ASSERT_EQ(PtlGetPhysId(ni_, &self), PTL_OK);
  ASSERT_EQ(PtlPut(md, 0, sizeof src, PTL_CT_ACK_REQ, self, 0, 0, 0, nullptr, 0), PTL_OK);
  ASSERT_EQ(PtlNIFini(ni_), PTL_OK);
  ni_ = PTL_INVALID_HANDLE;
  ptl_ct_event_t v{};
  ptl_size_t one = 1;
  unsigned which = 0;
  for (int i = 0; i < 50; ++i) {
    ASSERT_EQ(PtlCTGet(ct, &v), PTL_ARG_INVALID) << "pass " << i;
    ASSERT_EQ(PtlCTPoll(&ct, &one, 1, 0, &v, &which), PTL_ARG_INVALID) << "pass " << i;
  }
}

TEST_F(Queues, R_C4_WaitEndsOnSuccessOrAnyFailure) {
  ptl_handle_ct_t ct;
  ASSERT_EQ(PtlCTAlloc(ni_, &ct), PTL_OK);
  ASSERT_EQ(PtlCTSet(ct, ptl_ct_event_t{4, 0}), PTL_OK);
  ptl_ct_event_t v{};
  ASSERT_EQ(PtlCTWait(ct, 4, &v), PTL_OK);
  EXPECT_EQ(v.success, 4u);
  ASSERT_EQ(PtlCTSet(ct, ptl_ct_event_t{0, 1}), PTL_OK);
  ASSERT_EQ(PtlCTWait(ct, 100, &v), PTL_OK);
  EXPECT_EQ(v.failure, 1u);
}

TEST_F(Queues, R_C5_PollReturnsLowestSatisfiedIndexOrTimesOut) {
  ptl_handle_ct_t cts[3];
  for (auto& c : cts) ASSERT_EQ(PtlCTAlloc(ni_, &c), PTL_OK);
  ptl_size_t tests[3] = {5, 2, 2};
  ptl_ct_event_t v{};
  unsigned which = 9;
  EXPECT_EQ(PtlCTPoll(cts, tests, 3, 10, &v, &which), PTL_CT_NONE_REACHED);
  ASSERT_EQ(PtlCTSet(cts[2], ptl_ct_event_t{2, 0}), PTL_OK);
  ASSERT_EQ(PtlCTSet(cts[1], ptl_ct_event_t{3, 0}), PTL_OK);
  ASSERT_EQ(PtlCTPoll(cts, tests, 3, 0, &v, &which), PTL_OK);
  EXPECT_EQ(which, 1u);
  EXPECT_EQ(v.success, 3u);
  EXPECT_EQ(PtlCTPoll(cts, tests, 0, 0, &v, &which), PTL_ARG_INVALID);
}

TEST_F(Queues, WaitWakesWhenAnotherThreadIncrements) {
  ptl_handle_ct_t ct;
  ASSERT_EQ(PtlCTAlloc(ni_, &ct), PTL_OK);
  auto waiter = std::async(std::launch::async, [ct] {
    ptl_ct_event_t v{};
    ptl_size_t test = 3;
    unsigned which;
    return PtlCTPoll(&ct, &test, 1, wait_ms, &v, &which);
  });
  for (int i = 0; i < 3; ++i) ASSERT_EQ(PtlCTInc(ct, ptl_ct_event_t{1, 0}), PTL_OK);
  ASSERT_EQ(waiter.wait_for(std::chrono::seconds(20)), std::future_status::ready);
  EXPECT_EQ(waiter.get(), PTL_OK);
}

/// A program that polls with timeout 0 between its own work: before, such
/// a poll never drove the core (only PtlEQGet/PtlCTGet did), so with the LIB
/// in the caller's thread a put to oneself never completed for it.
TEST_F(Queues, PollsWithTimeoutZeroMakeProgress) {
  ptl_handle_eq_t eq;
  ptl_handle_ct_t ct;
  ASSERT_EQ(PtlEQAlloc(ni_, 16, &eq), PTL_OK);
  ASSERT_EQ(PtlCTAlloc(ni_, &ct), PTL_OK);
  ptl_pt_index_t pt;
  ASSERT_EQ(PtlPTAlloc(ni_, 0, PTL_EQ_NONE, PTL_PT_ANY, &pt), PTL_OK);
  std::array<char, 8> dst{}, src{};
  ptl_me_t m{};
  m.start = dst.data();
  m.length = dst.size();
  m.ct_handle = PTL_CT_NONE;
  m.uid = PTL_UID_ANY;
  m.options = PTL_ME_OP_PUT;
  m.match_id.phys.nid = PTL_NID_ANY;
  m.match_id.phys.pid = PTL_PID_ANY;
  ptl_handle_me_t me;
  ASSERT_EQ(PtlMEAppend(ni_, pt, &m, PTL_PRIORITY_LIST, nullptr, &me), PTL_OK);
  ptl_md_t d{};
  d.start = src.data();
  d.length = src.size();
  d.options = PTL_MD_EVENT_CT_ACK;
  d.eq_handle = eq;
  d.ct_handle = ct;
  ptl_handle_md_t md;
  ASSERT_EQ(PtlMDBind(ni_, &d, &md), PTL_OK);
  ptl_process_t self{};
  ASSERT_EQ(PtlGetId(ni_, &self), PTL_OK);
  ASSERT_EQ(PtlPut(md, 0, 8, PTL_ACK_REQ, self, pt, 0, 0, nullptr, 0), PTL_OK);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  bool acked = false;
  while (!acked && std::chrono::steady_clock::now() < until) {
    ptl_event_t ev{};
    unsigned which = 0;
    if (PtlEQPoll(&eq, 1, 0, &ev, &which) == PTL_OK) acked = ev.type == PTL_EVENT_ACK;
  }
  EXPECT_TRUE(acked) << "PtlEQPoll(timeout 0) never saw the ACK";
  ASSERT_EQ(PtlPut(md, 0, 8, PTL_ACK_REQ, self, pt, 0, 0, nullptr, 0), PTL_OK);
  bool counted = false;
  while (!counted && std::chrono::steady_clock::now() < until + std::chrono::seconds(5)) {
    ptl_ct_event_t v{};
    ptl_size_t test = 2;
    unsigned which = 0;
    counted = PtlCTPoll(&ct, &test, 1, 0, &v, &which) == PTL_OK;
  }
  EXPECT_TRUE(counted) << "PtlCTPoll(timeout 0) never saw the second ACK counted";
}

/// One thread waits for ever; another's call must get in (before, the
/// waiter held the core's lock for whole turns and took it back before the
/// other thread was scheduled, so the other thread's call waited for ever
/// and the increment the waiter was waiting for never came).
TEST_F(Queues, AWaitingThreadDoesNotLockOutAnother) {
  ptl_handle_ct_t ct;
  ASSERT_EQ(PtlCTAlloc(ni_, &ct), PTL_OK);
  for (int round = 1; round <= 20; ++round) {
    auto waiter = std::async(std::launch::async, [ct, round] {
      ptl_ct_event_t v{};
      return PtlCTWait(ct, static_cast<ptl_size_t>(round), &v);
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    const auto t0 = std::chrono::steady_clock::now();
    ASSERT_EQ(PtlCTInc(ct, ptl_ct_event_t{1, 0}), PTL_OK);
    const auto took = std::chrono::steady_clock::now() - t0;
    ASSERT_EQ(waiter.wait_for(std::chrono::seconds(20)), std::future_status::ready)
        << "round " << round;
    EXPECT_EQ(waiter.get(), PTL_OK);
    // Generous: a 1 ms turn of the waiter is fine, seconds are not.
    EXPECT_LT(took, std::chrono::milliseconds(500)) << "round " << round;
  }
}

TEST_F(Queues, AbortEndsBlockedWaits) {
  ptl_handle_eq_t eq;
  ptl_handle_ct_t ct;
  ASSERT_EQ(PtlEQAlloc(ni_, 4, &eq), PTL_OK);
  ASSERT_EQ(PtlCTAlloc(ni_, &ct), PTL_OK);
  std::atomic<int> inside{0};
  auto eq_waiter = std::async(std::launch::async, [&] {
    ptl_event_t ev{};
    unsigned which;
    ++inside;
    return PtlEQPoll(&eq, 1, 30000, &ev, &which);
  });
  auto ct_waiter = std::async(std::launch::async, [&] {
    ptl_ct_event_t v{};
    ptl_size_t test = 1;
    unsigned which;
    ++inside;
    return PtlCTPoll(&ct, &test, 1, 30000, &v, &which);
  });
  // Abort until both have left: a waiter that had not started waiting yet
  // when an abort came would otherwise miss it (the flag lives only while
  // someone waits).
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while ((eq_waiter.wait_for(std::chrono::milliseconds(10)) != std::future_status::ready ||
          ct_waiter.wait_for(std::chrono::milliseconds(0)) != std::future_status::ready) &&
         std::chrono::steady_clock::now() < deadline)
    if (inside == 2) PtlAbort();
  ASSERT_EQ(eq_waiter.wait_for(std::chrono::seconds(1)), std::future_status::ready);
  ASSERT_EQ(ct_waiter.wait_for(std::chrono::seconds(1)), std::future_status::ready);
  EXPECT_EQ(eq_waiter.get(), PTL_ABORTED);
  EXPECT_EQ(ct_waiter.get(), PTL_ABORTED);
  // Nobody waits now: the abort is over, and Get is never affected.
  ptl_event_t ev{};
  EXPECT_EQ(PtlEQGet(eq, &ev), PTL_EQ_EMPTY);
  unsigned which;
  EXPECT_EQ(PtlEQPoll(&eq, 1, 0, &ev, &which), PTL_EQ_EMPTY);
}

TEST_F(Queues, MDBindRejectsBadOptionsAndForeignQueues) {
  char buf[8];
  ptl_handle_md_t md;
  ptl_md_t d{buf, sizeof buf, 0x8000, PTL_EQ_NONE, PTL_CT_NONE};
  EXPECT_EQ(PtlMDBind(ni_, &d, &md), PTL_ARG_INVALID);
  d.options = 0;
  d.eq_handle = 0x12345678;
  EXPECT_EQ(PtlMDBind(ni_, &d, &md), PTL_ARG_INVALID);
  d.eq_handle = PTL_EQ_NONE;
  ASSERT_EQ(PtlMDBind(ni_, &d, &md), PTL_OK);
  EXPECT_EQ(PtlMDRelease(md), PTL_OK);
  EXPECT_EQ(PtlMDRelease(md), PTL_ARG_INVALID);
}

}  // namespace
}  // namespace pier::portals::test
