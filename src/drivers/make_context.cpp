// pier drivers: make_context(spec), the one place a driver spec such as
// "shm" or "fault:tcp" becomes a context.
#include <pier/driver.hpp>

#include <string>

#include "base/log.hpp"

namespace pier::driver {

Result<std::unique_ptr<Context>> make_context(std::string_view spec) {
  const std::size_t colon = spec.find(':');
  const std::string_view name = spec.substr(0, colon);
  const std::string_view argument =
      colon == std::string_view::npos ? std::string_view{} : spec.substr(colon + 1);
  std::string known;
  for (const DriverEntry& entry : builtin_drivers()) {
    if (entry.name == name) return entry.make(argument);
    if (!known.empty()) known += ", ";
    known += entry.name;
  }
  PIER_LOG(warn, "drivers", "no driver named '{}' (built: {})", name, known);
  return Status::not_found;
}

}  // namespace pier::driver
