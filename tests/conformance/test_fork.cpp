// pier conformance: real processes. A forked peer exchanges data with the
// parent (rendezvous data carried over a pipe, as the core would carry it);
// a peer SIGKILLed mid-transfer breaks its instances' pending packets while
// another peer goes on.
#include <signal.h>
#include <sys/uio.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <thread>

#include "harness.hpp"
#include "process.hpp"

namespace pier::conformance {
namespace {

using namespace std::chrono_literals;

constexpr std::size_t fork_sizes[] = {0, 1, 4095, 65536, 1 << 20, 16 << 20};

bool fits_small(const Caps& c, std::size_t len) {
  return c.max_packet == 0 || len <= c.max_packet;
}

std::span<const std::byte> as_bytes(std::string_view s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

/// Posts a send, retrying no_resource, and polls it to completion.
Status post_and_finish(Instance& tx, Packet& s, Deadline deadline) {
  Status st = Status::no_resource;
  const Status d = drive(
      [&] {
        st = tx.send_post(s);
        return st != Status::no_resource;
      },
      deadline);
  if (d != Status::ok) return d;
  return st == Status::in_progress ? finish_send(tx, s, deadline) : st;
}

/// One leg of the echo protocol, identical on both sides: post the receive
/// (publishing its rdv_data over the pipe), learn the peer's rdv_data, then
/// (send_first) send and receive, or receive and send back what came.
Status echo_leg(Instance& inst, const Caps& caps, Child& chan, std::vector<std::byte>& out,
                std::vector<std::byte>& in, std::size_t len, bool send_first) {
  const Deadline deadline = default_deadline();
  ::iovec riov{in.data(), len};
  Packet r;
  Status rs = Status::in_progress;
  if (caps.recv_post) {
    r.set_iovec(&riov, 1);
    rs = inst.recv_post(r);
    if (rs != Status::in_progress && rs != Status::ok) return rs;
  }
  if (Status s = chan.send({r.rdv_data.data(), r.rdv_len}); s != Status::ok) return s;
  std::vector<std::byte> peer_rdv;
  if (Status s = chan.receive(peer_rdv, deadline); s != Status::ok) return s;
  ::iovec siov{out.data(), len};
  Packet s;
  s.set_iovec(&siov, 1);
  if (peer_rdv.size() > Packet::rdv_capacity) return Status::malformed;
  if (!peer_rdv.empty()) std::memcpy(s.rdv_data.data(), peer_rdv.data(), peer_rdv.size());
  s.rdv_len = static_cast<std::uint8_t>(peer_rdv.size());
  auto receive = [&]() -> Status {
    if (!caps.recv_post) {
      std::size_t got = 0;
      const Status st = recv_bytes(inst, caps, {in.data(), len}, &got, deadline);
      return st == Status::ok && got != len ? Status::malformed : st;
    }
    if (rs == Status::in_progress) rs = finish_recv(inst, r, deadline);
    return rs == Status::ok && r.length != len ? Status::malformed : rs;
  };
  if (send_first) {
    if (Status st = post_and_finish(inst, s, deadline); st != Status::ok) return st;
    return receive();
  }
  if (Status st = receive(); st != Status::ok) return st;
  std::memcpy(out.data(), in.data(), len);
  return post_and_finish(inst, s, deadline);
}

/// Child side: make a node, trade urls, connect one instance per track.
struct Peer {
  Node node;
  std::unique_ptr<Instance> small, large;
  std::vector<std::byte> parent_url;
};

int connect_peer(const std::string& spec, Child& chan, Peer& p, bool want_large) {
  if (make_node(spec, p.node) != Status::ok) return 10;
  if (chan.send(p.node.url) != Status::ok) return 11;
  if (chan.receive(p.parent_url, default_deadline()) != Status::ok) return 12;
  auto s = p.node.ctx->open_instance(Track::small);
  if (!s) return 13;
  p.small = std::move(*s);
  std::vector<Instance*> all{p.small.get()};
  if (want_large) {
    auto l = p.node.ctx->open_instance(Track::large);
    if (!l) return 13;
    p.large = std::move(*l);
    all.push_back(p.large.get());
  }
  for (Instance* i : all) {
    const Status st = i->connect_async(p.parent_url);
    if (st != Status::ok && st != Status::in_progress) return 14;
  }
  return finish_connect(all, default_deadline()) == Status::ok ? 0 : 15;
}

CONFORMANCE_TEST(ForkedExchange) {
  if (in_process_only(spec())) GTEST_SKIP() << spec() << " reaches no other process";
  const std::string sp = spec();
  Child child([sp](Child& chan) {
    Peer p;
    if (int e = connect_peer(sp, chan, p, true); e != 0) return e;
    std::vector<std::byte> out(16 << 20), in(16 << 20);
    const Caps& c = p.node.props.caps;
    int i = 0;
    for (const std::size_t len : fork_sizes) {
      ++i;
      Instance& inst = fits_small(c, len) ? *p.small : *p.large;
      if (!fits_small(c, len) && !c.recv_post) continue;
      if (echo_leg(inst, c, chan, out, in, len, false) != Status::ok) return 20 + i;
    }
    std::vector<std::byte> bye;
    if (chan.receive(bye, default_deadline()) != Status::ok) return 30;
    p.small.reset();
    p.large.reset();
    return p.node.ctx->close() == Status::ok ? 0 : 31;
  });
  ASSERT_TRUE(child.started());
  Node me;
  ASSERT_EQ(make_node(spec(), me), Status::ok);
  std::vector<std::byte> child_url;
  ASSERT_EQ(child.receive(child_url, default_deadline()), Status::ok);
  ASSERT_EQ(child.send(me.url), Status::ok);
  auto small = me.ctx->open_instance(Track::small);
  auto large = me.ctx->open_instance(Track::large);
  ASSERT_TRUE(small.has_value() && large.has_value());
  for (Instance* i : {small->get(), large->get()}) {
    const Status st = i->connect_async(child_url);
    ASSERT_TRUE(st == Status::ok || st == Status::in_progress) << to_string(st);
  }
  Instance* both[] = {small->get(), large->get()};
  ASSERT_EQ(finish_connect(both, default_deadline()), Status::ok);
  const Caps& c = me.props.caps;
  std::vector<std::byte> out(16 << 20), in(16 << 20);
  for (const std::size_t len : fork_sizes) {
    if (!fits_small(c, len) && !c.recv_post) continue;
    SCOPED_TRACE(::testing::Message() << len << " bytes");
    fill_pattern({out.data(), len}, 800 + len);
    std::fill(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(len), std::byte{0});
    Instance& inst = fits_small(c, len) ? **small : **large;
    ASSERT_EQ(echo_leg(inst, c, child, out, in, len, true), Status::ok);
    EXPECT_EQ(check_pattern({in.data(), len}, 800 + len), len);
  }
  ASSERT_EQ(child.send(as_bytes("bye")), Status::ok);
  int code = -1;
  ASSERT_EQ(child.wait_exit(default_deadline(), &code), Status::ok);
  EXPECT_EQ(code, 0) << "the child failed at step " << code;
}

/// Echo peer: returns every packet until an empty one arrives.
int run_echo_peer(const std::string& spec, Child& chan) {
  Peer p;
  if (int e = connect_peer(spec, chan, p, false); e != 0) return e;
  const Caps& c = p.node.props.caps;
  std::vector<std::byte> buf(1 << 16);
  for (;;) {
    std::size_t got = 0;
    if (recv_bytes(*p.small, c, buf, &got, default_deadline()) != Status::ok) return 40;
    if (got == 0) break;
    ::iovec iov{buf.data(), got};
    Packet s;
    s.set_iovec(&iov, 1);
    if (post_and_finish(*p.small, s, default_deadline()) != Status::ok) return 41;
  }
  return 0;
}

/// Victim: sends three packets, says "ready", then waits to be killed.
int run_victim(const std::string& spec, Child& chan) {
  Peer p;
  if (int e = connect_peer(spec, chan, p, true); e != 0) return e;
  for (unsigned i = 0; i < 3; ++i) {
    std::array<std::byte, 100> msg{};
    fill_pattern(msg, 700 + i);
    ::iovec iov{msg.data(), msg.size()};
    Packet s;
    s.set_iovec(&iov, 1);
    if (post_and_finish(*p.small, s, default_deadline()) != Status::ok) return 50;
  }
  if (chan.send(as_bytes("ready")) != Status::ok) return 51;
  for (;;) ::pause();
}

Status echo_with(Instance& inst, const Caps& c, std::size_t len, std::uint64_t seed) {
  std::vector<std::byte> out(len), in(len);
  fill_pattern(out, seed);
  ::iovec iov{out.data(), len};
  Packet s;
  s.set_iovec(&iov, 1);
  if (Status st = post_and_finish(inst, s, default_deadline()); st != Status::ok) return st;
  std::size_t got = 0;
  if (Status st = recv_bytes(inst, c, in, &got, default_deadline()); st != Status::ok) return st;
  return got == len && check_pattern(in, seed) == len ? Status::ok : Status::malformed;
}

CONFORMANCE_TEST(KilledPeerBreaksOnlyItsInstances) {
  if (in_process_only(spec())) GTEST_SKIP() << spec() << " reaches no other process";
  const std::string sp = spec();
  Child victim([sp](Child& chan) { return run_victim(sp, chan); });
  Child good([sp](Child& chan) { return run_echo_peer(sp, chan); });
  ASSERT_TRUE(victim.started() && good.started());
  Node me;
  ASSERT_EQ(make_node(spec(), me), Status::ok);
  const Caps& c = me.props.caps;
  std::vector<std::byte> victim_url, good_url;
  ASSERT_EQ(victim.receive(victim_url, default_deadline()), Status::ok);
  ASSERT_EQ(good.receive(good_url, default_deadline()), Status::ok);
  ASSERT_EQ(victim.send(me.url), Status::ok);
  ASSERT_EQ(good.send(me.url), Status::ok);
  auto vs = me.ctx->open_instance(Track::small);
  auto vl = me.ctx->open_instance(Track::large);
  auto gs = me.ctx->open_instance(Track::small);
  ASSERT_TRUE(vs.has_value() && vl.has_value() && gs.has_value());
  ASSERT_TRUE(is_success((*vs)->connect_async(victim_url)));
  ASSERT_TRUE(is_success((*vl)->connect_async(victim_url)));
  ASSERT_TRUE(is_success((*gs)->connect_async(good_url)));
  Instance* all[] = {vs->get(), vl->get(), gs->get()};
  ASSERT_EQ(finish_connect(all, default_deadline()), Status::ok);
  Instance& v_small = **vs;
  Instance& v_large = **vl;
  Instance& g_small = **gs;

  for (unsigned i = 0; i < 3; ++i) {
    std::array<std::byte, 128> got_bytes{};
    std::size_t got = 0;
    ASSERT_EQ(recv_bytes(v_small, c, got_bytes, &got, default_deadline()), Status::ok);
    ASSERT_EQ(got, 100u);
    EXPECT_EQ(check_pattern({got_bytes.data(), 100}, 700 + i), 100u);
  }
  std::vector<std::byte> ready;
  ASSERT_EQ(victim.receive(ready, default_deadline()), Status::ok);

  // Pending on the victim's instances: receives on both tracks, small sends
  // until the driver pushes back, and a large send nobody will take.
  std::array<std::byte, 256> rbuf{};
  std::vector<std::byte> lbuf(1 << 20), bulk(4 << 20), small_src(1024);
  ::iovec riov{rbuf.data(), rbuf.size()}, liov{lbuf.data(), lbuf.size()};
  ::iovec biov{bulk.data(), bulk.size()}, siov{small_src.data(), small_src.size()};
  Packet r_small, r_large, s_large;
  Status rs_small = Status::unsupported, rs_large = Status::unsupported;
  if (c.recv_post) {
    r_small.set_iovec(&riov, 1);
    r_large.set_iovec(&liov, 1);
    rs_small = v_small.recv_post(r_small);
    rs_large = v_large.recv_post(r_large);
    ASSERT_EQ(rs_small, Status::in_progress);
    ASSERT_EQ(rs_large, Status::in_progress);
  }
  std::vector<Packet> sends(64);
  std::vector<Status> send_status(sends.size(), Status::unsupported);
  for (std::size_t i = 0; i < sends.size(); ++i) {
    sends[i].set_iovec(&siov, 1);
    send_status[i] = v_small.send_post(sends[i]);
    if (send_status[i] == Status::no_resource) break;
    ASSERT_TRUE(is_success(send_status[i])) << to_string(send_status[i]);
  }
  s_large.set_iovec(&biov, 1);
  Status ls = c.needs_rdv ? Status::unsupported : v_large.send_post(s_large);
  if (!c.needs_rdv) {
    ASSERT_TRUE(is_success(ls) || ls == Status::no_resource) << to_string(ls);
  }

  for (unsigned i = 0; i < 10; ++i)
    ASSERT_EQ(echo_with(g_small, c, 1 + i * 300, 900 + i), Status::ok);
  victim.kill_now();

  // Death is noticed without any new traffic, and every pending packet of
  // the victim's instances completes broken.
  if (c.recv_post) {
    // A blocking wait must wake for the death, not sleep to its deadline.
    const Status small_end = c.blocking_wait ? v_small.recv_wait(r_small, default_deadline())
                                             : finish_recv(v_small, r_small, default_deadline());
    EXPECT_EQ(small_end, Status::broken);
    EXPECT_EQ(finish_recv(v_large, r_large, default_deadline()), Status::broken);
  }
  for (std::size_t i = 0; i < sends.size(); ++i) {
    if (send_status[i] != Status::in_progress) continue;
    const Status st = finish_send(v_small, sends[i], default_deadline());
    EXPECT_TRUE(st == Status::ok || st == Status::broken) << "send " << i << ": " << to_string(st);
  }
  if (ls == Status::in_progress) {
    const Status st = finish_send(v_large, s_large, default_deadline());
    EXPECT_TRUE(st == Status::ok || st == Status::broken) << "large send: " << to_string(st);
  }
  Packet after;
  after.set_iovec(&siov, 1);
  Status as = Status::in_progress;
  EXPECT_EQ(drive(
                [&] {
                  as = v_small.send_post(after);
                  if (as == Status::in_progress)
                    as = finish_send(v_small, after, default_deadline());
                  return as != Status::ok && as != Status::no_resource;
                },
                default_deadline()),
            Status::ok);
  EXPECT_EQ(as, Status::broken) << "a post to a dead peer";

  // The other peer goes on.
  for (unsigned i = 0; i < 100; ++i) {
    ASSERT_EQ(echo_with(g_small, c, 1 + (i * 977) % 20000, 1000 + i), Status::ok) << "echo " << i;
  }
  Packet last;
  ::iovec none{small_src.data(), 0};
  last.set_iovec(&none, 1);
  EXPECT_EQ(post_and_finish(g_small, last, default_deadline()), Status::ok);
  int code = -1;
  ASSERT_EQ(good.wait_exit(default_deadline(), &code), Status::ok);
  EXPECT_EQ(code, 0) << "the surviving peer failed at step " << code;
}

/// Sender peer: `count` numbered packets, then waits for the parent's "bye".
int run_sender(const std::string& spec, Child& chan, unsigned id, unsigned count) {
  Peer p;
  if (int e = connect_peer(spec, chan, p, false); e != 0) return e;
  for (unsigned i = 0; i < count; ++i) {
    std::array<std::byte, 64> msg{};
    const std::uint32_t tag = id * 100000 + i;
    std::memcpy(msg.data(), &tag, 4);
    fill_pattern({msg.data() + 4, 60}, tag);
    ::iovec iov{msg.data(), msg.size()};
    Packet s;
    s.set_iovec(&iov, 1);
    if (post_and_finish(*p.small, s, default_deadline()) != Status::ok) return 60;
  }
  std::vector<std::byte> bye;
  return chan.receive(bye, default_deadline()) == Status::ok ? 0 : 61;
}

CONFORMANCE_TEST(ForkedReceiveAny) {
  if (in_process_only(spec())) GTEST_SKIP() << spec() << " reaches no other process";
  {
    Node probe;
    ASSERT_EQ(make_node(spec(), probe), Status::ok);
    if (!probe.props.caps.recv_any) GTEST_SKIP() << "recv_any not claimed";
  }
  constexpr unsigned per_child = 200;
  const std::string sp = spec();
  Child one([sp](Child& chan) { return run_sender(sp, chan, 1, per_child); });
  Child two([sp](Child& chan) { return run_sender(sp, chan, 2, per_child); });
  ASSERT_TRUE(one.started() && two.started());
  Node me;
  ASSERT_EQ(make_node(spec(), me), Status::ok);
  const Caps& c = me.props.caps;
  std::vector<std::byte> url1, url2;
  ASSERT_EQ(one.receive(url1, default_deadline()), Status::ok);
  ASSERT_EQ(two.receive(url2, default_deadline()), Status::ok);
  ASSERT_EQ(one.send(me.url), Status::ok);
  ASSERT_EQ(two.send(me.url), Status::ok);
  auto i1 = me.ctx->open_instance(Track::small);
  auto i2 = me.ctx->open_instance(Track::small);
  ASSERT_TRUE(i1.has_value() && i2.has_value());
  ASSERT_TRUE(is_success((*i1)->connect_async(url1)));
  ASSERT_TRUE(is_success((*i2)->connect_async(url2)));
  Instance* both[] = {i1->get(), i2->get()};
  ASSERT_EQ(finish_connect(both, default_deadline()), Status::ok);
  // Dispatch by wait_any() alone; each peer's packets arrive on its own
  // instance and in its own order.
  unsigned next[3] = {0, 0, 0};
  for (unsigned n = 0; n < 2 * per_child; ++n) {
    Instance* ready = nullptr;
    ASSERT_EQ(me.ctx->wait_any(&ready, default_deadline()), Status::ok) << "packet " << n;
    ASSERT_TRUE(ready == both[0] || ready == both[1]);
    const unsigned id = ready == both[0] ? 1 : 2;
    std::array<std::byte, 64> buf{};
    std::size_t got = 0;
    ASSERT_EQ(recv_bytes(*ready, c, buf, &got, default_deadline()), Status::ok);
    ASSERT_EQ(got, 64u);
    std::uint32_t tag = 0;
    std::memcpy(&tag, buf.data(), 4);
    ASSERT_EQ(tag, id * 100000 + next[id]) << "from peer " << id;
    ASSERT_EQ(check_pattern({buf.data() + 4, 60}, tag), 60u);
    ++next[id];
  }
  Instance* ready = nullptr;
  EXPECT_EQ(me.ctx->probe_any(&ready), Status::in_progress) << "a packet nobody sent";
  for (Child* ch : {&one, &two}) {
    ASSERT_EQ(ch->send(as_bytes("bye")), Status::ok);
    int code = -1;
    ASSERT_EQ(ch->wait_exit(default_deadline(), &code), Status::ok);
    EXPECT_EQ(code, 0) << "a sender failed at step " << code;
  }
}

/// Orderly leaver: two packets, then disconnect, close and exit.
int run_leaver(const std::string& spec, Child& chan) {
  Peer p;
  if (int e = connect_peer(spec, chan, p, false); e != 0) return e;
  // Both ends connected before anything is sent: this case is about the
  // orderly end, not about a peer that leaves during connection set-up.
  std::vector<std::byte> go;
  if (chan.receive(go, default_deadline()) != Status::ok) return 73;
  for (unsigned i = 0; i < 2; ++i) {
    std::array<std::byte, 48> msg{};
    fill_pattern(msg, 1300 + i);
    ::iovec iov{msg.data(), msg.size()};
    Packet s;
    s.set_iovec(&iov, 1);
    if (post_and_finish(*p.small, s, default_deadline()) != Status::ok) return 70;
  }
  const Status d = p.small->disconnect();
  if (d != Status::ok && d != Status::unsupported) return 71;
  p.small.reset();
  return p.node.ctx->close() == Status::ok ? 0 : 72;
}

CONFORMANCE_TEST(ForkedPeerLeavesInOrder) {
  if (in_process_only(spec())) GTEST_SKIP() << spec() << " reaches no other process";
  const std::string sp = spec();
  Child leaver([sp](Child& chan) { return run_leaver(sp, chan); });
  ASSERT_TRUE(leaver.started());
  Node me;
  ASSERT_EQ(make_node(spec(), me), Status::ok);
  const Caps& c = me.props.caps;
  std::vector<std::byte> url;
  ASSERT_EQ(leaver.receive(url, default_deadline()), Status::ok);
  ASSERT_EQ(leaver.send(me.url), Status::ok);
  auto inst = me.ctx->open_instance(Track::small);
  ASSERT_TRUE(inst.has_value());
  ASSERT_TRUE(is_success((*inst)->connect_async(url)));
  Instance* one[] = {inst->get()};
  ASSERT_EQ(finish_connect(one, default_deadline()), Status::ok);
  ASSERT_EQ(leaver.send(as_bytes("go")), Status::ok);
  int code = -1;
  ASSERT_EQ(leaver.wait_exit(default_deadline(), &code), Status::ok);
  EXPECT_EQ(code, 0) << "the leaving peer failed at step " << code;
  // What was sent before the orderly close still arrives, in order; then
  // the connection reports its end instead of waiting forever.
  for (unsigned i = 0; i < 2; ++i) {
    std::array<std::byte, 64> buf{};
    std::size_t got = 0;
    ASSERT_EQ(recv_bytes(**inst, c, buf, &got, default_deadline()), Status::ok) << "packet " << i;
    EXPECT_EQ(got, 48u);
    EXPECT_EQ(check_pattern({buf.data(), 48}, 1300 + i), 48u);
  }
  std::array<std::byte, 64> buf{};
  std::size_t got = 0;
  const Status end = recv_bytes(**inst, c, buf, &got, default_deadline());
  EXPECT_TRUE(end == Status::closed || end == Status::broken) << to_string(end);
}

}  // namespace
}  // namespace pier::conformance
