// shm: the shared-memory driver, for processes on one host. Lock-free rings
// of cache-line cells per connected pair (no system call on the fast path of
// a small packet), single copy with process_vm_writev for large-track packets
// when a per-pair probe says the kernel allows it, a pipelined copy through
// the cells otherwise, blocking waits that sleep, and peer death reported as
// broken. Design and numbers: docs/shm.md.
#pragma once

#include <pier/driver.hpp>

namespace pier::drivers::shm {

/// The driver's registry entry ("shm"); make() takes no argument.
const pier::driver::DriverEntry& entry();

}  // namespace pier::drivers::shm
