// tests/launch: a job for the many-hosts test. Every rank bootstraps (any
// back end), brings up two tcp contexts, one towards the next rank and one
// towards the previous, exchanges their urls, and passes verified messages
// around the ring. Driver level only: what crosses the hosts is the tcp
// driver's own traffic.
//   tcp_ring [DRIVER]     (default "tcp")
// Prints "ring rank R/N: ok, ..." and exits 0; 2 when the bootstrap failed,
// 1 on a driver failure or wrong data (the reason printed).
#include "boot/boot.hpp"

#include <pier/driver.hpp>

#include <fmt/format.h>

#include <sys/uio.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace {

using pier::Status;
using pier::driver::Clock;

constexpr int rounds = 3;

[[noreturn]] void die(std::uint32_t rank, const std::string& what, Status s) {
  fmt::print("ring rank {}: {}: {}\n", rank, what, pier::to_string(s));
  std::fflush(stdout);
  std::exit(1);
}

std::byte pattern(std::uint32_t rank, int round, std::size_t i) {
  return static_cast<std::byte>((rank * 131 + static_cast<unsigned>(round) * 17 + i * 7) & 0xff);
}

struct Side {
  std::unique_ptr<pier::driver::Context> ctx;
  std::vector<std::byte> url;
  std::unique_ptr<pier::driver::Instance> inst;
};

Side bring_up(const std::string& spec, std::uint32_t rank, std::uint32_t size,
              std::size_t* max_packet) {
  Side side;
  auto ctx = pier::driver::make_context(spec);
  if (!ctx) die(rank, "make_context(" + spec + ")", ctx.status());
  side.ctx = std::move(*ctx);
  pier::driver::Hints hints;
  hints.session_size = size;
  hints.rank = rank;
  auto props = side.ctx->properties(hints);
  if (!props) die(rank, "properties", props.status());
  *max_packet = props->caps.max_packet;
  auto url = side.ctx->init();
  if (!url) die(rank, "init", url.status());
  side.url = std::move(*url);
  return side;
}

void connect_async(Side& side, std::span<const std::byte> peer_url, std::uint32_t rank) {
  auto inst = side.ctx->open_instance(pier::driver::Track::small);
  if (!inst) die(rank, "open_instance", inst.status());
  side.inst = std::move(*inst);
  const Status s = side.inst->connect_async(peer_url);
  if (s != Status::ok && s != Status::in_progress) die(rank, "connect_async", s);
}

/// Both sides at once: in a ring of three or more, waiting for one link
/// before starting the other would wait in a circle.
void connect_wait(Side& a, Side& b, std::uint32_t rank) {
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  bool a_done = false, b_done = false;
  while (!a_done || !b_done) {
    for (auto [side, done] : {std::pair{&a, &a_done}, std::pair{&b, &b_done}}) {
      if (*done) continue;
      const Status s = side->inst->connect_wait(Clock::now() + std::chrono::milliseconds(10));
      if (s == Status::ok || s == Status::unsupported)
        *done = true;
      else if (s != Status::in_progress && s != Status::timeout)
        die(rank, "connect_wait", s);
    }
    if (Clock::now() >= deadline) die(rank, "connect_wait", Status::timeout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string spec = argc > 1 ? argv[1] : "tcp";
  auto opened = pier::boot::Bootstrap::open();
  if (!opened) {
    fmt::print("ring: cannot open the bootstrap: {}\n", pier::to_string(opened.status()));
    return 2;
  }
  auto& boot = **opened;
  const std::uint32_t me = boot.rank(), n = boot.size();
  const std::uint32_t next = (me + 1) % n, prev = (me + n - 1) % n;

  std::size_t max_packet = 0;
  Side to_next = bring_up(spec, me, n, &max_packet);
  Side to_prev = bring_up(spec, me, n, &max_packet);
  auto fence = [&](const char* what) {
    if (Status s = boot.fence(Clock::now() + std::chrono::seconds(30)); s != Status::ok) {
      fmt::print("ring rank {}: fence {} failed ({}): {}\n", me, what, pier::to_string(s),
                 boot.last_error());
      std::exit(2);
    }
  };
  if (boot.put("ring.to_next", std::span<const std::byte>(to_next.url)) != Status::ok ||
      boot.put("ring.to_prev", std::span<const std::byte>(to_prev.url)) != Status::ok ||
      boot.commit() != Status::ok) {
    fmt::print("ring rank {}: put failed: {}\n", me, boot.last_error());
    return 2;
  }
  fence("urls");
  // My link to the next rank meets the next rank's link to its previous.
  auto next_url = boot.get(next, "ring.to_prev");
  auto prev_url = boot.get(prev, "ring.to_next");
  if (!next_url || !prev_url) die(me, "get of a peer url", next_url.status());
  connect_async(to_next, *next_url, me);
  connect_async(to_prev, *prev_url, me);
  connect_wait(to_next, to_prev, me);

  const std::size_t bytes = max_packet == 0 ? 100000 : std::min<std::size_t>(max_packet, 100000);
  std::vector<std::byte> out(bytes), in(bytes);
  for (int round = 0; round < rounds; ++round) {
    for (std::size_t i = 0; i < bytes; ++i) out[i] = pattern(me, round, i);
    std::fill(in.begin(), in.end(), std::byte{0});
    ::iovec out_iov{out.data(), bytes}, in_iov{in.data(), bytes};
    pier::driver::Packet send_pkt, recv_pkt;
    send_pkt.set_iovec(&out_iov, 1);
    recv_pkt.set_iovec(&in_iov, 1);
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    // A post answering no_resource is retried; once posted, a packet is
    // polled until it leaves in_progress.
    bool recv_posted = false, send_posted = false;
    Status rs = Status::in_progress, ss = Status::in_progress;
    while (rs == Status::in_progress || ss == Status::in_progress) {
      if (Clock::now() >= deadline) die(me, fmt::format("round {}", round), Status::timeout);
      if (!recv_posted) {
        rs = to_prev.inst->recv_post(recv_pkt);
        recv_posted = rs != Status::no_resource;
        if (!recv_posted) rs = Status::in_progress;
      } else if (rs == Status::in_progress) {
        rs = to_prev.inst->recv_poll(recv_pkt);
      }
      if (!send_posted) {
        ss = to_next.inst->send_post(send_pkt);
        send_posted = ss != Status::no_resource;
        if (!send_posted) ss = Status::in_progress;
      } else if (ss == Status::in_progress) {
        ss = to_next.inst->send_poll(send_pkt);
      }
    }
    if (rs != Status::ok) die(me, fmt::format("receive of round {}", round), rs);
    if (ss != Status::ok) die(me, fmt::format("send of round {}", round), ss);
    if (recv_pkt.length != bytes) die(me, "short receive", Status::truncated);
    for (std::size_t i = 0; i < bytes; ++i) {
      if (in[i] != pattern(prev, round, i)) {
        fmt::print("ring rank {}: byte {} of round {} from rank {} is wrong\n", me, i, round, prev);
        return 1;
      }
    }
  }
  // Nobody tears down while a neighbour may still be receiving.
  fence("done");
  for (Side* side : {&to_next, &to_prev}) {
    (void)side->inst->disconnect();
    side->inst.reset();
    (void)side->ctx->close();
  }
  fmt::print("ring rank {}/{}: ok, {} rounds of {} bytes from rank {} over {}\n", me, n, rounds,
             bytes, prev, spec);
  return 0;
}
