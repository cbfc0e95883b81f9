// pier-run: --tag-output, each line of a rank's stdout or stderr prefixed
// with "[rank] " and written whole, so lines of different ranks never mix.
// Lines wait in an OutputQueue per stream and leave when pier-run's own
// stdout or stderr can take them: a reader that stops reading stalls the
// ranks (their pipes fill), never pier-run's loop (timeouts, signals).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace pier::run {

/// pier-run's own notes on stderr ("pier-run: " + text), never blocking: a
/// stderr nobody reads must not stop the loop that enforces timeouts,
/// forwards signals and ends failed jobs. A note that would block is
/// dropped (counted in dropped_notes()); one note is at most PIPE_BUF bytes,
/// so a pipe with a free slot takes it whole.
void say(std::string_view text) noexcept;
std::size_t dropped_notes() noexcept;

class OutputQueue {
 public:
  explicit OutputQueue(int fd) : fd_(fd) {}
  void push(std::string_view bytes) { pending_.append(bytes); }
  bool empty() const noexcept { return sent_ == pending_.size(); }
  /// Past this, pier-run stops reading the ranks' pipes until it drains.
  bool full() const noexcept { return pending_.size() - sent_ > limit; }
  int fd() const noexcept { return fd_; }
  /// Writes what the fd takes now, never blocking (pieces of at most
  /// PIPE_BUF bytes while poll says it is writable). False once the fd
  /// is gone (what waits is dropped).
  bool flush() noexcept;

  static constexpr std::size_t limit = 4u << 20;
  /// Bytes written so far (a reader that takes them, however slowly,
  /// keeps pier-run draining at the end).
  std::size_t written() const noexcept { return written_; }

 private:
  int fd_;
  std::size_t written_ = 0;
  std::string pending_;
  std::size_t sent_ = 0;
};

class LineTagger {
 public:
  LineTagger(std::uint32_t rank, OutputQueue& out)
      : prefix_("[" + std::to_string(rank) + "] "), out_(out) {}
  /// Queues every complete line in `bytes`; keeps the unfinished tail.
  void feed(std::span<const char> bytes);
  /// End of stream: a last line without newline is completed.
  void finish();

 private:
  void emit(std::string_view line);
  std::string prefix_;
  OutputQueue& out_;
  std::string partial_;
};

}  // namespace pier::run
