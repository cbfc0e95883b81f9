// tests/launch: the pier-run client of src/boot reaching its launcher. Every
// wait has a deadline, the connection itself included.
#include "boot/backends.hpp"
#include "boot/socket.hpp"

#include <gtest/gtest.h>

#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstring>
#include <string>
#include <vector>

namespace pier::boot {
namespace {

/// A launcher that is stuck (stopped, or busy with a thousand ranks) and
/// never accepts: once its listen backlog was full, a rank's connect()
/// blocked with no deadline, and the rank hung before its bootstrap began.
/// It now gives up at the deadline.
TEST(PierRunClient, ALauncherThatNeverAcceptsIsADeadlineNotAHang) {
  const std::string name = "@pier-test-backlog-" + std::to_string(::getpid());
  auto address = parse_unix_address(name);
  ASSERT_TRUE(address);
  const int listener = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(listener, 0);
  ASSERT_EQ(::bind(listener, reinterpret_cast<const ::sockaddr*>(&address->addr), address->len), 0);
  ASSERT_EQ(::listen(listener, 0), 0);
  // Fill the backlog with connections nobody accepts.
  std::vector<int> fillers;
  for (int i = 0; i < 64; ++i) {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    if (::connect(fd, reinterpret_cast<const ::sockaddr*>(&address->addr), address->len) != 0) {
      ::close(fd);
      break;
    }
    fillers.push_back(fd);
  }
  ASSERT_FALSE(fillers.empty());
  // In a child, so a hang is a failure of this test, not of the whole run.
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::alarm(20);  // the old code blocked in connect() for ever
    auto made = open_pier_run(name, 0, 1, "s", Clock::now() + std::chrono::milliseconds(300));
    ::_exit(made ? 0 : static_cast<int>(made.status()));
  }
  const auto start = std::chrono::steady_clock::now();
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(WIFEXITED(status)) << "the client hung in connect() (killed by its alarm)";
  EXPECT_EQ(WEXITSTATUS(status), static_cast<int>(Status::timeout));
  EXPECT_LT(took, std::chrono::seconds(10));
  for (int fd : fillers) ::close(fd);
  ::close(listener);
}

}  // namespace
}  // namespace pier::boot
