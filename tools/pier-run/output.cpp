// pier-run: line tagging of the ranks' output.
#include "output.hpp"

#include <limits.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <string_view>

namespace pier::run {

namespace {
std::atomic<std::size_t> notes_dropped{0};
}  // namespace

void say(std::string_view text) noexcept {
  char line[PIPE_BUF];
  constexpr std::string_view prefix = "pier-run: ";
  const std::size_t room = sizeof line - prefix.size() - 1;
  const std::size_t n = std::min(text.size(), room);
  std::memcpy(line, prefix.data(), prefix.size());
  std::memcpy(line + prefix.size(), text.data(), n);
  line[prefix.size() + n] = '\n';
  ::pollfd p{STDERR_FILENO, POLLOUT, 0};
  if (::poll(&p, 1, 0) != 1 || !(p.revents & POLLOUT)) {
    notes_dropped.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  (void)!::write(STDERR_FILENO, line, prefix.size() + n + 1);
}

std::size_t dropped_notes() noexcept {
  return notes_dropped.load(std::memory_order_relaxed);
}

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
  // Prefix and line together: they leave in order, never split by another's.
  out_.push(prefix_);
  out_.push(line);
}

bool OutputQueue::flush() noexcept {
  while (!empty()) {
    ::pollfd p{fd_, POLLOUT, 0};
    if (::poll(&p, 1, 0) != 1) return true;
    if ((p.revents & (POLLERR | POLLNVAL)) != 0) break;
    // At most PIPE_BUF: a pipe that polls writable takes that much at once;
    // and whole lines when they fit, so another writer's line (pier-run's
    // own notes on a shared stderr) never lands inside one of ours.
    std::size_t n = std::min<std::size_t>(pending_.size() - sent_, PIPE_BUF);
    if (n < pending_.size() - sent_) {
      const std::string_view piece(pending_.data() + sent_, n);
      if (const auto nl = piece.rfind('\n'); nl != std::string_view::npos) n = nl + 1;
    }
    const ::ssize_t w = ::write(fd_, pending_.data() + sent_, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) break;
    sent_ += static_cast<std::size_t>(w);
    written_ += static_cast<std::size_t>(w);
  }
  if (empty()) {
    pending_.clear();
    sent_ = 0;
    return true;
  }
  if (sent_ > 0 && sent_ * 2 > pending_.size()) {
    pending_.erase(0, sent_);  // amortised: at most half the queue moves
    sent_ = 0;
  }
  ::pollfd p{fd_, POLLOUT, 0};
  if (::poll(&p, 1, 0) == 1 && (p.revents & (POLLERR | POLLNVAL)) != 0) {
    pending_.clear();  // our own stdout is gone: nothing useful to do
    sent_ = 0;
    return false;
  }
  return true;
}

}  // namespace pier::run
