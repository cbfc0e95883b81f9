// pier-info: what this pier is (version, build), its drivers and why some
// cannot run here, the core's thresholds, the bootstrap back end, its
// configuration and the PIER_ environment variables it does not know.
#include "sections.hpp"

#include <CLI/CLI.hpp>

#include <iostream>

namespace info = pier::tools::info;

int main(int argc, char** argv) {
  CLI::App app{"pier-info: version, build, drivers, thresholds and configuration of pier"};
  info::Options options;
  bool json = false;
  app.add_flag("--config", options.config,
               "print every configuration key: value, default, source, bounds, help");
  app.add_flag("--json", json, "machine-readable output (one JSON document)");
  bool no_init = false;
  app.add_flag("--no-init", no_init,
               "describe drivers from their properties only, without bringing them up");
  CLI11_PARSE(app, argc, argv);
  options.init_drivers = !no_init;

  // One function per section; a new section (drivers, ...) is one more line.
  using Section = void (*)(info::Sink&, const info::Options&);
  constexpr Section sections[] = {info::section_build,         info::section_drivers,
                                  info::section_ofi_providers, info::section_thresholds,
                                  info::section_bootstrap,     info::section_config,
                                  info::section_environment};
  info::Sink sink(json);
  for (Section section : sections) section(sink, options);
  sink.finish(std::cout);
  return std::cout.good() ? 0 : 1;
}
