// shm: the registry entry.
#include "drivers/shm/shm.hpp"

#include "drivers/shm/context.hpp"

namespace pier::drivers::shm {

namespace {

Result<std::unique_ptr<driver::Context>> make(std::string_view argument) {
  if (!argument.empty()) return Status::invalid_argument;
  return std::unique_ptr<driver::Context>(std::make_unique<ShmContext>());
}

}  // namespace

const driver::DriverEntry& entry() {
  static const driver::DriverEntry e{
      "shm", "processes on one host: shared-memory rings, single copy", &make};
  return e;
}

}  // namespace pier::drivers::shm
