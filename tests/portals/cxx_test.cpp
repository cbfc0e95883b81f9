// pier/portals.hpp: the RAII owners release what they own, and a failing
// set-up call throws with its Portals code.
#include <pier/portals.hpp>

#include <array>

#include "fixture.hpp"

namespace pier::portals::test {
namespace {

TEST(PortalsCxx, OwnersPutAndReleaseInOrder) {
  Library lib;
  Ni ni(PTL_NI_MATCHING | PTL_NI_PHYSICAL);
  ptl_handle_ct_t stale_ct = PTL_INVALID_HANDLE;
  {
    Eq teq(ni, 16), ieq(ni, 16);
    Ct ct(ni);
    stale_ct = ct.get();
    PtIndex pt(ni, 0, teq);
    std::array<char, 16> dst{}, src{'c', '+', '+'};
    ptl_me_t m{};
    m.start = dst.data();
    m.length = dst.size();
    m.ct_handle = ct.get();
    m.uid = PTL_UID_ANY;
    m.options = PTL_ME_OP_PUT | PTL_ME_EVENT_CT_COMM;
    m.match_id.phys.nid = PTL_NID_ANY;
    m.match_id.phys.pid = PTL_PID_ANY;
    Me me(ni, pt.index(), m, PTL_PRIORITY_LIST);
    Md md(ni, ptl_md_t{src.data(), src.size(), 0, ieq.get(), PTL_CT_NONE});
    ASSERT_EQ(PtlPut(md.get(), 0, 3, PTL_NO_ACK_REQ, ni.id(), pt.index(), 0, 0, nullptr, 0),
              PTL_OK);
    EXPECT_EQ(ct_wait(ct.get(), 1).success, 1u);
    EXPECT_EQ(std::string(dst.data(), 3), "c++");
    EXPECT_EQ(ct.value().success, 1u);
    Md moved = std::move(md);
    EXPECT_FALSE(md);
    EXPECT_TRUE(moved);
    // Wait for SEND, so the MD is no longer in use when it is released.
    EXPECT_EQ(events_until(ieq.get(), PTL_EVENT_SEND).back().type, PTL_EVENT_SEND);
  }
  ptl_ct_event_t v{};
  EXPECT_EQ(PtlCTGet(stale_ct, &v), PTL_ARG_INVALID);  // freed by its owner
}

TEST(PortalsCxx, FailingSetUpThrowsWithTheCode) {
  Library lib;
  try {
    Ni ni(PTL_NI_MATCHING | PTL_NI_NO_MATCHING | PTL_NI_LOGICAL);
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), PTL_ARG_INVALID);
  }
}

}  // namespace
}  // namespace pier::portals::test
