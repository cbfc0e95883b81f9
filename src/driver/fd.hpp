// pier driver helpers: file-descriptor checks shared by the socket drivers.
#pragma once

namespace pier::driver {

/// Whether `fd` has input now (for a listening socket: a connection to
/// accept), without waiting. A failed accept4() on an empty queue costs the
/// kernel a socket allocation and its release; asking poll() first costs
/// neither, and idle waits ask once per turn.
bool readable_now(int fd) noexcept;

}  // namespace pier::driver
