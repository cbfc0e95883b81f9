// The tcp driver between two processes: urls exchanged through pipes, a
// ping-pong, and a peer killed in the middle.
#include "tcp_helpers.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

namespace pier::drivers::tcp::test {
namespace {

bool write_all(int fd, const std::vector<std::byte>& v) {
  return ::write(fd, v.data(), v.size()) == static_cast<ssize_t>(v.size());
}

/// Reads exactly n bytes with a deadline; empty on failure.
std::vector<std::byte> read_exact(int fd, std::size_t n, int ms = 10000) {
  std::vector<std::byte> v(n);
  std::size_t got = 0;
  const auto deadline = soon(ms);
  while (got < n && Clock::now() < deadline) {
    ::pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    const ssize_t r = ::read(fd, v.data() + got, n - got);
    if (r <= 0) return {};
    got += static_cast<std::size_t>(r);
  }
  return got == n ? v : std::vector<std::byte>{};
}

/// Waits for the child with a deadline, killing it when it overstays.
int reap(pid_t pid, int ms = 20000) {
  const auto deadline = soon(ms);
  int status = 0;
  while (Clock::now() < deadline) {
    if (::waitpid(pid, &status, WNOHANG) == pid) return status;
    ::usleep(1000);
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, &status, 0);
  return -1;
}

/// Child side: connect to the parent and echo `rounds` packets. Exit codes
/// say where it failed (no gtest in the child).
[[noreturn]] void echo_child(int to_parent, int from_parent, int rounds, Track track) {
  Node n = make_node();
  if (!n.ctx || !write_all(to_parent, n.url)) ::_exit(10);
  std::vector<std::byte> peer = read_exact(from_parent, url_size);
  if (peer.empty()) ::_exit(11);
  auto inst = n.ctx->open_instance(track);
  if (!inst || !is_success((*inst)->connect_async(peer)) ||
      (*inst)->connect_wait(soon()) != Status::ok)
    ::_exit(12);
  for (int i = 0; i < rounds; ++i) {
    Buf in(70000, 0);
    if (!is_success((*inst)->recv_post(in.pkt))) ::_exit(13);
    if ((*inst)->recv_wait(in.pkt, soon()) != Status::ok) ::_exit(14);
    in.iov.iov_len = in.pkt.length;
    if (!is_success((*inst)->send_post(in.pkt))) ::_exit(15);
    if ((*inst)->send_wait(in.pkt, soon()) != Status::ok) ::_exit(16);
  }
  if (rounds == 0) {
    (void)write_all(to_parent, n.url);  // connected; now wait to be killed
    ::pause();
  }
  inst->reset();
  ::_exit(n.ctx->close() == Status::ok ? 0 : 17);
}

struct Child {
  pid_t pid = -1;
  int to_child = -1;
  int from_child = -1;
};

Child spawn(int rounds, Track track) {
  int up[2], down[2];
  if (::pipe(up) != 0 || ::pipe(down) != 0) return {};
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(up[0]);
    ::close(down[1]);
    echo_child(up[1], down[0], rounds, track);
  }
  ::close(up[1]);
  ::close(down[0]);
  return Child{pid, down[1], up[0]};
}

TEST(TcpProcess, ForkedPairPingPong) {
  for (Track track : {Track::small, Track::large}) {
    Node me = make_node();
    ASSERT_TRUE(me.ctx);
    const int rounds = 300;
    Child c = spawn(rounds, track);
    ASSERT_GT(c.pid, 0);
    std::vector<std::byte> peer = read_exact(c.from_child, url_size);
    ASSERT_EQ(peer.size(), url_size);
    ASSERT_TRUE(write_all(c.to_child, me.url));
    auto inst = me.ctx->open_instance(track);
    ASSERT_TRUE(inst);
    ASSERT_TRUE(is_success((*inst)->connect_async(peer)));
    ASSERT_EQ((*inst)->connect_wait(soon()), Status::ok);
    for (int i = 0; i < rounds; ++i) {
      const std::size_t len = static_cast<std::size_t>(i * 211 % 70000);
      Buf out(len, i & 0xff), in(70000, 0);
      ASSERT_TRUE(is_success((*inst)->recv_post(in.pkt)));
      ASSERT_TRUE(is_success((*inst)->send_post(out.pkt)));
      ASSERT_EQ((*inst)->send_wait(out.pkt, soon()), Status::ok);
      ASSERT_EQ((*inst)->recv_wait(in.pkt, soon()), Status::ok);
      ASSERT_EQ(in.pkt.length, len);
      ASSERT_TRUE(std::equal(out.bytes.begin(), out.bytes.end(), in.bytes.begin()))
          << "round " << i;
    }
    const int status = reap(c.pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
    ::close(c.to_child);
    ::close(c.from_child);
  }
}

TEST(TcpProcess, KilledPeerMeansBrokenWithoutTraffic) {
  Node me = make_node();
  ASSERT_TRUE(me.ctx);
  Child c = spawn(0, Track::small);
  ASSERT_GT(c.pid, 0);
  std::vector<std::byte> peer = read_exact(c.from_child, url_size);
  ASSERT_EQ(peer.size(), url_size);
  ASSERT_TRUE(write_all(c.to_child, me.url));
  auto inst = me.ctx->open_instance(Track::small);
  ASSERT_TRUE(inst);
  ASSERT_TRUE(is_success((*inst)->connect_async(peer)));
  ASSERT_EQ((*inst)->connect_wait(soon()), Status::ok);
  ASSERT_EQ(read_exact(c.from_child, url_size).size(), url_size);  // child connected too
  // Sends still queued when the peer dies complete broken as well.
  Buf in(100);
  ASSERT_EQ((*inst)->recv_post(in.pkt), Status::in_progress);
  ::kill(c.pid, SIGKILL);
  (void)reap(c.pid);
  EXPECT_EQ((*inst)->recv_wait(in.pkt, soon()), Status::broken);
  Buf out(100);
  EXPECT_EQ((*inst)->send_post(out.pkt), Status::broken);
  ::close(c.to_child);
  ::close(c.from_child);
}

TEST(TcpProcess, KilledPeerFailsQueuedSends) {
  Node me = make_node();
  ASSERT_TRUE(me.ctx);
  Child c = spawn(0, Track::large);
  ASSERT_GT(c.pid, 0);
  std::vector<std::byte> peer = read_exact(c.from_child, url_size);
  ASSERT_EQ(peer.size(), url_size);
  ASSERT_TRUE(write_all(c.to_child, me.url));
  auto inst = me.ctx->open_instance(Track::large);
  ASSERT_TRUE(inst);
  ASSERT_TRUE(is_success((*inst)->connect_async(peer)));
  ASSERT_EQ((*inst)->connect_wait(soon()), Status::ok);
  ASSERT_EQ(read_exact(c.from_child, url_size).size(), url_size);
  Buf big(32u << 20), small(10);
  ASSERT_EQ((*inst)->send_post(big.pkt), Status::in_progress);  // the child never reads
  ASSERT_TRUE(is_success((*inst)->send_post(small.pkt)));
  ::kill(c.pid, SIGKILL);
  (void)reap(c.pid);
  EXPECT_EQ((*inst)->send_wait(big.pkt, soon()), Status::broken);
  EXPECT_EQ((*inst)->send_poll(small.pkt), Status::broken);
  ::close(c.to_child);
  ::close(c.from_child);
}

}  // namespace
}  // namespace pier::drivers::tcp::test
