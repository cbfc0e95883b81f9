// pier::port, sender side: ops (one per send token in use) on connections
// (priority, target node, target port). An op completes when the target
// answered it (ack, nack or get data, positional: wire/port.hpp) and the core
// finalized our send. A failure disables the connection until one resume or
// drop per reported failure (G10).
#include <algorithm>
#include <cstring>

#include "base/bytes.hpp"
#include "base/log.hpp"
#include "port/impl.hpp"

namespace pier::port {

namespace {

void* tagged(void* p, CookieTag t) {
  return reinterpret_cast<void*>(reinterpret_cast<std::uintptr_t>(p) |
                                 static_cast<std::uintptr_t>(t));
}

bool is_control(OpKind k) {
  return k == OpKind::resume || k == OpKind::drop;
}

/// What a send that could not reach its target reports.
Status unreachable(Status) {
  return Status::broken;
}

}  // namespace

Connection* Port::Impl::find_connection(std::uint8_t priority, std::uint32_t node_id,
                                        std::uint16_t port, bool create) noexcept {
  const std::uint64_t key = link_key(priority, node_id, port);
  if (std::uint32_t h = conn_index.find(key); h != KeyIndex::npos)
    return last_conn = conns.lookup(static_cast<base::Pool<Connection>::Handle>(h));
  if (!create) return nullptr;
  Connection* c = conns.acquire();
  if (c == nullptr) {
    // Idle connections stay (the next send to that target usually comes);
    // when the pool runs dry they make room. Before, a port that had
    // talked to PORT_CONNECTIONS targets could never send to a new one.
    for (std::size_t i = live_conns.size(); i-- > 0;) {
      Connection* idle = live_conns[i];
      if (idle->failures != 0 || idle->on_retry || idle->on_settle || !idle->in_flight.empty() ||
          !idle->parked.empty() || !idle->queued.empty())
        continue;
      conn_index.erase(idle->key);
      if (last_conn == idle) last_conn = nullptr;
      live_conns[i] = live_conns.back();
      live_conns.pop_back();
      conns.release(idle);
    }
    c = conns.acquire();
    if (c == nullptr) return nullptr;
  }
  c->key = key;
  c->node = node_id;
  c->port = port;
  c->priority = priority;
  (void)conn_index.insert(key, static_cast<std::uint32_t>(conns.handle_of(c)));
  live_conns.push_back(c);
  return last_conn = c;
}

Status Port::Impl::start(OpKind kind, const Completion& done, std::uint8_t priority,
                         std::uint32_t node_id, unsigned port, std::byte* local,
                         std::uint64_t remote, std::size_t length, unsigned size) noexcept {
  if (closed) return Status::not_initialized;
  if (priority >= priority_count || node_id >= node_count || port > 0xffff ||
      length > max_message || (length > 0 && local == nullptr))
    return Status::invalid_argument;
  if (kind == OpKind::send &&
      (size < min_size || size > max_size || length > max_length_for_size(size)))
    return Status::invalid_argument;
  if (send_held == 0) return Status::no_resource;
  Connection* c = connection(priority, node_id, static_cast<std::uint16_t>(port), true);
  if (c == nullptr) return Status::no_resource;
  Op* op = ops.acquire();
  if (op == nullptr) return Status::no_resource;
  op->kind = kind;
  op->owner = this;
  op->done = done;
  op->conn = c;
  op->size = static_cast<std::uint8_t>(size);
  op->local = local;
  op->remote = remote;
  op->length = static_cast<std::uint32_t>(length);
  if (length > 0 && length <= stage_bytes && kind != OpKind::get && free_stage_count != 0) {
    // GM's client leaves the bytes alone until the callback; a copy now
    // reads what the core would read later, without a region per message.
    const std::uint32_t slot = free_stages[--free_stage_count];
    base::copy_bytes(stage_store.data() + std::size_t{slot} * stage_bytes, local, length);
    op->stage = slot + 1;
  } else if (length > 0) {
    auto r = core().validate(local, length);
    if (!r) {
      ops.release(op);
      return r.status();
    }
    op->region = *r;
  }
  --send_held;
  if (c->queued.empty() && c->failures == 0) {
    // Nothing ahead of it and the connection enabled: what drain() would
    // do with a queue of one, without the push and pop.
    if (Status s = post(op); s == Status::no_resource) {
      c->queued.push(op);
      wait_for_room(c);
    } else if (s != Status::ok) {
      fail_or_park(c, op, unreachable(s));
    }
    return Status::ok;
  }
  c->queued.push(op);
  drain(c);
  return Status::ok;
}

Status Port::Impl::resume_or_drop(bool drop, const Completion& done, std::uint8_t priority,
                                  std::uint32_t node_id, unsigned port) noexcept {
  if (closed) return Status::not_initialized;
  if (priority >= priority_count || node_id >= node_count || port > 0xffff)
    return Status::invalid_argument;
  Connection* c = connection(priority, node_id, static_cast<std::uint16_t>(port), false);
  if (c == nullptr || c->failures == 0) return Status::invalid_argument;
  if (send_held == 0) return Status::no_resource;
  Op* op = ops.acquire();
  if (op == nullptr) return Status::no_resource;
  op->kind = drop ? OpKind::drop : OpKind::resume;
  op->owner = this;
  op->done = done;
  op->conn = c;
  --send_held;
  --c->failures;
  Fifo<Op> next;
  if (drop) {
    // A resume or drop still queued for core room answers an earlier
    // failure: it still goes, ahead of this one (completing it unsent left
    // the target's stream suspended for good). The rest is dropped.
    for (Fifo<Op>* list : {&c->parked, &c->queued})
      while (Op* o = list->pop()) {
        if (is_control(o->kind)) {
          next.push(o);
          continue;
        }
        o->replied = true;
        o->reply_status = Status::dropped;
        complete(o);
      }
    next.push(op);
  } else {
    next.push(op);  // the control goes first: the target must see it before what follows
    if (c->failures == 0) next.splice(c->parked);
  }
  next.splice(c->queued);
  c->queued = next;
  drain(c);
  return Status::ok;
}

Status Port::Impl::post(Op* op) noexcept {
  Connection* c = op->conn;
  core::SendArgs a;
  a.cookie = tagged(op, CookieTag::op_send);
  a.peer = c->node;
  a.priority = c->priority;
  a.source_port = static_cast<std::uint16_t>(id);
  a.destination_port = c->port;
  a.upper = wire::Upper::port;
  // Not zeroed: each form writes every byte of the length it sends.
  std::array<std::byte, wire::PortHeader::size> bytes;
  Stream* piggyback = nullptr;
  if (op->kind == OpKind::send) {
    // The acks we owe that port on this priority ride along in the tag,
    // unless answers already wait in line: they must leave in order.
    if (reply_retry.empty() && !node.older_answers_wait(id, c->node, opened_at))
      piggyback = stream(c->priority, c->node, c->port, false);
    std::uint64_t tag = 0;
    std::uint16_t peer_epoch = 0;
    if (piggyback && piggyback->owed_acks != 0) {
      tag = piggyback->owed_acks;
      peer_epoch = piggyback->sender_epoch;
    }
    // start() checked the size and length: the compact form is written
    // without encode_compact's re-check (the most common header we send).
    wire::write_compact_send(std::span(bytes).first<wire::PortHeader::compact_size>(), op->size,
                             epoch, peer_epoch, tag);
    a.header = std::span(bytes).first(wire::PortHeader::compact_size);
  } else {
    wire::PortHeader h;
    h.priority = c->priority;
    h.sending_port = a.source_port;
    h.receiving_port = c->port;
    h.length = op->length;
    h.epoch = epoch;
    switch (op->kind) {
      case OpKind::send:
        break;  // above
      case OpKind::put:
        h.kind = wire::PortKind::put;
        h.remote_address = op->remote;
        break;
      case OpKind::get:
        h.kind = wire::PortKind::get_request;
        h.remote_address = op->remote;
        h.cookie = static_cast<std::uint64_t>(ops.handle_of(op));
        break;
      case OpKind::resume:
        h.kind = wire::PortKind::resume;
        h.length = 0;
        break;
      case OpKind::drop:
        h.kind = wire::PortKind::drop;
        h.length = 0;
        break;
    }
    const Result<std::size_t> encoded = wire::encode(h, bytes);
    if (!encoded) return Status::internal;
    a.header = std::span(bytes).first(*encoded);
  }
  const bool payload = op->kind == OpKind::send || op->kind == OpKind::put;
  if (payload && op->length > 0) {
    if (op->stage != 0) {
      a.region = &stage_region;
      a.offset = std::size_t{op->stage - 1} * stage_bytes;
    } else {
      a.region = &op->region;
    }
    a.length = op->length;
  }
  std::uint32_t* in_flight = nullptr;
  if (!is_control(op->kind)) {
    in_flight = &node.data_in_flight[c->priority][c->node];
    if (*in_flight >= node.data_limit(c->node)) {
      node.limit_waiting = true;  // retried when a credit comes back
      return Status::no_resource;
    }
  }
  Status s = core().send(a);
  if (s == Status::ok) {
    if (in_flight) {
      ++*in_flight;
      op->holds_credit = true;
    }
    if (piggyback && piggyback->owed_acks != 0) {
      piggyback->owed_acks = 0;
      // Nothing left to flush: alone on the ack list (a ping-pong), it
      // leaves it now instead of at the next poll's flush_acks().
      if (ack_head == piggyback && piggyback->next == nullptr) {
        ack_head = nullptr;
        piggyback->on_ack_list = false;
      }
    }
    op->core_busy = true;
    ++pinned;
    c->in_flight.push(op);
  }
  return s;
}

void Port::Impl::drain(Connection* c) noexcept {
  while (Op* op = c->queued.head) {
    // Controls go out even while the connection is disabled: they are what
    // enables it again at the target.
    if (c->failures > 0 && !is_control(op->kind)) break;
    c->queued.pop();
    Status s = post(op);
    if (s == Status::ok) continue;
    if (s == Status::no_resource) {
      c->queued.push_front(op);
      return wait_for_room(c);
    }
    fail_or_park(c, op, unreachable(s));
  }
}

void Port::Impl::wait_for_room(Connection* c) noexcept {
  if (c->on_retry) return;
  c->on_retry = true;
  c->next = retry_head;
  retry_head = c;
}

void Port::Impl::retry_sends() noexcept {
  Connection* list = retry_head;
  retry_head = nullptr;
  while (Connection* c = list) {
    list = c->next;
    c->on_retry = false;
    c->next = nullptr;
    drain(c);
  }
}

void Port::Impl::fail_or_park(Connection* c, Op* op, Status why) noexcept {
  if (is_control(op->kind)) {
    // The target is gone: nothing to enable there; the token comes back.
    op->replied = true;
    op->reply_status = Status::ok;
    return complete(op);
  }
  if (c->failures == 0) {
    ++c->failures;
    op->counted = true;
    op->replied = true;
    op->reply_status = why;
    return complete(op);
  }
  // Already disabled: this op waits like a queued one for resume or drop.
  op->replied = false;
  op->core_busy = false;
  op->local_status = Status::ok;
  c->parked.push(op);
}

void Port::Impl::on_send_finalized(Op* op, Status s) noexcept {
  --pinned;
  op->core_busy = false;
  if (s != Status::ok) op->local_status = s;
  if (closed) {
    if (!op->landing) {
      release_source(op);
      ops.release(op);
    }
    return;
  }
  settle(op->conn);
}

void Port::Impl::on_landing_finalized(Op* op, Status s) noexcept {
  --pinned;
  op->landing = false;
  if (s != Status::ok) op->local_status = s;
  if (closed) {
    if (!op->core_busy) {
      release_source(op);
      ops.release(op);
    }
    return;
  }
  settle(op->conn);
}

/// Completes the ops at the head of `c` that are done, in order.
void Port::Impl::settle(Connection* c) noexcept {
  while (Op* op = c->in_flight.head) {
    if (op->core_busy || op->landing) return;
    if (op->replied || op->local_status != Status::ok) release_credit(c, op);
    if (op->replied && op->reply_status == Status::in_progress) {
      // A nack for an op behind a failure: it waits for resume or drop
      // (or, the failure resumed meanwhile, fails with the nack's reason).
      c->in_flight.pop();
      fail_or_park(c, op, op->parked_reason);
      continue;
    }
    if (op->replied) {
      c->in_flight.pop();
      complete(op);
      continue;
    }
    if (op->local_status != Status::ok) {
      c->in_flight.pop();
      fail_or_park(c, op, unreachable(op->local_status));
      continue;
    }
    return;  // waits for the target's answer
  }
}

void Port::Impl::release_credit(const Connection* c, Op* op) noexcept {
  if (!op->holds_credit) return;
  op->holds_credit = false;
  --node.data_in_flight[c->priority][c->node];
  if (node.limit_waiting) {
    node.limit_waiting = false;  // set again by a send still refused
    node.core.owe_send_room();
  }
}

void Port::Impl::complete(Op* op) noexcept {
  Connection* c = op->conn;
  release_source(op);
  Status st = Status::ok;
  if (!is_control(op->kind)) {
    st = op->reply_status != Status::ok   ? op->reply_status
         : op->local_status != Status::ok ? unreachable(op->local_status)
                                          : Status::ok;
    if (st != Status::ok && st != Status::dropped && !op->counted) {
      // Data lost after the target accepted it: a reported failure too.
      ++c->failures;
      op->counted = true;
    }
  }
  op->reply_status = st;
  op->conn = nullptr;
  push_sent(op);
}

/// The first op of `c` the target has not answered yet.
static Op* first_unanswered(Connection* c) noexcept {
  for (Op* op = c->in_flight.head; op != nullptr; op = op->next)
    if (!op->replied) return op;
  return nullptr;
}

void Port::Impl::apply_acks(Connection* c, std::uint32_t count) noexcept {
  for (std::uint32_t i = 0; i < count; ++i) {
    Op* op = first_unanswered(c);
    // Only its get_reply answers a get (targets hold acks back while a
    // reply waits): an ack reaching one is forged, and would end it `ok`
    // with nothing landed.
    if (op == nullptr || op->kind == OpKind::get) break;
    op->replied = true;
    op->reply_status = Status::ok;
    // The target took it: a send after this arrival need not wait for the
    // settle at the next poll to find the credit (settle() would release
    // it there; it is only ever released once).
    if (!op->core_busy && !op->landing) release_credit(c, op);
  }
}

void Port::Impl::on_piggyback(std::uint8_t priority, std::uint32_t node_id, std::uint16_t port,
                              std::uint64_t acks) noexcept {
  Connection* c = connection(priority, node_id, port, false);
  if (c == nullptr || acks > 0xffff'ffff) return;
  // Matched now, in order with every other answer (the ops are marked
  // replied), but completed from the next poll: the arrival's receive
  // event, which the client is waiting for to send its reply, is not
  // queued behind a SENT event it must first hand to unknown().
  apply_acks(c, static_cast<std::uint32_t>(acks));
  if (!c->on_settle) {
    c->on_settle = true;
    c->settle_next = settle_head;
    settle_head = c;
  }
}

void Port::Impl::settle_acked() noexcept {
  Connection* list = settle_head;
  settle_head = nullptr;
  while (Connection* c = list) {
    list = c->settle_next;
    c->on_settle = false;
    c->settle_next = nullptr;
    settle(c);
  }
}

void Port::Impl::on_reply(const core::Arrival& a, const wire::PortHeader& h) noexcept {
  if (h.peer_epoch != epoch) {
    // For the port that had this number before: it is closed.
    (void)core().recv(a.handle, nullptr, nullptr, 0, 0, 0);
    return;
  }
  Connection* c = connection(h.priority, a.source, h.sending_port, false);
  if (h.kind == wire::PortKind::get_reply) {
    // Get data: the cookie names the op, which must be the next unanswered.
    Op* op = ops.lookup(static_cast<base::Pool<Op>::Handle>(h.cookie & 0xffff'ffff));
    if (c == nullptr || op == nullptr || op != first_unanswered(c) || op->kind != OpKind::get ||
        h.length != op->length || h.cookie > 0xffff'ffff) {
      PIER_LOG(debug, "port", "port {}: get reply from node {} matches no get", id, a.source);
      (void)core().recv(a.handle, nullptr, nullptr, 0, 0, 0);
      return;
    }
    op->replied = true;
    op->reply_status = Status::ok;
    if (op->length == 0) {
      (void)core().recv(a.handle, nullptr, nullptr, 0, 0, 0);
    } else if (core().recv(a.handle, tagged(op, CookieTag::op_landing), &op->region, 0, op->length,
                           op->length) == Status::ok) {
      op->landing = true;
      ++pinned;
    } else {
      op->reply_status = Status::internal;
    }
    return settle(c);
  }
  (void)core().recv(a.handle, nullptr, nullptr, 0, 0, 0);
  if (c == nullptr) return;
  if (h.kind == wire::PortKind::ack) {
    apply_acks(c, static_cast<std::uint32_t>(h.tag));  // the decoder bounds it
  } else if (Op* op = first_unanswered(c)) {
    auto why = static_cast<Status>(h.tag);  // a nack: the decoder checked the range
    // A nack that names no failure (in_progress: a parked op would then hide
    // the failure it counts, and the connection would stall unreported).
    if (is_success(why)) why = Status::malformed;
    op->replied = true;
    if (is_control(op->kind)) {
      op->reply_status = Status::ok;
    } else if (why == Status::dropped) {
      op->reply_status = Status::dropped;
    } else if (c->failures == 0) {
      ++c->failures;
      op->counted = true;
      op->reply_status = why;
    } else {
      op->reply_status = Status::in_progress;  // park it in settle()
      op->parked_reason = why;                 // reported with it, should it be the one that counts
    }
  }
  settle(c);
}

void Port::Impl::fail_unanswered(Connection* c) noexcept {
  // No answer will come for what the target had; what the core still held
  // is finalized with the error (core.hpp).
  for (Op* op = c->in_flight.head; op != nullptr; op = op->next)
    if (!op->replied && !op->core_busy) op->local_status = Status::broken;
  settle(c);
}

void Port::Impl::on_peer_failed(std::uint32_t node_id) noexcept {
  for (Connection* c : live_conns)
    if (c->node == node_id) fail_unanswered(c);
  forget_streams_of(node_id);
}

void Port::Impl::close_sender() noexcept {
  // A connection left disabled (a failure never resumed nor dropped) holds
  // the target's stream suspended, with what we sent behind the failure;
  // ops still unanswered may fail there after we are gone and suspend it
  // then. Drop it there, as drop_sends would, once per failure and at least
  // once while ops are out, so the target lets go of all of it.
  for (Connection* c : live_conns) {
    // A resume or drop still queued for core room counted its failure as
    // answered already: it goes out as a drop now, or the target's stream
    // would stay suspended for good.
    std::uint32_t unsent_controls = 0;
    for (Op* op = c->queued.head; op != nullptr; op = op->next)
      if (is_control(op->kind)) ++unsent_controls;
    const std::uint32_t drops =
        std::max<std::uint32_t>(c->failures + unsent_controls, c->in_flight.empty() ? 0 : 1);
    for (std::uint32_t i = 0; i < drops; ++i)
      (void)send_answer(c->priority, c->node, c->port, 0, wire::PortKind::drop, 0);
  }
  while (Connection* c = settle_head) {  // what they answered goes with the rest
    settle_head = c->settle_next;
    c->on_settle = false;
    c->settle_next = nullptr;
  }
  // Ops the core no longer holds give their regions back now; the others
  // when their lib_finalize comes (on_*_finalized of a closed port).
  for (Connection* c : live_conns)
    for (Fifo<Op>* list : {&c->in_flight, &c->parked, &c->queued})
      while (Op* op = list->pop()) {
        release_credit(c, op);
        if (op->core_busy || op->landing) continue;
        release_source(op);
        ops.release(op);
      }
}

}  // namespace pier::port
