// pier-run: the PMI-1 and PMI-2 "simple" protocols as MPICH's hydra serves
// them (docs/pmi.md), so programs that bootstrap through PMI start under
// pier-run unchanged. Pure state like Exchange: fed messages per rank, it
// answers with bytes to send; the sockets live in PmiServer.
//
// One key-value space per job (kvsname = jobid = "pier-run.<pid>"), shared by
// both protocol versions. A put is visible at once; barrier_in (PMI-1) and
// kvs-fence (PMI-2) are the same barrier and complete when every rank entered
// it. A rank that left (closed its PMI socket, or finalized) makes a pending
// barrier impossible: `leave_grace` after it left, the waiting ranks'
// connections are closed, so their PMI calls return an error instead of
// hanging. The grace lets pier-run first see a rank that died and end the
// job naming that rank, rather than the waiters that failed after it. A rank
// that called abort is left to exit: pier-run then ends the job with its
// exit status. Service names (MPI_Publish_name) live in one space per job;
// spawn is refused with an answer the client sees (pier-run starts ranks
// only with -n).
#pragma once

#include "boot/pmi_wire.hpp"

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace pier::run {

/// Bytes for one rank's connection; `close_after` ends it once sent.
struct PmiOutgoing {
  std::uint32_t rank;
  std::string bytes;
  bool close_after = false;
};

class PmiService {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr Clock::duration leave_grace = std::chrono::seconds(1);

  PmiService(std::uint32_t size, std::string jobid);

  /// One message from `rank`, at time `now`.
  void on_message(std::uint32_t rank, const boot::pmi::Message& message, Clock::time_point now,
                  std::vector<PmiOutgoing>& out);
  /// The rank's PMI socket closed.
  void on_disconnect(std::uint32_t rank, Clock::time_point now, std::vector<PmiOutgoing>& out);
  /// Time passed: fails a barrier whose grace ran out.
  void on_tick(Clock::time_point now, std::vector<PmiOutgoing>& out);
  /// When on_tick() has something to do, if ever.
  std::optional<Clock::time_point> next_tick() const noexcept;
  /// Lines for pier-run's stderr (aborts, protocol errors, failed barriers).
  std::vector<std::string> take_notes() { return std::move(notes_); }
  /// Exit codes of the aborts said since the last call (a rank that says
  /// abort ends the job, whatever status it then exits with).
  std::vector<int> take_aborts() { return std::move(aborts_); }

  const std::string& jobid() const noexcept { return jobid_; }
  /// Total bytes of keys and values one job may store.
  static constexpr std::size_t max_kvs_bytes = 64u << 20;
  /// What an entry costs in memory besides its key and value bytes (a map
  /// node and two strings), counted against max_kvs_bytes: tiny entries
  /// would otherwise cost far more memory than the bytes counted.
  static constexpr std::size_t kvs_entry_cost = 96;
  /// Node attribute waits one rank may have pending: PMI-2 has one call
  /// outstanding per client thread, and each wait is kept here until the
  /// attribute is put, so a rank sending more is refused, not stored.
  static constexpr std::size_t max_node_waits_per_rank = 64;

 private:
  struct RankState {
    bool gone = false;       ///< finalized or disconnected: never enters a barrier again
    bool finalized = false;  ///< said finalize (a later disconnect is normal)
    bool waiting = false;    ///< inside the current barrier
    bool aborted = false;    ///< said abort: pier-run ends the job when it exits
    boot::pmi::Framing barrier_framing = boot::pmi::Framing::v1;
    std::string barrier_thrid;  ///< PMI-2 thread id to echo, "" for none
    std::string left_why;       ///< how it left, for the barrier failure
    Clock::time_point left_at{};
  };
  struct NameAnswer {
    bool ok;
    std::string error;  ///< when not ok
    std::string port;   ///< a lookup's answer
  };
  struct NodeWait {
    std::uint32_t rank;
    std::string key;
    std::string thrid;
  };

  void on_v1(std::uint32_t rank, const boot::pmi::Command& c, std::vector<PmiOutgoing>& out);
  void on_v2(std::uint32_t rank, const boot::pmi::Command& c, std::vector<PmiOutgoing>& out);
  void reply(std::uint32_t rank, boot::pmi::Framing framing, const boot::pmi::Command& c,
             std::vector<PmiOutgoing>& out, bool close_after = false);
  void enter_barrier(std::uint32_t rank, boot::pmi::Framing framing, std::string thrid,
                     std::vector<PmiOutgoing>& out);
  void leave(std::uint32_t rank, std::string why, std::vector<PmiOutgoing>& out);
  /// Fails the pending barrier once a rank has been gone for leave_grace.
  void check_barrier(std::vector<PmiOutgoing>& out);
  void fail_barrier(std::vector<PmiOutgoing>& out);
  void abort_from(std::uint32_t rank, const boot::pmi::Command& c);
  /// publish, unpublish or lookup of a service name (both PMI versions).
  NameAnswer on_name(const std::string& op, const std::string& service, const std::string& port);
  void note_spawn(std::uint32_t rank, const std::string& program, const std::string& count);
  /// False (and an error answer already queued) when the store is full.
  bool store(std::map<std::string, std::string>& space, const std::string& key,
             const std::string& value);

  std::uint32_t size_;
  std::string jobid_;
  std::vector<RankState> ranks_;
  std::map<std::string, std::string> kvs_;
  std::map<std::string, std::string> node_;  ///< PMI-2 node attributes (one node)
  std::vector<NodeWait> node_waits_;
  std::map<std::string, std::string> names_;  ///< published service -> port
  std::size_t kvs_bytes_ = 0;
  std::uint32_t barrier_epoch_ = 1;
  std::string barrier_failure_;  ///< non-empty once a barrier failed: every later one fails
  std::vector<std::string> notes_;
  std::vector<int> aborts_;
  Clock::time_point now_{};  ///< of the event being handled
};

}  // namespace pier::run
