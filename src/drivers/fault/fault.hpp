// pier fault driver: the door. "fault:<spec>" wraps the driver <spec> (for
// example "fault:shm" or "fault:fault:self") and injects faults chosen
// deterministically from a seed: drop, delay, duplicate, reorder, truncate,
// corrupt, no_resource, failed connect and peer death. With an empty plan it
// is a pure pass-through with the inner driver's caps and profile.
//
// The plan comes from PIER_FAULT_SEED and PIER_FAULT_PLAN when the context is
// made, or from install() before init(). docs/fault.md describes the plan
// syntax, what counts as an operation, and how to replay a failing test.
#pragma once

#include <pier/driver.hpp>
#include <pier/result.hpp>

#include "drivers/fault/context.hpp"
#include "drivers/fault/plan.hpp"

#include <memory>
#include <vector>

namespace pier::drivers::fault {

const pier::driver::DriverEntry& entry();

/// Wraps any context (a test's own driver included) with a plan.
std::unique_ptr<driver::Context> wrap(std::unique_ptr<driver::Context> inner, Plan plan);

/// Replaces the plan of a fault context before its init(): ok, in_use after
/// init(), invalid_argument when `context` is not a fault context.
Status install(driver::Context& context, Plan plan);
/// Faults applied (and skipped) so far; invalid_argument when not a fault context.
Result<Stats> stats(const driver::Context& context);
/// The most recent injected faults, oldest first, for determinism checks.
Result<std::vector<Event>> events(const driver::Context& context);

}  // namespace pier::drivers::fault
