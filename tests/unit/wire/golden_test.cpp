// Golden byte vectors: for every header, encode gives exactly the bytes
// written here (by hand, from docs/wire.md), decode gives the struct back,
// and corrupted versions are rejected with a status.
#include "wire/wire.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string_view>
#include <type_traits>
#include <vector>

namespace pier::wire {
namespace {

using Bytes = std::vector<std::byte>;

Bytes bytes(std::initializer_list<int> v) {
  Bytes out;
  for (int x : v) out.push_back(static_cast<std::byte>(x));
  return out;
}

/// zeros(n): n zero bytes, to keep long runs readable.
Bytes cat(std::initializer_list<Bytes> parts) {
  Bytes out;
  for (const Bytes& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}
Bytes zeros(std::size_t n) {
  return Bytes(n, std::byte{0});
}

/// Encode gives `golden` exactly; decode of `golden` gives `h`; encode into
/// every shorter buffer is refused; decode of every prefix is refused.
template <class H>
void check_golden(const H& h, const Bytes& golden) {
  ASSERT_EQ(golden.size(), H::size);
  Bytes out(H::size + 5, std::byte{0xee});
  Result<std::size_t> n = encode(h, out);
  ASSERT_TRUE(n.has_value()) << to_string(n.status());
  EXPECT_EQ(*n, H::size);
  EXPECT_EQ(Bytes(out.begin(), out.begin() + H::size), golden);
  EXPECT_EQ(out[H::size], std::byte{0xee}) << "encode wrote past its size";

  Result<H> back = H::decode(golden);
  ASSERT_TRUE(back.has_value()) << to_string(back.status());
  EXPECT_TRUE(*back == h);

  Bytes longer = golden;
  longer.push_back(std::byte{0x5a});  // payload after the header is not its business
  EXPECT_TRUE(H::decode(longer).has_value());

  for (std::size_t len = 0; len < H::size; ++len) {
    Bytes small(len);
    EXPECT_EQ(encode(h, small).status(), Status::invalid_argument) << len;
    EXPECT_FALSE(H::decode(std::span(golden).first(len)).has_value()) << len;
    if (len > 0) {
      EXPECT_EQ(H::decode(std::span(golden).first(len)).status(), Status::malformed) << len;
    }
  }
}

/// Flipping any byte in `offsets` to a nonzero value makes decode fail.
template <class H>
void check_rejected_bytes(const Bytes& golden, std::initializer_list<std::size_t> offsets,
                          Status expected = Status::malformed) {
  for (std::size_t at : offsets) {
    for (int v : {0x01, 0x80, 0xff}) {
      Bytes bad = golden;
      bad[at] = static_cast<std::byte>(v);
      EXPECT_EQ(H::decode(bad).status(), expected) << "offset " << at << " value " << v;
    }
  }
}

template <class H>
void check_version(const Bytes& golden) {
  for (int v : {0x00, 0x01, 0xff}) {
    Bytes bad = golden;
    bad[0] = static_cast<std::byte>(v);
    EXPECT_EQ(H::decode(bad).status(), Status::version_mismatch) << v;
    EXPECT_EQ(H::decode(std::span(bad).first(1)).status(), Status::version_mismatch) << v;
  }
}

// ---- frame ------------------------------------------------------------------

FrameHeader golden_frame() {
  FrameHeader f;
  f.type = PacketType::eager;
  f.flags = flag_ack_request;
  f.priority = 1;
  f.upper = Upper::portals;
  f.upper_length = 0x58;
  f.credit_return = 0x0102;
  f.payload_length = 0x1234;
  f.sequence = 0xa1b2c3d4;
  f.source_endpoint = 7;
  f.source_port = 5;
  f.destination_port = 0xbeef;
  return f;
}

const Bytes frame_bytes = bytes({0x02, 0x02, 0x40, 0x01, 0x01, 0x58, 0x02, 0x01,  //
                                 0x34, 0x12, 0x00, 0x00, 0xd4, 0xc3, 0xb2, 0xa1,  //
                                 0x07, 0x00, 0x00, 0x00, 0x05, 0x00, 0xef, 0xbe});

TEST(Golden, FrameHeader) {
  check_golden(golden_frame(), frame_bytes);
  check_version<FrameHeader>(frame_bytes);
}

TEST(Golden, FrameUpperLengthIsAnEagerPacketsUpperHeaderWithinItsPayload) {
  auto with = [](std::size_t at, int v, Bytes b = frame_bytes) {
    b[at] = static_cast<std::byte>(v);
    return FrameHeader::decode(b).status();
  };
  EXPECT_EQ(with(5, 0), Status::ok);     // no upper header
  EXPECT_EQ(with(5, 0xff), Status::ok);  // within the payload
  // Only an eager packet says where its upper header ends (an rts carries
  // it to the end of its payload), and only one that names an upper.
  EXPECT_EQ(with(1, 0x04), Status::malformed);
  EXPECT_EQ(with(4, 0x00), Status::malformed);
  // Not longer than the payload.
  Bytes short_payload = frame_bytes;
  short_payload[8] = std::byte{0x57};
  short_payload[9] = std::byte{0x00};
  EXPECT_EQ(FrameHeader::decode(short_payload).status(), Status::malformed);
  short_payload[8] = std::byte{0x58};
  EXPECT_EQ(FrameHeader::decode(short_payload).status(), Status::ok);
  FrameHeader f = golden_frame();
  f.payload_length = 0x57;
  Bytes out(FrameHeader::size);
  EXPECT_EQ(encode(f, out).status(), Status::invalid_argument);
}

TEST(Golden, FrameHeaderFieldsAreChecked) {
  auto with = [](std::size_t at, int v) {
    Bytes b = frame_bytes;
    b[at] = static_cast<std::byte>(v);
    return FrameHeader::decode(b).status();
  };
  for (int type : {0x00, 0x03, 0x09, 0xff}) EXPECT_EQ(with(1, type), Status::malformed) << type;
  for (int flags : {0x01, 0x20, 0x80}) EXPECT_EQ(with(2, flags), Status::malformed) << flags;
  EXPECT_EQ(with(2, 0x10), Status::ok);
  EXPECT_EQ(with(3, 2), Status::malformed);     // priority
  EXPECT_EQ(with(4, 3), Status::malformed);     // upper
  EXPECT_EQ(with(1, 0x06), Status::malformed);  // an ack cannot carry an upper-layer header

  // Fixed-size packets must say exactly their size; others at least theirs.
  FrameHeader f;
  Bytes out(FrameHeader::size);
  f.type = PacketType::rtr;
  f.payload_length = RtrHeader::size + 1;
  EXPECT_EQ(encode(f, out).status(), Status::invalid_argument);
  f.payload_length = RtrHeader::size;
  ASSERT_TRUE(encode(f, out).has_value());
  out[8] = std::byte{RtrHeader::size - 1};
  EXPECT_EQ(FrameHeader::decode(out).status(), Status::malformed);
  f.type = PacketType::credit;
  f.payload_length = 1;
  EXPECT_EQ(encode(f, out).status(), Status::invalid_argument);
  f.type = PacketType::data;
  f.payload_length = DataHeader::size - 1;
  EXPECT_EQ(encode(f, out).status(), Status::invalid_argument);
  f.payload_length = 0xffffffff;
  EXPECT_TRUE(encode(f, out).has_value());
}

TEST(Golden, DriverLocalPrefix) {
  const Bytes golden = cat({bytes({0x02, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  //
                                   0x0d, 0x00, 0x00, 0x00}),
                            zeros(12), bytes({0x0b, 0x0a, 0x00, 0x00, 0x05, 0x00, 0x00, 0x00})});
  Bytes out(driver_local_prefix);
  Result<std::size_t> n = encode_driver_local(0x0a0b, 5, out);
  ASSERT_TRUE(n.has_value());
  EXPECT_EQ(*n, driver_local_prefix);
  EXPECT_EQ(out, golden);
  check_golden(DriverLocalHeader{0x0a0b, 5}, Bytes(golden.begin() + 24, golden.end()));
  check_rejected_bytes<DriverLocalHeader>(Bytes(golden.begin() + 24, golden.end()), {2, 3});
  EXPECT_EQ(encode_driver_local(1, 0xfffffff8, out).status(), Status::invalid_argument);
  EXPECT_TRUE(encode_driver_local(1, 0xfffffff7, out).has_value());
}

TEST(Golden, RtsHeader) {
  check_golden(RtsHeader{0x1122334455667788, 0x100000000},
               bytes({0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11,  //
                      0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00}));
}

TEST(Golden, RtrHeader) {
  RtrHeader h;
  h.message_id = 1;
  h.offset = 0x10;
  h.length = 0x2000;
  h.rdv_len = 3;
  h.rdv_data[0] = std::byte{0xaa};
  h.rdv_data[1] = std::byte{0xbb};
  h.rdv_data[2] = std::byte{0xcc};
  const Bytes golden =
      cat({bytes({0x01}), zeros(7), bytes({0x10}), zeros(7), bytes({0x00, 0x20}), zeros(6),
           bytes({0x03}), zeros(7), bytes({0xaa, 0xbb, 0xcc}), zeros(45)});
  check_golden(h, golden);
  check_rejected_bytes<RtrHeader>(golden, {25, 31, 35, 79});  // reserved, past rdv_len

  // Stale bytes past rdv_len never reach the wire.
  RtrHeader stale = h;
  stale.rdv_data[10] = std::byte{0x77};
  Bytes out(RtrHeader::size);
  ASSERT_TRUE(encode(stale, out).has_value());
  EXPECT_EQ(out, golden);

  Bytes too_long = golden;
  too_long[24] = std::byte{49};
  EXPECT_EQ(RtrHeader::decode(too_long).status(), Status::malformed);
  stale.rdv_len = 49;
  EXPECT_EQ(encode(stale, out).status(), Status::invalid_argument);
  h.rdv_len = 48;
  h.rdv_data.fill(std::byte{0x42});
  ASSERT_TRUE(encode(h, out).has_value());
  EXPECT_TRUE(RtrHeader::decode(out).has_value());
}

TEST(Golden, DataHeader) {
  check_golden(DataHeader{0xff, 0x0102030405060708},
               bytes({0xff, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  //
                      0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01}));
}

TEST(Golden, AckHeader) {
  const Bytes golden = cat({bytes({0x02}), zeros(7), bytes({0x02}), zeros(7)});
  check_golden(AckHeader{2, AckResult::truncated}, golden);
  check_rejected_bytes<AckHeader>(golden, {9, 15});
  Bytes bad = golden;
  bad[8] = std::byte{4};
  EXPECT_EQ(AckHeader::decode(bad).status(), Status::malformed);
}

// ---- portals ----------------------------------------------------------------

PortalsHeader golden_put() {
  PortalsHeader h;
  h.op = PortalsOp::put;
  h.ack_request = AckRequest::ack;
  h.matching = Matching::matching;
  h.addressing = Addressing::physical;
  h.initiator_nid = 0x0a000001;
  h.initiator_pid = 0x1234;
  h.target_nid = 0x0a000002;
  h.target_pid = 0x5678;
  h.uid = 1000;
  h.pt_index = 4;
  h.match_bits = 0xdeadbeefcafef00d;
  h.hdr_data = 0x0102030405060708;
  h.remote_offset = 0x1000;
  h.length = 0x10000;
  h.cookie = 0x8000000000000001;
  return h;
}

const Bytes put_bytes = cat({
    bytes({0x02, 0x01, 0x01, 0x00, 0x01, 0x00, 0x00, 0x00}),  // version .. ni_fail
    bytes({0x01, 0x00, 0x00, 0x0a, 0x34, 0x12, 0x00, 0x00}),  // initiator nid, pid
    bytes({0x02, 0x00, 0x00, 0x0a, 0x78, 0x56, 0x00, 0x00}),  // target nid, pid
    bytes({0xe8, 0x03, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00}),  // uid, pt_index
    bytes({0x0d, 0xf0, 0xfe, 0xca, 0xef, 0xbe, 0xad, 0xde}),  // match_bits
    bytes({0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01}),  // hdr_data
    bytes({0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}),  // remote_offset
    bytes({0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00}),  // length
    zeros(8),                                                 // mlength
    bytes({0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80}),  // cookie
    zeros(8),                                                 // operand_length, reserved
});

TEST(Golden, PortalsPut) {
  check_golden(golden_put(), put_bytes);
  check_version<PortalsHeader>(put_bytes);
  check_rejected_bytes<PortalsHeader>(put_bytes, {84, 85, 86, 87});       // reserved
  check_rejected_bytes<PortalsHeader>(put_bytes, {5, 6, 7, 64, 71, 80});  // not a put's fields
}

TEST(Golden, PortalsCompactPut) {
  PortalsHeader h = golden_put();
  h.hdr_data = 0;
  h.remote_offset = 0;
  ASSERT_TRUE(h.fits_compact());
  // The full form's first 40 bytes, then length and cookie.
  const Bytes golden = cat({
      Bytes(put_bytes.begin(), put_bytes.begin() + 40),
      bytes({0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00}),  // length
      bytes({0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80}),  // cookie
  });
  ASSERT_EQ(golden.size(), PortalsHeader::compact_size);
  Bytes out(PortalsHeader::compact_size + 3, std::byte{0xee});
  auto n = encode_compact(h, out);
  ASSERT_TRUE(n.has_value());
  EXPECT_EQ(*n, PortalsHeader::compact_size);
  EXPECT_EQ(Bytes(out.begin(), out.begin() + 56), golden);
  EXPECT_EQ(out[56], std::byte{0xee}) << "encode wrote past its size";
  auto back = PortalsHeader::decode_compact(golden);
  ASSERT_TRUE(back.has_value());
  EXPECT_TRUE(*back == h);
  // Exactly its size: the length of the upper header is what tells the
  // forms apart, so a compact header with bytes after it is not one.
  for (std::size_t len = 1; len < golden.size(); ++len)
    EXPECT_EQ(PortalsHeader::decode_compact(std::span(golden).first(len)).status(),
              Status::malformed)
        << len;
  Bytes longer = golden;
  longer.push_back(std::byte{0});
  EXPECT_EQ(PortalsHeader::decode_compact(longer).status(), Status::malformed);
  EXPECT_EQ(PortalsHeader::decode_compact({}).status(), Status::malformed);
  Bytes other = golden;
  other[0] = std::byte{0x01};
  EXPECT_EQ(PortalsHeader::decode_compact(other).status(), Status::version_mismatch);
  // The same field rules as the full form: no atomic fields on a put, no
  // ni_fail on a request.
  for (std::size_t at : {5u, 6u, 7u}) {
    Bytes bad = golden;
    bad[at] = std::byte{0x01};
    EXPECT_EQ(PortalsHeader::decode_compact(bad).status(), Status::malformed) << at;
  }
  // What the compact form leaves out must be 0 to use it (each header
  // below is one the full form encodes).
  for (auto change :
       {+[](PortalsHeader& x) { x.hdr_data = 1; }, +[](PortalsHeader& x) { x.remote_offset = 1; },
        +[](PortalsHeader& x) {
          x.op = PortalsOp::ack;
          x.ack_request = AckRequest::none;
          x.mlength = 1;
        },
        +[](PortalsHeader& x) {
          x.op = PortalsOp::swap;
          x.ack_request = AckRequest::none;
          x.atomic_op = AtomicOp::cswap;
          x.atomic_type = AtomicType::int64;
          x.operand_length = 8;
        }}) {
    PortalsHeader wide = h;
    change(wide);
    Bytes full(PortalsHeader::size);
    EXPECT_TRUE(encode(wide, full).has_value());
    EXPECT_FALSE(wide.fits_compact());
    EXPECT_EQ(encode_compact(wide, out).status(), Status::invalid_argument);
  }
  Bytes small(PortalsHeader::compact_size - 1);
  EXPECT_EQ(encode_compact(h, small).status(), Status::invalid_argument);
}

TEST(Golden, PortalsTinyPut) {
  // A logical matching put: flags 0, pt_index, initiator rank, uid, match_bits.
  PortalsHeader h;
  h.op = PortalsOp::put;
  h.initiator_nid = 0x0102;
  h.target_nid = 7;
  h.uid = 1000;
  h.pt_index = 4;
  h.match_bits = 0xdeadbeefcafef00d;
  h.length = 8;
  h.cookie = 0x8000000000000001;  // not carried: such a put is never answered
  ASSERT_TRUE(h.fits_tiny());
  const Bytes golden = cat({
      bytes({0x00, 0x04, 0x02, 0x01}),                          // flags, pt_index, initiator
      bytes({0xe8, 0x03, 0x00, 0x00}),                          // uid
      bytes({0x0d, 0xf0, 0xfe, 0xca, 0xef, 0xbe, 0xad, 0xde}),  // match_bits
  });
  ASSERT_EQ(golden.size(), PortalsHeader::tiny_size);
  Bytes out(PortalsHeader::tiny_size + 3, std::byte{0xee});
  ASSERT_EQ(encode_tiny(h, out).value_or(0), PortalsHeader::tiny_size);
  EXPECT_EQ(Bytes(out.begin(), out.begin() + 16), golden);
  EXPECT_EQ(out[16], std::byte{0xee}) << "encode wrote past its size";
  std::array<std::byte, PortalsHeader::tiny_get_size> fixed{};
  EXPECT_EQ(write_tiny(h, fixed), PortalsHeader::tiny_size);
  EXPECT_EQ(Bytes(fixed.begin(), fixed.begin() + 16), golden);
  // What it leaves out comes back 0, and the length is the data carried.
  auto back = PortalsHeader::decode_tiny(golden, 8);
  ASSERT_TRUE(back.has_value());
  PortalsHeader expect = h;
  expect.target_nid = 0;
  expect.cookie = 0;
  EXPECT_TRUE(*back == expect);
  EXPECT_EQ(PortalsHeader::decode_tiny(golden, 4096).value().length, 4096u);

  // Physical and non-matching: the initiator is the sender's, never written.
  PortalsHeader p = h;
  p.matching = Matching::non_matching;
  p.addressing = Addressing::physical;
  p.initiator_nid = 0x0a000001;
  p.initiator_pid = 3;
  p.target_pid = 9;
  ASSERT_TRUE(p.fits_tiny());
  Bytes phys = golden;
  phys[0] = std::byte{0x03};
  phys[2] = phys[3] = std::byte{0};
  ASSERT_EQ(encode_tiny(p, out).value_or(0), PortalsHeader::tiny_size);
  EXPECT_EQ(Bytes(out.begin(), out.begin() + 16), phys);
  auto pb = PortalsHeader::decode_tiny(phys, 8);
  ASSERT_TRUE(pb.has_value());
  EXPECT_EQ(pb->addressing, Addressing::physical);
  EXPECT_EQ(pb->matching, Matching::non_matching);
  EXPECT_EQ(pb->initiator_nid, 0u);
  EXPECT_EQ(pb->initiator_pid, 0u);

  // Hostile bytes: an unknown flag, a physical initiator, any other length.
  for (std::uint8_t flags : {0x04, 0x80, 0xff}) {
    Bytes bad = golden;
    bad[0] = std::byte{flags};
    EXPECT_EQ(PortalsHeader::decode_tiny(bad, 8).status(), Status::malformed) << int{flags};
  }
  Bytes named = phys;
  named[2] = std::byte{1};
  EXPECT_EQ(PortalsHeader::decode_tiny(named, 8).status(), Status::malformed);
  for (std::size_t len = 0; len < golden.size(); ++len)
    EXPECT_EQ(PortalsHeader::decode_tiny(std::span(golden).first(len), 8).status(),
              Status::malformed)
        << len;
  Bytes longer = golden;
  longer.push_back(std::byte{0});
  EXPECT_EQ(PortalsHeader::decode_tiny(longer, 8).status(), Status::malformed);

  // Only a put with nothing the form leaves out, on a small index and rank.
  for (auto change :
       {+[](PortalsHeader& x) { x.ack_request = AckRequest::ack; },
        +[](PortalsHeader& x) { x.hdr_data = 1; }, +[](PortalsHeader& x) { x.remote_offset = 1; },
        +[](PortalsHeader& x) { x.pt_index = 256; },
        +[](PortalsHeader& x) { x.initiator_nid = 0x10000; },
        +[](PortalsHeader& x) { x.op = PortalsOp::get; },
        +[](PortalsHeader& x) {
          x.op = PortalsOp::atomic;
          x.atomic_op = AtomicOp::sum;
          x.atomic_type = AtomicType::int64;
        }}) {
    PortalsHeader wide = h;
    change(wide);
    Bytes full(PortalsHeader::size);
    EXPECT_TRUE(encode(wide, full).has_value());
    EXPECT_FALSE(wide.fits_tiny());
    EXPECT_EQ(encode_tiny(wide, out).status(), Status::invalid_argument);
  }
  Bytes small(PortalsHeader::tiny_size - 1);
  EXPECT_EQ(encode_tiny(h, small).status(), Status::invalid_argument);
}

TEST(Golden, PortalsTinyGet) {
  // A put's 16 bytes with kind 1 in the form byte, then cookie and length.
  PortalsHeader h;
  h.op = PortalsOp::get;
  h.matching = Matching::non_matching;
  h.initiator_nid = 5;
  h.uid = 1000;
  h.pt_index = 2;
  h.cookie = 0x80000001;
  h.length = 0x10000;
  ASSERT_EQ(h.tiny_length(), PortalsHeader::tiny_get_size);
  const Bytes golden = cat({
      bytes({0x05, 0x02, 0x05, 0x00}),            // form (get, non-matching), pt, initiator
      bytes({0xe8, 0x03, 0x00, 0x00}), zeros(8),  // uid, match_bits
      bytes({0x01, 0x00, 0x00, 0x80}),            // cookie
      bytes({0x00, 0x00, 0x01, 0x00}),            // length
  });
  Bytes out(PortalsHeader::tiny_get_size + 1, std::byte{0xee});
  ASSERT_EQ(encode_tiny(h, out).value_or(0), PortalsHeader::tiny_get_size);
  EXPECT_EQ(Bytes(out.begin(), out.begin() + 24), golden);
  EXPECT_EQ(out[24], std::byte{0xee});
  auto back = PortalsHeader::decode_tiny(golden, 0);
  ASSERT_TRUE(back.has_value());
  EXPECT_TRUE(*back == h);
  // The form byte says get: 16 bytes of it, or a put's 24, are malformed.
  EXPECT_EQ(PortalsHeader::decode_tiny(std::span(golden).first(16), 0).status(), Status::malformed);
  Bytes as_put = golden;
  as_put[0] = std::byte{0x01};
  EXPECT_EQ(PortalsHeader::decode_tiny(as_put, 0).status(), Status::malformed);
  // A cookie or length beyond 32 bits takes a longer form.
  for (auto change : {+[](PortalsHeader& x) { x.cookie = 0x100000000; },
                      +[](PortalsHeader& x) { x.length = 0x100000000; }}) {
    PortalsHeader wide = h;
    change(wide);
    EXPECT_FALSE(wide.fits_tiny());
    EXPECT_EQ(encode_tiny(wide, out).status(), Status::invalid_argument);
  }
}

TEST(Golden, PortalsTinyAnswer) {
  // A reply from the overflow list: form, op, ni_fail, pt, cookie, mlength, offset.
  PortalsHeader h;
  h.op = PortalsOp::reply;
  h.addressing = Addressing::physical;
  h.ni_fail = NiFail::ok;
  h.pt_index = 7;
  h.cookie = 0x1234;
  h.length = 8;
  h.mlength = 8;
  h.remote_offset = 0x40;
  h.hdr_data = 1;  // the overflow list
  ASSERT_EQ(h.tiny_length(), PortalsHeader::tiny_size);
  const Bytes golden = cat({
      bytes({0x1a, 0x06, 0x00, 0x07}),  // form (answer, physical, overflow), op, ni_fail, pt
      bytes({0x34, 0x12, 0x00, 0x00}),  // cookie
      bytes({0x08, 0x00, 0x00, 0x00}),  // mlength (= length)
      bytes({0x40, 0x00, 0x00, 0x00}),  // remote_offset
  });
  Bytes out(PortalsHeader::tiny_size);
  ASSERT_EQ(encode_tiny(h, out).value_or(0), PortalsHeader::tiny_size);
  EXPECT_EQ(out, golden);
  auto back = PortalsHeader::decode_tiny(golden, 8);
  ASSERT_TRUE(back.has_value());
  EXPECT_TRUE(*back == h);
  // An ack reporting a refusal.
  PortalsHeader ack = h;
  ack.op = PortalsOp::ack;
  ack.ni_fail = NiFail::perm_violation;
  ack.length = ack.mlength = 0;
  ack.remote_offset = 0;
  ack.hdr_data = 0;
  ASSERT_TRUE(ack.fits_tiny());
  ASSERT_TRUE(encode_tiny(ack, out).has_value());
  auto ack_back = PortalsHeader::decode_tiny(out, 0);
  ASSERT_TRUE(ack_back.has_value());
  EXPECT_TRUE(*ack_back == ack);
  // Not an answer's op, an ni_fail out of range, a list bit on a request.
  for (auto [at, value] : {std::pair{1, 0x01}, std::pair{1, 0x0a}, std::pair{2, 0x08}}) {
    Bytes bad = golden;
    bad[static_cast<std::size_t>(at)] = std::byte{static_cast<std::uint8_t>(value)};
    EXPECT_EQ(PortalsHeader::decode_tiny(bad, 8).status(), Status::malformed) << at;
  }
  Bytes listed_put = cat({bytes({0x10}), zeros(15)});
  EXPECT_EQ(PortalsHeader::decode_tiny(listed_put, 8).status(), Status::malformed);
  Bytes kind3 = cat({bytes({0x0c}), zeros(15)});
  EXPECT_EQ(PortalsHeader::decode_tiny(kind3, 8).status(), Status::malformed);
  // What the form cannot say takes a longer one: a truncated answer
  // (mlength below length), a named initiator, a wide offset.
  for (auto change :
       {+[](PortalsHeader& x) { x.length = 16; }, +[](PortalsHeader& x) { x.initiator_nid = 3; },
        +[](PortalsHeader& x) { x.remote_offset = 0x100000000; },
        +[](PortalsHeader& x) { x.hdr_data = 2; }}) {
    PortalsHeader wide = h;
    change(wide);
    EXPECT_FALSE(wide.fits_tiny());
  }
}

TEST(Golden, PortalsCompareAndSwap) {
  PortalsHeader h;
  h.op = PortalsOp::swap;
  h.matching = Matching::non_matching;
  h.atomic_op = AtomicOp::cswap;
  h.atomic_type = AtomicType::int64;
  h.initiator_nid = 3;
  h.target_nid = 9;
  h.match_bits = 0x11;
  h.remote_offset = 0x40;
  h.length = 8;
  h.cookie = 0x99;
  h.operand_length = 8;
  const Bytes golden = cat({
      bytes({0x02, 0x05, 0x00, 0x01, 0x00, 0x0c, 0x08, 0x00}),
      bytes({0x03, 0x00, 0x00, 0x00}),
      zeros(4),
      bytes({0x09, 0x00, 0x00, 0x00}),
      zeros(4),
      zeros(8),  // uid, pt_index
      bytes({0x11}),
      zeros(7),
      zeros(8),  // match_bits, hdr_data
      bytes({0x40}),
      zeros(7),  // remote_offset
      bytes({0x08}),
      zeros(7),
      zeros(8),  // length, mlength
      bytes({0x99}),
      zeros(7),  // cookie
      bytes({0x08, 0x00, 0x00, 0x00}),
      zeros(4),
  });
  check_golden(h, golden);
  // Logical addressing carries ranks only: a pid is refused.
  check_rejected_bytes<PortalsHeader>(golden, {12, 20});
  check_rejected_bytes<PortalsHeader>(golden, {2, 7, 64});  // ack request, ni_fail, mlength

  auto with = [&](std::size_t at, int v) {
    Bytes b = golden;
    b[at] = static_cast<std::byte>(v);
    return PortalsHeader::decode(b).status();
  };
  EXPECT_EQ(with(5, static_cast<int>(AtomicOp::sum)), Status::malformed);   // not a swap op
  EXPECT_EQ(with(5, static_cast<int>(AtomicOp::swap)), Status::malformed);  // swap takes no operand
  EXPECT_EQ(with(5, atomic_op_limit), Status::malformed);
  EXPECT_EQ(with(6, 0), Status::malformed);  // no datatype
  EXPECT_EQ(with(6, atomic_type_limit), Status::malformed);
  EXPECT_EQ(with(80, 33), Status::malformed);  // operand larger than any type
  EXPECT_EQ(with(80, 32), Status::ok);
  EXPECT_EQ(with(1, 0), Status::malformed);
  EXPECT_EQ(with(1, portals_op_limit), Status::malformed);
  EXPECT_EQ(with(3, 2), Status::malformed);
  EXPECT_EQ(with(4, 2), Status::malformed);
}

TEST(Golden, PortalsAckAnswer) {
  PortalsHeader h;
  h.op = PortalsOp::ack;
  h.addressing = Addressing::physical;
  h.ni_fail = NiFail::dropped;
  h.initiator_nid = 1;
  h.initiator_pid = 2;
  h.target_nid = 3;
  h.target_pid = 4;
  h.length = 0x100;
  h.mlength = 0x80;
  h.cookie = 0x0102;
  const Bytes golden = cat({
      bytes({0x02, 0x07, 0x00, 0x00, 0x01, 0x00, 0x00, 0x02}),
      bytes({0x01, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00}),
      bytes({0x03, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00}),
      zeros(8),
      zeros(8),
      zeros(8),
      zeros(8),  // uid, pt_index, match_bits, hdr_data, offset
      bytes({0x00, 0x01}),
      zeros(6),  // length
      bytes({0x80}),
      zeros(7),  // mlength
      bytes({0x02, 0x01}),
      zeros(6),  // cookie
      zeros(8),
  });
  check_golden(h, golden);
  Bytes over = golden;
  over[65] = std::byte{0x01};  // mlength 0x180 > length 0x100
  EXPECT_EQ(PortalsHeader::decode(over).status(), Status::malformed);
  Bytes bad_fail = golden;
  bad_fail[7] = std::byte{ni_fail_limit};
  EXPECT_EQ(PortalsHeader::decode(bad_fail).status(), Status::malformed);
  h.ack_request = AckRequest::ack;  // answers never ask for an ack
  Bytes out(PortalsHeader::size);
  EXPECT_EQ(encode(h, out).status(), Status::invalid_argument);
}

// ---- port -------------------------------------------------------------------

TEST(Golden, PortSend) {
  PortHeader h;
  h.kind = PortKind::send;
  h.priority = 1;
  h.size_class = 12;
  h.sending_port = 2;
  h.receiving_port = 0x0103;
  h.length = 4000;
  h.epoch = 0x0809;
  h.peer_epoch = 0x0a0b;  // of the port the piggybacked acks answer
  h.tag = 0x0123456789abcdef;
  const Bytes golden = cat({bytes({0x02, 0x01, 0x01, 0x0c, 0x02, 0x00, 0x03, 0x01}),
                            bytes({0xa0, 0x0f, 0x00, 0x00}), bytes({0x09, 0x08, 0x0b, 0x0a}),
                            bytes({0xef, 0xcd, 0xab, 0x89, 0x67, 0x45, 0x23, 0x01}), zeros(16)});
  check_golden(h, golden);
  check_version<PortHeader>(golden);
  check_rejected_bytes<PortHeader>(golden, {24, 39});  // address, cookie
  // A peer epoch without piggybacked acks names nothing.
  Bytes no_acks = golden;
  for (std::size_t i = 16; i < 24; ++i) no_acks[i] = std::byte{0};
  EXPECT_EQ(PortHeader::decode(no_acks).status(), Status::malformed);

  // The compact form: the frame carries priority, ports and length.
  const Bytes compact = cat({bytes({0x02, 0x01, 0x0c, 0x00, 0x09, 0x08, 0x0b, 0x0a}),
                             bytes({0xef, 0xcd, 0xab, 0x89, 0x67, 0x45, 0x23, 0x01})});
  Bytes out(PortHeader::compact_size);
  ASSERT_EQ(encode_compact(h, out).value_or(0), PortHeader::compact_size);
  EXPECT_EQ(out, compact);
  // The unchecked writer a port's send uses writes the same bytes, all 16.
  Bytes fast(PortHeader::compact_size, std::byte{0x5a});
  write_compact_send(std::span(fast).first<PortHeader::compact_size>(), h.size_class, h.epoch,
                     h.peer_epoch, h.tag);
  EXPECT_EQ(fast, compact);
  const PortRouting routing{1, 2, 0x0103, 4000};
  Result<PortHeader> back = PortHeader::decode_compact(compact, routing);
  ASSERT_TRUE(back.has_value()) << to_string(back.status());
  EXPECT_EQ(*back, h);
  for (int v : {0x00, 0x01, 0xff}) {
    Bytes bad = compact;
    bad[0] = static_cast<std::byte>(v);
    EXPECT_EQ(PortHeader::decode_compact(bad, routing).status(), Status::version_mismatch) << v;
  }
  auto compact_with = [&](std::size_t at, int v) {
    Bytes b = compact;
    b[at] = static_cast<std::byte>(v);
    return PortHeader::decode_compact(b, routing).status();
  };
  EXPECT_EQ(compact_with(1, 0x02), Status::malformed);  // only a send is compact
  EXPECT_EQ(compact_with(2, 0x02), Status::malformed);  // size class below 3
  EXPECT_EQ(compact_with(2, 0x0b), Status::malformed);  // 4000 bytes need 12
  EXPECT_EQ(compact_with(3, 0x01), Status::malformed);  // reserved
  EXPECT_EQ(PortHeader::decode_compact(std::span(compact).first(15), routing).status(),
            Status::malformed);
  EXPECT_EQ(PortHeader::decode_compact(compact, {2, 2, 0x0103, 4000}).status(),
            Status::malformed);  // priority
  EXPECT_EQ(PortHeader::decode_compact(compact, {1, 2, 0x0103, 0x8000'0000}).status(),
            Status::malformed);  // longer than a port message
  PortHeader put = h;
  put.kind = PortKind::put;
  put.size_class = 0;
  put.tag = 0;
  put.peer_epoch = 0;
  EXPECT_EQ(encode_compact(put, out).status(), Status::invalid_argument);
  EXPECT_EQ(encode_compact(h, std::span(out).first(15)).status(), Status::invalid_argument);

  auto with = [&](std::size_t at, int v) {
    Bytes b = golden;
    b[at] = static_cast<std::byte>(v);
    return PortHeader::decode(b).status();
  };
  EXPECT_EQ(with(3, 11), Status::malformed);  // 4000 > 2^11 - 8
  EXPECT_EQ(with(3, 2), Status::malformed);
  EXPECT_EQ(with(3, 33), Status::malformed);
  EXPECT_EQ(with(3, 32), Status::ok);
  EXPECT_EQ(with(2, 2), Status::malformed);  // priority
  EXPECT_EQ(with(1, 0), Status::malformed);
  EXPECT_EQ(with(1, port_kind_limit), Status::malformed);
  EXPECT_EQ(with(11, 0x80), Status::malformed);  // length 2^31 + ..., past GM's largest
}

TEST(Golden, PortGetRequest) {
  PortHeader h;
  h.kind = PortKind::get_request;
  h.sending_port = 1;
  h.receiving_port = 1;
  h.length = 0x10000;
  h.remote_address = 0x00007f0000001000;
  h.cookie = 0x42;
  const Bytes golden =
      cat({bytes({0x02, 0x03, 0x00, 0x00, 0x01, 0x00, 0x01, 0x00}), bytes({0x00, 0x00, 0x01, 0x00}),
           zeros(4), zeros(8), bytes({0x00, 0x10, 0x00, 0x00, 0x00, 0x7f, 0x00, 0x00}),
           bytes({0x42}), zeros(7)});
  check_golden(h, golden);
  check_rejected_bytes<PortHeader>(golden, {3, 14, 16, 23});  // size class, peer epoch, tag
  EXPECT_EQ(max_length_for_size(3), 0u);
  EXPECT_EQ(max_length_for_size(12), 4088u);
  EXPECT_EQ(max_length_for_size(2), 0u);
}

}  // namespace
}  // namespace pier::wire

namespace pier::wire {
namespace {

/// Every value below `limit` that the enumeration names has its own name;
/// the rest, up to 255, are "unknown".
template <class E>
void check_names(std::uint8_t first, std::uint8_t limit) {
  std::vector<std::string_view> seen;
  for (int raw = 0; raw < 256; ++raw) {
    const std::string_view name = to_string(static_cast<E>(raw));
    const bool valid = raw >= first && raw < limit;
    if constexpr (std::is_same_v<E, PacketType>) {
      EXPECT_EQ(name != "unknown", is_packet_type(static_cast<std::uint8_t>(raw))) << raw;
      continue;
    }
    EXPECT_EQ(name != "unknown", valid) << raw;
    if (valid) {
      EXPECT_EQ(std::count(seen.begin(), seen.end(), name), 0) << name;
      seen.push_back(name);
    }
  }
}

TEST(Names, EveryEnumeratorHasItsOwnName) {
  check_names<PacketType>(0, 0);
  check_names<AckResult>(0, ack_result_limit);
  check_names<PortalsOp>(1, portals_op_limit);
  check_names<NiFail>(0, ni_fail_limit);
  check_names<PortKind>(1, port_kind_limit);
  EXPECT_EQ(to_string(PacketType::driver_local), "driver_local");
  EXPECT_EQ(to_string(PortalsOp::fetch_atomic), "fetch_atomic");
}

}  // namespace
}  // namespace pier::wire
