// Random workloads: sends both ways at random sizes and priorities, puts,
// gets, receive steps and extra buffers in random order. After every step
// the token invariant (held + outstanding == total) must hold on both ports;
// at the end every op completed ok once and every message arrived intact and
// in order per priority. A failure prints the seed.
#include <deque>
#include <random>

#include "harness.hpp"

namespace pier::port::test {
namespace {

struct Side {
  Driver* d = nullptr;
  std::uint32_t node = 0;
  unsigned port = 0;
  std::uint32_t next_seq[2] = {0, 0};      // next to send, per priority
  std::uint32_t expect_seq[2] = {0, 0};    // next to receive, per priority
  std::size_t checked = 0;                 // received messages verified
  std::deque<std::vector<std::byte>> out;  // sent data, alive until the end
};

std::vector<std::byte> message(std::uint32_t seq, std::uint8_t prio, std::size_t len) {
  auto v = pattern(len, seq);
  if (len >= 5) {
    std::memcpy(v.data(), &seq, 4);
    v[4] = std::byte{prio};
  }
  return v;
}

void check_received(Side& s) {
  for (; s.checked < s.d->received.size(); ++s.checked) {
    const Received& r = s.d->received[s.checked];
    if (r.data.size() < 5) continue;  // tiny messages carry no number
    std::uint32_t seq;
    std::memcpy(&seq, r.data.data(), 4);
    const auto prio = static_cast<std::uint8_t>(r.data[4]);
    ASSERT_EQ(prio, r.event.priority);
    EXPECT_EQ(seq, s.expect_seq[prio]) << "out of order at priority " << int{prio};
    s.expect_seq[prio] = seq + 1;
    EXPECT_EQ(r.data, message(seq, prio, r.data.size()));
  }
}

class Random : public ::testing::TestWithParam<std::string> {};

TEST_P(Random, TokenInvariantAndDeliveryHoldUnderRandomWorkloads) {
  for (unsigned seed : {1u, 2u, 3u}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    config::ScopedSet patient("PORT_SEND_TIMEOUT_MS", "30000");
    World w(2, GetParam());
    ASSERT_EQ(w.status, Status::ok);
    Driver da(*w.nodes[0], 1), db(*w.nodes[1], 2);
    da.reprovide = db.reprovide = true;
    Side a, b;
    a.d = &da;
    a.node = 0;
    a.port = 1;
    b.d = &db;
    b.node = 1;
    b.port = 2;
    const std::vector<std::size_t> lengths{0, 3, 100, 3000, 70000};
    std::deque<std::vector<std::byte>> bufs;
    for (Driver* d : {&da, &db})
      for (std::size_t len : lengths)
        for (Priority p : {Priority::low, Priority::high})
          for (int i = 0; i < 2; ++i) {
            bufs.push_back(buffer_for(min_size_for_length(len)));
            ASSERT_EQ(d->provide(bufs.back().data(), min_size_for_length(len), p), Status::ok);
          }
    std::vector<std::byte> window(1 << 16);
    ASSERT_EQ(db.port->register_memory(window.data(), window.size()), Status::ok);
    std::deque<std::vector<std::byte>> gets;
    std::mt19937 rng(seed);
    auto send = [&](Side& from, Side& to) {
      if (from.d->port->send_tokens_held() == 0) return;
      const auto p = static_cast<std::uint8_t>(rng() % 2);
      const std::size_t len = lengths[rng() % lengths.size()];
      from.out.push_back(message(from.next_seq[p], p, len));
      ASSERT_EQ(
          from.d->send(from.out.back().data(), len, static_cast<Priority>(p), to.node, to.port, 0),
          Status::ok);
      if (len >= 5) ++from.next_seq[p];
    };
    for (int step = 0; step < 1500; ++step) {
      switch (rng() % 8) {
        case 0:
        case 1:
          send(a, b);
          break;
        case 2:
          send(b, a);
          break;
        case 3:
          if (da.port->send_tokens_held() > 0) {
            a.out.push_back(pattern(1 + rng() % 4000, static_cast<unsigned>(step)));
            const auto off = rng() % (window.size() - a.out.back().size());
            const bool put = rng() % 2;
            if (!put) gets.emplace_back(a.out.back().size());
            Status s = put ? da.port->put(a.out.back().data(),
                                          reinterpret_cast<std::uint64_t>(window.data()) + off,
                                          a.out.back().size(), Priority::high, 1, 2,
                                          Driver::on_sent, nullptr)
                           : da.port->get(reinterpret_cast<std::uint64_t>(window.data()) + off,
                                          gets.back().data(), gets.back().size(), Priority::low, 1,
                                          2, Driver::on_sent, nullptr);
            ASSERT_EQ(s, Status::ok);
            ++da.outstanding_sends;
          }
          break;
        case 4:
          if (db.port->receive_tokens_held() > 0) {
            const std::size_t len = lengths[rng() % lengths.size()];
            bufs.push_back(buffer_for(min_size_for_length(len)));
            ASSERT_EQ(db.provide(bufs.back().data(), min_size_for_length(len),
                                 static_cast<Priority>(rng() % 2)),
                      Status::ok);
          }
          break;
        default:
          (rng() % 2 ? da : db).step();
          break;
      }
      da.check_tokens();
      db.check_tokens();
      if (::testing::Test::HasFatalFailure()) return;
    }
    ASSERT_TRUE(run_until(
        {&da, &db}, [&] { return da.outstanding_sends == 0 && db.outstanding_sends == 0; }, 30000))
        << "a: " << da.outstanding_sends << " b: " << db.outstanding_sends;
    for (auto& c : da.completions) EXPECT_EQ(c.status, Status::ok);
    for (auto& c : db.completions) EXPECT_EQ(c.status, Status::ok);
    check_received(a);
    check_received(b);
    EXPECT_EQ(da.port->send_tokens_held(), da.port->send_tokens());
    EXPECT_EQ(db.port->send_tokens_held(), db.port->send_tokens());
  }
}

INSTANTIATE_TEST_SUITE_P(Drivers, Random, ::testing::Values("self", "shm", "tcp"),
                         [](const auto& cell) { return cell.param; });

}  // namespace
}  // namespace pier::port::test
