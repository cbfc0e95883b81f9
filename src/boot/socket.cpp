// pier::boot: Unix-socket helpers.
#include "boot/socket.hpp"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace pier::boot {

Result<UnixAddress> parse_unix_address(std::string_view text) {
  UnixAddress a;
  a.addr.sun_family = AF_UNIX;
  const bool abstract = !text.empty() && text.front() == '@';
  // sun_path holds the name plus a leading NUL (abstract) or trailing NUL.
  if (text.size() < 2 || text.size() >= sizeof(a.addr.sun_path)) return Status::invalid_argument;
  std::memcpy(a.addr.sun_path, text.data(), text.size());
  if (abstract) a.addr.sun_path[0] = '\0';
  a.len = static_cast<::socklen_t>(offsetof(::sockaddr_un, sun_path) + text.size() +
                                   (abstract ? 0 : 1));
  return a;
}

int poll_timeout_ms(Deadline deadline) {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<std::int64_t>(left, 0, 60'000));
}

Status write_all(int fd, std::span<const std::byte> bytes, Deadline deadline) {
  while (!bytes.empty()) {
    const ::ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n > 0) {
      bytes = bytes.subspan(static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (Clock::now() >= deadline) return Status::timeout;
      ::pollfd p{fd, POLLOUT, 0};
      (void)::poll(&p, 1, poll_timeout_ms(deadline));
      continue;
    }
    return Status::closed;
  }
  return Status::ok;
}

}  // namespace pier::boot
