// pier-perf: the measurements over one Link. Role 0 initiates (and keeps the
// results), role 1 answers; both run the same sequence of phases, each
// opened by a sync round trip so that neither side times the other's set-up.
//
// Per size:
//   latency    ping-pong, one-way time = round trip / 2, median and min over
//              every timed round trip (after a warm-up);
//   bandwidth  role 0 streams messages with a window of sends in flight
//              (small track), or one rendezvous at a time (large track: the
//              receiver posts, sends a ready message with the driver's
//              rdv_data over the small track, the sender then sends);
//              median, min and max over repetitions.
// Per driver: the 8-byte message rate, streamed like the bandwidth.
#pragma once

#include "link.hpp"

#include <cstdint>
#include <vector>

namespace pier::perf {

struct Params {
  std::vector<std::size_t> sizes;
  std::size_t iters = 0;  ///< 0: chosen per size
  int repetitions = 3;    ///< bandwidth and rate repetitions
  bool verify = false;
  double timeout_s = 60;  ///< per phase
};

struct SizeResult {
  std::size_t size = 0;
  bool large_track = false;
  double latency_median_us = 0;
  double latency_min_us = 0;
  std::size_t latency_samples = 0;
  double bandwidth_median_mbps = 0;  ///< MB/s, 1e6 bytes per second
  double bandwidth_min_mbps = 0;
  double bandwidth_max_mbps = 0;
  std::size_t bandwidth_messages = 0;  ///< per repetition
  bool verified = false;               ///< --verify ran and every byte matched
};

struct RateResult {
  std::size_t size = 8;
  std::size_t window = 0;
  std::size_t messages = 0;  ///< per repetition
  double median_per_s = 0;
  double max_per_s = 0;
};

class Bench {
 public:
  /// Buffers for the largest size are allocated here, once.
  Bench(Link& link, int role, const Params& params);

  Failure run_size(std::size_t size, SizeResult& out);
  Failure run_rate(RateResult& out);
  /// One round trip of a control message; both roles call it. With
  /// `count`, role 0's value is handed to role 1 (the agreed iteration count).
  Failure sync(std::uint64_t* count = nullptr);

  static constexpr std::size_t window = 64;
  /// Time budgets of the default counts: a phase stops growing its count
  /// once it would take longer than this (measured on the warm-up).
  static constexpr double latency_budget_s = 0.3;
  static constexpr double stream_budget_s = 0.2;
  static constexpr std::size_t max_stream_messages = 200000;

 private:
  Failure latency(std::size_t size, SizeResult& out);
  /// Streams `count` messages from role 0 to role 1; role 0 gets the time.
  Failure stream(std::size_t size, std::uint64_t count, double* seconds);
  Failure stream_small_send(std::size_t size, std::size_t count);
  Failure stream_large_send(std::size_t size, std::size_t count);
  Failure stream_recv(std::size_t size, std::size_t count);
  /// Posts a receive for one data message; on the large track it also sends
  /// the ready message carrying the driver's rdv_data.
  Failure post_data_recv(Op& op, std::size_t size, Deadline deadline);
  /// Sends one data message; on the large track it first waits for the ready.
  Failure send_data(std::size_t size, Deadline deadline);
  Failure check(std::size_t size, std::size_t got);
  Deadline phase_deadline() const;
  std::size_t latency_iters(std::size_t size) const;
  std::size_t stream_count(std::size_t size) const;
  /// `fallback`, or fewer items when each takes `per_item_s` and the budget
  /// would be exceeded (never fewer than `floor`); --iters overrides.
  std::size_t calibrated(std::size_t fallback, double budget_s, double per_item_s,
                         std::size_t floor) const;

  Link& link_;
  int role_;
  Params params_;
  std::vector<std::byte> send_buf_;
  std::vector<std::byte> recv_buf_;
  std::vector<std::byte> ctrl_out_;
  std::vector<std::byte> ctrl_in_;
  std::vector<Op> ops_;
  std::vector<double> samples_;
  std::size_t filled_size_ = 0;  ///< size whose pattern send_buf_ holds (verify)
};

}  // namespace pier::perf
