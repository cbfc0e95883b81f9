// pier-run: line tagging of the ranks' output.
#include "output.hpp"

#include <unistd.h>

#include <cerrno>
#include <string_view>

namespace pier::run {

void LineTagger::feed(std::span<const char> bytes) {
  std::string_view rest(bytes.data(), bytes.size());
  for (auto nl = rest.find('\n'); nl != std::string_view::npos; nl = rest.find('\n')) {
    partial_.append(rest.substr(0, nl + 1));
    emit(partial_);
    partial_.clear();
    rest.remove_prefix(nl + 1);
  }
  partial_.append(rest);
  // A rank printing megabytes without a newline must not grow us forever.
  if (partial_.size() > 65536) {
    partial_.push_back('\n');
    emit(partial_);
    partial_.clear();
  }
}

void LineTagger::finish() {
  if (partial_.empty()) return;
  partial_.push_back('\n');
  emit(partial_);
  partial_.clear();
}

void LineTagger::emit(std::string_view line) {
  // One write per line keeps lines whole when ranks share the terminal.
  std::string out = prefix_;
  out.append(line);
  std::string_view left = out;
  while (!left.empty()) {
    const ::ssize_t n = ::write(fd_, left.data(), left.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // our own stdout is gone: nothing useful to do
    left.remove_prefix(static_cast<std::size_t>(n));
  }
}

}  // namespace pier::run
