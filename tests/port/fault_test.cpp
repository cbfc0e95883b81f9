// The port layer over the fault driver: packets reordered, duplicated and
// delayed below the core change nothing above it (G6, G7); a link that dies
// makes sends complete unreachable, exactly one reported failure per
// connection, and resume/drop give every token back (G10).
#include <map>

#include "harness.hpp"

namespace pier::port::test {
namespace {

struct Plan {
  explicit Plan(const char* text) : plan_("FAULT_PLAN", text) {}
  config::ScopedSet plan_;
};

TEST(PortFault, ReorderDuplicateAndDelayBelowTheCoreKeepOrderAndExactlyOnce) {
  Plan plan("reorder=0.1,dup=0.1,delay=0.05,delay_us=200,seed=11");
  World w(2, "fault:self");
  ASSERT_EQ(w.status, Status::ok);
  Driver a(*w.nodes[0], 1), b(*w.nodes[1], 2);
  b.reprovide = true;
  std::vector<std::vector<std::byte>> bufs;
  for (Priority p : {Priority::low, Priority::high})
    for (int i = 0; i < 4; ++i) {
      bufs.push_back(buffer_for(4));
      ASSERT_EQ(b.provide(bufs.back().data(), 4, p), Status::ok);
    }
  constexpr unsigned n = 400;
  std::vector<std::uint32_t> vals(n);
  unsigned sent = 0;
  ASSERT_TRUE(run_until(
      {&a, &b},
      [&] {
        while (sent < n && a.port->send_tokens_held() > 0) {
          vals[sent] = sent;
          EXPECT_EQ(a.send(&vals[sent], 4, static_cast<Priority>(sent % 3 == 0), 1, 2, sent),
                    Status::ok);
          ++sent;
        }
        return a.completions.size() == n && b.received.size() == n;
      },
      60000));
  std::uint32_t last[2] = {0, 0};
  bool first[2] = {true, true};
  for (auto& r : b.received) {
    std::uint32_t v;
    std::memcpy(&v, r.data.data(), 4);
    const int p = r.event.priority;
    EXPECT_EQ(p, v % 3 == 0 ? 1 : 0);
    if (!first[p]) {
      EXPECT_GT(v, last[p]);
    }
    first[p] = false;
    last[p] = v;
  }
  std::map<std::uintptr_t, int> once;
  for (auto& c : a.completions) {
    EXPECT_EQ(c.status, Status::ok);
    EXPECT_EQ(++once[c.id], 1);
  }
}

TEST(PortFault, DeadLinkFailsSendsUnreachableOncePerConnection) {
  for (const char* when : {"death@5", "death@30", "death@80"}) {
    SCOPED_TRACE(when);
    Plan plan(when);
    World w(2, "fault:self");
    ASSERT_EQ(w.status, Status::ok);
    Driver a(*w.nodes[0], 1), b(*w.nodes[1], 2);
    b.reprovide = true;
    std::vector<std::vector<std::byte>> bufs;
    for (Priority p : {Priority::low, Priority::high})
      for (int i = 0; i < 4; ++i) {
        bufs.push_back(buffer_for(4));
        ASSERT_EQ(b.provide(bufs.back().data(), 4, p), Status::ok);
      }
    std::uint32_t v = 7;
    unsigned issued = 0;
    // Send on both priorities until the link dies and each connection has
    // reported its failure.
    std::map<int, int> failures;
    auto count = [&] {
      failures.clear();
      for (auto& c : a.completions)
        if (c.status != Status::ok && c.status != Status::dropped) {
          EXPECT_EQ(c.status, Status::broken);
          ++failures[static_cast<int>(c.id % 2)];
        }
      return failures[0] == 1 && failures[1] == 1;
    };
    ASSERT_TRUE(run_until(
        {&a, &b},
        [&] {
          while (a.port->send_tokens_held() > 2 && issued < 400) {  // keep two for resume, drop
            EXPECT_EQ(a.send(&v, 4, static_cast<Priority>(issued % 2), 1, 2, issued), Status::ok);
            ++issued;
          }
          return count();
        },
        30000));
    // Everything else waits for resume or drop: nothing more fails on its own.
    run_for({&a, &b}, 30);
    EXPECT_TRUE(count());
    // Low: resume, which re-sends what waited, and fails again (one more).
    ASSERT_EQ(a.port->resume_sending(Priority::low, 1, 2, Driver::on_sent, Driver::id(1000)),
              Status::ok);
    ++a.outstanding_sends;
    // High: drop, which completes everything queued as dropped.
    ASSERT_EQ(a.port->drop_sends(Priority::high, 1, 2, Driver::on_sent, Driver::id(1001)),
              Status::ok);
    ++a.outstanding_sends;
    ASSERT_TRUE(run_until({&a, &b}, [&] {
      return std::any_of(a.completions.begin(), a.completions.end(),
                         [](const Completion& c) { return c.id == 1000; }) &&
             std::any_of(a.completions.begin(), a.completions.end(),
                         [](const Completion& c) { return c.id == 1001; });
    }));
    // Keep answering each failure with a drop until every token is back.
    ASSERT_TRUE(run_until({&a, &b}, [&] {
      count();
      if (failures[0] > 1 && a.port->send_tokens_held() > 0 &&
          a.port->drop_sends(Priority::low, 1, 2, Driver::on_sent, Driver::id(2000)) == Status::ok)
        ++a.outstanding_sends;
      return a.outstanding_sends == 0;
    }));
    EXPECT_EQ(a.port->send_tokens_held(), a.port->send_tokens());
    for (auto& c : a.completions)
      if (c.id >= 1000) {
        EXPECT_EQ(c.status, Status::ok) << c.id;
      }
  }
}

TEST(PortFault, AMessageLostMidTransferIsNeverHandedOut) {
  // A large message travels in several packets (rendezvous), and the link
  // dies after the first few. A receive that took a buffer but whose data
  // never all landed is no event: the buffer stays provided (its token with
  // pier), as if nothing had come. Before, the event came with the full
  // length over bytes that never arrived.
  const auto msg = pattern(256 * 1024, 3);
  const unsigned size = min_size_for_length(msg.size());
  int withdrawn = 0;
  for (int at = 1; at <= 4; ++at) {
    const std::string when = "track=large,death@" + std::to_string(at);
    SCOPED_TRACE(when);
    Plan plan(when.c_str());
    World w(2, "fault:self");
    ASSERT_EQ(w.status, Status::ok);
    Driver a(*w.nodes[0], 1), b(*w.nodes[1], 2);
    auto buf = buffer_for(size);
    ASSERT_EQ(b.provide(buf.data(), size, Priority::low), Status::ok);
    ASSERT_EQ(a.send(msg.data(), msg.size(), Priority::low, 1, 2, 1), Status::ok);
    ASSERT_TRUE(run_until(
        {&a, &b}, [&] { return a.completions.size() == 1; }, 20000));
    run_for({&a, &b}, 20);
    for (const Received& r : b.received) {
      EXPECT_EQ(r.event.length, msg.size());
      EXPECT_TRUE(r.data == msg) << "a receive event over bytes that never landed";
    }
    if (b.received.empty() && a.completions[0].status != Status::ok) ++withdrawn;
    b.check_tokens();
  }
  EXPECT_GT(withdrawn, 0) << "no death point fell mid-transfer: the test shows nothing";
}

}  // namespace
}  // namespace pier::port::test
