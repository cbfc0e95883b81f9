// The eager and rendezvous protocols over the self driver: data, exactly-once
// finalize, truncation, the "clean up the wire" form, deferred recv().
#include <gtest/gtest.h>

#include "boot/boot.hpp"
#include "cluster.hpp"
#include "core/state.hpp"

namespace pier::core::test {
namespace {

void* cookie(int i) {
  return reinterpret_cast<void*>(0x9000 + i);
}

class Protocol : public ::testing::TestWithParam<std::size_t> {};

TEST_P(Protocol, DeliversDataAndFinalizesOnceEachSide) {
  Cluster c(2, "self");
  ASSERT_EQ(c.status, Status::ok);
  const std::size_t len = GetParam();
  auto data = pattern(len, 3);
  ASSERT_EQ(c.send(0, 1, data, cookie(1), 0, 5, 6), Status::ok);
  Recorder& rx = *c.clients[1];
  Recorder& tx = *c.clients[0];
  ASSERT_TRUE(c.run_until([&] { return rx.finalized.size() == 1 && tx.finalized.size() == 1; }));
  ASSERT_EQ(rx.parsed.size(), 1u);
  EXPECT_EQ(rx.parsed[0].source, 0u);
  EXPECT_EQ(rx.parsed[0].source_port, 5);
  EXPECT_EQ(rx.parsed[0].destination_port, 6);
  EXPECT_EQ(rx.parsed[0].length, len);
  ASSERT_EQ(rx.parsed[0].header.size(), header_size);
  void* carried = nullptr;
  std::memcpy(&carried, rx.parsed[0].header.data(), sizeof carried);
  EXPECT_EQ(carried, cookie(1));
  if (len > 0) {
    rx.buffers[0].resize(len);
    EXPECT_EQ(rx.buffers[0], data);
  }
  EXPECT_EQ(tx.finalized[0], std::make_pair(cookie(1), Status::ok));
  EXPECT_EQ(rx.finalized[0], std::make_pair(Recorder::cookie_of(0), Status::ok));
  // Nothing more arrives later: exactly once.
  for (int i = 0; i < 100; ++i) c.progress_all();
  EXPECT_EQ(tx.finalize_count[cookie(1)], 1);
  EXPECT_EQ(rx.finalize_count[Recorder::cookie_of(0)], 1);
  EXPECT_EQ(c.cores[0]->pending(), 0u);
  EXPECT_EQ(c.cores[1]->pending(), 0u);
  const bool rdv = len + header_size > c.cores[0]->gate_info(1)->eager_limit;
  EXPECT_EQ(c.cores[0]->stats().rdv_sent, rdv ? 1u : 0u);
  EXPECT_EQ(c.cores[0]->stats().eager_sent, rdv ? 0u : 1u);
}

INSTANTIATE_TEST_SUITE_P(Sizes, Protocol,
                         ::testing::Values(0, 1, 8, 4096, 32 * 1024 - 256, 32 * 1024 + 1, 1 << 20,
                                           5 * 1024 * 1024 + 17));

TEST(Rendezvous, TruncatedReceiveTakesOnlyMlen) {
  Cluster c(2, "self");
  ASSERT_EQ(c.status, Status::ok);
  auto data = pattern(1 << 20, 9);
  Recorder& rx = *c.clients[1];
  rx.on_parse = [&](const Arrival& a) { (void)a, rx.answer(rx.parsed.size() - 1, 1000); };
  ASSERT_EQ(c.send(0, 1, data, cookie(2)), Status::ok);
  ASSERT_TRUE(
      c.run_until([&] { return rx.finalized.size() == 1 && c.clients[0]->finalized.size() == 1; }));
  EXPECT_EQ(c.clients[0]->finalized[0].second, Status::ok);
  ASSERT_EQ(rx.buffers[0].size(), data.size());
  EXPECT_TRUE(std::equal(data.begin(), data.begin() + 1000, rx.buffers[0].begin()));
  EXPECT_EQ(rx.buffers[0][1000], std::byte{0xee});  // the rest never moved
  EXPECT_EQ(rx.buffers[0].back(), std::byte{0xee});
}

TEST(Rendezvous, CleanUpTheWireFinalizesTheSenderOnly) {
  Cluster c(2, "self");
  ASSERT_EQ(c.status, Status::ok);
  auto data = pattern(200000, 1);
  Core& core1 = *c.cores[1];
  Recorder& rx = *c.clients[1];
  rx.on_parse = [&](const Arrival& a) {
    EXPECT_EQ(core1.recv(a.handle, nullptr, nullptr, 0, 0, 0), Status::ok);
  };
  ASSERT_EQ(c.send(0, 1, data, cookie(3)), Status::ok);
  ASSERT_TRUE(c.run_until([&] { return c.clients[0]->finalized.size() == 1; }));
  for (int i = 0; i < 50; ++i) c.progress_all();
  EXPECT_TRUE(rx.finalized.empty());
  EXPECT_EQ(c.cores[1]->pending(), 0u);
  EXPECT_EQ(c.cores[0]->stats().rtr_sent + c.cores[1]->stats().rtr_sent, 0u);
}

TEST(Protocol, DeferredRecvWorksForEagerAndRendezvous) {
  Cluster c(2, "self");
  ASSERT_EQ(c.status, Status::ok);
  Recorder& rx = *c.clients[1];
  rx.defer = true;
  auto small = pattern(300, 4);
  auto large = pattern(3 << 20, 5);
  ASSERT_EQ(c.send(0, 1, small, cookie(4)), Status::ok);
  ASSERT_EQ(c.send(0, 1, large, cookie(5)), Status::ok);
  ASSERT_TRUE(c.run_until([&] { return rx.parsed.size() == 2; }));
  for (int i = 0; i < 20; ++i) c.progress_all();
  EXPECT_TRUE(rx.finalized.empty());
  // The eager one is done for the sender; the rendezvous waits for recv().
  EXPECT_EQ(c.clients[0]->finalized.size(), 1u);
  ASSERT_EQ(rx.answer(1, rx.parsed[1].length), Status::ok);
  ASSERT_EQ(rx.answer(0, rx.parsed[0].length), Status::ok);
  // One recv per parse: a second one on the same handle is refused.
  EXPECT_EQ(c.cores[1]->recv(rx.parsed[0].handle, nullptr, nullptr, 0, 0, 0),
            Status::invalid_argument);
  ASSERT_TRUE(
      c.run_until([&] { return rx.finalized.size() == 2 && c.clients[0]->finalized.size() == 2; }));
  EXPECT_EQ(rx.buffers[0], small);
  EXPECT_EQ(rx.buffers[1], large);
  EXPECT_EQ(c.cores[1]->stats().deferred_recvs, 2u);
}

TEST(Protocol, LoopbackToSelfRank) {
  Cluster c(1, "self");
  ASSERT_EQ(c.status, Status::ok);
  auto small = pattern(64, 1);
  auto large = pattern(1 << 20, 2);
  ASSERT_EQ(c.send(0, 0, small, cookie(6)), Status::ok);
  ASSERT_EQ(c.send(0, 0, large, cookie(7)), Status::ok);
  Recorder& r = *c.clients[0];
  ASSERT_TRUE(c.run_until([&] { return r.finalized.size() == 4; }));
  EXPECT_EQ(r.buffers[0], small);
  EXPECT_EQ(r.buffers[1], large);
}

TEST(Protocol, RegionsAreCheckedAndPinned) {
  Cluster c(2, "self");
  ASSERT_EQ(c.status, Status::ok);
  std::vector<std::byte> buf(100);
  auto region = c.cores[0]->validate(buf.data(), buf.size());
  ASSERT_TRUE(region);
  std::array<std::byte, 4> h{};
  SendArgs a;
  a.peer = 1;
  a.upper = wire::Upper::port;
  a.header = h;
  a.region = &*region;
  a.offset = 50;
  a.length = 51;
  EXPECT_EQ(c.cores[0]->send(a), Status::invalid_argument);  // past the extent
  a.length = 50;
  a.peer = 7;
  EXPECT_EQ(c.cores[0]->send(a), Status::invalid_argument);
  a.peer = 1;
  a.priority = 2;
  EXPECT_EQ(c.cores[0]->send(a), Status::invalid_argument);
  a.priority = 0;
  a.cookie = cookie(8);
  ASSERT_EQ(c.cores[0]->send(a), Status::ok);
  EXPECT_EQ(c.cores[0]->invalidate(*region), Status::in_use);  // pinned until finalize
  ASSERT_TRUE(c.run_until([&] { return c.clients[0]->finalized.size() == 1; }));
  EXPECT_EQ(c.cores[0]->invalidate(*region), Status::ok);
  EXPECT_EQ(c.cores[0]->invalidate(*region), Status::not_found);
  // write(): the event path, bounds-checked.
  std::vector<std::byte> events(8);
  auto ev = c.cores[0]->validate(events.data(), events.size());
  ASSERT_TRUE(ev);
  std::array<std::byte, 4> e{std::byte{1}, std::byte{2}, std::byte{3}, std::byte{4}};
  EXPECT_EQ(c.cores[0]->write(*ev, 4, e), Status::ok);
  EXPECT_EQ(events[7], std::byte{4});
  EXPECT_EQ(c.cores[0]->write(*ev, 5, e), Status::invalid_argument);
}

TEST(Protocol, IdMappingAndGateInfo) {
  Cluster c(3, "self");
  ASSERT_EQ(c.status, Status::ok);
  auto id = c.cores[0]->node_of(2);
  ASSERT_TRUE(id);
  EXPECT_EQ(id->pid, static_cast<std::uint32_t>(::getpid()));
  // Three ranks of one process share node and pid: the first matches.
  EXPECT_EQ(*c.cores[0]->rank_of(*id), 0u);
  EXPECT_FALSE(c.cores[0]->node_of(3));
  auto info = c.cores[0]->gate_info(1);
  ASSERT_TRUE(info);
  ASSERT_EQ(info->rails.size(), 1u);
  EXPECT_EQ(info->rails[0], "self");
  EXPECT_GT(info->eager_limit, 1000u);
  EXPECT_EQ(info->credits[0], c.cores[0]->settings().credits);
}

}  // namespace
}  // namespace pier::core::test

namespace pier::core::test {
namespace {

TEST(Bootstrap, SingletonCoreTalksToItself) {
  config::ScopedSet drivers("CORE_DRIVERS", "shm,tcp");
  auto boot = boot::Bootstrap::open();
  ASSERT_TRUE(boot) << to_string(boot.status());
  ASSERT_EQ((*boot)->size(), 1u);
  auto core = Core::from_bootstrap(**boot);
  ASSERT_TRUE(core) << to_string(core.status());
  Recorder r(**core);
  ASSERT_EQ((*core)->attach(wire::Upper::port, &r, header_size), Status::ok);
  auto data = pattern(100000, 3);
  auto region = (*core)->validate(data.data(), data.size());
  ASSERT_TRUE(region);
  std::array<std::byte, header_size> h{};
  SendArgs a;
  a.cookie = &r;
  a.upper = wire::Upper::port;
  a.header = h;
  a.region = &*region;
  a.length = data.size();
  ASSERT_EQ((*core)->send(a), Status::ok);
  ASSERT_EQ((*core)->wait([&] { return r.finalized.size() == 2; }, base::Deadline::after_ms(10000)),
            Status::ok);
  EXPECT_EQ(r.buffers[0], data);
  EXPECT_EQ((*core)->gate_info(0)->rails, std::vector<std::string>{"self"});
}

TEST(Sizes, HotObjectsStayWithinBudget) {
  // Growing one of these is a conscious edit (docs/core.md, STYLE tests).
  EXPECT_LE(sizeof(SendMsg), 664u);  // + SmallSend::posted (the fast eager path)
  EXPECT_LE(sizeof(Incoming), 256u);
  EXPECT_LE(sizeof(Ctrl), 640u);
}

}  // namespace
}  // namespace pier::core::test

namespace pier::core::test {
namespace {

/// self advertises prefetch: a rendezvous prefetches the whole message and
/// the single-rail transfer posts that very packet; a split undoes it.
TEST(Rendezvous, PrefetchIsConsumedOrUndone) {
  for (const char* drivers : {"self", "self+self"}) {
    SCOPED_TRACE(drivers);
    config::ScopedSet split_min("CORE_SPLIT_MIN", "64k");
    Cluster c(2, drivers);
    ASSERT_EQ(c.status, Status::ok);
    auto data = pattern(1 << 20, 5);
    ASSERT_EQ(c.send(0, 1, data, reinterpret_cast<void*>(0x77)), Status::ok);
    ASSERT_TRUE(c.run_until([&] {
      return c.clients[1]->finalized.size() == 1 && c.clients[0]->finalized.size() == 1;
    }));
    EXPECT_EQ(c.clients[1]->buffers[0], data);
    EXPECT_EQ(c.clients[0]->finalized[0].second, Status::ok);
    const Stats s = c.cores[0]->stats();
    EXPECT_EQ(s.prefetches, 1u);
    EXPECT_EQ(s.prefetch_hits, std::string(drivers) == "self" ? 1u : 0u);
  }
}

/// Connects rank 0's gate to rank 1 with one eager message, so that later
/// sends put their rts on the wire at once.
void connect_gate(Cluster& c, int id) {
  auto hello = pattern(8, 1);
  ASSERT_EQ(c.send(0, 1, hello, cookie(id)), Status::ok);
  ASSERT_TRUE(c.run_until(
      [&] { return c.clients[1]->finalized.size() == 1 && c.clients[0]->finalized.size() == 1; }));
}

/// Lets the rts out, then moves only rank 1 until it parsed `n` messages and
/// a few passes more: the sender sends no data meanwhile, so the first
/// chunk stays posted and in progress.
void parse_at_the_receiver_only(Cluster& c, std::size_t n) {
  for (int i = 0; i < 20; ++i) (void)c.cores[0]->progress();
  const auto deadline = base::Deadline::after_ms(10000);
  while (c.clients[1]->parsed.size() < n && !deadline.expired()) (void)c.cores[1]->progress();
  ASSERT_EQ(c.clients[1]->parsed.size(), n);
  for (int i = 0; i < 20; ++i) (void)c.cores[1]->progress();
}

/// Over tcp a large-track send may go before its receive is posted, and a
/// receive has no rdv_data: the receiver asks for the next chunk while the
/// current one's data flows, so the sender never waits a round trip between
/// chunks (1 MiB through the core moved at 0.78 times the bare driver's rate
/// over loopback tcp before). Only one ahead, and every message lands whole.
TEST(Rendezvous, OverTcpTheNextChunkIsAskedForWhileTheCurrentOneFlows) {
  Cluster c(2, "tcp");
  ASSERT_EQ(c.status, Status::ok);
  Recorder& rx = *c.clients[1];
  Recorder& tx = *c.clients[0];
  ASSERT_NO_FATAL_FAILURE(connect_gate(c, 10));
  std::vector<std::vector<std::byte>> data;
  for (unsigned i = 0; i < 3; ++i) data.push_back(pattern(1 << 20, 20 + i));
  for (int i = 0; i < 3; ++i)
    ASSERT_EQ(c.send(0, 1, data[static_cast<std::size_t>(i)], cookie(11 + i)), Status::ok);
  ASSERT_NO_FATAL_FAILURE(parse_at_the_receiver_only(c, 4));
  EXPECT_EQ(c.cores[1]->stats().rtr_sent, 2u) << "the second chunk is asked for, not the third";
  ASSERT_TRUE(c.run_until([&] { return rx.finalized.size() == 4 && tx.finalized.size() == 4; }));
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(rx.finalized[i + 1].second, Status::ok);
    EXPECT_EQ(rx.buffers[i + 1], data[i]) << i;
  }
  EXPECT_EQ(c.cores[1]->stats().rtr_sent, 3u);
}

/// Small packets are ordered per priority only: an rtr of another priority
/// could overtake the current chunk's, and its data would land in the
/// current chunk's receive. A chunk of another priority is not asked ahead.
TEST(Rendezvous, OverTcpAChunkOfAnotherPriorityIsNotAskedForAhead) {
  Cluster c(2, "tcp");
  ASSERT_EQ(c.status, Status::ok);
  Recorder& rx = *c.clients[1];
  Recorder& tx = *c.clients[0];
  ASSERT_NO_FATAL_FAILURE(connect_gate(c, 20));
  std::vector<std::vector<std::byte>> data;
  for (unsigned i = 0; i < 2; ++i) data.push_back(pattern(1 << 20, 30 + i));
  ASSERT_EQ(c.send(0, 1, data[0], cookie(21), 0), Status::ok);
  ASSERT_EQ(c.send(0, 1, data[1], cookie(22), 1), Status::ok);
  ASSERT_NO_FATAL_FAILURE(parse_at_the_receiver_only(c, 3));
  EXPECT_EQ(c.cores[1]->stats().rtr_sent, 1u);
  ASSERT_TRUE(c.run_until([&] { return rx.finalized.size() == 3 && tx.finalized.size() == 3; }));
  for (std::size_t i = 1; i < 3; ++i) {
    ASSERT_EQ(rx.parsed[i].length, data[0].size());
    EXPECT_EQ(rx.finalized[i].second, Status::ok);
  }
  // Whichever arrived first, each landed whole.
  for (std::size_t i = 1; i < 3; ++i)
    EXPECT_TRUE(rx.buffers[i] == data[0] || rx.buffers[i] == data[1]) << i;
  EXPECT_NE(rx.buffers[1], rx.buffers[2]);
}

}  // namespace
}  // namespace pier::core::test
