// pier-run: starts N ranks on this host, serves them the bootstrap exchange
// over a Unix socket, forwards signals, and ends the job when a rank fails.
#pragma once

#include <string>
#include <vector>

namespace pier::run {

struct Options {
  unsigned ranks = 1;
  bool tag_output = false;
  double timeout_s = 0;  ///< 0: no limit
  bool bind_core = false;
  double kill_grace_s = 3;           ///< SIGTERM to SIGKILL, once the job is ending
  std::vector<std::string> command;  ///< program and its arguments
};

/// Runs the job; returns pier-run's exit code: 0 when every rank exited 0;
/// a failed rank's exit status, or 128 + signal when it was killed;
/// 124 on timeout; 127 when the program cannot be started.
int run_job(const Options& options);

}  // namespace pier::run
