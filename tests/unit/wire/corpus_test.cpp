// The checked-in fuzz corpus (tests/fuzz/corpus, written by make_corpus.py,
// an independent Python encoder) must decode: seeds that the decoders reject
// would leave the fuzzers starting from nothing after a wire change.
#include "wire/bytes.hpp"
#include "wire/wire.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <type_traits>
#include <vector>

namespace pier::wire {
namespace {

std::vector<std::vector<std::byte>> seeds(const std::string& target) {
  std::vector<std::vector<std::byte>> out;
  const std::filesystem::path dir = std::filesystem::path(PIER_WIRE_CORPUS_DIR) / target;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::ifstream f(entry.path(), std::ios::binary);
    std::vector<char> raw((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    std::vector<std::byte> bytes(raw.size());
    for (std::size_t i = 0; i < raw.size(); ++i) bytes[i] = static_cast<std::byte>(raw[i]);
    out.push_back(std::move(bytes));
  }
  return out;
}

/// fuzz_port's compact seeds: this marker, 9 bytes of routing, then the header.
constexpr std::byte compact_marker{0xc0};

void expect_compact_decodes(const std::vector<std::byte>& seed) {
  ASSERT_GE(seed.size(), 10u + PortHeader::compact_size);
  const std::span<const std::byte> in(seed);
  const PortRouting r{load_u8(in, 1), load_u16(in, 2), load_u16(in, 4), load_u32(in, 6)};
  Result<PortHeader> h = PortHeader::decode_compact(in.subspan(10), r);
  ASSERT_TRUE(h.has_value()) << to_string(h.status());
  std::vector<std::byte> again(PortHeader::compact_size);
  ASSERT_TRUE(encode_compact(*h, again).has_value());
  EXPECT_TRUE(std::equal(again.begin(), again.end(), seed.begin() + 10));
}

template <class H>
void expect_all_decode(const std::string& target, std::size_t expected_seeds) {
  const auto all = seeds(target);
  EXPECT_EQ(all.size(), expected_seeds) << target;
  for (const auto& seed : all) {
    if constexpr (std::is_same_v<H, PortHeader>) {
      if (!seed.empty() && seed[0] == compact_marker) {
        expect_compact_decodes(seed);
        continue;
      }
    }
    if constexpr (std::is_same_v<H, PortalsHeader>) {
      if (seed.size() == PortalsHeader::tiny_size ||
          seed.size() == PortalsHeader::tiny_get_size) {  // a tiny form
        Result<PortalsHeader> h = PortalsHeader::decode_tiny(seed, 8);
        ASSERT_TRUE(h.has_value()) << to_string(h.status());
        std::vector<std::byte> again(seed.size());
        ASSERT_TRUE(encode_tiny(*h, again).has_value());
        EXPECT_TRUE(std::equal(again.begin(), again.end(), seed.begin())) << target;
        continue;
      }
      if (seed.size() == PortalsHeader::compact_size) {  // its compact form
        Result<PortalsHeader> h = PortalsHeader::decode_compact(seed);
        ASSERT_TRUE(h.has_value()) << to_string(h.status());
        std::vector<std::byte> again(PortalsHeader::compact_size);
        ASSERT_TRUE(encode_compact(*h, again).has_value());
        EXPECT_TRUE(std::equal(again.begin(), again.end(), seed.begin())) << target;
        continue;
      }
    }
    Result<H> h = H::decode(seed);
    EXPECT_TRUE(h.has_value()) << target << ": " << to_string(h.status());
    if (!h) continue;
    std::vector<std::byte> again(H::size);
    ASSERT_TRUE(encode(*h, again).has_value());
    EXPECT_TRUE(std::equal(again.begin(), again.end(), seed.begin())) << target;
  }
}

TEST(FuzzCorpus, DecoderSeedsDecodeAndReencodeExactly) {
  expect_all_decode<FrameHeader>("fuzz_frame", 4);
  expect_all_decode<RtsHeader>("fuzz_rts", 1);
  expect_all_decode<RtrHeader>("fuzz_rtr", 1);
  expect_all_decode<DataHeader>("fuzz_data", 1);
  expect_all_decode<AckHeader>("fuzz_ack", 1);
  expect_all_decode<DriverLocalHeader>("fuzz_driver_local", 1);
  expect_all_decode<PortalsHeader>("fuzz_portals", 7);
  expect_all_decode<PortHeader>("fuzz_port", 3);
}

TEST(FuzzCorpus, StreamSeedsParseToTheEnd) {
  const auto all = seeds("fuzz_stream_parser");
  ASSERT_EQ(all.size(), 4u);
  int calls = 0;
  Handler take_all{[](void* ctx, const Incoming&, Continuation& rest) noexcept {
                     ++*static_cast<int*>(ctx);
                     rest.discard = true;
                     return Status::ok;
                   },
                   &calls};
  CoreHandlers core;
  for (PacketType t : {PacketType::data, PacketType::eager, PacketType::rts, PacketType::rtr,
                       PacketType::ack, PacketType::credit})
    ASSERT_EQ(core.register_handler(t, take_all), Status::ok);
  HandlerTable local(4);
  for (std::uint16_t s = 0; s < 3; ++s) ASSERT_EQ(local.register_handler(s, take_all), Status::ok);
  for (const auto& seed : all) {
    StreamParser parser(core, &local, 256);
    EXPECT_EQ(parser.feed(std::span(seed).subspan(2)), Status::ok);  // 2 control bytes
    EXPECT_TRUE(parser.at_boundary());
  }
  EXPECT_EQ(calls, 3 + 3 + 3 + 1);
}

}  // namespace
}  // namespace pier::wire
