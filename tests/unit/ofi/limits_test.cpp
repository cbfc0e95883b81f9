// pier ofi: PIER_OFI_MAX_PACKET is each process's own, and sizes the
// bounce buffer its small-track receives land in. A side configured with a
// larger limit sent packets its peer could not take: over tcp;ofi_rxm the
// peer's receive ended truncated (the packet's tail lost), over libfabric
// 1.17's shm the peer spun inside fi_cq_read. The url now names the limit
// and a send larger than the peer takes is refused at the sender.
#include <sys/uio.h>

#include <vector>

#include "base/config.hpp"
#include "ofi_helpers.hpp"

namespace pier::drivers::ofi::test {
namespace {

class OfiLimits : public ::testing::TestWithParam<std::string> {};

/// Sends `n` bytes from `tx` to `rx` into a receive with room to spare;
/// what arrives must be exactly those bytes.
void transfer(Instance& tx, Instance& rx, std::size_t n, unsigned seed) {
  std::vector<std::byte> src(n), dst(n + 4096, std::byte{0x77});
  fill(src, seed);
  ::iovec siov{src.data(), src.size()}, riov{dst.data(), dst.size()};
  Packet s, r;
  s.set_iovec(&siov, 1);
  r.set_iovec(&riov, 1);
  Status rs = rx.recv_post(r);
  ASSERT_TRUE(is_success(rs)) << to_string(rs);
  Status ss = tx.send_post(s);
  ASSERT_TRUE(is_success(ss)) << to_string(ss);
  ASSERT_EQ(finish(tx, s, &ss, rx, r, &rs), Status::ok);
  EXPECT_EQ(ss, Status::ok);
  ASSERT_EQ(rs, Status::ok) << "the connection did not survive";
  ASSERT_EQ(r.length, n);
  EXPECT_TRUE(same({dst.data(), n}, seed));
}

TEST_P(OfiLimits, APacketLargerThanThePeersSmallTrackTakesIsRefusedAtTheSend) {
  Node big, small;
  const Status st = make_node(GetParam(), big);
  if (st == Status::unsupported) GTEST_SKIP() << "ofi:" << GetParam() << " not offered here";
  ASSERT_EQ(st, Status::ok);
  {
    config::ScopedSet limit("OFI_MAX_PACKET", "16384");
    ASSERT_EQ(limit.status(), Status::ok);
    ASSERT_EQ(make_node(GetParam(), small), Status::ok);
  }
  constexpr std::size_t takes = 16384;
  ASSERT_EQ(small.props.caps.max_packet, takes);
  ASSERT_GT(big.props.caps.max_packet, takes + 1);
  Link l;  // l.a on the big side, l.b on the small one
  ASSERT_EQ(connect(big, small, Track::small, l), Status::ok);

  // Above what the peer takes, below our own limit: refused, nothing sent.
  std::vector<std::byte> too_big(takes + 1);
  ::iovec tiov{too_big.data(), too_big.size()};
  Packet t;
  t.set_iovec(&tiov, 1);
  const Status refused = l.a->send_post(t);
  EXPECT_EQ(refused, Status::invalid_argument) << to_string(refused);
  if (refused == Status::in_progress) {
    // What happened before: the packet went out. Wait for its send, so
    // that its memory outlives libfabric's hold on it, and report what the
    // peer got before failing.
    std::vector<std::byte> dst(2 * takes);
    ::iovec riov{dst.data(), dst.size()};
    Packet r;
    r.set_iovec(&riov, 1);
    Status rs = l.b->recv_post(r);
    Status ss = refused;
    ASSERT_EQ(finish(*l.a, t, &ss, *l.b, r, &rs), Status::ok)
        << "the peer never completed its receive";
    FAIL() << "sent (" << to_string(ss) << "); the peer's receive ended " << to_string(rs)
           << " with " << r.length << " of " << too_big.size() << " bytes";
  }

  // The connection lives on: the largest packet the small side takes goes
  // through whole, both ways, and the small side's own limit still holds.
  transfer(*l.a, *l.b, takes, 1);
  transfer(*l.b, *l.a, takes, 2);
  EXPECT_EQ(l.b->send_post(t), Status::invalid_argument);
  transfer(*l.a, *l.b, 100, 3);

  // The large track has no such limit.
  Link large;
  ASSERT_EQ(connect(big, small, Track::large, large), Status::ok);
  transfer(*large.a, *large.b, 4 * takes, 4);

  l = {};
  large = {};
  EXPECT_EQ(small.ctx->close(), Status::ok);
  EXPECT_EQ(big.ctx->close(), Status::ok);
}

INSTANTIATE_TEST_SUITE_P(Providers, OfiLimits, ::testing::ValuesIn(providers()),
                         [](const auto& p) { return p.param; });

}  // namespace
}  // namespace pier::drivers::ofi::test
