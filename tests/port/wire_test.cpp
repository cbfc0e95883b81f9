// Golden bytes of the port header's answer and control kinds (ack, nack,
// resume, drop), and the decoder's refusal of kinds it does not know and of
// fields a kind does not use. The op kinds' vectors are in
// tests/unit/wire/golden_test.cpp.
#include <gtest/gtest.h>

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "wire/port.hpp"

namespace pier::wire {
namespace {

using Bytes = std::vector<std::byte>;

Bytes bytes(std::initializer_list<int> v) {
  Bytes b;
  for (int x : v) b.push_back(static_cast<std::byte>(x));
  return b;
}

/// Encodes to `golden`, decodes back to `h`.
void check_golden(const PortHeader& h, const Bytes& golden) {
  ASSERT_EQ(golden.size(), PortHeader::size);
  Bytes out(PortHeader::size);
  auto n = encode(h, out);
  ASSERT_TRUE(n);
  EXPECT_EQ(*n, PortHeader::size);
  EXPECT_EQ(out, golden);
  auto back = PortHeader::decode(golden);
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, h);
}

Status decode_with(Bytes b, std::size_t at, int value) {
  b[at] = static_cast<std::byte>(value);
  return PortHeader::decode(b).status();
}

PortHeader answer(PortKind kind, std::uint64_t tag) {
  PortHeader h;
  h.kind = kind;
  h.priority = 1;
  h.sending_port = 0x0203;
  h.receiving_port = 4;
  h.epoch = 0x0506;
  // Answers name the incarnation of the port they answer; controls nothing.
  if (kind == PortKind::ack || kind == PortKind::nack) h.peer_epoch = 0x0708;
  h.tag = tag;
  return h;
}

//                     version kind  prio  size  sending     receiving
Bytes head(int kind) {
  return bytes({0x02, kind, 0x01, 0x00, 0x03, 0x02, 0x04, 0x00});
}
Bytes cat(Bytes a, const Bytes& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}
Bytes zeros(std::size_t n) {
  return Bytes(n);
}
//                                   length      epoch       peer_epoch
const Bytes answer_epochs = bytes({0, 0, 0, 0, 0x06, 0x05, 0x08, 0x07});
const Bytes control_epochs = bytes({0, 0, 0, 0, 0x06, 0x05, 0x00, 0x00});

TEST(PortWire, AckGolden) {
  const Bytes golden =
      cat(cat(cat(head(5), answer_epochs), bytes({0x2a, 0x01, 0, 0, 0, 0, 0, 0})), zeros(16));
  check_golden(answer(PortKind::ack, 0x12a), golden);
  // The count is at least 1 and fits 32 bits; no length, size, address, cookie.
  EXPECT_EQ(decode_with(cat(cat(cat(head(5), zeros(8)), zeros(8)), zeros(16)), 0, 2),
            Status::malformed);
  EXPECT_EQ(decode_with(golden, 20, 1), Status::malformed);  // count 2^32 + ...
  EXPECT_EQ(decode_with(golden, 8, 1), Status::malformed);   // length
  EXPECT_EQ(decode_with(golden, 3, 4), Status::malformed);   // size class
  EXPECT_EQ(decode_with(golden, 24, 1), Status::malformed);  // address
  EXPECT_EQ(decode_with(golden, 32, 1), Status::malformed);  // cookie
  EXPECT_EQ(decode_with(golden, 12, 1), Status::ok);         // any epoch
  EXPECT_EQ(decode_with(golden, 19, 0xff), Status::ok);      // count 0xff00012a
}

TEST(PortWire, NackGoldenCarriesAFailureStatus) {
  const auto closed = static_cast<std::uint8_t>(Status::closed);
  const Bytes golden =
      cat(cat(cat(head(6), answer_epochs), bytes({closed, 0, 0, 0, 0, 0, 0, 0})), zeros(16));
  check_golden(answer(PortKind::nack, closed), golden);
  EXPECT_EQ(decode_with(golden, 16, 0), Status::malformed);  // "ok" is no failure
  EXPECT_EQ(decode_with(golden, 16, static_cast<int>(status_count)), Status::malformed);
  EXPECT_EQ(decode_with(golden, 17, 1), Status::malformed);
  EXPECT_EQ(decode_with(golden, 16, static_cast<int>(status_count) - 1), Status::ok);
}

TEST(PortWire, ResumeAndDropGoldenCarryNothing) {
  for (PortKind k : {PortKind::resume, PortKind::drop}) {
    const Bytes golden = cat(cat(head(static_cast<int>(k)), control_epochs), zeros(24));
    check_golden(answer(k, 0), golden);
    EXPECT_EQ(decode_with(golden, 14, 1), Status::malformed);  // a control answers nothing
    EXPECT_EQ(decode_with(golden, 16, 1), Status::malformed);  // tag
    EXPECT_EQ(decode_with(golden, 8, 1), Status::malformed);   // length
    EXPECT_EQ(decode_with(golden, 39, 1), Status::malformed);  // cookie
    EXPECT_EQ(decode_with(golden, 2, 2), Status::malformed);   // priority
  }
}

TEST(PortWire, KindsThatNameNothingAreRejected) {
  const Bytes golden = cat(cat(head(7), zeros(8)), zeros(24));
  for (int kind = 0; kind < 256; ++kind) {
    const bool known = kind >= 1 && kind < port_kind_limit;
    const Status s = decode_with(golden, 1, kind);
    if (!known) {
      EXPECT_EQ(s, Status::malformed) << kind;
    }
    EXPECT_EQ(to_string(static_cast<PortKind>(kind)) != "unknown", known) << kind;
  }
  // An encoder refuses what the decoder would refuse.
  Bytes out(PortHeader::size);
  EXPECT_EQ(encode(answer(PortKind::ack, 0), out).status(), Status::invalid_argument);
  EXPECT_EQ(encode(answer(PortKind::nack, 0), out).status(), Status::invalid_argument);
  EXPECT_EQ(encode(answer(PortKind::drop, 3), out).status(), Status::invalid_argument);
  EXPECT_EQ(encode(answer(static_cast<PortKind>(port_kind_limit), 0), out).status(),
            Status::invalid_argument);
}

}  // namespace
}  // namespace pier::wire
