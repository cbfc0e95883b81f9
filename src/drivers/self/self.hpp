// pier self driver: loopback between contexts of one process. The reference
// driver: it implements every optional function of the interface, and
// docs/driver-guide.md walks through it.
#pragma once

#include <pier/driver.hpp>

namespace pier::drivers::self {

const pier::driver::DriverEntry& entry();

}  // namespace pier::drivers::self
