// Test helpers for tests/portals: one process that talks to itself through
// the public C API (the core loops back through the self driver). Every wait
// has a deadline.
#pragma once

#include <gtest/gtest.h>
#include <portals4.h>

#include <cstring>
#include <string>
#include <vector>

namespace pier::portals::test {

inline constexpr ptl_time_t wait_ms = 10000;

/// The next event of `eq`, or one with type 0xff after the deadline.
inline ptl_event_t next_event(ptl_handle_eq_t eq, ptl_time_t ms = wait_ms) {
  ptl_event_t ev{};
  unsigned which = 0;
  int rc = PtlEQPoll(&eq, 1, ms, &ev, &which);
  if (rc != PTL_OK && rc != PTL_EQ_DROPPED) {
    ADD_FAILURE() << "PtlEQPoll returned " << rc;
    ev.type = 0xff;
  }
  return ev;
}

/// Events of `eq` up to and including the first of `type`.
inline std::vector<ptl_event_t> events_until(ptl_handle_eq_t eq, ptl_event_kind_t type) {
  std::vector<ptl_event_t> out;
  for (int i = 0; i < 64; ++i) {
    ptl_event_t ev = next_event(eq);
    if (ev.type == 0xff) break;
    out.push_back(ev);
    if (ev.type == type) break;
  }
  return out;
}

/// True when `eq` holds no event right now.
inline bool eq_empty(ptl_handle_eq_t eq) {
  ptl_event_t ev{};
  return PtlEQGet(eq, &ev) == PTL_EQ_EMPTY;
}

inline ptl_ct_event_t ct_wait(ptl_handle_ct_t ct, ptl_size_t test) {
  ptl_ct_event_t v{};
  unsigned which = 0;
  int rc = PtlCTPoll(&ct, &test, 1, wait_ms, &v, &which);
  EXPECT_EQ(rc, PTL_OK) << "counter did not reach " << test;
  return v;
}

/// One NI with a target EQ (on the portal index) and an initiator EQ (on
/// the MDs). Param: true for a logical NI, false for physical.
class Portals : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override { bring_up(PTL_NI_MATCHING); }
  void TearDown() override {
    if (ni_ != PTL_INVALID_HANDLE) PtlNIFini(ni_);
    PtlFini();
  }

  void bring_up(unsigned matching, unsigned pt_options = 0) {
    ASSERT_EQ(PtlInit(), PTL_OK);
    unsigned addressing = logical() ? PTL_NI_LOGICAL : PTL_NI_PHYSICAL;
    ASSERT_EQ(
        PtlNIInit(PTL_IFACE_DEFAULT, matching | addressing, PTL_PID_ANY, nullptr, &limits_, &ni_),
        PTL_OK);
    ASSERT_EQ(PtlGetId(ni_, &self_), PTL_OK);
    ASSERT_EQ(PtlEQAlloc(ni_, 256, &teq_), PTL_OK);
    ASSERT_EQ(PtlEQAlloc(ni_, 256, &ieq_), PTL_OK);
    ASSERT_EQ(PtlPTAlloc(ni_, pt_options, teq_, PTL_PT_ANY, &pt_), PTL_OK);
  }

  bool logical() const { return GetParam(); }

  ptl_process_t any_id() const {
    ptl_process_t p{};
    if (logical()) {
      p.rank = PTL_RANK_ANY;
    } else {
      p.phys.nid = PTL_NID_ANY;
      p.phys.pid = PTL_PID_ANY;
    }
    return p;
  }

  ptl_me_t me(void* buf, ptl_size_t len, unsigned options, ptl_match_bits_t bits = 0,
              ptl_match_bits_t ignore = 0, ptl_handle_ct_t ct = PTL_CT_NONE) const {
    ptl_me_t m{};
    m.start = buf;
    m.length = len;
    m.ct_handle = ct;
    m.uid = PTL_UID_ANY;
    m.options = options;
    m.match_id = any_id();
    m.match_bits = bits;
    m.ignore_bits = ignore;
    return m;
  }

  ptl_handle_me_t append(const ptl_me_t& m, ptl_list_t list = PTL_PRIORITY_LIST,
                         void* user_ptr = nullptr) {
    ptl_handle_me_t h = PTL_INVALID_HANDLE;
    EXPECT_EQ(PtlMEAppend(ni_, pt_, &m, list, user_ptr, &h), PTL_OK);
    return h;
  }

  ptl_handle_md_t bind(void* buf, ptl_size_t len, unsigned options = 0,
                       ptl_handle_ct_t ct = PTL_CT_NONE) {
    ptl_md_t d{};
    d.start = buf;
    d.length = len;
    d.options = options;
    d.eq_handle = ieq_;
    d.ct_handle = ct;
    ptl_handle_md_t h = PTL_INVALID_HANDLE;
    EXPECT_EQ(PtlMDBind(ni_, &d, &h), PTL_OK);
    return h;
  }

  /// A put with a full ack; returns the ACK event (type 0xff if none).
  ptl_event_t put_acked(ptl_handle_md_t md, ptl_size_t len, ptl_match_bits_t bits,
                        ptl_size_t remote_offset = 0, ptl_size_t local_offset = 0) {
    EXPECT_EQ(PtlPut(md, local_offset, len, PTL_ACK_REQ, self_, pt_, bits, remote_offset, nullptr,
                     0x5eed),
              PTL_OK);
    auto evs = events_until(ieq_, PTL_EVENT_ACK);
    if (evs.empty() || evs.back().type != PTL_EVENT_ACK) {
      ADD_FAILURE() << "no ACK";
      ptl_event_t none{};
      none.type = 0xff;
      return none;
    }
    return evs.back();
  }

  ptl_handle_ni_t ni_ = PTL_INVALID_HANDLE;
  ptl_ni_limits_t limits_{};
  ptl_process_t self_{};
  ptl_handle_eq_t teq_ = PTL_INVALID_HANDLE, ieq_ = PTL_INVALID_HANDLE;
  ptl_pt_index_t pt_ = 0;
};

inline std::string cell_name(const ::testing::TestParamInfo<bool>& info) {
  return info.param ? "logical" : "physical";
}

}  // namespace pier::portals::test
