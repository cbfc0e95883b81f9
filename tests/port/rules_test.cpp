// The GM rules G1-G10 (shared/REFERENCE.md §5.2), one test each, over two
// nodes in one process on self, shm and tcp (the driver is in the test name).
#include <set>

#include "harness.hpp"

namespace pier::port::test {
namespace {

class Rules : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    // Long enough never to fire by accident on a loaded machine; the tests
    // that expect a timeout reopen the receiving port with a short one.
    timeout_ = std::make_unique<config::ScopedSet>("PORT_SEND_TIMEOUT_MS", "30000");
    world_ = std::make_unique<World>(2, GetParam());
    ASSERT_EQ(world_->status, Status::ok);
    a_ = std::make_unique<Driver>(*world_->nodes[0], 1);
    b_ = std::make_unique<Driver>(*world_->nodes[1], 2);
    ASSERT_TRUE(a_->port && b_->port);
  }
  void TearDown() override {
    a_.reset();
    b_.reset();
    world_.reset();
    timeout_.reset();
  }
  /// Reopens b's port with a 300 ms send timeout.
  void short_timeout() {
    b_.reset();
    config::ScopedSet t("PORT_SEND_TIMEOUT_MS", "300");
    b_ = std::make_unique<Driver>(*world_->nodes[1], 2);
    ASSERT_TRUE(b_->port);
  }
  bool run(const std::function<bool()>& pred, int ms = 10000) {
    return run_until({a_.get(), b_.get()}, pred, ms);
  }

  std::unique_ptr<config::ScopedSet> timeout_;
  std::unique_ptr<World> world_;
  std::unique_ptr<Driver> a_, b_;
};

TEST_P(Rules, G1SendTokensComeBackOnlyWithTheCallback) {
  Port& p = *a_->port;
  const unsigned total = p.send_tokens();
  ASSERT_GT(total, 1u);
  EXPECT_EQ(p.send_tokens_held(), total);
  std::vector<std::vector<std::byte>> bufs;
  for (unsigned i = 0; i < total; ++i) {
    bufs.push_back(buffer_for(4));
    ASSERT_EQ(b_->provide(bufs.back().data(), 4, Priority::low), Status::ok);
  }
  char msg[8] = "token";
  for (unsigned i = 0; i < total; ++i) {
    ASSERT_EQ(a_->send(msg, sizeof msg, Priority::low, 1, 2, i), Status::ok);
    EXPECT_EQ(p.send_tokens_held(), total - i - 1);
    a_->check_tokens();
  }
  // Without a token the send is refused, not queued.
  EXPECT_EQ(p.send(msg, 4, sizeof msg, Priority::low, 1, 2, Driver::on_sent, nullptr),
            Status::no_resource);
  EXPECT_EQ(p.send_tokens_held(), 0u);
  ASSERT_TRUE(run([&] { return a_->completions.size() == total; }));
  EXPECT_EQ(p.send_tokens_held(), total);
  for (auto& c : a_->completions) EXPECT_EQ(c.status, Status::ok);
}

TEST_P(Rules, G2ReceiveTokensComeBackWithTheEventOrGoToPierThroughUnknown) {
  Port& q = *b_->port;
  const unsigned total = q.receive_tokens();
  std::vector<std::vector<std::byte>> bufs(total, buffer_for(4));
  for (unsigned i = 0; i < total; ++i)
    ASSERT_EQ(b_->provide(bufs[i].data(), 4, Priority::low), Status::ok);
  EXPECT_EQ(q.receive_tokens_held(), 0u);
  std::vector<std::byte> spare = buffer_for(4);
  EXPECT_EQ(q.provide_receive_buffer(spare.data(), 4, Priority::low, 0), Status::no_resource);
  char msg[8] = "abc";
  ASSERT_EQ(a_->send(msg, 8, Priority::low, 1, 2, 1), Status::ok);
  ASSERT_TRUE(run([&] { return b_->received.size() == 1; }));
  EXPECT_EQ(q.receive_tokens_held(), 1u);  // came back with the event
  // Handing a receive event to unknown() gives the token (and buffer) back.
  b_->reprovide = true;
  ASSERT_EQ(a_->send(msg, 8, Priority::low, 1, 2, 2), Status::ok);
  ASSERT_TRUE(run([&] { return b_->received.size() == 2; }));
  EXPECT_EQ(q.receive_tokens_held(), 1u);
  ASSERT_TRUE(run([&] { return a_->completions.size() == 2; }));
}

TEST_P(Rules, G3CallbacksAndAlarmsRunOnlyInsideUnknown) {
  std::vector<std::byte> buf = buffer_for(4);
  ASSERT_EQ(b_->provide(buf.data(), 4, Priority::low), Status::ok);
  char msg[4] = "cb";
  ASSERT_EQ(a_->send(msg, 4, Priority::low, 1, 2, 7), Status::ok);
  // Poll a's port without handing events to unknown(): no callback, no token.
  Port& p = *a_->port;
  auto deadline = base::Deadline::after_ms(10000);
  const Event* sent = nullptr;
  while (!sent && !deadline.expired()) {
    b_->step();
    const Event& e = p.receive();
    if (e.type == PIER_PORT_SENT_EVENT) sent = &e;
  }
  ASSERT_NE(sent, nullptr);
  EXPECT_TRUE(a_->completions.empty());
  EXPECT_EQ(p.send_tokens_held(), p.send_tokens() - 1);
  a_->handle(*sent);
  ASSERT_EQ(a_->completions.size(), 1u);
  EXPECT_EQ(a_->completions[0].id, 7u);
  EXPECT_EQ(p.send_tokens_held(), p.send_tokens());

  // Alarms: exactly one event per alarm, its callback inside unknown().
  static int fired = 0;
  fired = 0;
  Alarm one{}, two{}, canceled{};
  auto cb = [](void* ctx) { fired += static_cast<int>(reinterpret_cast<std::uintptr_t>(ctx)); };
  ASSERT_EQ(p.set_alarm(one, 1000, cb, reinterpret_cast<void*>(1)), Status::ok);
  ASSERT_EQ(p.set_alarm(two, 2000, cb, reinterpret_cast<void*>(10)), Status::ok);
  ASSERT_EQ(p.set_alarm(canceled, 1000, cb, reinterpret_cast<void*>(100)), Status::ok);
  p.cancel_alarm(canceled);
  ASSERT_TRUE(run([&] { return a_->alarm_events == 2; }));
  run_for({a_.get()}, 50);
  EXPECT_EQ(a_->alarm_events, 2u);
  EXPECT_EQ(fired, 11);
}

TEST_P(Rules, G4SizeClassesAndExactMatching) {
  EXPECT_EQ(min_size_for_length(0), 3u);
  EXPECT_EQ(min_size_for_length(1), 4u);
  EXPECT_EQ(min_size_for_length(8), 4u);
  EXPECT_EQ(min_size_for_length(9), 5u);
  EXPECT_EQ(min_size_for_length(4088), 12u);
  EXPECT_EQ(min_size_for_length(4089), 13u);
  EXPECT_EQ(max_length_for_size(12), 4088u);
  for (unsigned s = min_size; s <= 31; ++s) {
    EXPECT_EQ(min_size_for_length(max_length_for_size(s)), s);
    EXPECT_EQ(min_size_for_length(max_length_for_size(s) + 1), s + 1);
  }
  // A 100-byte message (size 7) waits while only neighbours are provided.
  std::vector<std::byte> small = buffer_for(6), big = buffer_for(8), high = buffer_for(7),
                         right = buffer_for(7);
  ASSERT_EQ(b_->provide(small.data(), 6, Priority::low, 6), Status::ok);
  ASSERT_EQ(b_->provide(big.data(), 8, Priority::low, 8), Status::ok);
  ASSERT_EQ(b_->provide(high.data(), 7, Priority::high, 77), Status::ok);
  auto msg = pattern(100, 4);
  ASSERT_EQ(a_->send(msg.data(), msg.size(), Priority::low, 1, 2, 1), Status::ok);
  run_for({a_.get(), b_.get()}, 50);
  EXPECT_TRUE(b_->received.empty());
  ASSERT_EQ(b_->provide(right.data(), 7, Priority::low, 7), Status::ok);
  ASSERT_TRUE(run([&] { return b_->received.size() == 1; }));
  const Event& e = b_->received[0].event;
  EXPECT_EQ(e.buffer, right.data());
  EXPECT_EQ(e.tag, 7);
  EXPECT_EQ(e.size, 7);
  EXPECT_EQ(e.length, 100u);
  EXPECT_EQ(b_->received[0].data, msg);
  // Sizes the port does not accept complete rejected.
  ASSERT_EQ(b_->port->set_acceptable_sizes(Priority::low, ~(std::uint64_t{1} << 9)), Status::ok);
  auto nine = pattern(300, 5);
  ASSERT_EQ(a_->send(nine.data(), nine.size(), Priority::low, 1, 2, 2), Status::ok);
  ASSERT_TRUE(run([&] { return a_->completions.size() == 2; }));
  EXPECT_EQ(a_->completions[1].status, Status::rejected);
  // Bad sizes are refused at the call.
  EXPECT_EQ(a_->port->send(msg.data(), 6, 100, Priority::low, 1, 2, Driver::on_sent, nullptr),
            Status::invalid_argument);
  EXPECT_EQ(b_->port->provide_receive_buffer(small.data(), 2, Priority::low, 0),
            Status::invalid_argument);
}

TEST_P(Rules, G5EachBufferServesOnceAndComesBackWithItsTag) {
  std::vector<std::vector<std::byte>> bufs;
  for (unsigned t = 0; t < 4; ++t) {
    bufs.push_back(buffer_for(12));
    ASSERT_EQ(
        b_->provide(bufs.back().data(), 12, Priority::low, static_cast<std::uint8_t>(t + 200)),
        Status::ok);
  }
  std::vector<std::vector<std::byte>> msgs;
  for (unsigned i = 0; i < 4; ++i) msgs.push_back(pattern(2049 + i, i));
  for (unsigned i = 0; i < 4; ++i)
    ASSERT_EQ(a_->send(msgs[i].data(), msgs[i].size(), Priority::low, 1, 2, i), Status::ok);
  ASSERT_TRUE(run([&] { return b_->received.size() == 4; }));
  std::set<void*> used;
  for (unsigned i = 0; i < 4; ++i) {
    const Event& e = b_->received[i].event;
    EXPECT_TRUE(used.insert(e.buffer).second) << "a buffer served twice";
    EXPECT_EQ(e.tag, 200 + i);  // FIFO per (size, priority)
    EXPECT_EQ(e.type, PIER_PORT_RECV_EVENT);
    EXPECT_EQ(e.message, e.buffer);
    EXPECT_EQ(b_->received[i].data, msgs[i]);
  }
  // A fifth message waits: every buffer was used once.
  ASSERT_EQ(a_->send(msgs[0].data(), msgs[0].size(), Priority::low, 1, 2, 9), Status::ok);
  run_for({a_.get(), b_.get()}, 30);
  EXPECT_EQ(b_->received.size(), 4u);
  ASSERT_EQ(b_->provide(bufs[0].data(), 12, Priority::low, 5), Status::ok);
  ASSERT_TRUE(run([&] { return b_->received.size() == 5; }));
  ASSERT_TRUE(run([&] { return a_->completions.size() == 5; }));
  // A small message is a FAST event: its bytes are in the event, not yet in
  // the buffer, until the client memorizes them.
  if (b_->port->fast_max() < 8) GTEST_SKIP() << "PORT_FAST_MAX below 8";
  std::vector<std::byte> small = buffer_for(4);
  ASSERT_EQ(b_->provide(small.data(), 4, Priority::low, 1), Status::ok);
  auto eight = pattern(8, 9);
  ASSERT_EQ(a_->send(eight.data(), 8, Priority::low, 1, 2, 10), Status::ok);
  ASSERT_TRUE(run([&] { return b_->received.size() == 6; }));
  const Event& e = b_->received[5].event;
  EXPECT_EQ(e.type, PIER_PORT_FAST_RECV_EVENT);
  EXPECT_EQ(e.buffer, small.data());
  EXPECT_EQ(b_->received[5].data, eight);
  EXPECT_NE(std::memcmp(small.data(), eight.data(), 8), 0);
}

TEST_P(Rules, G6OrderPerPriorityAndHighOvertakesLow) {
  constexpr unsigned n = 40;
  std::vector<std::vector<std::byte>> bufs;
  b_->reprovide = true;
  for (unsigned i = 0; i < 8; ++i) {
    bufs.push_back(buffer_for(4));
    ASSERT_EQ(b_->provide(bufs.back().data(), 4, Priority::low), Status::ok);
  }
  std::vector<std::uint32_t> payload(n);
  unsigned sent = 0;
  ASSERT_TRUE(run([&] {
    while (sent < n && a_->port->send_tokens_held() > 0) {
      payload[sent] = sent;
      EXPECT_EQ(a_->send(&payload[sent], 4, Priority::low, 1, 2, sent), Status::ok);
      ++sent;
    }
    return b_->received.size() == n;
  }));
  for (unsigned i = 0; i < n; ++i) {
    std::uint32_t v;
    std::memcpy(&v, b_->received[i].data.data(), 4);
    EXPECT_EQ(v, i);
  }
  // A low message without a buffer does not hold back a high one.
  b_->reprovide = false;
  ASSERT_TRUE(run([&] { return a_->completions.size() == n; }));
  std::vector<std::byte> hb = buffer_for(4);
  // No low buffer of size 9 is provided, so the low message waits.
  auto low = pattern(500, 1);
  auto high = pattern(8, 2);
  ASSERT_EQ(a_->send(low.data(), low.size(), Priority::low, 1, 2, 100), Status::ok);
  ASSERT_EQ(b_->provide(hb.data(), 4, Priority::high), Status::ok);
  ASSERT_EQ(a_->send(high.data(), high.size(), Priority::high, 1, 2, 101), Status::ok);
  const std::size_t before = b_->received.size();
  ASSERT_TRUE(run([&] { return b_->received.size() == before + 1; }));
  EXPECT_EQ(b_->received.back().event.priority, 1);
  EXPECT_EQ(b_->received.back().data, high);
  std::vector<std::byte> lb = buffer_for(9);
  ASSERT_EQ(b_->provide(lb.data(), 9, Priority::low), Status::ok);
  ASSERT_TRUE(run([&] { return b_->received.size() == before + 2; }));
  EXPECT_EQ(b_->received.back().data, low);
  ASSERT_TRUE(run([&] { return a_->completions.size() == n + 2; }));
}

TEST_P(Rules, G7EverySizeArrivesIntactAndCompletesOnce) {
  const std::vector<std::size_t> lengths{0, 1, 7, 100, 4088, 40000, 1 << 20, 3 << 20};
  std::vector<std::vector<std::byte>> bufs, msgs;
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    const unsigned s = min_size_for_length(lengths[i]);
    bufs.push_back(buffer_for(s));
    ASSERT_EQ(b_->provide(bufs.back().data(), s, Priority::high), Status::ok);
    msgs.push_back(pattern(lengths[i], static_cast<unsigned>(i)));
    ASSERT_EQ(a_->send(msgs[i].data(), msgs[i].size(), Priority::high, 1, 2, i), Status::ok);
  }
  ASSERT_TRUE(run(
      [&] {
        return b_->received.size() == lengths.size() && a_->completions.size() == lengths.size();
      },
      30000));
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    EXPECT_EQ(b_->received[i].data, msgs[i]) << "length " << lengths[i];
    EXPECT_EQ(a_->completions[i].id, i);
    EXPECT_EQ(a_->completions[i].status, Status::ok);
  }
}

// Sends and puts of up to 64 bytes leave from a copy made at the call, in
// a staging slot of the port (no core region per op): every length up to and
// past that limit arrives intact, also with many in flight at once (every
// slot in use and given back again), and the client's bytes are read once.
TEST_P(Rules, G7SmallSendsAndPutsOfEveryLengthArriveIntact) {
  constexpr std::size_t max_len = 72, batch = 24;
  std::vector<std::vector<std::byte>> bufs, msgs;
  for (std::size_t len = 1; len <= max_len; ++len) {
    bufs.push_back(buffer_for(min_size_for_length(len)));
    msgs.push_back(pattern(len, static_cast<unsigned>(len)));
  }
  for (std::size_t first = 0; first < max_len; first += batch) {
    const std::size_t end = std::min(max_len, first + batch);
    for (std::size_t i = first; i < end; ++i) {
      ASSERT_EQ(b_->provide(bufs[i].data(), min_size_for_length(i + 1), Priority::low), Status::ok);
      ASSERT_EQ(a_->send(msgs[i].data(), msgs[i].size(), Priority::low, 1, 2, i), Status::ok);
    }
    ASSERT_TRUE(run([&] { return b_->received.size() == end && a_->completions.size() == end; }));
  }
  for (std::size_t i = 0; i < max_len; ++i) {
    EXPECT_EQ(b_->received[i].data, msgs[i]) << "length " << i + 1;
    EXPECT_EQ(a_->completions[i].id, i);
    EXPECT_EQ(a_->completions[i].status, Status::ok);
  }
  std::vector<std::byte> target(max_len * 80, std::byte{0});
  ASSERT_EQ(b_->port->register_memory(target.data(), target.size()), Status::ok);
  const auto base = reinterpret_cast<std::uint64_t>(target.data());
  for (std::size_t first = 0; first < max_len; first += batch) {
    const std::size_t end = std::min(max_len, first + batch);
    for (std::size_t i = first; i < end; ++i) {
      ASSERT_EQ(a_->port->put(msgs[i].data(), base + i * 80, msgs[i].size(), Priority::high, 1, 2,
                              Driver::on_sent, Driver::id(max_len + i)),
                Status::ok);
      ++a_->outstanding_sends;
    }
    ASSERT_TRUE(run([&] { return a_->completions.size() == max_len + end; }));
  }
  for (std::size_t i = 0; i < max_len; ++i) {
    EXPECT_EQ(a_->completions[max_len + i].status, Status::ok);
    EXPECT_EQ(std::memcmp(target.data() + i * 80, msgs[i].data(), msgs[i].size()), 0)
        << "put of length " << i + 1;
  }
  EXPECT_EQ(a_->port->send_tokens_held(), a_->port->send_tokens());
  ASSERT_EQ(b_->port->deregister_memory(target.data(), target.size()), Status::ok);
}

/// G8: request/reply, requests on low, replies on high, bounded buffers on
/// both sides, many more messages than buffers or tokens: never deadlocks.
TEST_P(Rules, G8RequestReplyWithBoundedBuffersNeverDeadlocks) {
  constexpr unsigned requests = 300;
  std::vector<std::vector<std::byte>> abuf, bbuf;
  a_->reprovide = b_->reprovide = true;
  for (unsigned i = 0; i < 2; ++i) {
    abuf.push_back(buffer_for(4));
    ASSERT_EQ(a_->provide(abuf.back().data(), 4, Priority::high), Status::ok);
    bbuf.push_back(buffer_for(4));
    ASSERT_EQ(b_->provide(bbuf.back().data(), 4, Priority::low), Status::ok);
  }
  unsigned issued = 0, replied = 0;
  std::vector<std::uint32_t> req(requests), rep(requests);
  std::size_t seen = 0;
  ASSERT_TRUE(run(
      [&] {
        while (issued < requests && a_->port->send_tokens_held() > 0) {
          req[issued] = issued;
          EXPECT_EQ(a_->send(&req[issued], 4, Priority::low, 1, 2, issued), Status::ok);
          ++issued;
        }
        // b answers each request it got, when it holds a send token.
        while (seen < b_->received.size() && b_->port->send_tokens_held() > 0) {
          std::memcpy(&rep[replied], b_->received[seen].data.data(), 4);
          EXPECT_EQ(b_->send(&rep[replied], 4, Priority::high, 0, 1, replied), Status::ok);
          ++replied;
          ++seen;
        }
        return a_->received.size() == requests;
      },
      30000));
  for (unsigned i = 0; i < requests; ++i) {
    std::uint32_t v;
    std::memcpy(&v, a_->received[i].data.data(), 4);
    EXPECT_EQ(v, i);
  }
  for (auto& c : a_->completions) EXPECT_EQ(c.status, Status::ok);
}

TEST_P(Rules, G8SenderWithoutMatchingBufferTimesOut) {
  short_timeout();
  char msg[16] = "nobody listens";
  ASSERT_EQ(a_->send(msg, sizeof msg, Priority::low, 1, 2, 1), Status::ok);
  ASSERT_TRUE(run([&] { return a_->completions.size() == 1; }));
  EXPECT_EQ(a_->completions[0].status, Status::timeout);
}

TEST_P(Rules, G9BlockingReceivesWaitThenReturn) {
  Port& p = *a_->port;
  // Idle: a NO_RECV event once the timeout passed.
  EXPECT_EQ(p.blocking_receive(20).type, PIER_PORT_NO_RECV_EVENT);
  EXPECT_EQ(p.blocking_receive_no_spin(20).type, PIER_PORT_NO_RECV_EVENT);
  EXPECT_EQ(p.receive().type, PIER_PORT_NO_RECV_EVENT);
  EXPECT_FALSE(p.receive_pending());
  // An alarm wakes both forms.
  Alarm al{};
  for (bool spin : {true, false}) {
    ASSERT_EQ(p.set_alarm(al, 3000, nullptr, nullptr), Status::ok);
    const Event& e = spin ? p.blocking_receive(10000) : p.blocking_receive_no_spin(10000);
    EXPECT_EQ(e.type, PIER_PORT_ALARM_EVENT);
    p.unknown(e);
  }
  // A message wakes them; peek sees it first.
  std::vector<std::byte> buf = buffer_for(4);
  ASSERT_EQ(b_->provide(buf.data(), 4, Priority::high), Status::ok);
  char msg[4] = "hi";
  ASSERT_EQ(a_->send(msg, 4, Priority::high, 1, 2, 1), Status::ok);
  std::uint32_t sender = 99;
  auto deadline = base::Deadline::after_ms(10000);
  int type = 0;
  while ((type = b_->port->next_event_peek(&sender)) == 0 && !deadline.expired()) a_->step();
  EXPECT_EQ(type, PIER_PORT_FAST_HIGH_RECV_EVENT);
  EXPECT_EQ(sender, 0u);
  EXPECT_TRUE(b_->port->receive_pending());
  const Event& e = b_->port->blocking_receive_no_spin(10000);
  EXPECT_EQ(e.type, PIER_PORT_FAST_HIGH_RECV_EVENT);
  EXPECT_EQ(std::memcmp(e.message, msg, 4), 0);
  b_->handle(e);
  ASSERT_TRUE(run([&] { return a_->completions.size() == 1; }));
}

TEST_P(Rules, G10FailureDisablesUntilResumeOrDrop) {
  // A send to a port that is not open fails, closed; sending on that
  // connection stops until one resume per failure.
  char msg[8] = "x";
  ASSERT_EQ(a_->send(msg, 8, Priority::low, 1, 9, 1), Status::ok);
  ASSERT_TRUE(run([&] { return a_->completions.size() == 1; }));
  EXPECT_EQ(a_->completions[0].status, Status::closed);
  ASSERT_EQ(a_->send(msg, 8, Priority::low, 1, 9, 2), Status::ok);  // queued, not sent
  run_for({a_.get(), b_.get()}, 30);
  EXPECT_EQ(a_->completions.size(), 1u);
  ASSERT_EQ(a_->port->resume_sending(Priority::low, 1, 9, Driver::on_sent, Driver::id(3)),
            Status::ok);
  ++a_->outstanding_sends;
  EXPECT_EQ(a_->port->resume_sending(Priority::low, 1, 9, Driver::on_sent, nullptr),
            Status::invalid_argument);  // one per reported failure
  ASSERT_TRUE(run([&] { return a_->completions.size() == 3; }));
  // The resume succeeds; the queued send went out and failed again.
  std::map<std::uintptr_t, Status> by_id;
  for (auto& c : a_->completions) by_id[c.id] = c.status;
  EXPECT_EQ(by_id[3], Status::ok);
  EXPECT_EQ(by_id[2], Status::closed);
  // drop_sends completes every queued send dropped.
  ASSERT_EQ(a_->send(msg, 8, Priority::low, 1, 9, 4), Status::ok);
  ASSERT_EQ(a_->send(msg, 8, Priority::low, 1, 9, 5), Status::ok);
  ASSERT_EQ(a_->port->drop_sends(Priority::low, 1, 9, Driver::on_sent, Driver::id(6)), Status::ok);
  ++a_->outstanding_sends;
  ASSERT_TRUE(run([&] { return a_->completions.size() == 6; }));
  for (auto& c : a_->completions) by_id[c.id] = c.status;
  EXPECT_EQ(by_id[4], Status::dropped);
  EXPECT_EQ(by_id[5], Status::dropped);
  EXPECT_EQ(by_id[6], Status::ok);
  // Other connections were never disabled; this one works again.
  std::vector<std::byte> buf = buffer_for(4);
  ASSERT_EQ(b_->provide(buf.data(), 4, Priority::low), Status::ok);
  ASSERT_EQ(a_->send(msg, 8, Priority::low, 1, 2, 7), Status::ok);
  ASSERT_TRUE(run([&] { return a_->completions.size() == 7; }));
  EXPECT_EQ(a_->completions.back().status, Status::ok);
}

TEST_P(Rules, G10TimedOutSendHoldsTheRestUntilResume) {
  short_timeout();
  // Two sends; the first finds no buffer and times out. The second was sent
  // behind it: it waits at the target while the connection is disabled,
  // then arrives after resume_sending.
  auto m1 = pattern(100, 1), m2 = pattern(8, 2);
  ASSERT_EQ(a_->send(m1.data(), m1.size(), Priority::low, 1, 2, 1), Status::ok);
  ASSERT_EQ(a_->send(m2.data(), m2.size(), Priority::low, 1, 2, 2), Status::ok);
  std::vector<std::byte> b4 = buffer_for(4);
  ASSERT_EQ(b_->provide(b4.data(), 4, Priority::low), Status::ok);
  ASSERT_TRUE(run([&] { return a_->completions.size() == 1; }));
  EXPECT_EQ(a_->completions[0].status, Status::timeout);
  run_for({a_.get(), b_.get()}, 30);
  EXPECT_TRUE(b_->received.empty());
  ASSERT_EQ(a_->port->resume_sending(Priority::low, 1, 2, Driver::on_sent, Driver::id(3)),
            Status::ok);
  ++a_->outstanding_sends;
  ASSERT_TRUE(run([&] { return a_->completions.size() == 3 && b_->received.size() == 1; }));
  EXPECT_EQ(b_->received[0].data, m2);
}

TEST_P(Rules, G10DropSendsDropsWhatWaitsAtTheTarget) {
  short_timeout();
  // m1 finds no buffer and times out; m2 and m3 wait behind it at the
  // target; drop_sends completes both dropped there; the connection works.
  auto m1 = pattern(100, 1), m2 = pattern(8, 2), m3 = pattern(8, 3);
  ASSERT_EQ(a_->send(m1.data(), m1.size(), Priority::high, 1, 2, 1), Status::ok);
  ASSERT_EQ(a_->send(m2.data(), m2.size(), Priority::high, 1, 2, 2), Status::ok);
  ASSERT_EQ(a_->send(m3.data(), m3.size(), Priority::high, 1, 2, 3), Status::ok);
  ASSERT_TRUE(run([&] { return a_->completions.size() == 1; }));
  EXPECT_EQ(a_->completions[0].status, Status::timeout);
  std::vector<std::byte> b4 = buffer_for(4);
  ASSERT_EQ(b_->provide(b4.data(), 4, Priority::high), Status::ok);
  run_for({a_.get(), b_.get()}, 30);
  EXPECT_TRUE(b_->received.empty());  // held: the stream is suspended
  ASSERT_EQ(a_->port->drop_sends(Priority::high, 1, 2, Driver::on_sent, Driver::id(4)), Status::ok);
  ++a_->outstanding_sends;
  ASSERT_TRUE(run([&] { return a_->completions.size() == 4; }));
  EXPECT_EQ(a_->completions[1].status, Status::dropped);
  EXPECT_EQ(a_->completions[2].status, Status::dropped);
  EXPECT_EQ(a_->completions[3].id, 4u);
  EXPECT_EQ(a_->completions[3].status, Status::ok);
  EXPECT_TRUE(b_->received.empty());
  ASSERT_EQ(a_->send(m3.data(), m3.size(), Priority::high, 1, 2, 5), Status::ok);
  ASSERT_TRUE(run([&] { return a_->completions.size() == 5 && b_->received.size() == 1; }));
  EXPECT_EQ(a_->completions[4].status, Status::ok);
  EXPECT_EQ(b_->received[0].data, m3);
}

TEST_P(Rules, G10APortClosedWhileDisabledLeavesNothingForItsSuccessor) {
  short_timeout();
  // m1 times out; m2 and m3 wait behind it at the target. The port closes
  // without resume or drop and is opened again with its number: the target
  // lets go of what the old port left (closing drops it), so the new port's
  // first send lands at once, and the answers meant for the old port (m2
  // and m3 dropped) complete nothing of the new one.
  auto m1 = pattern(100, 1), m2 = pattern(8, 2), m3 = pattern(8, 3), m4 = pattern(8, 4);
  ASSERT_EQ(a_->send(m1.data(), m1.size(), Priority::high, 1, 2, 1), Status::ok);
  ASSERT_EQ(a_->send(m2.data(), m2.size(), Priority::high, 1, 2, 2), Status::ok);
  ASSERT_EQ(a_->send(m3.data(), m3.size(), Priority::high, 1, 2, 3), Status::ok);
  ASSERT_TRUE(run([&] { return a_->completions.size() == 1; }));
  EXPECT_EQ(a_->completions[0].status, Status::timeout);
  std::vector<std::byte> b4a = buffer_for(4), b4b = buffer_for(4);
  ASSERT_EQ(b_->provide(b4a.data(), 4, Priority::high), Status::ok);
  ASSERT_EQ(b_->provide(b4b.data(), 4, Priority::high), Status::ok);
  run_for({a_.get(), b_.get()}, 30);
  EXPECT_TRUE(b_->received.empty());  // held: the stream is suspended
  EXPECT_EQ(world_->cores[1]->stats().recv_msgs_live, 2u);
  a_.reset();
  // The drop the closing port sent releases them (and their core states).
  // Node 0 has no open port now: its core is driven by hand.
  auto deadline = base::Deadline::after_ms(5000);
  while (world_->cores[1]->stats().recv_msgs_live != 0 && !deadline.expired()) {
    (void)world_->cores[0]->progress();
    b_->step();
  }
  EXPECT_EQ(world_->cores[1]->stats().recv_msgs_live, 0u);
  a_ = std::make_unique<Driver>(*world_->nodes[0], 1);
  ASSERT_TRUE(a_->port);
  ASSERT_EQ(a_->send(m4.data(), m4.size(), Priority::high, 1, 2, 5), Status::ok);
  ASSERT_TRUE(run([&] { return a_->completions.size() == 1 && b_->received.size() == 1; }));
  EXPECT_EQ(a_->completions[0].id, 5u);
  EXPECT_EQ(a_->completions[0].status, Status::ok);
  EXPECT_EQ(b_->received[0].data, m4);
  run_for({a_.get(), b_.get()}, 100);
  EXPECT_EQ(a_->completions.size(), 1u);
  EXPECT_EQ(b_->received.size(), 1u);
}

TEST_P(Rules, PutAndGetReachOnlyRegisteredMemory) {
  std::vector<std::byte> target(4096, std::byte{0});
  ASSERT_EQ(b_->port->register_memory(target.data(), target.size()), Status::ok);
  auto data = pattern(1000, 3);
  const auto base = reinterpret_cast<std::uint64_t>(target.data());
  ASSERT_EQ(a_->port->put(data.data(), base + 100, data.size(), Priority::low, 1, 2,
                          Driver::on_sent, Driver::id(1)),
            Status::ok);
  ++a_->outstanding_sends;
  ASSERT_TRUE(run([&] { return a_->completions.size() == 1; }));
  EXPECT_EQ(a_->completions[0].status, Status::ok);
  EXPECT_EQ(std::memcmp(target.data() + 100, data.data(), data.size()), 0);
  std::vector<std::byte> back(1000);
  ASSERT_EQ(a_->port->get(base + 100, back.data(), back.size(), Priority::low, 1, 2,
                          Driver::on_sent, Driver::id(2)),
            Status::ok);
  ++a_->outstanding_sends;
  ASSERT_TRUE(run([&] { return a_->completions.size() == 2; }));
  EXPECT_EQ(a_->completions[1].status, Status::ok);
  EXPECT_EQ(back, data);
  // Outside the registered range: refused, and the connection is disabled.
  ASSERT_EQ(a_->port->put(data.data(), base + 4000, data.size(), Priority::high, 1, 2,
                          Driver::on_sent, Driver::id(3)),
            Status::ok);
  ++a_->outstanding_sends;
  ASSERT_TRUE(run([&] { return a_->completions.size() == 3; }));
  EXPECT_EQ(a_->completions[2].status, Status::permission_denied);
  ASSERT_EQ(b_->port->deregister_memory(target.data(), target.size()), Status::ok);
}

INSTANTIATE_TEST_SUITE_P(Drivers, Rules, ::testing::Values("self", "shm", "tcp"),
                         [](const auto& cell) { return cell.param; });

}  // namespace
}  // namespace pier::port::test

namespace pier::port::test {
namespace {

/// More sends held behind a timed-out one than the core has credits for
/// that priority: the resume (itself a message) must still get through, and
/// everything held must arrive once buffers come.
TEST(RulesCredits, G10ResumeGetsThroughWhenHeldSendsTakeEveryCredit) {
  config::ScopedSet credits("CORE_CREDITS", "8");
  config::ScopedSet timeout("PORT_SEND_TIMEOUT_MS", "300");
  World world(2, "self");
  ASSERT_EQ(world.status, Status::ok);
  Driver a(*world.nodes[0], 1), b(*world.nodes[1], 2);
  ASSERT_TRUE(a.port && b.port);
  std::vector<std::vector<std::byte>> messages;
  for (std::uintptr_t i = 0; i < 12; ++i) {
    messages.push_back(pattern(100, static_cast<unsigned>(i)));
    ASSERT_EQ(a.send(messages.back().data(), 100, Priority::low, 1, 2, i), Status::ok);
  }
  ASSERT_TRUE(run_until({&a, &b}, [&] { return a.completions.size() == 1; }));
  EXPECT_EQ(a.completions[0].status, Status::timeout);
  std::vector<std::vector<std::byte>> buffers(11, buffer_for(7));
  for (auto& buf : buffers) ASSERT_EQ(b.provide(buf.data(), 7, Priority::low), Status::ok);
  ASSERT_EQ(a.port->resume_sending(Priority::low, 1, 2, Driver::on_sent, Driver::id(99)),
            Status::ok);
  ++a.outstanding_sends;
  ASSERT_TRUE(run_until(
      {&a, &b}, [&] { return a.completions.size() == 13; }, 10000))
      << a.completions.size() << " completions, " << b.received.size() << " received";
  EXPECT_EQ(b.received.size(), 11u);
  for (auto& c : a.completions) EXPECT_TRUE(c.status == Status::ok || c.id == 0);
}

/// The same with the default credits: two ports of one node each keep 20
/// sends to one target port that has no buffer for them. Whatever the target
/// holds behind the two failures, both resumes get through.
TEST(RulesCredits, G10TwoPortsResumeWithDefaultCredits) {
  config::ScopedSet timeout("PORT_SEND_TIMEOUT_MS", "300");
  World world(2, "self");
  ASSERT_EQ(world.status, Status::ok);
  Driver a(*world.nodes[0], 1), c(*world.nodes[0], 3), b(*world.nodes[1], 2);
  ASSERT_TRUE(a.port && b.port && c.port);
  std::vector<std::byte> message = pattern(100, 1);
  for (std::uintptr_t i = 0; i < 20; ++i) {
    ASSERT_EQ(a.send(message.data(), 100, Priority::low, 1, 2, i), Status::ok);
    ASSERT_EQ(c.send(message.data(), 100, Priority::low, 1, 2, i), Status::ok);
  }
  ASSERT_TRUE(run_until({&a, &b, &c},
                        [&] { return a.completions.size() == 1 && c.completions.size() == 1; }));
  std::vector<std::vector<std::byte>> buffers(38, buffer_for(7));
  for (auto& buf : buffers) ASSERT_EQ(b.provide(buf.data(), 7, Priority::low), Status::ok);
  for (Driver* d : {&a, &c}) {
    ASSERT_EQ(d->port->resume_sending(Priority::low, 1, 2, Driver::on_sent, Driver::id(99)),
              Status::ok);
    ++d->outstanding_sends;
  }
  ASSERT_TRUE(run_until({&a, &b, &c},
                        [&] { return a.completions.size() == 21 && c.completions.size() == 21; }))
      << a.completions.size() << " and " << c.completions.size() << " completions, "
      << b.received.size() << " received";
  EXPECT_EQ(b.received.size(), 38u);
}

}  // namespace
}  // namespace pier::port::test
