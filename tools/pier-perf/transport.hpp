// pier-perf: measuring through an API above the driver (Portals 4 puts, the
// GM-style ports). A Transport moves data messages and 8-byte control
// values to the one peer; ApiBench runs on it the same phases, counts and
// statistics as the driver-level Bench (bench.hpp), so the columns compare.
#pragma once

#include "bench.hpp"

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace pier::perf {

class Transport {
 public:
  virtual ~Transport() = default;
  /// The bytes a data message of `size` is sent from (filled for --verify).
  virtual std::span<std::byte> send_bytes(std::size_t size) noexcept = 0;
  /// Readies the receiving side for `count` data messages of `size` bytes
  /// (the port layer provides its buffers here). Called before the sync
  /// that opens a phase, so the peer never sends ahead of it.
  virtual Failure expect_data(std::size_t size, std::size_t count) noexcept = 0;
  /// Starts one data message of `size` bytes; at most `max_in_flight` sends
  /// stay unfinished (the call waits for older ones when needed).
  virtual Failure post_data(std::size_t size, std::size_t max_in_flight,
                            Deadline deadline) noexcept = 0;
  /// Waits until every started data message is finished at this side.
  virtual Failure finish_sends(Deadline deadline) noexcept = 0;
  /// Waits for the next data message; `*landed` is where its bytes are.
  virtual Failure wait_data(std::size_t size, Deadline deadline,
                            std::span<std::byte>* landed) noexcept = 0;
  /// Hands the landing place of the last data message back (port layer: the
  /// buffer is provided again when more messages are expected).
  virtual Failure release_data(std::span<std::byte> landed) noexcept = 0;
  /// How many distinct buffers data messages of `size` land in, in turn
  /// (the port layer rotates several). The latency warm-up uses each once:
  /// on this kind of virtual machine, the first time the kernel writes a
  /// page costs microseconds, which turned the first 16 round trips of
  /// 2 MiB through ports over tcp from 0.5 ms into 3 ms one-way.
  virtual std::size_t landing_buffers(std::size_t size) const noexcept {
    (void)size;
    return 1;
  }
  /// False when messages of a stream land on top of each other (Portals: one
  /// persistent ME), so a stream can only be verified once it ended.
  virtual bool stream_lands_apart() const noexcept = 0;
  virtual Failure send_ctrl(std::uint64_t value, Deadline deadline) noexcept = 0;
  virtual Failure recv_ctrl(std::uint64_t* value, Deadline deadline) noexcept = 0;
  /// Before the transport goes: lets the peer's last messages be answered.
  virtual void drain(Deadline deadline) noexcept { (void)deadline; }
};

class ApiBench {
 public:
  ApiBench(Transport& t, int role, const Params& params) : t_(t), role_(role), params_(params) {}

  Failure run_size(std::size_t size, SizeResult& out);
  Failure run_rate(RateResult& out);
  /// A control round trip; with `count`, role 0's value reaches role 1.
  Failure sync(std::uint64_t* count = nullptr);

  static constexpr std::size_t window = 64;

 private:
  Failure latency(std::size_t size, SizeResult& out);
  Failure stream(std::size_t size, std::uint64_t count, double* seconds);
  Failure check(std::size_t size, std::span<std::byte> landed, bool clear, const char* phase);
  Deadline phase_deadline() const;

  Transport& t_;
  int role_;
  Params params_;
  std::vector<double> samples_;
  std::size_t filled_size_ = 0;
};

}  // namespace pier::perf
