// Two processes (fork) over shm and tcp: the addresses cross a pipe, then
// eager and rendezvous messages both ways, checked for data, order and
// exactly-once finalize. Every wait has a deadline; a stuck child is killed.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/log.hpp"
#include "cluster.hpp"

namespace pier::core::test {
namespace {

bool write_all(int fd, const void* p, std::size_t n) {
  auto* b = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t w = ::write(fd, b, n);
    if (w <= 0) return false;
    b += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}
bool read_all(int fd, void* p, std::size_t n) {
  auto* b = static_cast<char*>(p);
  while (n > 0) {
    ssize_t r = ::read(fd, b, n);
    if (r <= 0) return false;
    b += r;
    n -= static_cast<std::size_t>(r);
  }
  return true;
}

/// The work of one rank; returns 0 on success, a code naming the failure.
int rank_main(Rank rank, int to_peer, int from_peer) {
  auto made = Core::create(rank, 2);
  if (!made) return 10;
  Core& core = **made;
  const auto& mine = core.address();
  std::uint32_t len = static_cast<std::uint32_t>(mine.size());
  if (!write_all(to_peer, &len, 4) || !write_all(to_peer, mine.data(), len)) return 11;
  std::uint32_t peer_len = 0;
  if (!read_all(from_peer, &peer_len, 4) || peer_len > (1u << 20)) return 12;
  std::vector<std::byte> peer(peer_len);
  if (!read_all(from_peer, peer.data(), peer_len)) return 13;
  std::vector<std::vector<std::byte>> all(2);
  all[rank] = mine;
  all[1 - rank] = peer;
  if (core.connect(all, base::Deadline::after_ms(20000)) != Status::ok) return 14;
  Recorder rec(core);
  if (core.attach(wire::Upper::port, &rec, header_size) != Status::ok) return 15;

  const std::vector<std::size_t> sizes{8, 1000, 40000, 1 << 20, 0, 16 << 20, 3, 100000};
  std::vector<std::vector<std::byte>> data;
  std::deque<Region> regions;
  for (std::size_t i = 0; i < sizes.size(); ++i)
    data.push_back(pattern(sizes[i], static_cast<unsigned>(i + rank * 100)));
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    auto r = core.validate(data[i].data(), data[i].size());
    if (!r) return 16;
    regions.push_back(*r);
    std::array<std::byte, header_size> h{};
    h[0] = static_cast<std::byte>(i);
    SendArgs a;
    a.cookie = reinterpret_cast<void*>(0x100 + i);
    a.peer = 1 - rank;
    a.priority = static_cast<std::uint8_t>(i % 2);
    a.upper = wire::Upper::port;
    a.header = h;
    a.region = &regions.back();
    a.length = sizes[i];
    if (core.send(a) != Status::ok) return 17;
  }
  Status w = core.wait(
      [&] { return rec.finalized.size() == 2 * sizes.size() && rec.parsed.size() == sizes.size(); },
      base::Deadline::after_ms(30000));
  if (w != Status::ok) return 18;
  for (auto& [ck, st] : rec.finalized)
    if (st != Status::ok) return 19;
  for (auto& [ck, n] : rec.finalize_count)
    if (n != 1) return 20;
  int last[2] = {-1, -1};
  for (std::size_t i = 0; i < rec.parsed.size(); ++i) {
    const int id = static_cast<int>(rec.parsed[i].header[0]);
    if (id < 0 || id >= static_cast<int>(sizes.size())) return 21;
    if (id <= last[id % 2]) return 22;  // order within a priority
    last[id % 2] = id;
    auto expect = pattern(sizes[id], static_cast<unsigned>(id + (1 - rank) * 100));
    rec.buffers[i].resize(sizes[id]);
    if (rec.buffers[i] != expect) return 23;
  }
  // Stay until the peer is done too, so its last packets find us.
  char done = 'd';
  if (!write_all(to_peer, &done, 1) || !read_all(from_peer, &done, 1)) return 24;
  if (log::warn_count() + log::error_count() != 0) return 25;  // no unexpected complaint
  return 0;
}

void run_pair(const char* drivers) {
  config::ScopedSet d("CORE_DRIVERS", drivers);
  int a_to_b[2], b_to_a[2];
  ASSERT_EQ(::pipe(a_to_b), 0);
  ASSERT_EQ(::pipe(b_to_a), 0);
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(a_to_b[1]);
    ::close(b_to_a[0]);
    ::_exit(rank_main(1, b_to_a[1], a_to_b[0]));
  }
  ::close(a_to_b[0]);
  ::close(b_to_a[1]);
  const int mine = rank_main(0, a_to_b[1], b_to_a[0]);
  ::close(a_to_b[1]);
  ::close(b_to_a[0]);
  int status = 0;
  auto deadline = base::Deadline::after_ms(60000);
  pid_t got = 0;
  while ((got = ::waitpid(child, &status, WNOHANG)) == 0 && !deadline.expired()) ::usleep(1000);
  if (got == 0) {
    ::kill(child, SIGKILL);
    ::waitpid(child, &status, 0);
    FAIL() << "rank 1 stuck";
  }
  EXPECT_EQ(mine, 0) << "rank 0 failed with code " << mine;
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "rank 1 failed with code " << WEXITSTATUS(status);
}

TEST(MultiProcess, TwoRanksOverShm) {
  run_pair("shm");
}
TEST(MultiProcess, TwoRanksOverTcp) {
  run_pair("tcp");
}
TEST(MultiProcess, TwoRanksOverShmPlusTcpRails) {
  run_pair("shm+tcp");
}

}  // namespace
}  // namespace pier::core::test
