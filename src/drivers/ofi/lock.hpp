// pier ofi: the context's lock. Every call of every instance takes it, so
// it sits on the critical path of a message three times (send_post(), the
// recv_poll() that delivers, the next recv_post()) and once per empty poll:
// base::FutexMutex, whose free path is inline.
#pragma once

#include "base/futex_mutex.hpp"

namespace pier::drivers::ofi {

using ContextMutex = base::FutexMutex;

}  // namespace pier::drivers::ofi
