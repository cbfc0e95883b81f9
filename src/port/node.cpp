// pier::port: the node (one per process over one Core), the demultiplexing
// of the core's callbacks to ports, and port open/close.
#include <algorithm>
#include <chrono>
#include <exception>

#include "base/config.hpp"
#include "base/log.hpp"
#include "boot/boot.hpp"
#include "port/impl.hpp"

namespace pier::port {

namespace {

inline const config::IntKey close_wait_key{
    "PORT_CLOSE_WAIT_MS", 10000, 0, 3'600'000,
    "how long closing a port waits for transfers still using the client's memory"};
inline const config::IntKey idle_poll_key{
    "PORT_IDLE_POLL_MS", 10, 0, 60'000,
    "while no port of the node is open, a thread polls it this often (0: never): answers to "
    "sends to its closed ports"};
inline const config::IntKey max_ports_key{"PORT_MAX_PORTS", 32, 1, 65536,
                                          "port numbers a node can open: 0 to this minus one"};

std::uintptr_t bits(void* p) {
  return reinterpret_cast<std::uintptr_t>(p);
}

}  // namespace

Node::Impl::Impl(core::Core& c, std::unique_ptr<core::Core> owned) noexcept
    : core(c), owned_core(std::move(owned)) {
  const auto limit = static_cast<std::size_t>(max_ports_key.get());
  ports.resize(limit);
  epochs.resize(limit);
  open_ports.reserve(limit);
  closed_nacks.resize(std::size_t{core.settings().recv_msgs} + 1);
  for (auto& counts : data_in_flight) counts.assign(core.size(), 0);
}

Node::Impl::~Impl() {
  ending = true;  // the closes below start no caretaker
  stop_caretaker();
  // Ports the client leaked: closing them answers what they hold.
  for (auto& p : ports)
    if (p) close(p.get());
  // Requests whose answers never left go back to the core while we are
  // still its client (the core may live on, attach()).
  for (; closed_nacks_count > 0; --closed_nacks_count) {
    take(closed_nacks[closed_nacks_first].request);
    closed_nacks_first = (closed_nacks_first + 1) % closed_nacks.size();
  }
  for (auto& z : zombies)
    while (Reply* r = z->reply_retry.pop()) take(r->request);
  // The core may live on (attach()): it must not call us back, and the
  // sends closed ports still have in flight then complete without us.
  (void)core.detach(wire::Upper::port, this);
}

Result<Port::Impl*> Node::Impl::open(unsigned id) {
  if (id >= ports.size()) return Status::invalid_argument;
  if (ports[id]) return Status::in_use;
  stop_caretaker();
  reap();
  try {
    std::uint16_t epoch = ++epochs[id];
    if (epoch == 0) epoch = epochs[id] = 1;  // 0 names no port
    ports[id] = std::make_unique<Port::Impl>(*this, id, epoch);
    ports[id]->opened_at = ++answer_clock;
  } catch (const std::bad_alloc&) {
    if (open_ports.empty()) start_caretaker();  // no close would start it again
    return Status::no_memory;
  }
  open_ports.push_back(ports[id].get());
  return ports[id].get();
}

void Node::Impl::close(Port::Impl* port) noexcept {
  if (port == nullptr || port->closed) return;
  port->close_receiver();
  port->close_sender();
  port->closed = true;
  open_ports.erase(std::find(open_ports.begin(), open_ports.end(), port));
  // The client's memory is its own once close returns: transfers the core
  // still runs into it or out of it (a rendezvous into a provided buffer,
  // a send's data, a get landing, a put into registered memory) end first,
  // up to PORT_CLOSE_WAIT_MS (then logged): a peer that stops progressing
  // can hold one for ever.
  const auto in_use = [port] {
    bool used = port->pinned > 0;
    for (auto& r : port->ranges)
      if (r.used) {
        if (port->core().invalidate(r.region) == Status::ok)
          r.used = false;
        else
          used = true;
      }
    return used;
  };
  const bool busy = in_use();
  auto& slot = ports[port->id];
  // Cookies the core still holds name this port's objects, and answers
  // still wait for core room: a zombie keeps it until they are all
  // finalized and sent (poll() goes on retrying them). Its number is free
  // from now on: what arrives for it is answered "closed", never taken.
  if (busy || !port->reply_retry.empty()) {
    try {
      zombies.push_back(std::move(slot));
    } catch (const std::bad_alloc&) {
      PIER_LOG(error, "port", "cannot keep closed port {} for its pending operations", port->id);
      (void)slot.release();  // leaked rather than freed under the core's feet
    }
  }
  if (busy && slot == nullptr) {
    port->closing = true;  // reap() leaves it while we wait
    const auto deadline = base::Deadline::after_ms(close_wait_key.get());
    while (in_use() && !deadline.expired()) {
      poll();
      (void)core.wait_sleeping([&] { return port->pinned == 0; }, base::Deadline::after_ms(1));
    }
    port->closing = false;
    if (in_use())
      PIER_LOG(error, "port",
               "port {} closed with transfers still using the client's memory after {} ms "
               "(PIER_PORT_CLOSE_WAIT_MS)",
               port->id, close_wait_key.get());
    reap();
  }
  slot.reset();
  if (open_ports.empty()) start_caretaker();
}

void Node::Impl::start_caretaker() noexcept {
  if (ending || owned_core == nullptr || caretaker.joinable()) return;
  caretaker_stop = false;
  try {
    const auto period = std::chrono::milliseconds(idle_poll_key.get());
    if (period.count() == 0) return;
    caretaker = std::thread([this, period] {
      std::unique_lock lock(caretaker_mutex);
      // Sleeps first: a client that closes a port to open another at once
      // (or its peers' first sends meanwhile) sees no difference.
      while (!caretaker_cv.wait_for(lock, period, [this] { return caretaker_stop; })) {
        lock.unlock();
        poll();
        lock.lock();
      }
    });
  } catch (const std::exception& e) {
    // Out of threads or memory: the node answers again once a port opens.
    PIER_LOG(warn, "port", "no caretaker thread for a node with no open port: {}", e.what());
  }
}

void Node::Impl::stop_caretaker() noexcept {
  if (!caretaker.joinable()) return;
  {
    std::lock_guard lock(caretaker_mutex);
    caretaker_stop = true;
  }
  caretaker_cv.notify_one();
  caretaker.join();
}

void Node::Impl::reap() noexcept {
  std::erase_if(zombies, [](const auto& z) {
    return z->pinned == 0 && z->reply_retry.empty() && !z->closing;
  });
}

bool Node::Impl::older_answers_wait_slow(unsigned id, std::uint32_t to,
                                         std::uint64_t since) const noexcept {
  // Closed incarnations opened earlier; an incarnation that opened after a
  // nack was queued answers after it, also once it is closed.
  for (const auto& z : zombies) {
    if (z->id != id || z->opened_at >= since) continue;
    for (const Reply* r = z->reply_retry.head; r; r = r->next)
      if (r->node == to) return true;
  }
  for (std::size_t i = 0; i < closed_nacks_count; ++i) {
    const ClosedNack& n = closed_nacks[(closed_nacks_first + i) % closed_nacks.size()];
    if (n.queued_at < since && n.closed_port == id && n.node == to) return true;
  }
  return false;
}

void Node::Impl::retry_zombies() noexcept {
  for (auto& z : zombies)
    if (!z->reply_retry.empty()) z->retry_replies();
  reap();
}

void Node::Impl::send_room() noexcept {
  // In poll()'s order; closed ports are freed by the next poll, not here.
  for (auto& z : zombies)
    if (!z->reply_retry.empty()) z->retry_replies();
  if (closed_nacks_count > 0) retry_closed_nacks();
  for (Port::Impl* p : open_ports) {
    if (!p->reply_retry.empty()) p->retry_replies();
    if (p->ack_head && p->reply_retry.empty()) p->flush_acks();  // held back meanwhile
    if (p->retry_head) p->retry_sends();
  }
}

void Node::Impl::poll() noexcept {
  // Oldest answers first: closed incarnations, then nacks for closed
  // numbers, then the open ports (which wait for both, per number).
  if (!zombies.empty()) retry_zombies();
  if (closed_nacks_count > 0) retry_closed_nacks();
  for (Port::Impl* p : open_ports) p->poll_before();
  (void)core.progress();
  if (!zombies.empty()) retry_zombies();
  if (closed_nacks_count > 0) retry_closed_nacks();
  for (Port::Impl* p : open_ports) p->poll_after();
}

void Node::Impl::lib_parse(const core::Arrival& a) noexcept {
  auto clean = [&] { (void)core.recv(a.handle, nullptr, nullptr, 0, 0, 0); };
  // A header that does not hold fails the peer: its op would get no answer,
  // and the answers that follow, matched by position, would end the wrong ops.
  const auto reject = [&](const char* what, Status why) {
    PIER_LOG(warn, "port", "node {}: {}: the node is failed", a.source, what);
    clean();
    core.reject_peer(a.source, why);
  };
  // A send's compact header leaves its routing to the frame; a header of
  // any other length than the two forms has bytes nobody reads.
  if (a.header.size() == wire::PortHeader::compact_size) {
    // The routing fields and the length are the frame's own (the decoder
    // bounds the length): nothing to cross-check. A send is an op.
    auto decoded = wire::PortHeader::decode_compact(
        a.header, {a.priority, a.source_port, a.destination_port, a.length});
    if (!decoded) return reject("bad port header", decoded.status());
    Port::Impl* port =
        a.destination_port < ports.size() ? ports[a.destination_port].get() : nullptr;
    if (port == nullptr) return nack_closed(a, *decoded);  // takes the arrival once it leaves
    return port->on_arrival(a, *decoded);
  }
  auto decoded = a.header.size() == wire::PortHeader::size
                     ? wire::PortHeader::decode(a.header)
                     : Result<wire::PortHeader>(Status::malformed);
  if (!decoded) return reject("bad port header", decoded.status());
  const wire::PortHeader& h = *decoded;
  // The core's copy of the routing fields must agree with ours, and the
  // payload with the header's length: a peer that disagrees is hostile.
  const bool carries_data = h.kind == wire::PortKind::send || h.kind == wire::PortKind::put ||
                            h.kind == wire::PortKind::get_reply;
  if (h.priority != a.priority || h.sending_port != a.source_port ||
      h.receiving_port != a.destination_port || a.length != (carries_data ? h.length : 0))
    return reject("inconsistent port header", Status::malformed);
  // An ack, nack or get data answers one of our ops; the rest are ops and
  // controls for a receiving port.
  const bool answer = h.kind == wire::PortKind::get_reply || h.kind == wire::PortKind::ack ||
                      h.kind == wire::PortKind::nack;
  Port::Impl* port = h.receiving_port < ports.size() ? ports[h.receiving_port].get() : nullptr;
  if (port == nullptr) {
    if (answer)
      clean();
    else
      nack_closed(a, h);  // takes the arrival once the nack leaves
    return;
  }
  if (answer)
    port->on_reply(a, h);
  else
    port->on_arrival(a, h);
}

Status Node::Impl::post_closed_nack(const ClosedNack& n) noexcept {
  wire::PortHeader r;
  r.kind = wire::PortKind::nack;
  r.tag = static_cast<std::uint8_t>(Status::closed);
  r.priority = n.priority;
  r.sending_port = n.closed_port;
  r.receiving_port = n.sender_port;
  r.peer_epoch = n.peer_epoch;
  std::array<std::byte, wire::PortHeader::size> bytes{};
  if (!wire::encode(r, bytes)) return Status::internal;
  core::SendArgs s;
  s.peer = n.node;
  s.priority = n.priority;
  s.source_port = r.sending_port;
  s.destination_port = r.receiving_port;
  s.upper = wire::Upper::port;
  s.header = bytes;
  return core.send(s);
}

void Node::Impl::nack_closed(const core::Arrival& a, const wire::PortHeader& h) noexcept {
  // The arrival is taken from the core only once its nack leaves: until
  // then the sender's credit stays spent, so it cannot queue more nacks
  // than the core holds receive states (the ring's size).
  // Controls (resume, drop) are taken at once: they come with failures,
  // not credits, so they cannot fill the ring, and holding them could spend
  // the credit a sender keeps free for them.
  const bool control = h.kind == wire::PortKind::resume || h.kind == wire::PortKind::drop;
  if (control) take(a.handle);
  core::Incoming* request = control ? nullptr : a.handle;
  const ClosedNack n{a.source, h.receiving_port, h.sending_port, h.priority,
                     h.epoch,  request,          ++answer_clock};
  // Answers leave in order: once one waits for core room, the rest queue;
  // and behind what a closed incarnation of that number still owes.
  if (closed_nacks_count == 0 && !older_answers_wait(h.receiving_port, a.source, n.queued_at)) {
    const Status st = post_closed_nack(n);
    if (st != Status::no_resource) {  // sent, or the gate failed: the sender learns that
      take(request);
      return;
    }
  }
  if (closed_nacks_count == closed_nacks.size()) {
    // Cannot happen (see above); the sender's op would end only when its
    // gate fails: say so.
    PIER_LOG(warn, "port", "cannot answer node {} for closed port {}: too many answers wait",
             a.source, h.receiving_port);
    take(request);
    return;
  }
  closed_nacks[(closed_nacks_first + closed_nacks_count++) % closed_nacks.size()] = n;
}

void Node::Impl::retry_closed_nacks() noexcept {
  while (closed_nacks_count > 0) {
    const ClosedNack& n = closed_nacks[closed_nacks_first];
    if (older_answers_wait(n.closed_port, n.node, n.queued_at)) return;
    if (post_closed_nack(n) == Status::no_resource) return;
    take(n.request);
    closed_nacks_first = (closed_nacks_first + 1) % closed_nacks.size();
    --closed_nacks_count;
  }
}

void Node::Impl::take(core::Incoming* request) noexcept {
  if (request) (void)core.recv(request, nullptr, nullptr, 0, 0, 0);
}

void Port::Impl::take(core::Incoming* request) noexcept {
  node.take(request);
}

void Node::Impl::peer_failed(core::Rank peer) noexcept {
  for (Port::Impl* p : open_ports) p->on_peer_failed(peer);
}

void Node::Impl::lib_finalize(void* cookie, Status status) noexcept {
  const auto tag = static_cast<CookieTag>(bits(cookie) & 3);
  void* object = reinterpret_cast<void*>(bits(cookie) & ~std::uintptr_t{3});
  switch (tag) {
    case CookieTag::op_send: {
      Op* op = static_cast<Op*>(object);
      op->owner->on_send_finalized(op, status);
      break;
    }
    case CookieTag::op_landing: {
      Op* op = static_cast<Op*>(object);
      op->owner->on_landing_finalized(op, status);
      break;
    }
    case CookieTag::slot: {
      Slot* slot = static_cast<Slot*>(object);
      slot->owner->on_slot_finalized(slot, status);
      break;
    }
  }
}

// ---- the facade

Node::Node(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {
  impl_->facade = this;
}
Node::~Node() = default;

Result<std::unique_ptr<Node>> Node::attach(core::Core& core) {
  auto impl = std::make_unique<Impl>(core, nullptr);
  if (Status s = core.attach(wire::Upper::port, impl.get(), wire::PortHeader::size);
      s != Status::ok)
    return s;
  return std::unique_ptr<Node>(new Node(std::move(impl)));
}

Result<std::unique_ptr<Node>> Node::create() {
  auto boot = boot::Bootstrap::open("port");
  if (!boot) return boot.status();
  auto made = core::Core::from_bootstrap(**boot);
  if (!made) return made.status();
  core::Core& core = **made;
  auto impl = std::make_unique<Impl>(core, std::move(*made));
  impl->keep_alive = std::shared_ptr<boot::Bootstrap>(std::move(*boot));
  if (Status s = core.attach(wire::Upper::port, impl.get(), wire::PortHeader::size);
      s != Status::ok)
    return s;
  return std::unique_ptr<Node>(new Node(std::move(impl)));
}

Result<std::unique_ptr<Port>> Node::open(unsigned port_id) {
  auto impl = impl_->open(port_id);
  if (!impl) return impl.status();
  auto port = std::unique_ptr<Port>(new Port(*impl));
  (*impl)->facade = port.get();
  return port;
}

unsigned Node::port_limit() const noexcept {
  return static_cast<unsigned>(impl_->ports.size());
}
std::uint32_t Node::node_id() const noexcept {
  return impl_->core.rank();
}
std::uint32_t Node::node_count() const noexcept {
  return impl_->core.size();
}
core::Core& Node::core() noexcept {
  return impl_->core;
}

Result<std::string> Node::host_name(std::uint32_t node_id) const {
  auto id = impl_->core.node_of(node_id);
  if (!id) return id.status();
  return id->node;
}

Result<std::uint32_t> Node::node_id_of_host(std::string_view host) const {
  for (std::uint32_t r = 0; r < impl_->core.size(); ++r) {
    auto id = impl_->core.node_of(r);
    if (id && id->node == host) return r;
  }
  return Status::not_found;
}

}  // namespace pier::port
