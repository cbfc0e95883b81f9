// pier::port, receiver side: provided buffers by (priority, size), streams
// (priority, sending node, sending port) that keep arrival order, arrivals
// held while no buffer matches, and the answers owed to senders. Every op
// that arrives is answered exactly once, in stream order (wire/port.hpp).
#include <cstring>

#include "base/log.hpp"
#include "port/impl.hpp"

namespace pier::port {

namespace {

void* tagged(void* p, CookieTag t) {
  return reinterpret_cast<void*>(reinterpret_cast<std::uintptr_t>(p) |
                                 static_cast<std::uintptr_t>(t));
}

std::uint8_t receive_type(std::uint8_t priority, bool peer, bool fast) {
  // GM's numbering: RECV 11, HIGH 12, PEER 13, HIGH_PEER 14, FAST +4; the
  // priority (0 or 1) is added rather than chosen (no branch per arrival).
  static_assert(PIER_PORT_HIGH_RECV_EVENT == PIER_PORT_RECV_EVENT + 1 &&
                PIER_PORT_PEER_RECV_EVENT == PIER_PORT_RECV_EVENT + 2 &&
                PIER_PORT_FAST_RECV_EVENT == PIER_PORT_RECV_EVENT + 4);
  return static_cast<std::uint8_t>(PIER_PORT_RECV_EVENT + priority + (peer ? 2 : 0) +
                                   (fast ? 4 : 0));
}

}  // namespace

Stream* Port::Impl::find_stream(std::uint8_t priority, std::uint32_t node_id, std::uint16_t port,
                                bool create) noexcept {
  const std::uint64_t key = link_key(priority, node_id, port);
  if (std::uint32_t h = stream_index.find(key); h != KeyIndex::npos)
    return last_stream = streams.lookup(static_cast<base::Pool<Stream>::Handle>(h));
  if (!create) return nullptr;
  if (node_id >= streams_of_node.size()) return nullptr;
  if (streams_of_node[node_id] >= streams_per_node) {
    // At its quota: only its own idle streams can make room.
    for (std::size_t i = live_streams.size(); i-- > 0;)
      if (live_streams[i]->node == node_id) maybe_release_stream(live_streams[i]);
    if (streams_of_node[node_id] >= streams_per_node) return nullptr;
  }
  Stream* s = streams.acquire();
  if (s == nullptr) {
    // Idle streams stay (a sender usually sends again); reclaim them only
    // when the pool runs dry.
    for (std::size_t i = live_streams.size(); i-- > 0;) maybe_release_stream(live_streams[i]);
    s = streams.acquire();
    if (s == nullptr) return nullptr;
  }
  s->key = key;
  s->node = node_id;
  s->port = port;
  s->priority = priority;
  (void)stream_index.insert(key, static_cast<std::uint32_t>(streams.handle_of(s)));
  live_streams.push_back(s);
  ++streams_of_node[node_id];
  return last_stream = s;
}

void Port::Impl::maybe_release_stream(Stream* s) noexcept {
  if (s->suspended != 0 || s->owed_acks != 0 || !s->held.empty() || s->on_ack_list) return;
  stream_index.erase(s->key);
  if (last_stream == s) last_stream = nullptr;
  --streams_of_node[s->node];
  for (auto& l : live_streams)
    if (l == s) {
      l = live_streams.back();
      live_streams.pop_back();
      break;
    }
  streams.release(s);
}

Status Port::Impl::post_reply(const Reply& r) noexcept {
  wire::PortHeader h;
  h.kind = r.kind;
  h.epoch = epoch;
  h.peer_epoch = r.peer_epoch;
  h.tag = r.tag;
  h.priority = r.priority;
  h.sending_port = static_cast<std::uint16_t>(id);
  h.receiving_port = r.port;
  h.length = r.length;
  h.cookie = r.cookie;
  std::array<std::byte, wire::PortHeader::size> bytes{};
  if (!wire::encode(h, bytes)) return Status::internal;
  core::SendArgs a;
  a.peer = r.node;
  a.priority = r.priority;
  a.source_port = h.sending_port;
  a.destination_port = r.port;
  a.upper = wire::Upper::port;
  a.header = bytes;
  a.region = r.length > 0 ? &r.region : nullptr;
  a.offset = r.offset;
  a.length = r.length;
  return core().send(a);
}

Status Port::Impl::send_answer(std::uint8_t priority, std::uint32_t node_id, std::uint16_t port,
                               std::uint16_t peer_epoch, wire::PortKind kind, std::uint64_t tag,
                               std::uint64_t cookie, const core::Region* region, std::size_t offset,
                               std::uint32_t length, core::Incoming* request) noexcept {
  Reply r;
  r.node = node_id;
  r.port = port;
  r.priority = priority;
  r.kind = kind;
  r.peer_epoch = peer_epoch;
  r.tag = tag;
  r.cookie = cookie;
  if (region) r.region = *region;
  r.offset = offset;
  r.length = length;
  // Answers leave in the order they were decided: once one waits, all wait
  // (also behind an earlier incarnation's, see Node::older_answers_wait).
  if (reply_retry.empty() && !node.older_answers_wait(id, node_id, opened_at)) {
    Status s = post_reply(r);
    if (s != Status::no_resource) {
      take(request);
      return s;
    }
  }
  Reply* q = replies.acquire();
  if (q == nullptr) {
    PIER_LOG(error, "port", "port {}: no room for an answer to node {}; its sender times out", id,
             node_id);
    take(request);
    return Status::no_resource;
  }
  *q = r;
  q->request = request;
  reply_retry.push(q);
  return Status::ok;
}

void Port::Impl::retry_replies() noexcept {
  while (Reply* r = reply_retry.head) {
    if (node.older_answers_wait(id, r->node, opened_at)) return;
    if (post_reply(*r) == Status::no_resource) return;
    reply_retry.pop();
    take(r->request);
    replies.release(r);
  }
}

void Port::Impl::owe_ack(Stream* s, std::uint32_t count) noexcept {
  s->owed_acks += count;
  if (!s->on_ack_list) {
    s->on_ack_list = true;
    s->next = ack_head;
    ack_head = s;
  }
}

void Port::Impl::flush_stream(Stream* s) noexcept {
  if (s->owed_acks == 0) return;
  (void)send_answer(s->priority, s->node, s->port, s->sender_epoch, wire::PortKind::ack,
                    s->owed_acks);
  s->owed_acks = 0;
}

void Port::Impl::flush_acks() noexcept {
  Stream* list = ack_head;
  ack_head = nullptr;
  while (Stream* s = list) {
    list = s->next;
    s->next = nullptr;
    s->on_ack_list = false;
    flush_stream(s);
  }
}

void Port::Impl::nack(Stream* s, Status why, core::Incoming* request) noexcept {
  flush_stream(s);
  (void)send_answer(s->priority, s->node, s->port, s->sender_epoch, wire::PortKind::nack,
                    static_cast<std::uint8_t>(why), 0, nullptr, 0, 0, request);
  ++s->suspended;
}

Status Port::Impl::provide(std::byte* ptr, unsigned size, std::uint8_t priority,
                           std::uint8_t tag) noexcept {
  if (closed) return Status::not_initialized;
  if (ptr == nullptr || size < min_size || size > max_size || priority >= priority_count)
    return Status::invalid_argument;
  if (recv_held == 0) return Status::no_resource;
  Buffer* b = acquire_buffer();
  if (b == nullptr) return Status::internal;  // sized to the tokens: cannot happen
  b->ptr = ptr;
  b->size = static_cast<std::uint8_t>(size);
  b->priority = priority;
  b->tag = tag;
  --recv_held;
  free_buffers[priority][size].push(b);
  if (waiting > 0) buffers_added = true;
  return Status::ok;
}

const RegisteredRange* Port::Impl::find_range(std::uint64_t addr,
                                              std::uint64_t len) const noexcept {
  for (const auto& r : ranges) {
    if (!r.used) continue;
    const auto base = reinterpret_cast<std::uintptr_t>(r.region.base);
    if (addr >= base && addr - base <= r.region.extent && len <= r.region.extent - (addr - base))
      return &r;
  }
  return nullptr;
}

Status Port::Impl::register_range(void* ptr, std::size_t len) noexcept {
  if (closed) return Status::not_initialized;
  if (ptr == nullptr || len == 0) return Status::invalid_argument;
  for (auto& r : ranges) {
    if (r.used) continue;
    auto region = core().validate(ptr, len);
    if (!region) return region.status();
    r.region = *region;
    r.used = true;
    return Status::ok;
  }
  return Status::no_resource;
}

Status Port::Impl::deregister_range(void* ptr, std::size_t len) noexcept {
  for (auto& r : ranges) {
    if (!r.used || r.region.base != ptr || r.region.extent != len) continue;
    // A get reply from it still waiting for core room would fail to post
    // and leave its get unanswered; the core refuses a region in flight.
    for (const Reply* q = reply_retry.head; q != nullptr; q = q->next)
      if (q->kind == wire::PortKind::get_reply && q->region.handle == r.region.handle)
        return Status::in_use;
    if (Status s = core().invalidate(r.region); s != Status::ok) return s;
    r.used = false;
    return Status::ok;
  }
  return Status::not_found;
}

bool Port::Impl::deliver(Stream* s, core::Incoming* handle, const wire::PortHeader& h,
                         bool at_hand) noexcept {
  auto clean = [&] { (void)core().recv(handle, nullptr, nullptr, 0, 0, 0); };
  switch (h.kind) {
    case wire::PortKind::send: {
      if (((acceptable[h.priority] >> h.size_class) & 1) == 0) {
        nack(s, Status::rejected, handle);
        return true;
      }
      Buffer* b = take_buffer(h.priority, h.size_class);
      if (b == nullptr) return false;
      const bool fast = h.length <= fast_max;
      core::Region region = fast_region;
      std::size_t offset = 0;
      if (!fast) {
        auto r = core().validate(b->ptr, h.length);
        if (!r) {
          free_buffers[h.priority][h.size_class].push_front(b);
          return false;  // no region left: try again later
        }
        region = *r;
      }
      Slot* slot = rings[1 + h.priority].reserve(next_seq++);
      if (slot == nullptr) {  // cannot happen: one slot per token
        PIER_LOG(error, "port", "port {}: receive ring full", id);
        if (!fast) (void)core().invalidate(region);
        free_buffers[h.priority][h.size_class].push_front(b);
        return false;  // held: tried again later
      }
      if (fast) {
        offset = slot->fast_offset;
        slot->region = {};
      } else {
        slot->region = region;
      }
      // Every field written once (no clearing first: this is per arrival).
      slot->event = Event{.type = receive_type(h.priority, h.sending_port == id, fast),
                          .priority = h.priority,
                          .size = h.size_class,
                          .tag = b->tag,
                          .sender_port_id = h.sending_port,
                          .receiver_port_id = static_cast<std::uint16_t>(id),
                          .sender_node_id = s->node,
                          .length = h.length,
                          .message = fast ? fast_store.data() + offset : b->ptr,
                          .buffer = b->ptr,
                          .internal_ = 0};
      release_buffer(b);
      if (h.length == 0) {
        clean();
        mark_ready(slot);
      } else if (fast && at_hand) {
        // Copied before recv() returns: no finalize to wait for.
        if (core().recv(handle, nullptr, &region, offset, h.length, h.length) == Status::ok) {
          mark_ready(slot);
        } else {
          PIER_LOG(error, "port", "port {}: cannot receive from node {}", id, s->node);
          clean();
          withdraw_receive(slot);
        }
      } else if (core().recv(handle, tagged(slot, CookieTag::slot), &region, offset, h.length,
                             h.length) == Status::ok) {
        ++pinned;
      } else {
        PIER_LOG(error, "port", "port {}: cannot receive from node {}", id, s->node);
        withdraw_receive(slot);
      }
      owe_ack(s);
      return true;
    }
    case wire::PortKind::put: {
      const RegisteredRange* r = find_range(h.remote_address, h.length);
      if (r == nullptr) {
        nack(s, Status::permission_denied, handle);
        return true;
      }
      const auto offset = h.remote_address - reinterpret_cast<std::uintptr_t>(r->region.base);
      if (h.length == 0) {
        clean();
      } else if (core().recv(handle, nullptr, &r->region, offset, h.length, h.length) !=
                 Status::ok) {
        // The range checked out, so the core refused for its own reasons:
        // the writer must not believe its data landed.
        clean();
        nack(s, Status::internal);
        return true;
      }
      owe_ack(s);
      return true;
    }
    case wire::PortKind::get_request: {
      // The request is taken only when its answer leaves (Reply::request).
      const RegisteredRange* r = find_range(h.remote_address, h.length);
      if (r == nullptr) {
        nack(s, Status::permission_denied, handle);
        return true;
      }
      flush_stream(s);
      const auto offset = h.remote_address - reinterpret_cast<std::uintptr_t>(r->region.base);
      (void)send_answer(s->priority, s->node, s->port, s->sender_epoch, wire::PortKind::get_reply,
                        0, h.cookie, &r->region, offset, h.length, handle);
      return true;
    }
    case wire::PortKind::get_reply:
    case wire::PortKind::ack:
    case wire::PortKind::nack:
    case wire::PortKind::resume:
    case wire::PortKind::drop:
      break;  // answers go to on_reply, controls are handled in on_arrival
  }
  clean();
  return true;
}

void Port::Impl::hold(Stream* s, core::Incoming* handle, const wire::PortHeader& h) noexcept {
  Held* x = helds.acquire();
  if (x == nullptr) {
    // More arrivals wait than PORT_HELD: answer this one as timed out.
    PIER_LOG(warn, "port", "port {}: too many held messages; node {} times out", id, s->node);
    if (handle) {
      nack(s, Status::timeout, nack_request(s, handle));
    } else {
      owe_ack(s);
    }
    return;
  }
  x->handle = handle;
  x->controls = handle == nullptr ? 1 : 0;
  x->header = h;
  x->since_ns = base::now_ns();
  s->held.push(x);
  ++waiting;
}

void Port::Impl::on_arrival(const core::Arrival& a, const wire::PortHeader& h) noexcept {
  // Acks piggybacked for ops of an earlier incarnation of this port are stale.
  if (h.kind == wire::PortKind::send && h.tag != 0 && h.peer_epoch == epoch)
    on_piggyback(h.priority, a.source, h.sending_port, h.tag);
  Stream* s = stream(h.priority, a.source, h.sending_port, true);
  if (s == nullptr) {
    PIER_LOG(warn, "port", "port {}: too many streams; node {} times out", id, a.source);
    (void)send_answer(h.priority, a.source, h.sending_port, h.epoch, wire::PortKind::nack,
                      static_cast<std::uint8_t>(Status::timeout), 0, nullptr, 0, 0, a.handle);
    return;
  }
  if (s->sender_epoch != h.epoch) {
    // Incarnations in serial order (they wrap at 16 bits): traffic of an
    // older one is a closed port's, late (its close-time drop may leave
    // after its successor's first op); nobody waits for it. Only while the
    // stream is busy with the newer one, though: an idle stream may be
    // remembered across 32768 incarnations, after which a new one looks
    // older, and its ops would go unanswered for ever.
    const auto ahead =
        static_cast<std::int16_t>(static_cast<std::uint16_t>(h.epoch - s->sender_epoch));
    const bool idle = s->held.empty() && s->suspended == 0 && s->owed_acks == 0 && !s->on_ack_list;
    if (s->sender_epoch != 0 && ahead < 0 && !idle) {
      (void)core().recv(a.handle, nullptr, nullptr, 0, 0, 0);
      return;
    }
    restart_stream(s, h.epoch);
  }
  if (h.kind == wire::PortKind::resume || h.kind == wire::PortKind::drop) {
    (void)core().recv(a.handle, nullptr, nullptr, 0, 0, 0);
    if (s->suspended > 0) --s->suspended;
    if (h.kind == wire::PortKind::drop) drop_held(s);
    // Answered in stream order, behind what is held; consecutive controls
    // share one entry, so a peer repeating them cannot fill the pool.
    if (s->held.empty())
      owe_ack(s);
    else if (s->held.tail->handle == nullptr)
      ++s->held.tail->controls;
    else
      hold(s, nullptr, h);
    if (s->suspended == 0 && s->held.head) s->held.head->since_ns = base::now_ns();
    while (serve_head(s)) {
    }
    return;
  }
  if (s->suspended > 0 || !s->held.empty() || !deliver(s, a.handle, h, a.at_hand))
    hold(s, a.handle, h);
}

void Port::Impl::restart_stream(Stream* s, std::uint16_t sender_epoch) noexcept {
  // The port that sent these is closed: nobody waits for their answers.
  while (Held* x = s->held.pop()) {
    --waiting;
    if (x->handle != nullptr) (void)core().recv(x->handle, nullptr, nullptr, 0, 0, 0);
    helds.release(x);
  }
  s->suspended = 0;
  s->owed_acks = 0;
  s->sender_epoch = sender_epoch;
}

core::Incoming* Port::Impl::nack_request(const Stream* s, core::Incoming* x) noexcept {
  if (core().credit_limit(s->node) > 1) return x;
  (void)core().recv(x, nullptr, nullptr, 0, 0, 0);
  return nullptr;
}

void Port::Impl::drop_held(Stream* s) noexcept {
  while (Held* x = s->held.pop()) {
    --waiting;
    if (x->handle == nullptr) {
      owe_ack(s, x->controls);
    } else {
      // While answers wait for core room, a peer could fill the answer pool
      // for every node with sends it had dropped again and again, had each
      // gone back to the core at once (nack_request).
      flush_stream(s);
      (void)send_answer(s->priority, s->node, s->port, s->sender_epoch, wire::PortKind::nack,
                        static_cast<std::uint8_t>(Status::dropped), 0, nullptr, 0, 0,
                        nack_request(s, x->handle));
    }
    helds.release(x);
  }
}

bool Port::Impl::serve_head(Stream* s) noexcept {
  Held* x = s->held.head;
  // Controls at the head are answered even while suspended: everything
  // before them is, so the answers keep their order.
  if (x == nullptr || (s->suspended > 0 && x->handle != nullptr)) return false;
  if (x->handle != nullptr && !deliver(s, x->handle, x->header)) return false;
  if (x->handle == nullptr) owe_ack(s, x->controls);
  s->held.pop();
  helds.release(x);
  --waiting;
  if (s->held.head) s->held.head->since_ns = base::now_ns();
  return true;
}

void Port::Impl::serve_streams() noexcept {
  buffers_added = false;
  const std::int64_t now = base::now_ns();
  for (std::size_t i = 0; i < live_streams.size(); ++i) {
    Stream* s = live_streams[i];
    while (serve_head(s)) {
    }
    Held* x = s->held.head;
    if (s->suspended > 0 || x == nullptr || now - x->since_ns < timeout_ns) continue;
    // G8: no matching buffer came in time; the sender learns it and stops.
    s->held.pop();
    --waiting;
    core::Incoming* request = nack_request(s, x->handle);
    helds.release(x);
    nack(s, Status::timeout, request);
  }
}

void Port::Impl::forget_streams_of(std::uint32_t node_id) noexcept {
  for (Stream* s : live_streams) {
    if (s->node != node_id) continue;
    while (Held* x = s->held.pop()) {
      if (x->handle != nullptr) (void)core().recv(x->handle, nullptr, nullptr, 0, 0, 0);
      helds.release(x);
      --waiting;
    }
    s->suspended = 0;
    s->owed_acks = 0;  // flush_acks() finds nothing to send to the dead
  }
}

void Port::Impl::on_slot_finalized(Slot* slot, Status s) noexcept {
  --pinned;
  if (slot->region.handle) {
    (void)core().invalidate(slot->region);
    slot->region = {};
  }
  if (s != Status::ok) {
    PIER_LOG(warn, "port", "port {}: message from node {} did not land: {}", id,
             slot->event.sender_node_id, to_string(s));
    return withdraw_receive(slot);
  }
  mark_ready(slot);
}

void Port::Impl::withdraw_receive(Slot* slot) noexcept {
  // The message is lost (its sender died mid-transfer): its bytes never all
  // landed, so no receive event may claim them. The slot is skipped; its
  // buffer is provided again when the slot leaves the ring (reprovide), not
  // now: the rings hold one slot per token, and a buffer back in use while
  // its old slot still waits behind an older one would find them full.
  slot->flushed = true;
  mark_ready(slot);
}

void Port::Impl::reprovide(const Event& e) noexcept {
  if (closed || e.buffer == nullptr) return;
  Buffer* b = acquire_buffer();  // the pool holds one per token: never empty here
  if (b == nullptr) return;
  b->ptr = static_cast<std::byte*>(e.buffer);
  b->size = e.size;
  b->priority = e.priority;
  b->tag = e.tag;
  free_buffers[e.priority][e.size].push_front(b);  // first in line, as it was
  if (waiting > 0) buffers_added = true;
}

void Port::Impl::close_receiver() noexcept {
  for (Stream* s : live_streams) {
    flush_stream(s);
    while (Held* x = s->held.pop()) {
      if (x->handle == nullptr) {
        (void)send_answer(s->priority, s->node, s->port, s->sender_epoch, wire::PortKind::ack,
                          x->controls);
      } else {
        (void)core().recv(x->handle, nullptr, nullptr, 0, 0, 0);
        (void)send_answer(s->priority, s->node, s->port, s->sender_epoch, wire::PortKind::nack,
                          static_cast<std::uint8_t>(Status::closed));
      }
      helds.release(x);
    }
  }
  waiting = 0;
  // Answers waiting for core room still go (the node retries them for a
  // closed port), but get data no longer can: the registered memory goes
  // with the port. Those gets fail "closed" instead.
  for (Reply* r = reply_retry.head; r != nullptr; r = r->next) {
    if (r->kind != wire::PortKind::get_reply) continue;
    r->kind = wire::PortKind::nack;
    r->tag = static_cast<std::uint8_t>(Status::closed);
    r->cookie = 0;
    r->region = {};
    r->offset = 0;
    r->length = 0;
  }
  for (auto& r : ranges)
    if (r.used && core().invalidate(r.region) == Status::ok) r.used = false;
}

}  // namespace pier::port
