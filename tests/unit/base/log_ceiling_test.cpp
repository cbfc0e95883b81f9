// A translation unit built with a compile-time ceiling of warn, as release
// builds use info: PIER_LOG above the ceiling must vanish, arguments and all.
#undef PIER_LOG_CEILING
#define PIER_LOG_CEILING 2
#include "base/log.hpp"

namespace {

static_assert(PIER_LOG_CEILING == 2, "this file tests the ceiling macro");

}  // namespace

int ceiling_evaluations() {
  int evaluated = 0;
  auto count = [&] { return ++evaluated; };
  PIER_LOG(error, "ceiling", "kept {}", count());
  PIER_LOG(warn, "ceiling", "kept {}", count());
  PIER_LOG(info, "ceiling", "stripped {}", count());
  PIER_LOG(debug, "ceiling", "stripped {}", count());
  PIER_LOG(trace, "ceiling", "stripped {}", count());
  PIER_LOG(data, "ceiling", "stripped {}", count());
  return evaluated;
}
