// tests/multiproc: the pier-run protocol codec (golden bytes, round trips,
// hostile input) and the client's version handshake against a fake launcher.
#include "boot/proto.hpp"
#include "boot/boot.hpp"
#include "boot/socket.hpp"

#include "base/config.hpp"

#include <gtest/gtest.h>

#include <unistd.h>

#include <thread>

namespace pier::boot {
namespace {

std::vector<std::byte> bytes(std::initializer_list<int> v) {
  std::vector<std::byte> out;
  for (int b : v) out.push_back(static_cast<std::byte>(b));
  return out;
}

TEST(BootProto, FenceFrameGoldenBytes) {
  EXPECT_EQ(proto::encode_fence(0x01020304),
            bytes({4, 0, 0, 0, proto::version, 5, 0, 0, 0x04, 0x03, 0x02, 0x01}));
}

TEST(BootProto, HelloRoundTrip) {
  proto::Hello in{3, 8, 4242, "0.1.0", "portals"};
  const auto frame = proto::encode_hello(in);
  proto::FrameReader reader;
  reader.append(frame);
  auto out = reader.next();
  ASSERT_TRUE(out && *out);
  EXPECT_EQ((*out)->header.type, proto::Type::hello);
  auto hello = proto::decode_hello((*out)->body);
  ASSERT_TRUE(hello);
  EXPECT_EQ(hello->rank, 3u);
  EXPECT_EQ(hello->size, 8u);
  EXPECT_EQ(hello->pid, 4242u);
  EXPECT_EQ(hello->library_version, "0.1.0");
  EXPECT_EQ(hello->session, "portals");
  EXPECT_TRUE(reader.empty());
}

TEST(BootProto, HelloWithASessionNameTooLongIsMalformed) {
  proto::Hello in{0, 1, 1, "0.1.0", std::string(proto::max_session + 1, 's')};
  proto::FrameReader reader;
  reader.append(proto::encode_hello(in));
  auto out = reader.next();
  ASSERT_TRUE(out && *out);
  EXPECT_EQ(proto::decode_hello((*out)->body).status(), Status::malformed);
}

TEST(BootProto, FenceDoneRoundTripAcrossSplitReads) {
  proto::FenceDone in{2, {{0, "shm.url", bytes({1, 2, 3})}, {1, "tcp.url", {}}}};
  const auto frame = proto::encode_fence_done(in);
  proto::FrameReader reader;
  // One byte at a time: the reader must wait for the whole frame.
  for (std::size_t i = 0; i + 1 < frame.size(); ++i) {
    reader.append(std::span(frame).subspan(i, 1));
    auto none = reader.next();
    ASSERT_TRUE(none);
    EXPECT_FALSE(*none);
  }
  reader.append(std::span(frame).last(1));
  auto out = reader.next();
  ASSERT_TRUE(out && *out);
  auto done = proto::decode_fence_done((*out)->body);
  ASSERT_TRUE(done);
  EXPECT_EQ(done->epoch, 2u);
  ASSERT_EQ(done->entries.size(), 2u);
  EXPECT_EQ(done->entries[0].key, "shm.url");
  EXPECT_EQ(done->entries[0].value, bytes({1, 2, 3}));
  EXPECT_EQ(done->entries[1].rank, 1u);
  EXPECT_TRUE(done->entries[1].value.empty());
}

TEST(BootProto, ErrorAndReportRoundTrip) {
  const auto err_frame = proto::encode_error(proto::Refusal::bad_hello, "no");
  auto err = proto::decode_error(std::span(err_frame).subspan(proto::header_size));
  ASSERT_TRUE(err);
  EXPECT_EQ(err->why, proto::Refusal::bad_hello);
  EXPECT_EQ(err->text, "no");
  const auto rep_frame = proto::encode_query_reply({4, {1, 5}, "waiting"});
  auto rep = proto::decode_query_reply(std::span(rep_frame).subspan(proto::header_size));
  ASSERT_TRUE(rep);
  EXPECT_EQ(rep->epoch, 4u);
  EXPECT_EQ(rep->ranks, (std::vector<std::uint32_t>{1, 5}));
  EXPECT_EQ(rep->text, "waiting");
}

TEST(BootProto, HostileInputIsRejectedNotTrusted) {
  // Truncated body, trailing bytes, a count far beyond the bytes present,
  // a value length beyond the limit, an empty key.
  EXPECT_EQ(proto::decode_fence(bytes({1, 2, 3})).status(), Status::malformed);
  EXPECT_EQ(proto::decode_fence(bytes({1, 2, 3, 4, 5})).status(), Status::malformed);
  EXPECT_EQ(proto::decode_commit(bytes({0xff, 0xff, 0xff, 0xff})).status(), Status::malformed);
  EXPECT_EQ(proto::decode_commit(bytes({1, 0, 0, 0, 1, 0, 'k', 0xff, 0xff, 0xff, 0x7f})).status(),
            Status::malformed);
  EXPECT_EQ(proto::decode_commit(bytes({1, 0, 0, 0, 0, 0, 0, 0, 0, 0})).status(),
            Status::malformed);
  EXPECT_EQ(proto::decode_error(bytes({9, 0, 0})).status(), Status::malformed);
  // More entries than one commit may carry, each of them well formed.
  std::vector<proto::Entry> many(proto::max_commit_entries + 1,
                                 proto::Entry{0, "k", {std::byte{1}}});
  const auto too_many = proto::encode_commit(many);
  EXPECT_EQ(proto::decode_commit(std::span(too_many).subspan(proto::header_size)).status(),
            Status::malformed);
  many.pop_back();
  const auto enough = proto::encode_commit(many);
  EXPECT_TRUE(proto::decode_commit(std::span(enough).subspan(proto::header_size)).has_value());
  // Header: non-zero reserved bytes, unknown type, oversized body.
  EXPECT_EQ(proto::decode_header(bytes({0, 0, 0, 0, proto::version, 5, 1, 0})).status(),
            Status::malformed);
  EXPECT_EQ(proto::decode_header(bytes({0, 0, 0, 0, proto::version, 99, 0, 0})).status(),
            Status::malformed);
  EXPECT_EQ(proto::decode_header(bytes({0, 0, 0, 0x7f, proto::version, 5, 0, 0})).status(),
            Status::malformed);
}

TEST(BootProto, ForeignVersionHeaderIsReportedNotParsed) {
  constexpr int other = proto::version + 1;
  auto h = proto::decode_header(bytes({0, 0, 0, 0, other, 0xee, 0xee, 0xee}));
  ASSERT_TRUE(h);
  EXPECT_EQ(h->version, other);
}

TEST(BootProto, FormatRanksCompactsRuns) {
  const std::vector<std::uint32_t> ranks{7, 1, 2, 3, 5, 9, 10};
  EXPECT_EQ(proto::format_ranks(ranks), "1-3, 5, 7, 9, 10");
  EXPECT_EQ(proto::format_ranks(std::vector<std::uint32_t>{}), "");
}

/// A launcher from another version: it answers every hello with a frame
/// whose version byte is not ours.
TEST(BootClient, LauncherOfAnotherVersionFailsFast) {
  const std::string name = "@pier-test-boot." + std::to_string(::getpid());
  auto address = parse_unix_address(name);
  ASSERT_TRUE(address);
  const int listener = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(listener, 0);
  ASSERT_EQ(::bind(listener, reinterpret_cast<const ::sockaddr*>(&address->addr), address->len), 0);
  ASSERT_EQ(::listen(listener, 4), 0);
  std::thread server([listener] {
    const int fd = ::accept(listener, nullptr, nullptr);
    if (fd < 0) return;
    std::byte hello[64];
    (void)::read(fd, hello, sizeof hello);
    const auto reply = bytes({0, 0, 0, 0, proto::version + 1, 2, 0, 0});
    (void)::write(fd, reply.data(), reply.size());
    ::close(fd);
  });
  config::ScopedSet socket("RUN_SOCKET", name);
  config::ScopedSet rank("RUN_RANK", "0");
  config::ScopedSet size("RUN_SIZE", "2");
  config::ScopedSet limit("BOOT_TIMEOUT", "10");
  auto boot = Bootstrap::open();
  server.join();
  ::close(listener);
  EXPECT_EQ(boot.status(), Status::version_mismatch);
}

TEST(BootClient, SingletonHonoursCommitAndFence) {
  config::ScopedSet method("BOOT_METHOD", "singleton");
  auto boot = Bootstrap::open();
  ASSERT_TRUE(boot);
  Bootstrap& b = **boot;
  EXPECT_EQ(b.rank(), 0u);
  EXPECT_EQ(b.size(), 1u);
  EXPECT_EQ(b.put("k", "v1"), Status::ok);
  EXPECT_EQ(b.get(0, "k").status(), Status::not_found);  // not committed, not fenced
  EXPECT_EQ(b.commit(), Status::ok);
  EXPECT_EQ(b.fence(Clock::now() + std::chrono::seconds(1)), Status::ok);
  auto v = b.get(0, "k");
  ASSERT_TRUE(v);
  EXPECT_EQ(v->size(), 2u);
  EXPECT_EQ(b.get(1, "k").status(), Status::invalid_argument);
  EXPECT_EQ(b.put("", "x"), Status::invalid_argument);
  EXPECT_EQ(b.put(std::string(300, 'k'), "x"), Status::invalid_argument);
}

TEST(BootClient, APutOfAStagedKeyReplacesItsValueAndTheStageEmptiesAtCommit) {
  config::ScopedSet method("BOOT_METHOD", "singleton");
  auto boot = Bootstrap::open();
  ASSERT_TRUE(boot);
  Bootstrap& b = **boot;
  const auto text = [&](std::string_view key) {
    auto v = b.get(0, key);
    return v ? std::string(reinterpret_cast<const char*>(v->data()), v->size()) : std::string();
  };
  EXPECT_EQ(b.put("a", "1"), Status::ok);
  EXPECT_EQ(b.put("b", "2"), Status::ok);
  EXPECT_EQ(b.put("a", "three"), Status::ok);
  EXPECT_EQ(b.commit(), Status::ok);
  EXPECT_EQ(b.fence(Clock::now() + std::chrono::seconds(1)), Status::ok);
  EXPECT_EQ(text("a"), "three");
  EXPECT_EQ(text("b"), "2");
  // After the commit a put of the same key stages it anew.
  EXPECT_EQ(b.put("a", "4"), Status::ok);
  EXPECT_EQ(b.commit(), Status::ok);
  EXPECT_EQ(b.fence(Clock::now() + std::chrono::seconds(1)), Status::ok);
  EXPECT_EQ(text("a"), "4");
  EXPECT_EQ(text("b"), "2");
}

}  // namespace
}  // namespace pier::boot
