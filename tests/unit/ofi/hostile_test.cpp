// pier ofi: a peer that sends more than our small track takes (its url
// names our limit, so only a peer that ignores it does: here, one given a
// url that claims more). Over tcp;ofi_rxm the truncated completion reports
// the sender's whole size; the driver copies only what landed in its bounce
// buffer (it read past it) and reports that length. Over libfabric 1.17's
// shm provider the receiver spins inside fi_cq_read on such a packet, so
// that provider is not run.
#include <sys/uio.h>

#include <algorithm>
#include <cstring>

#include "base/config.hpp"
#include "drivers/ofi/codec.hpp"
#include "drivers/ofi/context.hpp"
#include "drivers/ofi/instance.hpp"
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
  // y's url as a hostile peer would read it: y takes 1 MiB.
  Url claims = decode_url(y.url).value();
  claims.max_packet = 1 << 20;
  y.url = encode_url(claims).value();
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

/// A large-track receive posted into the caller's memory, its instance
/// destroyed while the data may be arriving: once the destructor returns,
/// the memory is the caller's again and nothing may write it (the provider
/// did, for a matched receive that cannot be canceled). Tagged messages
/// (RMA off): with RMA the receiver's registration is closed at destroy.
TEST_P(OfiDestroy, AReceiveIntoCallerMemoryIsNotWrittenOnceItsInstanceIsGone) {
  config::ScopedSet no_rma("OFI_RMA", "false");
  Node x, y;
  const Status st = make_node(GetParam(), x);
  if (st == Status::unsupported) GTEST_SKIP() << "ofi:" << GetParam() << " not offered here";
  ASSERT_EQ(st, Status::ok);
  ASSERT_EQ(make_node(GetParam(), y), Status::ok);
  constexpr std::size_t size = 8u << 20;
  std::vector<std::byte> src(size, std::byte{0x5a});
  for (int attempt = 0; attempt < 8; ++attempt) {
    Link l;
    ASSERT_EQ(connect(x, y, Track::large, l), Status::ok);
    std::vector<std::byte> dst(size, std::byte{0});
    ::iovec siov{src.data(), src.size()}, riov{dst.data(), dst.size()};
    Packet s, r;
    s.set_iovec(&siov, 1);
    r.set_iovec(&riov, 1);
    Status rs = l.b->recv_post(r);
    ASSERT_TRUE(is_success(rs)) << to_string(rs);
    Status ss = l.a->send_post(s);
    ASSERT_TRUE(is_success(ss)) << to_string(ss);
    // Until the first bytes landed: the receive is matched, mid-transfer.
    const auto deadline = soon();
    while (dst[0] == std::byte{0} && rs == Status::in_progress && Clock::now() < deadline) {
      if (ss == Status::in_progress) ss = l.a->send_poll(s);
      rs = l.b->recv_poll(r);
    }
    for (int i = 0; i < attempt % 3 && ss == Status::in_progress; ++i) ss = l.a->send_poll(s);
    l.b.reset();
    std::fill(dst.begin(), dst.end(), std::byte{0x11});
    const auto until = Clock::now() + std::chrono::milliseconds(300);
    driver::Instance* ready = nullptr;
    while (Clock::now() < until) {
      if (ss == Status::in_progress) ss = l.a->send_poll(s);
      (void)y.ctx->probe_any(&ready);
    }
    const auto written =
        std::count_if(dst.begin(), dst.end(), [](std::byte b) { return b != std::byte{0x11}; });
    ASSERT_EQ(written, 0) << "attempt " << attempt << ": bytes written after the instance went";
    l.a.reset();
  }
  EXPECT_EQ(y.ctx->close(), Status::ok);
  EXPECT_EQ(x.ctx->close(), Status::ok);
}

/// The same through the orderly path: disconnect() ends a receive that is
/// mid-transfer (closed), and recv_poll() reported it at once while
/// libfabric still held it; the caller, told it was over, had its memory
/// written. The end is reported only once the receive left libfabric.
TEST_P(OfiDestroy, AReceiveEndedByDisconnectIsReportedOnlyOnceLibfabricLetGo) {
  config::ScopedSet no_rma("OFI_RMA", "false");
  Node x, y;
  const Status st = make_node(GetParam(), x);
  if (st == Status::unsupported) GTEST_SKIP() << "ofi:" << GetParam() << " not offered here";
  ASSERT_EQ(st, Status::ok);
  ASSERT_EQ(make_node(GetParam(), y), Status::ok);
  constexpr std::size_t size = 8u << 20;
  std::vector<std::byte> src(size, std::byte{0x5a});
  for (int attempt = 0; attempt < 4; ++attempt) {
    Link l;
    ASSERT_EQ(connect(x, y, Track::large, l), Status::ok);
    std::vector<std::byte> dst(size, std::byte{0});
    ::iovec siov{src.data(), src.size()}, riov{dst.data(), dst.size()};
    Packet s, r;
    s.set_iovec(&siov, 1);
    r.set_iovec(&riov, 1);
    Status rs = l.b->recv_post(r);
    ASSERT_TRUE(is_success(rs)) << to_string(rs);
    Status ss = l.a->send_post(s);
    ASSERT_TRUE(is_success(ss)) << to_string(ss);
    const auto deadline = soon();
    while (dst[0] == std::byte{0} && rs == Status::in_progress && Clock::now() < deadline) {
      if (ss == Status::in_progress) ss = l.a->send_poll(s);
      rs = l.b->recv_poll(r);
    }
    (void)l.b->disconnect();
    while (rs == Status::in_progress && Clock::now() < deadline) {
      if (ss == Status::in_progress) ss = l.a->send_poll(s);
      rs = l.b->recv_poll(r);
    }
    ASSERT_NE(rs, Status::in_progress);
    std::fill(dst.begin(), dst.end(), std::byte{0x11});  // the caller's again
    const auto until = Clock::now() + std::chrono::milliseconds(300);
    driver::Instance* ready = nullptr;
    while (Clock::now() < until) {
      if (ss == Status::in_progress) ss = l.a->send_poll(s);
      (void)y.ctx->probe_any(&ready);
    }
    const auto written =
        std::count_if(dst.begin(), dst.end(), [](std::byte b) { return b != std::byte{0x11}; });
    ASSERT_EQ(written, 0) << "attempt " << attempt << ": bytes written after the receive ended ("
                          << to_string(rs) << ")";
    l = {};
  }
  EXPECT_EQ(y.ctx->close(), Status::ok);
  EXPECT_EQ(x.ctx->close(), Status::ok);
}

/// A send ended by disconnect() while libfabric still held it (a large
/// message nobody had taken yet) was reported at once; the caller, told it
/// was over, reused its memory, and the provider then read the new bytes
/// and delivered them. The end is now reported only once the send left
/// libfabric (or after the cancel limit).
TEST_P(OfiDestroy, ASendEndedByDisconnectIsReportedOnlyOnceLibfabricLetGo) {
  config::ScopedSet no_rma("OFI_RMA", "false");
  Node x, y;
  const Status st = make_node(GetParam(), x);
  if (st == Status::unsupported) GTEST_SKIP() << "ofi:" << GetParam() << " not offered here";
  ASSERT_EQ(st, Status::ok);
  ASSERT_EQ(make_node(GetParam(), y), Status::ok);
  constexpr std::size_t size = 8u << 20;
  Link l;
  ASSERT_EQ(connect(x, y, Track::large, l), Status::ok);
  std::vector<std::byte> src(size, std::byte{0x5a}), dst(size, std::byte{0});
  ::iovec siov{src.data(), src.size()}, riov{dst.data(), dst.size()};
  Packet s, r;
  s.set_iovec(&siov, 1);
  r.set_iovec(&riov, 1);
  Status ss = l.a->send_post(s);
  ASSERT_TRUE(is_success(ss)) << to_string(ss);
  for (int i = 0; i < 20 && ss == Status::in_progress; ++i) ss = l.a->send_poll(s);
  if (ss != Status::in_progress) GTEST_SKIP() << "the provider took 8 MiB at once";
  (void)l.a->disconnect();
  // Nobody took the message yet: libfabric still holds the send.
  ss = l.a->send_poll(s);
  EXPECT_EQ(ss, Status::in_progress) << "reported " << to_string(ss) << " while libfabric holds it";
  // The receiver takes it now; once the sender reports, its memory is its
  // own again, and what the receiver gets must not show the change.
  Status rs = l.b->recv_post(r);
  ASSERT_TRUE(is_success(rs)) << to_string(rs);
  const auto deadline = soon();
  driver::Instance* ready = nullptr;
  while (ss == Status::in_progress && Clock::now() < deadline) {
    ss = l.a->send_poll(s);
    if (rs == Status::in_progress) rs = l.b->recv_poll(r);
    (void)x.ctx->probe_any(&ready);
  }
  ASSERT_NE(ss, Status::in_progress);
  std::fill(src.begin(), src.end(), std::byte{0x22});  // the caller's again
  const auto until = Clock::now() + std::chrono::milliseconds(300);
  while (Clock::now() < until && rs == Status::in_progress) rs = l.b->recv_poll(r);
  const auto changed =
      std::count_if(dst.begin(), dst.end(), [](std::byte b) { return b == std::byte{0x22}; });
  EXPECT_EQ(changed, 0) << "bytes read from the caller's memory after the send ended ("
                        << to_string(ss) << ")";
  l = {};
  EXPECT_EQ(y.ctx->close(), Status::ok);
  EXPECT_EQ(x.ctx->close(), Status::ok);
}

/// disconnect()'s bye met back-pressure (every libfabric operation of the
/// context held by sends the peer had not taken) and was given up after
/// 1000 tries, never owed: the peer, alive, never learned of the close, and
/// its receive waited for ever. The bye is now owed and sent once room
/// comes back.
TEST_P(OfiDestroy, AByeThatMeetsBackPressureIsSentLater) {
  config::ScopedSet no_rma("OFI_RMA", "false");
  config::ScopedSet ops("OFI_OPS", "128");  // 64 of them are control receives
  Node x, y;
  const Status st = make_node(GetParam(), x);
  if (st == Status::unsupported) GTEST_SKIP() << "ofi:" << GetParam() << " not offered here";
  ASSERT_EQ(st, Status::ok);
  ASSERT_EQ(make_node(GetParam(), y), Status::ok);
  Link l;
  ASSERT_EQ(connect(x, y, Track::large, l), Status::ok);
  // Large sends nobody receives yet, until x has no operation left.
  constexpr std::size_t size = 256 * 1024;
  std::vector<std::byte> src(size, std::byte{0x5a});
  ::iovec siov{src.data(), src.size()};
  std::vector<std::unique_ptr<Packet>> sends;
  std::vector<Status> states;
  for (int i = 0; i < 200; ++i) {
    auto s = std::make_unique<Packet>();
    s->set_iovec(&siov, 1);
    const Status ss = l.a->send_post(*s);
    if (ss == Status::no_resource) break;
    ASSERT_TRUE(is_success(ss)) << to_string(ss);
    sends.push_back(std::move(s));
    states.push_back(ss);
  }
  ASSERT_FALSE(sends.empty());
  ASSERT_EQ(l.a->disconnect(), Status::ok);  // its bye finds no operation
  // y takes every message; x's sends end, their operations come back, and
  // x (progressed by its sends' polls) owes y the bye.
  std::vector<std::byte> dst(size);
  ::iovec riov{dst.data(), dst.size()};
  const auto deadline = soon();
  std::size_t taken = 0;
  Status rs = Status::in_progress;
  Packet r;
  bool posted = false;
  driver::Instance* ready = nullptr;
  while (Clock::now() < deadline) {
    for (std::size_t i = 0; i < sends.size(); ++i)
      if (states[i] == Status::in_progress) states[i] = l.a->send_poll(*sends[i]);
    (void)x.ctx->probe_any(&ready);
    if (!posted) {
      r = Packet{};
      r.set_iovec(&riov, 1);
      rs = l.b->recv_post(r);
      posted = true;
    }
    if (rs == Status::in_progress) rs = l.b->recv_poll(r);
    if (rs == Status::in_progress) continue;
    if (rs != Status::ok) break;  // the end: closed once every packet was taken
    ++taken;
    posted = false;
  }
  EXPECT_EQ(rs, Status::closed) << "the peer never learned of the close (" << taken << " of "
                                << sends.size() << " taken)";
  l = {};
  EXPECT_EQ(y.ctx->close(), Status::ok);
  EXPECT_EQ(x.ctx->close(), Status::ok);
}

/// Two contexts of one process: once one closes, the other's keep-alives to
/// it crashed inside libfabric 1.17's shm provider (a peer in the same
/// process has no pidfd to show it is gone). The closed context is now seen
/// gone: the other side's receive ends, nothing crashes.
TEST_P(OfiDestroy, AContextClosedInThisProcessIsAPeerGone) {
  config::ScopedSet often("OFI_KEEPALIVE_MS", "5");
  Node x, y;
  const Status st = make_node(GetParam(), x);
  if (st == Status::unsupported) GTEST_SKIP() << "ofi:" << GetParam() << " not offered here";
  ASSERT_EQ(st, Status::ok);
  ASSERT_EQ(make_node(GetParam(), y), Status::ok);
  Link l;
  ASSERT_EQ(connect(x, y, Track::small, l), Status::ok);
  ASSERT_EQ(l.b->disconnect(), Status::ok);
  l.b.reset();
  ASSERT_EQ(y.ctx->close(), Status::ok);
  y.ctx.reset();
  std::vector<std::byte> dst(64);
  ::iovec riov{dst.data(), dst.size()};
  Packet r;
  r.set_iovec(&riov, 1);
  Status rs = l.a->recv_post(r);
  const auto until = Clock::now() + std::chrono::milliseconds(500);
  driver::Instance* ready = nullptr;
  while (Clock::now() < until) {
    if (rs == Status::in_progress) rs = l.a->recv_poll(r);
    (void)x.ctx->probe_any(&ready);  // keep-alives go from progress
  }
  EXPECT_EQ(rs, Status::closed) << "an orderly close is not a death";
  l.a.reset();
  EXPECT_EQ(x.ctx->close(), Status::ok);
}

/// Counts a control message cannot truthfully carry, handed to the
/// instance as the context would: a credit for more packets than were
/// sent made sent - credited wrap, so every later send answered
/// no_resource for ever; a bye counting fewer packets than already arrived
/// left receives waiting for a count gone past. Both now break the
/// instance.
TEST_P(OfiDestroy, ImpossibleCountsFromThePeerBreakTheInstance) {
  Node x, y;
  const Status st = make_node(GetParam(), x);
  if (st == Status::unsupported) GTEST_SKIP() << "ofi:" << GetParam() << " not offered here";
  ASSERT_EQ(st, Status::ok);
  ASSERT_EQ(make_node(GetParam(), y), Status::ok);
  Link l;
  ASSERT_EQ(connect(x, y, Track::small, l), Status::ok);
  std::vector<std::byte> src(8, std::byte{1}), dst(8);
  ::iovec siov{src.data(), src.size()}, riov{dst.data(), dst.size()};
  Packet s, r;
  s.set_iovec(&siov, 1);
  r.set_iovec(&riov, 1);
  Status ss = l.a->send_post(s), rs = l.b->recv_post(r);
  ASSERT_EQ(finish(*l.a, s, &ss, *l.b, r, &rs), Status::ok);
  ASSERT_EQ(rs, Status::ok);
  auto* a = dynamic_cast<OfiInstance*>(l.a.get());
  auto* b = dynamic_cast<OfiInstance*>(l.b.get());
  ASSERT_TRUE(a && b);
  Control credit;
  credit.type = ControlType::credit;
  credit.value = std::uint64_t{1} << 40;
  {
    std::lock_guard lock(dynamic_cast<OfiContext&>(*x.ctx).mutex());
    a->on_credit(credit);
  }
  Packet s2;
  s2.set_iovec(&siov, 1);
  EXPECT_EQ(l.a->send_post(s2), Status::broken);
  Control bye;
  bye.type = ControlType::bye;
  bye.value = 0;  // one packet already arrived
  {
    std::lock_guard lock(dynamic_cast<OfiContext&>(*y.ctx).mutex());
    b->on_bye(bye);
  }
  Packet r2;
  r2.set_iovec(&riov, 1);
  EXPECT_EQ(l.b->recv_post(r2), Status::broken);
  l = {};
  EXPECT_EQ(y.ctx->close(), Status::ok);
  EXPECT_EQ(x.ctx->close(), Status::ok);
}

INSTANTIATE_TEST_SUITE_P(Providers, OfiDestroy, ::testing::ValuesIn(providers()),
                         [](const auto& p) { return p.param; });

}  // namespace
}  // namespace pier::drivers::ofi::test
