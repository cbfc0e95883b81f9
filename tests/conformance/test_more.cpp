// pier conformance: back-pressure, many gates, receive-any, blocking waits,
// prefetch and rendezvous data.
#include <poll.h>
#include <sys/uio.h>

#include <array>
#include <atomic>
#include <cstring>
#include <set>
#include <thread>

#include "harness.hpp"

namespace pier::conformance {
namespace {

using namespace std::chrono_literals;

/// Posts one small iovec packet, retrying no_resource until the deadline;
/// then polls it to completion.
Status send_now(Instance& tx, std::span<const std::byte> bytes) {
  ::iovec iov{const_cast<std::byte*>(bytes.data()), bytes.size()};
  Packet s;
  s.set_iovec(&iov, 1);
  Status st = Status::no_resource;
  const Deadline deadline = default_deadline();
  const Status d = drive(
      [&] {
        st = tx.send_post(s);
        return st != Status::no_resource;
      },
      deadline);
  if (d != Status::ok) return d;
  if (st == Status::in_progress) st = finish_send(tx, s, deadline);
  return st;
}

CONFORMANCE_TEST(BackPressure) {
  Node x, y;
  ASSERT_EQ(make_node(spec(), x), Status::ok);
  ASSERT_EQ(make_node(spec(), y), Status::ok);
  Link l;
  ASSERT_EQ(connect_link(x, y, Track::small, l), Status::ok);
  const Caps& c = x.props.caps;
  constexpr std::size_t len = 256;
  constexpr std::uint32_t most = 65536;  // 16 MiB in flight without a no_resource is a failure
  std::vector<std::byte> arena(std::size_t{most} * len);
  std::vector<Packet> pkts(most);
  std::vector<::iovec> iovs(most);
  std::vector<bool> pending(most, false);
  std::uint32_t posted = 0;
  for (; posted < most; ++posted) {
    std::byte* at = arena.data() + std::size_t{posted} * len;
    std::memcpy(at, &posted, 4);
    fill_pattern({at + 4, len - 4}, posted);
    iovs[posted] = {at, len};
    pkts[posted].set_iovec(&iovs[posted], 1);
    const Status st = l.a->send_post(pkts[posted]);
    if (st == Status::no_resource) break;
    ASSERT_TRUE(st == Status::ok || st == Status::in_progress) << to_string(st);
    pending[posted] = st == Status::in_progress;
  }
  ASSERT_LT(posted, most) << "never answered no_resource";
  ASSERT_GT(posted, 0u) << "no_resource on an idle connection";
  // Progress drains: everything posted arrives, in order, and sends complete.
  std::array<std::byte, len> rbuf{};
  std::uint32_t reap = 0;
  for (std::uint32_t i = 0; i < posted; ++i) {
    while (reap < posted && !pending[reap]) ++reap;
    if (reap < posted) {
      const Status st = l.a->send_poll(pkts[reap]);
      if (st != Status::in_progress) {
        EXPECT_EQ(st, Status::ok);
        pending[reap] = false;
      }
    }
    std::size_t got = 0;
    ASSERT_EQ(recv_bytes(*l.b, c, rbuf, &got, default_deadline()), Status::ok) << "packet " << i;
    std::uint32_t seq = 0;
    std::memcpy(&seq, rbuf.data(), 4);
    ASSERT_EQ(seq, i);
    ASSERT_EQ(got, len);
    ASSERT_EQ(check_pattern({rbuf.data() + 4, len - 4}, i), len - 4);
  }
  for (std::uint32_t i = 0; i < posted; ++i) {
    if (pending[i]) {
      EXPECT_EQ(finish_send(*l.a, pkts[i], default_deadline()), Status::ok);
    }
  }
  // Room again after the drain.
  std::array<std::byte, 32> src{}, dst{};
  fill_pattern(src, 9);
  std::size_t got = 0;
  EXPECT_EQ(round_trip(*l.a, *l.b, c, src, dst, &got), Status::ok);
  EXPECT_EQ(check_pattern(dst, 9), dst.size());
  RecordProperty("accepted_before_no_resource", static_cast<int>(posted));
}

CONFORMANCE_TEST(ThirtyTwoGates) {
  constexpr int leaves = 32;
  Node hub;
  ASSERT_EQ(make_node(spec(), hub), Status::ok);
  std::vector<Node> leaf(leaves);
  for (auto& n : leaf) ASSERT_EQ(make_node(spec(), n), Status::ok);
  std::vector<std::unique_ptr<Instance>> at_hub, at_leaf;
  std::vector<Instance*> all;
  for (int i = 0; i < leaves; ++i) {
    auto h = hub.ctx->open_instance(Track::small);
    auto l = leaf[i].ctx->open_instance(Track::small);
    ASSERT_TRUE(h.has_value() && l.has_value());
    at_hub.push_back(std::move(*h));
    at_leaf.push_back(std::move(*l));
  }
  // Every connection starts before any completes.
  for (int i = 0; i < leaves; ++i) {
    const Status a = at_leaf[i]->connect_async(hub.url);
    const Status b = at_hub[i]->connect_async(leaf[i].url);
    ASSERT_TRUE(a == Status::ok || a == Status::in_progress) << to_string(a);
    ASSERT_TRUE(b == Status::ok || b == Status::in_progress) << to_string(b);
    all.push_back(at_leaf[i].get());
    all.push_back(at_hub[i].get());
  }
  ASSERT_EQ(finish_connect(all, default_deadline()), Status::ok);
  const Caps& c = hub.props.caps;
  for (int i = 0; i < leaves; ++i) {
    std::array<std::byte, 12> msg{};
    fill_pattern(msg, 100 + static_cast<unsigned>(i));
    ASSERT_EQ(send_now(*at_leaf[i], msg), Status::ok) << "leaf " << i;
  }
  for (int i = 0; i < leaves; ++i) {
    std::array<std::byte, 16> got_bytes{};
    std::size_t got = 0;
    ASSERT_EQ(recv_bytes(*at_hub[i], c, got_bytes, &got, default_deadline()), Status::ok);
    EXPECT_EQ(got, 12u);
    EXPECT_EQ(check_pattern({got_bytes.data(), 12}, 100 + static_cast<unsigned>(i)), 12u)
        << "hub instance " << i << " got another leaf's packet";
    std::array<std::byte, 12> reply{};
    fill_pattern(reply, 200 + static_cast<unsigned>(i));
    ASSERT_EQ(send_now(*at_hub[i], reply), Status::ok);
  }
  for (int i = 0; i < leaves; ++i) {
    std::array<std::byte, 16> got_bytes{};
    std::size_t got = 0;
    ASSERT_EQ(recv_bytes(*at_leaf[i], c, got_bytes, &got, default_deadline()), Status::ok);
    EXPECT_EQ(got, 12u);
    EXPECT_EQ(check_pattern({got_bytes.data(), 12}, 200 + static_cast<unsigned>(i)), 12u);
  }
}

CONFORMANCE_TEST(ReceiveAny) {
  Node hub;
  ASSERT_EQ(make_node(spec(), hub), Status::ok);
  const Caps& c = hub.props.caps;
  if (!c.recv_any) GTEST_SKIP() << "recv_any not claimed";
  constexpr int peers = 3;
  std::vector<Node> peer(peers);
  std::vector<Link> links(peers);
  for (int i = 0; i < peers; ++i) {
    ASSERT_EQ(make_node(spec(), peer[i]), Status::ok);
    ASSERT_EQ(connect_link(hub, peer[i], Track::small, links[i]), Status::ok);
  }
  Instance* ready = links[0].a.get();
  EXPECT_EQ(hub.ctx->probe_any(&ready), Status::in_progress);
  EXPECT_EQ(ready, nullptr);
  EXPECT_EQ(hub.ctx->wait_any(&ready, deadline_after(20ms)), Status::timeout);

  // Each packet is reported on the instance it arrived on, and its receive
  // then completes at once.
  auto receive_on = [&](Instance* inst, std::uint64_t seed) {
    std::array<std::byte, 32> buf{};
    Packet r;
    ::iovec iov{buf.data(), buf.size()};
    Status st;
    if (c.recv_post) {
      r.set_iovec(&iov, 1);
      st = inst->recv_post(r);
      if (st == Status::in_progress) st = inst->recv_poll(r);
      EXPECT_EQ(st, Status::ok) << "receive after probe_any() did not complete at once";
      if (st == Status::in_progress) {
        EXPECT_EQ(inst->recv_cancel(r), Status::ok);
      }
      if (st == Status::ok) {
        EXPECT_EQ(check_pattern({buf.data(), r.length}, seed), r.length);
      }
    } else {
      st = inst->recv_poll(r);
      EXPECT_EQ(st, Status::ok) << "receive after probe_any() did not complete at once";
      if (st == Status::ok) {
        EXPECT_EQ(check_pattern({r.buf, r.length}, seed), r.length);
        EXPECT_EQ(inst->recv_buf_release(r), Status::ok);
      }
    }
  };
  std::array<std::byte, 20> msg{};
  fill_pattern(msg, 301);
  ASSERT_EQ(send_now(*links[1].b, msg), Status::ok);
  ASSERT_EQ(
      drive([&] { return hub.ctx->probe_any(&ready) != Status::in_progress; }, default_deadline()),
      Status::ok);
  ASSERT_EQ(ready, links[1].a.get());
  receive_on(ready, 301);

  fill_pattern(msg, 302);
  ASSERT_EQ(send_now(*links[0].b, msg), Status::ok);
  ASSERT_EQ(send_now(*links[2].b, msg), Status::ok);
  std::set<Instance*> seen;
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(hub.ctx->wait_any(&ready, default_deadline()), Status::ok);
    ASSERT_NE(ready, nullptr);
    seen.insert(ready);
    receive_on(ready, 302);
  }
  EXPECT_EQ(seen, (std::set<Instance*>{links[0].a.get(), links[2].a.get()}));

  // wait_any() wakes for a packet sent from another thread...
  std::thread sender([&] {
    std::this_thread::sleep_for(10ms);
    fill_pattern(msg, 303);
    EXPECT_EQ(send_now(*links[2].b, msg), Status::ok);
  });
  Status woke = hub.ctx->wait_any(&ready, default_deadline());
  sender.join();
  EXPECT_EQ(woke, Status::ok);
  if (woke == Status::ok) {
    EXPECT_EQ(ready, links[2].a.get());
    receive_on(ready, 303);
  }
  // ...and ends with canceled when cancel_any() is called.
  std::atomic<bool> done{false};
  Status waited = Status::in_progress;
  std::thread waiter([&] {
    waited = hub.ctx->wait_any(&ready, default_deadline());
    done = true;
  });
  const Status d = drive(
      [&] {
        EXPECT_EQ(hub.ctx->cancel_any(), Status::ok);
        std::this_thread::sleep_for(1ms);
        return done.load();
      },
      default_deadline());
  waiter.join();
  EXPECT_EQ(d, Status::ok);
  EXPECT_EQ(waited, Status::canceled);
}

// wait_arm()/wait_disarm(): what a caller sleeping on several contexts at
// once (the core) polls. A packet or a cancel_any() makes a descriptor
// readable; disarming takes the cancel back.
CONFORMANCE_TEST(SleepOnDescriptors) {
  Node hub, leaf;
  ASSERT_EQ(make_node(spec(), hub), Status::ok);
  const Caps& c = hub.props.caps;
  if (!c.wait_fds) GTEST_SKIP() << "wait_fds not claimed";
  ASSERT_EQ(make_node(spec(), leaf), Status::ok);
  Link link;
  ASSERT_EQ(connect_link(hub, leaf, Track::small, link), Status::ok);
  std::vector<::pollfd> fds;
  // Arms with nothing to report. in_progress ("something may be there"),
  // or a descriptor readable at once, is allowed for what the connection
  // left behind (shm: a reply on the socket, drained at the disarm): the
  // arm is tried again, and a packet must not turn up.
  auto arm_quiet = [&] {
    Status s = Status::in_progress;
    const Deadline until = default_deadline();
    while (s == Status::in_progress && Clock::now() < until) {
      fds.clear();
      s = hub.ctx->wait_arm(fds);
      if (s == Status::ok && ::poll(fds.data(), fds.size(), 0) == 0) break;
      if (s != Status::ok && s != Status::in_progress) break;
      s = Status::in_progress;
      EXPECT_EQ(hub.ctx->wait_disarm(), Status::ok);
      Instance* any = nullptr;
      EXPECT_EQ(hub.ctx->probe_any(&any), Status::in_progress) << "a packet nobody sent";
      std::this_thread::sleep_for(1ms);
    }
    return s;
  };
  const Status armed = arm_quiet();
  if (armed == Status::unsupported) GTEST_SKIP() << "this context has no descriptor to give";
  ASSERT_EQ(armed, Status::ok);
  ASSERT_FALSE(fds.empty());

  // A packet from another thread makes one readable.
  std::array<std::byte, 20> msg{};
  fill_pattern(msg, 401);
  std::thread sender([&] {
    std::this_thread::sleep_for(10ms);
    EXPECT_EQ(send_now(*link.b, msg), Status::ok);
  });
  const int woke = ::poll(fds.data(), fds.size(), 20000);
  sender.join();
  EXPECT_GT(woke, 0);
  EXPECT_EQ(hub.ctx->wait_disarm(), Status::ok);
  auto take = [&](unsigned seed) {
    Instance* ready = nullptr;
    ASSERT_EQ(drive([&] { return hub.ctx->probe_any(&ready) != Status::in_progress; },
                    default_deadline()),
              Status::ok);
    ASSERT_EQ(ready, link.a.get());
    std::array<std::byte, 32> got_bytes{};
    std::size_t got = 0;
    ASSERT_EQ(recv_bytes(*ready, c, got_bytes, &got, default_deadline()), Status::ok);
    EXPECT_EQ(got, msg.size());
    EXPECT_EQ(check_pattern({got_bytes.data(), got}, seed), got);
  };
  take(401);

  // A packet already there: no sleep, or one that ends at once.
  fill_pattern(msg, 402);
  ASSERT_EQ(send_now(*link.b, msg), Status::ok);
  Instance* ready = nullptr;
  ASSERT_EQ(
      drive([&] { return hub.ctx->probe_any(&ready) != Status::in_progress; }, default_deadline()),
      Status::ok);
  fds.clear();
  const Status again = hub.ctx->wait_arm(fds);
  if (again == Status::ok) {
    EXPECT_GT(::poll(fds.data(), fds.size(), 20000), 0) << "armed over a packet, and quiet";
  } else {
    EXPECT_EQ(again, Status::in_progress);
  }
  EXPECT_EQ(hub.ctx->wait_disarm(), Status::ok);
  take(402);

  // cancel_any() wakes the sleep; once disarmed, the cancel is spent and a
  // later wait_any() sleeps to its deadline.
  ASSERT_EQ(arm_quiet(), Status::ok);
  EXPECT_EQ(hub.ctx->cancel_any(), Status::ok);
  EXPECT_GT(::poll(fds.data(), fds.size(), 20000), 0);
  EXPECT_EQ(hub.ctx->wait_disarm(), Status::ok);
  EXPECT_EQ(hub.ctx->wait_any(&ready, deadline_after(20ms)), Status::timeout);
}

CONFORMANCE_TEST(BlockingWait) {
  Node x, y;
  ASSERT_EQ(make_node(spec(), x), Status::ok);
  ASSERT_EQ(make_node(spec(), y), Status::ok);
  const Caps& c = x.props.caps;
  if (!c.blocking_wait) GTEST_SKIP() << "blocking_wait not claimed";
  Link l;
  ASSERT_EQ(connect_link(x, y, Track::small, l), Status::ok);
  std::array<std::byte, 64> buf{}, msg{};
  ::iovec iov{buf.data(), buf.size()};
  Packet r;
  if (c.recv_post) {
    r.set_iovec(&iov, 1);
    ASSERT_EQ(l.b->recv_post(r), Status::in_progress);
  }
  EXPECT_EQ(l.b->recv_wait(r, deadline_after(20ms)), Status::timeout);
  fill_pattern(msg, 401);
  std::thread sender([&] {
    std::this_thread::sleep_for(10ms);
    EXPECT_EQ(send_now(*l.a, msg), Status::ok);
  });
  const Status st = l.b->recv_wait(r, default_deadline());
  sender.join();
  ASSERT_EQ(st, Status::ok);
  const std::byte* got = c.recv_post ? buf.data() : r.buf;
  EXPECT_EQ(r.length, msg.size());
  EXPECT_EQ(check_pattern({got, r.length}, 401), r.length);
  if (!c.recv_post) {
    EXPECT_EQ(l.b->recv_buf_release(r), Status::ok);
  }

  // send_wait() after one send_poll(): ok once the packet may be reused.
  ::iovec siov{msg.data(), msg.size()};
  Packet s;
  s.set_iovec(&siov, 1);
  Status ss = l.a->send_post(s);
  ASSERT_TRUE(ss == Status::ok || ss == Status::in_progress) << to_string(ss);
  if (ss == Status::in_progress) {
    ss = l.a->send_poll(s);
    if (ss == Status::in_progress) ss = l.a->send_wait(s, default_deadline());
  }
  EXPECT_EQ(ss, Status::ok);
  std::size_t n = 0;
  EXPECT_EQ(recv_bytes(*l.b, c, buf, &n, default_deadline()), Status::ok);

  // On a large track a send may complete only when the receiver takes it:
  // send_wait() must then sleep until another thread receives.
  if (!c.needs_rdv && c.recv_post) {
    Link big;
    ASSERT_EQ(connect_link(x, y, Track::large, big), Status::ok);
    std::vector<std::byte> bulk(1 << 20), sink(1 << 20);
    fill_pattern(bulk, 402);
    ::iovec biov{bulk.data(), bulk.size()};
    Packet bs;
    bs.set_iovec(&biov, 1);
    Status bst = big.a->send_post(bs);
    ASSERT_TRUE(bst == Status::ok || bst == Status::in_progress) << to_string(bst);
    if (bst == Status::in_progress) bst = big.a->send_poll(bs);
    std::thread receiver([&] {
      std::this_thread::sleep_for(10ms);
      std::size_t got_n = 0;
      EXPECT_EQ(recv_bytes(*big.b, c, sink, &got_n, default_deadline()), Status::ok);
      EXPECT_EQ(got_n, sink.size());
    });
    if (bst == Status::in_progress) bst = big.a->send_wait(bs, default_deadline());
    receiver.join();
    EXPECT_EQ(bst, Status::ok);
    EXPECT_EQ(check_pattern(sink, 402), sink.size());
  }
}

CONFORMANCE_TEST(Prefetch) {
  Node x, y;
  ASSERT_EQ(make_node(spec(), x), Status::ok);
  ASSERT_EQ(make_node(spec(), y), Status::ok);
  const Caps& c = x.props.caps;
  if (!c.prefetch) GTEST_SKIP() << "prefetch not claimed";
  Link l;
  ASSERT_EQ(connect_link(x, y, Track::large, l), Status::ok);
  std::vector<std::byte> src(100000), dst(100000);
  fill_pattern(src, 501);
  ::iovec siov{src.data(), src.size()};
  ::iovec riov{dst.data(), dst.size()};

  // Prefetched, then posted: the data moves as usual.
  Packet r, s;
  r.set_iovec(&riov, 1);
  s.set_iovec(&siov, 1);
  if (c.recv_post) {
    EXPECT_EQ(l.b->recv_prefetch(r), Status::ok);
  }
  EXPECT_EQ(l.a->send_prefetch(s), Status::ok);
  Status rs = c.recv_post ? l.b->recv_post(r) : Status::in_progress;
  ASSERT_TRUE(rs == Status::in_progress || rs == Status::ok) << to_string(rs);
  s.rdv_data = r.rdv_data;
  s.rdv_len = r.rdv_len;
  Status ss = l.a->send_post(s);
  ASSERT_TRUE(ss == Status::ok || ss == Status::in_progress) << to_string(ss);
  if (rs == Status::in_progress) rs = finish_both(*l.a, s, &ss, *l.b, r, default_deadline());
  if (ss == Status::in_progress) ss = finish_send(*l.a, s, default_deadline());
  EXPECT_EQ(ss, Status::ok);
  EXPECT_EQ(rs, Status::ok);
  EXPECT_EQ(check_pattern(dst, 501), dst.size());

  // Prefetched then unfetched (the data went elsewhere).
  Packet s2, r2;
  s2.set_iovec(&siov, 1);
  r2.set_iovec(&riov, 1);
  EXPECT_EQ(l.a->send_prefetch(s2), Status::ok);
  EXPECT_EQ(l.a->send_unfetch(s2), Status::ok);
  EXPECT_EQ(l.b->recv_prefetch(r2), Status::ok);
  EXPECT_EQ(l.b->recv_unfetch(r2), Status::ok);
  // Unfetching what was never prefetched is a caller error.
  Packet s3, r3;
  s3.set_iovec(&siov, 1);
  r3.set_iovec(&riov, 1);
  EXPECT_EQ(l.a->send_unfetch(s3), Status::invalid_argument);
  EXPECT_EQ(l.b->recv_unfetch(r3), Status::invalid_argument);
}

CONFORMANCE_TEST(RendezvousData) {
  Node x, y;
  ASSERT_EQ(make_node(spec(), x), Status::ok);
  ASSERT_EQ(make_node(spec(), y), Status::ok);
  const Caps& c = x.props.caps;
  if (!c.rdv_data) GTEST_SKIP() << "rdv_data not claimed";
  Link l;
  ASSERT_EQ(connect_link(x, y, Track::large, l), Status::ok);
  std::vector<std::byte> src(3 << 20), dst(3 << 20);
  ::iovec siov{src.data(), src.size()};
  ::iovec riov{dst.data(), dst.size()};
  for (int round = 0; round < 3; ++round) {
    fill_pattern(src, 600 + static_cast<unsigned>(round));
    Packet r, s;
    r.set_iovec(&riov, 1);
    s.set_iovec(&siov, 1);
    ASSERT_EQ(l.b->recv_post(r), Status::in_progress);
    ASSERT_GT(r.rdv_len, 0) << "rdv_data claimed but a large-track recv_post() left it empty";
    ASSERT_LE(r.rdv_len, Packet::rdv_capacity);
    s.rdv_data = r.rdv_data;
    s.rdv_len = r.rdv_len;
    Status ss = l.a->send_post(s);
    ASSERT_TRUE(ss == Status::ok || ss == Status::in_progress) << to_string(ss);
    const Status rs = finish_both(*l.a, s, &ss, *l.b, r, default_deadline());
    EXPECT_EQ(rs, Status::ok);
    EXPECT_EQ(ss, Status::ok);
    EXPECT_EQ(r.length, dst.size());
    EXPECT_EQ(check_pattern(dst, 600 + static_cast<unsigned>(round)), dst.size());
  }
  // A forged rdv is refused or ignored, never followed into wrong memory.
  Packet r, s;
  std::fill(dst.begin(), dst.end(), std::byte{0});
  fill_pattern(src, 650);
  r.set_iovec(&riov, 1);
  s.set_iovec(&siov, 1);
  ASSERT_EQ(l.b->recv_post(r), Status::in_progress);
  s.rdv_data.fill(std::byte{0xa5});
  s.rdv_len = r.rdv_len;
  Status ss = l.a->send_post(s);
  if (ss == Status::ok || ss == Status::in_progress) {
    const Status rs = finish_both(*l.a, s, &ss, *l.b, r, default_deadline());
    if (rs == Status::ok && ss == Status::ok) {
      EXPECT_EQ(check_pattern(dst, 650), dst.size()) << "followed a forged rdv";
    }
  } else {
    EXPECT_EQ(l.b->recv_cancel(r), Status::ok);
  }
}

}  // namespace
}  // namespace pier::conformance
