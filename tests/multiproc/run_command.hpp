// tests/multiproc: runs a command with a deadline, capturing its output.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace pier::multiproc {

struct Outcome {
  int exit_code = -1;      ///< exit status, or 128 + signal
  bool timed_out = false;  ///< the deadline passed and the command was killed
  std::string output;      ///< stdout and stderr, interleaved
};

struct RunSpec {
  std::vector<std::string> argv;  ///< argv[0] is a path
  std::chrono::seconds limit{60};
  std::vector<std::string> env;  ///< extra "NAME=value" entries
  /// Once the output contains this text, send `signal` to the command.
  std::string signal_after;
  int signal = 0;
};

/// Runs the command, killing it at the deadline; never hangs. PIER_RUN_*
/// variables of the test's own environment are not passed on.
Outcome run_command(const RunSpec& spec);

}  // namespace pier::multiproc
