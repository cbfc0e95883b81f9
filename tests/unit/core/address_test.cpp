// The process address the bootstrap spreads: decoded as carefully as wire
// input, including the receive capacity each url carries.
#include <gtest/gtest.h>

#include "core/address.hpp"

namespace pier::core {
namespace {

LocalAddress sample() {
  LocalAddress a;
  a.node = "node-a";
  a.pid = 42;
  a.credits = 32;
  a.recv_capacity = 131072 + 256;
  a.urls.push_back({"shm", 0, {std::byte{1}, std::byte{2}}, 32768});
  a.urls.push_back({"tcp", 0, {std::byte{3}}, 131072 + 256});
  return a;
}

TEST(Address, RoundTripKeepsEachUrlsCapacity) {
  const LocalAddress a = sample();
  auto back = decode_address(encode_address(a));
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, a);
  EXPECT_EQ(back->urls[0].recv_capacity, 32768u);
  EXPECT_EQ(back->urls[1].recv_capacity, 131072u + 256);
}

TEST(Address, UrlCapacityAboveTheProcessOneIsMalformed) {
  LocalAddress a = sample();
  a.urls[0].recv_capacity = a.recv_capacity + 1;
  EXPECT_EQ(decode_address(encode_address(a)).status(), Status::malformed);
}

TEST(Address, UrlCapacityZeroIsMalformed) {
  LocalAddress a = sample();
  a.urls[1].recv_capacity = 0;
  EXPECT_EQ(decode_address(encode_address(a)).status(), Status::malformed);
}

TEST(Address, EveryTruncationIsRejected) {
  const auto bytes = encode_address(sample());
  for (std::size_t n = 0; n < bytes.size(); ++n)
    EXPECT_FALSE(decode_address(std::span(bytes.data(), n))) << n << " bytes";
}

TEST(Address, AnotherVersionIsAVersionMismatch) {
  auto bytes = encode_address(sample());
  bytes[4] = std::byte{1};  // the version byte follows the 4-byte magic
  EXPECT_EQ(decode_address(bytes).status(), Status::version_mismatch);
}

}  // namespace
}  // namespace pier::core
