// pier::boot: which external launcher started this process (see pmix.hpp).
#include "boot/pmix.hpp"

#include "base/log.hpp"

#include <cstdlib>

namespace pier::boot {
namespace {

bool has_env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0';
}

}  // namespace

// The launchers' own variables are read here, not through the config
// registry: they are not PIER_ keys and pier does not own their names.
std::string_view detect_external() noexcept {
  if (has_env("PMIX_RANK") && has_env("PMIX_NAMESPACE")) return "pmix";
  if (has_env("PMI_FD") && has_env("PMI_RANK") && has_env("PMI_SIZE")) return "pmi";
  return {};
}

Result<std::unique_ptr<Bootstrap>> open_external(std::string_view method, Deadline deadline) {
  if (method == "pmi") return open_pmi(deadline);
  if (method != "pmix") return Status::invalid_argument;
  if (!have_pmix()) {
    PIER_LOG(error, "boot",
             "started by a PMIx launcher, but this pier was built without libpmix; use "
             "pier-run, or rebuild with libpmix installed");
    return Status::unsupported;
  }
  return open_pmix(deadline);
}

#ifndef PIER_BOOT_HAVE_PMIX
bool have_pmix() noexcept {
  return false;
}
Result<std::unique_ptr<Bootstrap>> open_pmix(Deadline) {
  return Status::unsupported;
}
#endif

}  // namespace pier::boot
