// pier-perf: a progress bar on stderr, for long runs on a terminal only:
// nothing is drawn when stderr is not a tty (a pipe, a file, pier-run's
// --tag-output), nor during the first second (--progress-after), so short
// runs stay quiet.
#pragma once

#include <fmt/format.h>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

namespace pier::perf {

class Progress {
 public:
  Progress(bool wanted, std::size_t total_steps, double after_s)
      : on_(wanted && ::isatty(STDERR_FILENO) == 1),
        after_s_(after_s),
        total_(total_steps ? total_steps : 1) {}
  ~Progress() { clear(); }
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  /// One step done; `what` names the next one.
  void step(const std::string& what) {
    ++done_;
    draw(what);
  }
  void note(const std::string& what) { draw(what); }
  /// Erases the bar, before anything else goes to the terminal.
  void clear() {
    if (!drawn_) return;
    std::fputs("\r\033[K", stderr);
    std::fflush(stderr);
    drawn_ = false;
  }

 private:
  void draw(const std::string& what) {
    if (!on_) return;
    const double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
    if (elapsed < after_s_) return;
    constexpr std::size_t width = 30;
    const std::size_t filled = std::min(width, done_ * width / total_);
    fmt::print(stderr, "\r\033[K[{}{}] {:3}% {:.0f}s {}", std::string(filled, '#'),
               std::string(width - filled, '.'), std::min<std::size_t>(100, done_ * 100 / total_),
               elapsed, what);
    std::fflush(stderr);
    drawn_ = true;
  }

  using Clock = std::chrono::steady_clock;
  bool on_;
  double after_s_;
  bool drawn_ = false;
  std::size_t total_;
  std::size_t done_ = 0;
  Clock::time_point start_ = Clock::now();
};

}  // namespace pier::perf
