// tests/unit/shm: helpers shared by the shm driver tests.
#pragma once

#include "drivers/shm/shm.hpp"

#include <pier/driver.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <vector>

namespace pier::drivers::shm::test {

using driver::Clock;
using driver::Context;
using driver::Deadline;
using driver::Instance;
using driver::Packet;
using driver::Track;

inline Deadline after_ms(int ms) {
  return Clock::now() + std::chrono::milliseconds(ms);
}

struct Side {
  std::unique_ptr<Context> ctx;
  std::vector<std::byte> url;
  driver::Caps caps;
};

inline Side make_side() {
  Side s;
  Result<std::unique_ptr<Context>> ctx = entry().make("");
  EXPECT_TRUE(ctx.has_value());
  if (!ctx) return s;
  s.ctx = std::move(*ctx);
  Result<driver::Properties> props = s.ctx->properties(driver::Hints{});
  EXPECT_TRUE(props.has_value());
  if (props) s.caps = props->caps;
  Result<std::vector<std::byte>> url = s.ctx->init();
  EXPECT_TRUE(url.has_value());
  if (url) s.url = *url;
  return s;
}

inline std::unique_ptr<Instance> open(Side& s, Track t) {
  Result<std::unique_ptr<Instance>> inst = s.ctx->open_instance(t);
  EXPECT_TRUE(inst.has_value());
  return inst ? std::move(*inst) : nullptr;
}

/// Connects a (of side A) to B and b (of side B) to A, driving both ends
/// from this thread. ok or the first failure.
inline Status connect_pair(Instance& a, const Side& sa, Instance& b, const Side& sb) {
  Status st = a.connect_async(sb.url);
  if (st != Status::in_progress && st != Status::ok) return st;
  st = b.connect_async(sa.url);
  if (st != Status::in_progress && st != Status::ok) return st;
  const Deadline end = after_ms(10000);
  Status ra = Status::in_progress;
  Status rb = Status::in_progress;
  while (Clock::now() < end) {
    if (ra != Status::ok) ra = a.connect_wait(after_ms(5));
    if (rb != Status::ok) rb = b.connect_wait(after_ms(5));
    if (ra == Status::ok && rb == Status::ok) return Status::ok;
    if (ra != Status::ok && ra != Status::timeout && ra != Status::in_progress) return ra;
    if (rb != Status::ok && rb != Status::timeout && rb != Status::in_progress) return rb;
  }
  return Status::timeout;
}

inline std::vector<std::byte> pattern(std::size_t n, unsigned seed) {
  std::vector<std::byte> v(n);
  std::uint32_t x = seed * 2654435761u + 1;
  for (auto& b : v) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<std::byte>(x >> 24);
  }
  return v;
}

/// Posts a one-iovec send and waits for its completion.
inline Status send_bytes(Instance& inst, const std::vector<std::byte>& data, Packet& pkt,
                         ::iovec& iov) {
  iov = {const_cast<std::byte*>(data.data()), data.size()};
  pkt = Packet{};
  pkt.set_iovec(&iov, 1);
  Status st = inst.send_post(pkt);
  if (st != Status::in_progress) return st;
  st = inst.send_poll(pkt);
  if (st != Status::in_progress) return st;
  return inst.send_wait(pkt, after_ms(10000));
}

}  // namespace pier::drivers::shm::test
