// pier ofi: a peer that sends more than our small track takes. Over
// tcp;ofi_rxm the truncated completion reports the sender's whole size; the
// driver copies only what landed in its bounce buffer (it read past it) and
// reports that length. Over libfabric 1.17's shm provider the receiver
// spins inside fi_cq_read on such a packet, so that provider is not run.
#include <sys/uio.h>

#include <cstring>

#include "base/config.hpp"
#include "ofi_helpers.hpp"

namespace pier::drivers::ofi::test {
namespace {

TEST(OfiHostile, ASmallPacketLargerThanOurBounceIsTruncatedToWhatLanded) {
  Node x, y;
  {
    config::ScopedSet big("OFI_MAX_PACKET", "1M");  // the peer's packets may be larger
    const Status s = make_node("tcp", x);
    if (s == Status::unsupported) GTEST_SKIP() << "ofi:tcp not offered here";
    ASSERT_EQ(s, Status::ok);
  }
  ASSERT_EQ(make_node("tcp", y), Status::ok);
  Link l;
  ASSERT_EQ(connect(x, y, Track::small, l), Status::ok);
  std::vector<std::byte> src(512 * 1024), dst(2 << 20, std::byte{0x77});
  fill(src, 9);
  ::iovec siov{src.data(), src.size()}, riov{dst.data(), dst.size()};
  Packet s, r;
  s.set_iovec(&siov, 1);
  r.set_iovec(&riov, 1);
  Status rs = l.b->recv_post(r);
  Status ss = l.a->send_post(s);
  ASSERT_TRUE(is_success(ss)) << to_string(ss);
  ASSERT_TRUE(is_success(rs)) << to_string(rs);
  ASSERT_EQ(finish(*l.a, s, &ss, *l.b, r, &rs), Status::ok);
  EXPECT_EQ(rs, Status::truncated);
  EXPECT_LE(r.length, y.props.caps.max_packet);  // not the 2 MiB it had room for
  EXPECT_EQ(std::memcmp(dst.data(), src.data(), r.length), 0);
  l = {};
  EXPECT_EQ(y.ctx->close(), Status::ok);
  EXPECT_EQ(x.ctx->close(), Status::ok);
}

}  // namespace
}  // namespace pier::drivers::ofi::test
