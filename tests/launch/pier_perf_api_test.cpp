// tests/launch: pier-perf through the APIs above the driver (--api portals,
// --api port) between two processes, its JSON checked against the schema of
// docs/launching.md; and the progress bar, drawn only on a terminal.
// Tiny counts: this checks the plumbing and the data, not speed.
#include "run_command.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <fstream>

namespace pier::multiproc {
namespace {

using nlohmann::json;

std::string temp_path(const std::string& name) {
  return "/tmp/pier-perf-api-test." + std::to_string(::getpid()) + "." + name;
}

/// The schema for an API mode: every size ran, was verified, and carries
/// ordered statistics; the track is "api" and there are no driver caps.
void expect_api_report(const json& root, const std::string& api,
                       const std::vector<std::string>& drivers,
                       const std::vector<std::size_t>& sizes, bool verified = true) {
  EXPECT_EQ(root.at("schema"), "pier-perf/1");
  EXPECT_EQ(root.at("mode"), api);
  EXPECT_EQ(root.at("placement"), "processes");
  EXPECT_EQ(root.at("ranks"), 2);
  EXPECT_EQ(root.at("verify").get<bool>(), verified);
  EXPECT_TRUE(root.at("pier_version").is_string());
  EXPECT_TRUE(root.at("bootstrap").is_string());
  ASSERT_EQ(root.at("drivers").size(), drivers.size());
  for (std::size_t k = 0; k < drivers.size(); ++k) {
    const json& d = root.at("drivers")[k];
    EXPECT_EQ(d.at("driver"), drivers[k]);
    ASSERT_TRUE(d.at("ran").get<bool>()) << d.dump();
    EXPECT_FALSE(d.contains("error")) << d.dump();
    EXPECT_FALSE(d.contains("caps")) << "caps are the driver's, reported in driver mode only";
    ASSERT_EQ(d.at("sizes").size(), sizes.size()) << d.dump();
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      const json& s = d.at("sizes")[i];
      EXPECT_EQ(s.at("size").get<std::size_t>(), sizes[i]);
      EXPECT_EQ(s.at("track"), "api");
      EXPECT_EQ(s.at("verified").get<bool>(), verified);
      const json& lat = s.at("latency_us");
      EXPECT_GT(lat.at("samples").get<std::size_t>(), 0u);
      EXPECT_GT(lat.at("min").get<double>(), 0.0);
      EXPECT_LE(lat.at("min").get<double>(), lat.at("median").get<double>());
      const json& bw = s.at("bandwidth_mbps");
      EXPECT_GT(bw.at("messages").get<std::size_t>(), 0u);
      EXPECT_GT(bw.at("median").get<double>(), 0.0);
      EXPECT_LE(bw.at("min").get<double>(), bw.at("median").get<double>());
      EXPECT_LE(bw.at("median").get<double>(), bw.at("max").get<double>());
    }
    const json& rate = d.at("message_rate");
    EXPECT_EQ(rate.at("size"), 8);
    EXPECT_GT(rate.at("median_per_s").get<double>(), 0.0);
    EXPECT_LE(rate.at("median_per_s").get<double>(), rate.at("max_per_s").get<double>());
  }
}

json read_json(const std::string& path) {
  std::ifstream f(path);
  return json::parse(f);  // throws (and fails the test) on malformed JSON
}

Outcome run_perf(const std::vector<std::string>& perf_args, std::vector<std::string> env = {}) {
  RunSpec spec;
  spec.argv = {PIER_RUN_PATH, "-n", "2", "--timeout", "60", PIER_PERF_PATH};
  spec.argv.insert(spec.argv.end(), perf_args.begin(), perf_args.end());
  spec.env = std::move(env);
  spec.limit = std::chrono::seconds(90);
  return run_command(spec);
}

// 64K and 1M leave the eager range of every driver: the core's rendezvous
// runs under both APIs; the port layer uses size classes 4, 17 and 21.
//
// Portals runs with the LIB in the caller's thread and without --verify
// here; the verified case runs with the progress thread below. It once
// failed about one run in three, through two races of pier-perf's own (the
// Portals CT counts only after the last byte landed): the responder
// cleared the ping's buffer after sending its pong, when the next ping could
// already be landing there; and a first put could reach the peer before it
// appended its MEs and be dropped (docs/launching.md, "Known problems").
TEST(PierPerfApi, PortalsPutsOverShmWriteValidJsonAndCsv) {
  const std::string out = temp_path("portals.json"), csv = temp_path("portals.csv");
  const Outcome o =
      run_perf({"--api", "portals", "--driver", "shm", "--sizes", "1,64K,1M", "--iters", "8",
                "--reps", "2", "--timeout", "20", "--json", out, "--csv", csv},
               {"PIER_CAPI_PROGRESS_THREAD=0"});
  ASSERT_FALSE(o.timed_out) << o.output;
  ASSERT_EQ(o.exit_code, 0) << o.output;
  expect_api_report(read_json(out), "portals", {"shm"}, {1, 65536, 1 << 20}, false);
  std::ifstream c(csv);
  std::string header, line;
  std::getline(c, header);
  EXPECT_EQ(header.rfind("driver,size,track,", 0), 0u) << header;
  int rows = 0;
  while (std::getline(c, line)) rows += line.rfind("shm,", 0) == 0 && line.ends_with(",portals");
  EXPECT_EQ(rows, 3);
  std::remove(out.c_str());
  std::remove(csv.c_str());
}

TEST(PierPerfApi, PortalsPutsOverTcpWriteValidJson) {
  const std::string out = temp_path("portals-tcp.json");
  const Outcome o = run_perf({"--api", "portals", "--driver", "tcp", "--sizes", "8,128K", "--iters",
                              "8", "--reps", "1", "--timeout", "20", "--json", out},
                             {"PIER_CAPI_PROGRESS_THREAD=0"});
  ASSERT_FALSE(o.timed_out) << o.output;
  ASSERT_EQ(o.exit_code, 0) << o.output;
  expect_api_report(read_json(out), "portals", {"tcp"}, {8, 131072}, false);
  std::remove(out.c_str());
}

TEST(PierPerfApi, PortalsVerifiedDataWithTheProgressThread) {
  for (int run = 0; run < 5; ++run) {
    const std::string out = temp_path("portals-verify.json");
    const Outcome o =
        run_perf({"--api", "portals", "--driver", "shm", "--sizes", "1,64K,1M", "--iters", "8",
                  "--reps", "2", "--verify", "--timeout", "20", "--json", out});
    ASSERT_FALSE(o.timed_out) << o.output;
    ASSERT_EQ(o.exit_code, 0) << "run " << run << ": " << o.output;
    expect_api_report(read_json(out), "portals", {"shm"}, {1, 65536, 1 << 20});
    std::remove(out.c_str());
  }
}

TEST(PierPerfApi, PortsOverShmAndTcpWriteValidJson) {
  const std::string out = temp_path("port.json");
  const Outcome o =
      run_perf({"--api", "port", "--driver", "shm,tcp", "--sizes", "1,64K,1M", "--iters", "8",
                "--reps", "2", "--verify", "--timeout", "20", "--json", out});
  ASSERT_FALSE(o.timed_out) << o.output;
  ASSERT_EQ(o.exit_code, 0) << o.output;
  expect_api_report(read_json(out), "port", {"shm", "tcp"}, {1, 65536, 1 << 20});
  std::remove(out.c_str());
}

TEST(PierPerfApi, UnknownDriverUnderPortsIsSkippedWithAReason) {
  const std::string out = temp_path("port-none.json");
  const Outcome o = run_perf({"--api", "port", "--driver", "nosuchdriver,shm", "--sizes", "8",
                              "--iters", "4", "--reps", "1", "--timeout", "20", "--json", out});
  ASSERT_FALSE(o.timed_out) << o.output;
  ASSERT_EQ(o.exit_code, 0) << o.output;
  const json root = read_json(out);
  ASSERT_EQ(root.at("drivers").size(), 2u);
  const json& none = root.at("drivers")[0];
  EXPECT_FALSE(none.at("ran").get<bool>());
  EXPECT_NE(none.at("skipped").get<std::string>().find("nosuchdriver"), std::string::npos)
      << none.dump();
  EXPECT_TRUE(root.at("drivers")[1].at("ran").get<bool>()) << root.dump();
  std::remove(out.c_str());
}

TEST(PierPerfApi, ApiModesAloneAskForTwoRanks) {
  RunSpec spec;
  spec.argv = {PIER_PERF_PATH, "--api", "port", "--sizes", "8"};
  spec.limit = std::chrono::seconds(30);
  const Outcome o = run_command(spec);
  ASSERT_FALSE(o.timed_out) << o.output;
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("runs on 2 ranks (pier-run -n 2)"), std::string::npos) << o.output;
}

// The bar goes to stderr only when it is a terminal: under script(1) (a
// pty) it is drawn, through a pipe it is not.
TEST(PierPerfApi, ProgressBarOnlyOnATerminal) {
  if (SCRIPT_PATH[0] == '\0') GTEST_SKIP() << "script(1) not found (util-linux)";
  const std::string perf = std::string(PIER_PERF_PATH) +
                           " --driver self --sizes 8,64 --iters 4 --reps 1 --progress-after 0";
  RunSpec tty;
  tty.argv = {SCRIPT_PATH, "-qec", perf, "/dev/null"};
  tty.limit = std::chrono::seconds(60);
  const Outcome on = run_command(tty);
  ASSERT_FALSE(on.timed_out) << on.output;
  ASSERT_EQ(on.exit_code, 0) << on.output;
  EXPECT_NE(on.output.find("\r\033[K["), std::string::npos) << on.output;
  RunSpec pipe;
  pipe.argv = {"/bin/sh", "-c", perf};
  pipe.limit = std::chrono::seconds(60);
  const Outcome off = run_command(pipe);
  ASSERT_EQ(off.exit_code, 0) << off.output;
  EXPECT_EQ(off.output.find("\033[K"), std::string::npos) << off.output;
}

}  // namespace
}  // namespace pier::multiproc
