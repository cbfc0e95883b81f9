// tests/unit/shm: the driver's own encodings: golden bytes both ways, and
// hostile input rejected with a status.
#include "drivers/shm/codec.hpp"
#include "drivers/shm/ring.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace pier::drivers::shm::test {
namespace {

std::vector<std::byte> bytes(std::initializer_list<int> v) {
  std::vector<std::byte> out;
  for (int b : v) out.push_back(static_cast<std::byte>(b));
  return out;
}

Url sample_url() {
  Url u;
  for (std::size_t i = 0; i < 16; ++i) u.boot_id[i] = static_cast<std::byte>(0xa0 + i);
  u.pid = 0x01020304;
  u.max_packet = 0x41424344;
  u.nonce = 0x1112131415161718;
  u.probe_addr = 0x2122232425262728;
  u.probe_value = 0x3132333435363738;
  return u;
}

TEST(ShmCodec, UrlGoldenBytes) {
  const std::vector<std::byte> want = bytes({
      'p',  's',  'h',  'm',  2,    0,    0,    0,     // magic, version, reserved
      0xa0, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7,  // boot id
      0xa8, 0xa9, 0xaa, 0xab, 0xac, 0xad, 0xae, 0xaf,  //
      4,    3,    2,    1,    0x44, 0x43, 0x42, 0x41,  // pid, max packet
      0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11,  // nonce
      0x28, 0x27, 0x26, 0x25, 0x24, 0x23, 0x22, 0x21,  // probe address
      0x38, 0x37, 0x36, 0x35, 0x34, 0x33, 0x32, 0x31,  // probe value
  });
  EXPECT_EQ(encode_url(sample_url()), want);
  Result<Url> back = decode_url(want);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->pid, 0x01020304u);
  EXPECT_EQ(back->max_packet, 0x41424344u);
  EXPECT_EQ(back->nonce, 0x1112131415161718u);
  EXPECT_EQ(back->probe_addr, 0x2122232425262728u);
  EXPECT_EQ(back->probe_value, 0x3132333435363738u);
  EXPECT_EQ(back->boot_id, sample_url().boot_id);
}

TEST(ShmCodec, HostileUrlsAreRejected) {
  const std::vector<std::byte> good = encode_url(sample_url());
  EXPECT_EQ(decode_url({}).status(), Status::malformed);
  EXPECT_EQ(decode_url(std::span(good).first(55)).status(), Status::malformed);
  auto bad = good;
  bad[0] = std::byte{'x'};
  EXPECT_EQ(decode_url(bad).status(), Status::malformed);
  bad = good;
  bad[4] = std::byte{1};
  EXPECT_EQ(decode_url(bad).status(), Status::version_mismatch);
  bad = good;
  bad[6] = std::byte{1};  // reserved
  EXPECT_EQ(decode_url(bad).status(), Status::malformed);
  bad = good;
  for (int i = 24; i < 28; ++i) bad[i] = std::byte{0};  // pid 0
  EXPECT_EQ(decode_url(bad).status(), Status::malformed);
  bad = good;
  for (int i = 28; i < 32; ++i) bad[i] = std::byte{0};  // max packet 0
  EXPECT_EQ(decode_url(bad).status(), Status::malformed);
}

TEST(ShmCodec, ControlMessagesAreDriverLocalPackets) {
  Hello h;
  h.track = driver::Track::large;
  const std::vector<std::byte> url = encode_url(sample_url());
  std::copy(url.begin(), url.end(), h.url.begin());
  h.ring_lines = 8192;
  h.max_packet = 32768;
  h.segment_size = segment_size(8192);
  const auto msg = encode_hello(h);
  // The src/wire frame: version 2, type driver_local (8), payload 8 + 80.
  EXPECT_EQ(msg[0], std::byte{2});
  EXPECT_EQ(msg[1], std::byte{8});
  Result<Control> c = decode_control(msg);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->type, LocalType::hello);
  Result<Hello> back = decode_hello(c->body);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->track, driver::Track::large);
  EXPECT_EQ(back->url, h.url);
  EXPECT_EQ(back->ring_lines, 8192u);
  EXPECT_EQ(back->max_packet, 32768u);
  EXPECT_EQ(back->segment_size, segment_size(8192));
  const std::vector<std::byte> body = bytes({'p', 's', 'H', 'L', 2, 1, 0, 0});
  EXPECT_TRUE(std::equal(body.begin(), body.end(), c->body.begin()));

  const auto wake_msg = encode_wake();
  Result<Control> wake = decode_control(wake_msg);
  ASSERT_TRUE(wake.has_value());
  EXPECT_EQ(wake->type, LocalType::wake);
  EXPECT_TRUE(wake->body.empty());

  const auto reply_msg = encode_reply(Reply{Answer::in_use});
  Result<Control> reply = decode_control(reply_msg);
  ASSERT_TRUE(reply.has_value());
  Result<Reply> r = decode_reply(reply->body);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->answer, Answer::in_use);
}

TEST(ShmCodec, HostileControlMessagesAreRejected) {
  auto msg = encode_hello(Hello{});
  EXPECT_FALSE(decode_control(std::span(msg).first(40)).has_value());  // length disagrees
  auto bad = msg;
  bad[1] = std::byte{2};  // an eager packet, not driver-local
  EXPECT_FALSE(decode_control(bad).has_value());
  bad = msg;
  bad[24] = std::byte{9};  // unknown subtype
  EXPECT_FALSE(decode_control(bad).has_value());
  Result<Control> c = decode_control(msg);
  ASSERT_TRUE(c.has_value());
  std::vector<std::byte> body(c->body.begin(), c->body.end());
  body[5] = std::byte{2};  // track 2
  EXPECT_EQ(decode_hello(body).status(), Status::malformed);
  body[5] = std::byte{0};
  body[4] = std::byte{7};
  EXPECT_EQ(decode_hello(body).status(), Status::version_mismatch);
  EXPECT_EQ(decode_reply(bytes({'p', 's', 'R', 'P', 2, 3, 0, 0})).status(), Status::malformed);
  EXPECT_EQ(decode_reply(bytes({'p', 's', 'R', 'P', 2, 0, 0})).status(), Status::malformed);
}

TEST(ShmCodec, RendezvousDataAndDoneRecord) {
  driver::Packet pkt;
  Rdv r;
  r.iov_count = 3;
  r.token = 0x0102030405060708;
  r.addr = 0x1000;
  r.capacity = 5000;
  r.pid = 77;
  encode_rdv(r, pkt);
  EXPECT_EQ(pkt.rdv_len, Rdv::size);
  EXPECT_EQ(pkt.rdv_data[0], std::byte{1});
  EXPECT_EQ(pkt.rdv_data[8], std::byte{0x08});
  Result<Rdv> back = decode_rdv(pkt);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->iov_count, 3u);
  EXPECT_EQ(back->token, r.token);
  EXPECT_EQ(back->addr, 0x1000u);
  EXPECT_EQ(back->capacity, 5000u);
  EXPECT_EQ(back->pid, 77u);
  pkt.rdv_len = 39;
  EXPECT_FALSE(decode_rdv(pkt).has_value());
  pkt.rdv_len = Rdv::size;
  pkt.rdv_data[0] = std::byte{2};
  EXPECT_FALSE(decode_rdv(pkt).has_value());

  std::array<std::byte, Done::size> d{};
  encode_done(Done{5, 10, 20}, d);
  Result<Done> done = decode_done(d);
  ASSERT_TRUE(done.has_value());
  EXPECT_EQ(done->written, 10u);
  encode_done(Done{5, 30, 20}, d);  // wrote more than it had
  EXPECT_FALSE(decode_done(d).has_value());
}

TEST(ShmCodec, RecordGeometry) {
  EXPECT_EQ(lines_for(0), 1u);
  EXPECT_EQ(lines_for(48), 1u);  // header and an 8..48-byte payload share one line
  EXPECT_EQ(lines_for(49), 2u);
  EXPECT_EQ(payload_in(1), 48u);
  EXPECT_EQ(lines_for(0xffffffffu), (16ull + 0xffffffffull + 63) / 64);
}

}  // namespace
}  // namespace pier::drivers::shm::test
