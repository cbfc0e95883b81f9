// bench/through.hpp: the core used bare by a benchmark, to split a layer's
// own cost from the core's (core_bench, port_bench). A Sink client answers
// every arrival in lib_parse with recv() into one region; sends come from
// another region.
//   core latency    8-byte ping-pong: Core::send, then progress until the
//                   answer was parsed;
//   core bandwidth  messages of one size sent at once (the core's protocols
//                   pick eager or rendezvous), then an 8-byte answer.
#pragma once

#include "bare.hpp"
#include "core/core.hpp"

namespace pier::bench {

class Sink final : public core::Client {
 public:
  explicit Sink(core::Core& c) : core_(c) {}
  void lib_parse(const core::Arrival& a) noexcept override {
    const std::size_t offset = static_cast<std::size_t>(parsed % rotate) * stride;
    (void)core_.recv(a.handle, this, &region, offset, static_cast<std::size_t>(a.length),
                     static_cast<std::size_t>(a.length));
    ++parsed;
  }
  void lib_finalize(void*, Status s) noexcept override {
    if (s != Status::ok) die("finalize", s);
    ++finalized;
  }
  core::Region region;
  long parsed = 0, finalized = 0;
  /// Arrival k lands at offset (k % rotate) * stride of the region.
  long rotate = 1;
  std::size_t stride = 0;

 private:
  core::Core& core_;
};

struct Through {
  std::unique_ptr<core::Core> c;
  std::unique_ptr<Sink> sink;
  std::vector<std::byte> inbox, outbox;
  core::Region out_region;

  /// A core of two ranks; `largest` bounds the messages, which land in turn
  /// in `buffers` parts of the inbox (the footprint of a receiver that keeps
  /// that many buffers).
  void setup(const Pipe& p, int rank, std::size_t largest, int buffers = 1) {
    inbox.resize(largest * static_cast<std::size_t>(buffers));
    outbox.resize(largest);
    auto made = core::Core::create(static_cast<core::Rank>(rank), 2);
    if (!made) die("core create", made.status());
    c = std::move(*made);
    std::vector<std::vector<std::byte>> all(2);
    all[static_cast<std::size_t>(rank)] = c->address();
    all[static_cast<std::size_t>(1 - rank)] = p.exchange(c->address());
    check(c->connect(all), "core connect");
    sink = std::make_unique<Sink>(*c);
    check(c->attach(wire::Upper::port, sink.get(), 0), "attach");
    auto in = c->validate(inbox.data(), inbox.size());
    auto out = c->validate(outbox.data(), outbox.size());
    if (!in || !out) die("validate");
    sink->region = *in;
    sink->rotate = buffers;
    sink->stride = largest;
    out_region = *out;
  }
  void send(int rank, std::size_t n) {
    core::SendArgs a;
    a.cookie = this;
    a.peer = static_cast<core::Rank>(1 - rank);
    a.upper = wire::Upper::port;
    a.region = &out_region;
    a.length = n;
    Status s;
    while ((s = c->send(a)) == Status::no_resource) (void)c->progress();
    check(s, "core send");
  }
  void wait_parsed(long n) {
    while (sink->parsed < n) (void)c->progress();
  }
};

/// One-way latency in us of `iters` 8-byte round trips.
// Not inlined: callgrind can count it alone (--toggle-collect).
[[gnu::noinline]] inline double core_latency(Through& t, int rank, long iters) {
  long base = t.sink->parsed;
  auto t0 = Clock::now();
  for (long i = 1; i <= iters; ++i) {
    if (rank == 0) {
      t.send(rank, 8);
      t.wait_parsed(base + i);
    } else {
      t.wait_parsed(base + i);
      t.send(rank, 8);
    }
  }
  return since(t0) / static_cast<double>(iters) / 2 * 1e6;
}

/// MB/s of `total` bytes in messages of `size` bytes, rank 0 to 1.
inline double core_bandwidth(Through& t, int rank, std::size_t size, std::size_t total) {
  const long count = static_cast<long>(std::max<std::size_t>(1, total / size));
  long base = t.sink->parsed;
  auto t0 = Clock::now();
  if (rank == 0) {
    for (long k = 0; k < count; ++k) t.send(rank, size);
    t.wait_parsed(base + 1);  // the answer
  } else {
    long fin = t.sink->finalized;
    while (t.sink->finalized < fin + count) (void)t.c->progress();
    t.send(rank, 8);
  }
  // Our own completions drained, so the next round starts idle.
  while (t.c->pending() != 0) (void)t.c->progress();
  return static_cast<double>(count) * static_cast<double>(size) / since(t0) / 1e6;
}

}  // namespace pier::bench
