// pier tcp: the TCP driver, for any two hosts (IPv4 and IPv6). See
// docs/tcp.md for the url, the frames, the configuration and the numbers.
#pragma once

#include <pier/driver.hpp>

namespace pier::drivers::tcp {

/// The driver's registry entry ("tcp").
const pier::driver::DriverEntry& entry();

}  // namespace pier::drivers::tcp
