// pier::boot: Unix-socket helpers shared by the pier-run client and server.
#pragma once

#include "boot/boot.hpp"

#include <sys/socket.h>
#include <sys/un.h>

#include <span>
#include <string_view>

namespace pier::boot {

struct UnixAddress {
  ::sockaddr_un addr{};
  ::socklen_t len = 0;
};

/// A filesystem path, or "@name" for Linux's abstract namespace (nothing
/// to unlink, so a killed launcher leaves no file behind).
Result<UnixAddress> parse_unix_address(std::string_view text);

/// Writes every byte to a non-blocking socket, waiting with poll() up to the
/// deadline: ok, timeout, or closed (the peer went away; errno-free).
Status write_all(int fd, std::span<const std::byte> bytes, Deadline deadline);

/// Milliseconds until the deadline for poll(): 0 when passed, capped.
int poll_timeout_ms(Deadline deadline);

}  // namespace pier::boot
