// pier-perf: link set-up and the blocking transfer primitives.
#include "link.hpp"

#include <fmt/format.h>

namespace pier::perf {

void Op::prepare(std::span<std::byte> bytes) {
  pkt = driver::Packet{};
  iov.iov_base = bytes.data();
  iov.iov_len = bytes.size();
  pkt.set_iovec(&iov, 1);
}

Status Op::post_send(driver::Instance& on, const driver::Packet* rdv_from) {
  if (rdv_from != nullptr) {
    // The receiving driver's rendezvous data, carried to us by the ready
    // message, goes back to the driver unchanged (driver.hpp, Packet).
    pkt.rdv_data = rdv_from->rdv_data;
    pkt.rdv_len = rdv_from->rdv_len;
  }
  inst = &on;
  send = true;
  const Status s = on.send_post(pkt);
  active = s == Status::in_progress;
  return s;
}

Status Op::post_recv(driver::Instance& on) {
  inst = &on;
  send = false;
  const Status s = on.recv_post(pkt);
  active = s == Status::in_progress;
  return s;
}

Status Op::poll() {
  if (!active) return Status::ok;
  const Status s = send ? inst->send_poll(pkt) : inst->recv_poll(pkt);
  if (s != Status::in_progress) active = false;
  return s;
}

Result<std::unique_ptr<Link>> Link::create(std::string_view spec, std::uint32_t rank,
                                           std::uint32_t size, std::string* why) {
  auto ctx = driver::make_context(spec);
  if (!ctx) {
    *why = fmt::format("no such driver ({})", to_string(ctx.status()));
    return ctx.status();
  }
  std::unique_ptr<Link> link(new Link);
  link->ctx_ = std::move(*ctx);
  if (auto reason = link->ctx_->unavailable_reason(); !reason.empty()) {
    *why = reason;
    return Status::unsupported;
  }
  driver::Hints hints;
  hints.session_size = size;
  hints.rank = rank;
  auto props = link->ctx_->properties(hints);
  if (!props) {
    *why = fmt::format("properties() failed: {}", describe(props.status()));
    return props.status();
  }
  link->props_ = *props;
  auto url = link->ctx_->init();
  if (!url) {
    *why = fmt::format("init() failed: {}", describe(url.status()));
    return url.status();
  }
  link->url_ = std::move(*url);
  return link;
}

Link::~Link() {
  for (auto* inst : {small_.get(), large_.get()})
    if (inst) (void)inst->disconnect();
  small_.reset();
  large_.reset();
  if (ctx_) (void)ctx_->close();
}

Failure Link::connect(std::span<const std::byte> peer_url, Deadline deadline) {
  // Both sides open the small track first, so the driver pairs the tracks.
  for (auto track : {driver::Track::small, driver::Track::large}) {
    auto inst = ctx_->open_instance(track);
    if (!inst) return {inst.status(), "open_instance"};
    (track == driver::Track::small ? small_ : large_) = std::move(*inst);
  }
  for (auto* inst : {small_.get(), large_.get()}) {
    const Status s = inst->connect_async(peer_url);
    if (s != Status::ok && s != Status::in_progress) return {s, "connect_async"};
  }
  for (auto* inst : {small_.get(), large_.get()}) {
    for (;;) {
      const Status s = inst->connect_wait(deadline);
      if (s == Status::ok || s == Status::unsupported) break;
      if (s != Status::in_progress) return {s, "connect_wait"};
      if (Clock::now() >= deadline) return {Status::timeout, "connect_wait"};
    }
  }
  return {};
}

Failure Link::wait(Op& op, Deadline deadline, const char* what) {
  for (std::uint32_t spins = 0;; ++spins) {
    const Status s = op.poll();
    if (s == Status::ok) return {};
    if (s != Status::in_progress) return {s, what};
    relax(spins);
    // Reading the clock every poll would dominate a sub-microsecond loop.
    if ((spins & 255) == 255 && Clock::now() >= deadline) return {Status::timeout, what};
  }
}

Failure Link::send(driver::Instance& on, std::span<std::byte> bytes, Deadline deadline,
                   const driver::Packet* rdv_from) {
  Op op;
  op.prepare(bytes);
  for (std::uint32_t spins = 0;; ++spins) {
    const Status s = op.post_send(on, rdv_from);
    if (s == Status::ok) return {};
    if (s == Status::in_progress) return wait(op, deadline, "send");
    if (s != Status::no_resource) return {s, "send_post"};
    relax(spins);
    if ((spins & 255) == 255 && Clock::now() >= deadline) return {Status::timeout, "send_post"};
  }
}

Failure Link::recv(driver::Instance& on, std::span<std::byte> bytes, Deadline deadline,
                   std::size_t* got) {
  Op op;
  op.prepare(bytes);
  Status s = op.post_recv(on);
  if (s == Status::in_progress) {
    if (Failure f = wait(op, deadline, "recv")) {
      // The packet lives on this stack frame: the driver must let go of it.
      (void)on.recv_cancel(op.pkt);
      return f;
    }
    s = Status::ok;
  }
  if (s != Status::ok) return {s, "recv_post"};
  if (got) *got = op.pkt.length;
  return {};
}

}  // namespace pier::perf
