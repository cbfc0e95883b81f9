// pier-perf: table, JSON and CSV output.
#include "report.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <array>

namespace pier::perf {
namespace {

std::string human_size(std::size_t n) {
  if (n >= (1u << 20) && n % (1u << 20) == 0) return fmt::format("{}M", n >> 20);
  if (n >= 1024 && n % 1024 == 0) return fmt::format("{}K", n >> 10);
  return fmt::format("{}", n);
}

std::string host_name() {
  std::array<char, 256> buf{};
  if (::gethostname(buf.data(), buf.size() - 1) != 0) return "unknown";
  return buf.data();
}

std::string track_of(const RunReport& report, const SizeResult& s) {
  if (report.mode != "driver") return "api";  // the API picks its own protocol
  return s.large_track ? "large" : "small";
}

}  // namespace

void print_table(const RunReport& report) {
  const std::string where =
      report.thread_cpus.size() == 2
          ? fmt::format("threads on cpus {} and {}", report.thread_cpus[0], report.thread_cpus[1])
          : report.placement;
  fmt::print("pier-perf: mode {}, {} ({} ranks, bootstrap {}){}\n", report.mode, where,
             report.ranks, report.bootstrap, report.params.verify ? ", data verified" : "");
  for (const auto& d : report.drivers) {
    if (!d.ran) {
      fmt::print("\n{}: skipped: {}\n", d.driver, d.skipped);
      continue;
    }
    if (d.has_caps)
      fmt::print("\n{}: max_packet {}, needs_rdv {}, rdv_data {}\n", d.driver,
                 d.caps.max_packet ? human_size(d.caps.max_packet) : "unlimited", d.caps.needs_rdv,
                 d.caps.rdv_data);
    else
      fmt::print("\n{} through {}:\n", d.driver, report.mode);
    fmt::print("{:>8} {:>5} {:>12} {:>12} {:>12} {:>12} {:>12}\n", "size", "track", "lat med us",
               "lat min us", "bw med MB/s", "bw min MB/s", "bw max MB/s");
    for (const auto& s : d.sizes) {
      fmt::print("{:>8} {:>5} {:>12.2f} {:>12.2f} {:>12.1f} {:>12.1f} {:>12.1f}\n",
                 human_size(s.size), track_of(report, s), s.latency_median_us, s.latency_min_us,
                 s.bandwidth_median_mbps, s.bandwidth_min_mbps, s.bandwidth_max_mbps);
    }
    if (d.has_rate)
      fmt::print("message rate ({} B, window {}): {:.3f} M msg/s median, {:.3f} max\n", d.rate.size,
                 d.rate.window, d.rate.median_per_s / 1e6, d.rate.max_per_s / 1e6);
    if (!d.degraded.empty()) fmt::print("{}: degraded: {}\n", d.driver, d.degraded);
    if (!d.error.empty()) fmt::print("{}: FAILED: {}\n", d.driver, d.error);
  }
  std::fflush(stdout);
}

std::string to_json(const RunReport& report) {
  using nlohmann::json;
  json root;
  root["schema"] = "pier-perf/1";
  root["pier_version"] = PIER_PERF_VERSION;
  root["host"] = host_name();
  root["mode"] = report.mode;
  root["placement"] = report.placement;
  if (!report.thread_cpus.empty()) root["thread_cpus"] = report.thread_cpus;
  root["ranks"] = report.ranks;
  root["bootstrap"] = report.bootstrap;
  root["verify"] = report.params.verify;
  root["repetitions"] = report.params.repetitions;
  root["drivers"] = json::array();
  for (const auto& d : report.drivers) {
    json jd;
    jd["driver"] = d.driver;
    jd["ran"] = d.ran;
    if (!d.skipped.empty()) jd["skipped"] = d.skipped;
    if (!d.error.empty()) jd["error"] = d.error;
    if (!d.degraded.empty()) jd["degraded"] = d.degraded;
    if (d.ran && d.has_caps) {
      jd["caps"] = {{"max_packet", d.caps.max_packet},
                    {"needs_rdv", d.caps.needs_rdv},
                    {"rdv_data", d.caps.rdv_data},
                    {"max_iov", d.caps.max_iov}};
      jd["profile"] = {{"latency_ns", d.profile.latency_ns},
                       {"bandwidth_mbps", d.profile.bandwidth_mbps}};
    }
    jd["sizes"] = json::array();
    for (const auto& s : d.sizes) {
      jd["sizes"].push_back({{"size", s.size},
                             {"track", track_of(report, s)},
                             {"latency_us",
                              {{"median", s.latency_median_us},
                               {"min", s.latency_min_us},
                               {"samples", s.latency_samples}}},
                             {"bandwidth_mbps",
                              {{"median", s.bandwidth_median_mbps},
                               {"min", s.bandwidth_min_mbps},
                               {"max", s.bandwidth_max_mbps},
                               {"messages", s.bandwidth_messages}}},
                             {"verified", s.verified}});
    }
    if (d.has_rate) {
      jd["message_rate"] = {{"size", d.rate.size},
                            {"window", d.rate.window},
                            {"messages", d.rate.messages},
                            {"median_per_s", d.rate.median_per_s},
                            {"max_per_s", d.rate.max_per_s}};
    }
    root["drivers"].push_back(std::move(jd));
  }
  return root.dump(2) + "\n";
}

std::string to_csv(const RunReport& report) {
  std::string out =
      "driver,size,track,latency_median_us,latency_min_us,bandwidth_median_mbps,"
      "bandwidth_min_mbps,bandwidth_max_mbps,verified,api\n";
  for (const auto& d : report.drivers) {
    for (const auto& s : d.sizes) {
      out += fmt::format("{},{},{},{:.4f},{:.4f},{:.3f},{:.3f},{:.3f},{},{}\n", d.driver, s.size,
                         track_of(report, s), s.latency_median_us, s.latency_min_us,
                         s.bandwidth_median_mbps, s.bandwidth_min_mbps, s.bandwidth_max_mbps,
                         s.verified ? 1 : 0, report.mode);
    }
  }
  return out;
}

}  // namespace pier::perf
