#include "drivers/tcp/net.hpp"

#include "base/config.hpp"
#include "base/log.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/random.h>

#include <cerrno>
#include <cstring>

namespace pier::drivers::tcp {

inline const config::StringKey address_key{
    "TCP_ADDRESS", "",
    "numeric IPv4 or IPv6 address to listen on; empty: the address of TCP_IFACE, or loopback"};
inline const config::StringKey iface_key{
    "TCP_IFACE", "", "network interface whose address to listen on (e.g. eth0); empty: loopback"};
inline const config::StringKey family_key{
    "TCP_FAMILY", "any", "address family picked on TCP_IFACE: ipv4, ipv6 or any (ipv4 first)"};
inline const config::IntKey port_key{"TCP_PORT", 0, 0, 65535,
                                     "port to listen on; 0 lets the kernel pick one"};
inline const config::IntKey user_timeout_key{
    "TCP_TIMEOUT_MS", 30000, 0, 3600000,
    "a connection whose sent data stays unacknowledged this long is broken (0: kernel default)"};

inline const config::IntKey sockbuf_key{
    "TCP_SOCKET_BUFFER",
    0,
    0,
    1 << 30,
    "SO_SNDBUF and SO_RCVBUF of every connection; 0 keeps the kernel's autotuning",
    config::Type::size};

namespace {

SockAddr make_v4(const ::in_addr& a, std::uint16_t port) noexcept {
  SockAddr out;
  auto* sin = reinterpret_cast<::sockaddr_in*>(&out.storage);
  sin->sin_family = AF_INET;
  sin->sin_addr = a;
  sin->sin_port = htons(port);
  out.length = sizeof(::sockaddr_in);
  return out;
}

SockAddr make_v6(const ::in6_addr& a, std::uint32_t scope, std::uint16_t port) noexcept {
  SockAddr out;
  auto* sin6 = reinterpret_cast<::sockaddr_in6*>(&out.storage);
  sin6->sin6_family = AF_INET6;
  sin6->sin6_addr = a;
  sin6->sin6_scope_id = scope;
  sin6->sin6_port = htons(port);
  out.length = sizeof(::sockaddr_in6);
  return out;
}

Result<SockAddr> address_of_iface(const std::string& iface, std::uint16_t port) {
  const std::string family = family_key.get();
  if (family != "any" && family != "ipv4" && family != "ipv6") {
    PIER_LOG(error, "tcp", "PIER_TCP_FAMILY={} is not ipv4, ipv6 or any", family);
    return Status::invalid_argument;
  }
  ::ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) {
    PIER_LOG(error, "tcp", "cannot list interfaces: {}", std::strerror(errno));
    return Status::system_error;
  }
  Result<SockAddr> found = Status::not_found;
  for (int pass = 0; pass < 2 && !found; ++pass) {
    const int want = (pass == 0) == (family != "ipv6") ? AF_INET : AF_INET6;
    if ((family == "ipv4" && want != AF_INET) || (family == "ipv6" && want != AF_INET6)) continue;
    for (::ifaddrs* it = list; it != nullptr; it = it->ifa_next) {
      if (it->ifa_addr == nullptr || iface != it->ifa_name || it->ifa_addr->sa_family != want)
        continue;
      if (want == AF_INET) {
        found = make_v4(reinterpret_cast<const ::sockaddr_in*>(it->ifa_addr)->sin_addr, port);
      } else {
        const auto* sin6 = reinterpret_cast<const ::sockaddr_in6*>(it->ifa_addr);
        found = make_v6(sin6->sin6_addr, sin6->sin6_scope_id, port);
      }
      break;
    }
  }
  ::freeifaddrs(list);
  if (!found)
    PIER_LOG(error, "tcp", "interface {} has no {} address (PIER_TCP_IFACE)", iface,
             family == "ipv4"   ? "IPv4"
             : family == "ipv6" ? "IPv6"
                                : "IPv4 or IPv6");
  return found;
}

}  // namespace

Result<SockAddr> choose_listen_address() {
  const auto port = static_cast<std::uint16_t>(port_key.get());
  const std::string address = address_key.get();
  if (!address.empty()) {
    ::in_addr a4{};
    ::in6_addr a6{};
    // A wildcard would put an address in the url that no peer can reach.
    if (::inet_pton(AF_INET, address.c_str(), &a4) == 1 && a4.s_addr != htonl(INADDR_ANY))
      return make_v4(a4, port);
    if (::inet_pton(AF_INET6, address.c_str(), &a6) == 1 && !IN6_IS_ADDR_UNSPECIFIED(&a6))
      return make_v6(a6, 0, port);
    PIER_LOG(error, "tcp", "PIER_TCP_ADDRESS={} is not one numeric IPv4 or IPv6 address", address);
    return Status::invalid_argument;
  }
  const std::string iface = iface_key.get();
  if (!iface.empty()) return address_of_iface(iface, port);
  ::in_addr lo{};
  lo.s_addr = htonl(INADDR_LOOPBACK);
  return make_v4(lo, port);
}

SockAddr to_sockaddr(const Url& url) noexcept {
  if (url.family == 4) {
    ::in_addr a{};
    std::memcpy(&a, url.address.data(), 4);
    return make_v4(a, url.port);
  }
  ::in6_addr a{};
  std::memcpy(&a, url.address.data(), 16);
  return make_v6(a, 0, url.port);
}

void from_sockaddr(const SockAddr& addr, Url& url) noexcept {
  url.address = {};
  if (addr.storage.ss_family == AF_INET) {
    const auto* sin = reinterpret_cast<const ::sockaddr_in*>(&addr.storage);
    url.family = 4;
    url.port = ntohs(sin->sin_port);
    std::memcpy(url.address.data(), &sin->sin_addr, 4);
  } else {
    const auto* sin6 = reinterpret_cast<const ::sockaddr_in6*>(&addr.storage);
    url.family = 6;
    url.port = ntohs(sin6->sin6_port);
    std::memcpy(url.address.data(), &sin6->sin6_addr, 16);
  }
}

std::string to_text(const Url& url) {
  char text[INET6_ADDRSTRLEN] = {};
  ::inet_ntop(url.family == 4 ? AF_INET : AF_INET6, url.address.data(), text, sizeof text);
  return url.family == 4 ? fmt::format("{}:{}", text, url.port)
                         : fmt::format("[{}]:{}", text, url.port);
}

Status status_of_errno(int err) noexcept {
  switch (err) {
    case EAGAIN:
#if EWOULDBLOCK != EAGAIN
    case EWOULDBLOCK:
#endif
    case EINTR:
    case EINPROGRESS:
      return Status::in_progress;
    case ENOMEM:
    case ENOBUFS:
      return Status::no_resource;
    default:
      // ECONNRESET, EPIPE, ECONNREFUSED, ETIMEDOUT, EHOSTUNREACH...: the peer
      // or the path to it is gone, which dooms this connection only.
      return Status::broken;
  }
}

void tune_connection(int fd) noexcept {
  // Failures here cost performance or detection time, never correctness.
  int one = 1;
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (const auto bytes = static_cast<int>(sockbuf_key.get()); bytes > 0) {
    (void)::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes);
    (void)::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes);
  }
  (void)::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  const auto timeout_ms = static_cast<unsigned>(user_timeout_key.get());
  if (timeout_ms != 0) {
    (void)::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &timeout_ms, sizeof timeout_ms);
    // Idle connections are probed by the kernel too, so a dead host is found
    // even when neither side has anything to send.
    int idle_s = static_cast<int>(timeout_ms / 3000 > 0 ? timeout_ms / 3000 : 1);
    int count = 3;
    (void)::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle_s, sizeof idle_s);
    (void)::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &idle_s, sizeof idle_s);
    (void)::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
  }
}

bool random_bytes(void* buf, std::size_t len) noexcept {
  auto* p = static_cast<unsigned char*>(buf);
  while (len > 0) {
    const ssize_t n = ::getrandom(p, len, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += n;
    len -= static_cast<std::size_t>(n);
  }
  return true;
}

}  // namespace pier::drivers::tcp
