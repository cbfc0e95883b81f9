// pier-perf: latency, bandwidth and message rate through a Transport, with
// the phases and counts of the driver-level Bench.
#include "transport.hpp"

#include "pattern.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace pier::perf {

Deadline ApiBench::phase_deadline() const {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(
                            std::chrono::duration<double>(params_.timeout_s));
}

Failure ApiBench::sync(std::uint64_t* count) {
  const Deadline deadline = phase_deadline();
  std::uint64_t mine = count ? *count : 0, theirs = 0;
  if (role_ == 0) {
    if (Failure f = t_.send_ctrl(mine, deadline)) return f;
    if (Failure f = t_.recv_ctrl(&theirs, deadline)) return f;
  } else {
    if (Failure f = t_.recv_ctrl(&theirs, deadline)) return f;
    if (Failure f = t_.send_ctrl(mine, deadline)) return f;
  }
  // Role 0 decides the counts; role 1 takes what it was told.
  if (count && role_ == 1) *count = theirs;
  return {};
}

Failure ApiBench::check(std::size_t size, std::span<std::byte> landed, bool clear,
                        const char* phase) {
  if (!params_.verify) return {};
  if (landed.size() < size || !matches(landed.first(size), seed_of(size, 1 - role_)))
    return {Status::malformed,
            fmt::format("data mismatch in a {}-byte message ({}), first byte {:#x}", size, phase,
                        landed.empty() ? 0 : std::to_integer<int>(landed[0]))};
  if (clear) std::memset(landed.data(), 0, size);  // a stale copy must not pass
  return {};
}

Failure ApiBench::run_size(std::size_t size, SizeResult& out) {
  out = SizeResult{};
  out.size = size;
  if (params_.verify && filled_size_ != size) {
    fill(t_.send_bytes(size), seed_of(size, role_));
    filled_size_ = size;
  }
  if (Failure f = sync()) return f;
  if (Failure f = latency(size, out)) return f;
  std::size_t count = params_.iters;
  const std::size_t fallback = default_stream_count(size, Bench::max_stream_messages);
  if (!count) {
    const std::size_t probe =
        std::clamp<std::size_t>((std::size_t{1} << 20) / std::max<std::size_t>(size, 1), 1, 1000);
    double probe_s = 0;
    if (Failure f = stream(size, probe, &probe_s)) return f;
    count = fit_count(0, fallback, Bench::stream_budget_s, probe_s / static_cast<double>(probe),
                      std::min<std::size_t>(8, fallback));
  }
  std::vector<double> rates;
  for (int rep = 0; rep < params_.repetitions; ++rep) {
    double seconds = 0;
    if (Failure f = stream(size, count, &seconds)) return f;
    if (seconds > 0)
      rates.push_back(static_cast<double>(size) * static_cast<double>(count) / seconds / 1e6);
  }
  out.bandwidth_messages = count;
  if (!rates.empty()) {
    out.bandwidth_min_mbps = *std::min_element(rates.begin(), rates.end());
    out.bandwidth_max_mbps = *std::max_element(rates.begin(), rates.end());
    out.bandwidth_median_mbps = median_of(rates);
  }
  out.verified = params_.verify;
  return {};
}

Failure ApiBench::latency(std::size_t size, SizeResult& out) {
  const std::size_t planned = params_.iters ? params_.iters : default_latency_iters(size);
  const std::size_t warmup = std::max({std::size_t{2}, planned / 10, t_.landing_buffers(size)});
  Deadline deadline = phase_deadline();
  auto round_trip = [&]() -> Failure {
    std::span<std::byte> landed;
    if (role_ == 0) {
      if (Failure f = t_.post_data(size, 1, deadline)) return f;
      if (Failure f = t_.wait_data(size, deadline, &landed)) return f;
      if (Failure f = check(size, landed, true, "ping-pong")) return f;
    } else {
      // Check (and clear) the ping before answering it: once the pong left,
      // the next ping may land in the same place (Portals: one persistent
      // ME, filled by a progress thread) while this side still reads, and
      // clearing after it would wipe the new ping's bytes.
      if (Failure f = t_.wait_data(size, deadline, &landed)) return f;
      if (Failure f = check(size, landed, true, "ping-pong")) return f;
      if (Failure f = t_.post_data(size, 1, deadline)) return f;
    }
    return t_.release_data(landed);
  };
  if (Failure f = t_.expect_data(size, warmup)) return f;
  if (Failure f = sync()) return f;
  const auto w0 = Clock::now();
  for (std::size_t i = 0; i < warmup; ++i)
    if (Failure f = round_trip()) return f;
  // The warm-up also times a round trip, so that a slow path or a loaded
  // host does not turn the default count into minutes.
  const double per_rt =
      std::chrono::duration<double>(Clock::now() - w0).count() / static_cast<double>(warmup);
  std::uint64_t iters = fit_count(params_.iters, planned, Bench::latency_budget_s, per_rt, 5);
  if (Failure f = t_.finish_sends(deadline)) return f;
  if (Failure f = sync(&iters)) return f;
  if (Failure f = t_.expect_data(size, iters)) return f;
  if (Failure f = sync()) return f;
  deadline = phase_deadline();
  samples_.clear();
  samples_.reserve(iters);  // before the clock starts: no allocation while timing
  for (std::uint64_t i = 0; i < iters; ++i) {
    const auto t0 = Clock::now();
    if (Failure f = round_trip()) return f;
    samples_.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / 2);
  }
  if (Failure f = t_.finish_sends(deadline)) return f;
  out.latency_samples = samples_.size();
  out.latency_min_us = samples_.empty() ? 0 : *std::min_element(samples_.begin(), samples_.end());
  out.latency_median_us = median_of(samples_);
  return {};
}

Failure ApiBench::stream(std::size_t size, std::uint64_t count, double* seconds) {
  if (Failure f = sync(&count)) return f;
  if (role_ == 1)
    if (Failure f = t_.expect_data(size, count)) return f;
  if (Failure f = sync()) return f;  // the receiver is ready before the clock starts
  const Deadline deadline = phase_deadline();
  if (role_ == 1) {
    const bool apart = t_.stream_lands_apart();
    std::span<std::byte> landed;
    for (std::uint64_t i = 0; i < count; ++i) {
      if (Failure f = t_.wait_data(size, deadline, &landed)) return f;
      if (apart || i + 1 == count)
        if (Failure f = check(size, landed, apart, "stream")) return f;
      if (Failure f = t_.release_data(landed)) return f;
    }
    if (!apart && params_.verify) std::memset(landed.data(), 0, std::min(size, landed.size()));
    return t_.send_ctrl(count, deadline);
  }
  const auto t0 = Clock::now();
  for (std::uint64_t i = 0; i < count; ++i)
    if (Failure f = t_.post_data(size, window, deadline)) return f;
  // The receiver's acknowledgement closes the clock: everything has landed.
  std::uint64_t acked = 0;
  if (Failure f = t_.recv_ctrl(&acked, deadline)) return f;
  *seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  if (acked != count)
    return {Status::malformed,
            fmt::format("the receiver acknowledged {} of {} messages", acked, count)};
  return t_.finish_sends(deadline);
}

Failure ApiBench::run_rate(RateResult& out) {
  out = RateResult{};
  out.size = 8;
  out.window = window;
  if (params_.verify) {
    fill(t_.send_bytes(out.size), seed_of(out.size, role_));
    filled_size_ = out.size;
  }
  constexpr std::size_t probe = 1000;
  const std::size_t first = params_.iters ? params_.iters : probe;
  double probe_s = 0;
  if (Failure f = stream(out.size, first, &probe_s)) return f;
  out.messages = fit_count(params_.iters, Bench::max_stream_messages, Bench::stream_budget_s,
                           probe_s / static_cast<double>(first), probe);
  std::vector<double> rates;
  for (int rep = 0; rep < params_.repetitions; ++rep) {
    double seconds = 0;
    if (Failure f = stream(out.size, out.messages, &seconds)) return f;
    if (seconds > 0) rates.push_back(static_cast<double>(out.messages) / seconds);
  }
  if (!rates.empty()) {
    out.max_per_s = *std::max_element(rates.begin(), rates.end());
    out.median_per_s = median_of(rates);
  }
  return {};
}

}  // namespace pier::perf
