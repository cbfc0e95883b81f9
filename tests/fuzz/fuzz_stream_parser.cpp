// libFuzzer target: the StreamParser on a hostile byte stream. The first two
// input bytes pick the head capacity and the fragmentation; the rest is the
// stream. The stream is parsed twice, whole and in fragments, and the two
// runs must make the same handler calls, fill the same bytes and end with the
// same status: fragmentation invariance under arbitrary input.
#include "wire/wire.hpp"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

namespace {

using namespace pier;
using namespace pier::wire;

/// Folds every handler call and delivered byte into a hash; no allocation.
struct Trace {
  std::uint64_t hash = 1469598103934665603ull;
  std::uint64_t calls = 0;
  std::byte sink[4096];
  std::size_t stage_two = 0;
  std::size_t filling = 0;  // bytes of sink the current continuation fills

  void mix(const void* p, std::size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (std::size_t i = 0; i < n; ++i) hash = (hash ^ b[i]) * 1099511628211ull;
  }
  template <class T>
  void mix_value(T v) {
    mix(&v, sizeof v);
  }
  void mix_incoming(const Incoming& in) {
    ++calls;
    mix_value(static_cast<std::uint8_t>(in.frame.type));
    mix_value(in.frame.sequence);
    mix_value(in.subtype);
    mix_value(in.body_length);
    mix_value(in.head.size());
    mix(in.head.data(), in.head.size());
  }
};

Status on_done(void* ctx, Continuation& next) noexcept {
  auto* t = static_cast<Trace*>(ctx);
  ++t->calls;
  t->mix(t->sink, t->filling);
  if (t->stage_two > 0) {
    t->filling = t->stage_two;
    // A second stage, like CH3's OnDataAvail reloading the iov.
    next.dest = std::span<std::byte>(t->sink, t->stage_two);
    next.on_done = on_done;
    next.ctx = t;
    t->stage_two = 0;
  }
  return Status::ok;
}

/// Consumes a few head bytes (chosen by the data), then sends at most two
/// sink-fulls to continuations and discards anything bigger.
Status handle(void* ctx, const Incoming& in, Continuation& rest) noexcept {
  auto* t = static_cast<Trace*>(ctx);
  t->mix_incoming(in);
  if (!in.head.empty() && in.head[0] == std::byte{0xee}) return Status::rejected;
  rest.consumed = in.head.size() >= 3 ? static_cast<std::size_t>(in.head[1]) % in.head.size() : 0;
  const std::uint64_t left = in.body_length - rest.consumed;
  if (left == 0) return Status::ok;
  if (left > 2 * sizeof t->sink) {
    rest.discard = true;
    return Status::ok;
  }
  const std::size_t first = static_cast<std::size_t>(left > sizeof t->sink ? sizeof t->sink : left);
  t->filling = first;
  t->stage_two = static_cast<std::size_t>(left - first);
  rest.dest = std::span<std::byte>(t->sink, first);
  rest.on_done = on_done;
  rest.ctx = t;
  return Status::ok;
}

struct Run {
  Status status;
  std::uint64_t hash;
  std::uint64_t calls;
  bool at_boundary;
};

Run parse(std::span<const std::byte> stream, std::size_t head_capacity, std::uint8_t frag) {
  Trace trace;
  CoreHandlers core;
  HandlerTable local(4);
  for (PacketType t : {PacketType::data, PacketType::eager, PacketType::rts, PacketType::rtr,
                       PacketType::ack, PacketType::credit})
    if (core.register_handler(t, {handle, &trace}) != Status::ok) __builtin_trap();
  for (std::uint16_t s = 0; s < 3; ++s)
    if (local.register_handler(s, {handle, &trace}) != Status::ok) __builtin_trap();
  StreamParser parser(core, &local, head_capacity);
  Status st = Status::ok;
  std::size_t at = 0;
  std::uint32_t x = frag;
  while (at < stream.size()) {
    std::size_t n = stream.size() - at;
    if (frag != 0) {
      x = x * 1103515245u + 12345u;  // deterministic fragment sizes from the input
      n = std::min<std::size_t>(n, 1 + (x >> 16) % (frag * 4u));
    }
    st = parser.feed(stream.subspan(at, n));
    if (st != Status::ok) break;
    at += n;
  }
  if (st != parser.status()) __builtin_trap();
  return Run{st, trace.hash, trace.calls, parser.at_boundary()};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  const std::size_t head_capacity = static_cast<std::size_t>(data[0]) * 4;
  const std::uint8_t frag = static_cast<std::uint8_t>(data[1] | 1);
  const std::span<const std::byte> stream(reinterpret_cast<const std::byte*>(data + 2), size - 2);
  const Run whole = parse(stream, head_capacity, 0);
  const Run pieces = parse(stream, head_capacity, frag);
  if (whole.status != pieces.status || whole.hash != pieces.hash || whole.calls != pieces.calls ||
      whole.at_boundary != pieces.at_boundary)
    __builtin_trap();
  const Status s = whole.status;
  if (s != Status::ok && s != Status::malformed && s != Status::version_mismatch &&
      s != Status::rejected)
    __builtin_trap();  // internal would mean the parser broke its own contract
  return 0;
}
