// Credits, priorities, ordering per (priority, port pair) and multi-rail
// splitting, over the self driver.
#include <gtest/gtest.h>

#include <random>
#include <tuple>

#include "cluster.hpp"
#include "core/split.hpp"

namespace pier::core::test {
namespace {

void* cookie(int i) {
  return reinterpret_cast<void*>(0x20000 + i);
}

TEST(Credits, SenderStopsAtTheGrantAndGetsEveryCreditBack) {
  config::ScopedSet credits("CORE_CREDITS", "4");
  Cluster c(2, "self");
  ASSERT_EQ(c.status, Status::ok);
  Recorder& rx = *c.clients[1];
  rx.defer = true;
  std::vector<std::vector<std::byte>> data;
  for (int i = 0; i < 10; ++i) data.push_back(pattern(100, i));
  for (int i = 0; i < 10; ++i) ASSERT_EQ(c.send(0, 1, data[i], cookie(i)), Status::ok);
  for (int i = 0; i < 200; ++i) c.progress_all();
  // Four packets are parked unanswered at the receiver: no fifth is sent.
  EXPECT_EQ(rx.parsed.size(), 4u);
  EXPECT_EQ(c.cores[0]->gate_info(1)->credits[0], 0u);
  EXPECT_EQ(c.clients[0]->finalized.size(), 4u);
  std::size_t answered = 0;
  ASSERT_TRUE(c.run_until([&] {
    while (answered < rx.parsed.size()) {
      EXPECT_LE(rx.parsed.size(), answered + 4);  // never more unanswered than granted
      EXPECT_EQ(rx.answer(answered, rx.parsed[answered].length), Status::ok);
      ++answered;
    }
    return rx.finalized.size() == 10 && c.clients[0]->finalized.size() == 10;
  }));
  for (int i = 0; i < 10; ++i) EXPECT_EQ(rx.buffers[i], data[i]);
  // Idle again: every credit went back (credit packets or piggybacked).
  ASSERT_TRUE(c.run_until([&] { return c.cores[0]->gate_info(1)->credits[0] >= 2; }));
  EXPECT_GE(c.cores[1]->stats().credit_packets, 1u);
}

/// A pass that takes an eager message answered in lib_parse stops polling
/// that rail there: in a ping-pong the next poll only delays the reply (over
/// shm it reads a ring line untouched for a lap). A pass that then finds a
/// packet at once is in a stream and takes what waits in one go, until a
/// pass finds nothing.
TEST(Progress, APassTakesOneAnsweredMessageUnlessAStreamFlows) {
  for (const char* drivers : {"shm", "self"}) {
    SCOPED_TRACE(drivers);
    Cluster c(2, drivers);
    ASSERT_EQ(c.status, Status::ok);
    Recorder& rx = *c.clients[1];
    auto small = pattern(16, 7);
    ASSERT_EQ(c.send(0, 1, small, cookie(1)), Status::ok);
    ASSERT_TRUE(c.run_until([&] {
      return rx.parsed.size() == 1 && c.cores[0]->pending() == 0 && c.cores[1]->pending() == 0;
    }));
    for (int round = 0; round < 2; ++round) {
      (void)c.cores[1]->progress();  // finds nothing: not in a stream
      const std::size_t before = rx.parsed.size();
      for (int i = 0; i < 4; ++i) ASSERT_EQ(c.send(0, 1, small, cookie(10 + i)), Status::ok);
      const auto deadline = base::Deadline::after_ms(10000);  // all sent, none taken
      while (c.cores[0]->pending() != 0 && !deadline.expired()) (void)c.cores[0]->progress();
      ASSERT_EQ(c.cores[0]->pending(), 0u);
      (void)c.cores[1]->progress();
      EXPECT_EQ(rx.parsed.size(), before + 1) << "round " << round;
      (void)c.cores[1]->progress();
      EXPECT_EQ(rx.parsed.size(), before + 4) << "round " << round;
    }
  }
}

/// The finalize ring is sized for one completion per live message state,
/// but an eager message answered in lib_parse frees its state at once and
/// the next packet of the same pass takes it again: one pass taking more
/// arrivals than the ring holds overwrote completions not yet run, so some
/// cookies were finalized twice and others never. A pass now stops taking
/// packets while the ring has no room (they wait in the driver).
TEST(Finalize, APassTakingMoreArrivalsThanTheRingHoldsFinalizesEachOnce) {
  config::ScopedSet sends("CORE_SEND_MSGS", "1");
  config::ScopedSet recvs("CORE_RECV_MSGS", "1");  // a ring of 16 completions
  // An arrival answered in lib_parse while no finalize is queued is
  // finalized at once, outside the ring: a finalize queued first (rank 1's
  // own send) makes every arrival of the pass go through the ring.
  for (const bool queued_first : {false, true}) {
    SCOPED_TRACE(queued_first ? "a finalize queued first" : "nothing queued first");
    Cluster c(2, "self");
    ASSERT_EQ(c.status, Status::ok);
    std::vector<std::vector<std::byte>> data;
    for (int i = 0; i < 20; ++i) data.push_back(pattern(8, static_cast<unsigned>(i)));
    // Rank 1 is not progressed: the packets wait in its driver.
    for (int i = 0; i < 20; ++i) {
      void* cookie = reinterpret_cast<void*>(static_cast<std::uintptr_t>(0x100 + i));
      Status st;
      const auto end = base::Deadline::after_ms(10000);
      while ((st = c.send(0, 1, data[static_cast<std::size_t>(i)], cookie)) ==
                 Status::no_resource &&
             !end.expired())
        (void)c.cores[0]->progress();
      ASSERT_EQ(st, Status::ok) << i;
    }
    // The first arrival of each pass of rank 1 sends (its finalize queued
    // in the ring at once), so the ones after it in that pass queue theirs.
    std::vector<std::byte> back = pattern(8, 99);
    bool first_of_pass = false;
    std::size_t sent_back = 0;
    Recorder& rx = *c.clients[1];
    rx.on_parse = [&](const Arrival& a) {
      EXPECT_EQ(rx.answer(rx.parsed.size() - 1, a.length), Status::ok);
      if (!queued_first || !first_of_pass) return;
      first_of_pass = false;
      if (c.send(1, 0, back, cookie(1000 + static_cast<int>(sent_back))) == Status::ok) ++sent_back;
    };
    const auto end = base::Deadline::after_ms(10000);
    while (rx.parsed.size() < 20 && !end.expired()) {
      first_of_pass = true;
      (void)c.cores[0]->progress();
      (void)c.cores[1]->progress();
    }
    ASSERT_EQ(rx.parsed.size(), 20u);
    if (queued_first) {
      ASSERT_GE(sent_back, 1u);
    }
    const std::size_t expected = 20 + sent_back;
    ASSERT_TRUE(c.run_until([&] { return c.clients[1]->finalized.size() >= expected; }));
    for (int i = 0; i < 20; ++i)
      EXPECT_EQ(c.clients[1]->finalize_count[Recorder::cookie_of(static_cast<std::size_t>(i))], 1)
          << "message " << i;
    for (std::size_t k = 0; k < sent_back; ++k)
      EXPECT_EQ(c.clients[1]->finalize_count[cookie(1000 + static_cast<int>(k))], 1) << k;
    EXPECT_EQ(c.clients[1]->finalized.size(), expected);
  }
}

/// An eager message the client answers inside lib_parse is finalized right
/// after lib_parse returns when no finalize was queued before it (not
/// through the ring at the end of the pass): never from inside lib_parse or
/// recv(), exactly once, and a second recv() on its handle is refused.
/// Mixed with sends of the receiver, whose finalizes go through the ring.
TEST(Finalize, AMessageAnsweredInLibParseIsFinalizedOnceAfterIt) {
  Cluster c(2, "self");
  ASSERT_EQ(c.status, Status::ok);
  Recorder& rx = *c.clients[1];
  bool inside = false;
  std::size_t finalized_inside = 0;
  Status second = Status::ok;
  std::vector<std::vector<std::byte>> back;
  for (int i = 0; i < 8; ++i) back.push_back(pattern(16, 100 + i));
  rx.on_parse = [&](const Arrival& a) {
    inside = true;
    const std::size_t before = rx.finalized.size();
    EXPECT_EQ(rx.answer(rx.parsed.size() - 1, a.length), Status::ok);
    second = c.cores[1]->recv(a.handle, nullptr, nullptr, 0, 0, 0);
    finalized_inside += rx.finalized.size() - before;
    // A send from inside lib_parse: its finalize is queued behind.
    const std::size_t k = rx.parsed.size() - 1;
    if (k % 2 == 1) {
      EXPECT_EQ(c.send(1, 0, back[k / 2], cookie(1000 + static_cast<int>(k))), Status::ok);
    }
    inside = false;
  };
  std::vector<std::vector<std::byte>> data;
  for (int i = 0; i < 16; ++i) data.push_back(pattern(8 + static_cast<std::size_t>(i), i));
  for (int i = 0; i < 16; ++i) {
    ASSERT_EQ(c.send(0, 1, data[static_cast<std::size_t>(i)], cookie(i)), Status::ok);
    if (i % 4 == 3) {
      ASSERT_TRUE(c.run_until([&] { return rx.parsed.size() == static_cast<std::size_t>(i + 1); }));
    }
  }
  ASSERT_TRUE(c.run_until([&] {
    return rx.finalized.size() == 16 + 8 && c.clients[0]->finalized.size() == 16 + 8 &&
           c.clients[0]->parsed.size() == 8;
  }));
  for (int i = 0; i < 50; ++i) c.progress_all();
  EXPECT_EQ(finalized_inside, 0u);
  EXPECT_EQ(second, Status::invalid_argument);
  EXPECT_FALSE(inside);
  EXPECT_EQ(rx.finalized.size(), 24u);
  for (std::size_t i = 0; i < 16; ++i) {
    EXPECT_EQ(rx.finalize_count[Recorder::cookie_of(i)], 1) << i;
    EXPECT_EQ(rx.buffers[i], data[i]) << i;
  }
  for (const auto& [ck, st] : rx.finalized) EXPECT_EQ(st, Status::ok);
  EXPECT_EQ(c.cores[0]->pending(), 0u);
  EXPECT_EQ(c.cores[1]->pending(), 0u);
}

/// Receive states are one pool for every peer. When two peers' messages,
/// deferred by the client, hold all of it, a third message within its
/// sender's grant used to fail that sender's gate (no_memory). It now waits
/// in one of the gate's slots, in order with what follows it, and is
/// delivered when a state frees; an rts the same way.
TEST(Flow, AMessageFindingTheReceivePoolFullWaitsForAState) {
  config::ScopedSet recvs("CORE_RECV_MSGS", "2");
  Cluster c(3, "self");
  ASSERT_EQ(c.status, Status::ok);
  Recorder& rx = *c.clients[2];
  rx.defer = true;
  auto first = pattern(100, 1), second = pattern(100, 2);
  auto eager = pattern(200, 3), large = pattern(1 << 20, 4), after = pattern(50, 5);
  ASSERT_EQ(c.send(0, 2, first, cookie(1)), Status::ok);
  ASSERT_EQ(c.send(1, 2, second, cookie(2)), Status::ok);
  ASSERT_TRUE(c.run_until([&] { return rx.parsed.size() == 2; }));
  // The pool is full: these three wait, in order, at rank 2.
  ASSERT_EQ(c.send(0, 2, eager, cookie(3)), Status::ok);
  ASSERT_EQ(c.send(0, 2, large, cookie(4)), Status::ok);
  ASSERT_EQ(c.send(0, 2, after, cookie(5)), Status::ok);
  for (int i = 0; i < 300; ++i) c.progress_all();
  EXPECT_EQ(rx.parsed.size(), 2u);
  EXPECT_EQ(c.cores[2]->stats().held_for_state, 3u);
  EXPECT_TRUE(rx.failed_peers.empty());
  EXPECT_TRUE(c.clients[0]->failed_peers.empty());
  rx.defer = false;
  ASSERT_EQ(rx.answer(0, rx.parsed[0].length), Status::ok);
  ASSERT_EQ(rx.answer(1, rx.parsed[1].length), Status::ok);
  ASSERT_TRUE(c.run_until([&] {
    return rx.finalized.size() == 5 && c.clients[0]->finalized.size() == 4 &&
           c.clients[1]->finalized.size() == 1;
  }));
  ASSERT_EQ(rx.parsed.size(), 5u);
  EXPECT_EQ(rx.buffers[2], eager);
  EXPECT_EQ(rx.buffers[3], large);
  EXPECT_EQ(rx.buffers[4], after);
  for (auto& [ck, st] : rx.finalized) EXPECT_EQ(st, Status::ok);
  for (auto& [ck, st] : c.clients[0]->finalized) EXPECT_EQ(st, Status::ok);
  EXPECT_TRUE(rx.failed_peers.empty());
  EXPECT_TRUE(c.clients[0]->failed_peers.empty());
}

TEST(Credits, HighPriorityIsNeverBlockedByLow) {
  config::ScopedSet credits("CORE_CREDITS", "2");
  Cluster c(2, "self");
  ASSERT_EQ(c.status, Status::ok);
  Recorder& rx = *c.clients[1];
  rx.on_parse = [&](const Arrival& a) {
    // Low priority is left unanswered; high is answered at once.
    if (a.priority == 1) (void)rx.answer(rx.parsed.size() - 1, a.length);
  };
  auto low = pattern(50, 1);
  auto high = pattern(60, 2);
  for (int i = 0; i < 5; ++i) ASSERT_EQ(c.send(0, 1, low, cookie(i), 0), Status::ok);
  for (int i = 0; i < 5; ++i) ASSERT_EQ(c.send(0, 1, high, cookie(10 + i), 1), Status::ok);
  ASSERT_TRUE(c.run_until([&] { return rx.finalized.size() == 5; }));
  std::size_t lows = 0;
  for (const Parsed& p : rx.parsed) lows += p.priority == 0;
  EXPECT_EQ(lows, 2u);  // only the grant of the low priority went out
  for (const Parsed& p : rx.parsed) EXPECT_LE(p.priority, 1);
}

/// Random mixes of sizes, priorities and port pairs, with random progress
/// interleavings and random deferral: lib_parse order per (priority, source
/// port, destination port) is send order, and each message finalizes once.
TEST(Ordering, PerPriorityAndPortPairUnderRandomInterleavings) {
  config::ScopedSet credits("CORE_CREDITS", "3");
  for (unsigned seed = 1; seed <= 4; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    Cluster c(3, "self");
    ASSERT_EQ(c.status, Status::ok);
    const int n = 120;
    std::vector<std::vector<std::byte>> data;
    std::vector<std::tuple<int, int, int, int>> meta;  // from, prio, sport, dport
    for (int i = 0; i < n; ++i) {
      std::size_t len = (rng() % 4 == 0) ? 40000 + rng() % 200000 : rng() % 3000;
      data.push_back(pattern(len, static_cast<unsigned>(i)));
      meta.emplace_back(rng() % 2, rng() % 2, rng() % 2, rng() % 2);
    }
    std::vector<std::size_t> unanswered;
    Recorder& rx = *c.clients[2];
    rx.on_parse = [&](const Arrival&) { unanswered.push_back(rx.parsed.size() - 1); };
    int sent = 0;
    ASSERT_TRUE(c.run_until(
        [&] {
          if (sent < n && rng() % 2 == 0) {
            auto [from, prio, sp, dp] = meta[sent];
            EXPECT_EQ(c.send(from, 2, data[sent], cookie(sent), static_cast<std::uint8_t>(prio),
                             static_cast<std::uint16_t>(sp), static_cast<std::uint16_t>(dp)),
                      Status::ok);
            ++sent;
          }
          // Answer a random unanswered one now and then, out of order.
          if (!unanswered.empty() && rng() % 3 == 0) {
            std::size_t k = rng() % unanswered.size();
            std::size_t i = unanswered[k];
            unanswered.erase(unanswered.begin() + static_cast<std::ptrdiff_t>(k));
            EXPECT_EQ(rx.answer(i, rx.parsed[i].length), Status::ok);
          }
          return sent == n && rx.finalized.size() == n &&
                 c.clients[0]->finalized.size() + c.clients[1]->finalized.size() == n;
        },
        60000));
    // Order per (source, priority, ports): the cookies in the headers ascend.
    std::map<std::tuple<Rank, int, int, int>, std::uintptr_t> last;
    for (std::size_t i = 0; i < rx.parsed.size(); ++i) {
      const Parsed& p = rx.parsed[i];
      void* ck = nullptr;
      std::memcpy(&ck, p.header.data(), sizeof ck);
      const auto key =
          std::make_tuple(p.source, int{p.priority}, int{p.source_port}, int{p.destination_port});
      auto at = reinterpret_cast<std::uintptr_t>(ck);
      EXPECT_LT(last[key], at) << "out of order at parse " << i;
      last[key] = at;
      const int id = static_cast<int>(at - 0x20000);
      EXPECT_EQ(rx.buffers[i], data[id]);
      EXPECT_EQ(std::get<1>(meta[id]), p.priority);
    }
    for (auto& [ck, count] : rx.finalize_count) EXPECT_EQ(count, 1);
    for (int s = 0; s < 2; ++s)
      for (auto& [ck, count] : c.clients[s]->finalize_count) EXPECT_EQ(count, 1);
  }
}

TEST(Split, SharesFollowBandwidthAndCoverTheMessage) {
  std::array<Share, 4> out{};
  const std::array<std::uint32_t, 3> bw{1000, 3000, 0};
  std::size_t n = split(1 << 20, bw, 1024, out);
  ASSERT_EQ(n, 2u);
  EXPECT_EQ(out[0].rail, 0);
  EXPECT_EQ(out[1].rail, 1);
  EXPECT_EQ(out[0].offset, 0u);
  EXPECT_EQ(out[0].length, 256u * 1024);
  EXPECT_EQ(out[1].offset, out[0].length);
  EXPECT_EQ(out[0].length + out[1].length, 1u << 20);
  // Below the threshold: everything on the fastest rail.
  n = split(1000, bw, 1024, out);
  ASSERT_EQ(n, 1u);
  EXPECT_EQ(out[0].rail, 1);
  EXPECT_EQ(out[0].length, 1000u);
  EXPECT_EQ(split(0, bw, 0, out), 0u);
  const std::array<std::uint32_t, 2> none{0, 0};
  EXPECT_EQ(split(100, none, 0, out), 0u);
  // Odd sizes and many rails: contiguous, complete.
  const std::array<std::uint32_t, 4> four{7, 1, 13, 5};
  for (std::uint64_t len : {1ull, 4095ull, 4097ull, 123457ull, (1ull << 34) + 3}) {
    n = split(len, four, 0, out);
    std::uint64_t at = 0;
    for (std::size_t i = 0; i < n; ++i) {
      EXPECT_EQ(out[i].offset, at);
      EXPECT_GT(out[i].length, 0u);
      at += out[i].length;
    }
    EXPECT_EQ(at, len);
  }
}

TEST(MultiRail, LargeMessagesAreSplitAcrossRails) {
  config::ScopedSet split_min("CORE_SPLIT_MIN", "64k");
  Cluster c(2, "self+self");
  ASSERT_EQ(c.status, Status::ok);
  auto info = c.cores[0]->gate_info(1);
  ASSERT_TRUE(info);
  ASSERT_EQ(info->rails.size(), 2u);
  auto big = pattern(4 << 20, 11);
  auto medium = pattern(40000, 12);  // rendezvous, below the split threshold
  ASSERT_EQ(c.send(0, 1, big, cookie(1)), Status::ok);
  ASSERT_EQ(c.send(0, 1, medium, cookie(2)), Status::ok);
  Recorder& rx = *c.clients[1];
  ASSERT_TRUE(
      c.run_until([&] { return rx.finalized.size() == 2 && c.clients[0]->finalized.size() == 2; }));
  EXPECT_EQ(rx.buffers[0], big);
  EXPECT_EQ(rx.buffers[1], medium);
  EXPECT_EQ(c.cores[1]->stats().rtr_sent, 3u);  // two shares, then one
}

}  // namespace
}  // namespace pier::core::test
