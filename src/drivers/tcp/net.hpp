// pier tcp: addresses and sockets. Which address a context listens on comes
// from the config registry (PIER_TCP_ADDRESS, else PIER_TCP_IFACE, else the
// loopback address); native errors become a Status here, once.
#pragma once

#include "drivers/tcp/codec.hpp"

#include <sys/socket.h>

#include <string>

namespace pier::drivers::tcp {

/// A socket address of either family.
struct SockAddr {
  ::sockaddr_storage storage{};
  ::socklen_t length = 0;
  const ::sockaddr* get() const noexcept { return reinterpret_cast<const ::sockaddr*>(&storage); }
};

/// The address this process listens on, from the configuration.
Result<SockAddr> choose_listen_address();
/// The socket address a url points at.
SockAddr to_sockaddr(const Url& url) noexcept;
/// Fills family, address and port of `url` from a bound socket address.
void from_sockaddr(const SockAddr& addr, Url& url) noexcept;
/// "[::1]:4242" or "127.0.0.1:4242", for logs.
std::string to_text(const Url& url);

/// What an errno from send/recv/connect means for the connection.
Status status_of_errno(int err) noexcept;
/// Sets TCP_NODELAY, the keep-alive options and the user timeout.
void tune_connection(int fd) noexcept;

/// Fills `buf` with bytes from the kernel's random source.
bool random_bytes(void* buf, std::size_t len) noexcept;

}  // namespace pier::drivers::tcp
