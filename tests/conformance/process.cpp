// pier conformance: forked peers.
#include "process.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <thread>

namespace pier::conformance {

namespace {

bool write_all(int fd, const void* data, std::size_t len) {
  const auto* p = static_cast<const std::byte*>(data);
  while (len > 0) {
    const ssize_t n = ::write(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    len -= static_cast<std::size_t>(n);
  }
  return true;
}

Status read_all(int fd, void* data, std::size_t len, pier::driver::Deadline deadline) {
  auto* p = static_cast<std::byte*>(data);
  while (len > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - pier::driver::Clock::now());
    if (left.count() <= 0) return Status::timeout;
    ::pollfd pfd{fd, POLLIN, 0};
    const int r = ::poll(&pfd, 1, static_cast<int>(std::min<long long>(left.count(), 1000)));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    const ssize_t n = ::read(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Status::closed;
    p += n;
    len -= static_cast<std::size_t>(n);
  }
  return Status::ok;
}

}  // namespace

Child::Child(const std::function<int(Child&)>& body, unsigned watchdog_s) {
  // A peer that dies must not take the writer down with SIGPIPE.
  ::signal(SIGPIPE, SIG_IGN);
  int to_child[2], to_parent[2];
  if (::pipe(to_child) != 0) return;
  if (::pipe(to_parent) != 0) {
    ::close(to_child[0]);
    ::close(to_child[1]);
    return;
  }
  const pid_t pid = ::fork();
  if (pid < 0) {
    for (int fd : {to_child[0], to_child[1], to_parent[0], to_parent[1]}) ::close(fd);
    return;
  }
  if (pid == 0) {
    ::alarm(watchdog_s);
    ::close(to_child[1]);
    ::close(to_parent[0]);
    in_fd_ = to_child[0];
    out_fd_ = to_parent[1];
    pid_ = 0;
    int code = 99;
    try {
      code = body(*this);
    } catch (...) {
      code = 98;
    }
    // _exit: the parent's GoogleTest state and atexit handlers are not ours.
    ::_exit(code);
  }
  pid_ = pid;
  ::close(to_child[0]);
  ::close(to_parent[1]);
  out_fd_ = to_child[1];
  in_fd_ = to_parent[0];
}

Child::~Child() {
  if (pid_ > 0 && !reaped_) kill_now();
  if (out_fd_ >= 0) ::close(out_fd_);
  if (in_fd_ >= 0) ::close(in_fd_);
}

Status Child::send(std::span<const std::byte> blob) {
  const auto len = static_cast<std::uint32_t>(blob.size());
  if (!write_all(out_fd_, &len, sizeof len)) return Status::closed;
  if (len > 0 && !write_all(out_fd_, blob.data(), blob.size())) return Status::closed;
  return Status::ok;
}

Status Child::receive(std::vector<std::byte>& blob, pier::driver::Deadline deadline) {
  std::uint32_t len = 0;
  if (Status s = read_all(in_fd_, &len, sizeof len, deadline); s != Status::ok) return s;
  if (len > (1u << 20)) return Status::malformed;
  blob.resize(len);
  return len == 0 ? Status::ok : read_all(in_fd_, blob.data(), len, deadline);
}

Status Child::wait_exit(pier::driver::Deadline deadline, int* code) {
  for (;;) {
    int status = 0;
    const pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      reaped_ = true;
      *code = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
      return Status::ok;
    }
    if (r < 0 && errno != EINTR) return Status::system_error;
    if (pier::driver::Clock::now() > deadline) return Status::timeout;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

void Child::kill_now() {
  if (pid_ <= 0 || reaped_) return;
  ::kill(pid_, SIGKILL);
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  reaped_ = true;
}

}  // namespace pier::conformance
