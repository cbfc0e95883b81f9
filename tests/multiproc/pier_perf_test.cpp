// tests/multiproc: pier-perf end to end, its JSON validated with nlohmann.
// Tiny sizes and iteration counts: this checks the plumbing (bootstrap, both
// tracks, the rendezvous ready message, verification, output), not speed.
#include "run_command.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <fstream>

namespace pier::multiproc {
namespace {

using nlohmann::json;

std::string temp_path(const std::string& name) {
  return "/tmp/pier-perf-test." + std::to_string(::getpid()) + "." + name;
}

/// Checks the documented schema (docs/launching.md) and returns the driver's
/// entry; every size must have run and been verified.
void expect_valid_report(const json& root, const std::string& driver,
                         const std::vector<std::size_t>& sizes, const std::string& placement) {
  EXPECT_EQ(root.at("schema"), "pier-perf/1");
  EXPECT_EQ(root.at("mode"), "driver");
  EXPECT_EQ(root.at("placement"), placement);
  EXPECT_EQ(root.at("ranks"), 2);
  EXPECT_TRUE(root.at("verify").get<bool>());
  ASSERT_EQ(root.at("drivers").size(), 1u);
  const json& d = root.at("drivers")[0];
  EXPECT_EQ(d.at("driver"), driver);
  ASSERT_TRUE(d.at("ran").get<bool>()) << d.dump();
  EXPECT_FALSE(d.contains("error")) << d.dump();
  const auto max_packet = d.at("caps").at("max_packet").get<std::size_t>();
  ASSERT_EQ(d.at("sizes").size(), sizes.size());
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    const json& s = d.at("sizes")[i];
    EXPECT_EQ(s.at("size").get<std::size_t>(), sizes[i]);
    const bool large = max_packet != 0 && sizes[i] > max_packet;
    EXPECT_EQ(s.at("track"), large ? "large" : "small");
    EXPECT_TRUE(s.at("verified").get<bool>());
    const json& lat = s.at("latency_us");
    EXPECT_GT(lat.at("samples").get<std::size_t>(), 0u);
    EXPECT_GT(lat.at("min").get<double>(), 0.0);
    EXPECT_LE(lat.at("min").get<double>(), lat.at("median").get<double>());
    const json& bw = s.at("bandwidth_mbps");
    EXPECT_GT(bw.at("median").get<double>(), 0.0);
    EXPECT_LE(bw.at("min").get<double>(), bw.at("median").get<double>());
    EXPECT_LE(bw.at("median").get<double>(), bw.at("max").get<double>());
  }
  EXPECT_GT(d.at("message_rate").at("median_per_s").get<double>(), 0.0);
}

json read_json(const std::string& path) {
  std::ifstream f(path);
  return json::parse(f);  // throws (and fails the test) on malformed JSON
}

TEST(PierPerf, TwoProcessesOverShmWriteValidJson) {
  const std::string out = temp_path("shm.json");
  const std::string csv = temp_path("shm.csv");
  RunSpec spec;
  // 64K exceeds shm's small packets: the large track and its ready message run too.
  spec.argv = {PIER_RUN_PATH, "-n",    "2",        "--timeout", "60",      PIER_PERF_PATH,
               "--driver",    "shm",   "--sizes",  "1,4K,64K",  "--iters", "8",
               "--reps",      "2",     "--verify", "--timeout", "20",      "--json",
               out,           "--csv", csv};
  spec.limit = std::chrono::seconds(90);
  const Outcome o = run_command(spec);
  ASSERT_FALSE(o.timed_out) << o.output;
  ASSERT_EQ(o.exit_code, 0) << o.output;
  expect_valid_report(read_json(out), "shm", {1, 4096, 65536}, "processes");
  std::ifstream c(csv);
  std::string header, line;
  std::getline(c, header);
  EXPECT_EQ(header.rfind("driver,size,track,", 0), 0u) << header;
  int rows = 0;
  while (std::getline(c, line)) rows += line.rfind("shm,", 0) == 0;
  EXPECT_EQ(rows, 3);
  std::remove(out.c_str());
  std::remove(csv.c_str());
}

TEST(PierPerf, AloneItRunsSelfInTwoThreads) {
  const std::string out = temp_path("self.json");
  RunSpec spec;
  spec.argv = {PIER_PERF_PATH, "--driver", "self",     "--sizes",   "8,128K", "--iters", "8",
               "--reps",       "1",        "--verify", "--timeout", "20",     "--json",  out};
  spec.limit = std::chrono::seconds(60);
  const Outcome o = run_command(spec);
  ASSERT_FALSE(o.timed_out) << o.output;
  ASSERT_EQ(o.exit_code, 0) << o.output;
  expect_valid_report(read_json(out), "self", {8, 131072}, "threads");
  std::remove(out.c_str());
}

TEST(PierPerf, UnknownDriverIsSkippedWithAReason) {
  const std::string out = temp_path("none.json");
  RunSpec spec;
  spec.argv = {PIER_PERF_PATH, "--driver", "nosuchdriver", "--sizes", "8", "--json", out};
  spec.limit = std::chrono::seconds(30);
  const Outcome o = run_command(spec);
  ASSERT_FALSE(o.timed_out) << o.output;
  EXPECT_EQ(o.exit_code, 0) << o.output;
  const json root = read_json(out);
  ASSERT_EQ(root.at("drivers").size(), 1u);
  EXPECT_FALSE(root.at("drivers")[0].at("ran").get<bool>());
  EXPECT_NE(root.at("drivers")[0].at("skipped").get<std::string>().find("no such driver"),
            std::string::npos);
  std::remove(out.c_str());
}

}  // namespace
}  // namespace pier::multiproc
