// tests/multiproc: run_command, fork/exec with a poll() deadline.
#include "run_command.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <string_view>

extern char** environ;

namespace pier::multiproc {

Outcome run_command(const RunSpec& spec) {
  Outcome result;
  std::vector<std::string> env_text;
  for (char** e = environ; *e; ++e) {
    if (std::string_view(*e).starts_with("PIER_RUN_")) continue;
    env_text.emplace_back(*e);
  }
  env_text.insert(env_text.end(), spec.env.begin(), spec.env.end());
  std::vector<char*> envp, args;
  for (auto& s : env_text) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_copy = spec.argv;
  for (auto& s : argv_copy) args.push_back(s.data());
  args.push_back(nullptr);

  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) return result;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    ::dup2(pipe_fds[1], STDOUT_FILENO);
    ::dup2(pipe_fds[1], STDERR_FILENO);
    ::execve(args[0], args.data(), envp.data());
    ::_exit(126);
  }
  ::close(pipe_fds[1]);
  if (pid < 0) {
    ::close(pipe_fds[0]);
    return result;
  }
  const auto deadline = std::chrono::steady_clock::now() + spec.limit;
  bool signalled = false;
  std::array<char, 4096> buf;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      result.timed_out = true;
      ::kill(-pid, SIGKILL);
      break;
    }
    ::pollfd p{pipe_fds[0], POLLIN, 0};
    const int n = ::poll(&p, 1, static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) continue;
    const ::ssize_t got = ::read(pipe_fds[0], buf.data(), buf.size());
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    result.output.append(buf.data(), static_cast<std::size_t>(got));
    if (!signalled && spec.signal != 0 && !spec.signal_after.empty() &&
        result.output.find(spec.signal_after) != std::string::npos) {
      signalled = true;
      ::kill(pid, spec.signal);
    }
  }
  ::close(pipe_fds[0]);
  int status = 0;
  // The output is closed; a command that lingers past the deadline is killed.
  for (;;) {
    const pid_t done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid || (done < 0 && errno != EINTR)) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      result.timed_out = true;
      ::kill(-pid, SIGKILL);
    }
    ::usleep(10'000);
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

}  // namespace pier::multiproc
