// tests/launch: the PMI-1 back end of src/boot against a scripted, sometimes
// hostile, PMI server. The client runs in a forked child (its PMI_FD and
// PMI_RANK are that child's own environment, never the test's); the test
// process plays the server on the other end of a socket pair, and the child's
// exit code is the Status it ended with.
#include "boot/boot.hpp"
#include "boot/pmi_wire.hpp"

#include <gtest/gtest.h>

#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>

namespace pier::boot {
namespace {

/// What the child does once the bootstrap is open; returns its Status.
using ClientScript = std::function<Status(Bootstrap&)>;
/// The server's answer to one request, "" for none, "<close>" to hang up.
using ServerScript = std::function<std::string(const pmi::Command&)>;

constexpr const char* hang_up = "<close>";

std::string standard_answer(const pmi::Command& c) {
  if (c.name == "init") return "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n";
  if (c.name == "get_maxes")
    return "cmd=maxes rc=0 kvsname_max=256 keylen_max=64 vallen_max=1024\n";
  if (c.name == "get_my_kvsname") return "cmd=my_kvsname rc=0 kvsname=kvs\n";
  if (c.name == "put") return "cmd=put_result rc=0 msg=success\n";
  if (c.name == "barrier_in") return "cmd=barrier_out rc=0\n";
  if (c.name == "finalize") return "cmd=finalize_ack rc=0\n";
  return "cmd=get_result rc=-1 msg=not_found\n";
}

/// Runs `client` in a child against `server`; returns the child's Status
/// (or internal when it crashed or hung past 20 s).
Status run_pair(const ClientScript& client, const ServerScript& server) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return Status::system_error;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(sv[0]);
    ::setenv("PMI_FD", std::to_string(sv[1]).c_str(), 1);
    ::setenv("PMI_RANK", "0", 1);
    ::setenv("PMI_SIZE", "2", 1);
    ::setenv("PIER_BOOT_METHOD", "pmi", 1);
    ::unsetenv("PIER_RUN_SOCKET");
    Status s = Status::internal;
    {
      auto boot = Bootstrap::open();
      s = boot ? client(**boot) : boot.status();
    }  // the destructor's finalize runs against the server too
    ::_exit(static_cast<int>(s));
  }
  ::close(sv[1]);
  pmi::Reader reader;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  bool open = true, reaped = false;
  int status = 0;
  while (open && std::chrono::steady_clock::now() < deadline) {
    ::pollfd p{sv[0], POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) {
      if (::waitpid(pid, &status, WNOHANG) == pid) {
        reaped = true;
        break;
      }
      continue;
    }
    char buf[4096];
    const ::ssize_t n = ::read(sv[0], buf, sizeof buf);
    if (n <= 0) break;
    reader.append(std::string_view(buf, static_cast<std::size_t>(n)));
    for (;;) {
      auto m = reader.next();
      if (!m || !*m) break;
      auto c = pmi::parse_v1((*m)->text);
      if (!c) break;
      const std::string answer = server(*c);
      if (answer == hang_up) {
        open = false;
        break;
      }
      if (!answer.empty()) (void)!::write(sv[0], answer.data(), answer.size());
    }
  }
  ::close(sv[0]);
  for (int i = 0; !reaped; ++i) {
    if (::waitpid(pid, &status, WNOHANG) == pid) break;
    if (i == 200) {  // 20 s: the client hung
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return Status::internal;
    }
    ::usleep(100'000);
  }
  if (!WIFEXITED(status)) return Status::internal;
  return static_cast<Status>(WEXITSTATUS(status));
}

Status fence_and_get(Bootstrap& b, std::uint32_t rank, const char* key) {
  if (Status s = b.fence(Clock::now() + std::chrono::seconds(5)); s != Status::ok) return s;
  return b.get(rank, key).status();
}

TEST(PmiBackEndAgainstAScriptedServer, WellFormedExchange) {
  std::map<std::string, std::string> kvs;
  auto server = [&](const pmi::Command& c) -> std::string {
    if (c.name == "put") kvs[*c.find("key")] = *c.find("value");
    if (c.name == "get") {
      auto it = kvs.find(*c.find("key"));
      if (it != kvs.end()) return "cmd=get_result rc=0 value=" + it->second + "\n";
    }
    return standard_answer(c);
  };
  auto client = [](Bootstrap& b) {
    EXPECT_EQ(b.method(), "pmi");
    // 3000 bytes: several chunks of a 1024-byte vallen_max.
    std::string value(3000, 'v');
    if (Status s = b.put("a key with spaces", value); s != Status::ok) return s;
    if (Status s = b.commit(); s != Status::ok) return s;
    if (Status s = b.fence(Clock::now() + std::chrono::seconds(5)); s != Status::ok) return s;
    auto got = b.get(0, "a key with spaces");
    if (!got) return got.status();
    return got->size() == 3000 ? Status::ok : Status::malformed;
  };
  EXPECT_EQ(run_pair(client, server), Status::ok);
}

TEST(PmiBackEndAgainstAScriptedServer, ASecondSessionInOneProcessIsRefusedClearly) {
  // PMI-1 gives a process one connection: a second client on it (the ports
  // beside Portals) would read the first one's answers. It is refused, and
  // the first goes on working.
  auto client = [](Bootstrap& b) {
    auto second = Bootstrap::open("port");
    if (second) return Status::internal;
    if (second.status() != Status::unsupported) return second.status();
    if (Status s = b.put("k", std::string_view("v")); s != Status::ok) return s;
    if (Status s = b.commit(); s != Status::ok) return s;
    return b.fence(Clock::now() + std::chrono::seconds(5));
  };
  EXPECT_EQ(run_pair(client, standard_answer), Status::ok);
}

TEST(PmiBackEndAgainstAScriptedServer, NoSecondBootstrapAfterTheFirstFinalized) {
  // The first client's finalize closed PMI_FD and ended the rank at the
  // server: a later open says so instead of writing into whatever now holds
  // that descriptor number.
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(sv[0]);
    ::setenv("PMI_FD", std::to_string(sv[1]).c_str(), 1);
    ::setenv("PMI_RANK", "0", 1);
    ::setenv("PMI_SIZE", "1", 1);
    ::setenv("PIER_BOOT_METHOD", "pmi", 1);
    ::unsetenv("PIER_RUN_SOCKET");
    // The first client's init fails (the server end is closed): it closes
    // the descriptor all the same.
    auto first = Bootstrap::open("portals");
    const int reused = ::dup(2);  // may take PMI_FD's number now
    auto second = Bootstrap::open("port");
    ::_exit(!first && !second && second.status() == Status::unsupported && reused >= 0 ? 0 : 1);
  }
  ::close(sv[1]);
  ::close(sv[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(PmiBackEndAgainstAScriptedServer, GarbageAnswerToInitIsMalformed) {
  auto server = [](const pmi::Command&) -> std::string { return "cmd=\n"; };
  EXPECT_EQ(run_pair([](Bootstrap&) { return Status::ok; }, server), Status::malformed);
}

TEST(PmiBackEndAgainstAScriptedServer, PmiTwoOnlyServerIsAVersionMismatch) {
  auto server = [](const pmi::Command& c) -> std::string {
    if (c.name == "init") return "cmd=response_to_init pmi_version=2 pmi_subversion=0 rc=0\n";
    return standard_answer(c);
  };
  EXPECT_EQ(run_pair([](Bootstrap&) { return Status::ok; }, server), Status::version_mismatch);
}

TEST(PmiBackEndAgainstAScriptedServer, ServerHangingUpInTheBarrierBreaksTheFence) {
  auto server = [](const pmi::Command& c) -> std::string {
    return c.name == "barrier_in" ? hang_up : standard_answer(c);
  };
  auto client = [](Bootstrap& b) {
    const Status s = b.fence(Clock::now() + std::chrono::seconds(5));
    // After a failed fence every call answers broken.
    if (b.commit() != Status::broken) return Status::internal;
    return s;
  };
  EXPECT_EQ(run_pair(client, server), Status::broken);
}

TEST(PmiBackEndAgainstAScriptedServer, SilentBarrierTimesOutAtTheDeadline) {
  auto server = [](const pmi::Command& c) -> std::string {
    return c.name == "barrier_in" ? "" : standard_answer(c);
  };
  auto client = [](Bootstrap& b) { return b.fence(Clock::now() + std::chrono::milliseconds(300)); };
  EXPECT_EQ(run_pair(client, server), Status::timeout);
}

TEST(PmiBackEndAgainstAScriptedServer, HostileValuesAreMalformedNotFatal) {
  // "1/<checksum of {0xab}>/ab" is well formed; each of these is not.
  for (std::string value : {"99999999/0/ab", "1/0/zz", "1/0/abc", "nochunks", "0//", "2/0/ab",
                            "1/ab", "1/0/ab", "1/xyz/ab", "/0/ab"}) {
    auto server = [&](const pmi::Command& c) -> std::string {
      if (c.name == "get") {
        // Chunk 1 of "2/0/ab" is missing: the server says not found.
        if (*c.find("key") != "pier-1-k") return "cmd=get_result rc=-1 msg=not_found\n";
        return "cmd=get_result rc=0 value=" + value + "\n";
      }
      return standard_answer(c);
    };
    auto client = [](Bootstrap& b) { return fence_and_get(b, 1, "k"); };
    EXPECT_EQ(run_pair(client, server), Status::malformed) << value;
  }
}

TEST(PmiBackEndAgainstAScriptedServer, MissingKeyIsNotFound) {
  auto client = [](Bootstrap& b) { return fence_and_get(b, 1, "never.put"); };
  EXPECT_EQ(run_pair(client, standard_answer), Status::not_found);
}

TEST(PmiBackEndAgainstAScriptedServer, KeyPutAgainAfterAFenceReadsTheNewValue) {
  std::map<std::string, std::string> kvs;
  auto server = [&](const pmi::Command& c) -> std::string {
    if (c.name == "put") kvs[*c.find("key")] = *c.find("value");
    if (c.name == "get") {
      auto it = kvs.find(*c.find("key"));
      if (it != kvs.end()) return "cmd=get_result rc=0 value=" + it->second + "\n";
    }
    return standard_answer(c);
  };
  auto client = [](Bootstrap& b) {
    for (const char* value : {"first", "second"}) {
      if (Status s = b.put("k", value); s != Status::ok) return s;
      if (Status s = b.commit(); s != Status::ok) return s;
      if (Status s = b.fence(Clock::now() + std::chrono::seconds(5)); s != Status::ok) return s;
      auto got = b.get(0, "k");
      if (!got) return got.status();
      if (std::string(reinterpret_cast<const char*>(got->data()), got->size()) != value)
        return Status::malformed;
    }
    return Status::ok;
  };
  EXPECT_EQ(run_pair(client, server), Status::ok);
}

}  // namespace
}  // namespace pier::boot
