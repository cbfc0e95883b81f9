// pier-perf: the APIs measured above the driver, and how each is opened.
//   portals  Portals 4 puts (include/portals4.h); PtlInit joins the job
//            through its own bootstrap, so one process measures one
//            driver list (PIER_CORE_DRIVERS) per run;
//   port     the GM-style ports (include/pier/port.hpp) over a core of its
//            own per driver, the core addresses swapped through `exchange`.
#pragma once

#include "transport.hpp"

#include <functional>
#include <memory>
#include <string>

namespace pier::perf {

/// Gives our bytes to the peer and returns the peer's.
using Exchange = std::function<Result<std::vector<std::byte>>(std::span<const std::byte>)>;

/// `core_drivers` ("" keeps the configured list) goes to PIER_CORE_DRIVERS
/// before PtlInit; `*rank` and `*ranks` come from the NI.
Result<std::unique_ptr<Transport>> open_portals(const std::string& core_drivers,
                                                std::size_t largest, std::uint32_t* rank,
                                                std::uint32_t* ranks, std::string* why);

Result<std::unique_ptr<Transport>> open_port(const std::string& core_drivers, std::uint32_t rank,
                                             std::size_t largest, const Exchange& exchange,
                                             Deadline deadline, std::string* why,
                                             bool* exchange_failed);

}  // namespace pier::perf
