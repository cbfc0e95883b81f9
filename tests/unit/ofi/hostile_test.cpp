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

class OfiDestroy : public ::testing::TestWithParam<std::string> {};

/// An instance destroyed while its bounce receive may be matched and half
/// filled (rxm segments still arriving): such a receive cannot be canceled,
/// and the provider wrote into the freed bounce buffer (heap-use-after-free
/// under ASan). The buffer now stays with the context until it lands.
TEST_P(OfiDestroy, AnInstanceGoneMidTransferLeavesTheProviderValidMemory) {
  Node x, y;
  const Status st = make_node(GetParam(), x);
  if (st == Status::unsupported) GTEST_SKIP() << "ofi:" << GetParam() << " not offered here";
  ASSERT_EQ(st, Status::ok);
  ASSERT_EQ(make_node(GetParam(), y), Status::ok);
  Link keep;  // keeps y's context busy with another instance
  ASSERT_EQ(connect(x, y, Track::large, keep), Status::ok);
  for (int attempt = 0; attempt < 20; ++attempt) {
    Link l;
    ASSERT_EQ(connect(x, y, Track::small, l), Status::ok);
    std::vector<std::byte> src(65536);
    ::iovec siov{src.data(), src.size()};
    Packet s;
    s.set_iovec(&siov, 1);
    Status ss = l.a->send_post(s);
    ASSERT_TRUE(is_success(ss));
    for (int i = 0; i < 2 + attempt % 4 && ss == Status::in_progress; ++i) ss = l.a->send_poll(s);
    driver::Instance* ready = nullptr;
    for (int i = 0; i < 1 + attempt / 4; ++i) (void)y.ctx->probe_any(&ready);
    l.b.reset();  // while the bounce receive may be mid-transfer
    for (int i = 0; i < 200; ++i) {
      (void)y.ctx->probe_any(&ready);
      if (ss == Status::in_progress) ss = l.a->send_poll(s);
    }
    l.a.reset();
  }
  keep = {};
  EXPECT_EQ(y.ctx->close(), Status::ok);
  EXPECT_EQ(x.ctx->close(), Status::ok);
}

INSTANTIATE_TEST_SUITE_P(Providers, OfiDestroy, ::testing::ValuesIn(providers()),
                         [](const auto& p) { return p.param; });

}  // namespace
}  // namespace pier::drivers::ofi::test
