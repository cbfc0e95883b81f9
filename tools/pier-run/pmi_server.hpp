// pier-run: serves PMI-1 and PMI-2 (PmiService) to the ranks over one socket
// pair per rank, as hydra does: the rank's end is inherited across exec and
// named by PMI_FD, with PMI_RANK and PMI_SIZE beside it. Because the end is an
// inherited descriptor, it reaches ranks that `ip netns exec` moved into
// another network namespace, where pier-run's abstract Unix socket is not
// visible.
//
// The server runs on its own thread with its own poll loop, so the launcher's
// loop is untouched; it shares nothing with that loop but the descriptors
// handed over before the fork. Start it after pier-run blocked its signals
// (the thread inherits the mask, so signals stay with the signalfd).
#pragma once

#include "pmi_service.hpp"

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace pier::run {

class PmiServer {
 public:
  explicit PmiServer(std::uint32_t ranks);
  ~PmiServer();
  PmiServer(const PmiServer&) = delete;
  PmiServer& operator=(const PmiServer&) = delete;

  /// Makes the socket pairs and starts the thread; false (said on stderr)
  /// when the system refuses.
  bool start();
  /// PMI_FD, PMI_RANK, PMI_SIZE, MPI_LOCALNRANKS and MPI_LOCALRANKID for the
  /// rank's environment.
  std::vector<std::string> environment(std::uint32_t rank) const;
  /// Whether an inherited environment entry ("PMI_FD=9") is one of ours, to
  /// be dropped so that ours wins (pier-run started under another PMI).
  static bool overrides(std::string_view entry) noexcept;
  /// In the forked child before exec: keeps the rank's end open across exec.
  /// Async-signal-safe.
  void keep_in_child(std::uint32_t rank) const noexcept;
  /// In pier-run after forking the rank: closes pier-run's copy of its end,
  /// so the server sees end-of-file when the rank is gone.
  void forked(std::uint32_t rank) noexcept;
  /// Readable once a rank said abort (for the job loop's poll).
  int abort_fd() const noexcept { return abort_fd_; }
  /// The exit code of the first abort, once one was said; clears abort_fd.
  std::optional<int> take_abort() noexcept;

 private:
  struct Conn;
  static constexpr std::size_t max_unsent = 1u << 20;
  void serve();
  void read_conn(std::uint32_t rank);
  /// Answers the requests already read, while the answers still unsent stay
  /// under max_unsent (a rank that sends and never reads stalls, not us).
  void parse_conn(std::uint32_t rank);
  void flush_conn(std::uint32_t rank);
  void close_conn(std::uint32_t rank);
  void dispatch(std::vector<PmiOutgoing>& out);

  std::uint32_t ranks_;
  std::vector<int> child_fds_;  ///< the ranks' ends, until forked()
  std::vector<std::unique_ptr<Conn>> conns_;
  PmiService service_;
  int stop_fd_ = -1;                 ///< eventfd: the destructor wakes the thread
  int abort_fd_ = -1;                ///< eventfd: a rank said abort (the job loop polls it)
  std::atomic<int> abort_code_{-1};  ///< the first abort's exit code
  std::thread thread_;
};

}  // namespace pier::run
