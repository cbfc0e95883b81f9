// tests/launch: many hosts on one machine. Each host is a network namespace
// with its own eth0, joined through veth links to a bridge in a "switch"
// namespace; pier-run starts the ranks and each rank `ip netns exec`s into
// its host. The ranks bootstrap through PMI (the PMI_FD socket pair crosses
// namespaces; pier-run's abstract Unix socket does not) and talk over tcp
// bound to eth0 (PIER_TCP_IFACE). The hosts' receive counters prove that the
// bytes crossed the links.
//
// Needs root and a kernel that allows network namespaces; skipped otherwise,
// with the reason. The namespaces are always removed, and ones left by a
// killed earlier run (their creator's pid is gone) are removed first.
#include "run_command.hpp"

#include <gtest/gtest.h>

#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sstream>

namespace pier::multiproc {
namespace {

constexpr const char* prefix = "pierl";  // + pid + "s" (switch) or "h<i>" (host i)

std::string find_tool(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::istringstream dirs(std::string(path ? path : "") + ":/usr/sbin:/sbin:/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const std::string candidate = dir + "/" + name;
    if (!dir.empty() && ::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return {};
}

Outcome run(const std::vector<std::string>& argv, int seconds = 20) {
  RunSpec spec;
  spec.argv = argv;
  spec.limit = std::chrono::seconds(seconds);
  return run_command(spec);
}

/// Namespaces "pierl<pid>..." whose creator is gone.
void remove_stale(const std::string& ip) {
  DIR* dir = ::opendir("/run/netns");
  if (!dir) return;
  std::vector<std::string> stale;
  while (const ::dirent* e = ::readdir(dir)) {
    const std::string name = e->d_name;
    if (!name.starts_with(prefix)) continue;
    const long pid = std::strtol(name.c_str() + std::strlen(prefix), nullptr, 10);
    if (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) stale.push_back(name);
  }
  ::closedir(dir);
  for (const auto& name : stale) (void)run({ip, "netns", "del", name});
}

/// N hosts and a switch; removes every namespace it made, whatever happens.
class Hosts {
 public:
  Hosts(std::string ip, int count) : ip_(std::move(ip)), count_(count) {}
  ~Hosts() {
    for (auto it = made_.rbegin(); it != made_.rend(); ++it) (void)run({ip_, "netns", "del", *it});
  }
  Hosts(const Hosts&) = delete;
  Hosts& operator=(const Hosts&) = delete;

  std::string host(int i) const { return base() + "h" + std::to_string(i); }
  std::string address(int i) const { return "10.79.0." + std::to_string(i + 1); }

  /// "" on success, else what failed and its output.
  std::string build() {
    const std::string sw = base() + "s";
    if (auto why = add_netns(sw); !why.empty()) return why;
    for (auto cmd :
         std::vector<std::vector<std::string>>{{"-n", sw, "link", "add", "br0", "type", "bridge"},
                                               {"-n", sw, "link", "set", "br0", "up"},
                                               {"-n", sw, "link", "set", "lo", "up"}})
      if (auto why = ip(cmd); !why.empty()) return why;
    for (int i = 0; i < count_; ++i) {
      const std::string h = host(i), port = "p" + std::to_string(i);
      if (auto why = add_netns(h); !why.empty()) return why;
      for (auto cmd : std::vector<std::vector<std::string>>{
               {"link", "add", "eth0", "netns", h, "type", "veth", "peer", "name", port, "netns",
                sw},
               {"-n", sw, "link", "set", port, "master", "br0"},
               {"-n", sw, "link", "set", port, "up"},
               {"-n", h, "addr", "add", address(i) + "/24", "dev", "eth0"},
               {"-n", h, "link", "set", "eth0", "up"},
               {"-n", h, "link", "set", "lo", "up"}})
        if (auto why = ip(cmd); !why.empty()) return why;
    }
    return {};
  }

  /// Bytes eth0 of host i has received, or -1.
  long long rx_bytes(int i) const {
    const Outcome o =
        run({ip_, "netns", "exec", host(i), "cat", "/sys/class/net/eth0/statistics/rx_bytes"});
    if (o.exit_code != 0) return -1;
    return std::strtoll(o.output.c_str(), nullptr, 10);
  }

 private:
  std::string base() const { return prefix + std::to_string(::getpid()); }
  std::string add_netns(const std::string& name) {
    if (auto why = ip({"netns", "add", name}); !why.empty()) return why;
    made_.push_back(name);
    return {};
  }
  std::string ip(std::vector<std::string> args) const {
    args.insert(args.begin(), ip_);
    const Outcome o = run(args);
    if (o.exit_code == 0 && !o.timed_out) return {};
    std::string cmd;
    for (const auto& a : args) cmd += a + " ";
    return cmd + "failed: " + o.output;
  }

  std::string ip_;
  int count_;
  std::vector<std::string> made_;
};

int count_text(const std::string& haystack, const std::string& text) {
  int n = 0;
  for (std::size_t at = haystack.find(text); at != std::string::npos;
       at = haystack.find(text, at + 1))
    ++n;
  return n;
}

int count(const Outcome& o, const std::string& text) {
  return count_text(o.output, text);
}

/// Skips (with the reason) where namespaces cannot be made; else declares the
/// hosts. A macro because GTEST_SKIP must return from the test body itself.
#define PIER_BUILD_HOSTS_OR_SKIP(net, ip, hosts)                                    \
  if (::geteuid() != 0)                                                             \
    GTEST_SKIP() << "network namespaces need root; running as uid " << ::geteuid(); \
  const std::string ip = find_tool("ip");                                           \
  if (ip.empty()) GTEST_SKIP() << "iproute2's ip not found";                        \
  remove_stale(ip);                                                                 \
  Hosts net(ip, hosts);                                                             \
  if (auto why = net.build(); !why.empty())                                         \
  GTEST_SKIP() << "this sandbox does not allow network namespaces with veth links: " << why

TEST(ManyHosts, TcpRingAcrossThreeNetworkNamespaces) {
  constexpr int hosts = 3;
  PIER_BUILD_HOSTS_OR_SKIP(net, ip, hosts);
  std::vector<long long> before;
  for (int i = 0; i < hosts; ++i) before.push_back(net.rx_bytes(i));

  RunSpec spec;
  // Rank r enters host r; "$0" is the ring program, kept out of the shell text.
  spec.argv = {PIER_RUN_PATH,
               "-n",
               std::to_string(hosts),
               "--timeout",
               "60",
               "/bin/sh",
               "-c",
               "exec \"$1\" netns exec \"$2$PMI_RANK\" env PIER_TCP_IFACE=eth0 \"$0\" tcp",
               TCP_RING_PATH,
               ip,
               net.host(0).substr(0, net.host(0).size() - 1)};
  spec.env = {"PIER_BOOT_METHOD=pmi"};
  spec.limit = std::chrono::seconds(90);
  const Outcome o = run_command(spec);
  ASSERT_FALSE(o.timed_out) << o.output;
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_EQ(count(o, "/3: ok, 3 rounds of 100000 bytes"), hosts) << o.output;
  // Every host received at least its three rounds through its own link.
  for (int i = 0; i < hosts; ++i) {
    const long long after = net.rx_bytes(i);
    ASSERT_GE(before[i], 0);
    EXPECT_GE(after - before[i], 3 * 100000)
        << "host " << i << " eth0 rx_bytes " << before[i] << " -> " << after;
  }
}

#ifdef PIER_PERF_PATH
TEST(ManyHosts, PierPerfOverTcpBetweenTwoNetworkNamespaces) {
  constexpr int hosts = 2;
  PIER_BUILD_HOSTS_OR_SKIP(net, ip, hosts);
  const std::string json = "/tmp/pier-launch-netns." + std::to_string(::getpid()) + ".json";
  RunSpec spec;
  spec.argv = {PIER_RUN_PATH,
               "-n",
               "2",
               "--timeout",
               "90",
               "/bin/sh",
               "-c",
               "exec \"$1\" netns exec \"$2$PMI_RANK\" env PIER_TCP_IFACE=eth0 \"$0\" --driver tcp "
               "--sizes 1,64K,1M --iters 8 --reps 2 --verify --timeout 30 --json \"$3\"",
               PIER_PERF_PATH,
               ip,
               net.host(0).substr(0, net.host(0).size() - 1),
               json};
  spec.env = {"PIER_BOOT_METHOD=pmi"};
  spec.limit = std::chrono::seconds(120);
  const Outcome o = run_command(spec);
  ASSERT_FALSE(o.timed_out) << o.output;
  EXPECT_EQ(o.exit_code, 0) << o.output;
  std::FILE* f = std::fopen(json.c_str(), "r");
  ASSERT_NE(f, nullptr) << o.output;
  std::string text;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) text.append(buf, n);
  std::fclose(f);
  std::remove(json.c_str());
  // A light check without a JSON library: the report says it ran over pmi,
  // and every size was verified.
  EXPECT_NE(text.find("\"bootstrap\": \"pmi\""), std::string::npos) << text;
  EXPECT_NE(text.find("\"ran\": true"), std::string::npos) << text;
  EXPECT_EQ(count_text(text, "\"verified\": true"), 3) << text;
  EXPECT_GE(net.rx_bytes(1), 8 * (1 << 20)) << "host 1 did not receive the 1 MiB messages";
}
#endif

}  // namespace
}  // namespace pier::multiproc
