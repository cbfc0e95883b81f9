// pier driver helpers: the door of src/driver. A driver author includes this
// one header and gets the interface (include/pier/driver.hpp) plus the helpers
// below, so packet copies, truncation and argument checks are written once.
#pragma once

#include <pier/driver.hpp>

#include "driver/fd.hpp"
#include "driver/hex_url.hpp"
#include "driver/iovec_data.hpp"
#include "driver/packet.hpp"
