// tests/launch: pier-run's PMI rules (PmiService), fed messages directly.
#include "pmi_service.hpp"

#include <gtest/gtest.h>

namespace pier::run {
namespace {

using boot::pmi::Framing;
using boot::pmi::Message;

struct Fixture {
  explicit Fixture(std::uint32_t n) : service(n, "job") {}
  std::vector<PmiOutgoing> send(std::uint32_t rank, std::string text,
                                Framing framing = Framing::v1) {
    std::vector<PmiOutgoing> out;
    service.on_message(rank, Message{framing, std::move(text)}, now, out);
    return out;
  }
  std::vector<PmiOutgoing> disconnect(std::uint32_t rank) {
    std::vector<PmiOutgoing> out;
    service.on_disconnect(rank, now, out);
    return out;
  }
  std::vector<PmiOutgoing> tick(PmiService::Clock::duration later) {
    now += later;
    std::vector<PmiOutgoing> out;
    service.on_tick(now, out);
    return out;
  }
  PmiService service;
  PmiService::Clock::time_point now{std::chrono::seconds(1000)};
};

TEST(PmiService, BarrierAnswersEveryRankInItsOwnFraming) {
  Fixture f(2);
  EXPECT_TRUE(f.send(0, "cmd=barrier_in").empty());
  auto out = f.send(1, "cmd=kvs-fence;thrid=7;", Framing::v2);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].rank, 0u);
  EXPECT_EQ(out[0].bytes, "cmd=barrier_out rc=0\n");
  EXPECT_EQ(out[1].rank, 1u);
  EXPECT_EQ(out[1].bytes, "    36cmd=kvs-fence-response;thrid=7;rc=0;");
}

TEST(PmiService, PutThenGetAcrossVersions) {
  Fixture f(2);
  auto out = f.send(0, "cmd=put kvsname=job key=k value=v1");
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].bytes, "cmd=put_result rc=0 msg=success\n");
  out = f.send(1, "cmd=kvs-get;jobid=job;srcid=0;key=k;", Framing::v2);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_NE(out[0].bytes.find("found=TRUE;value=v1;"), std::string::npos) << out[0].bytes;
  out = f.send(1, "cmd=get kvsname=other key=k");
  ASSERT_EQ(out.size(), 1u);
  EXPECT_NE(out[0].bytes.find("rc=-1"), std::string::npos) << out[0].bytes;
}

TEST(PmiService, PublishedNamesAreSharedAcrossVersionsAndUnique) {
  Fixture f(2);
  auto out = f.send(0, "cmd=publish_name service=svc port=p:1");
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].bytes, "cmd=publish_result rc=0 msg=success\n");
  out = f.send(1, "cmd=name-publish;name=svc;port=p:2;", Framing::v2);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_NE(out[0].bytes.find("rc=-1;errmsg=service svc is already published;"), std::string::npos)
      << out[0].bytes;
  out = f.send(1, "cmd=name-lookup;thrid=3;name=svc;", Framing::v2);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_NE(out[0].bytes.find("cmd=name-lookup-response;thrid=3;found=TRUE;port=p:1;"),
            std::string::npos)
      << out[0].bytes;
  out = f.send(1, "cmd=unpublish_name service=svc");
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].bytes, "cmd=unpublish_result rc=0 msg=success\n");
  out = f.send(0, "cmd=lookup_name service=svc");
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].bytes, "cmd=lookup_result rc=-1 msg=service_svc_is_not_published\n");
}

TEST(PmiService, SpawnIsRefusedWithAnAnswerAfterTheLastBlock) {
  Fixture f(1);
  EXPECT_TRUE(f.send(0, "mcmd=spawn nprocs=1 execname=a totspawns=2 spawnssofar=1").empty());
  auto out = f.send(0, "mcmd=spawn nprocs=1 execname=b totspawns=2 spawnssofar=2");
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].bytes, "cmd=spawn_result rc=-1 msg=spawn_is_not_supported_by_pier-run\n");
  EXPECT_FALSE(out[0].close_after);
  out = f.send(0, "cmd=spawn;thrid=9;subcmd=x;maxprocs=3;", Framing::v2);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_NE(out[0].bytes.find("cmd=spawn-response;thrid=9;rc=-1;errmsg=spawn is not supported"),
            std::string::npos)
      << out[0].bytes;
  const auto notes = f.service.take_notes();
  ASSERT_EQ(notes.size(), 2u);
  EXPECT_NE(notes[1].find("rank 0 asked PMI to spawn 3 processes of x"), std::string::npos)
      << notes[1];
}

TEST(PmiService, FullinitChecksTheClaimedRank) {
  Fixture f(2);
  auto out = f.send(1, "cmd=fullinit;pmirank=0;", Framing::v2);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_NE(out[0].bytes.find("rc=-1"), std::string::npos) << out[0].bytes;
  out = f.send(1, "cmd=fullinit;pmirank=1;threaded=FALSE;", Framing::v2);
  EXPECT_NE(out[0].bytes.find("rank=1;size=2;"), std::string::npos) << out[0].bytes;
}

TEST(PmiService, DisconnectDuringBarrierClosesTheWaitersAfterTheGrace) {
  Fixture f(3);
  EXPECT_TRUE(f.send(0, "cmd=barrier_in").empty());
  // The grace gives the launcher time to report the rank that died.
  EXPECT_TRUE(f.disconnect(2).empty());
  ASSERT_TRUE(f.service.next_tick().has_value());
  EXPECT_EQ(*f.service.next_tick(), f.now + PmiService::leave_grace);
  EXPECT_TRUE(f.tick(PmiService::leave_grace / 2).empty());
  auto out = f.tick(PmiService::leave_grace);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].rank, 0u);
  EXPECT_TRUE(out[0].close_after);
  auto notes = f.service.take_notes();
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("rank 2 closed its PMI connection before entering PMI barrier 1"),
            std::string::npos)
      << notes[0];
  // A later barrier fails at once rather than waiting for the absent rank.
  out = f.send(1, "cmd=barrier_in");
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0].close_after);
  EXPECT_FALSE(f.service.next_tick().has_value());
}

TEST(PmiService, BarrierAfterAPeerFinalizedFails) {
  Fixture f(2);
  f.send(0, "cmd=finalize");
  f.tick(PmiService::leave_grace * 5);
  // Long gone: the barrier fails at once.
  auto out = f.send(1, "cmd=barrier_in");
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0].close_after);
}

TEST(PmiService, NoTickWithoutAPendingBarrier) {
  Fixture f(2);
  EXPECT_TRUE(f.disconnect(1).empty());
  EXPECT_FALSE(f.service.next_tick().has_value());
  EXPECT_TRUE(f.tick(PmiService::leave_grace * 2).empty());
}

TEST(PmiService, NodeAttributeWaitIsAnsweredByThePut) {
  Fixture f(2);
  EXPECT_TRUE(f.send(1, "cmd=info-getnodeattr;key=shm;wait=TRUE;", Framing::v2).empty());
  auto out = f.send(0, "cmd=info-putnodeattr;key=shm;value=seg;", Framing::v2);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[1].rank, 1u);
  EXPECT_NE(out[1].bytes.find("found=TRUE;value=seg;"), std::string::npos) << out[1].bytes;
}

/// Each wait is kept until the attribute is put: a rank sending waits
/// without end grew the launcher without bound (a review). Past the cap a
/// wait is refused at once, and the waits kept are still answered.
TEST(PmiService, NodeAttributeWaitsOfOneRankAreBounded) {
  Fixture f(2);
  const std::size_t cap = PmiService::max_node_waits_per_rank;
  for (std::size_t i = 0; i < cap; ++i)
    EXPECT_TRUE(f.send(1, "cmd=info-getnodeattr;key=k;wait=TRUE;", Framing::v2).empty()) << i;
  for (int i = 0; i < 1000; ++i) {
    auto out = f.send(1, "cmd=info-getnodeattr;key=k;wait=TRUE;", Framing::v2);
    ASSERT_EQ(out.size(), 1u) << i;
    EXPECT_NE(out[0].bytes.find("rc=-1"), std::string::npos) << out[0].bytes;
  }
  auto out = f.send(0, "cmd=info-putnodeattr;key=k;value=v;", Framing::v2);
  EXPECT_EQ(out.size(), 1u + cap);  // the put's answer and every wait kept
}

/// Tiny entries count their memory, not their bytes alone: 64 MiB of
/// 1-byte keys and empty values cost pier-run some 100 times that before.
TEST(PmiService, TinyEntriesCountWhatTheyCost) {
  Fixture f(1);
  const std::size_t fit = PmiService::max_kvs_bytes / (PmiService::kvs_entry_cost + 8);
  std::size_t stored = 0;
  for (std::size_t i = 0; i < 2 * fit; ++i) {
    auto out = f.send(0, "cmd=put kvsname=job key=k" + std::to_string(i) + " value=v");
    ASSERT_EQ(out.size(), 1u);
    if (out[0].bytes.find("rc=0") == std::string::npos) break;
    ++stored;
  }
  EXPECT_LE(stored, PmiService::max_kvs_bytes / PmiService::kvs_entry_cost);
  EXPECT_GT(stored, fit / 2);
}

TEST(PmiService, MalformedAndUnknownCommandsAreRefusedNotFatal) {
  Fixture f(2);
  auto out = f.send(0, "cmd=spawn nprocs=2");
  ASSERT_EQ(out.size(), 1u);
  EXPECT_NE(out[0].bytes.find("rc=-1"), std::string::npos);
  EXPECT_FALSE(out[0].close_after);
  out = f.send(1, "cmd=x;=;", Framing::v2);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0].close_after);
  // Out-of-range ranks are ignored.
  EXPECT_TRUE(f.send(9, "cmd=barrier_in").empty());
}

TEST(PmiService, StoreIsBounded) {
  Fixture f(1);
  const std::string big(60000, 'x');
  int refused = 0;
  for (int i = 0; i < 2000 && refused == 0; ++i) {
    auto out = f.send(0, "cmd=put kvsname=job key=k" + std::to_string(i) + " value=" + big);
    refused += out[0].bytes.find("kvs_full") != std::string::npos;
  }
  EXPECT_EQ(refused, 1);
}

TEST(PmiService, AbortIsNotedAndLeavesTheBarrierToTheLauncher) {
  Fixture f(2);
  EXPECT_TRUE(f.send(0, "cmd=barrier_in").empty());
  EXPECT_TRUE(f.send(1, "cmd=abort exitcode=4 message=bad input").empty());
  EXPECT_TRUE(f.disconnect(1).empty());
  EXPECT_TRUE(f.tick(PmiService::leave_grace * 2).empty());
  auto notes = f.service.take_notes();
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0], "rank 1 aborted the job through PMI (exit code 4): bad input");
}

}  // namespace
}  // namespace pier::run
