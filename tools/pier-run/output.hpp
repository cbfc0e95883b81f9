// pier-run: --tag-output, each line of a rank's stdout or stderr prefixed
// with "[rank] " and written whole, so lines of different ranks never mix.
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace pier::run {

class LineTagger {
 public:
  LineTagger(std::uint32_t rank, int out_fd)
      : prefix_("[" + std::to_string(rank) + "] "), fd_(out_fd) {}
  /// Emits every complete line in `bytes`; keeps the unfinished tail.
  void feed(std::span<const char> bytes);
  /// End of stream: a last line without newline is completed.
  void finish();

 private:
  void emit(std::string_view line);
  std::string prefix_;
  int fd_;
  std::string partial_;
};

}  // namespace pier::run
