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
  // At most a year: a larger number of seconds overflowed the clock and the
  // job timed out at once.
  constexpr double year_s = 365.0 * 24 * 3600;
  app.add_option("--timeout", opt.timeout_s, "kill the job after this many seconds (0: never)")
      ->check(CLI::Range(0.0, year_s));
  app.add_option("--bind", bind, "bind rank i to core i mod ncores (core) or not (none)")
      ->check(CLI::IsMember({"none", "core"}));
  app.add_option("--kill-grace", opt.kill_grace_s,
                 "seconds between SIGTERM and SIGKILL when the job ends early")
      ->check(CLI::Range(0.0, year_s));
  // Everything from the program name on belongs to the program, options
  // included: the first positional argument stops pier-run's parsing.
  app.prefix_command();
  app.footer("usage: pier-run -n N [options] program [args...]");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  opt.command = app.remaining();
  if (!opt.command.empty() && opt.command.front() == "--") opt.command.erase(opt.command.begin());
  if (opt.command.empty()) {
    std::fprintf(stderr, "pier-run: no program given\n%s", app.help().c_str());
    return 2;
  }
  opt.bind_core = bind == "core";
  return pier::run::run_job(opt);
}
