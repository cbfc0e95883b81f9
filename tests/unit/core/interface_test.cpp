// The interface the upper layers asked for: peer_failed(), gate_status(),
// detach(), the eager limit in Settings, and PIER_DRIVERS.
#include <gtest/gtest.h>

#include <thread>

#include "cluster.hpp"
#include "core/state.hpp"

namespace pier::core::test {
namespace {

void* cookie(int i) {
  return reinterpret_cast<void*>(static_cast<std::uintptr_t>(0x5000 + i));
}

TEST(Interface, PeerFailedIsToldOnceAfterItsOperationsFinalized) {
  Cluster c(3, "self");
  ASSERT_EQ(c.status, Status::ok);
  Recorder& r1 = *c.clients[1];
  r1.defer = true;  // the rendezvous is pending when rank 1 dies
  auto big = pattern(1 << 20, 1);
  ASSERT_EQ(c.send(0, 1, big, cookie(1)), Status::ok);
  ASSERT_TRUE(c.run_until([&] { return r1.parsed.size() == 1; }));
  EXPECT_EQ(c.cores[0]->gate_status(1), Status::ok);
  c.cores[1].reset();
  Recorder& tx = *c.clients[0];
  ASSERT_TRUE(c.run_until([&] { return !tx.failed_peers.empty(); }));
  for (int i = 0; i < 50; ++i) c.progress_all();
  ASSERT_EQ(tx.failed_peers, std::vector<Rank>{1});
  EXPECT_EQ(tx.finalized_before_failure[0], 1u);  // cookie(1) ended first
  EXPECT_EQ(tx.finalize_count[cookie(1)], 1);
  EXPECT_EQ(c.cores[0]->gate_status(1), Status::broken);
  EXPECT_EQ(c.cores[0]->gate_status(2), Status::ok);
  EXPECT_EQ(c.cores[0]->gate_status(3), Status::invalid_argument);
  EXPECT_TRUE(c.clients[2]->failed_peers.empty() || c.clients[2]->failed_peers[0] == 1);
}

// A peer found dead while nothing to it is pending is still told.
TEST(Interface, PeerFailedIsToldWithNothingPending) {
  Cluster c(2, "shm");
  ASSERT_EQ(c.status, Status::ok);
  auto small = pattern(64, 4);
  ASSERT_EQ(c.send(0, 1, small, cookie(1)), Status::ok);
  Recorder& tx = *c.clients[0];
  ASSERT_TRUE(c.run_until([&] { return tx.finalized.size() == 1; }));
  c.cores[1].reset();
  ASSERT_TRUE(c.run_until([&] { return !tx.failed_peers.empty(); }, 5000));
  EXPECT_EQ(tx.failed_peers, std::vector<Rank>{1});
}

TEST(Interface, DetachCleansWhatTheClientLeftAndStopsItsCallbacks) {
  Cluster c(2, "self");
  ASSERT_EQ(c.status, Status::ok);
  Recorder& rx = *c.clients[1];
  rx.defer = true;
  auto small = pattern(100, 1);
  auto big = pattern(1 << 20, 2);
  ASSERT_EQ(c.send(0, 1, small, cookie(1)), Status::ok);
  ASSERT_EQ(c.send(0, 1, big, cookie(2)), Status::ok);
  ASSERT_TRUE(c.run_until([&] { return rx.parsed.size() == 2; }));
  EXPECT_EQ(c.cores[1]->detach(wire::Upper::port, c.clients[0].get()), Status::invalid_argument);
  ASSERT_EQ(c.cores[1]->detach(wire::Upper::port, &rx), Status::ok);
  EXPECT_EQ(c.cores[1]->detach(wire::Upper::port, &rx), Status::invalid_argument);
  // The sender completes both: the receiver cleaned them from the wire.
  Recorder& tx = *c.clients[0];
  ASSERT_TRUE(c.run_until([&] { return tx.finalized.size() == 2; }));
  for (auto& [ck, st] : tx.finalized) EXPECT_EQ(st, Status::ok);
  EXPECT_TRUE(rx.finalized.empty());
  EXPECT_EQ(c.cores[1]->pending(), 0u);
  // A new client takes the slot and gets the next message.
  Recorder again(*c.cores[1]);
  ASSERT_EQ(c.cores[1]->attach(wire::Upper::port, &again, header_size), Status::ok);
  ASSERT_EQ(c.send(0, 1, small, cookie(3)), Status::ok);
  ASSERT_TRUE(c.run_until([&] { return again.finalized.size() == 1; }));
  EXPECT_EQ(again.buffers[0], small);
  EXPECT_EQ(rx.parsed.size(), 2u);
}

/// A client detached while its own send is still in flight (a rendezvous
/// waiting for its data to go), then a new client attached in its place:
/// the old send's finalize went to the new client, with a cookie naming the
/// old one's (freed) objects. Sends in flight end without a finalize.
TEST(Interface, ANewClientNeverGetsTheDetachedOnesFinalizes) {
  Cluster c(2, "self");
  ASSERT_EQ(c.status, Status::ok);
  auto big = pattern(1 << 20, 2);
  ASSERT_EQ(c.send(0, 1, big, cookie(1)), Status::ok);
  for (int i = 0; i < 3; ++i) (void)c.cores[0]->progress();  // the rts is out
  ASSERT_TRUE(c.clients[0]->finalized.empty());
  ASSERT_EQ(c.cores[0]->detach(wire::Upper::port, c.clients[0].get()), Status::ok);
  Recorder again(*c.cores[0]);
  ASSERT_EQ(c.cores[0]->attach(wire::Upper::port, &again, header_size), Status::ok);
  ASSERT_TRUE(c.run_until([&] { return c.clients[1]->finalized.size() == 1; }));
  for (int i = 0; i < 50; ++i) c.progress_all();
  EXPECT_TRUE(again.finalized.empty()) << "the new client got the old one's finalize";
  EXPECT_TRUE(c.clients[0]->finalized.empty());
  EXPECT_EQ(c.cores[0]->pending(), 0u);
}

// The loopback gate is idle until its first send, though its rail may be up
// from the start: that first send must still be received (a Portals
// triggered put to self once was never polled).
TEST(Interface, FirstSendToOneselfArrives) {
  for (const char* drivers : {"self", "shm"}) {
    SCOPED_TRACE(drivers);
    Cluster c(2, drivers);
    ASSERT_EQ(c.status, Status::ok);
    for (int i = 0; i < 4; ++i) c.progress_all();
    auto small = pattern(64, 3);
    ASSERT_EQ(c.send(1, 1, small, cookie(1)), Status::ok);
    Recorder& me = *c.clients[1];
    ASSERT_TRUE(c.run_until([&] { return me.finalized.size() == 2; }, 5000));
    EXPECT_EQ(me.buffers[0], small);
  }
}

// A peer's rails in two driver contexts (shm+tcp): a waiting core sleeps on
// the descriptors of both at once, and a message that comes meanwhile ends
// the wait. With its rails in one context (shm) it sleeps in that one.
// Both with the idle sleep off (CORE_IDLE_SLEEP_MS=1: 1 ms sleeps) and on
// (the waiter is idle 200 ms before the message: after 10 ms its sleeps are
// idle ones, on every context with rails or connections, up to 50 ms).
TEST(Interface, ASleepWatchesEveryContextThatCarriesRails) {
  for (const char* idle_ms : {"1", "50"}) {
    config::ScopedSet idle_sleep{"CORE_IDLE_SLEEP_MS", idle_ms};
    const bool idle_on = std::string(idle_ms) != "1";
    for (const std::string drivers : {"shm+tcp", "shm"}) {
      SCOPED_TRACE(drivers + " idle " + idle_ms);
      Cluster c(2, drivers);
      ASSERT_EQ(c.status, Status::ok);
      std::vector<std::byte> first(8, std::byte{1}), second(8, std::byte{2});
      ASSERT_EQ(c.send(0, 1, first, reinterpret_cast<void*>(1)), Status::ok);
      ASSERT_TRUE(c.run_until(
          [&] { return c.clients[1]->parsed.size() == 1 && c.clients[0]->finalized.size() == 1; }));
      auto info = c.cores[1]->gate_info(0);
      ASSERT_TRUE(info);
      ASSERT_EQ(info->rails.size(), drivers == "shm" ? 1u : 2u);
      Recorder& target = *c.clients[1];
      const Stats before = c.cores[1]->stats();
      Status waited = Status::internal;
      // Only the waiter drives core 1, and only this thread core 0.
      std::thread waiter([&] {
        waited = c.cores[1]->wait_sleeping([&] { return target.parsed.size() == 2; },
                                           base::Deadline::after_ms(20000));
      });
      std::this_thread::sleep_for(std::chrono::milliseconds(idle_on ? 200 : 50));
      const Status sent = c.send(0, 1, second, reinterpret_cast<void*>(2));
      const auto deadline = base::Deadline::after_ms(20000);
      while (sent == Status::ok && c.clients[0]->finalized.size() < 2 && !deadline.expired())
        (void)c.cores[0]->progress();
      waiter.join();
      EXPECT_EQ(sent, Status::ok);
      EXPECT_EQ(waited, Status::ok);
      const Stats after = c.cores[1]->stats();
      const std::uint64_t slept = after.sleeps_on_all - before.sleeps_on_all;
      // Woken by a descriptor (the arrival), not at the end of a slice.
      const std::uint64_t woken = after.sleeps_on_all_woken - before.sleeps_on_all_woken;
      const std::uint64_t idle = after.idle_sleeps - before.idle_sleeps;
      if (idle_on) {
        EXPECT_GT(idle, 0u);
        EXPECT_GT(woken, 0u);
        // Ten 1 ms sleeps, then idle ones of up to 50 ms: a descriptor that
        // stayed readable (a busy loop) would count thousands.
        EXPECT_LT(idle, 200u);
        EXPECT_LT(slept, 200u);
      } else if (drivers == "shm") {
        EXPECT_EQ(slept, 0u);
        EXPECT_EQ(idle, 0u);
      } else {
        EXPECT_EQ(idle, 0u);
        EXPECT_GT(slept, 0u);
        EXPECT_GT(woken, 0u);
        // About 50 sleeps of at most 1 ms each.
        EXPECT_LT(slept, 2000u);
      }
    }
  }
}

// An idle core sleeps on the listeners too: a peer's first message, which
// opens the connection, ends the sleep. With a one-minute idle sleep and a
// 20 s deadline, a sleep the connection did not end fails the wait.
TEST(Interface, AFirstConnectionEndsAnIdleSleep) {
  config::ScopedSet long_sleep{"CORE_IDLE_SLEEP_MS", "60000"};
  for (const std::string drivers : {"shm", "tcp"}) {
    SCOPED_TRACE(drivers);
    Cluster c(2, drivers);
    ASSERT_EQ(c.status, Status::ok);
    Recorder& target = *c.clients[1];
    const Stats before = c.cores[1]->stats();
    Status waited = Status::internal;
    std::thread waiter([&] {
      waited = c.cores[1]->wait_sleeping([&] { return target.parsed.size() == 1; },
                                         base::Deadline::after_ms(20000));
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::vector<std::byte> first(8, std::byte{1});
    const Status sent = c.send(0, 1, first, reinterpret_cast<void*>(1));
    const auto deadline = base::Deadline::after_ms(20000);
    while (sent == Status::ok && c.clients[0]->finalized.empty() && !deadline.expired())
      (void)c.cores[0]->progress();
    waiter.join();
    EXPECT_EQ(sent, Status::ok);
    EXPECT_EQ(waited, Status::ok);
    EXPECT_GT(c.cores[1]->stats().idle_sleeps - before.idle_sleeps, 0u);
  }
}

TEST(Interface, SettingsGiveTheRealEagerLimit) {
  Cluster c(2, "self");
  ASSERT_EQ(c.status, Status::ok);
  const std::size_t limit = c.cores[0]->settings().eager_max;
  ASSERT_GT(limit, header_size);
  EXPECT_EQ(c.cores[0]->gate_info(1)->eager_limit, limit);
  auto fits = pattern(limit - header_size, 1);
  auto over = pattern(limit - header_size + 1, 2);
  const Stats before = c.cores[0]->stats();
  ASSERT_EQ(c.send(0, 1, fits, cookie(1)), Status::ok);
  ASSERT_EQ(c.send(0, 1, over, cookie(2)), Status::ok);
  ASSERT_TRUE(c.run_until([&] { return c.clients[1]->finalized.size() == 2; }));
  EXPECT_EQ(c.cores[0]->stats().eager_sent, before.eager_sent + 1);
  EXPECT_EQ(c.cores[0]->stats().rdv_sent, before.rdv_sent + 1);
  EXPECT_EQ(c.clients[1]->buffers[1], over);
}

// Each driver has its own eager limit: tcp's latency makes a rendezvous
// worth it only for larger messages than over self (or shm).
TEST(Interface, EagerLimitFollowsEachDriver) {
  Cluster over_self(2, "self");
  ASSERT_EQ(over_self.status, Status::ok);
  Cluster over_tcp(2, "tcp");
  if (over_tcp.status != Status::ok) GTEST_SKIP() << "no tcp here: " << to_string(over_tcp.status);
  const std::size_t self_limit = over_self.cores[0]->gate_info(1)->eager_limit;
  const std::size_t tcp_limit = over_tcp.cores[0]->gate_info(1)->eager_limit;
  EXPECT_GE(tcp_limit, std::size_t{64} << 10);
  EXPECT_GT(tcp_limit, self_limit);
  // A message between the two limits goes eager over tcp.
  auto mid = pattern(self_limit + 1000, 5);
  const Stats before = over_tcp.cores[0]->stats();
  ASSERT_EQ(over_tcp.send(0, 1, mid, cookie(1)), Status::ok);
  ASSERT_TRUE(over_tcp.run_until([&] { return over_tcp.clients[1]->finalized.size() == 1; }));
  EXPECT_EQ(over_tcp.cores[0]->stats().eager_sent, before.eager_sent + 1);
  EXPECT_EQ(over_tcp.cores[0]->stats().rdv_sent, before.rdv_sent);
  EXPECT_EQ(over_tcp.clients[1]->buffers[0], mid);
}

TEST(Interface, ConfiguredEagerLimitAppliesToEveryDriver) {
  config::ScopedSet limit{"CORE_EAGER_LIMIT", "4096"};
  Cluster c(2, "self");
  ASSERT_EQ(c.status, Status::ok);
  EXPECT_EQ(c.cores[0]->gate_info(1)->eager_limit,
            std::size_t{4096} + max_prefix - wire::FrameHeader::size);
}

TEST(Interface, DriversKeyOverridesCoreDrivers) {
  config::ScopedSet core_drivers{"CORE_DRIVERS", "fault:self"};
  {
    auto c = Core::create(0, 1);
    ASSERT_TRUE(c);
    EXPECT_EQ((*c)->settings().drivers, "fault:self");
  }
  config::ScopedSet drivers{"DRIVERS", "self"};
  auto c = Core::create(0, 1);
  ASSERT_TRUE(c);
  EXPECT_EQ((*c)->settings().drivers, "self");
}

}  // namespace
}  // namespace pier::core::test
