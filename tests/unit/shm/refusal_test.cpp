// tests/unit/shm: single copy refused by the kernel. The child forbids
// itself process_vm_readv/writev with a seccomp filter (as a container's
// profile would), so its real probe of the parent fails: its context reports
// why in degraded_reason(), and its large packets still arrive, copied
// through the cells. The parent's own probe succeeds, so its large packets
// keep single copy into the child (a filter binds the filtered process only).
#include "helpers.hpp"

#include "base/config.hpp"

#include <linux/filter.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <string>

namespace pier::drivers::shm::test {
namespace {

/// Makes process_vm_readv/writev fail with EPERM in this process.
bool forbid_single_copy() {
  ::sock_filter f[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(::seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_process_vm_readv, 2, 0),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_process_vm_writev, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
  };
  ::sock_fprog prog{static_cast<unsigned short>(sizeof f / sizeof f[0]), f};
  return ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
         ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0;
}

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

constexpr std::size_t big_size = (3 << 20) + 123;
constexpr int no_seccomp = 77;

/// Sends its degraded_reason() on the small track, then one big packet on
/// the large track into the receive whose rdv data the parent sends.
[[noreturn]] void child_main(int to_parent, int from_parent) {
  alarm(30);  // a stuck child never outlives the test
  if (!forbid_single_copy()) _exit(no_seccomp);
  Side s = make_side();
  if (!s.ctx || !put(to_parent, s.url)) _exit(2);
  const std::vector<std::byte> parent_url = get(from_parent);
  auto small = open(s, Track::small);
  auto large = open(s, Track::large);
  if (small->connect_async(parent_url) != Status::in_progress ||
      large->connect_async(parent_url) != Status::in_progress)
    _exit(3);
  if (small->connect_wait(after_ms(10000)) != Status::ok ||
      large->connect_wait(after_ms(10000)) != Status::ok)
    _exit(4);
  const std::string why = s.ctx->degraded_reason();
  std::vector<std::byte> msg(why.size());
  std::memcpy(msg.data(), why.data(), why.size());
  Packet s1;
  ::iovec v1;
  if (send_bytes(*small, msg, s1, v1) != Status::ok) _exit(5);
  Packet rdv;
  if (small->recv_wait(rdv, after_ms(10000)) != Status::ok) _exit(6);
  Packet ls;
  const std::size_t n = std::min<std::size_t>(rdv.buf_len, Packet::rdv_capacity);
  std::copy(rdv.buf, rdv.buf + n, ls.rdv_data.begin());
  ls.rdv_len = static_cast<std::uint8_t>(n);
  if (small->recv_buf_release(rdv) != Status::ok) _exit(7);
  const auto big = pattern(big_size, 9);
  ::iovec liov{const_cast<std::byte*>(big.data()), big.size()};
  ls.set_iovec(&liov, 1);
  Status st = large->send_post(ls);
  if (st == Status::in_progress) st = large->send_wait(ls, after_ms(10000));
  if (st != Status::ok) _exit(8);
  // Stay until the parent hangs up, so it never reads our death as failure.
  Packet bye;
  st = small->recv_wait(bye, after_ms(10000));
  _exit(st == Status::broken ? 0 : 9);
}

int reap(pid_t pid) {
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

TEST(ShmRefusal, SingleCopyRefusedByTheKernelIsReportedAndDataFlowsThroughCells) {
  // Single copy from the first byte on: without the refusal the child would
  // use it for its big packet.
  config::ScopedSet cma_min("SHM_CMA_MIN", "0");
  int up[2], down[2];
  ASSERT_EQ(::pipe(up), 0);
  ASSERT_EQ(::pipe(down), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(up[0]);
    ::close(down[1]);
    child_main(up[1], down[0]);
  }
  ::close(up[1]);
  ::close(down[0]);
  const std::vector<std::byte> child_url = get(up[0]);
  if (child_url.empty()) {
    ::close(up[0]);
    ::close(down[1]);
    const int code = reap(pid);
    if (code == no_seccomp) GTEST_SKIP() << "seccomp filters are not allowed here";
    FAIL() << "child exited " << code;
  }
  Side side = make_side();
  ASSERT_TRUE(put(down[1], side.url));
  ::close(up[0]);
  ::close(down[1]);
  auto small = open(side, Track::small);
  auto large = open(side, Track::large);
  ASSERT_EQ(small->connect_async(child_url), Status::in_progress);
  ASSERT_EQ(large->connect_async(child_url), Status::in_progress);
  ASSERT_EQ(small->connect_wait(after_ms(10000)), Status::ok);
  ASSERT_EQ(large->connect_wait(after_ms(10000)), Status::ok);

  Packet why;
  ASSERT_EQ(small->recv_wait(why, after_ms(10000)), Status::ok);
  const std::string reason(reinterpret_cast<const char*>(why.buf), why.buf_len);
  ASSERT_EQ(small->recv_buf_release(why), Status::ok);
  EXPECT_NE(reason.find("process_vm_readv"), std::string::npos) << reason;
  EXPECT_NE(reason.find(std::strerror(EPERM)), std::string::npos) << reason;

  std::vector<std::byte> buf(big_size + 64);
  ::iovec iov{buf.data(), buf.size()};
  Packet lr;
  lr.set_iovec(&iov, 1);
  ASSERT_EQ(large->recv_post(lr), Status::in_progress);
  const std::vector<std::byte> rdv(lr.rdv_data.begin(), lr.rdv_data.begin() + lr.rdv_len);
  Packet s;
  ::iovec v;
  ASSERT_EQ(send_bytes(*small, rdv, s, v), Status::ok);
  ASSERT_EQ(large->recv_wait(lr, after_ms(10000)), Status::ok);
  ASSERT_EQ(lr.length, big_size);
  buf.resize(big_size);
  EXPECT_TRUE(buf == pattern(big_size, 9));
  small.reset();  // the child sees broken and exits 0
  EXPECT_EQ(reap(pid), 0);
}

}  // namespace
}  // namespace pier::drivers::shm::test
