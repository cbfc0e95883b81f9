// tests/launch: pier-info --json parses, names every built-in driver (the
// registry linked here is the reference), reports why a driver cannot run,
// and names the bootstrap a launched process would use.
#include "run_command.hpp"

#include <pier/driver.hpp>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <set>

namespace pier::multiproc {
namespace {

using nlohmann::json;

/// pier-info's stdout alone (logs go to stderr, which run_command mixes in,
/// so the report is asked to go through a file).
json info_json(std::vector<std::string> args, std::vector<std::string> env = {},
               bool under_pier_run = false) {
  const std::string path = "/tmp/pier-info-test." + std::to_string(::getpid()) + ".json";
  std::string command = std::string("\"") + PIER_INFO_PATH + "\" --json";
  for (const auto& a : args) command += " " + a;
  command += " > " + path;
  RunSpec spec;
  spec.argv = {"/bin/sh", "-c", command};
  if (under_pier_run)
    spec.argv.insert(spec.argv.begin(), {PIER_RUN_PATH, "-n", "1", "--timeout", "60"});
  spec.env = std::move(env);
  spec.limit = std::chrono::seconds(90);
  const Outcome o = run_command(spec);
  EXPECT_FALSE(o.timed_out) << o.output;
  EXPECT_EQ(o.exit_code, 0) << o.output;
  std::FILE* f = std::fopen(path.c_str(), "r");
  if (!f) return json();
  std::string text;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) text.append(buf, n);
  std::fclose(f);
  std::remove(path.c_str());
  return json::parse(text);  // throws, failing the test, on malformed JSON
}

const json* find_driver(const json& root, std::string_view name) {
  for (const json& d : root.at("drivers").at("drivers"))
    if (d.at("name") == name) return &d;
  return nullptr;
}

TEST(PierInfo, JsonNamesEveryBuiltInDriverWithCapsAndProfile) {
  const json root = info_json({});
  EXPECT_TRUE(root.at("drivers").at("probed_with_init").get<bool>());
  std::set<std::string> listed;
  for (const json& d : root.at("drivers").at("drivers")) listed.insert(d.at("name"));
  std::set<std::string> built;
  for (const auto& e : driver::builtin_drivers()) built.insert(std::string(e.name));
  EXPECT_EQ(listed, built);
  ASSERT_TRUE(built.count("self"));
  const json& self = *find_driver(root, "self");
  EXPECT_TRUE(self.at("usable").get<bool>()) << self.dump();
  EXPECT_EQ(self.at("reason"), "");
  EXPECT_GT(self.at("url_bytes").get<std::size_t>(), 0u);
  EXPECT_GE(self.at("caps").at("max_iov").get<std::uint32_t>(), 1u);
  EXPECT_GT(self.at("profile").at("bandwidth_mbps").get<std::uint32_t>(), 0u);
  for (const json& d : root.at("drivers").at("drivers")) {
    if (!d.at("usable").get<bool>()) {
      EXPECT_NE(d.at("reason"), "") << d.dump();
    }
    // What a usable driver runs without here (driver.hpp degraded_reason()).
    EXPECT_TRUE(d.at("degraded").is_string()) << d.dump();
  }
}

TEST(PierInfo, EachDriverShowsItsEagerLimit) {
  const json root = info_json({});
  const json* self = find_driver(root, "self");
  ASSERT_NE(self, nullptr);
  EXPECT_EQ(self->at("eager_limit").get<std::size_t>(), std::size_t{32} << 10);
  const json* tcp = find_driver(root, "tcp");
  if (!tcp) GTEST_SKIP() << "tcp driver not built";
  // tcp's profile (microseconds of latency) asks for a larger one.
  EXPECT_GT(tcp->at("eager_limit").get<std::size_t>(), self->at("eager_limit").get<std::size_t>());
  const json set = info_json({}, {"PIER_CORE_EAGER_LIMIT=8192"});
  EXPECT_EQ(find_driver(set, "tcp")->at("eager_limit").get<std::size_t>(), 8192u);
}

TEST(PierInfo, ConfigNamesEveryKeyWithItsValueAndSource) {
  const json root = info_json({"--config"}, {"PIER_CORE_CREDITS=7", "PIER_CORE_CREDIT=8"});
  const json& config = root.at("config");
  const json* credits = nullptr;
  std::size_t keys = 0;
  for (const json& e : config.at("keys")) {
    ++keys;
    EXPECT_TRUE(e.at("source").is_string()) << e.dump();
    if (e.at("name") == "PIER_CORE_CREDITS") credits = &e;
  }
  EXPECT_GT(keys, 10u);
  ASSERT_NE(credits, nullptr) << config.dump();
  EXPECT_EQ(credits->at("value"), "7");
  EXPECT_EQ(credits->at("source"), "environment");
  // The misspelled variable is named with the closest real key.
  const std::string unknown = root.at("environment").at("unknown").dump();
  EXPECT_NE(unknown.find("PIER_CORE_CREDIT is unknown; did you mean PIER_CORE_CREDITS?"),
            std::string::npos)
      << unknown;
}

TEST(PierInfo, JsonHasThresholdsAndBootstrap) {
  const json root = info_json({}, {"PIER_CORE_SPLIT_MIN=1m", "PIER_CORE_CREDITS=7"});
  const json& t = root.at("thresholds");
  EXPECT_EQ(t.at("split_min").get<std::size_t>(), 1u << 20);
  EXPECT_EQ(t.at("credits").get<std::uint32_t>(), 7u);
  EXPECT_TRUE(t.at("eager_limit_auto").get<bool>());
  EXPECT_EQ(root.at("bootstrap").at("would_use"), "singleton");
  EXPECT_EQ(root.at("bootstrap").at("pmix_built").get<bool>(), LAUNCH_HAVE_PMIX);
}

TEST(PierInfo, OfiProvidersNameTheOneTaken) {
  const json root = info_json({});
  const json& o = root.at("ofi_providers");
  const bool built = find_driver(root, "ofi") != nullptr;
  EXPECT_EQ(o.at("built").get<bool>(), built);
  if (!built) GTEST_SKIP() << "ofi driver not built";
  // libfabric here has at least its tcp provider; when any is usable, the
  // one "ofi" takes is marked, once.
  const json& list = o.at("providers");
  ASSERT_FALSE(list.empty()) << o.dump();
  int taken = 0;
  bool usable = false;
  for (const json& p : list) {
    EXPECT_FALSE(p.at("name").get<std::string>().empty());
    EXPECT_FALSE(p.at("reason").get<std::string>().empty());
    taken += p.at("taken").get<bool>() ? 1 : 0;
    usable = usable || (p.at("rdm").get<bool>() && p.at("tagged").get<bool>());
  }
  EXPECT_EQ(taken, usable ? 1 : 0) << o.dump();
}

TEST(PierInfo, UnusableDriverComesWithItsReason) {
  // An interface that does not exist: tcp cannot come up.
  const json root = info_json({}, {"PIER_TCP_IFACE=pier-nosuch0"});
  const json* tcp = find_driver(root, "tcp");
  if (!tcp) GTEST_SKIP() << "tcp driver not built";
  EXPECT_FALSE(tcp->at("usable").get<bool>()) << tcp->dump();
  EXPECT_NE(tcp->at("reason").get<std::string>().find("init() failed"), std::string::npos)
      << tcp->dump();
  EXPECT_TRUE(find_driver(root, "self")->at("usable").get<bool>());
}

TEST(PierInfo, NoInitDescribesWithoutBringingUp) {
  const json root = info_json({"--no-init"});
  EXPECT_FALSE(root.at("drivers").at("probed_with_init").get<bool>());
  const json& self = *find_driver(root, "self");
  EXPECT_TRUE(self.contains("caps"));
  EXPECT_FALSE(self.contains("url_bytes"));
}

TEST(PierInfo, UnderPierRunNamesPierRunAsTheBootstrap) {
  const json root = info_json({}, {}, /*under_pier_run=*/true);
  EXPECT_EQ(root.at("bootstrap").at("would_use"), "pier-run");
}

}  // namespace
}  // namespace pier::multiproc
