// Unit tests of the fault driver, end to end: every fault kind observed over
// an inner driver (the in-test loopback driver, and self, shm and tcp when
// they are built), determinism, waits and threads.
#include <gtest/gtest.h>

#include <pier/driver.hpp>

#include "base/config.hpp"
#include "base/log.hpp"
#include "drivers/fault/fault.hpp"
#include "loopback.hpp"

#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <string>
#include <thread>

namespace pier::drivers::fault {
namespace {

using driver::Clock;
using driver::Packet;
using namespace std::chrono_literals;

driver::Deadline soon() {
  return Clock::now() + 10s;
}

std::unique_ptr<driver::Context> make_inner(const std::string& name) {
  if (name == "loop") return std::make_unique<testing::LoopContext>();
  for (const driver::DriverEntry& e : driver::builtin_drivers()) {
    if (e.name != name) continue;
    Result<std::unique_ptr<driver::Context>> c = e.make("");
    return c ? std::move(*c) : nullptr;
  }
  return nullptr;
}

/// One message kept at a stable address until its send completes.
struct Msg {
  std::string bytes;
  ::iovec iov{};
  Packet pkt;
};

// --- end to end over an inner driver -------------------------------------------

class FaultOver : public ::testing::TestWithParam<std::string> {
 protected:
  /// Builds two fault contexts over the inner driver, the sender (a) with
  /// `plan`, the receiver (b) with none, and connects a small-track pair.
  void SetUp() override {
    auto probe = make_inner(GetParam());
    if (!probe) GTEST_SKIP() << "driver " << GetParam() << " is not built";
    inner_caps_ = probe->properties({}).value().caps;
  }

  void start(Plan plan, driver::Track track = driver::Track::small) {
    auto inner_a = make_inner(GetParam());
    auto inner_b = make_inner(GetParam());
    ASSERT_TRUE(inner_a && inner_b);
    a_ = wrap(std::move(inner_a), std::move(plan));
    b_ = wrap(std::move(inner_b), Plan{});
    // The wrapped contexts are fresh: properties() runs once on each.
    Result<driver::Properties> pa = a_->properties({});
    ASSERT_TRUE(pa.has_value());
    caps_ = pa->caps;
    ASSERT_TRUE(b_->properties({}).has_value());
    Result<std::vector<std::byte>> ua = a_->init();
    Result<std::vector<std::byte>> ub = b_->init();
    ASSERT_TRUE(ua && ub);
    url_a_ = *ua;
    url_b_ = *ub;
    track_ = track;
    ASSERT_TRUE(open_pair());
  }

  bool open_pair() {
    auto ia = a_->open_instance(track_);
    auto ib = b_->open_instance(track_);
    if (!ia || !ib) return false;
    ia_ = std::move(*ia);
    ib_ = std::move(*ib);
    if (!is_success(ib_->connect_async(url_a_))) return false;
    const Status sa = ia_->connect_async(url_b_);
    if (!is_success(sa)) return false;
    return connected(*ia_) && connected(*ib_);
  }

  static bool connected(driver::Instance& i) {
    const auto deadline = soon();
    for (;;) {
      const Status st = i.connect_wait(Clock::now() + 10ms);
      if (st == Status::ok || st == Status::unsupported) return true;
      if ((st != Status::in_progress && st != Status::timeout) || Clock::now() > deadline)
        return false;
    }
  }

  void TearDown() override {
    ia_.reset();
    ib_.reset();
    if (a_) (void)a_->close();
    if (b_) (void)b_->close();
    a_.reset();
    b_.reset();
  }

  /// Lets the sender's wrapper move held packets (probe_any progresses it).
  void pump() {
    driver::Instance* ready = nullptr;
    (void)a_->probe_any(&ready);
  }

  Msg& prepare(const std::string& bytes) {
    Msg& m = msgs_.emplace_back();
    m.bytes = bytes;
    m.iov = {m.bytes.data(), m.bytes.size()};
    m.pkt.set_iovec(&m.iov, 1);
    return m;
  }

  /// Posts one send (no_resource from the inner driver is retried) and waits
  /// for its completion; returns the post's first non-retry answer.
  Status send(const std::string& bytes) {
    Msg& m = prepare(bytes);
    const auto deadline = soon();
    Status st = ia_->send_post(m.pkt);
    while (st == Status::no_resource && Clock::now() < deadline) {
      pump();
      st = ia_->send_post(m.pkt);
    }
    return finish(m.pkt, st);
  }

  Status finish(Packet& pkt, Status st) {
    const auto deadline = soon();
    while (st == Status::in_progress && Clock::now() < deadline) st = ia_->send_poll(pkt);
    return st;
  }

  Status send_buf(const std::string& bytes) {
    Msg& m = prepare("");
    Status st = ia_->send_buf_get(m.pkt);
    if (st != Status::ok) return st;
    if (m.pkt.buf_len < bytes.size()) return Status::internal;
    std::memcpy(m.pkt.buf, bytes.data(), bytes.size());
    st = ia_->send_buf_post(m.pkt, bytes.size());
    return finish(m.pkt, st);
  }

  /// Receives one packet on b (deadline bound), or the failure status.
  std::pair<Status, std::string> receive() {
    std::string buf(1024, '\0');
    ::iovec iov{buf.data(), buf.size()};
    Packet pkt;
    pkt.set_iovec(&iov, 1);
    Status st = ib_->recv_post(pkt);
    const auto deadline = soon();
    while (st == Status::in_progress && Clock::now() < deadline) {
      pump();
      st = ib_->recv_poll(pkt);
    }
    if (st == Status::in_progress) {
      (void)ib_->recv_cancel(pkt);
      return {Status::timeout, {}};
    }
    buf.resize(st == Status::ok ? pkt.length : 0);
    return {st, buf};
  }

  /// Sends "END" and returns everything received up to it.
  std::vector<std::string> drain_to_end() {
    EXPECT_EQ(send("END"), Status::ok);
    std::vector<std::string> got;
    for (int k = 0; k < 100; ++k) {
      auto [st, bytes] = receive();
      if (st != Status::ok) {
        ADD_FAILURE() << "receive answered " << to_string(st);
        break;
      }
      if (bytes == "END") break;
      got.push_back(bytes);
    }
    return got;
  }

  Stats stats() { return fault::stats(*a_).value(); }

  std::unique_ptr<driver::Context> a_, b_;
  std::unique_ptr<driver::Instance> ia_, ib_;
  std::vector<std::byte> url_a_, url_b_;
  driver::Track track_ = driver::Track::small;
  driver::Caps caps_, inner_caps_;
  std::deque<Msg> msgs_;
};

using Strings = std::vector<std::string>;

TEST_P(FaultOver, EmptyPlanIsAPassThrough) {
  start(Plan{});
  EXPECT_EQ(a_->name(), "fault");
  EXPECT_EQ(caps_.send_buf, inner_caps_.send_buf);
  EXPECT_EQ(caps_.recv_any, inner_caps_.recv_any);
  EXPECT_EQ(caps_.max_packet, inner_caps_.max_packet);
  EXPECT_EQ(caps_.max_iov, inner_caps_.max_iov);
  for (const char* s : {"A", "BB", "CCC"}) EXPECT_EQ(send(s), Status::ok);
  EXPECT_EQ(drain_to_end(), (Strings{"A", "BB", "CCC"}));
  EXPECT_EQ(fault::events(*a_).value().size(), 0u);
}

TEST_P(FaultOver, DropIsReportedSentButNeverDelivered) {
  start(*parse_plan("drop@2"));
  for (const char* s : {"A", "B", "C"}) EXPECT_EQ(send(s), Status::ok);
  EXPECT_EQ(drain_to_end(), (Strings{"A", "C"}));
  EXPECT_EQ(stats().of(Fault::drop), 1u);
}

TEST_P(FaultOver, APacketCompletedByTheWrapperCanBeReusedForAReceive) {
  start(*parse_plan("drop@1"));
  EXPECT_EQ(send("A"), Status::ok);  // dropped: completed inside the wrapper
  Msg& m = msgs_.back();
  EXPECT_EQ(ia_->send_poll(m.pkt), Status::ok);
  // The same Packet object, now a receive on the sender's side.
  std::string in(8, '\0');
  ::iovec iov_in{in.data(), in.size()};
  m.pkt.set_iovec(&iov_in, 1);
  Status st = ia_->recv_post(m.pkt);
  ASSERT_TRUE(is_success(st)) << to_string(st);
  std::string reply = "R";
  ::iovec iov{reply.data(), reply.size()};
  Packet s;
  s.set_iovec(&iov, 1);
  Status ss = ib_->send_post(s);
  const auto deadline = soon();
  while (ss == Status::in_progress && Clock::now() < deadline) ss = ib_->send_poll(s);
  EXPECT_EQ(ss, Status::ok);
  while (st == Status::in_progress && Clock::now() < deadline) st = ia_->recv_poll(m.pkt);
  EXPECT_EQ(st, Status::ok);
  EXPECT_EQ(in.substr(0, m.pkt.length), "R");
}

TEST_P(FaultOver, APlanForTheOtherTrackLeavesThisOneAlone) {
  start(*parse_plan("drop=1,track=large"));
  for (const char* s : {"A", "B"}) EXPECT_EQ(send(s), Status::ok);
  EXPECT_EQ(drain_to_end(), (Strings{"A", "B"}));
  EXPECT_EQ(stats().of(Fault::drop), 0u);
}

TEST_P(FaultOver, DupDeliversTwice) {
  start(*parse_plan("dup@1"));
  for (const char* s : {"A", "B"}) EXPECT_EQ(send(s), Status::ok);
  EXPECT_EQ(drain_to_end(), (Strings{"A", "A", "B"}));
  EXPECT_EQ(stats().of(Fault::dup), 1u);
}

TEST_P(FaultOver, ReorderDeliversAfterTheNext) {
  start(*parse_plan("reorder@1,delay_us=0"));
  for (const char* s : {"A", "B", "C"}) EXPECT_EQ(send(s), Status::ok);
  EXPECT_EQ(drain_to_end(), (Strings{"B", "A", "C"}));
}

TEST_P(FaultOver, DelayDeliversAfterLaterSends) {
  start(*parse_plan("delay@1,delay_packets=2,delay_us=0"));
  for (const char* s : {"A", "B", "C", "D"}) EXPECT_EQ(send(s), Status::ok);
  EXPECT_EQ(drain_to_end(), (Strings{"B", "C", "A", "D"}));
}

TEST_P(FaultOver, DelayExpiresByTimeWithoutLaterSends) {
  start(*parse_plan("delay@1,delay_packets=1000,delay_us=1000"));
  EXPECT_EQ(send("A"), Status::ok);
  auto [st, bytes] = receive();  // pump() progresses the sender meanwhile
  EXPECT_EQ(st, Status::ok);
  EXPECT_EQ(bytes, "A");
}

TEST_P(FaultOver, TruncateDeliversTheFirstHalf) {
  start(*parse_plan("truncate@2"));
  EXPECT_EQ(send("ABCDEFGH"), Status::ok);
  EXPECT_EQ(send("abcdefgh"), Status::ok);
  EXPECT_EQ(drain_to_end(), (Strings{"ABCDEFGH", "abcd"}));
}

TEST_P(FaultOver, CorruptFlipsExactlyOneBit) {
  start(*parse_plan("corrupt@1"));
  const std::string original = "the quick brown fox";
  EXPECT_EQ(send(original), Status::ok);
  const Strings got = drain_to_end();
  ASSERT_EQ(got.size(), 1u);
  ASSERT_EQ(got[0].size(), original.size());
  int bits = 0;
  for (std::size_t k = 0; k < original.size(); ++k)
    bits += __builtin_popcount(static_cast<unsigned char>(got[0][k] ^ original[k]));
  EXPECT_EQ(bits, 1);
  EXPECT_EQ(original, "the quick brown fox");  // the caller's memory is untouched
}

TEST_P(FaultOver, NoResourceDoesNothingAndTheRetryGoesThrough) {
  start(*parse_plan("no_resource@2"));
  EXPECT_EQ(send("A"), Status::ok);
  Msg& b = prepare("B");
  EXPECT_EQ(ia_->send_post(b.pkt), Status::no_resource);
  EXPECT_EQ(finish(b.pkt, ia_->send_post(b.pkt)), Status::ok);
  EXPECT_EQ(drain_to_end(), (Strings{"A", "B"}));
  EXPECT_EQ(stats().of(Fault::no_resource), 1u);
}

TEST_P(FaultOver, LateAnswersInProgressUntilItsPolls) {
  start(*parse_plan("late@1,late@3,late_polls=3"));
  Msg& a = prepare("A");
  EXPECT_EQ(ia_->send_post(a.pkt), Status::in_progress);
  EXPECT_EQ(ia_->send_poll(a.pkt), Status::in_progress);
  EXPECT_EQ(ia_->send_poll(a.pkt), Status::in_progress);
  EXPECT_EQ(ia_->send_poll(a.pkt), Status::ok);
  EXPECT_EQ(a.pkt.length, 1u);
  EXPECT_EQ(ia_->send_poll(a.pkt), Status::ok);  // a completed send stays completed
  EXPECT_EQ(send("B"), Status::ok);
  // A wait completes a late send at once.
  Msg& c = prepare("CC");
  EXPECT_EQ(ia_->send_post(c.pkt), Status::in_progress);
  EXPECT_EQ(ia_->send_wait(c.pkt, soon()), Status::ok);
  EXPECT_EQ(c.pkt.length, 2u);
  EXPECT_EQ(drain_to_end(), (Strings{"A", "B", "CC"}));
  EXPECT_EQ(stats().of(Fault::late), 2u);
}

TEST_P(FaultOver, LateBufferSendsAnswerInProgressToo) {
  start(*parse_plan("late@1"));
  if (!caps_.send_buf) GTEST_SKIP() << "inner driver has no send_buf";
  Msg& m = prepare("");
  ASSERT_EQ(ia_->send_buf_get(m.pkt), Status::ok);
  std::memcpy(m.pkt.buf, "Q", 1);
  EXPECT_EQ(ia_->send_buf_post(m.pkt, 1), Status::in_progress);
  EXPECT_EQ(finish(m.pkt, Status::in_progress), Status::ok);
  EXPECT_EQ(drain_to_end(), (Strings{"Q"}));
}

TEST_P(FaultOver, ALateSendOfAnInstanceThatDiedEndsBroken) {
  start(*parse_plan("late@1,death@3,late_polls=5"));
  Msg& a = prepare("A");
  EXPECT_EQ(ia_->send_post(a.pkt), Status::in_progress);
  Msg& b = prepare("B");
  EXPECT_EQ(finish(b.pkt, ia_->send_post(b.pkt)), Status::broken);
  EXPECT_EQ(ia_->send_poll(a.pkt), Status::broken);
}

TEST_P(FaultOver, ConnectFailAnswersBrokenAndANewInstanceConnects) {
  auto inner_a = make_inner(GetParam());
  auto inner_b = make_inner(GetParam());
  ASSERT_TRUE(inner_a && inner_b);
  a_ = wrap(std::move(inner_a), *parse_plan("connect_fail@1"));
  b_ = wrap(std::move(inner_b), Plan{});
  ASSERT_TRUE(a_->properties({}) && b_->properties({}));
  url_a_ = a_->init().value();
  url_b_ = b_->init().value();
  {
    auto first = a_->open_instance(driver::Track::small);
    ASSERT_TRUE(first.has_value());
    EXPECT_EQ((*first)->connect_async(url_b_), Status::broken);
    Packet pkt;
    EXPECT_EQ((*first)->send_post(pkt), Status::broken);
  }
  ASSERT_TRUE(open_pair());
  EXPECT_EQ(send("A"), Status::ok);
  EXPECT_EQ(drain_to_end(), (Strings{"A"}));
  EXPECT_EQ(stats().of(Fault::connect_fail), 1u);
}

TEST_P(FaultOver, DeathBreaksEverythingAndThePeerNotices) {
  // Operation 1 is connect_async, 2 the send of A, 3 the send of B.
  start(*parse_plan("death@3"));
  EXPECT_EQ(send("A"), Status::ok);
  Msg& b = prepare("B");
  EXPECT_EQ(ia_->send_post(b.pkt), Status::broken);
  EXPECT_EQ(ia_->send_poll(b.pkt), Status::broken);
  EXPECT_EQ(send("C"), Status::broken);
  std::string buf(8, '\0');
  ::iovec iov{buf.data(), buf.size()};
  Packet r;
  r.set_iovec(&iov, 1);
  EXPECT_EQ(ia_->recv_post(r), Status::broken);
  EXPECT_EQ(ia_->recv_poll(r), Status::broken);
  EXPECT_EQ(ia_->recv_wait(r, soon()), Status::broken);
  auto [st, bytes] = receive();
  EXPECT_EQ(st, Status::ok);
  EXPECT_EQ(bytes, "A");
  // The peer's link was cut: its next receive fails instead of hanging.
  auto [st2, bytes2] = receive();
  EXPECT_TRUE(st2 == Status::broken || st2 == Status::closed) << to_string(st2);
  EXPECT_EQ(stats().of(Fault::death), 1u);
}

TEST_P(FaultOver, BufferSendsTakeFaultsToo) {
  start(*parse_plan("dup@1,drop@2"));
  if (!caps_.send_buf) GTEST_SKIP() << "inner driver has no send_buf";
  EXPECT_EQ(send_buf("X"), Status::ok);
  EXPECT_EQ(send_buf("Y"), Status::ok);
  EXPECT_EQ(send_buf("Z"), Status::ok);
  EXPECT_EQ(drain_to_end(), (Strings{"X", "X", "Z"}));
}

TEST_P(FaultOver, PacketsLargerThanASlotAreDeliveredUnmodified) {
  start(*parse_plan("truncate@1,slot_bytes=64"));
  const std::string big(200, 'q');
  EXPECT_EQ(send(big), Status::ok);
  EXPECT_EQ(drain_to_end(), (Strings{big}));
  const Stats s = stats();
  EXPECT_EQ(s.of(Fault::truncate), 0u);
  EXPECT_EQ(s.skipped[static_cast<int>(Fault::truncate)], 1u);
}

TEST_P(FaultOver, ProbeAnyAnswersTheWrapper) {
  start(Plan{});
  if (!caps_.recv_any) GTEST_SKIP() << "inner driver has no recv_any";
  EXPECT_EQ(send("A"), Status::ok);
  driver::Instance* ready = nullptr;
  Status st = Status::in_progress;
  const auto deadline = soon();
  while (st == Status::in_progress && Clock::now() < deadline) st = b_->probe_any(&ready);
  EXPECT_EQ(st, Status::ok);
  EXPECT_EQ(ready, ib_.get());
  EXPECT_EQ(drain_to_end(), (Strings{"A"}));
}

TEST_P(FaultOver, WaitsReleaseHeldPacketsWhenDue) {
  start(*parse_plan("delay@1,delay_packets=1000,delay_us=1000"));
  EXPECT_EQ(send("A"), Status::ok);
  // The sender blocks in its own receive; the held packet is due long
  // before the deadline and must leave during the wait, not after it.
  std::string buf(8, '\0');
  ::iovec iov{buf.data(), buf.size()};
  Packet r;
  r.set_iovec(&iov, 1);
  Status st = ia_->recv_post(r);
  if (st == Status::in_progress) st = ia_->recv_wait(r, Clock::now() + 200ms);
  if (st == Status::unsupported) GTEST_SKIP() << "inner driver has no recv_wait";
  EXPECT_EQ(st, Status::timeout);
  (void)ia_->recv_cancel(r);
  // No pump() from here on: only the wait above can have released it.
  std::string in(8, '\0');
  ::iovec iov_in{in.data(), in.size()};
  Packet pkt;
  pkt.set_iovec(&iov_in, 1);
  st = ib_->recv_post(pkt);
  const auto deadline = soon();
  while (st == Status::in_progress && Clock::now() < deadline) st = ib_->recv_poll(pkt);
  EXPECT_EQ(st, Status::ok);
  EXPECT_EQ(in.substr(0, pkt.length), "A");
}

TEST_P(FaultOver, WaitAnyOnTheContextReleasesHeldPackets) {
  start(*parse_plan("delay@1,delay_packets=1000,delay_us=1000"));
  if (!caps_.recv_any || GetParam() == "loop") GTEST_SKIP() << "inner driver has no wait_any";
  EXPECT_EQ(send("A"), Status::ok);
  // Another thread sleeps in the sender context's wait_any(); nothing comes
  // to the sender, but the held packet must leave while it waits.
  Status waited = Status::internal;
  std::thread waiter([&] {
    driver::Instance* ready = nullptr;
    waited = a_->wait_any(&ready, Clock::now() + 300ms);
  });
  std::string in(8, '\0');
  ::iovec iov_in{in.data(), in.size()};
  Packet pkt;
  pkt.set_iovec(&iov_in, 1);
  Status st = ib_->recv_post(pkt);
  const auto deadline = soon();
  while (st == Status::in_progress && Clock::now() < deadline) st = ib_->recv_poll(pkt);
  waiter.join();
  EXPECT_EQ(waited, Status::timeout);
  EXPECT_EQ(st, Status::ok);
  EXPECT_EQ(in.substr(0, pkt.length), "A");
}

TEST_P(FaultOver, CancelAnyEndsASteppedWait) {
  start(*parse_plan("delay@1,delay_packets=1000,delay_us=200000"));
  if (!caps_.recv_any || GetParam() == "loop") GTEST_SKIP() << "inner driver has no wait_any";
  EXPECT_EQ(send("A"), Status::ok);  // held: wait_any() now waits in steps
  std::atomic<Status> waited{Status::internal};
  std::atomic<bool> started{false};
  std::thread waiter([&] {
    driver::Instance* ready = nullptr;
    started = true;
    waited = a_->wait_any(&ready, soon());
  });
  while (!started) std::this_thread::yield();
  // Repeated, since a cancel before the wait begins has nothing to end.
  const auto deadline = soon();
  while (waited == Status::internal && Clock::now() < deadline) {
    EXPECT_EQ(a_->cancel_any(), Status::ok);
    std::this_thread::sleep_for(1ms);
  }
  waiter.join();
  EXPECT_EQ(waited.load(), Status::canceled);
}

TEST_P(FaultOver, InjectedFaultsAreLoggedWithTheSeed) {
  Plan plan = *parse_plan("drop@1");
  plan.seed = 4242;
  start(std::move(plan));
  ASSERT_TRUE(log::configure("fault=debug"));
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(send("A"), Status::ok);
  const std::string out = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(log::configure("warn"));
  EXPECT_NE(out.find("seed 4242 instance 0 send 1: drop"), std::string::npos) << out;
}

TEST_P(FaultOver, LargeTrackCarriesRendezvousDataThroughSlots) {
  start(*parse_plan("corrupt@1"), driver::Track::large);
  if (!caps_.rdv_data) GTEST_SKIP() << "inner driver has no rdv_data";
  const std::string original(100, 'r');
  std::string in(100, '\0');
  ::iovec iov_in{in.data(), in.size()};
  Packet r;
  r.set_iovec(&iov_in, 1);
  Status rs = ib_->recv_post(r);
  ASSERT_TRUE(is_success(rs)) << to_string(rs);
  Msg& m = prepare(original);
  m.pkt.rdv_data = r.rdv_data;
  m.pkt.rdv_len = r.rdv_len;
  EXPECT_EQ(finish(m.pkt, ia_->send_post(m.pkt)), Status::ok);
  const auto deadline = soon();
  while (rs == Status::in_progress && Clock::now() < deadline) {
    pump();
    rs = ib_->recv_poll(r);
  }
  ASSERT_EQ(rs, Status::ok);
  ASSERT_EQ(r.length, original.size());
  int bits = 0;
  for (std::size_t k = 0; k < original.size(); ++k)
    bits += __builtin_popcount(static_cast<unsigned char>(in[k] ^ original[k]));
  EXPECT_EQ(bits, 1);
}

TEST_P(FaultOver, SameSeedSameFaultsOtherSeedOtherFaults) {
  auto run = [&](std::uint64_t seed, Strings* received) {
    Plan plan = *parse_plan(
        "drop=0.1,dup=0.1,reorder=0.1,delay=0.1,truncate=0.1,corrupt=0.1,"
        "no_resource=0.1,delay_us=0");
    plan.seed = seed;
    start(std::move(plan));
    for (int k = 0; k < 200; ++k) {
      Msg& m = prepare("message " + std::to_string(k));
      Status st = ia_->send_post(m.pkt);
      const auto deadline = soon();
      while (st == Status::no_resource && Clock::now() < deadline) st = ia_->send_post(m.pkt);
      EXPECT_EQ(finish(m.pkt, st), Status::ok);
      // Drain what has arrived (the loopback driver delivers at post).
      for (;;) {
        std::string buf(64, '\0');
        ::iovec iov{buf.data(), buf.size()};
        Packet r;
        r.set_iovec(&iov, 1);
        Status rs = ib_->recv_post(r);
        if (rs == Status::in_progress) rs = ib_->recv_poll(r);
        if (rs != Status::ok) {
          (void)ib_->recv_cancel(r);
          break;
        }
        received->push_back(buf.substr(0, r.length));
      }
    }
    std::vector<Event> ev = fault::events(*a_).value();
    TearDown();
    msgs_.clear();
    return ev;
  };
  Strings r1, r2, r3;
  const std::vector<Event> first = run(7, &r1);
  const std::vector<Event> again = run(7, &r2);
  const std::vector<Event> other = run(8, &r3);
  EXPECT_GT(first.size(), 50u);
  EXPECT_EQ(first, again);
  EXPECT_NE(first, other);
  if (GetParam() == "loop") {
    EXPECT_EQ(r1, r2);
    EXPECT_NE(r1, r3);
  }
}

TEST_P(FaultOver, WaitAnyInAnotherThreadWhileSending) {
  start(*parse_plan("delay=0.3,dup=0.2,delay_packets=2,delay_us=500"));
  if (!caps_.recv_any || GetParam() == "loop") GTEST_SKIP() << "inner driver has no wait_any";
  // The sender context's wait_any() moves held packets (try-locking each
  // instance) while this thread sends on the instance: they must not race.
  std::atomic<bool> stop{false};
  std::thread waiter([&] {
    while (!stop) {
      driver::Instance* ready = nullptr;
      (void)a_->wait_any(&ready, Clock::now() + 2ms);
    }
  });
  int received = 0;
  for (int k = 0; k < 300; ++k) {
    // Not send(): its pump() would call the context concurrently with
    // wait_any(), which the interface forbids.
    Msg& m = prepare("m" + std::to_string(k));
    Status st = ia_->send_post(m.pkt);
    const auto deadline = soon();
    while (st == Status::no_resource && Clock::now() < deadline) st = ia_->send_post(m.pkt);
    EXPECT_EQ(finish(m.pkt, st), Status::ok);
    for (;;) {
      std::string buf(16, '\0');
      ::iovec iov{buf.data(), buf.size()};
      Packet r;
      r.set_iovec(&iov, 1);
      Status rs = ib_->recv_post(r);
      if (rs == Status::in_progress) rs = ib_->recv_poll(r);
      if (rs != Status::ok) {
        (void)ib_->recv_cancel(r);
        break;
      }
      ++received;
    }
  }
  stop = true;
  waiter.join();
  EXPECT_GE(received, 200);  // every send arrives at least once, bar those still held
}

INSTANTIATE_TEST_SUITE_P(Inner, FaultOver, ::testing::Values("loop", "self", "shm", "tcp"),
                         [](const auto& param_info) { return param_info.param; });

}  // namespace
}  // namespace pier::drivers::fault
