// pier ofi: libfabric's shm provider leaves the /dev/shm file of a process
// that was killed; the driver removes it once it sees that peer exit, and
// only a file that names the exited process.
#include <signal.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <string>
#include <thread>

#include "drivers/ofi/codec.hpp"
#include "ofi_helpers.hpp"

namespace pier::drivers::ofi::test {
namespace {

std::vector<std::byte> bytes_of(std::string_view s) {
  const auto* p = reinterpret_cast<const std::byte*>(s.data());
  return {p, p + s.size()};
}

TEST(OfiShmRegion, OnlyTheExitedProcesssOwnFileIsNamed) {
  EXPECT_EQ(shm_region_of(bytes_of("fi_shm://123:0:4"), 123), "123:0:4");
  EXPECT_EQ(shm_region_of(bytes_of(std::string("fi_shm://123:0:4\0", 17)), 123), "123:0:4");
  EXPECT_EQ(shm_region_of(bytes_of("fi_shm://123:0:4"), 12), "");
  EXPECT_EQ(shm_region_of(bytes_of("fi_shm://1234:0:4"), 123), "");
  EXPECT_EQ(shm_region_of(bytes_of("fi_shm://123:0:4/../pier-1"), 123), "");
  EXPECT_EQ(shm_region_of(bytes_of("fi_shm://123:0"), 123), "");
  EXPECT_EQ(shm_region_of(bytes_of("fi_shm://123:0:"), 123), "");
  EXPECT_EQ(shm_region_of(bytes_of("fi_shm://123:0:4:5"), 123), "");
  EXPECT_EQ(shm_region_of(bytes_of("fi_sockaddr_in://127.0.0.1:9"), 127), "");
  EXPECT_EQ(shm_region_of({}, 0), "");
}

bool write_all(int fd, const void* p, std::size_t n) {
  return ::write(fd, p, n) == static_cast<ssize_t>(n);
}

bool read_all(int fd, void* p, std::size_t n) {
  auto* c = static_cast<char*>(p);
  while (n > 0) {
    const ssize_t r = ::read(fd, c, n);
    if (r <= 0) return false;
    c += r;
    n -= static_cast<std::size_t>(r);
  }
  return true;
}

bool send_url(int fd, const std::vector<std::byte>& url) {
  const auto len = static_cast<std::uint32_t>(url.size());
  return write_all(fd, &len, 4) && write_all(fd, url.data(), len);
}

bool receive_url(int fd, std::vector<std::byte>& url) {
  std::uint32_t len = 0;
  if (!read_all(fd, &len, 4) || len > 4096) return false;
  url.resize(len);
  return read_all(fd, url.data(), len);
}

bool exists(const std::string& region) {
  return ::access(("/dev/shm/" + region).c_str(), F_OK) == 0;
}

/// The child: a context, connected to the parent, then waits to be killed.
[[noreturn]] void run_victim(int in, int out) {
  Node n;
  std::vector<std::byte> parent;
  if (make_node("shm", n) != Status::ok || !send_url(out, n.url) || !receive_url(in, parent))
    std::_Exit(2);
  auto inst = n.ctx->open_instance(Track::small);
  if (!inst || !is_success((*inst)->connect_async(parent))) std::_Exit(3);
  Status s = Status::in_progress;
  const auto deadline = soon();
  while (s != Status::ok && Clock::now() < deadline)
    s = (*inst)->connect_wait(Clock::now() + std::chrono::milliseconds(5));
  const char ready = s == Status::ok ? 1 : 0;
  if (!write_all(out, &ready, 1)) std::_Exit(4);
  // The parent kills this process; the deadline only bounds a lost parent.
  while (Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::_Exit(5);
}

TEST(OfiShmRegion, AKilledPeersFileIsRemovedOnceItsExitIsSeen) {
  {
    Node probe;
    if (make_node("shm", probe) == Status::unsupported) GTEST_SKIP() << "no shm provider here";
  }
  int to_child[2], to_parent[2];
  ASSERT_EQ(::pipe(to_child), 0);
  ASSERT_EQ(::pipe(to_parent), 0);
  // Forked before this process opens its own endpoint.
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) run_victim(to_child[0], to_parent[1]);
  // A failed assertion below must not leave the child behind.
  struct Reap {
    pid_t pid;
    bool done = false;
    ~Reap() {
      if (done) return;
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  } reap{pid};
  Node me;
  ASSERT_EQ(make_node("shm", me), Status::ok);
  std::vector<std::byte> child_url;
  ASSERT_TRUE(receive_url(to_parent[0], child_url));
  ASSERT_TRUE(send_url(to_child[1], me.url));
  Result<Url> url = decode_url(child_url);
  ASSERT_TRUE(url.has_value());
  const std::string region = shm_region_of(url->name, static_cast<std::uint32_t>(pid));
  ASSERT_FALSE(region.empty()) << "libfabric named its shm endpoint differently";
  auto inst = me.ctx->open_instance(Track::small);
  ASSERT_TRUE(inst.has_value());
  ASSERT_TRUE(is_success((*inst)->connect_async(child_url)));
  Status c = Status::in_progress;
  const auto deadline = soon();
  while (c != Status::ok && Clock::now() < deadline)
    c = (*inst)->connect_wait(Clock::now() + std::chrono::milliseconds(5));
  ASSERT_EQ(c, Status::ok);
  char ready = 0;
  ASSERT_TRUE(read_all(to_parent[0], &ready, 1));
  ASSERT_EQ(ready, 1);
  ASSERT_TRUE(exists(region));
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  ASSERT_EQ(::waitpid(pid, nullptr, 0), pid);
  reap.done = true;
  EXPECT_TRUE(exists(region)) << "libfabric removed it itself: this test no longer tests";
  // A receive waits until the peer's exit is seen, and ends broken.
  std::array<std::byte, 64> buf{};
  ::iovec iov{buf.data(), buf.size()};
  Packet r;
  r.set_iovec(&iov, 1);
  Status rs = (*inst)->recv_post(r);
  if (rs == Status::in_progress) rs = (*inst)->recv_wait(r, soon());
  EXPECT_EQ(rs, Status::broken);
  EXPECT_FALSE(exists(region));
  inst->reset();
  EXPECT_EQ(me.ctx->close(), Status::ok);
  for (int fd : {to_child[0], to_child[1], to_parent[0], to_parent[1]}) ::close(fd);
}

}  // namespace
}  // namespace pier::drivers::ofi::test
