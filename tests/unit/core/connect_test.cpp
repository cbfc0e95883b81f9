// Lazy connection set-up (CORE_CONNECT=lazy, the default) over drivers that
// report incoming connections: a gate opens on its first message, by either
// side; the peer that never sent learns of it through the driver and opens
// its side; gates nobody used stay closed on both sides.
#include <gtest/gtest.h>

#include "cluster.hpp"

namespace pier::core::test {
namespace {

bool connected(Cluster& c, Rank from, Rank to) {
  auto info = c.cores[from]->gate_info(to);
  return info && info->connected;
}

class LazyConnect : public ::testing::TestWithParam<const char*> {};

TEST_P(LazyConnect, OnlyTheGatesUsedOpenOnBothSides) {
  Cluster c(4, GetParam());
  if (std::string_view(GetParam()).starts_with("ofi") && c.status == Status::unsupported)
    GTEST_SKIP() << GetParam() << " is not offered here";
  ASSERT_EQ(c.status, Status::ok);
  for (int i = 0; i < 200; ++i) c.progress_all();
  for (Rank a = 0; a < 4; ++a) {
    for (Rank b = 0; b < 4; ++b) {
      if (a != b) {
        EXPECT_FALSE(connected(c, a, b)) << a << " -> " << b << " before any message";
      }
    }
  }

  // 1 -> 2 and 3 -> 0, an eager and a rendezvous message each.
  std::vector<std::byte> small = pattern(8, 1), large = pattern(300000, 2);
  std::vector<std::byte> small2 = pattern(8, 3), large2 = pattern(300000, 4);
  ASSERT_EQ(c.send(1, 2, small, reinterpret_cast<void*>(1)), Status::ok);
  ASSERT_EQ(c.send(1, 2, large, reinterpret_cast<void*>(2)), Status::ok);
  ASSERT_EQ(c.send(3, 0, small2, reinterpret_cast<void*>(3)), Status::ok);
  ASSERT_EQ(c.send(3, 0, large2, reinterpret_cast<void*>(4)), Status::ok);
  ASSERT_TRUE(c.run_until([&] {
    return c.clients[1]->finalized.size() == 2 && c.clients[3]->finalized.size() == 2 &&
           c.clients[2]->finalized.size() == 2 && c.clients[0]->finalized.size() == 2;
  })) << "messages over lazily opened gates never completed";
  for (const auto& [cookie, st] : c.clients[1]->finalized) EXPECT_EQ(st, Status::ok);
  ASSERT_EQ(c.clients[2]->buffers.size(), 2u);
  EXPECT_EQ(c.clients[2]->buffers[0], small);
  EXPECT_EQ(c.clients[2]->buffers[1], large);
  EXPECT_EQ(c.clients[0]->buffers[1], large2);

  // The passive sides opened theirs; the answer needs no new set-up.
  EXPECT_TRUE(connected(c, 1, 2));
  EXPECT_TRUE(connected(c, 2, 1));
  EXPECT_TRUE(connected(c, 3, 0));
  EXPECT_TRUE(connected(c, 0, 3));
  std::vector<std::byte> back = pattern(100, 5);
  ASSERT_EQ(c.send(2, 1, back, reinterpret_cast<void*>(5)), Status::ok);
  ASSERT_TRUE(c.run_until([&] { return c.clients[1]->buffers.size() == 1; }));
  EXPECT_EQ(c.clients[1]->buffers[0], back);

  for (int i = 0; i < 200; ++i) c.progress_all();
  for (auto [a, b] : {std::pair<Rank, Rank>{0, 1}, {0, 2}, {1, 3}, {2, 3}}) {
    EXPECT_FALSE(connected(c, a, b)) << a << " -> " << b << " was never used";
    EXPECT_FALSE(connected(c, b, a)) << b << " -> " << a << " was never used";
    EXPECT_EQ(c.cores[a]->gate_status(b), Status::ok) << "an unused gate stays usable";
  }
}

// ofi:tcp and ofi:shm are libfabric's tcp;ofi_rxm and shm providers; where
// libfabric (or the provider) is missing the core cannot be made (skipped).
INSTANTIATE_TEST_SUITE_P(Drivers, LazyConnect,
                         ::testing::Values("tcp", "shm", "fault:tcp", "ofi:tcp", "ofi:shm"),
                         [](const ::testing::TestParamInfo<const char*>& p) {
                           std::string n = p.param;
                           for (char& ch : n)
                             if (ch == ':') ch = '_';
                           return n;
                         });

}  // namespace
}  // namespace pier::core::test
