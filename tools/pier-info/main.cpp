// pier-info: what this pier is (version, build), its configuration and the
// PIER_ environment variables it does not know.
#include "sections.hpp"

#include <CLI/CLI.hpp>

#include <iostream>

namespace info = pier::tools::info;

int main(int argc, char** argv) {
  CLI::App app{"pier-info: version, build and configuration of pier"};
  info::Options options;
  bool json = false;
  app.add_flag("--config", options.config,
               "print every configuration key: value, default, source, bounds, help");
  app.add_flag("--json", json, "machine-readable output (one JSON document)");
  CLI11_PARSE(app, argc, argv);

  // One function per section; a new section (drivers, ...) is one more line.
  using Section = void (*)(info::Sink&, const info::Options&);
  constexpr Section sections[] = {info::section_build, info::section_config,
                                  info::section_environment};
  info::Sink sink(json);
  for (Section section : sections) section(sink, options);
  sink.finish(std::cout);
  return std::cout.good() ? 0 : 1;
}
