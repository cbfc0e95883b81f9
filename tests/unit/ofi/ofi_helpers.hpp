// pier ofi tests: contexts and connected instance pairs over one provider,
// with a deadline on every wait.
#pragma once

#include <gtest/gtest.h>
#include <pier/driver.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace pier::drivers::ofi::test {

using driver::Clock;
using driver::Instance;
using driver::Packet;
using driver::Track;

inline driver::Deadline soon() {
  return Clock::now() + std::chrono::seconds(20);
}

struct Node {
  std::unique_ptr<driver::Context> ctx;
  driver::Properties props;
  std::vector<std::byte> url;
};

/// ok, unsupported when the provider is missing here (the test skips), or
/// the failure.
inline Status make_node(const std::string& provider, Node& n, const driver::Hints& hints = {}) {
  auto ctx = driver::make_context("ofi:" + provider);
  if (!ctx) return ctx.status();
  n.ctx = std::move(*ctx);
  if (!n.ctx->unavailable_reason().empty()) return Status::unsupported;
  auto props = n.ctx->properties(hints);
  if (!props) return props.status();
  n.props = *props;
  auto url = n.ctx->init();
  if (!url) return url.status();
  n.url = std::move(*url);
  return Status::ok;
}

struct Link {
  std::unique_ptr<Instance> a, b;
};

inline Status connect(Node& x, Node& y, Track track, Link& l) {
  auto a = x.ctx->open_instance(track);
  auto b = y.ctx->open_instance(track);
  if (!a || !b) return Status::internal;
  l.a = std::move(*a);
  l.b = std::move(*b);
  if (Status s = l.a->connect_async(y.url); !is_success(s)) return s;
  if (Status s = l.b->connect_async(x.url); !is_success(s)) return s;
  const auto deadline = soon();
  bool a_ok = false, b_ok = false;
  while (!(a_ok && b_ok)) {
    if (Clock::now() > deadline) return Status::timeout;
    const auto slice = Clock::now() + std::chrono::milliseconds(5);
    if (!a_ok) {
      const Status s = l.a->connect_wait(slice);
      if (s == Status::ok)
        a_ok = true;
      else if (s != Status::timeout && s != Status::in_progress)
        return s;
    }
    if (!b_ok) {
      const Status s = l.b->connect_wait(slice);
      if (s == Status::ok)
        b_ok = true;
      else if (s != Status::timeout && s != Status::in_progress)
        return s;
    }
  }
  return Status::ok;
}

/// Polls both packets until both are final; in-process peers need both polled.
inline Status finish(Instance& tx, Packet& s, Status* ss, Instance& rx, Packet& r, Status* rs) {
  const auto deadline = soon();
  while (*ss == Status::in_progress || *rs == Status::in_progress) {
    if (Clock::now() > deadline) return Status::timeout;
    if (*ss == Status::in_progress) *ss = tx.send_poll(s);
    if (*rs == Status::in_progress) *rs = rx.recv_poll(r);
  }
  return Status::ok;
}

inline void fill(std::span<std::byte> b, unsigned seed) {
  for (std::size_t i = 0; i < b.size(); ++i)
    b[i] = static_cast<std::byte>((i * 31 + seed * 7 + (i >> 8)) & 0xff);
}
inline bool same(std::span<const std::byte> b, unsigned seed) {
  for (std::size_t i = 0; i < b.size(); ++i)
    if (b[i] != static_cast<std::byte>((i * 31 + seed * 7 + (i >> 8)) & 0xff)) return false;
  return true;
}

/// The providers the tests run over; each skips where libfabric lacks it.
inline std::vector<std::string> providers() {
  return {"tcp", "shm"};
}

}  // namespace pier::drivers::ofi::test
