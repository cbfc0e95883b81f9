// Decoders accept only canonical bytes: whatever they accept re-encodes to
// exactly the input. Checked on many mutations of valid headers, so the
// property holds in every build, not only in the fuzz preset.
#include "wire/wire.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

namespace pier::wire {
namespace {

using Bytes = std::vector<std::byte>;

/// Mutates `valid` a few bytes at a time; counts how many mutants were
/// accepted and checks each of those round-trips exactly.
template <class H>
int mutate_and_check(const H& valid, std::uint32_t seed) {
  Bytes base(H::size);
  EXPECT_TRUE(encode(valid, base).has_value());
  std::mt19937 rng(seed);
  int accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    Bytes b = base;
    const int flips = 1 + static_cast<int>(rng() % 3);
    for (int f = 0; f < flips; ++f) {
      const std::size_t at = rng() % H::size;
      // Small values hit enum and flag edges more often than random bytes do.
      b[at] = static_cast<std::byte>(rng() % 2 ? rng() % 40 : rng());
    }
    Result<H> h = H::decode(b);
    if (!h) {
      EXPECT_TRUE(h.status() == Status::malformed || h.status() == Status::version_mismatch);
      continue;
    }
    ++accepted;
    Bytes again(H::size);
    EXPECT_TRUE(encode(*h, again).has_value());
    EXPECT_EQ(again, b) << "accepted a non-canonical encoding, mutant " << i;
  }
  return accepted;
}

TEST(Canonical, EveryAcceptedMutantReencodesExactly) {
  FrameHeader frame;
  frame.type = PacketType::rts;
  frame.payload_length = 200;
  frame.upper = Upper::port;
  EXPECT_GT(mutate_and_check(frame, 1), 100);

  RtrHeader rtr;
  rtr.rdv_len = 20;
  EXPECT_GT(mutate_and_check(rtr, 2), 100);
  EXPECT_GT(mutate_and_check(AckHeader{5, AckResult::ok}, 3), 100);
  EXPECT_GT(mutate_and_check(DriverLocalHeader{3, 9}, 4), 100);

  PortalsHeader fetch;
  fetch.op = PortalsOp::fetch_atomic;
  fetch.atomic_op = AtomicOp::sum;
  fetch.atomic_type = AtomicType::uint32;
  fetch.length = 64;
  EXPECT_GT(mutate_and_check(fetch, 5), 100);

  PortHeader put;
  put.kind = PortKind::put;
  put.length = 100;
  put.remote_address = 0x1000;
  EXPECT_GT(mutate_and_check(put, 6), 100);
}

}  // namespace
}  // namespace pier::wire
