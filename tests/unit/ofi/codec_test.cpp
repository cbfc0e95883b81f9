// pier ofi: the url, control-message, tag and rendezvous-data codecs, with
// golden bytes and hostile input.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "drivers/ofi/codec.hpp"

namespace pier::drivers::ofi {
namespace {

std::vector<std::byte> bytes(std::initializer_list<int> v) {
  std::vector<std::byte> out;
  for (int b : v) out.push_back(static_cast<std::byte>(b));
  return out;
}

TEST(OfiCodec, UrlRoundTripAndGoldenHeader) {
  Url u;
  u.context_id = 0x1122334455667788ULL;
  u.pid = 0x01020304;
  u.provider_hash = 0xa0b0c0d0;
  u.host_key = 0x0102030405060708ULL;
  u.max_packet = 0x00123456;
  u.name = bytes({9, 8, 7});
  auto enc = encode_url(u);
  ASSERT_TRUE(enc.has_value());
  const auto golden = bytes({'P',  'O',  'F',  'I',  2,    3,    0,    0,     //
                             0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11,  //
                             0x04, 0x03, 0x02, 0x01, 0xd0, 0xc0, 0xb0, 0xa0,  //
                             0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01,  //
                             0x56, 0x34, 0x12, 0x00, 0,    0,    0,    0,     //
                             9,    8,    7});
  EXPECT_EQ(*enc, golden);
  auto dec = decode_url(*enc);
  ASSERT_TRUE(dec.has_value());
  EXPECT_EQ(dec->context_id, u.context_id);
  EXPECT_EQ(dec->pid, u.pid);
  EXPECT_EQ(dec->provider_hash, u.provider_hash);
  EXPECT_EQ(dec->host_key, u.host_key);
  EXPECT_EQ(dec->max_packet, u.max_packet);
  EXPECT_EQ(dec->name, u.name);
  auto view = peek_url(*enc);
  ASSERT_TRUE(view.has_value());
  EXPECT_EQ(view->max_packet, u.max_packet);
}

TEST(OfiCodec, UrlRefusesWhatIsNotOurs) {
  Url u;
  u.name = bytes({1, 2, 3, 4});
  const std::vector<std::byte> good = *encode_url(u);
  auto refused = [](std::vector<std::byte> b) {
    return decode_url(b).status() == Status::invalid_argument;
  };
  EXPECT_TRUE(refused({}));
  EXPECT_TRUE(refused(std::vector<std::byte>(good.begin(), good.begin() + 40)));  // no name
  auto bad = good;
  bad[0] = std::byte{'X'};
  EXPECT_TRUE(refused(bad)) << "magic";
  bad = good;
  bad[4] = std::byte{1};
  EXPECT_TRUE(refused(bad)) << "version 1 (no max packet)";
  bad = good;
  bad[4] = std::byte{3};
  EXPECT_TRUE(refused(bad)) << "version";
  // Version 1's layout: the name right after a 32-byte header.
  std::vector<std::byte> v1(32 + u.name.size());
  for (std::size_t i = 0; i < v1.size(); ++i) v1[i] = i < 32 ? good[i] : u.name[i - 32];
  v1[4] = std::byte{1};
  EXPECT_TRUE(refused(v1)) << "a version 1 url";
  for (const std::uint32_t limit : {0u, min_max_packet - 1, max_max_packet + 1, 0xffffffffu}) {
    bad = good;
    for (int i = 0; i < 4; ++i) bad[32 + i] = static_cast<std::byte>(limit >> (8 * i));
    EXPECT_TRUE(refused(bad)) << "max packet " << limit;
  }
  for (const std::uint32_t limit : {min_max_packet, max_max_packet}) {
    bad = good;
    for (int i = 0; i < 4; ++i) bad[32 + i] = static_cast<std::byte>(limit >> (8 * i));
    EXPECT_FALSE(refused(bad)) << "max packet " << limit;
  }
  bad = good;
  bad[38] = std::byte{1};
  EXPECT_TRUE(refused(bad)) << "reserved after the max packet";
  bad = good;
  bad[5] = std::byte{5};
  EXPECT_TRUE(refused(bad)) << "name length beyond the url";
  bad = good;
  bad[6] = std::byte{1};
  EXPECT_TRUE(refused(bad)) << "reserved";
  bad = good;
  bad.push_back(std::byte{0});
  EXPECT_TRUE(refused(bad)) << "trailing byte";
  EXPECT_TRUE(refused(std::vector<std::byte>(1000, std::byte{0xff})));
  u.name.assign(max_name + 1, std::byte{1});
  EXPECT_EQ(encode_url(u).status(), Status::invalid_argument);
  u.name.clear();
  EXPECT_EQ(encode_url(u).status(), Status::invalid_argument);
  u.name = bytes({1});
  u.max_packet = min_max_packet - 1;
  EXPECT_EQ(encode_url(u).status(), Status::invalid_argument);
  u.max_packet = max_max_packet + 1;
  EXPECT_EQ(encode_url(u).status(), Status::invalid_argument);
}

Control sample() {
  Control c;
  c.type = ControlType::credit;
  c.track = driver::Track::large;
  c.flags = 0;
  c.sender_instance = 0x0a0b0c0d;
  c.sender_context = 0x1112131415161718ULL;
  c.target_context = 0x2122232425262728ULL;
  c.target_instance = 0x31323334;
  c.value = 0x4142434445464748ULL;
  return c;
}

TEST(OfiCodec, ControlGoldenBytes) {
  const ControlBytes b = encode_control(sample());
  // wire frame: version 2, type driver_local (8), payload 48; then the
  // driver-local header: subtype 2 (credit), body length 40.
  const auto prefix = bytes({2, 8, 0, 0, 0, 0, 0, 0, 48, 0, 0, 0, 0,  0, 0, 0,  //
                             0, 0, 0, 0, 0, 0, 0, 0, 2,  0, 0, 0, 40, 0, 0, 0});
  const auto body = bytes({1,    1,    0,    0,    0x0d, 0x0c, 0x0b, 0x0a,  //
                           0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11,  //
                           0x28, 0x27, 0x26, 0x25, 0x24, 0x23, 0x22, 0x21,  //
                           0x34, 0x33, 0x32, 0x31, 0,    0,    0,    0,     //
                           0x48, 0x47, 0x46, 0x45, 0x44, 0x43, 0x42, 0x41});
  ASSERT_EQ(b.size(), prefix.size() + body.size());
  EXPECT_TRUE(std::equal(prefix.begin(), prefix.end(), b.begin()));
  EXPECT_TRUE(std::equal(body.begin(), body.end(), b.begin() + 32));
}

TEST(OfiCodec, ControlRoundTripThroughTheWireRegistry) {
  ControlParser parser;
  for (auto type :
       {ControlType::hello, ControlType::bye, ControlType::credit, ControlType::keepalive}) {
    Control c = sample();
    c.type = type;
    c.flags = type == ControlType::bye ? flag_abandoned : 0;
    auto got = parser.decode(encode_control(c));
    ASSERT_TRUE(got.has_value()) << to_string(got.status());
    EXPECT_EQ(got->type, c.type);
    EXPECT_EQ(got->track, c.track);
    EXPECT_EQ(got->flags, c.flags);
    EXPECT_EQ(got->sender_instance, c.sender_instance);
    EXPECT_EQ(got->sender_context, c.sender_context);
    EXPECT_EQ(got->target_context, c.target_context);
    EXPECT_EQ(got->target_instance, c.target_instance);
    EXPECT_EQ(got->value, c.value);
  }
}

TEST(OfiCodec, HostileControlIsRefusedAndTheNextOneStillDecodes) {
  ControlParser parser;
  const ControlBytes good = encode_control(sample());
  auto mutate = [&](std::size_t at, int value) {
    ControlBytes b = good;
    b[at] = static_cast<std::byte>(value);
    return b;
  };
  const std::vector<ControlBytes> hostile = {
      mutate(0, 9),      // wire version
      mutate(1, 2),      // not driver_local
      mutate(24, 4),     // unknown subtype
      mutate(28, 39),    // wrapper length disagrees with the frame
      mutate(32, 2),     // body version
      mutate(33, 2),     // track
      mutate(34, 0x80),  // unknown flag
      mutate(35, 1),     // reserved
      mutate(60, 1),     // reserved
  };
  for (std::size_t i = 0; i < hostile.size(); ++i) {
    EXPECT_FALSE(parser.decode(hostile[i]).has_value()) << "case " << i;
    EXPECT_TRUE(parser.decode(good).has_value()) << "after case " << i;
  }
  EXPECT_FALSE(parser.decode(std::span<const std::byte>(good).first(40)).has_value());
  std::vector<std::byte> zeros(control_size);
  EXPECT_FALSE(parser.decode(zeros).has_value());
}

std::vector<std::byte> join(const ControlBytes& head, std::span<const std::byte> tail) {
  std::vector<std::byte> out(head.size() + tail.size());
  std::memcpy(out.data(), head.data(), head.size());
  if (!tail.empty()) std::memcpy(out.data() + head.size(), tail.data(), tail.size());
  return out;
}

/// A hello with `url` after its body, as send_control() puts it on the wire.
std::vector<std::byte> hello_with(std::span<const std::byte> url, std::uint8_t flags = 0) {
  Control c = sample();
  c.type = ControlType::hello;
  c.flags = flags;
  c.url = url;
  return join(encode_control(c), url);
}

std::vector<std::byte> a_url() {
  Url u;
  u.context_id = 0x1122334455667788ULL;
  u.pid = 4242;
  u.provider_hash = 7;
  u.host_key = 9;
  u.max_packet = 0x40;  // bytes 32..35: 40 00 00 00
  u.name = std::vector<std::byte>(max_name, std::byte{0x5c});
  return encode_url(u).value();
}

TEST(OfiCodec, AHelloCarriesItsSendersUrl) {
  ControlParser parser;
  const std::vector<std::byte> url = a_url();
  const std::vector<std::byte> wire = hello_with(url, flag_call_back);
  ASSERT_EQ(wire.size(), control_max_size);  // the longest url fits a control receive
  auto got = parser.decode(wire);
  ASSERT_TRUE(got.has_value()) << to_string(got.status());
  EXPECT_EQ(got->type, ControlType::hello);
  EXPECT_EQ(got->flags, flag_call_back);
  EXPECT_TRUE(std::equal(got->url.begin(), got->url.end(), url.begin(), url.end()));
  // Without a url (a provider that sends one iovec only) it still decodes.
  auto bare = parser.decode(hello_with({}));
  ASSERT_TRUE(bare.has_value());
  EXPECT_TRUE(bare->url.empty());
  // A refused bye.
  Control bye = sample();
  bye.type = ControlType::bye;
  bye.flags = flag_refused;
  auto refused = parser.decode(encode_control(bye));
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->flags, flag_refused);
}

TEST(OfiCodec, AHelloWithAMalformedOrOversizedUrlIsRefused) {
  ControlParser parser;
  const std::vector<std::byte> url = a_url();
  const std::vector<std::byte> good = hello_with(url);
  auto with = [&](std::size_t at, int value) {
    std::vector<std::byte> u = url;
    u[at] = static_cast<std::byte>(value);
    return hello_with(u);
  };
  std::vector<std::vector<std::byte>> hostile = {
      with(0, 'X'),    // magic
      with(4, 1),      // url version 1 (no max packet)
      with(4, 3),      // url version
      with(35, 4),     // max packet 0x04000040: past the largest (64 MiB) by 64
      with(32, 0x3f),  // max packet under the least (0x3f: 63 with the golden zeroes)
      with(36, 1),     // reserved after the max packet
      with(5, 10),     // name length disagrees with the bytes
      with(5, 0),      // empty name
      with(6, 1),      // reserved
      hello_with(std::span<const std::byte>(url).first(url_header_size)),  // no name
      hello_with(url, flag_abandoned),                                     // a bye's flag
  };
  // One byte more than the longest url: past what a control receive holds.
  std::vector<std::byte> longer = url;
  longer.push_back(std::byte{0});
  hostile.push_back(hello_with(longer));
  // A url on anything but a hello.
  Control credit = sample();
  credit.url = url;
  hostile.push_back(join(encode_control(credit), url));
  // The frame's length says more than came.
  hostile.push_back(std::vector<std::byte>(good.begin(), good.end() - 1));
  for (std::size_t i = 0; i < hostile.size(); ++i) {
    EXPECT_FALSE(parser.decode(hostile[i]).has_value()) << "case " << i;
    EXPECT_TRUE(parser.decode(good).has_value()) << "after case " << i;
  }
}

TEST(OfiCodec, RendezvousData) {
  Rdv r{0xdeadbeef, 0x1000, 0x77, 1 << 20};
  driver::Packet pkt;
  encode_rdv(r, pkt);
  EXPECT_EQ(pkt.rdv_len, rdv_size);
  auto back = decode_rdv(pkt);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->cookie, r.cookie);
  EXPECT_EQ(back->address, r.address);
  EXPECT_EQ(back->key, r.key);
  EXPECT_EQ(back->length, r.length);
  driver::Packet forged = pkt;
  forged.rdv_data.fill(std::byte{0xa5});
  EXPECT_EQ(decode_rdv(forged).status(), Status::invalid_argument);
  forged = pkt;
  forged.rdv_len = 31;
  EXPECT_EQ(decode_rdv(forged).status(), Status::invalid_argument);
}

TEST(OfiCodec, TagsKeepKindsApart) {
  const std::uint64_t data = tag_of(TagKind::data, 7);
  const std::uint64_t done = tag_of(TagKind::rdv_done, 7);
  const std::uint64_t ctl = tag_of(TagKind::control, 7);
  // A posted receive (data tag, data_ignore) takes data and notices only.
  EXPECT_EQ((done & ~data_ignore), (data & ~data_ignore));
  EXPECT_NE((ctl & ~data_ignore), (data & ~data_ignore));
  EXPECT_NE((tag_of(TagKind::data, 8) & ~data_ignore), (data & ~data_ignore));
  EXPECT_EQ(kind_of(done), TagKind::rdv_done);
  EXPECT_EQ(kind_of(ctl), TagKind::control);
  EXPECT_EQ(data >> 60, 0u) << "top four bits stay free for the provider";
  const std::uint64_t d = rdv_done_data(123456789, 0x12345678);
  EXPECT_EQ(rdv_done_size(d), 123456789u);
  EXPECT_EQ(rdv_done_cookie(d), 0x5678u);
}

}  // namespace
}  // namespace pier::drivers::ofi
