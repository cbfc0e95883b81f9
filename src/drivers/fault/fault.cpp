#include "drivers/fault/fault.hpp"

#include "base/config.hpp"
#include "base/log.hpp"

#include <limits>
#include <string>

namespace pier::drivers::fault {

inline const pier::config::IntKey seed_key{
    "FAULT_SEED", 1, 0, std::numeric_limits<std::int64_t>::max(),
    "seed of the fault driver's decisions; a failing test logs it for replay"};
inline const pier::config::StringKey plan_key{
    "FAULT_PLAN", "",
    "faults to inject, e.g. \"drop=0.01,dup@3,death@100,delay_packets=2\" (docs/fault.md)"};
inline const pier::config::IntKey slots_key{
    "FAULT_SLOTS", 16, 1, 4096, "packets each faulty instance can hold, modify or duplicate"};
inline const pier::config::IntKey slot_bytes_key{
    "FAULT_SLOT_BYTES",
    std::int64_t{64} * 1024,
    64,
    std::int64_t{1} << 30,
    "largest packet the fault driver can hold, modify or duplicate",
    pier::config::Type::size};

namespace {

/// The plan from the configuration; a "seed=" or "slots=" in the plan text
/// wins over the separate keys.
Result<Plan> configured_plan() {
  Plan base;
  base.seed = static_cast<std::uint64_t>(seed_key.get());
  base.slots = static_cast<std::uint32_t>(slots_key.get());
  base.slot_bytes = static_cast<std::size_t>(slot_bytes_key.get());
  const std::string text = plan_key.get();
  const std::string full = format_plan(base) + "," + text;
  std::string error;
  Result<Plan> plan = parse_plan(full, &error);
  if (!plan) PIER_LOG(error, "fault", "PIER_FAULT_PLAN \"{}\" is invalid: {}", text, error);
  return plan;
}

Result<std::unique_ptr<driver::Context>> make(std::string_view argument) {
  if (argument.empty()) {
    PIER_LOG(error, "fault", "the fault driver needs an inner driver, as in \"fault:shm\"");
    return Status::invalid_argument;
  }
  const std::size_t colon = argument.find(':');
  const std::string_view inner_name = argument.substr(0, colon);
  const std::string_view inner_argument =
      colon == std::string_view::npos ? std::string_view{} : argument.substr(colon + 1);
  // The registry lives in pier_drivers, which links this library: looked up
  // at run time, so the inner driver can be any built-in one (fault included).
  Result<Plan> plan = configured_plan();
  if (!plan) return plan.status();
  for (const driver::DriverEntry& e : driver::builtin_drivers()) {
    if (e.name != inner_name) continue;
    Result<std::unique_ptr<driver::Context>> inner = e.make(inner_argument);
    if (!inner) return inner.status();
    return wrap(std::move(*inner), std::move(*plan));
  }
  PIER_LOG(error, "fault", "no driver named \"{}\" to wrap", inner_name);
  return Status::not_found;
}

const Context* as_fault(const driver::Context& context) {
  return dynamic_cast<const Context*>(&context);
}

}  // namespace

const pier::driver::DriverEntry& entry() {
  static const driver::DriverEntry e{
      "fault", "wraps another driver and injects faults deterministically from a seed", &make};
  return e;
}

std::unique_ptr<driver::Context> wrap(std::unique_ptr<driver::Context> inner, Plan plan) {
  return std::make_unique<Context>(std::move(inner), std::move(plan));
}

Status install(driver::Context& context, Plan plan) {
  auto* fault = dynamic_cast<Context*>(&context);
  if (fault == nullptr) return Status::invalid_argument;
  return fault->install(std::move(plan));
}

Result<Stats> stats(const driver::Context& context) {
  const Context* fault = as_fault(context);
  if (fault == nullptr) return Status::invalid_argument;
  return fault->stats();
}

Result<std::vector<Event>> events(const driver::Context& context) {
  const Context* fault = as_fault(context);
  if (fault == nullptr) return Status::invalid_argument;
  return fault->events();
}

}  // namespace pier::drivers::fault
