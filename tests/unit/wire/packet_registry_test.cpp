// The registry and stream parser: dispatch by type and subtype, partial
// consumption with continuations, fragmentation invariance, and rejection of
// hostile streams without asserting.
#include "wire/packet_registry.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace pier::wire {
namespace {

using Bytes = std::vector<std::byte>;

// A driver's own subtypes, defined outside src/wire as a driver would.
enum class ToyLocal : std::uint16_t { hello = 0, blob = 1, chunked = 2, count = 3 };

/// Records every handler call and every completed body, as text, so two runs
/// can be compared exactly.
struct Recorder {
  std::vector<std::string> events;
  Bytes sink;                   // where continuations write
  std::size_t second_dest = 0;  // chunked: size of the second stage
  std::size_t sink_base = 0;
};

std::string hex(std::span<const std::byte> b) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (std::byte x : b) {
    s += digits[static_cast<unsigned>(x) >> 4];
    s += digits[static_cast<unsigned>(x) & 15];
  }
  return s;
}

std::string describe(const Incoming& in) {
  return "type=" + std::to_string(static_cast<int>(in.frame.type)) +
         " sub=" + std::to_string(in.subtype) + " len=" + std::to_string(in.body_length) +
         " seq=" + std::to_string(in.frame.sequence) + " head=" + hex(in.head);
}

Status record_done(void* ctx, Continuation&) noexcept {
  auto* r = static_cast<Recorder*>(ctx);
  r->events.push_back("done body=" + hex(std::span(r->sink).subspan(r->sink_base)));
  return Status::ok;
}

/// Consumes the head; any rest goes to the sink in one piece.
Status whole(void* ctx, const Incoming& in, Continuation& rest) noexcept {
  auto* r = static_cast<Recorder*>(ctx);
  r->events.push_back(describe(in));
  rest.consumed = in.head.size();
  const std::size_t left = in.body_length - in.head.size();
  if (left > 0) {
    r->sink_base = r->sink.size();
    r->sink.resize(r->sink.size() + left);  // test-side allocation only
    rest.dest = std::span(r->sink).subspan(r->sink_base);
    rest.on_done = record_done;
    rest.ctx = r;
  }
  return Status::ok;
}

Status second_stage(void* ctx, Continuation& next) noexcept {
  auto* r = static_cast<Recorder*>(ctx);
  const std::size_t first = r->sink.size() - r->second_dest - r->sink_base;
  r->events.push_back("stage1 body=" + hex(std::span(r->sink).subspan(r->sink_base, first)));
  r->sink_base = r->sink.size() - r->second_dest;
  next.dest = std::span(r->sink).subspan(r->sink_base);
  next.on_done = record_done;
  next.ctx = r;
  return Status::ok;
}

/// Consumes only 4 head bytes (a little length field, like CH3's bar), then
/// takes the rest in two stages: the CH3 iov reloaded by OnDataAvail.
Status chunked(void* ctx, const Incoming& in, Continuation& rest) noexcept {
  auto* r = static_cast<Recorder*>(ctx);
  r->events.push_back(describe(in));
  if (in.body_length < 8) return Status::malformed;
  rest.consumed = 4;
  const std::size_t left = in.body_length - 4;
  const std::size_t first = left / 2;
  r->second_dest = left - first;
  r->sink.resize(r->sink.size() + left);
  r->sink_base = r->sink.size() - left;
  rest.dest = std::span(r->sink).subspan(r->sink_base, first);
  rest.on_done = second_stage;
  rest.ctx = r;
  return Status::ok;
}

/// Reads nothing and drops the packet (a truncating receive).
Status drop(void* ctx, const Incoming& in, Continuation& rest) noexcept {
  static_cast<Recorder*>(ctx)->events.push_back("drop " + describe(in));
  rest.discard = true;
  return Status::ok;
}

struct Tables {
  CoreHandlers core;
  HandlerTable local{static_cast<std::uint16_t>(ToyLocal::count)};
  explicit Tables(Recorder& r) {
    for (PacketType t :
         {PacketType::eager, PacketType::rts, PacketType::rtr, PacketType::ack, PacketType::credit})
      EXPECT_EQ(core.register_handler(t, {whole, &r}), Status::ok);
    EXPECT_EQ(core.register_handler(PacketType::data, {drop, &r}), Status::ok);
    EXPECT_EQ(local.register_handler(static_cast<std::uint16_t>(ToyLocal::hello), {whole, &r}),
              Status::ok);
    EXPECT_EQ(local.register_handler(static_cast<std::uint16_t>(ToyLocal::blob), {whole, &r}),
              Status::ok);
    EXPECT_EQ(local.register_handler(static_cast<std::uint16_t>(ToyLocal::chunked), {chunked, &r}),
              Status::ok);
  }
};

void append_frame(Bytes& out, FrameHeader f) {
  const std::size_t at = out.size();
  out.resize(at + FrameHeader::size);
  ASSERT_TRUE(encode(f, std::span(out).subspan(at)).has_value());
}

void append_random_body(Bytes& out, std::size_t n, std::mt19937& rng) {
  for (std::size_t i = 0; i < n; ++i) out.push_back(static_cast<std::byte>(rng()));
}

/// A stream of `count` random packets of every kind, some larger than the
/// parser's head capacity.
Bytes random_stream(std::mt19937& rng, int count) {
  Bytes out;
  for (int i = 0; i < count; ++i) {
    FrameHeader f;
    f.sequence = static_cast<std::uint32_t>(i);
    f.priority = static_cast<std::uint8_t>(rng() % 2);
    switch (rng() % 7) {
      case 0:
        f.type = PacketType::eager;
        f.payload_length = static_cast<std::uint32_t>(rng() % 900);
        break;
      case 1:
        f.type = PacketType::rts;
        f.payload_length = static_cast<std::uint32_t>(RtsHeader::size + rng() % 100);
        break;
      case 2:
        f.type = PacketType::rtr;
        f.payload_length = RtrHeader::size;
        break;
      case 3:
        f.type = PacketType::credit;
        f.credit_return = 3;
        break;
      case 4:
        f.type = PacketType::data;
        f.payload_length = static_cast<std::uint32_t>(DataHeader::size + rng() % 700);
        break;
      default: {
        const auto sub = static_cast<std::uint16_t>(rng() % 3);
        const auto body = static_cast<std::uint32_t>(8 + rng() % 800);
        const std::size_t at = out.size();
        out.resize(at + driver_local_prefix);
        EXPECT_TRUE(encode_driver_local(sub, body, std::span(out).subspan(at)).has_value());
        append_random_body(out, body, rng);
        continue;
      }
    }
    append_frame(out, f);
    append_random_body(out, f.payload_length, rng);
  }
  return out;
}

std::vector<std::string> run(const Bytes& stream, std::mt19937* split, std::size_t max_frag) {
  Recorder r;
  Tables t(r);
  StreamParser parser(t.core, &t.local, 256);
  std::size_t at = 0;
  while (at < stream.size()) {
    std::size_t n = stream.size() - at;
    if (split != nullptr) n = std::min(n, 1 + (*split)() % max_frag);
    EXPECT_EQ(parser.feed(std::span(stream).subspan(at, n)), Status::ok);
    at += n;
  }
  EXPECT_TRUE(parser.at_boundary());
  return r.events;
}

TEST(StreamParser, AnyFragmentationGivesTheSameHandlerCalls) {
  for (std::uint32_t seed = 1; seed <= 200; ++seed) {
    std::mt19937 rng(seed);
    const Bytes stream = random_stream(rng, 40);
    const std::vector<std::string> whole_run = run(stream, nullptr, 0);
    ASSERT_GE(whole_run.size(), 40u) << "seed " << seed;
    const std::size_t max_frag = 1 + rng() % 1200;
    std::mt19937 split(seed * 7919u);
    EXPECT_EQ(run(stream, &split, max_frag), whole_run) << "seed " << seed;
    std::mt19937 bytewise(seed);
    EXPECT_EQ(run(stream, &bytewise, 1), whole_run) << "seed " << seed;
  }
}

TEST(StreamParser, LargeEagerBodyArrivesThroughTheContinuation) {
  std::mt19937 rng(5);
  Bytes stream;
  FrameHeader f;
  f.payload_length = 1000;
  append_frame(stream, f);
  append_random_body(stream, 1000, rng);
  Recorder r;
  Tables t(r);
  StreamParser parser(t.core, &t.local, 0);
  EXPECT_EQ(parser.head_capacity(), StreamParser::min_head_capacity);
  EXPECT_EQ(parser.feed(stream), Status::ok);
  ASSERT_EQ(r.events.size(), 2u);
  const auto body = std::span(stream).subspan(FrameHeader::size);
  EXPECT_EQ(r.events[0], describe(Incoming{f, 0, 1000, body.first(256), nullptr}));
  EXPECT_EQ(r.events[1], "done body=" + hex(body.subspan(256)));
}

TEST(StreamParser, ChunkedHandlerSeesEveryByteOnce) {
  std::mt19937 rng(9);
  Bytes stream(driver_local_prefix);
  ASSERT_TRUE(encode_driver_local(2, 600, stream).has_value());
  append_random_body(stream, 600, rng);
  Recorder r;
  Tables t(r);
  StreamParser parser(t.core, &t.local, 256);
  EXPECT_EQ(parser.feed_packet(stream), Status::ok);
  ASSERT_EQ(r.events.size(), 3u);
  const auto body = std::span(stream).subspan(driver_local_prefix);
  EXPECT_EQ(r.events[1], "stage1 body=" + hex(body.subspan(4, 298)));
  EXPECT_EQ(r.events[2], "done body=" + hex(body.subspan(302)));
}

TEST(StreamParser, SourceIsHandedToHandlers) {
  int gate = 0;
  void* seen = nullptr;
  CoreHandlers core;
  ASSERT_EQ(core.register_handler(PacketType::credit,
                                  {[](void* ctx, const Incoming& in, Continuation&) noexcept {
                                     *static_cast<void**>(ctx) = in.source;
                                     return Status::ok;
                                   },
                                   &seen}),
            Status::ok);
  StreamParser parser(core, nullptr, 256, &gate);
  Bytes b;
  append_frame(b, FrameHeader{.type = PacketType::credit});
  EXPECT_EQ(parser.feed(b), Status::ok);
  EXPECT_EQ(seen, &gate);
}

// ---- rejection --------------------------------------------------------------

Status feed_all(const Bytes& stream, const HandlerTable* local = nullptr) {
  Recorder r;
  Tables t(r);
  StreamParser parser(t.core, local != nullptr ? local : &t.local, 256);
  return parser.feed(stream);
}

TEST(StreamParser, UnknownTypeStopsTheParser) {
  Bytes b;
  append_frame(b, FrameHeader{});
  b[1] = std::byte{0x03};
  EXPECT_EQ(feed_all(b), Status::malformed);
}

TEST(StreamParser, SubtypeWithoutHandlerIsMalformed) {
  Bytes b(driver_local_prefix + 8);
  ASSERT_TRUE(encode_driver_local(7, 8, b).has_value());
  EXPECT_EQ(feed_all(b), Status::malformed);
  HandlerTable empty(4);
  ASSERT_TRUE(encode_driver_local(1, 8, b).has_value());
  EXPECT_EQ(feed_all(b, &empty), Status::malformed);
  CoreHandlers core;
  StreamParser no_table(core, nullptr, 256);
  EXPECT_EQ(no_table.feed(b), Status::malformed);
}

TEST(StreamParser, CoreTypeWithoutHandlerIsMalformed) {
  CoreHandlers core;
  StreamParser parser(core, nullptr, 256);
  Bytes b;
  append_frame(b, FrameHeader{.type = PacketType::credit});
  EXPECT_EQ(parser.feed(b), Status::malformed);
}

TEST(StreamParser, WrapperLengthMustMatchTheFrame) {
  Bytes b(driver_local_prefix + 8);
  ASSERT_TRUE(encode_driver_local(0, 8, b).has_value());
  b[FrameHeader::size + 4] = std::byte{9};  // wrapper says 9, frame holds 8
  EXPECT_EQ(feed_all(b), Status::malformed);
}

TEST(StreamParser, ForeignVersionIsNamedFromTheFirstByte) {
  Recorder r;
  Tables t(r);
  StreamParser parser(t.core, &t.local, 256);
  const Bytes one{std::byte{1}};
  EXPECT_EQ(parser.feed(one), Status::version_mismatch);
  Bytes good;
  append_frame(good, FrameHeader{.type = PacketType::credit});
  EXPECT_EQ(parser.feed(good), Status::version_mismatch) << "a stopped parser stays stopped";
  EXPECT_EQ(parser.status(), Status::version_mismatch);
  EXPECT_TRUE(r.events.empty());
}

TEST(StreamParser, HandlerFailureStopsTheParser) {
  CoreHandlers core;
  ASSERT_EQ(core.register_handler(
                PacketType::eager,
                {[](void*, const Incoming&, Continuation&) noexcept { return Status::rejected; },
                 nullptr}),
            Status::ok);
  StreamParser parser(core, nullptr, 256);
  Bytes b;
  append_frame(b, FrameHeader{});
  EXPECT_EQ(parser.feed(b), Status::rejected);
  EXPECT_EQ(parser.feed(b), Status::rejected);
}

/// A handler that fills `rest` with whatever the test put in `Bad`.
struct Bad {
  Continuation answer;
};
Status answer_bad(void* ctx, const Incoming&, Continuation& rest) noexcept {
  rest = static_cast<Bad*>(ctx)->answer;
  return Status::ok;
}

Status feed_with(Bad& bad, std::uint32_t body) {
  CoreHandlers core;
  EXPECT_EQ(core.register_handler(PacketType::eager, {answer_bad, &bad}), Status::ok);
  StreamParser parser(core, nullptr, 256);
  Bytes b;
  append_frame(b, FrameHeader{.payload_length = body});
  b.resize(b.size() + body);
  return parser.feed(b);
}

TEST(StreamParser, ContinuationMistakesAreReported) {
  Bytes room(64);
  auto make = [](std::size_t consumed, std::span<std::byte> dest, bool discard) {
    Bad b;
    b.answer.consumed = consumed;
    b.answer.dest = dest;
    b.answer.discard = discard;
    return b;
  };
  Bad over_consumed = make(11, {}, false);
  EXPECT_EQ(feed_with(over_consumed, 10), Status::internal);
  Bad no_room = make(4, {}, false);
  EXPECT_EQ(feed_with(no_room, 10), Status::internal);
  Bad too_big = make(0, room, false);
  EXPECT_EQ(feed_with(too_big, 10), Status::malformed);
  Bad unfinished = make(0, std::span(room).first(5), false);
  EXPECT_EQ(feed_with(unfinished, 10), Status::internal);
  Bad both = make(0, std::span(room).first(5), true);
  EXPECT_EQ(feed_with(both, 10), Status::internal);
  Bad fine = make(0, std::span(room).first(10), false);
  EXPECT_EQ(feed_with(fine, 10), Status::ok);
}

TEST(StreamParser, FeedPacketRejectsPartialPackets) {
  Recorder r;
  Tables t(r);
  StreamParser parser(t.core, &t.local, 256);
  Bytes b;
  append_frame(b, FrameHeader{.payload_length = 10});
  b.resize(b.size() + 9);
  EXPECT_EQ(parser.feed_packet(b), Status::malformed);
}

// ---- tables -----------------------------------------------------------------

TEST(HandlerTable, RegistrationIsCheckedAndLookupIsBounded) {
  Recorder r;
  HandlerTable table(2);
  EXPECT_EQ(table.slots(), 2);
  EXPECT_EQ(table.register_handler(2, {whole, &r}), Status::invalid_argument);
  EXPECT_EQ(table.register_handler(0, {}), Status::invalid_argument);
  EXPECT_EQ(table.register_handler(1, {whole, &r}), Status::ok);
  EXPECT_EQ(table.register_handler(1, {drop, &r}), Status::in_use);
  EXPECT_EQ(table.find(0), nullptr);
  EXPECT_EQ(table.find(65535), nullptr);
  ASSERT_NE(table.find(1), nullptr);
  EXPECT_EQ(table.find(1)->fn, &whole);
}

TEST(CoreHandlers, DriverLocalAndBadTypesAreRefused) {
  Recorder r;
  CoreHandlers core;
  EXPECT_EQ(core.register_handler(PacketType::driver_local, {whole, &r}), Status::invalid_argument);
  EXPECT_EQ(core.register_handler(static_cast<PacketType>(0x03), {whole, &r}),
            Status::invalid_argument);
  EXPECT_EQ(core.register_handler(static_cast<PacketType>(0xff), {whole, &r}),
            Status::invalid_argument);
  EXPECT_EQ(core.find(static_cast<PacketType>(0xff)), nullptr);
  EXPECT_EQ(core.register_handler(PacketType::ack, {whole, &r}), Status::ok);
  EXPECT_EQ(core.register_handler(PacketType::ack, {whole, &r}), Status::in_use);
}

}  // namespace
}  // namespace pier::wire
