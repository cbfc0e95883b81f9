// tests/unit/shm: the shm driver between forked processes: traffic both ways
// on both tracks, a SIGKILLed peer, and nothing left in /dev/shm.
#include "helpers.hpp"

#include "base/config.hpp"

#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <set>
#include <string>

namespace pier::drivers::shm::test {
namespace {

/// Writes a length-prefixed blob to a pipe.
bool put(int fd, const std::vector<std::byte>& v) {
  const std::uint32_t n = static_cast<std::uint32_t>(v.size());
  return ::write(fd, &n, 4) == 4 && ::write(fd, v.data(), n) == static_cast<ssize_t>(n);
}

std::vector<std::byte> get(int fd) {
  std::uint32_t n = 0;
  if (::read(fd, &n, 4) != 4 || n > 4096) return {};
  std::vector<std::byte> v(n);
  std::size_t got = 0;
  while (got < n) {
    const ssize_t r = ::read(fd, v.data() + got, n - got);
    if (r <= 0) return {};
    got += static_cast<std::size_t>(r);
  }
  return v;
}

/// What the child does once connected.
enum class Role { echo, die_after_hello };

/// The child: connects a small and a large instance to the parent, then
/// either echoes small packets (answering rdv requests on the large track)
/// or announces itself and waits to be killed. Exits non-zero on any error.
[[noreturn]] void child_main(int to_parent, int from_parent, Role role) {
  alarm(30);  // a stuck child never outlives the test
  Side s = make_side();
  if (!s.ctx || !put(to_parent, s.url)) _exit(2);
  const std::vector<std::byte> parent_url = get(from_parent);
  Side parent;
  parent.url = parent_url;
  auto small = open(s, Track::small);
  auto large = open(s, Track::large);
  if (small->connect_async(parent_url) != Status::in_progress) _exit(3);
  if (large->connect_async(parent_url) != Status::in_progress) _exit(3);
  if (small->connect_wait(after_ms(10000)) != Status::ok) _exit(4);
  if (large->connect_wait(after_ms(10000)) != Status::ok) _exit(4);
  if (role == Role::die_after_hello) {
    Packet p;
    if (small->send_buf_get(p) != Status::ok) _exit(5);
    if (small->send_buf_post(p, 0) != Status::ok) _exit(5);
    for (;;) pause();
  }
  // Echo: every small packet comes back; a 1-byte packet 'L' asks for a
  // large receive whose rdv data goes back on the small track.
  for (;;) {
    Packet r;
    Status st = small->recv_wait(r, after_ms(10000));
    if (st == Status::broken) _exit(0);  // the parent is done
    if (st != Status::ok) _exit(6);
    std::vector<std::byte> copy(r.buf, r.buf + r.buf_len);
    if (small->recv_buf_release(r) != Status::ok) _exit(7);
    if (copy.size() == 1 && copy[0] == std::byte{'L'}) {
      std::vector<std::byte> big(8 << 20);
      Packet lr;
      ::iovec liov{big.data(), big.size()};
      lr.set_iovec(&liov, 1);
      if (large->recv_post(lr) != Status::in_progress) _exit(8);
      std::vector<std::byte> rdv(lr.rdv_data.begin(), lr.rdv_data.begin() + lr.rdv_len);
      Packet s1;
      ::iovec v1;
      if (send_bytes(*small, rdv, s1, v1) != Status::ok) _exit(9);
      if (large->recv_wait(lr, after_ms(10000)) != Status::ok) _exit(10);
      copy.assign(big.begin(), big.begin() + 64);  // echo a digest: the first bytes
      std::uint64_t sum = 0;
      for (std::size_t i = 0; i < lr.length; ++i)
        sum = sum * 31 + static_cast<std::uint8_t>(big[i]);
      copy.resize(72);
      std::memcpy(copy.data() + 64, &sum, 8);
    }
    Packet s2;
    ::iovec v2;
    if (send_bytes(*small, copy, s2, v2) != Status::ok) _exit(11);
  }
}

struct Child {
  pid_t pid = -1;
  Side side = make_side();
  std::unique_ptr<Instance> small;
  std::unique_ptr<Instance> large;
  Status connected = Status::internal;

  explicit Child(Role role) {
    int up[2], down[2];
    if (::pipe(up) != 0 || ::pipe(down) != 0) return;
    pid = ::fork();
    if (pid == 0) {
      ::close(up[0]);
      ::close(down[1]);
      child_main(up[1], down[0], role);
    }
    ::close(up[1]);
    ::close(down[0]);
    const std::vector<std::byte> child_url = get(up[0]);
    put(down[1], side.url);
    ::close(up[0]);
    ::close(down[1]);
    small = open(side, Track::small);
    large = open(side, Track::large);
    if (small->connect_async(child_url) != Status::in_progress) return;
    if (large->connect_async(child_url) != Status::in_progress) return;
    connected = small->connect_wait(after_ms(10000));
    if (connected == Status::ok) connected = large->connect_wait(after_ms(10000));
  }
  /// The child's exit code, or -signal.
  int reap() {
    int status = 0;
    for (int i = 0; i < 1000; ++i) {
      if (::waitpid(pid, &status, WNOHANG) == pid)
        return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
      ::usleep(10000);
    }
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
    return 100;
  }
};

/// Entries of /dev/shm that this driver could have made ("pier-shm..."; the
/// memfd's name): other tests running in parallel may add their own.
std::set<std::string> dev_shm() {
  std::set<std::string> names;
  if (DIR* d = ::opendir("/dev/shm")) {
    while (const dirent* e = ::readdir(d))
      if (std::string(e->d_name).find("pier-shm") != std::string::npos) names.insert(e->d_name);
    ::closedir(d);
  }
  return names;
}

TEST(ShmProcess, ForkedPairEchoesSmallPacketsAndMovesALargeOne) {
  config::ScopedSet cma_min("SHM_CMA_MIN", "0");  // single copy (the child inherits it)
  Child c(Role::echo);
  ASSERT_EQ(c.connected, Status::ok);
  for (unsigned i = 0; i < 500; ++i) {
    const auto data = pattern(1 + (i * 53) % 2000, i);
    Packet s;
    ::iovec v;
    ASSERT_EQ(send_bytes(*c.small, data, s, v), Status::ok);
    Packet r;
    ASSERT_EQ(c.small->recv_wait(r, after_ms(10000)), Status::ok) << i;
    ASSERT_EQ(r.buf_len, data.size());
    EXPECT_EQ(0, std::memcmp(r.buf, data.data(), data.size()));
    ASSERT_EQ(c.small->recv_buf_release(r), Status::ok);
  }
  // Large: ask, get the child's rdv data, send 5 MiB on the large track.
  const std::vector<std::byte> ask{std::byte{'L'}};
  Packet s;
  ::iovec v;
  ASSERT_EQ(send_bytes(*c.small, ask, s, v), Status::ok);
  Packet rr;
  ASSERT_EQ(c.small->recv_wait(rr, after_ms(10000)), Status::ok);
  Packet ls;
  std::copy(rr.buf, rr.buf + std::min<std::size_t>(rr.buf_len, Packet::rdv_capacity),
            ls.rdv_data.begin());
  ls.rdv_len = static_cast<std::uint8_t>(rr.buf_len);
  ASSERT_EQ(c.small->recv_buf_release(rr), Status::ok);
  const auto big = pattern(5 << 20, 77);
  ::iovec liov{const_cast<std::byte*>(big.data()), big.size()};
  ls.set_iovec(&liov, 1);
  Status st = c.large->send_post(ls);
  if (st == Status::in_progress) st = c.large->send_wait(ls, after_ms(10000));
  ASSERT_EQ(st, Status::ok);
  Packet digest;
  ASSERT_EQ(c.small->recv_wait(digest, after_ms(10000)), Status::ok);
  ASSERT_EQ(digest.buf_len, 72u);
  std::uint64_t sum = 0;
  for (std::byte b : big) sum = sum * 31 + static_cast<std::uint8_t>(b);
  std::uint64_t got = 0;
  std::memcpy(&got, digest.buf + 64, 8);
  EXPECT_EQ(got, sum);
  EXPECT_EQ(0, std::memcmp(digest.buf, big.data(), 64));
  ASSERT_EQ(c.small->recv_buf_release(digest), Status::ok);
  c.small.reset();  // the child sees broken and exits 0
  EXPECT_EQ(c.reap(), 0);
}

TEST(ShmProcess, SigkilledPeerIsReportedBrokenAndLeavesNothingInDevShm) {
  const std::set<std::string> before = dev_shm();
  Child c(Role::die_after_hello);
  ASSERT_EQ(c.connected, Status::ok);
  Packet hello;
  ASSERT_EQ(c.small->recv_wait(hello, after_ms(10000)), Status::ok);
  ASSERT_EQ(c.small->recv_buf_release(hello), Status::ok);
  // A receive pending on each track while the peer dies.
  std::vector<std::byte> buf(1 << 16);
  ::iovec iov{buf.data(), buf.size()};
  Packet small_r, large_r;
  small_r.set_iovec(&iov, 1);
  large_r.set_iovec(&iov, 1);
  ASSERT_EQ(c.small->recv_post(small_r), Status::in_progress);
  ASSERT_EQ(c.large->recv_post(large_r), Status::in_progress);
  ASSERT_EQ(::kill(c.pid, SIGKILL), 0);
  EXPECT_EQ(c.reap(), -SIGKILL);
  EXPECT_EQ(c.small->recv_wait(small_r, after_ms(10000)), Status::broken);
  // Polling alone notices it too.
  Status st = Status::in_progress;
  for (int i = 0; i < 1000000 && st == Status::in_progress; ++i) st = c.large->recv_poll(large_r);
  EXPECT_EQ(st, Status::broken);
  const auto data = pattern(8, 1);
  Packet s;
  ::iovec v;
  EXPECT_EQ(send_bytes(*c.small, data, s, v), Status::broken);
  EXPECT_EQ(dev_shm(), before);
}

}  // namespace
}  // namespace pier::drivers::shm::test
