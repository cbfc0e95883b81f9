// Stress and limits: use-once entries and unlinks racing incoming puts, 1024
// triggered operations pending, PtlNIFini with messages in flight.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "fixture.hpp"

namespace pier::portals::test {
namespace {

class Stress : public Portals {
 protected:
  /// An 8-byte entry counting the puts that land on `landed`, and the
  /// quiet MD the puts leave from.
  ptl_handle_md_t counted_sink(ptl_handle_ct_t landed) {
    append(me(sink_, sizeof sink_, PTL_ME_OP_PUT | PTL_ME_EVENT_CT_COMM | PTL_ME_EVENT_COMM_DISABLE,
              0, 0, landed));
    (void)next_event(teq_);
    return bind(source_, sizeof source_, PTL_MD_EVENT_SEND_DISABLE | PTL_MD_EVENT_SUCCESS_DISABLE);
  }
  /// Issues `n` operations, `issue(i)` the i-th: PTL_OK, or PTL_NO_SPACE
  /// while the LIB has no message state free, when the LIB is progressed
  /// (PtlCTGet of `progress_ct`) and the same one tried again. Adds to
  /// `refused` each refusal; fails the test after 30 s.
  template <class Issue>
  void issue_all(ptl_size_t n, ptl_handle_ct_t progress_ct, Issue issue,
                 ptl_size_t* refused = nullptr) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    for (ptl_size_t i = 0; i < n;) {
      const int rc = issue(i);
      if (rc == PTL_OK) {
        ++i;
        continue;
      }
      ASSERT_EQ(rc, PTL_NO_SPACE);
      ASSERT_LT(std::chrono::steady_clock::now(), deadline) << i << " issued";
      if (refused) ++*refused;
      ptl_ct_event_t v{};
      ASSERT_EQ(PtlCTGet(progress_ct, &v), PTL_OK);  // progresses the LIB
    }
  }
  /// `ct` counts `n` successes and no failure, and the NI dropped nothing.
  void expect_all_counted(ptl_handle_ct_t ct, ptl_size_t n) {
    ptl_ct_event_t v = ct_wait(ct, n);
    EXPECT_EQ(v.success, n);
    EXPECT_EQ(v.failure, 0u);
    ptl_sr_value_t dropped = -1;
    ASSERT_EQ(PtlNIStatus(ni_, PTL_SR_DROP_COUNT, &dropped), PTL_OK);
    EXPECT_EQ(dropped, 0);
  }
  char sink_[8] = {}, source_[8] = {};
};

constexpr ptl_match_bits_t race_bits = 5;

TEST_P(Stress, UseOnceAndUnlinkRaceIncomingPuts) {
  ptl_handle_ct_t acks, landed;
  ASSERT_EQ(PtlCTAlloc(ni_, &acks), PTL_OK);
  ASSERT_EQ(PtlCTAlloc(ni_, &landed), PTL_OK);
  char src[8] = {}, dst[64][8] = {};
  ptl_handle_md_t md =
      bind(src, sizeof source_,
           PTL_MD_EVENT_SEND_DISABLE | PTL_MD_EVENT_SUCCESS_DISABLE | PTL_MD_EVENT_CT_ACK, acks);
  constexpr int puts = 400;
  std::atomic<bool> stop{false};
  std::atomic<int> unlinked{0}, bad{0};
  // Another thread appends use-once entries and unlinks every other one at
  // once, while this thread's puts consume them.
  std::thread churn([&] {
    unsigned options = PTL_ME_OP_PUT | PTL_ME_USE_ONCE | PTL_ME_EVENT_CT_COMM |
                       PTL_ME_EVENT_COMM_DISABLE | PTL_ME_EVENT_LINK_DISABLE |
                       PTL_ME_EVENT_UNLINK_DISABLE;
    for (int i = 0; !stop.load(); ++i) {
      ptl_handle_me_t h;
      ptl_me_t m = me(dst[i % 64], 8, options, race_bits, 0, landed);
      int rc = PtlMEAppend(ni_, pt_, &m, PTL_PRIORITY_LIST, nullptr, &h);
      if (rc == PTL_LIST_TOO_LONG || rc == PTL_NO_SPACE) {
        std::this_thread::yield();
        continue;
      }
      if (rc != PTL_OK) {
        ++bad;
        break;
      }
      if (i % 2 == 0) {
        // Consumed already (stale handle), busy, or unlinked now.
        rc = PtlMEUnlink(h);
        if (rc == PTL_OK)
          ++unlinked;
        else if (rc != PTL_ARG_INVALID && rc != PTL_IN_USE)
          ++bad;
      }
    }
  });
  for (int i = 0; i < puts; ++i)
    ASSERT_EQ(PtlPut(md, 0, 8, PTL_CT_ACK_REQ, self_, pt_, race_bits, 0, nullptr, 0), PTL_OK);
  // A counter with failures satisfies every wait (§5.10), so poll it.
  ptl_ct_event_t a{};
  int rc = PTL_OK;
  for (int k = 0; k < 10000 && rc == PTL_OK && a.success + a.failure < puts; ++k) {
    rc = PtlCTGet(acks, &a);
    if (a.success + a.failure < puts) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  stop = true;
  churn.join();
  ASSERT_EQ(rc, PTL_OK);
  EXPECT_EQ(bad.load(), 0);
  // Every put was acked once: landed in a use-once entry or dropped.
  EXPECT_EQ(a.success + a.failure, ptl_size_t{puts});
  ptl_ct_event_t l{};
  ASSERT_EQ(PtlCTGet(landed, &l), PTL_OK);
  EXPECT_EQ(l.success, a.success);
  EXPECT_EQ(l.failure, 0u);
}

TEST_P(Stress, R_T_1024TriggeredOperationsPending) {
  ASSERT_GE(limits_.max_triggered_ops, 1024);
  ptl_handle_ct_t trig, landed;
  ASSERT_EQ(PtlCTAlloc(ni_, &trig), PTL_OK);
  ASSERT_EQ(PtlCTAlloc(ni_, &landed), PTL_OK);
  char src[8] = {}, dst[8] = {};
  append(me(dst, sizeof dst, PTL_ME_OP_PUT | PTL_ME_EVENT_CT_COMM | PTL_ME_EVENT_COMM_DISABLE, 9, 0,
            landed));
  (void)next_event(teq_);  // LINK
  ptl_handle_md_t md = bind(src, sizeof source_, PTL_MD_EVENT_SEND_DISABLE);
  constexpr ptl_size_t n = 1024;
  for (ptl_size_t i = 1; i <= n; ++i)
    ASSERT_EQ(PtlTriggeredPut(md, 0, 8, PTL_NO_ACK_REQ, self_, pt_, 9, 0, nullptr, 0, trig, i),
              PTL_OK)
        << i;
  ptl_ct_event_t v{};
  ASSERT_EQ(PtlCTGet(landed, &v), PTL_OK);
  EXPECT_EQ(v.success, 0u);  // nothing fired yet
  // Release them one threshold at a time.
  for (ptl_size_t i = 1; i <= n; ++i) {
    ASSERT_EQ(PtlCTInc(trig, ptl_ct_event_t{1, 0}), PTL_OK);
    if (i % 64 == 0) ct_wait(landed, i);
  }
  v = ct_wait(landed, n);
  EXPECT_EQ(v.success, n);
  EXPECT_EQ(v.failure, 0u);
}

TEST_P(Stress, NIFiniWithMessagesInFlight) {
  static char big[256 << 10];
  append(me(big, sizeof big, PTL_ME_OP_PUT | PTL_ME_OP_GET));
  (void)next_event(teq_);
  ptl_handle_md_t md = bind(big, sizeof big);
  for (int i = 0; i < 8; ++i)
    ASSERT_EQ(PtlPut(md, 0, sizeof big, PTL_ACK_REQ, self_, pt_, 0, 0, nullptr, 0), PTL_OK);
  ASSERT_EQ(PtlGet(md, 0, sizeof big, self_, pt_, 0, 0, nullptr), PTL_OK);
  // The NI goes while its messages are under way: no crash, its handles
  // are dead at once, and PtlFini (TearDown) lets the rest drain.
  ASSERT_EQ(PtlNIFini(ni_), PTL_OK);
  ptl_sr_value_t sr = 0;
  EXPECT_EQ(PtlNIStatus(ni_, PTL_SR_DROP_COUNT, &sr), PTL_ARG_INVALID);
  EXPECT_EQ(PtlPut(md, 0, 8, PTL_NO_ACK_REQ, self_, pt_, 0, 0, nullptr, 0), PTL_ARG_INVALID);
  ni_ = PTL_INVALID_HANDLE;
}

/// The same NI initialized again right after a PtlNIFini that left messages
/// in flight: PTL_NO_SPACE for as long as they lasted, and with nothing
/// progressing them (no progress thread), for ever (found by a review).
/// PtlNIInit now progresses them for up to 2 s.
TEST_P(Stress, NIInitAfterFiniWithMessagesInFlight) {
  static char big[256 << 10];
  append(me(big, sizeof big, PTL_ME_OP_PUT));
  (void)next_event(teq_);
  ptl_handle_md_t md = bind(big, sizeof big);
  for (int i = 0; i < 8; ++i)
    ASSERT_EQ(PtlPut(md, 0, sizeof big, PTL_ACK_REQ, self_, pt_, 0, 0, nullptr, 0), PTL_OK);
  ASSERT_EQ(PtlNIFini(ni_), PTL_OK);
  ni_ = PTL_INVALID_HANDLE;
  const unsigned options = PTL_NI_MATCHING | (logical() ? PTL_NI_LOGICAL : PTL_NI_PHYSICAL);
  ptl_ni_limits_t limits{};
  EXPECT_EQ(PtlNIInit(PTL_IFACE_DEFAULT, options, PTL_PID_ANY, nullptr, &limits, &ni_), PTL_OK);
}

// A burst of puts to oneself, far more than the LIB has message states:
// PtlPut may answer PTL_NO_SPACE (retried after progress), but a put it
// accepted is never dropped at the target for want of a state.
TEST_P(Stress, BurstOfPutsToOneselfLosesNothing) {
  ptl_handle_ct_t landed;
  ASSERT_EQ(PtlCTAlloc(ni_, &landed), PTL_OK);
  ptl_handle_md_t md = counted_sink(landed);
  constexpr ptl_size_t puts = 4096;  // four times PIER_LIB_MESSAGES
  ptl_size_t refused = 0;
  issue_all(
      puts, landed,
      [&](ptl_size_t) {
        return PtlPut(md, 0, sizeof source_, PTL_NO_ACK_REQ, self_, pt_, 0, 0, nullptr, 0);
      },
      &refused);
  expect_all_counted(landed, puts);
  RecordProperty("refused_with_no_space", static_cast<int>(refused));
}

// Triggered puts released all at once, more than initiators may hold message
// states (three quarters of PIER_LIB_MESSAGES, 1024): those that find none
// wait for one instead of being lost.
TEST_P(Stress, TriggeredBurstBeyondTheMessagePoolAllHappen) {
  ptl_handle_ct_t trigger, landed;
  ASSERT_EQ(PtlCTAlloc(ni_, &trigger), PTL_OK);
  ASSERT_EQ(PtlCTAlloc(ni_, &landed), PTL_OK);
  ptl_handle_md_t md = counted_sink(landed);
  const auto n = static_cast<ptl_size_t>(limits_.max_triggered_ops);
  ASSERT_GE(n, 1024u) << "needs more triggered operations than initiators may hold states";
  for (ptl_size_t i = 0; i < n; ++i)
    ASSERT_EQ(PtlTriggeredPut(md, 0, sizeof source_, PTL_NO_ACK_REQ, self_, pt_, 0, 0, nullptr, 0,
                              trigger, 1),
              PTL_OK);
  ASSERT_EQ(PtlCTInc(trigger, ptl_ct_event_t{1, 0}), PTL_OK);
  ptl_ct_event_t v = ct_wait(landed, n);
  EXPECT_EQ(v.success, n);
  EXPECT_EQ(v.failure, 0u);
}

/// The smallest message pool the LIB takes (PIER_LIB_MESSAGES=16): one
/// progress pass brings more arrivals than there are states left.
class SmallPool : public Stress {
 protected:
  void SetUp() override {
    ::setenv("PIER_LIB_MESSAGES", "16", 1);
    Stress::SetUp();
  }
  void TearDown() override {
    Stress::TearDown();
    ::unsetenv("PIER_LIB_MESSAGES");
  }
};

// Requests that find no message state wait in the core for one (their
// sender's credits stay spent) instead of being dropped, and keep their
// order: every put lands, none is counted as dropped, and the last one
// written is the last one sent. Each put leaves from its own 8 bytes: the
// library may read them until the put's send event (which is off here).
TEST_P(SmallPool, ArrivalsBeyondThePoolWaitForAState) {
  ptl_handle_ct_t landed;
  ASSERT_EQ(PtlCTAlloc(ni_, &landed), PTL_OK);
  (void)counted_sink(landed);
  constexpr ptl_size_t puts = 2000;
  std::vector<ptl_size_t> values(puts);
  for (ptl_size_t i = 0; i < puts; ++i) values[i] = i;
  ptl_handle_md_t md = bind(values.data(), puts * sizeof(ptl_size_t),
                            PTL_MD_EVENT_SEND_DISABLE | PTL_MD_EVENT_SUCCESS_DISABLE);
  issue_all(puts, landed, [&](ptl_size_t i) {
    return PtlPut(md, i * sizeof(ptl_size_t), sizeof(ptl_size_t), PTL_NO_ACK_REQ, self_, pt_, 0, 0,
                  nullptr, 0);
  });
  expect_all_counted(landed, puts);
  ptl_size_t last = 0;
  std::memcpy(&last, sink_, sizeof last);
  EXPECT_EQ(last, puts - 1);
}

// Gets to oneself, far beyond the states a target may hold: each target
// state is freed only once its reply has left, so a reply must never wait
// behind requests that are parked for want of a state (they keep their
// credit). Every get completes.
TEST_P(Stress, GetsToOneselfBeyondThePoolAllComplete) {
  ptl_handle_ct_t replies;
  ASSERT_EQ(PtlCTAlloc(ni_, &replies), PTL_OK);
  append(me(sink_, sizeof sink_, PTL_ME_OP_GET | PTL_ME_EVENT_COMM_DISABLE));
  (void)next_event(teq_);
  ptl_handle_md_t md = bind(
      source_, sizeof source_,
      PTL_MD_EVENT_SEND_DISABLE | PTL_MD_EVENT_SUCCESS_DISABLE | PTL_MD_EVENT_CT_REPLY, replies);
  constexpr ptl_size_t gets = 4096;  // four times PIER_LIB_MESSAGES
  issue_all(gets, replies,
            [&](ptl_size_t) { return PtlGet(md, 0, sizeof source_, self_, pt_, 0, 0, nullptr); });
  expect_all_counted(replies, gets);
}

INSTANTIATE_TEST_SUITE_P(Cells, Stress, ::testing::Bool(), cell_name);
INSTANTIATE_TEST_SUITE_P(Cells, SmallPool, ::testing::Bool(), cell_name);

}  // namespace
}  // namespace pier::portals::test
