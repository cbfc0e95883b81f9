// pier conformance: call order, capabilities, arguments, connection rules,
// cancel, truncation, disconnect and close.
#include <sys/uio.h>

#include <array>
#include <cstring>

#include "driver/iovec_data.hpp"
#include "harness.hpp"

namespace pier::conformance {
namespace {

using namespace std::chrono_literals;

CONFORMANCE_TEST(Capabilities) {
  Node x;
  ASSERT_EQ(make_node(spec(), x), Status::ok);
  const Caps& c = x.props.caps;
  EXPECT_FALSE(x.ctx->name().empty());
  EXPECT_FALSE(x.url.empty()) << "init() must give a url";
  EXPECT_TRUE(c.recv_post || c.recv_buf) << "no way to receive";
  EXPECT_GE(c.max_iov, 1u);
  if (c.rdv_data) {
    EXPECT_TRUE(c.recv_post) << "rdv_data is filled by recv_post()";
  }
  if (c.needs_rdv) {
    EXPECT_TRUE(c.recv_post) << "a rendezvous track needs posted receives";
  }
  EXPECT_EQ(x.ctx->close(), Status::ok);
}

CONFORMANCE_TEST(UnclaimedAnswerUnsupported) {
  Node x, y;
  ASSERT_EQ(make_node(spec(), x), Status::ok);
  ASSERT_EQ(make_node(spec(), y), Status::ok);
  Link l;
  ASSERT_EQ(connect_link(x, y, Track::small, l), Status::ok);
  const Caps& c = x.props.caps;
  std::array<std::byte, 16> buf{};
  ::iovec iov{buf.data(), buf.size()};
  int checked = 0;
  if (!c.send_buf) {
    Packet q;
    EXPECT_EQ(l.a->send_buf_get(q), Status::unsupported);
    EXPECT_EQ(l.a->send_buf_post(q, 0), Status::unsupported);
    ++checked;
  }
  if (!c.recv_buf) {
    Packet q;
    EXPECT_EQ(l.b->recv_buf_release(q), Status::unsupported);
    ++checked;
  }
  if (!c.recv_post) {
    Packet q;
    q.set_iovec(&iov, 1);
    EXPECT_EQ(l.b->recv_post(q), Status::unsupported);
    ++checked;
  }
  if (!c.blocking_wait) {
    Packet q;
    EXPECT_EQ(l.a->send_wait(q, deadline_after(10ms)), Status::unsupported);
    EXPECT_EQ(l.b->recv_wait(q, deadline_after(10ms)), Status::unsupported);
    ++checked;
  }
  if (!c.recv_any) {
    Instance* ready = l.a.get();
    EXPECT_EQ(y.ctx->probe_any(&ready), Status::unsupported);
    EXPECT_EQ(ready, nullptr);
    EXPECT_EQ(y.ctx->wait_any(&ready, deadline_after(10ms)), Status::unsupported);
    EXPECT_EQ(y.ctx->cancel_any(), Status::unsupported);
    ++checked;
  }
  if (!c.wait_fds) {
    std::vector<::pollfd> fds;
    EXPECT_EQ(y.ctx->wait_arm(fds), Status::unsupported);
    EXPECT_TRUE(fds.empty());
    EXPECT_EQ(y.ctx->wait_disarm(), Status::unsupported);
    ++checked;
  }
  if (!c.prefetch) {
    Packet q;
    q.set_iovec(&iov, 1);
    EXPECT_EQ(l.a->send_prefetch(q), Status::unsupported);
    EXPECT_EQ(l.a->send_unfetch(q), Status::unsupported);
    EXPECT_EQ(l.b->recv_prefetch(q), Status::unsupported);
    EXPECT_EQ(l.b->recv_unfetch(q), Status::unsupported);
    ++checked;
  }
  if (!c.supports_data) {
    pier::driver::IovecData data(buf.data(), buf.size());
    Packet q;
    q.form = Packet::Form::data;
    q.data = &data;
    q.chunk_len = buf.size();
    EXPECT_EQ(l.a->send_post(q), Status::unsupported);
    if (c.recv_post) {
      EXPECT_EQ(l.b->recv_post(q), Status::unsupported);
    }
    ++checked;
  }
  if (!c.rdv_data && c.recv_post) {
    Link big;
    ASSERT_EQ(connect_link(x, y, Track::large, big), Status::ok);
    Packet r;
    r.set_iovec(&iov, 1);
    const Status posted = big.b->recv_post(r);
    EXPECT_EQ(posted, Status::in_progress);
    EXPECT_EQ(r.rdv_len, 0) << "rdv_data filled without claiming caps.rdv_data";
    if (posted == Status::in_progress) {
      EXPECT_EQ(big.b->recv_cancel(r), Status::ok);
    }
    ++checked;
  }
  if (checked == 0) GTEST_SKIP() << "claims every optional capability";
}

CONFORMANCE_TEST(CallOrder) {
  {
    // Made and dropped without a single call, or after properties() only.
    auto bare = pier::driver::make_context(spec());
    ASSERT_TRUE(bare.has_value());
    auto described = pier::driver::make_context(spec());
    ASSERT_TRUE(described.has_value());
    ASSERT_TRUE((*described)->properties({}).has_value());
    EXPECT_FALSE((*described)->open_instance(Track::small).has_value())
        << "open_instance() before init()";
  }
  auto made = pier::driver::make_context(spec());
  ASSERT_TRUE(made.has_value());
  Context& ctx = **made;
  auto props = ctx.properties({});
  ASSERT_TRUE(props.has_value()) << to_string(props.status());
  auto url = ctx.init();
  ASSERT_TRUE(url.has_value()) << to_string(url.status());
  EXPECT_EQ(ctx.close(), Status::ok);
  EXPECT_EQ(ctx.close(), Status::not_initialized);
  EXPECT_EQ(ctx.init().status(), Status::not_initialized);
  EXPECT_EQ(ctx.properties({}).status(), Status::not_initialized);
  EXPECT_EQ(ctx.open_instance(Track::small).status(), Status::not_initialized);
  EXPECT_EQ(ctx.open_instance(Track::large).status(), Status::not_initialized);
  Instance* ready = nullptr;
  const Status any = props->caps.recv_any ? Status::not_initialized : Status::unsupported;
  EXPECT_EQ(ctx.probe_any(&ready), any);
  EXPECT_EQ(ctx.wait_any(&ready, deadline_after(10ms)), any);
  EXPECT_EQ(ctx.cancel_any(), any);
}

CONFORMANCE_TEST(InvalidArguments) {
  Node x, y;
  ASSERT_EQ(make_node(spec(), x), Status::ok);
  ASSERT_EQ(make_node(spec(), y), Status::ok);
  Link l;
  ASSERT_EQ(connect_link(x, y, Track::small, l), Status::ok);
  const Caps& c = x.props.caps;
  std::array<std::byte, 64> buf{};

  Packet null_iov;
  null_iov.set_iovec(nullptr, 1);
  EXPECT_EQ(l.a->send_post(null_iov), Status::invalid_argument) << "null iovec";
  if (c.recv_post) {
    EXPECT_EQ(l.b->recv_post(null_iov), Status::invalid_argument) << "null iovec";
  }

  Packet no_form;
  EXPECT_EQ(l.a->send_post(no_form), Status::invalid_argument) << "packet without a form";

  // An element with a null base and a length (tcp copied from it and
  // crashed), and a chunk past its data's end (tcp spun for ever, or sent
  // bytes from its stack): refused, every driver.
  const ::iovec holed[2] = {{buf.data(), 8}, {nullptr, 8}};
  Packet holes;
  holes.set_iovec(holed, 2);
  EXPECT_EQ(l.a->send_post(holes), Status::invalid_argument) << "null base with a length";
  if (c.recv_post) {
    EXPECT_EQ(l.b->recv_post(holes), Status::invalid_argument) << "null base with a length";
  }
  if (c.supports_data) {
    pier::driver::IovecData short_data(buf.data(), 16);
    Packet past;
    past.form = Packet::Form::data;
    past.data = &short_data;
    past.chunk_offset = 0;
    past.chunk_len = 32;
    EXPECT_EQ(l.a->send_post(past), Status::invalid_argument) << "chunk past its data";
    if (c.recv_post) {
      EXPECT_EQ(l.b->recv_post(past), Status::invalid_argument) << "chunk past its data";
    }
  }

  if (c.max_iov < 4096) {
    std::vector<::iovec> many(c.max_iov + 1, ::iovec{buf.data(), 1});
    Packet q;
    q.set_iovec(many.data(), static_cast<std::uint32_t>(many.size()));
    EXPECT_EQ(l.a->send_post(q), Status::invalid_argument) << "max_iov + 1 entries";
    if (c.recv_post) {
      EXPECT_EQ(l.b->recv_post(q), Status::invalid_argument);
    }
  }

  if (c.max_packet > 0 && c.max_packet < (std::size_t{64} << 20)) {
    std::vector<std::byte> big(c.max_packet + 1);
    ::iovec iov{big.data(), big.size()};
    Packet q;
    q.set_iovec(&iov, 1);
    EXPECT_EQ(l.a->send_post(q), Status::invalid_argument) << "small-track packet > max_packet";
  }

  if (c.send_buf) {
    Packet q;
    EXPECT_EQ(l.a->send_buf_post(q, 1), Status::invalid_argument) << "post without get";
  }
  if (c.recv_buf) {
    Packet q;
    EXPECT_EQ(l.b->recv_buf_release(q), Status::invalid_argument) << "release of nothing";
  }

  if (c.recv_post) {
    ::iovec iov1{buf.data(), 32};
    ::iovec iov2{buf.data() + 32, 32};
    Packet r1, r2;
    r1.set_iovec(&iov1, 1);
    r2.set_iovec(&iov2, 1);
    ASSERT_EQ(l.b->recv_post(r1), Status::in_progress);
    EXPECT_EQ(l.b->recv_post(r2), Status::invalid_argument) << "second posted receive";
    // The first receive is unharmed.
    std::array<std::byte, 8> msg{};
    fill_pattern(msg, 77);
    ::iovec siov{msg.data(), msg.size()};
    Packet s;
    s.set_iovec(&siov, 1);
    Status ss = l.a->send_post(s);
    ASSERT_TRUE(ss == Status::ok || ss == Status::in_progress) << to_string(ss);
    EXPECT_EQ(finish_both(*l.a, s, &ss, *l.b, r1, default_deadline()), Status::ok);
    EXPECT_EQ(ss, Status::ok);
    EXPECT_EQ(r1.length, msg.size());
    EXPECT_EQ(check_pattern({buf.data(), msg.size()}, 77), msg.size());
  }

  const std::vector<std::vector<std::byte>> bad_urls = {
      {},
      {std::byte{1}, std::byte{2}, std::byte{3}},
      std::vector<std::byte>(1000, std::byte{0xff})};
  for (const auto& bad : bad_urls) {
    auto inst = x.ctx->open_instance(Track::small);
    ASSERT_TRUE(inst.has_value());
    EXPECT_EQ((*inst)->connect_async(bad), Status::invalid_argument)
        << "url of " << bad.size() << " bytes";
  }
}

CONFORMANCE_TEST(OneInstancePerTrackAndPeer) {
  Node x, y;
  ASSERT_EQ(make_node(spec(), x), Status::ok);
  ASSERT_EQ(make_node(spec(), y), Status::ok);
  Link small, large;
  ASSERT_EQ(connect_link(x, y, Track::small, small), Status::ok);
  ASSERT_EQ(connect_link(x, y, Track::large, large), Status::ok) << "one of each track is normal";
  auto again = x.ctx->open_instance(Track::small);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ((*again)->connect_async(y.url), Status::in_use);
  // The existing connection still works.
  std::array<std::byte, 32> src{}, dst{};
  fill_pattern(src, 5);
  std::size_t got = 0;
  EXPECT_EQ(round_trip(*small.a, *small.b, x.props.caps, src, dst, &got), Status::ok);
  EXPECT_EQ(got, src.size());
  EXPECT_EQ(check_pattern(dst, 5), dst.size());
}

CONFORMANCE_TEST(CancelPostedReceive) {
  Node x, y;
  ASSERT_EQ(make_node(spec(), x), Status::ok);
  ASSERT_EQ(make_node(spec(), y), Status::ok);
  if (!x.props.caps.recv_post) GTEST_SKIP() << "no posted receives";
  Link l;
  ASSERT_EQ(connect_link(x, y, Track::small, l), Status::ok);
  std::array<std::byte, 64> first{}, second{}, msg{};
  ::iovec iov1{first.data(), first.size()};
  Packet r1;
  r1.set_iovec(&iov1, 1);
  ASSERT_EQ(l.b->recv_post(r1), Status::in_progress);
  EXPECT_EQ(l.b->recv_cancel(r1), Status::ok);
  // A canceled receive does not block the next one, and loses no data.
  fill_pattern(msg, 11);
  ::iovec siov{msg.data(), 40};
  Packet s;
  s.set_iovec(&siov, 1);
  ::iovec iov2{second.data(), second.size()};
  Packet r2;
  r2.set_iovec(&iov2, 1);
  Status rs = l.b->recv_post(r2);
  ASSERT_EQ(rs, Status::in_progress);
  Status ss = l.a->send_post(s);
  ASSERT_TRUE(ss == Status::ok || ss == Status::in_progress) << to_string(ss);
  EXPECT_EQ(finish_both(*l.a, s, &ss, *l.b, r2, default_deadline()), Status::ok);
  EXPECT_EQ(ss, Status::ok);
  EXPECT_EQ(r2.length, 40u);
  EXPECT_EQ(check_pattern({second.data(), 40}, 11), 40u);
  EXPECT_EQ(check_pattern({first.data(), 40}, 11), 0u) << "the canceled receive got data";
  // A cancel racing an arrival: either the receive completed first (cancel
  // answers its final status and the data is in it) or it is canceled and
  // the packet goes to the next receive. Nothing is lost.
  std::array<std::byte, 64> third{};
  ::iovec iov3{third.data(), third.size()};
  Packet r3;
  r3.set_iovec(&iov3, 1);
  ASSERT_EQ(l.b->recv_post(r3), Status::in_progress);
  fill_pattern(msg, 12);
  Packet s2;
  s2.set_iovec(&siov, 1);
  ss = l.a->send_post(s2);
  ASSERT_TRUE(is_success(ss)) << to_string(ss);
  EXPECT_EQ(l.b->recv_cancel(r3), Status::ok);
  if (check_pattern({third.data(), 40}, 12) != 40) {
    std::size_t got = 0;
    EXPECT_EQ(recv_bytes(*l.b, x.props.caps, third, &got, default_deadline()), Status::ok);
    EXPECT_EQ(got, 40u);
    EXPECT_EQ(check_pattern({third.data(), 40}, 12), 40u) << "lost to a canceled receive";
  }
  if (ss == Status::in_progress) {
    EXPECT_EQ(finish_send(*l.a, s2, default_deadline()), Status::ok);
  }
}

CONFORMANCE_TEST(Truncation) {
  Node x, y;
  ASSERT_EQ(make_node(spec(), x), Status::ok);
  ASSERT_EQ(make_node(spec(), y), Status::ok);
  if (!x.props.caps.recv_post) GTEST_SKIP() << "truncation needs posted receives";
  Link l;
  ASSERT_EQ(connect_link(x, y, Track::small, l), Status::ok);
  const Caps& c = x.props.caps;
  for (const bool post_first : {false, true}) {
    SCOPED_TRACE(post_first ? "receive posted first" : "send first");
    std::array<std::byte, 100> big{};
    std::array<std::byte, 10> small{};
    std::array<std::byte, 64> dst{};
    fill_pattern(big, 21);
    fill_pattern(small, 22);
    dst.fill(std::byte{0xee});
    ::iovec biov{big.data(), big.size()};
    ::iovec riov{dst.data(), 40};
    Packet s, r;
    s.set_iovec(&biov, 1);
    r.set_iovec(&riov, 1);
    Status rs = Status::in_progress;
    if (post_first) {
      ASSERT_EQ(rs = l.b->recv_post(r), Status::in_progress);
    }
    Status ss = l.a->send_post(s);
    ASSERT_TRUE(ss == Status::ok || ss == Status::in_progress) << to_string(ss);
    if (!post_first) rs = l.b->recv_post(r);
    if (rs == Status::in_progress) rs = finish_both(*l.a, s, &ss, *l.b, r, default_deadline());
    if (ss == Status::in_progress) ss = finish_send(*l.a, s, default_deadline());
    EXPECT_EQ(rs, Status::truncated);
    EXPECT_EQ(ss, Status::ok);
    EXPECT_EQ(r.length, 40u);
    EXPECT_EQ(check_pattern({dst.data(), 40}, 21), 40u);
    EXPECT_EQ(dst[40], std::byte{0xee}) << "wrote past the receive buffer";
    // The rest of the long packet is gone: the next receive gets the next packet.
    std::size_t got = 0;
    EXPECT_EQ(round_trip(*l.a, *l.b, c, small, dst, &got), Status::ok);
    EXPECT_EQ(got, small.size());
    EXPECT_EQ(check_pattern({dst.data(), small.size()}, 22), small.size());
  }
}

CONFORMANCE_TEST(DisconnectEndsThePeer) {
  Node x, y;
  ASSERT_EQ(make_node(spec(), x), Status::ok);
  ASSERT_EQ(make_node(spec(), y), Status::ok);
  Link l;
  ASSERT_EQ(connect_link(x, y, Track::small, l), Status::ok);
  const Caps& c = x.props.caps;
  std::array<std::byte, 16> buf{};
  ::iovec iov{buf.data(), buf.size()};
  Packet r;
  r.set_iovec(&iov, 1);
  Status rs = Status::in_progress;
  if (c.recv_post) {
    ASSERT_EQ(rs = l.b->recv_post(r), Status::in_progress);
  }
  const Status d = l.a->disconnect();
  if (d == Status::unsupported) GTEST_SKIP() << "no disconnect()";
  ASSERT_EQ(d, Status::ok);
  Packet s;
  s.set_iovec(&iov, 1);
  const Status after = l.a->send_post(s);
  EXPECT_TRUE(after != Status::ok && after != Status::in_progress)
      << "a packet moved after disconnect(): " << to_string(after);
  // The peer learns, without any traffic, within the deadline.
  rs = finish_recv(*l.b, r, default_deadline());
  EXPECT_TRUE(rs == Status::closed || rs == Status::broken) << to_string(rs);
}

CONFORMANCE_TEST(DestroyedPeerBreaksPending) {
  Node x, y;
  ASSERT_EQ(make_node(spec(), x), Status::ok);
  ASSERT_EQ(make_node(spec(), y), Status::ok);
  Link l, other;
  ASSERT_EQ(connect_link(x, y, Track::small, l), Status::ok);
  ASSERT_EQ(connect_link(x, y, Track::large, other), Status::ok);
  const Caps& c = x.props.caps;
  std::array<std::byte, 16> buf{};
  ::iovec iov{buf.data(), buf.size()};
  Packet r;
  r.set_iovec(&iov, 1);
  if (c.recv_post) {
    ASSERT_EQ(l.b->recv_post(r), Status::in_progress);
  }
  l.a.reset();
  const Status rs = finish_recv(*l.b, r, default_deadline());
  EXPECT_TRUE(rs == Status::broken || rs == Status::closed) << to_string(rs);
  Packet s;
  s.set_iovec(&iov, 1);
  Status ss = Status::in_progress;
  const Status d = drive(
      [&] {
        ss = l.b->send_post(s);
        if (ss == Status::in_progress) ss = l.b->send_poll(s);
        return ss != Status::ok && ss != Status::in_progress && ss != Status::no_resource;
      },
      default_deadline());
  EXPECT_EQ(d, Status::ok) << "sends to a destroyed peer kept succeeding";
  EXPECT_TRUE(ss == Status::broken || ss == Status::closed) << to_string(ss);
  // The other instance to the same peer context is unaffected.
  std::array<std::byte, 24> src{}, dst{};
  fill_pattern(src, 31);
  std::size_t got = 0;
  EXPECT_EQ(round_trip(*other.a, *other.b, c, src, dst, &got), Status::ok);
  EXPECT_EQ(check_pattern(dst, 31), dst.size());
}

CONFORMANCE_TEST(CloseOrder) {
  for (const bool with_disconnect : {true, false}) {
    SCOPED_TRACE(with_disconnect ? "disconnect first" : "no disconnect");
    Node x, y;
    ASSERT_EQ(make_node(spec(), x), Status::ok);
    ASSERT_EQ(make_node(spec(), y), Status::ok);
    Link small, large;
    ASSERT_EQ(connect_link(x, y, Track::small, small), Status::ok);
    ASSERT_EQ(connect_link(x, y, Track::large, large), Status::ok);
    std::array<std::byte, 48> src{}, dst{};
    fill_pattern(src, 41);
    std::size_t got = 0;
    ASSERT_EQ(round_trip(*small.a, *small.b, x.props.caps, src, dst, &got), Status::ok);
    if (with_disconnect) {
      for (Instance* i : {small.a.get(), small.b.get(), large.a.get(), large.b.get()}) {
        const Status d = i->disconnect();
        EXPECT_TRUE(d == Status::ok || d == Status::unsupported) << to_string(d);
      }
    }
    small = {};
    large = {};
    EXPECT_EQ(y.ctx->close(), Status::ok);
    EXPECT_EQ(x.ctx->close(), Status::ok);
    EXPECT_EQ(x.ctx->open_instance(Track::small).status(), Status::not_initialized);
  }
}

}  // namespace
}  // namespace pier::conformance
