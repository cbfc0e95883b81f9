// A peer that speaks the port protocol badly: headers that do not decode,
// fields that disagree with the core's, answers for nothing, forged get
// replies and controls, huge ack counts. The port rejects each without an
// assert or a crash, answers what deserves an answer, and keeps working.
#include <array>
#include <deque>
#include <random>
#include <string>

#include "harness.hpp"
#include "wire/port.hpp"

namespace pier::port::test {
namespace {

/// A raw upper layer on node 0: sends any header, records what comes back.
class Raw final : public core::Client {
 public:
  explicit Raw(core::Core& c) : core_(c) {}
  void lib_parse(const core::Arrival& a) noexcept override {
    auto h = a.header.size() == wire::PortHeader::compact_size
                 ? wire::PortHeader::decode_compact(
                       a.header, {a.priority, a.source_port, a.destination_port, a.length})
                 : wire::PortHeader::decode(a.header);
    if (h) answers.push_back(*h);
    if (h) header_sizes.push_back(a.header.size());
    if (hold) {  // not taken: the sender's credit stays spent
      held.push_back(a.handle);
      return;
    }
    (void)core_.recv(a.handle, nullptr, nullptr, 0, 0, 0);
  }
  /// Takes the answers held so far, and those to come.
  void release() {
    hold = false;
    for (core::Incoming* in : held) (void)core_.recv(in, nullptr, nullptr, 0, 0, 0);
    held.clear();
  }
  void lib_finalize(void*, Status) noexcept override {}

  Status send(std::span<const std::byte> header, std::uint8_t prio, std::uint16_t sport,
              std::uint16_t dport, std::vector<std::byte>* payload = nullptr) {
    if (!payload || payload->empty()) return send_from(header, prio, sport, dport, nullptr, 0);
    auto region = core_.validate(payload->data(), payload->size());
    if (!region) return region.status();
    regions.push_back(*region);
    return send_from(header, prio, sport, dport, &regions.back(), payload->size());
  }
  /// The first `length` bytes of a region validated once, for many sends.
  Status send_from(std::span<const std::byte> header, std::uint8_t prio, std::uint16_t sport,
                   std::uint16_t dport, const core::Region* region, std::size_t length) {
    core::SendArgs a;
    a.peer = 1;
    a.priority = prio;
    a.source_port = sport;
    a.destination_port = dport;
    a.upper = wire::Upper::port;
    a.header = header;
    a.region = length ? region : nullptr;
    a.length = length;
    return core_.send(a);
  }
  Status send(const wire::PortHeader& h, std::vector<std::byte>* payload = nullptr) {
    std::array<std::byte, wire::PortHeader::size> b{};
    if (!wire::encode(h, b)) return Status::invalid_argument;
    return send(b, h.priority, h.sending_port, h.receiving_port, payload);
  }

  std::vector<wire::PortHeader> answers;
  std::vector<std::size_t> header_sizes;  ///< of each entry of answers, as it came
  std::deque<core::Region> regions;
  bool hold = false;  ///< answers are recorded but not taken
  std::vector<core::Incoming*> held;

 private:
  core::Core& core_;
};

/// `n` cores over the configured drivers, connected to each other; empty
/// (with a test failure) when that fails.
std::vector<std::unique_ptr<core::Core>> connected_cores(core::Rank n) {
  std::vector<std::unique_ptr<core::Core>> cores;
  std::vector<std::vector<std::byte>> addresses;
  for (core::Rank r = 0; r < n; ++r) {
    auto c = core::Core::create(r, n);
    if (!c) {
      ADD_FAILURE() << "core " << r << ": " << to_string(c.status());
      return {};
    }
    addresses.push_back((*c)->address());
    cores.push_back(std::move(*c));
  }
  for (auto& c : cores)
    if (Status st = c->connect(addresses); st != Status::ok) {
      ADD_FAILURE() << "connect: " << to_string(st);
      return {};
    }
  return cores;
}

TEST(PortHostile, AnswersForNothingAndForbiddenOpsAreRefusedAndTheStreamGoesOn) {
  config::ScopedSet drivers("CORE_DRIVERS", "self");
  auto cores = connected_cores(2);
  ASSERT_EQ(cores.size(), 2u);
  Raw raw(*cores[0]);
  ASSERT_EQ(cores[0]->attach(wire::Upper::port, &raw, wire::PortHeader::size), Status::ok);
  auto node = Node::attach(*cores[1]);
  ASSERT_TRUE(node);
  {
    Driver b(**node, 2);
    std::vector<std::byte> buf = buffer_for(4);
    ASSERT_EQ(b.provide(buf.data(), 4, Priority::low), Status::ok);
    auto pump = [&](int rounds) {
      for (int i = 0; i < rounds; ++i) {
        b.step();
        (void)cores[0]->progress();
      }
    };
    wire::PortHeader good;
    good.kind = wire::PortKind::send;
    good.size_class = 4;
    good.sending_port = 1;
    good.receiving_port = 2;
    good.length = 8;
    std::vector<std::byte> eight = pattern(8, 1);
    // Answers for ops that do not exist; forged get data; a huge ack count.
    wire::PortHeader reply;
    reply.kind = wire::PortKind::ack;
    reply.sending_port = 1;
    reply.receiving_port = 2;
    reply.peer_epoch = 1;  // the port's own incarnation: past the staleness check
    reply.tag = 0xffff'ffff;
    ASSERT_EQ(raw.send(reply), Status::ok);
    reply.kind = wire::PortKind::nack;
    reply.tag = static_cast<std::uint8_t>(Status::timeout);
    ASSERT_EQ(raw.send(reply), Status::ok);
    reply.kind = wire::PortKind::get_reply;
    reply.tag = 0;
    reply.cookie = 0x1234;  // get data for no get
    reply.length = 8;
    ASSERT_EQ(raw.send(reply, &eight), Status::ok);
    reply.length = 0;
    reply.cookie = 0;
    // A put and a get outside registered memory: answered permission_denied.
    wire::PortHeader put;
    put.kind = wire::PortKind::put;
    put.sending_port = 3;
    put.receiving_port = 2;
    put.length = 8;
    put.remote_address = 0x1000;
    ASSERT_EQ(raw.send(put, &eight), Status::ok);
    pump(200);
    EXPECT_TRUE(b.received.empty());
    ASSERT_EQ(raw.answers.size(), 1u);
    EXPECT_EQ(raw.answers[0].kind, wire::PortKind::nack);
    EXPECT_EQ(raw.answers[0].tag, static_cast<std::uint8_t>(Status::permission_denied));
    // A resume for that stream, then a good send: delivered and acked.
    reply.kind = wire::PortKind::resume;
    reply.tag = 0;
    reply.peer_epoch = 0;
    reply.sending_port = 3;
    ASSERT_EQ(raw.send(reply), Status::ok);
    good.sending_port = 3;
    ASSERT_EQ(raw.send(good, &eight), Status::ok);
    for (int i = 0; i < 2000 && b.received.empty(); ++i) pump(1);
    ASSERT_EQ(b.received.size(), 1u);
    EXPECT_EQ(b.received[0].data, eight);
    // The resume and the send acknowledged: in one ack when one pass took
    // both, else in two.
    const auto acked = [&] {
      unsigned n = 0;
      for (std::size_t i = 1; i < raw.answers.size(); ++i)
        if (raw.answers[i].kind == wire::PortKind::ack) n += raw.answers[i].tag;
      return n;
    };
    for (int i = 0; i < 2000 && acked() < 2; ++i) pump(1);
    ASSERT_GE(raw.answers.size(), 2u);
    EXPECT_EQ(raw.answers.back().kind, wire::PortKind::ack);
    EXPECT_EQ(acked(), 2u);
    // The same send in its compact form is taken as well.
    ASSERT_EQ(b.provide(buf.data(), 4, Priority::low), Status::ok);
    std::array<std::byte, wire::PortHeader::compact_size> compact{};
    ASSERT_TRUE(wire::encode_compact(good, compact));
    ASSERT_EQ(raw.send(compact, 0, 3, 2, &eight), Status::ok);
    for (int i = 0; i < 2000 && b.received.size() < 2; ++i) pump(1);
    ASSERT_EQ(b.received.size(), 2u);
    EXPECT_EQ(b.received[1].data, eight);
  }
  node->reset();
  cores.clear();
}

/// One header that does not hold, sent by rank 0 (`prio`, `sport`,
/// `payload` and the header bytes as given) while the port on rank 1 has a
/// send to rank 0 waiting for its answer (rank 0 holds it); the node on
/// rank 1 fails rank 0's gate, that send ends with an error instead of
/// waiting for an answer matched by position, and rank 2 is served after.
void expect_sender_failed(std::span<const std::byte> header, std::uint8_t prio, std::uint16_t sport,
                          std::vector<std::byte>* payload, const char* what) {
  SCOPED_TRACE(what);
  auto cores = connected_cores(3);
  ASSERT_EQ(cores.size(), 3u);
  Raw raw(*cores[0]), bystander(*cores[2]);
  ASSERT_EQ(cores[0]->attach(wire::Upper::port, &raw, wire::PortHeader::size), Status::ok);
  ASSERT_EQ(cores[2]->attach(wire::Upper::port, &bystander, wire::PortHeader::size), Status::ok);
  auto node = Node::attach(*cores[1]);
  ASSERT_TRUE(node);
  {
    Driver b(**node, 2);
    std::vector<std::byte> buf = buffer_for(4), buf2 = buffer_for(4);
    ASSERT_EQ(b.provide(buf.data(), 4, Priority::low), Status::ok);
    auto pump = [&](int rounds) {
      for (int i = 0; i < rounds; ++i) {
        b.step();
        for (std::size_t r : {0u, 2u}) (void)cores[r]->progress();
      }
    };
    raw.hold = true;
    std::vector<std::byte> mine = pattern(8, 9);
    ASSERT_EQ(b.send(mine.data(), mine.size(), Priority::low, 0, 1, 77), Status::ok);
    for (int i = 0; i < 2000 && raw.held.empty(); ++i) pump(1);
    ASSERT_EQ(raw.held.size(), 1u);
    pump(20);
    EXPECT_EQ(cores[1]->gate_status(0), Status::ok);  // a good send alone fails nobody
    ASSERT_EQ(raw.send(header, prio, sport, 2, payload), Status::ok);
    for (int i = 0; i < 2000 && cores[1]->gate_status(0) == Status::ok; ++i) pump(1);
    const Status why = cores[1]->gate_status(0);
    EXPECT_TRUE(why == Status::malformed || why == Status::version_mismatch) << to_string(why);
    EXPECT_TRUE(b.received.empty());
    for (int i = 0; i < 2000 && b.completions.empty(); ++i) pump(1);
    ASSERT_EQ(b.completions.size(), 1u);
    EXPECT_EQ(b.completions[0].id, 77u);
    EXPECT_NE(b.completions[0].status, Status::ok);
    EXPECT_EQ(b.port->send_tokens_held(), b.port->send_tokens());
    raw.release();
    // The sender learns it too: its side of the link is gone.
    for (int i = 0; i < 2000 && cores[0]->gate_status(1) == Status::ok; ++i) pump(1);
    EXPECT_NE(cores[0]->gate_status(1), Status::ok);
    wire::PortHeader good;
    good.kind = wire::PortKind::send;
    good.size_class = 4;
    good.sending_port = 1;
    good.receiving_port = 2;
    good.length = 8;
    std::vector<std::byte> eight = pattern(8, 4);
    ASSERT_EQ(b.provide(buf2.data(), 4, Priority::low), Status::ok);
    ASSERT_EQ(bystander.send(good, &eight), Status::ok);
    for (int i = 0; i < 2000 && b.received.empty(); ++i) pump(1);
    ASSERT_EQ(b.received.size(), 1u);
    EXPECT_EQ(b.received[0].data, eight);
  }
  node->reset();
  cores.clear();
}

/// Before, such a header was dropped and logged while the peer stayed up:
/// its op got no answer, and the next answers (matched by position) ended
/// the wrong ops.
TEST(PortHostile, AHeaderThatDoesNotHoldFailsItsSenderAndTheOthersAreStillServed) {
  config::ScopedSet drivers("CORE_DRIVERS", "self");
  wire::PortHeader good;
  good.kind = wire::PortKind::send;
  good.size_class = 4;
  good.sending_port = 1;
  good.receiving_port = 2;
  good.length = 8;
  std::vector<std::byte> eight = pattern(8, 1), seven = pattern(7, 2);
  std::array<std::byte, wire::PortHeader::size> enc{};
  ASSERT_TRUE(wire::encode(good, enc));
  std::array<std::byte, wire::PortHeader::size> junk{};
  junk.fill(std::byte{0xff});
  expect_sender_failed(junk, 0, 1, nullptr, "does not decode");
  expect_sender_failed(enc, 1, 1, &eight, "priority differs from the frame's");
  expect_sender_failed(enc, 0, 5, &eight, "sending port differs from the frame's");
  expect_sender_failed(enc, 0, 1, &seven, "payload differs from the length");
  expect_sender_failed(std::span(enc).first(24), 0, 1, &eight, "neither header size");
  // Kinds the decoder does not know, and answers whose fields it rejects.
  wire::PortHeader reply;
  reply.kind = wire::PortKind::ack;
  reply.sending_port = 1;
  reply.receiving_port = 2;
  reply.peer_epoch = 1;
  reply.tag = 1;
  std::array<std::byte, wire::PortHeader::size> bad{};
  ASSERT_TRUE(wire::encode(reply, bad));
  for (std::uint8_t kind : {std::uint8_t{0}, wire::port_kind_limit, std::uint8_t{0xff}}) {
    bad[1] = std::byte{kind};
    expect_sender_failed(bad, 0, 1, nullptr, "unknown kind");
  }
  bad[1] = std::byte{static_cast<std::uint8_t>(wire::PortKind::nack)};
  bad[16] = std::byte{0};
  expect_sender_failed(bad, 0, 1, nullptr, "a nack with status ok");
  bad[1] = std::byte{static_cast<std::uint8_t>(wire::PortKind::resume)};
  bad[16] = std::byte{1};
  expect_sender_failed(bad, 0, 1, nullptr, "a resume with a tag");
  // Compact headers (a send's, routed by the frame) that do not hold.
  std::array<std::byte, wire::PortHeader::compact_size> compact{};
  ASSERT_TRUE(wire::encode_compact(good, compact));
  auto changed = [&](std::size_t at, std::uint8_t v) {
    std::array<std::byte, wire::PortHeader::compact_size> c = compact;
    c[at] = std::byte{v};
    return c;
  };
  expect_sender_failed(changed(1, static_cast<std::uint8_t>(wire::PortKind::put)), 0, 1, &eight,
                       "compact header of another kind");
  expect_sender_failed(changed(2, 3), 0, 1, &eight, "size class 3 holds no 8 bytes");
  expect_sender_failed(changed(3, 1), 0, 1, &eight, "reserved byte set");
}

/// One peer leaves streams suspended from many sending ports (a get outside
/// registered memory is refused, and refusal suspends its stream). Before,
/// it filled the port's whole stream table and a send from another node
/// timed out at once; now it stops at its quota and the other node is served.
TEST(PortHostile, OnePeerCannotTakeEveryStreamOfAPort) {
  config::ScopedSet drivers("CORE_DRIVERS", "self");
  config::ScopedSet table("PORT_STREAMS", "8");
  config::ScopedSet quota("PORT_STREAMS_PER_NODE", "3");
  auto cores = connected_cores(3);
  ASSERT_EQ(cores.size(), 3u);
  Raw raw(*cores[0]);
  ASSERT_EQ(cores[0]->attach(wire::Upper::port, &raw, wire::PortHeader::size), Status::ok);
  auto victim = Node::attach(*cores[1]);
  auto other = Node::attach(*cores[2]);
  ASSERT_TRUE(victim && other);
  {
    Driver b(**victim, 2);
    Driver c(**other, 5);
    std::vector<std::byte> buf = buffer_for(4);
    ASSERT_EQ(b.provide(buf.data(), 4, Priority::low), Status::ok);
    auto pump = [&](int rounds) {
      for (int i = 0; i < rounds; ++i) {
        b.step();
        c.step();
        (void)cores[0]->progress();
      }
    };
    wire::PortHeader get;
    get.kind = wire::PortKind::get_request;
    get.receiving_port = 2;
    get.length = 8;
    get.remote_address = 0x1000;
    get.epoch = 1;
    for (std::uint16_t sport = 10; sport < 30; ++sport) {
      get.sending_port = sport;
      ASSERT_EQ(raw.send(get), Status::ok);
      pump(5);
    }
    pump(200);
    // Refused: 3 within the quota (permission), the rest at once (timeout).
    ASSERT_EQ(raw.answers.size(), 20u);
    int refused = 0;
    for (const auto& a : raw.answers)
      if (a.kind == wire::PortKind::nack &&
          a.tag == static_cast<std::uint8_t>(Status::permission_denied))
        ++refused;
    EXPECT_EQ(refused, 3);
    std::vector<std::byte> eight = pattern(8, 3);
    ASSERT_EQ(c.send(eight.data(), eight.size(), Priority::low, 1, 2, 7), Status::ok);
    for (int i = 0; i < 2000 && (b.received.empty() || c.completions.empty()); ++i) pump(1);
    ASSERT_EQ(b.received.size(), 1u);
    EXPECT_EQ(b.received[0].data, eight);
    ASSERT_EQ(c.completions.size(), 1u);
    EXPECT_EQ(c.completions[0].status, Status::ok);
  }
  victim->reset();
  other->reset();
  cores.clear();
}

/// A header the decoder takes, of a random kind, with fields drawn mostly
/// from values that reach the port's streams (its port numbers, small
/// tags, the registered window) and sometimes from anywhere.
wire::PortHeader random_port_header(std::mt19937_64& rng, std::uint64_t window) {
  auto pick = [&](std::uint64_t n) { return rng() % n; };
  wire::PortHeader h;
  h.kind = static_cast<wire::PortKind>(1 + pick(wire::port_kind_limit - 1));
  h.priority = static_cast<std::uint8_t>(pick(2));
  h.sending_port = static_cast<std::uint16_t>(pick(8) == 0 ? 16 + pick(256) : 1 + 2 * pick(3));
  h.receiving_port = static_cast<std::uint16_t>(pick(8) == 0 ? pick(65536) : 2);
  // Mostly the incarnations in play (the port under test was opened once:
  // epoch 1), sometimes others: a new one restarts a stream, a wrong one
  // on an answer makes it stale.
  h.epoch = static_cast<std::uint16_t>(pick(16) == 0 ? pick(65536) : 1);
  const auto peer_epoch = static_cast<std::uint16_t>(pick(16) == 0 ? pick(65536) : 1);
  switch (h.kind) {
    case wire::PortKind::send:
      h.size_class = static_cast<std::uint8_t>(3 + pick(6));
      h.length = static_cast<std::uint32_t>(pick(max_length_for_size(h.size_class) + 1));
      h.tag = pick(4) == 0 ? pick(8) : 0;  // piggybacked acks
      if (h.tag != 0) h.peer_epoch = peer_epoch;
      break;
    case wire::PortKind::put:
    case wire::PortKind::get_request:
      h.length =
          static_cast<std::uint32_t>(pick(8) == 0 ? pick(wire::max_port_message) : pick(300));
      h.remote_address = pick(8) == 0 ? rng() : window - 16 + pick(300);
      if (h.kind == wire::PortKind::get_request) h.cookie = pick(8) == 0 ? rng() : pick(64);
      break;
    case wire::PortKind::get_reply:
      h.length = static_cast<std::uint32_t>(pick(300));
      h.cookie = pick(8) == 0 ? rng() : pick(64);
      h.peer_epoch = peer_epoch;
      break;
    case wire::PortKind::ack:
      h.tag = pick(8) == 0 ? 1 + pick(0xffff'ffff) : 1 + pick(4);
      h.peer_epoch = peer_epoch;
      break;
    case wire::PortKind::nack:
      h.tag = 1 + pick(status_count - 1);
      h.peer_epoch = peer_epoch;
      break;
    case wire::PortKind::resume:
    case wire::PortKind::drop:
      break;
  }
  return h;
}

/// Thousands of random headers that decode and agree with their frames
/// (sends full or compact), while the port has its own
/// sends, puts and gets to the raw peer in flight (so forged acks, nacks
/// and get replies meet live operations), resumes or drops what failed,
/// and gives every buffer back. The token invariant holds after every
/// step, nothing crashes, and a clean stream is still served at the end.
TEST(PortHostile, RandomHeadersAgainstLiveStreamsNeverCrash) {
  config::ScopedSet drivers("CORE_DRIVERS", "self");
  config::ScopedSet timeout("PORT_SEND_TIMEOUT_MS", "50");
  // Rank 0 is hostile; rank 2 a bystander whose message must get through.
  auto cores = connected_cores(3);
  ASSERT_EQ(cores.size(), 3u);
  Raw raw(*cores[0]), bystander(*cores[2]);
  ASSERT_EQ(cores[0]->attach(wire::Upper::port, &raw, wire::PortHeader::size), Status::ok);
  ASSERT_EQ(cores[2]->attach(wire::Upper::port, &bystander, wire::PortHeader::size), Status::ok);
  auto node = Node::attach(*cores[1]);
  ASSERT_TRUE(node);
  {
    Driver b(**node, 2);
    b.reprovide = true;
    std::deque<std::vector<std::byte>> buffers;
    for (unsigned size = 3; size <= 8; ++size)
      for (Priority p : {Priority::low, Priority::high})
        for (int k = 0; k < 2; ++k) {
          buffers.push_back(buffer_for(size));
          ASSERT_EQ(b.provide(buffers.back().data(), size, p), Status::ok);
        }
    std::vector<std::byte> window(256), local(512);
    ASSERT_EQ(b.port->register_memory(window.data(), window.size()), Status::ok);
    const auto window_at = reinterpret_cast<std::uint64_t>(window.data());
    std::vector<std::byte> source = pattern(4096, 3);
    auto source_region = cores[0]->validate(source.data(), source.size());
    ASSERT_TRUE(source_region);
    std::mt19937_64 rng(11);
    auto pick = [&](std::uint64_t n) { return rng() % n; };
    std::size_t seen = 0;
    auto pump = [&](int rounds) {
      for (int i = 0; i < rounds; ++i) {
        b.step();
        (void)cores[0]->progress();
        (void)cores[2]->progress();
      }
      // What failed is resumed or dropped (one call per failure, G10).
      for (; seen < b.completions.size(); ++seen) {
        const Status st = b.completions[seen].status;
        if (st == Status::ok || st == Status::dropped) continue;
        for (Priority p : {Priority::low, Priority::high}) {
          const Status r = pick(2) ? b.port->resume_sending(p, 0, 1, Driver::on_sent, nullptr)
                                   : b.port->drop_sends(p, 0, 1, Driver::on_sent, nullptr);
          if (r == Status::ok) ++b.outstanding_sends;
        }
      }
    };
    int encoded = 0;
    for (int round = 0; round < 3000; ++round) {
      if (pick(3) == 0 && b.port->send_tokens_held() > 0) {
        const auto prio = pick(2) ? Priority::high : Priority::low;
        const std::size_t len = pick(100);
        Status s = Status::ok;
        switch (pick(3)) {
          case 0:
            s = b.send(source.data(), len, prio, 0, 1, 1);
            break;
          case 1:
            s = b.port->put(source.data(), 0x1000 + pick(64), len, prio, 0, 1, Driver::on_sent,
                            nullptr);
            if (s == Status::ok) ++b.outstanding_sends;
            break;
          default:
            s = b.port->get(0x1000 + pick(64), local.data(), len, prio, 0, 1, Driver::on_sent,
                            nullptr);
            if (s == Status::ok) ++b.outstanding_sends;
            break;
        }
        ASSERT_TRUE(s == Status::ok || s == Status::no_resource) << to_string(s);
      }
      const wire::PortHeader h = random_port_header(rng, window_at);
      std::array<std::byte, wire::PortHeader::size> full{};
      // Half the sends in the compact form, routed by the frame.
      const bool compact = h.kind == wire::PortKind::send && pick(2) == 0;
      const Result<std::size_t> n = compact ? wire::encode_compact(h, full) : wire::encode(h, full);
      if (!n) continue;
      const std::span<std::byte> bytes = std::span(full).first(*n);
      const bool carries = h.kind == wire::PortKind::send || h.kind == wire::PortKind::put ||
                           h.kind == wire::PortKind::get_reply;
      // Only headers that hold: one that does not fails this peer (tested
      // above), which would end the run.
      if (carries && h.length > source.size()) continue;
      ++encoded;
      const std::size_t length = carries ? h.length : 0;
      // The core pushes back while the port holds arrivals: progress and
      // retry a while. The raw peer keeps no count of what it has in flight
      // as ports do, so it may fill every credit of a priority with arrivals
      // held behind failures it never resumes: its own stall, then skipped.
      Status st = Status::no_resource;
      for (int k = 0; k < 200 && st == Status::no_resource; ++k) {
        st = raw.send_from(bytes, h.priority, h.sending_port, h.receiving_port, &*source_region,
                           length);
        if (st == Status::no_resource) pump(1);
      }
      ASSERT_TRUE(st == Status::ok || st == Status::no_resource) << to_string(st);
      pump(3);
    }
    EXPECT_GT(encoded, 2500);
    pump(2000);
    // Another peer is served as if nothing happened.
    wire::PortHeader good;
    good.kind = wire::PortKind::send;
    good.size_class = 4;
    good.sending_port = 1;
    good.receiving_port = 2;
    good.length = 8;
    std::vector<std::byte> eight = pattern(8, 1);
    const std::size_t before = b.received.size();
    ASSERT_EQ(bystander.send(good, &eight), Status::ok);
    for (int i = 0; i < 20000 && b.received.size() == before; ++i) pump(1);
    ASSERT_GT(b.received.size(), before);
    EXPECT_EQ(b.received.back().data, eight);
    // Only headers that hold were sent: the hostile peer was never failed.
    EXPECT_EQ(cores[1]->gate_status(0), Status::ok);
  }
  node->reset();
  cores.clear();
}

TEST(PortHostile, SendsLeaveWithTheCompactHeaderAndTheOtherKindsWithTheFullOne) {
  config::ScopedSet drivers("CORE_DRIVERS", "self");
  auto cores = connected_cores(2);
  ASSERT_EQ(cores.size(), 2u);
  Raw raw(*cores[0]);
  ASSERT_EQ(cores[0]->attach(wire::Upper::port, &raw, wire::PortHeader::size), Status::ok);
  auto node = Node::attach(*cores[1]);
  ASSERT_TRUE(node);
  {
    Driver b(**node, 2);
    auto pump = [&] {
      b.step();
      (void)cores[0]->progress();
    };
    char msg[8] = "x";
    ASSERT_EQ(b.send(msg, sizeof msg, Priority::high, 0, 1, 7), Status::ok);
    for (int i = 0; i < 2000 && raw.answers.empty(); ++i) pump();
    ASSERT_EQ(raw.answers.size(), 1u);
    EXPECT_EQ(raw.header_sizes[0], wire::PortHeader::compact_size);
    const wire::PortHeader& h = raw.answers[0];
    EXPECT_EQ(h.kind, wire::PortKind::send);
    EXPECT_EQ(h.priority, 1);
    EXPECT_EQ(h.sending_port, 2);
    EXPECT_EQ(h.receiving_port, 1);
    EXPECT_EQ(h.length, sizeof msg);
    EXPECT_EQ(h.size_class, 4);  // ceil(log2(8 + 8))
    // A get request carries an address and a cookie: the full header.
    ASSERT_EQ(b.port->register_memory(msg, sizeof msg), Status::ok);
    ASSERT_EQ(
        b.port->get(0x1000, msg, sizeof msg, Priority::low, 0, 1, Driver::on_sent, Driver::id(9)),
        Status::ok);
    for (int i = 0; i < 2000 && raw.answers.size() < 2; ++i) pump();
    ASSERT_EQ(raw.answers.size(), 2u);
    EXPECT_EQ(raw.answers[1].kind, wire::PortKind::get_request);
    EXPECT_EQ(raw.header_sizes[1], wire::PortHeader::size);
  }
  node->reset();
  cores.clear();
}

/// A nack whose status names no failure (in_progress) is still a failure
/// the sender reports, not a silent park that would stall the connection.
TEST(PortHostile, ANackThatNamesNoFailureIsReported) {
  config::ScopedSet drivers("CORE_DRIVERS", "self");
  auto cores = connected_cores(2);
  ASSERT_EQ(cores.size(), 2u);
  Raw raw(*cores[0]);
  ASSERT_EQ(cores[0]->attach(wire::Upper::port, &raw, wire::PortHeader::size), Status::ok);
  auto node = Node::attach(*cores[1]);
  ASSERT_TRUE(node);
  {
    Driver b(**node, 2);
    auto pump = [&] {
      b.step();
      (void)cores[0]->progress();
    };
    char msg[8] = "x";
    ASSERT_EQ(b.send(msg, sizeof msg, Priority::low, 0, 1, 7), Status::ok);
    for (int i = 0; i < 2000 && raw.answers.empty(); ++i) pump();
    ASSERT_EQ(raw.answers.size(), 1u);
    wire::PortHeader nack;
    nack.kind = wire::PortKind::nack;
    nack.sending_port = 1;
    nack.receiving_port = 2;
    nack.peer_epoch = raw.answers[0].epoch;  // answers the port that sent
    nack.tag = static_cast<std::uint8_t>(Status::in_progress);
    ASSERT_EQ(raw.send(nack), Status::ok);
    for (int i = 0; i < 2000 && b.completions.empty(); ++i) pump();
    ASSERT_EQ(b.completions.size(), 1u);
    EXPECT_EQ(b.completions[0].status, Status::malformed);
    // A reported failure: exactly one resume enables the connection again.
    ASSERT_EQ(b.port->resume_sending(Priority::low, 0, 1, Driver::on_sent, Driver::id(8)),
              Status::ok);
    ++b.outstanding_sends;
  }
  node->reset();
  cores.clear();
}

/// Only a get reply answers a get: an ack from its target (alone, or
/// piggybacked on a send) completed the get `ok` with nothing landed, and
/// the real reply was then dropped (found by a review). The ack now stops at
/// the get, which completes with its reply.
TEST(PortHostile, AnAckDoesNotCompleteAGet) {
  config::ScopedSet drivers("CORE_DRIVERS", "self");
  for (const bool piggybacked : {false, true}) {
    SCOPED_TRACE(piggybacked ? "piggybacked on a send" : "an ack packet");
    auto cores = connected_cores(2);
    ASSERT_EQ(cores.size(), 2u);
    Raw raw(*cores[0]);
    ASSERT_EQ(cores[0]->attach(wire::Upper::port, &raw, wire::PortHeader::size), Status::ok);
    auto node = Node::attach(*cores[1]);
    ASSERT_TRUE(node);
    {
      Driver b(**node, 2);
      auto pump = [&] {
        b.step();
        (void)cores[0]->progress();
      };
      std::array<char, 8> into{};
      into.fill('o');
      ASSERT_EQ(b.port->register_memory(into.data(), into.size()), Status::ok);
      ASSERT_EQ(b.port->get(0x1000, into.data(), into.size(), Priority::low, 0, 1, Driver::on_sent,
                            Driver::id(9)),
                Status::ok);
      ++b.outstanding_sends;
      for (int i = 0; i < 2000 && raw.answers.empty(); ++i) pump();
      ASSERT_EQ(raw.answers.size(), 1u);
      const wire::PortHeader request = raw.answers[0];
      ASSERT_EQ(request.kind, wire::PortKind::get_request);
      wire::PortHeader ack;
      ack.sending_port = 1;
      ack.receiving_port = 2;
      ack.peer_epoch = request.epoch;
      ack.tag = 1;  // one op answered
      std::vector<std::byte> body(8, std::byte{'s'});
      if (piggybacked) {
        // A send to port 2 whose tag acks one op; nothing takes the send
        // (no buffer), which does not matter here.
        ack.kind = wire::PortKind::send;
        ack.length = body.size();
        ack.size_class = 4;
        ASSERT_EQ(raw.send(ack, &body), Status::ok);
      } else {
        ack.kind = wire::PortKind::ack;
        ASSERT_EQ(raw.send(ack), Status::ok);
      }
      for (int i = 0; i < 200; ++i) pump();
      EXPECT_TRUE(b.completions.empty()) << "the get completed without its reply";
      // The real reply still lands and completes the get.
      wire::PortHeader reply;
      reply.kind = wire::PortKind::get_reply;
      reply.sending_port = 1;
      reply.receiving_port = 2;
      reply.peer_epoch = request.epoch;
      reply.cookie = request.cookie;
      reply.length = into.size();
      std::vector<std::byte> data(into.size(), std::byte{'r'});
      ASSERT_EQ(raw.send(reply, &data), Status::ok);
      for (int i = 0; i < 2000 && b.completions.empty(); ++i) pump();
      ASSERT_EQ(b.completions.size(), 1u);
      EXPECT_EQ(b.completions[0].status, Status::ok);
      EXPECT_EQ(std::string(into.data(), into.size()), std::string(8, 'r'));
    }
    node->reset();
    cores.clear();
  }
}

/// A receive whose sender died mid-transfer is withdrawn (no event); its
/// buffer went back to the free list at once, while its slot stayed in the
/// event ring behind an older receive still landing. The next arrival took
/// the buffer and found the ring full: reserve() gave null and deliver()
/// wrote through it (found by a review). The buffer now returns when its
/// slot leaves the ring, so the rings keep one slot per token.
TEST(PortHostile, AWithdrawnReceiveKeepsItsPlaceUntilItsSlotLeaves) {
  config::ScopedSet drivers("CORE_DRIVERS", "self");
  config::ScopedSet eager("CORE_EAGER_LIMIT", "1K");  // 4 KiB messages: rendezvous
  config::ScopedSet tokens("PORT_RECV_TOKENS", "2");  // event rings of two slots
  auto cores = connected_cores(4);                    // 1 receives; 0 stalls, 2 dies, 3 sends after
  ASSERT_EQ(cores.size(), 4u);
  std::vector<std::unique_ptr<Raw>> raws(4);
  for (core::Rank r : {0u, 2u, 3u}) {
    raws[r] = std::make_unique<Raw>(*cores[r]);
    ASSERT_EQ(cores[r]->attach(wire::Upper::port, raws[r].get(), wire::PortHeader::size),
              Status::ok);
  }
  auto node = Node::attach(*cores[1]);
  ASSERT_TRUE(node);
  {
    Driver b(**node, 2);
    constexpr unsigned size = 13;  // holds 4 KiB
    std::vector<std::byte> bufs[2] = {buffer_for(size), buffer_for(size)};
    for (auto& buf : bufs) ASSERT_EQ(b.provide(buf.data(), size, Priority::low), Status::ok);
    std::vector<std::byte> data = pattern(4096, 5);
    auto rts_from = [&](core::Rank r, std::uint16_t sport) {
      wire::PortHeader h;
      h.kind = wire::PortKind::send;
      h.size_class = size;
      h.sending_port = sport;
      h.receiving_port = 2;
      h.length = 4096;
      ASSERT_EQ(raws[r]->send(h, &data), Status::ok);
      for (int i = 0; i < 4; ++i) (void)cores[r]->progress();  // the request leaves
      for (int i = 0; i < 200; ++i) b.step();                  // and is matched
    };
    rts_from(0, 1);  // lands only when core 0 runs again: never, here
    rts_from(2, 1);  // its sender dies before the data
    raws[2].reset();
    cores[2].reset();
    for (int i = 0; i < 2000; ++i) b.step();
    EXPECT_TRUE(b.received.empty());
    rts_from(3, 1);  // must wait for a buffer, not take the withdrawn one's
    EXPECT_TRUE(b.received.empty());
    b.check_tokens();
    // Core 0 runs: its message lands and is handed out; the withdrawn slot
    // then leaves the ring, its buffer takes core 3's message.
    for (int i = 0; i < 20000 && b.received.size() < 2; ++i) {
      b.step();
      (void)cores[0]->progress();
      (void)cores[3]->progress();
    }
    ASSERT_EQ(b.received.size(), 2u);
    for (const Received& r : b.received) EXPECT_TRUE(r.data == data);
    EXPECT_EQ(b.received[0].event.sender_node_id, 0u);
    EXPECT_EQ(b.received[1].event.sender_node_id, 3u);
  }
  node->reset();
  raws.clear();
  cores.clear();
}

/// Resumes repeated behind a held arrival share one held entry (each is
/// still answered, in order); and when the peer dies, what the port held of
/// it gives its core messages back instead of keeping them for ever.
TEST(PortHostile, RepeatedControlsShareAnEntryAndADeadPeersArrivalsAreReleased) {
  config::ScopedSet drivers("CORE_DRIVERS", "self");
  config::ScopedSet held("PORT_HELD", "1");  // raised to 2 x CORE_RECV_MSGS + 1
  auto cores = connected_cores(2);
  ASSERT_EQ(cores.size(), 2u);
  auto raw = std::make_unique<Raw>(*cores[0]);
  ASSERT_EQ(cores[0]->attach(wire::Upper::port, raw.get(), wire::PortHeader::size), Status::ok);
  auto node = Node::attach(*cores[1]);
  ASSERT_TRUE(node);
  {
    Driver b(**node, 2);
    auto pump = [&] {
      b.step();
      if (cores[0]) (void)cores[0]->progress();
    };
    wire::PortHeader send;
    send.kind = wire::PortKind::send;
    send.size_class = 4;
    send.sending_port = 1;
    send.receiving_port = 2;
    send.length = 8;
    std::vector<std::byte> eight = pattern(8, 1);
    ASSERT_EQ(raw->send(send, &eight), Status::ok);  // no buffer: held
    wire::PortHeader resume;
    resume.kind = wire::PortKind::resume;
    resume.sending_port = 1;
    resume.receiving_port = 2;
    for (int i = 0; i < 50; ++i) ASSERT_EQ(raw->send(resume), Status::ok);
    for (int i = 0; i < 200; ++i) pump();
    EXPECT_TRUE(raw->answers.empty());  // all behind the held send
    // A buffer comes: the send and then the 50 controls are answered.
    std::vector<std::byte> buf = buffer_for(4);
    ASSERT_EQ(b.provide(buf.data(), 4, Priority::low), Status::ok);
    std::uint64_t acked = 0;
    for (int i = 0; i < 5000 && acked < 51; ++i) {
      pump();
      acked = 0;
      for (auto& a : raw->answers)
        if (a.kind == wire::PortKind::ack) acked += a.tag;
    }
    EXPECT_EQ(acked, 51u);
    ASSERT_EQ(b.received.size(), 1u);
    // Two more sends are held; then rank 0 dies.
    ASSERT_EQ(raw->send(send, &eight), Status::ok);
    ASSERT_EQ(raw->send(send, &eight), Status::ok);
    for (int i = 0; i < 200; ++i) pump();
    EXPECT_EQ(cores[1]->stats().recv_msgs_live, 2u);
    raw.reset();
    cores[0].reset();
    for (int i = 0; i < 20000 && cores[1]->stats().recv_msgs_live != 0; ++i) pump();
    EXPECT_EQ(cores[1]->stats().recv_msgs_live, 0u);
  }
  node->reset();
  cores.clear();
}

// Answers wait for core room (two send slots, both held by answers to a
// node that takes none): a peer that keeps asking for answers that need no
// state (gets, ops to a closed port) used to queue one entry per request,
// past the queues' ends, and the answers past them were lost (their askers
// wait for ever). Now each request stays with the
// core until its answer leaves, so the asker's credits bound what it queues.
TEST(PortHostile, AnswersWaitingForCoreRoomAreNeverLost) {
  config::ScopedSet drivers("CORE_DRIVERS", "self");
  config::ScopedSet slots("CORE_SEND_MSGS", "2");
  config::ScopedSet credits("CORE_CREDITS", "8");
  config::ScopedSet states("CORE_RECV_MSGS", "64");
  config::ScopedSet held("PORT_HELD", "1");  // raised to 2 x CORE_RECV_MSGS + 1
  auto cores = connected_cores(3);
  ASSERT_EQ(cores.size(), 3u);
  Raw asker(*cores[0]), silent(*cores[2]);
  ASSERT_EQ(cores[0]->attach(wire::Upper::port, &asker, wire::PortHeader::size), Status::ok);
  ASSERT_EQ(cores[2]->attach(wire::Upper::port, &silent, wire::PortHeader::size), Status::ok);
  silent.hold = true;
  auto node = Node::attach(*cores[1]);
  ASSERT_TRUE(node);
  {
    Driver b(**node, 2);
    // Once the silent node is back, node 1's port is not polled at all:
    // whoever progresses its core sends what waits for room (send_room).
    bool poll_port = true;
    auto pump = [&](int rounds) {
      for (int i = 0; i < rounds; ++i) {
        if (poll_port)
          b.step();
        else
          (void)cores[1]->progress();
        (void)cores[0]->progress();
        (void)cores[2]->progress();
      }
    };
    // Sends what the core takes, pumping meanwhile; false if it never does.
    auto send = [&](Raw& from, const wire::PortHeader& h) {
      for (int k = 0; k < 200; ++k) {
        const Status st = from.send(h);
        if (st == Status::ok) return true;
        EXPECT_EQ(st, Status::no_resource);
        pump(1);
      }
      return false;
    };
    std::vector<std::byte> window = pattern(64, 3);
    ASSERT_EQ(b.port->register_memory(window.data(), window.size()), Status::ok);
    wire::PortHeader get;
    get.kind = wire::PortKind::get_request;
    get.receiving_port = 2;
    get.length = 8;
    get.remote_address = reinterpret_cast<std::uintptr_t>(window.data());
    get.epoch = 1;
    // The silent node's answers take node 1's credits toward it, then both
    // send slots; the rest wait in the port's queue.
    get.sending_port = 7;
    int from_silent = 0;
    for (; from_silent < 24 && send(silent, get); ++from_silent) pump(2);
    pump(200);
    ASSERT_GE(from_silent, 10);  // its credits, and those of the answers that left
    // The asker: gets to port 2, ops to closed port 3, from many ports.
    constexpr int asked = 1200;
    int sent = 0;
    for (; sent < asked; ++sent) {
      get.sending_port = static_cast<std::uint16_t>(10 + sent % 4);
      get.receiving_port = sent % 2 == 0 ? 2 : 3;
      if (!send(asker, get)) break;
    }
    pump(200);
    silent.release();
    poll_port = false;
    for (; sent < asked; ++sent) {
      get.sending_port = static_cast<std::uint16_t>(10 + sent % 4);
      get.receiving_port = sent % 2 == 0 ? 2 : 3;
      ASSERT_TRUE(send(asker, get)) << sent;
    }
    for (int i = 0; i < 20000 && (asker.answers.size() < asked ||
                                  silent.answers.size() < std::size_t(from_silent));
         ++i)
      pump(1);
    EXPECT_EQ(asker.answers.size(), std::size_t{asked});
    EXPECT_EQ(silent.answers.size(), std::size_t(from_silent));
    std::size_t replies = 0;
    for (const auto& a : asker.answers) replies += a.kind == wire::PortKind::get_reply;
    EXPECT_EQ(replies, std::size_t{asked / 2});  // the rest: closed-port nacks
    EXPECT_EQ(b.port->deregister_memory(window.data(), window.size()), Status::ok);
  }
  node->reset();
  cores.clear();
}

// While answers wait for core room, sends the port holds (no buffer of
// their size) and then drops (a drop control) were taken back at once and
// their nacks queued with no credit held: a peer repeating that filled the
// port's answer pool, and every later answer to any node was lost ("no
// room for an answer"; found by a review). Now a dropped or timed-out
// arrival stays with the core until its nack leaves, so the sender's
// credits bound what it queues, and another node's get is answered.
TEST(PortHostile, DroppingHeldSendsAgainAndAgainCannotFillTheAnswerQueue) {
  config::ScopedSet drivers("CORE_DRIVERS", "self");
  config::ScopedSet slots("CORE_SEND_MSGS", "2");
  config::ScopedSet credits("CORE_CREDITS", "8");
  config::ScopedSet states("CORE_RECV_MSGS", "64");
  config::ScopedSet held("PORT_HELD", "1");  // raised to 2 x CORE_RECV_MSGS + 1
  config::ScopedSet close_wait("PORT_CLOSE_WAIT_MS", "500");
  auto cores = connected_cores(4);
  ASSERT_EQ(cores.size(), 4u);
  Raw asker(*cores[0]), silent(*cores[2]), other(*cores[3]);
  ASSERT_EQ(cores[0]->attach(wire::Upper::port, &asker, wire::PortHeader::size), Status::ok);
  ASSERT_EQ(cores[2]->attach(wire::Upper::port, &silent, wire::PortHeader::size), Status::ok);
  ASSERT_EQ(cores[3]->attach(wire::Upper::port, &other, wire::PortHeader::size), Status::ok);
  silent.hold = true;
  auto node = Node::attach(*cores[1]);
  ASSERT_TRUE(node);
  {
    Driver b(**node, 2);
    auto pump = [&](int rounds) {
      for (int i = 0; i < rounds; ++i) {
        b.step();
        (void)cores[0]->progress();
        (void)cores[2]->progress();
        (void)cores[3]->progress();
      }
    };
    // What the core takes within a while, pumping meanwhile.
    auto send = [&](Raw& from, const wire::PortHeader& h, std::vector<std::byte>* body) {
      for (int k = 0; k < 50; ++k) {
        if (from.send(h, body) == Status::ok) return true;
        pump(1);
      }
      return false;
    };
    std::vector<std::byte> window = pattern(64, 3);
    ASSERT_EQ(b.port->register_memory(window.data(), window.size()), Status::ok);
    wire::PortHeader get;
    get.kind = wire::PortKind::get_request;
    get.receiving_port = 2;
    get.length = 8;
    get.remote_address = reinterpret_cast<std::uintptr_t>(window.data());
    get.epoch = 1;
    get.sending_port = 7;
    // The silent node's replies take node 1's send slots: answers queue.
    int from_silent = 0;
    for (; from_silent < 24 && send(silent, get, nullptr); ++from_silent) pump(2);
    pump(200);
    ASSERT_GE(from_silent, 10);
    // The asker: rounds of sends the port has no buffer for, each round
    // dropped by a drop control from the same port.
    wire::PortHeader held_send;
    held_send.kind = wire::PortKind::send;
    held_send.sending_port = 5;
    held_send.receiving_port = 2;
    held_send.epoch = 1;
    held_send.length = 1000;
    held_send.size_class = 10;  // ceil(log2(1000 + 8))
    std::vector<std::byte> body(1000, std::byte{1});
    wire::PortHeader drop;
    drop.kind = wire::PortKind::drop;
    drop.sending_port = 5;
    drop.receiving_port = 2;
    drop.epoch = 1;
    for (int round = 0; round < 60; ++round) {
      for (int k = 0; k < 7; ++k)
        if (!send(asker, held_send, &body)) break;  // its credits are held: the bound
      pump(4);
      (void)send(asker, drop, nullptr);
      pump(4);
    }
    // Another node asks for data.
    get.sending_port = 20;
    ASSERT_TRUE(send(other, get, nullptr));
    pump(50);
    silent.release();
    bool replied = false;
    for (int i = 0; i < 20000 && !replied; ++i) {
      pump(1);
      for (const auto& a : other.answers)
        replied |= a.kind == wire::PortKind::get_reply && a.receiving_port == 20;
    }
    EXPECT_TRUE(replied) << "the get from port 20 was never answered";
    EXPECT_EQ(b.port->deregister_memory(window.data(), window.size()), Status::ok);
  }
  node->reset();
  cores.clear();
}

}  // namespace
}  // namespace pier::port::test
