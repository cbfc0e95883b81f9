#include "drivers/tcp/tcp.hpp"

#include "drivers/tcp/context.hpp"

namespace pier::drivers::tcp {
namespace {

Result<std::unique_ptr<driver::Context>> make(std::string_view argument) {
  if (!argument.empty()) return Status::invalid_argument;
  return std::unique_ptr<driver::Context>(std::make_unique<TcpContext>());
}

}  // namespace

const pier::driver::DriverEntry& entry() {
  static const pier::driver::DriverEntry e{
      "tcp", "TCP sockets between any two hosts: IPv4 or IPv6, epoll, writev", &make};
  return e;
}

}  // namespace pier::drivers::tcp
