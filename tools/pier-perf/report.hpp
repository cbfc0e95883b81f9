// pier-perf: the results of a run and their three renderings: a table on
// stdout, JSON (schema in docs/launching.md, "pier-perf JSON") and CSV.
#pragma once

#include "bench.hpp"

#include <string>
#include <vector>

namespace pier::perf {

struct DriverReport {
  std::string driver;
  bool ran = false;
  std::string skipped;    ///< why it did not run ("" when it ran)
  std::string error;      ///< a failure during the run ("" when none)
  std::string degraded;   ///< driver mode: what the driver ran without here
  bool has_caps = false;  ///< driver mode: caps and profile are the driver's
  driver::Caps caps;
  driver::Profile profile;
  std::vector<SizeResult> sizes;
  bool has_rate = false;
  RateResult rate;
};

struct RunReport {
  std::string mode = "driver";   ///< the API measured: "driver", "portals" or "port"
  std::string placement;         ///< "processes" (pier-run) or "threads" (singleton)
  std::vector<int> thread_cpus;  ///< threads placement: the CPUs of roles 0 and 1
  std::uint32_t ranks = 0;
  std::string bootstrap;
  Params params;
  std::vector<DriverReport> drivers;
};

void print_table(const RunReport& report);
std::string to_json(const RunReport& report);
std::string to_csv(const RunReport& report);

}  // namespace pier::perf
