// pier: unit tests of src/driver (packet copies, data iterator, validation,
// hex urls), the self url codec and make_context().
#include <gtest/gtest.h>
#include <sys/uio.h>
#include <pier/driver.hpp>

#include <array>
#include <cstring>
#include <numeric>

#include "driver/driver.hpp"
#include "drivers/self/url.hpp"

namespace pier::driver {
namespace {

std::array<std::byte, 32> counting() {
  std::array<std::byte, 32> a{};
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<std::byte>(i);
  return a;
}

TEST(PacketHelpers, SizeOfEveryForm) {
  auto bytes = counting();
  Packet none;
  EXPECT_EQ(none.size(), 0u);
  Packet buf;
  buf.form = Packet::Form::buffer;
  buf.buf = bytes.data();
  buf.buf_len = 20;
  EXPECT_EQ(buf.size(), 20u);
  std::array<::iovec, 3> iov{{{bytes.data(), 3}, {bytes.data() + 3, 0}, {bytes.data() + 3, 9}}};
  Packet v;
  v.set_iovec(iov.data(), 3);
  EXPECT_EQ(v.size(), 12u);
  Packet null_iov;
  null_iov.set_iovec(nullptr, 4);
  EXPECT_EQ(null_iov.size(), 0u);
  IovecData data(bytes.data(), bytes.size());
  Packet d;
  d.form = Packet::Form::data;
  d.data = &data;
  d.chunk_offset = 4;
  d.chunk_len = 10;
  EXPECT_EQ(d.size(), 10u);
}

TEST(PacketHelpers, CopyAcrossIovecBoundariesFromAnOffset) {
  auto bytes = counting();
  std::array<::iovec, 3> iov{{{bytes.data(), 5}, {bytes.data() + 5, 0}, {bytes.data() + 5, 11}}};
  Packet v;
  v.set_iovec(iov.data(), 3);
  std::array<std::byte, 8> out{};
  ASSERT_EQ(copy_from_packet(v, 3, out), 8u);
  for (std::size_t i = 0; i < out.size(); ++i) EXPECT_EQ(out[i], static_cast<std::byte>(3 + i));
  // Past the end: only what exists is copied.
  EXPECT_EQ(copy_from_packet(v, 12, out), 4u);
  EXPECT_EQ(copy_from_packet(v, 16, out), 0u);
}

TEST(PacketHelpers, PacketToPacketTruncates) {
  auto src_bytes = counting();
  std::array<::iovec, 2> siov{{{src_bytes.data(), 10}, {src_bytes.data() + 10, 20}}};
  Packet src;
  src.set_iovec(siov.data(), 2);
  std::array<std::byte, 40> dst_bytes{};
  // Destination as a data chunk starting 3 bytes into a two-piece layout.
  std::array<::iovec, 2> diov{{{dst_bytes.data(), 7}, {dst_bytes.data() + 7, 33}}};
  IovecData layout(diov.data(), 2);
  Packet dst;
  dst.form = Packet::Form::data;
  dst.data = &layout;
  dst.chunk_offset = 3;
  dst.chunk_len = 12;
  const CopyResult r = copy_packet(src, dst);
  EXPECT_EQ(r.copied, 12u);
  EXPECT_TRUE(r.truncated);
  for (std::size_t i = 0; i < 12; ++i) EXPECT_EQ(dst_bytes[3 + i], static_cast<std::byte>(i));
  EXPECT_EQ(dst_bytes[2], std::byte{0});
  EXPECT_EQ(dst_bytes[15], std::byte{0});
  dst.chunk_len = 30;
  const CopyResult whole = copy_packet(src, dst);
  EXPECT_EQ(whole.copied, 30u);
  EXPECT_FALSE(whole.truncated);
}

TEST(PacketHelpers, CopiedIovecDataStillPointsAtItsRange) {
  auto bytes = counting();
  IovecData original(bytes.data() + 2, 6);
  const IovecData copy = original;
  std::array<std::byte, 6> out{};
  Packet p;
  p.form = Packet::Form::data;
  p.data = &copy;
  p.chunk_len = 6;
  ASSERT_EQ(copy_from_packet(p, 0, out), 6u);
  EXPECT_EQ(out[0], std::byte{2});
  EXPECT_EQ(out[5], std::byte{7});
}

TEST(PacketHelpers, ValidatePost) {
  auto bytes = counting();
  ::iovec one{bytes.data(), 4};
  Packet p;
  p.set_iovec(&one, 1);
  EXPECT_EQ(validate_post(p, 1, false), Status::ok);
  p.set_iovec(nullptr, 1);
  EXPECT_EQ(validate_post(p, 1, false), Status::invalid_argument);
  std::array<::iovec, 3> three{{one, one, one}};
  p.set_iovec(three.data(), 3);
  EXPECT_EQ(validate_post(p, 2, false), Status::invalid_argument);
  EXPECT_EQ(validate_post(p, 3, false), Status::ok);
  ::iovec null_base{nullptr, 4};
  p.set_iovec(&null_base, 1);
  EXPECT_EQ(validate_post(p, 1, false), Status::invalid_argument);
  IovecData data(bytes.data(), 8);
  Packet d;
  d.form = Packet::Form::data;
  d.data = &data;
  d.chunk_offset = 4;
  d.chunk_len = 4;
  EXPECT_EQ(validate_post(d, 1, false), Status::invalid_argument) << "data form not allowed";
  EXPECT_EQ(validate_post(d, 1, true), Status::ok);
  d.chunk_len = 5;
  EXPECT_EQ(validate_post(d, 1, true), Status::invalid_argument) << "chunk past the layout";
  d.chunk_offset = ~std::size_t{0};
  EXPECT_EQ(validate_post(d, 1, true), Status::invalid_argument) << "overflowing offset";
  Packet none;
  EXPECT_EQ(validate_post(none, 1, true), Status::invalid_argument);
}

TEST(HexUrl, RoundTripAndRejects) {
  const std::array<std::byte, 4> bytes{std::byte{0x00}, std::byte{0x7f}, std::byte{0xa5},
                                       std::byte{0xff}};
  EXPECT_EQ(hex_encode(bytes), "007fa5ff");
  auto back = hex_decode("007FA5ff");
  ASSERT_TRUE(back.has_value());
  EXPECT_TRUE(std::equal(back->begin(), back->end(), bytes.begin(), bytes.end()));
  EXPECT_EQ(hex_decode("abc").status(), Status::invalid_argument);
  EXPECT_EQ(hex_decode("zz").status(), Status::invalid_argument);
  EXPECT_TRUE(hex_decode("").has_value());
}

TEST(SelfUrl, DecodesWhatItEncodesAndRejectsTheRest) {
  const auto url = pier::drivers::self::encode_url({1234, 0x0102030405060708ULL});
  auto back = pier::drivers::self::decode_url(url);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->pid, 1234u);
  EXPECT_EQ(back->context_id, 0x0102030405060708ULL);
  EXPECT_EQ(pier::drivers::self::decode_url(std::span(url).first(19)).status(),
            Status::invalid_argument);
  for (const std::size_t at : {0u, 4u, 5u, 7u}) {
    auto bad = url;
    bad[at] ^= std::byte{0x40};
    EXPECT_EQ(pier::drivers::self::decode_url(bad).status(), Status::invalid_argument)
        << "byte " << at;
  }
}

TEST(MakeContext, FindsBuiltinsByName) {
  EXPECT_EQ(make_context("no-such-driver").status(), Status::not_found);
  EXPECT_EQ(make_context("").status(), Status::not_found);
  auto self = make_context("self");
  ASSERT_TRUE(self.has_value());
  EXPECT_EQ((*self)->name(), "self");
  EXPECT_EQ(make_context("self:extra").status(), Status::invalid_argument);
  bool listed = false;
  for (const auto& e : builtin_drivers()) listed |= e.name == "self";
  EXPECT_TRUE(listed);
}

}  // namespace
}  // namespace pier::driver

namespace pier::driver {
namespace {

struct SelfNode {
  std::unique_ptr<Context> ctx;
  std::vector<std::byte> url;
};

SelfNode self_node() {
  SelfNode n;
  auto ctx = make_context("self");
  if (!ctx) return n;
  n.ctx = std::move(*ctx);
  if (!n.ctx->properties({}).has_value()) return n;
  auto url = n.ctx->init();
  if (url) n.url = std::move(*url);
  return n;
}

TEST(SelfDriver, BuffersGoBackOnlyWhereTheyCameFrom) {
  SelfNode x = self_node(), y = self_node(), z = self_node();
  ASSERT_FALSE(x.url.empty() || y.url.empty() || z.url.empty());
  auto xy = std::move(*x.ctx->open_instance(Track::small));
  auto yx = std::move(*y.ctx->open_instance(Track::small));
  auto xz = std::move(*x.ctx->open_instance(Track::small));
  auto zx = std::move(*z.ctx->open_instance(Track::small));
  ASSERT_EQ(xy->connect_async(y.url), Status::ok);
  ASSERT_EQ(yx->connect_async(x.url), Status::ok);
  ASSERT_EQ(xz->connect_async(z.url), Status::ok);
  ASSERT_EQ(zx->connect_async(x.url), Status::ok);
  const Deadline soon = Clock::now() + std::chrono::seconds(5);
  for (Instance* i : {xy.get(), yx.get(), xz.get(), zx.get()})
    ASSERT_EQ(i->connect_wait(soon), Status::ok);

  // A send buffer from one instance cannot be posted on another.
  Packet s;
  ASSERT_EQ(xy->send_buf_get(s), Status::ok);
  EXPECT_EQ(xz->send_buf_post(s, 4), Status::invalid_argument);
  std::memset(s.buf, 0x5a, 4);
  ASSERT_EQ(xy->send_buf_post(s, 4), Status::ok);
  Packet s2;
  ASSERT_EQ(xz->send_buf_get(s2), Status::ok);
  ASSERT_EQ(xz->send_buf_post(s2, 2), Status::ok);

  // A received buffer goes back to its own instance only, exactly once.
  Packet r;
  ASSERT_EQ(yx->recv_poll(r), Status::ok);
  EXPECT_EQ(r.length, 4u);
  EXPECT_EQ(r.buf[3], std::byte{0x5a});
  Packet r2;
  ASSERT_EQ(zx->recv_poll(r2), Status::ok);
  EXPECT_EQ(zx->recv_buf_release(r), Status::invalid_argument) << "another instance's cell";
  EXPECT_EQ(yx->recv_buf_release(r), Status::ok);
  EXPECT_EQ(yx->recv_buf_release(r), Status::invalid_argument) << "released twice";
  EXPECT_EQ(zx->recv_buf_release(r2), Status::ok);
}

TEST(SelfDriver, ConnectsToItsOwnContext) {
  SelfNode x = self_node();
  auto loop = std::move(*x.ctx->open_instance(Track::small));
  ASSERT_EQ(loop->connect_async(x.url), Status::ok);
  ASSERT_EQ(loop->connect_wait(Clock::now() + std::chrono::seconds(5)), Status::ok);
  std::array<std::byte, 3> msg{std::byte{1}, std::byte{2}, std::byte{3}}, got{};
  ::iovec siov{msg.data(), msg.size()}, riov{got.data(), got.size()};
  Packet s, r;
  s.set_iovec(&siov, 1);
  r.set_iovec(&riov, 1);
  ASSERT_EQ(loop->send_post(s), Status::ok);
  ASSERT_EQ(loop->recv_post(r), Status::ok);
  EXPECT_EQ(got, msg);
  EXPECT_EQ(x.ctx->close(), Status::in_use) << "an instance is still open";
  loop.reset();
  EXPECT_EQ(x.ctx->close(), Status::ok);
}

}  // namespace
}  // namespace pier::driver
