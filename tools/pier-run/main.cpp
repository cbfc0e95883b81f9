// pier-run: the local launcher. pier-run -n N [options] program args...
#include "launcher.hpp"

#include <CLI/CLI.hpp>

#include <cstdio>

int main(int argc, char** argv) {
  pier::run::Options opt;
  std::string bind = "none";
  CLI::App app{
      "pier-run: start N ranks of a program on this host and serve them pier's bootstrap "
      "exchange.\nExit status: 0 when every rank exits 0; else the first failed rank's status "
      "(128+signal if killed), 124 on timeout, 127 if the program cannot start."};
  app.add_option("-n,--np", opt.ranks, "number of ranks")->required()->check(CLI::Range(1u, 4096u));
  app.add_flag("--tag-output", opt.tag_output, "prefix each output line with [rank]");
  app.add_option("--timeout", opt.timeout_s, "kill the job after this many seconds (0: never)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--bind", bind, "bind rank i to core i mod ncores (core) or not (none)")
      ->check(CLI::IsMember({"none", "core"}));
  app.add_option("--kill-grace", opt.kill_grace_s,
                 "seconds between SIGTERM and SIGKILL when the job ends early")
      ->check(CLI::NonNegativeNumber);
  app.add_option("command", opt.command, "program and its arguments")->required();
  // Everything from the program name on belongs to the program.
  app.prefix_command();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  for (auto& extra : app.remaining()) opt.command.push_back(extra);
  opt.bind_core = bind == "core";
  return pier::run::run_job(opt);
}
