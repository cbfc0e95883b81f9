#include "driver/fd.hpp"

#include <poll.h>

namespace pier::driver {

bool readable_now(int fd) noexcept {
  ::pollfd p{fd, POLLIN, 0};
  // An error (EINTR, ENOMEM) says nothing: let the caller try its call.
  const int n = ::poll(&p, 1, 0);
  return n != 0;
}

}  // namespace pier::driver
