// The tcp driver's wire bytes: golden vectors and hostile input.
#include "drivers/tcp/codec.hpp"
#include "drivers/tcp/local.hpp"

#include <gtest/gtest.h>

#include <random>

namespace pier::drivers::tcp {
namespace {

std::vector<std::byte> bytes(std::initializer_list<int> v) {
  std::vector<std::byte> out;
  for (int b : v) out.push_back(static_cast<std::byte>(b));
  return out;
}

TEST(TcpCodec, FrameHeaderGolden) {
  std::array<std::byte, frame_header_size> out{};
  encode_frame_header(out, FrameHeader{frame_data, 0x0102030405ull});
  EXPECT_EQ(std::vector<std::byte>(out.begin(), out.end()),
            bytes({0x01, 0, 0, 0, 0, 0, 0, 0, 0x05, 0x04, 0x03, 0x02, 0x01, 0, 0, 0}));
  Result<FrameHeader> back = decode_frame_header(out);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->length, 0x0102030405ull);
}

TEST(TcpCodec, FrameHeaderRejectsUnknownTypesAndReservedBytes) {
  std::array<std::byte, frame_header_size> h{};
  h[0] = std::byte{0x02};
  EXPECT_EQ(decode_frame_header(h).status(), Status::malformed);
  h[0] = std::byte{frame_local};
  EXPECT_TRUE(decode_frame_header(h));
  h[3] = std::byte{1};
  EXPECT_EQ(decode_frame_header(h).status(), Status::malformed);
  EXPECT_EQ(decode_frame_header(std::span<const std::byte>(h).first(5)).status(),
            Status::malformed);
}

TEST(TcpCodec, UrlGoldenAndRoundTrip) {
  Url u;
  u.family = 4;
  u.port = 0x1234;
  u.context_id = 0x1122334455667788ull;
  u.address[0] = std::byte{127};
  u.address[3] = std::byte{1};
  const UrlBytes b = encode_url(u);
  EXPECT_EQ(
      std::vector<std::byte>(b.begin(), b.end()),
      bytes({2,   4, 0x34, 0x12, 0, 0x10, 0, 0, 0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11,
             127, 0, 0,    1,    0, 0,    0, 0, 0,    0,    0,    0,    0,    0,    0,    0}));
  Result<Url> back = decode_url(b);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->port, 0x1234);
  EXPECT_EQ(back->context_id, u.context_id);
  EXPECT_EQ(back->small_limit, min_small_limit);
  UrlBytes bad = b;
  bad[0] = std::byte{1};
  EXPECT_EQ(decode_url(bad).status(), Status::version_mismatch);
  bad = b;
  bad[5] = std::byte{0x0f};  // a small limit under the least a context may have
  EXPECT_EQ(decode_url(bad).status(), Status::malformed);
  bad = b;
  bad[1] = std::byte{5};
  EXPECT_EQ(decode_url(bad).status(), Status::malformed);
  bad = b;
  bad[2] = bad[3] = std::byte{0};
  EXPECT_EQ(decode_url(bad).status(), Status::malformed);
  EXPECT_EQ(decode_url(std::span<const std::byte>(b).first(31)).status(), Status::malformed);
}

TEST(TcpCodec, HelloGoesThroughTheWireRegistry) {
  Url u;
  u.family = 6;
  u.port = 1;
  const Hello h{driver::Track::large, 99, encode_url(u)};
  const auto frame = encode_hello_frame(h);
  Result<FrameHeader> fh = decode_frame_header(frame);
  ASSERT_TRUE(fh);
  EXPECT_EQ(fh->type, frame_local);
  EXPECT_EQ(fh->length, hello_frame_size - frame_header_size);
  const auto payload = std::span<const std::byte>(frame).subspan(frame_header_size);
  LocalParser parser(LocalParser::Role::handshake);
  ASSERT_EQ(parser.feed(payload), Status::ok);
  ASSERT_TRUE(parser.hello());
  EXPECT_EQ(parser.hello()->track, driver::Track::large);
  EXPECT_EQ(parser.hello()->target_id, 99u);
  EXPECT_EQ(parser.hello()->connector_url, h.connector_url);
  // An established connection takes no hello, a new one no keep-alive.
  LocalParser connected(LocalParser::Role::connected);
  EXPECT_NE(connected.feed(payload), Status::ok);
  const auto keepalive = encode_keepalive_frame();
  LocalParser fresh(LocalParser::Role::handshake);
  EXPECT_NE(fresh.feed(std::span<const std::byte>(keepalive).subspan(frame_header_size)),
            Status::ok);
  LocalParser ok(LocalParser::Role::connected);
  EXPECT_EQ(ok.feed(std::span<const std::byte>(keepalive).subspan(frame_header_size)), Status::ok);
  auto bad = frame;
  bad[frame_header_size + local_prefix + 1] = std::byte{2};  // no such track
  LocalParser rejects(LocalParser::Role::handshake);
  EXPECT_NE(rejects.feed(std::span<const std::byte>(bad).subspan(frame_header_size)), Status::ok);
}

TEST(TcpCodec, RandomBytesNeverCrashTheDecoders) {
  std::mt19937_64 rng(12345);
  std::array<std::byte, 64> buf{};
  for (int i = 0; i < 20000; ++i) {
    for (auto& b : buf) b = static_cast<std::byte>(rng());
    const std::size_t n = rng() % buf.size();
    const std::span<const std::byte> in(buf.data(), n);
    (void)decode_frame_header(in);
    (void)decode_url(in);
    (void)decode_hello(in);
    LocalParser parser(LocalParser::Role::connected);
    (void)parser.feed(in);
  }
  SUCCEED();
}

}  // namespace
}  // namespace pier::drivers::tcp
