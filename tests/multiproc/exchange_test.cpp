// tests/multiproc: pier-run's exchange rules (tools/pier-run/exchange.cpp)
// driven directly with frames: no processes, no sockets.
#include "exchange.hpp"

#include <gtest/gtest.h>

namespace pier::run {
namespace {

namespace proto = boot::proto;

proto::Frame frame_of(const std::vector<std::byte>& bytes) {
  proto::FrameReader reader;
  reader.append(bytes);
  auto f = reader.next();
  EXPECT_TRUE(f && *f);
  return std::move(**f);
}

proto::Type type_of(const Outgoing& o) {
  return frame_of(*o.frame).header.type;
}

class ExchangeTest : public ::testing::Test {
 protected:
  Exchange ex{3, "0.1.0"};
  std::vector<Outgoing> out;

  void hello(int conn, std::uint32_t rank, std::string version = "0.1.0", std::uint32_t size = 3,
             std::string session = {}) {
    ex.on_frame(conn, frame_of(proto::encode_hello({rank, size, 100 + rank, version, session})),
                out);
  }
  void fence(int conn, std::uint32_t epoch) {
    ex.on_frame(conn, frame_of(proto::encode_fence(epoch)), out);
  }
};

TEST_F(ExchangeTest, FenceCompletesWhenEveryRankJoinedAndCarriesAllEntries) {
  for (int r = 0; r < 3; ++r) hello(10 + r, static_cast<std::uint32_t>(r));
  ASSERT_EQ(out.size(), 3u);
  for (auto& o : out) EXPECT_EQ(type_of(o), proto::Type::welcome);
  out.clear();
  std::vector<proto::Entry> mine{{0, "url", {std::byte{7}}}};
  ex.on_frame(11, frame_of(proto::encode_commit(mine)), out);
  fence(10, 1);
  fence(11, 1);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(ex.pending_summary(),
            "fence 1 waiting for rank 2 connected but did not enter the fence");
  fence(12, 1);
  ASSERT_EQ(out.size(), 3u);
  for (auto& o : out) {
    auto done = proto::decode_fence_done(frame_of(*o.frame).body);
    ASSERT_TRUE(done);
    EXPECT_EQ(done->epoch, 1u);
    ASSERT_EQ(done->entries.size(), 1u);
    EXPECT_EQ(done->entries[0].rank, 1u);  // the server, not the client, names the rank
    EXPECT_EQ(done->entries[0].key, "url");
  }
  EXPECT_EQ(ex.pending_summary(), "");
}

/// Entries that together pass what one answer carries (64 MiB, each value
/// within its 1 MiB): every rank's fence failed as a malformed frame, with
/// no word of why; now it fails with the reason. The one big answer is
/// shared by every rank's connection, not copied per rank.
TEST_F(ExchangeTest, AnExchangeTooLargeForOneAnswerFailsTheFenceSayingWhy) {
  for (int r = 0; r < 3; ++r) hello(10 + r, static_cast<std::uint32_t>(r));
  out.clear();
  const std::vector<std::byte> mib(1u << 20, std::byte{1});
  for (int r = 0; r < 3; ++r) {
    std::vector<proto::Entry> mine;
    for (int k = 0; k < 22; ++k) mine.push_back({0, "k" + std::to_string(k), mib});
    ex.on_frame(10 + r, frame_of(proto::encode_commit(mine)), out);
  }
  for (int r = 0; r < 3; ++r) fence(10 + r, 1);
  ASSERT_EQ(out.size(), 3u);
  for (auto& o : out) {
    ASSERT_EQ(type_of(o), proto::Type::fence_failed);
    auto failed = proto::decode_fence_failed(frame_of(*o.frame).body);
    ASSERT_TRUE(failed);
    EXPECT_NE(failed->text.find("more than one exchange carries (64 MiB)"), std::string::npos)
        << failed->text;
  }
  out.clear();
  // A fitting exchange: one answer, the same buffer for every rank.
  Exchange small{3, "0.1.0"};
  std::vector<Outgoing> o2;
  for (std::uint32_t r = 0; r < 3; ++r)
    small.on_frame(20 + static_cast<int>(r),
                   frame_of(proto::encode_hello({r, 3, 100 + r, "0.1.0", {}})), o2);
  o2.clear();
  for (int r = 0; r < 3; ++r) small.on_frame(20 + r, frame_of(proto::encode_fence(1)), o2);
  ASSERT_EQ(o2.size(), 3u);
  EXPECT_EQ(o2[0].frame.get(), o2[2].frame.get());
}

/// A key committed again replaces its value (the last put wins): 100
/// commits of one 1 MiB key once piled up 100 MiB in pier-run and failed the
/// fence as too large.
TEST_F(ExchangeTest, AKeyCommittedAgainReplacesItsValue) {
  for (int r = 0; r < 3; ++r) hello(10 + r, static_cast<std::uint32_t>(r));
  out.clear();
  for (int k = 0; k < 100; ++k) {
    std::vector<proto::Entry> mine{
        {0, "status", std::vector<std::byte>(1u << 20, static_cast<std::byte>(k))}};
    ex.on_frame(10, frame_of(proto::encode_commit(mine)), out);
  }
  ex.on_frame(11, frame_of(proto::encode_commit({{{0, "status", {std::byte{9}}}}})), out);
  for (int r = 0; r < 3; ++r) fence(10 + r, 1);
  ASSERT_EQ(out.size(), 3u);
  auto done = proto::decode_fence_done(frame_of(*out[0].frame).body);
  ASSERT_TRUE(done);
  ASSERT_EQ(done->entries.size(), 2u);  // rank 0's and rank 1's, each once
  EXPECT_EQ(done->entries[0].rank, 0u);
  ASSERT_EQ(done->entries[0].value.size(), 1u << 20);
  EXPECT_EQ(done->entries[0].value[0], std::byte{99});
  EXPECT_EQ(done->entries[1].rank, 1u);
  EXPECT_EQ(done->entries[1].value, std::vector<std::byte>{std::byte{9}});
}

/// Entries past what one answer carries fail the session when they are
/// committed, not at the fence: pier-run held every byte until then. A
/// rank already in the fence hears of it at once; later commits are dropped
/// and later fences fail with the same reason.
TEST_F(ExchangeTest, TooManyBytesFailTheSessionAtCommit) {
  for (int r = 0; r < 3; ++r) hello(10 + r, static_cast<std::uint32_t>(r));
  out.clear();
  fence(12, 1);
  EXPECT_TRUE(out.empty());
  const std::vector<std::byte> mib(1u << 20, std::byte{1});
  for (int k = 0; k < 64; ++k)
    ex.on_frame(10, frame_of(proto::encode_commit({{{0, "k" + std::to_string(k), mib}}})), out);
  ASSERT_EQ(out.size(), 1u);  // the 64th MiB passed the limit
  EXPECT_EQ(out[0].conn, 12);
  ASSERT_EQ(type_of(out[0]), proto::Type::fence_failed);
  auto failed = proto::decode_fence_failed(frame_of(*out[0].frame).body);
  ASSERT_TRUE(failed);
  EXPECT_NE(failed->text.find("more than one exchange carries (64 MiB)"), std::string::npos)
      << failed->text;
  out.clear();
  ex.on_frame(11, frame_of(proto::encode_commit({{{0, "late", mib}}})), out);
  EXPECT_TRUE(out.empty());
  fence(10, 1);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(type_of(out[0]), proto::Type::fence_failed);
}

TEST_F(ExchangeTest, SessionsOfOneRankAreFencedApart) {
  // Every rank brings up Portals and ports (connections may reach pier-run
  // in any order); each session's fence waits for its own members only.
  hello(10, 0, "0.1.0", 3, "portals");
  hello(11, 0, "0.1.0", 3, "port");
  hello(12, 1, "0.1.0", 3, "port");
  hello(13, 1, "0.1.0", 3, "portals");
  hello(14, 2, "0.1.0", 3, "port");
  ASSERT_EQ(out.size(), 5u);
  for (const Outgoing& o : out) EXPECT_EQ(type_of(o), proto::Type::welcome);
  out.clear();
  ex.on_frame(11, frame_of(proto::encode_commit({{{0, "k", {std::byte{7}}}}})), out);
  fence(11, 1);
  fence(12, 1);
  fence(10, 1);  // the Portals session has its own epoch 1
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(ex.pending_summary(),
            "session 'port' fence 1 waiting for rank 2 connected but did not enter the fence; "
            "session 'portals' fence 1 waiting for rank 2 never connected to the exchange; rank "
            "1 connected but did not enter the fence");
  fence(14, 1);
  ASSERT_EQ(out.size(), 3u);
  for (const Outgoing& o : out) {
    EXPECT_TRUE(o.conn == 11 || o.conn == 12 || o.conn == 14) << o.conn;
    auto done = proto::decode_fence_done(frame_of(*o.frame).body);
    ASSERT_TRUE(done);
    ASSERT_EQ(done->entries.size(), 1u);  // the port session's entry, not another's
    EXPECT_EQ(done->entries[0].key, "k");
  }
  // Rank 2 never joins the Portals session: when it ends, that fence fails
  // and the port session, already past its fence, is left alone.
  out.clear();
  ex.on_rank_exit(2, out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].conn, 10);
  auto failed = proto::decode_fence_failed(frame_of(*out[0].frame).body);
  ASSERT_TRUE(failed);
  EXPECT_EQ(failed->text, "session 'portals': rank 2 ended before joining fence 1");
  // A second connection of a rank to one session is refused.
  out.clear();
  hello(15, 1, "0.1.0", 3, "port");
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(type_of(out[0]), proto::Type::error);
}

TEST_F(ExchangeTest, SessionsAreNamedPlainlyAndBounded) {
  hello(10, 0, "0.1.0", 3, "a/b");  // not a session name: refused as malformed
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(type_of(out[0]), proto::Type::error);
  out.clear();
  for (std::size_t i = 0; i < proto::max_sessions; ++i)
    hello(20 + static_cast<int>(i), 0, "0.1.0", 3, "s" + std::to_string(i));
  hello(99, 0, "0.1.0", 3, "one.too.many");
  hello(98, 1, "0.1.0", 3, "one.too.many");  // the refusal left no session behind
  ASSERT_EQ(out.size(), proto::max_sessions + 2);
  for (std::size_t i = 0; i < proto::max_sessions; ++i)
    EXPECT_EQ(type_of(out[i]), proto::Type::welcome) << i;
  EXPECT_EQ(type_of(out[proto::max_sessions]), proto::Type::error);
  EXPECT_EQ(type_of(out.back()), proto::Type::error);
  // Pending fences of two sessions are both named.
  out.clear();
  fence(20, 1);
  fence(21, 1);
  EXPECT_EQ(ex.pending_summary(),
            "session 's0' fence 1 waiting for ranks 1, 2 never connected to the exchange; "
            "session 's1' fence 1 waiting for ranks 1, 2 never connected to the exchange");
}

TEST_F(ExchangeTest, QueryNamesMissingRanksByReason) {
  hello(10, 0);
  hello(11, 1);
  out.clear();
  fence(10, 1);
  ex.on_frame(10, frame_of(proto::encode_query(1)), out);
  ASSERT_EQ(out.size(), 1u);
  auto reply = proto::decode_query_reply(frame_of(*out[0].frame).body);
  ASSERT_TRUE(reply);
  EXPECT_EQ(reply->ranks, (std::vector<std::uint32_t>{1, 2}));
  EXPECT_EQ(reply->text,
            "waiting for rank 2 never connected to the exchange; rank 1 connected but did not "
            "enter the fence");
}

TEST_F(ExchangeTest, ARankThatLeavesFailsThePendingFenceAtOnce) {
  hello(10, 0);
  hello(11, 1);
  hello(12, 2);
  out.clear();
  fence(10, 1);
  ex.on_disconnect(12, out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].conn, 10);
  auto failed = proto::decode_fence_failed(frame_of(*out[0].frame).body);
  ASSERT_TRUE(failed);
  EXPECT_EQ(failed->text, "rank 2 ended before joining fence 1");
  out.clear();
  fence(11, 1);  // a later arrival learns the same at once
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(type_of(out[0]), proto::Type::fence_failed);
}

TEST_F(ExchangeTest, BadHellosAreRefusedAndClosed) {
  hello(10, 5);              // rank beyond the job
  hello(11, 0, "0.1.0", 4);  // wrong size
  hello(12, 0);              // fine
  hello(13, 0);              // rank 0 again
  hello(14, 1, "0.2.0");     // another pier build
  ASSERT_EQ(out.size(), 5u);
  for (int i : {0, 1, 3, 4}) {
    EXPECT_EQ(type_of(out[i]), proto::Type::error) << i;
    EXPECT_TRUE(out[i].close_after) << i;
  }
  EXPECT_EQ(type_of(out[2]), proto::Type::welcome);
  auto err = proto::decode_error(frame_of(*out[4].frame).body);
  ASSERT_TRUE(err);
  EXPECT_EQ(err->why, proto::Refusal::version_mismatch);
  EXPECT_EQ(err->text, "rank 1 (pid 101) runs pier 0.2.0 but rank 0 runs pier 0.1.0");
}

TEST_F(ExchangeTest, ProtocolViolationsAreRefusedNotTrusted) {
  fence(10, 1);  // before any hello
  hello(11, 0);
  fence(11, 7);                                             // wrong epoch
  ex.on_frame(11, frame_of(proto::encode_welcome()), out);  // a server-only type
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(type_of(out[0]), proto::Type::error);
  EXPECT_EQ(type_of(out[1]), proto::Type::welcome);
  EXPECT_EQ(type_of(out[2]), proto::Type::error);
  EXPECT_EQ(type_of(out[3]), proto::Type::error);
  // A truncated commit body.
  proto::Frame bad = frame_of(proto::encode_commit({}));
  bad.body = {std::byte{5}};
  out.clear();
  ex.on_frame(11, bad, out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(type_of(out[0]), proto::Type::error);
}

}  // namespace
}  // namespace pier::run
