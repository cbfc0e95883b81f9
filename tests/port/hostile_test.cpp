// A peer that speaks the port protocol badly: headers that do not decode,
// fields that disagree with the core's, answers for nothing, forged get
// replies and controls, huge ack counts. The port rejects each without an
// assert or a crash, answers what deserves an answer, and keeps working.
#include <array>
#include <deque>

#include "harness.hpp"
#include "wire/port.hpp"

namespace pier::port::test {
namespace {

/// A raw upper layer on node 0: sends any header, records what comes back.
class Raw final : public core::Client {
 public:
  explicit Raw(core::Core& c) : core_(c) {}
  void lib_parse(const core::Arrival& a) noexcept override {
    auto h = wire::PortHeader::decode(a.header);
    if (h) answers.push_back(*h);
    (void)core_.recv(a.handle, nullptr, nullptr, 0, 0, 0);
  }
  void lib_finalize(void*, Status) noexcept override {}

  Status send(std::span<const std::byte> header, std::uint8_t prio, std::uint16_t sport,
              std::uint16_t dport, std::vector<std::byte>* payload = nullptr) {
    core::SendArgs a;
    a.peer = 1;
    a.priority = prio;
    a.source_port = sport;
    a.destination_port = dport;
    a.upper = wire::Upper::port;
    a.header = header;
    if (payload && !payload->empty()) {
      regions.push_back(*core_.validate(payload->data(), payload->size()));
      a.region = &regions.back();
      a.length = payload->size();
    }
    return core_.send(a);
  }
  Status send(const wire::PortHeader& h, std::vector<std::byte>* payload = nullptr) {
    std::array<std::byte, wire::PortHeader::size> b{};
    if (!wire::encode(h, b)) return Status::invalid_argument;
    return send(b, h.priority, h.sending_port, h.receiving_port, payload);
  }

  std::vector<wire::PortHeader> answers;
  std::deque<core::Region> regions;

 private:
  core::Core& core_;
};

TEST(PortHostile, BadPeersAreRejectedAndTheGoodOnesStillServed) {
  config::ScopedSet drivers("CORE_DRIVERS", "self");
  std::vector<std::unique_ptr<core::Core>> cores;
  for (core::Rank r = 0; r < 2; ++r) cores.push_back(std::move(*core::Core::create(r, 2)));
  std::vector<std::vector<std::byte>> addresses{cores[0]->address(), cores[1]->address()};
  for (auto& c : cores) ASSERT_EQ(c->connect(addresses), Status::ok);
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
    // Bytes that do not decode: wrong version, reserved bytes set, short.
    std::array<std::byte, wire::PortHeader::size> junk{};
    junk.fill(std::byte{0xff});
    ASSERT_EQ(raw.send(junk, 0, 1, 2), Status::ok);
    wire::PortHeader good;
    good.kind = wire::PortKind::send;
    good.size_class = 4;
    good.sending_port = 1;
    good.receiving_port = 2;
    good.length = 8;
    // The header disagrees with the core's routing fields or the payload.
    std::vector<std::byte> eight = pattern(8, 1), seven = pattern(7, 2);
    std::array<std::byte, wire::PortHeader::size> enc{};
    ASSERT_TRUE(wire::encode(good, enc));
    ASSERT_EQ(raw.send(enc, 1, 1, 2, &eight), Status::ok);  // priority differs
    ASSERT_EQ(raw.send(enc, 0, 5, 2, &eight), Status::ok);  // sending port differs
    ASSERT_EQ(raw.send(good, &seven), Status::ok);          // length differs
    // Answers for ops that do not exist; forged get data; a huge ack count.
    wire::PortHeader reply;
    reply.kind = wire::PortKind::ack;
    reply.sending_port = 1;
    reply.receiving_port = 2;
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
    // Kinds the decoder does not know, and answers whose fields it rejects.
    std::array<std::byte, wire::PortHeader::size> bad{};
    reply.kind = wire::PortKind::ack;
    reply.cookie = 0;
    reply.tag = 1;
    ASSERT_TRUE(wire::encode(reply, bad));
    for (std::uint8_t kind : {std::uint8_t{0}, wire::port_kind_limit, std::uint8_t{0xff}}) {
      bad[1] = std::byte{kind};
      ASSERT_EQ(raw.send(bad, 0, 1, 2), Status::ok);
    }
    bad[1] = std::byte{static_cast<std::uint8_t>(wire::PortKind::nack)};
    bad[16] = std::byte{0};  // a nack with status ok
    ASSERT_EQ(raw.send(bad, 0, 1, 2), Status::ok);
    bad[1] = std::byte{static_cast<std::uint8_t>(wire::PortKind::resume)};
    bad[16] = std::byte{1};  // a resume with a tag
    ASSERT_EQ(raw.send(bad, 0, 1, 2), Status::ok);
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
    reply.sending_port = 3;
    ASSERT_EQ(raw.send(reply), Status::ok);
    good.sending_port = 3;
    ASSERT_EQ(raw.send(good, &eight), Status::ok);
    for (int i = 0; i < 2000 && b.received.empty(); ++i) pump(1);
    ASSERT_EQ(b.received.size(), 1u);
    EXPECT_EQ(b.received[0].data, eight);
    for (int i = 0; i < 2000 && raw.answers.size() < 2; ++i) pump(1);
    ASSERT_GE(raw.answers.size(), 2u);
    EXPECT_EQ(raw.answers.back().kind, wire::PortKind::ack);
    EXPECT_EQ(raw.answers.back().tag, 2u);  // the resume and the send, coalesced
  }
  node->reset();
  cores.clear();
}

}  // namespace
}  // namespace pier::port::test
