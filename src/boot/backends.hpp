// pier::boot: the back ends behind Bootstrap::open(). Internal to src/boot.
#pragma once

#include "boot/boot.hpp"

namespace pier::boot {

/// A process started alone: rank 0 of 1.
std::unique_ptr<Bootstrap> open_singleton();
/// A rank started by pier-run; `socket` is a path, or "@name" for an
/// abstract Unix socket. `session`: the exchange it joins (Bootstrap::open).
Result<std::unique_ptr<Bootstrap>> open_pier_run(std::string_view socket, std::uint32_t rank,
                                                 std::uint32_t size, std::string_view session,
                                                 Deadline deadline);

}  // namespace pier::boot
