// The tcp driver's buffer-based send (a staging frame in driver memory) and
// receive (a whole frame handed out of the receive buffer in place).
#include "base/config.hpp"
#include "tcp_helpers.hpp"

#include <cstring>
#include <thread>

namespace pier::drivers::tcp::test {
namespace {

/// Sends `len` bytes of pattern `seed` through send_buf_get/post, retrying
/// while the staging frame is still on its way out.
Status send_staged(driver::Instance& inst, std::size_t len, int seed) {
  const auto deadline = soon();
  Packet s;
  Status st;
  while ((st = inst.send_buf_get(s)) == Status::no_resource && Clock::now() < deadline) {
  }
  if (st != Status::ok) return st;
  if (s.buf_len < len) return Status::internal;
  for (std::size_t i = 0; i < len; ++i) s.buf[i] = static_cast<std::byte>((i + seed) & 0xff);
  return inst.send_buf_post(s, len);
}

/// Receives one packet in place and checks it against pattern `seed`.
::testing::AssertionResult recv_in_place(driver::Instance& inst, std::size_t len, int seed) {
  Packet r;
  const Status st = inst.recv_wait(r, soon());
  if (st != Status::ok) return ::testing::AssertionFailure() << "recv_wait: " << to_string(st);
  if (r.form != Packet::Form::buffer || r.buf_len != len)
    return ::testing::AssertionFailure() << "got " << r.buf_len << " bytes, want " << len;
  for (std::size_t i = 0; i < len; ++i)
    if (r.buf[i] != static_cast<std::byte>((i + seed) & 0xff))
      return ::testing::AssertionFailure() << "byte " << i << " differs";
  if (inst.recv_buf_release(r) != Status::ok) return ::testing::AssertionFailure() << "release";
  if (inst.recv_buf_release(r) != Status::invalid_argument)
    return ::testing::AssertionFailure() << "released twice";
  return ::testing::AssertionSuccess();
}

TEST(TcpBuffers, StagedSendsAndInPlaceReceivesKeepOrderAndBoundaries) {
  Node x = make_node(), y = make_node();
  Pair p = connect_pair(x, y);
  ASSERT_TRUE(p.a && p.b);
  const std::size_t max = x.props.caps.max_packet;
  const std::size_t sizes[] = {0, 1, 7, 8, 4095, 4096, 65536, max};
  // The sender runs ahead on its own thread: the receiver finds several
  // frames buffered at once, and the staging frame waits while the socket is
  // full (send_buf_get answers no_resource and moves it on).
  Status sent = Status::ok;
  std::thread sender([&] {
    for (int round = 0; round < 3 && sent == Status::ok; ++round) {
      int seed = round;
      for (std::size_t len : sizes)
        if (sent == Status::ok) sent = send_staged(*p.a, len, seed++);
    }
  });
  for (int round = 0; round < 3; ++round) {
    int seed = round;
    for (std::size_t len : sizes) EXPECT_TRUE(recv_in_place(*p.b, len, seed++)) << len;
  }
  sender.join();
  EXPECT_EQ(sent, Status::ok);
}

TEST(TcpBuffers, MixedFormsAndMisuseAnswerInvalid) {
  Node x = make_node(), y = make_node();
  Pair p = connect_pair(x, y);
  ASSERT_TRUE(p.a && p.b);
  Packet s;
  ASSERT_EQ(p.a->send_buf_get(s), Status::ok);
  Packet s2;
  EXPECT_EQ(p.a->send_buf_get(s2), Status::invalid_argument) << "a second buffer before the post";
  Buf other(10, 3);
  EXPECT_EQ(p.a->send_post(other.pkt), Status::invalid_argument) << "a post while a buffer is lent";
  EXPECT_EQ(p.a->send_buf_post(s, s.buf_len + 1), Status::invalid_argument);
  std::memcpy(s.buf, "abc", 3);
  ASSERT_EQ(p.a->send_buf_post(s, 3), Status::ok);
  EXPECT_EQ(p.a->send_buf_post(s, 3), Status::invalid_argument) << "posted twice";
  ASSERT_TRUE(is_success(p.a->send_post(other.pkt)));  // an iovec send behind it

  Packet r;
  ASSERT_EQ(p.b->recv_wait(r, soon()), Status::ok);
  ASSERT_EQ(r.buf_len, 3u);
  EXPECT_EQ(0, std::memcmp(r.buf, "abc", 3));
  Buf in(10, 0);
  EXPECT_EQ(p.b->recv_post(in.pkt), Status::invalid_argument) << "a post while a buffer is out";
  Packet r2;
  EXPECT_EQ(p.b->recv_poll(r2), Status::invalid_argument) << "a second buffer before release";
  ASSERT_EQ(p.b->recv_buf_release(r), Status::ok);
  // The next packet goes to a posted receive.
  ASSERT_TRUE(is_success(p.b->recv_post(in.pkt)));
  Status ss, rs;
  drive(p.a.get(), &other.pkt, p.b.get(), &in.pkt, &ss, &rs);
  EXPECT_EQ(ss, Status::ok);
  EXPECT_EQ(rs, Status::ok);
  EXPECT_TRUE(in.bytes == other.bytes);
}

TEST(TcpBuffers, PeerGoneWhileABufferIsOutThenBroken) {
  Node x = make_node(), y = make_node();
  Pair p = connect_pair(x, y);
  ASSERT_TRUE(p.a && p.b);
  ASSERT_EQ(send_staged(*p.a, 100, 5), Status::ok);
  Packet r;
  ASSERT_EQ(p.b->recv_wait(r, soon()), Status::ok);
  p.a.reset();
  // The buffer stays valid until released, then the instance reports the loss.
  EXPECT_EQ(r.buf[99], static_cast<std::byte>((99 + 5) & 0xff));
  ASSERT_EQ(p.b->recv_buf_release(r), Status::ok);
  Packet r2;
  EXPECT_EQ(p.b->recv_wait(r2, soon()), Status::broken);
  Packet s;
  EXPECT_EQ(p.b->send_buf_get(s), Status::broken);
}

}  // namespace
}  // namespace pier::drivers::tcp::test
