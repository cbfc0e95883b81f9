// Helpers for the tcp driver's tests: contexts, connected pairs, deadlines.
#pragma once

#include "drivers/tcp/codec.hpp"
#include "drivers/tcp/tcp.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <vector>

namespace pier::drivers::tcp::test {

using driver::Clock;
using driver::Packet;
using driver::Track;

inline driver::Deadline soon(int ms = 10000) {
  return Clock::now() + std::chrono::milliseconds(ms);
}

struct Node {
  std::unique_ptr<driver::Context> ctx;
  driver::Properties props;
  std::vector<std::byte> url;
};

/// A context brought up to init(); ctx is null on failure.
inline Node make_node() {
  Node n;
  auto made = entry().make("");
  if (!made) return n;
  n.ctx = std::move(*made);
  auto props = n.ctx->properties(driver::Hints{});
  if (!props) return Node{};
  n.props = *props;
  auto url = n.ctx->init();
  if (!url) return Node{};
  n.url = *url;
  return n;
}

/// Both ends of one track between two contexts of this process.
struct Pair {
  std::unique_ptr<driver::Instance> a;
  std::unique_ptr<driver::Instance> b;
};

inline Pair connect_pair(Node& x, Node& y, Track track = Track::small) {
  Pair p;
  auto a = x.ctx->open_instance(track);
  auto b = y.ctx->open_instance(track);
  if (!a || !b) return Pair{};
  p.a = std::move(*a);
  p.b = std::move(*b);
  if (!is_success(p.a->connect_async(y.url)) || !is_success(p.b->connect_async(x.url)))
    return Pair{};
  // Either order must work: the acceptor's wait needs nothing from the
  // connector after its connect_async().
  if (p.b->connect_wait(soon()) != Status::ok || p.a->connect_wait(soon()) != Status::ok)
    return Pair{};
  return p;
}

/// A packet over one contiguous buffer.
struct Buf {
  std::vector<std::byte> bytes;
  ::iovec iov{};
  Packet pkt;
  explicit Buf(std::size_t n, int fill = -1) : bytes(n) {
    for (std::size_t i = 0; i < n; ++i)
      bytes[i] = static_cast<std::byte>(fill >= 0 ? fill : static_cast<int>((i * 131 + 7) & 0xff));
    iov = ::iovec{bytes.data(), n};
    pkt.set_iovec(&iov, 1);
  }
};

/// Polls a send and a receive (either may be null) until both complete.
inline void drive(driver::Instance* s, Packet* sp, driver::Instance* r, Packet* rp,
                  Status* send_status, Status* recv_status, int ms = 20000) {
  const auto deadline = soon(ms);
  Status ss = sp ? Status::in_progress : Status::ok;
  Status rs = rp ? Status::in_progress : Status::ok;
  while ((ss == Status::in_progress || rs == Status::in_progress) && Clock::now() < deadline) {
    if (ss == Status::in_progress) ss = s->send_poll(*sp);
    if (rs == Status::in_progress) rs = r->recv_poll(*rp);
  }
  if (ss == Status::in_progress) ss = Status::timeout;
  if (rs == Status::in_progress) rs = Status::timeout;
  *send_status = ss;
  *recv_status = rs;
}

}  // namespace pier::drivers::tcp::test
