// pier conformance: forked peers for the multi-process cases. A child runs a
// function in a fresh process (no GoogleTest there: it reports through its
// exit code) and talks to the parent over two pipes carrying length-prefixed
// blobs (urls, rendezvous data, small commands), as a launcher and the core
// would carry them.
#pragma once

#include <sys/types.h>
#include <pier/driver.hpp>

#include <functional>
#include <span>
#include <vector>

namespace pier::conformance {

class Child {
 public:
  /// Forks; the child runs body(channel) and exits with its result. A child
  /// that outlives `watchdog_s` seconds is killed by its own alarm.
  explicit Child(const std::function<int(Child&)>& body, unsigned watchdog_s = 90);
  ~Child();
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  bool started() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  /// Sends a blob to the other side (parent -> child or child -> parent).
  Status send(std::span<const std::byte> blob);
  /// Receives a blob, or timeout / closed.
  Status receive(std::vector<std::byte>& blob, pier::driver::Deadline deadline);
  /// Parent: waits for the exit; `code` is the exit status, or -signal.
  Status wait_exit(pier::driver::Deadline deadline, int* code);
  /// Parent: SIGKILL and reap.
  void kill_now();

 private:
  pid_t pid_ = -1;
  int out_fd_ = -1;  ///< this side writes here
  int in_fd_ = -1;   ///< this side reads here
  bool reaped_ = false;
};

}  // namespace pier::conformance
