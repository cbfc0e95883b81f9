// pier-perf: latency, bandwidth and message rate over one Link.
#include "bench.hpp"
#include "pattern.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace pier::perf {
namespace {

constexpr std::size_t ctrl_size = 64;
constexpr std::byte kind_sync{'S'};
constexpr std::byte kind_ready{'R'};
constexpr std::byte kind_ack{'A'};

}  // namespace

Bench::Bench(Link& link, int role, const Params& params)
    : link_(link),
      role_(role),
      params_(params),
      ctrl_out_(ctrl_size),
      ctrl_in_(ctrl_size),
      ops_(window) {
  std::size_t largest = 8;
  for (auto s : params_.sizes) largest = std::max(largest, s);
  send_buf_.assign(largest, std::byte{0x5a});
  recv_buf_.assign(largest, std::byte{0});
}

Deadline Bench::phase_deadline() const {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(
                            std::chrono::duration<double>(params_.timeout_s));
}

std::size_t Bench::latency_iters(std::size_t size) const {
  return params_.iters ? params_.iters : default_latency_iters(size);
}

std::size_t Bench::stream_count(std::size_t size) const {
  return params_.iters ? params_.iters : default_stream_count(size, max_stream_messages);
}

Failure Bench::sync(std::uint64_t* count) {
  const Deadline deadline = phase_deadline();
  ctrl_out_[0] = kind_sync;
  const std::uint64_t mine = count ? *count : 0;
  std::memcpy(ctrl_out_.data() + 8, &mine, sizeof mine);
  std::size_t got = 0;
  if (role_ == 0) {
    if (Failure f = link_.send(link_.small(), ctrl_out_, deadline)) return f;
    if (Failure f = link_.recv(link_.small(), ctrl_in_, deadline, &got)) return f;
  } else {
    if (Failure f = link_.recv(link_.small(), ctrl_in_, deadline, &got)) return f;
    if (Failure f = link_.send(link_.small(), ctrl_out_, deadline)) return f;
  }
  if (got != ctrl_size || ctrl_in_[0] != kind_sync)
    return {Status::malformed,
            fmt::format("sync: unexpected control message ({} bytes, kind {}): peers out of step",
                        got, std::to_integer<int>(ctrl_in_[0]))};
  // Role 0 decides the counts; role 1 takes what it was told. Both run on
  // the same host, so the native byte order is shared.
  if (count && role_ == 1) std::memcpy(count, ctrl_in_.data() + 8, sizeof *count);
  return {};
}

std::size_t Bench::calibrated(std::size_t fallback, double budget_s, double per_item_s,
                              std::size_t floor) const {
  return fit_count(params_.iters, fallback, budget_s, per_item_s, floor);
}

Failure Bench::check(std::size_t size, std::size_t got) {
  if (got != size)
    return {Status::truncated, fmt::format("received {} bytes, expected {}", got, size)};
  if (params_.verify && !matches(std::span(recv_buf_).first(size), seed_of(size, 1 - role_)))
    return {Status::malformed, fmt::format("data mismatch in a {}-byte message", size)};
  if (params_.verify) std::memset(recv_buf_.data(), 0, size);  // a stale copy must not pass
  return {};
}

Failure Bench::post_data_recv(Op& op, std::size_t size, Deadline deadline) {
  op.prepare(std::span(recv_buf_).first(size));
  const bool large = link_.uses_large(size);
  const Status s = op.post_recv(large ? link_.large() : link_.small());
  if (is_failure(s) || s == Status::no_resource) return {s, "recv_post"};
  if (!large) return {};
  ctrl_out_[0] = kind_ready;
  ctrl_out_[1] = static_cast<std::byte>(op.pkt.rdv_len);
  std::memcpy(ctrl_out_.data() + 8, op.pkt.rdv_data.data(), op.pkt.rdv_data.size());
  return link_.send(link_.small(), ctrl_out_, deadline);
}

Failure Bench::send_data(std::size_t size, Deadline deadline) {
  auto bytes = std::span(send_buf_).first(size);
  if (!link_.uses_large(size)) return link_.send(link_.small(), bytes, deadline);
  std::size_t got = 0;
  if (Failure f = link_.recv(link_.small(), ctrl_in_, deadline, &got)) return f;
  if (got != ctrl_size || ctrl_in_[0] != kind_ready ||
      std::to_integer<std::size_t>(ctrl_in_[1]) > driver::Packet::rdv_capacity)
    return {Status::malformed, "expected a ready message"};
  driver::Packet ready;
  ready.rdv_len = std::to_integer<std::uint8_t>(ctrl_in_[1]);
  std::memcpy(ready.rdv_data.data(), ctrl_in_.data() + 8, ready.rdv_data.size());
  return link_.send(link_.large(), bytes, deadline, &ready);
}

Failure Bench::run_size(std::size_t size, SizeResult& out) {
  out = SizeResult{};
  out.size = size;
  out.large_track = link_.uses_large(size);
  if (params_.verify && filled_size_ != size) {
    fill(std::span(send_buf_).first(size), seed_of(size, role_));
    filled_size_ = size;
  }
  if (Failure f = sync()) return f;
  if (Failure f = latency(size, out)) return f;
  // A short probe stream (at most 1 MiB or 1000 messages) paces the timed
  // ones; role 0's choice reaches role 1 through the sync of each stream.
  std::size_t count = params_.iters;
  if (!count) {
    const std::size_t probe =
        std::clamp<std::size_t>((std::size_t{1} << 20) / std::max<std::size_t>(size, 1), 1, 1000);
    double probe_s = 0;
    if (Failure f = stream(size, probe, &probe_s)) return f;
    count = calibrated(stream_count(size), stream_budget_s, probe_s / static_cast<double>(probe),
                       std::min<std::size_t>(8, stream_count(size)));
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

Failure Bench::latency(std::size_t size, SizeResult& out) {
  const std::size_t planned = latency_iters(size);
  const std::size_t warmup = std::max<std::size_t>(2, planned / 10);
  const Deadline deadline = phase_deadline();
  Op& in = ops_[0];
  auto round_trip = [&]() -> Failure {
    if (role_ == 0) {
      // The pong's receive is posted before the ping leaves, so its arrival
      // never waits for us.
      if (Failure f = post_data_recv(in, size, deadline)) return f;
      if (Failure f = send_data(size, deadline)) return f;
      return link_.wait(in, deadline, "pong");
    }
    if (Failure f = post_data_recv(in, size, deadline)) return f;
    if (Failure f = link_.wait(in, deadline, "ping")) return f;
    return send_data(size, deadline);
  };
  const auto w0 = Clock::now();
  for (std::size_t i = 0; i < warmup; ++i) {
    if (Failure f = round_trip()) return f;
    if (Failure f = check(size, in.pkt.length)) return f;
  }
  // The warm-up also times a round trip, so that a slow driver or a loaded
  // host does not turn the default count into minutes.
  const double per_rt =
      std::chrono::duration<double>(Clock::now() - w0).count() / static_cast<double>(warmup);
  std::uint64_t iters = calibrated(planned, latency_budget_s, per_rt, 5);
  if (Failure f = sync(&iters)) return f;
  samples_.clear();
  samples_.reserve(iters);  // before the clock starts: no allocation while timing
  for (std::uint64_t i = 0; i < iters; ++i) {
    const auto t0 = Clock::now();
    if (Failure f = round_trip()) return f;
    const auto t1 = Clock::now();
    if (Failure f = check(size, in.pkt.length)) return f;
    samples_.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / 2);
  }
  out.latency_samples = samples_.size();
  out.latency_min_us = samples_.empty() ? 0 : *std::min_element(samples_.begin(), samples_.end());
  out.latency_median_us = median_of(samples_);
  return {};
}

Failure Bench::stream(std::size_t size, std::uint64_t count, double* seconds) {
  if (Failure f = sync(&count)) return f;
  if (role_ == 1) return stream_recv(size, count);
  const auto t0 = Clock::now();
  Failure f =
      link_.uses_large(size) ? stream_large_send(size, count) : stream_small_send(size, count);
  if (f) return f;
  // The receiver's acknowledgement closes the clock: everything has landed.
  std::size_t got = 0;
  if (Failure g = link_.recv(link_.small(), ctrl_in_, phase_deadline(), &got)) return g;
  if (got != ctrl_size || ctrl_in_[0] != kind_ack) return {Status::malformed, "expected an ack"};
  *seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return {};
}

Failure Bench::stream_small_send(std::size_t size, std::size_t count) {
  const Deadline deadline = phase_deadline();
  auto bytes = std::span(send_buf_).first(size);
  std::size_t posted = 0, done = 0;
  for (std::uint32_t spins = 0; done < count; ++spins) {
    for (Op& op : ops_) {
      if (op.active) {
        const Status s = op.poll();
        if (s == Status::ok)
          ++done;
        else if (s != Status::in_progress)
          return {s, "send_poll"};
      }
      if (!op.active && posted < count) {
        op.prepare(bytes);
        const Status s = op.post_send(link_.small());
        if (s == Status::no_resource) continue;  // full: poll the others, retry
        if (is_failure(s)) return {s, "send_post"};
        ++posted;
        if (s == Status::ok) ++done;
      }
    }
    relax(spins);
    if ((spins & 63) == 63 && Clock::now() >= deadline) return {Status::timeout, "stream send"};
  }
  return {};
}

Failure Bench::stream_large_send(std::size_t size, std::size_t count) {
  const Deadline deadline = phase_deadline();
  for (std::size_t i = 0; i < count; ++i)
    if (Failure f = send_data(size, deadline)) return f;
  return {};
}

Failure Bench::stream_recv(std::size_t size, std::size_t count) {
  const Deadline deadline = phase_deadline();
  Op& in = ops_[0];
  for (std::size_t i = 0; i < count; ++i) {
    if (Failure f = post_data_recv(in, size, deadline)) return f;
    if (Failure f = link_.wait(in, deadline, "stream recv")) return f;
    if (Failure f = check(size, in.pkt.length)) return f;
  }
  ctrl_out_[0] = kind_ack;
  return link_.send(link_.small(), ctrl_out_, deadline);
}

Failure Bench::run_rate(RateResult& out) {
  out = RateResult{};
  out.size = 8;
  out.window = window;
  if (params_.verify) {
    fill(std::span(send_buf_).first(out.size), seed_of(out.size, role_));
    filled_size_ = out.size;
  }
  // A short untimed-for-the-report stream paces the real ones.
  constexpr std::size_t probe = 1000;
  double probe_s = 0;
  if (Failure f = stream(out.size, params_.iters ? params_.iters : probe, &probe_s)) return f;
  out.messages =
      calibrated(max_stream_messages, stream_budget_s, probe_s / static_cast<double>(probe), probe);
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
