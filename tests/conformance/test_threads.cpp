// pier conformance: the two ends of a connection driven from two threads, and
// ordering of several sends queued on a large track.
#include <sys/uio.h>

#include <array>
#include <cstring>
#include <thread>

#include "harness.hpp"

namespace pier::conformance {
namespace {

/// Sends `count` numbered packets from its own thread through a window of
/// posted sends; returns the first failure, ok, or timeout.
Status send_numbered(Instance& tx, std::uint32_t count, std::uint64_t salt, Deadline deadline) {
  constexpr std::uint32_t window = 16;
  constexpr std::size_t max_len = 512;
  struct Slot {
    Packet pkt;
    ::iovec iov{};
    std::array<std::byte, max_len> bytes{};
    bool busy = false;
  };
  std::vector<Slot> slots(window);
  std::uint32_t sent = 0, oldest = 0;
  Status failure = Status::ok;
  const Status d = drive(
      [&] {
        while (oldest < sent) {
          Slot& o = slots[oldest % window];
          if (o.busy) {
            const Status st = tx.send_poll(o.pkt);
            if (st == Status::in_progress) break;
            if (st != Status::ok) failure = st;
            o.busy = false;
          }
          ++oldest;
        }
        while (sent < count && sent - oldest < window && failure == Status::ok) {
          Slot& n = slots[sent % window];
          const std::size_t len = 4 + (sent * 131u + salt) % (max_len - 4);
          std::memcpy(n.bytes.data(), &sent, 4);
          fill_pattern({n.bytes.data() + 4, len - 4}, salt + sent);
          n.pkt = Packet{};
          n.iov = {n.bytes.data(), len};
          n.pkt.set_iovec(&n.iov, 1);
          const Status st = tx.send_post(n.pkt);
          if (st == Status::no_resource) break;
          if (!is_success(st)) failure = st;
          n.busy = st == Status::in_progress;
          ++sent;
        }
        return failure != Status::ok || oldest == count;
      },
      deadline);
  return failure != Status::ok ? failure : d;
}

/// Receives and checks what send_numbered() sent.
Status receive_numbered(Instance& rx, const Caps& caps, std::uint32_t count, std::uint64_t salt,
                        Deadline deadline) {
  std::array<std::byte, 512> buf{};
  for (std::uint32_t i = 0; i < count; ++i) {
    std::size_t got = 0;
    if (Status st = recv_bytes(rx, caps, buf, &got, deadline); st != Status::ok) return st;
    std::uint32_t seq = ~0u;
    if (got >= 4) std::memcpy(&seq, buf.data(), 4);
    const std::size_t len = 4 + (i * 131u + salt) % (buf.size() - 4);
    if (seq != i || got != len) return Status::malformed;
    if (check_pattern({buf.data() + 4, len - 4}, salt + i) != len - 4) return Status::malformed;
  }
  return Status::ok;
}

CONFORMANCE_TEST(TwoThreadsBothWays) {
  Node x, y;
  ASSERT_EQ(make_node(spec(), x), Status::ok);
  ASSERT_EQ(make_node(spec(), y), Status::ok);
  Link l;
  ASSERT_EQ(connect_link(x, y, Track::small, l), Status::ok);
  const Caps& c = x.props.caps;
  constexpr std::uint32_t count = 5000;
  const Deadline deadline = default_deadline();
  // Thread x drives instance a, thread y drives instance b; each sends and
  // receives, interleaved, so both directions run at once.
  Status a_send = Status::in_progress, a_recv = Status::in_progress;
  Status b_send = Status::in_progress, b_recv = Status::in_progress;
  std::thread tx([&] {
    a_send = send_numbered(*l.a, count, 1000, deadline);
    a_recv = receive_numbered(*l.a, c, count, 2000, deadline);
  });
  std::thread ty([&] {
    b_recv = receive_numbered(*l.b, c, count, 1000, deadline);
    b_send = send_numbered(*l.b, count, 2000, deadline);
  });
  tx.join();
  ty.join();
  EXPECT_EQ(a_send, Status::ok);
  EXPECT_EQ(b_recv, Status::ok) << "x to y";
  EXPECT_EQ(b_send, Status::ok);
  EXPECT_EQ(a_recv, Status::ok) << "y to x";
}

CONFORMANCE_TEST(LargeTrackKeepsOrder) {
  Node x, y;
  ASSERT_EQ(make_node(spec(), x), Status::ok);
  ASSERT_EQ(make_node(spec(), y), Status::ok);
  const Caps& c = x.props.caps;
  if (c.needs_rdv) GTEST_SKIP() << "large-track sends wait for their receive (needs_rdv)";
  if (!c.recv_post) GTEST_SKIP() << "no posted receives";
  Link l;
  ASSERT_EQ(connect_link(x, y, Track::large, l), Status::ok);
  constexpr std::size_t len = 256 << 10;
  constexpr int most = 4;
  std::vector<std::vector<std::byte>> src(most, std::vector<std::byte>(len));
  std::vector<::iovec> iov(most);
  std::vector<Packet> s(most);
  std::vector<Status> st(most, Status::unsupported);
  int posted = 0;
  for (; posted < most; ++posted) {
    fill_pattern(src[posted], 1200 + static_cast<unsigned>(posted));
    iov[posted] = {src[posted].data(), len};
    s[posted].set_iovec(&iov[posted], 1);
    st[posted] = l.a->send_post(s[posted]);
    if (st[posted] == Status::no_resource) break;
    ASSERT_TRUE(is_success(st[posted])) << to_string(st[posted]);
  }
  ASSERT_GT(posted, 0);
  std::vector<std::byte> dst(len);
  for (int i = 0; i < posted; ++i) {
    std::size_t got = 0;
    ASSERT_EQ(recv_bytes(*l.b, c, dst, &got, default_deadline()), Status::ok) << "packet " << i;
    EXPECT_EQ(got, len);
    EXPECT_EQ(check_pattern(dst, 1200 + static_cast<unsigned>(i)), len) << "packet " << i;
  }
  for (int i = 0; i < posted; ++i) {
    if (st[i] == Status::in_progress) {
      EXPECT_EQ(finish_send(*l.a, s[i], default_deadline()), Status::ok);
    }
  }
}

}  // namespace
}  // namespace pier::conformance
