// pier core: the small track of a gate: posting packets on the primary rail
// in order, credits, sequence numbers and control packets.
//
// Flow control (seed 004's tokens): per gate and priority the sender holds
// `credits` (what the receiver granted in its address); every eager or rts
// packet spends one and carries the next sequence number. The receiver owes
// a credit back once the packet's slot is free again (recv() called) and
// returns owed credits in the credit_return of any packet of that priority
// (a credit packet once half the grant is owed). Every packet is numbered
// per (gate, priority): the receiver delivers in order and drops
// duplicates, so a packet re-sent after a rail failed cannot count twice,
// credits included. rtr, ack and credit packets spend no credit (they are
// consumed on arrival): a sender out of credits never blocks what gives them
// back. The
// two priorities have separate credits and queues: neither waits for the
// other.
#include <cstring>

#include "base/log.hpp"
#include "core/impl.hpp"

namespace pier::core {

namespace {
/// Every core packet on a small track is numbered: delivered in order,
/// duplicates dropped by number, a loss seen as a hole.
bool is_sequenced(wire::PacketType t) noexcept {
  return t != wire::PacketType::data;
}
/// Packets that may wait in a receiver slot; they need a credit.
bool spends_credit(wire::PacketType t) noexcept {
  return t == wire::PacketType::eager || t == wire::PacketType::rts;
}
}  // namespace

Status Core::Impl::post_small(Gate& gate, SmallSend& s) noexcept {
  // A rail that failed during this flush leaves its packets in flight to
  // be sent again first, at the reap: nothing new overtakes them.
  if (gate.reap_due) return Status::no_resource;
  Rail* rail = gate.primary_rail();
  if (rail == nullptr) return Status::no_resource;
  wire::FrameHeader h = s.frame;
  Priority& p = gate.prio[h.priority];
  const bool sequenced = is_sequenced(h.type);
  const bool spends = spends_credit(h.type);
  std::uint16_t give = 0;
  if (s.sequenced) {
    give = s.credit_return;  // a re-send after failover: the very same frame
  } else if (sequenced) {
    if (spends && p.credits == 0) return Status::no_resource;
    h.sequence = p.send_seq;
    give = static_cast<std::uint16_t>(std::min<std::uint32_t>(p.owed, 0xffff));
  }
  h.credit_return = give;
  (void)wire::encode_into(h, std::span(s.prefix).first<wire::FrameHeader::size>());
  const std::size_t total = s.prefix_len + s.payload_len;

  Status st;
  driver::Instance& inst = *rail->small;
  s.pkt = driver::Packet{};
  s.posted = &s.pkt;
  if (rail->props.caps.send_buf) {
    st = inst.send_buf_get(s.pkt);
    if (st == Status::ok) {
      if (s.pkt.buf_len < total) {
        // The driver offered less than its max_packet: a driver bug; the
        // buffer cannot be given back without sending it, so the rail goes.
        PIER_LOG(error, "core", "rail {}: send buffer of {} bytes for a {}-byte packet", rail->spec,
                 s.pkt.buf_len, total);
        st = Status::internal;
      } else {
        std::memcpy(s.pkt.buf, s.prefix.data(), s.prefix_len);
        if (s.payload_len) std::memcpy(s.pkt.buf + s.prefix_len, s.payload, s.payload_len);
        st = inst.send_buf_post(s.pkt, total);
      }
    }
  } else {
    s.iov[0] = {s.prefix.data(), s.prefix_len};
    std::uint32_t n = 1;
    if (s.payload_len) s.iov[n++] = {const_cast<std::byte*>(s.payload), s.payload_len};
    s.pkt.set_iovec(s.iov.data(), n);
    st = inst.send_post(s.pkt);
  }
  if (st == Status::in_progress) st = inst.send_poll(s.pkt);  // N4: may be done already
  if (st == Status::no_resource) return st;
  if (!is_success(st)) {
    rail_failed(gate, *rail, st);
    return Status::no_resource;  // stays queued: the next primary, or the gate fails
  }
  if (sequenced && !s.sequenced) {
    p.owed -= give;
    s.credit_return = give;
    if (spends) --p.credits;
    ++p.send_seq;
    s.sequenced = true;
    s.frame.sequence = h.sequence;
  }
  if (st == Status::in_progress) rail->inflight.push(&s);
  return st;
}

void Core::Impl::on_small_sent(Gate& gate, SmallSend& s, Status status) noexcept {
  (void)gate;
  if (s.kind == SmallSend::Kind::control) {
    ctrls_.release(static_cast<Ctrl*>(s.owner));
    return;
  }
  SendMsg& m = *static_cast<SendMsg*>(s.owner);
  if (m.rendezvous) {
    if (m.state == SendState::posted) m.state = SendState::wait_rtr;
    rdv_send_step(m);
  } else {
    m.state = SendState::sent;
    eager_step(m);
  }
  (void)status;
}

void Core::Impl::poll_inflight(Gate& gate, Rail& rail) noexcept {
  while (SmallSend* s = rail.inflight.front()) {
    Status st = rail.small->send_poll(*s->posted);
    if (st == Status::in_progress) return;
    if (st != Status::ok) {
      rail_failed(gate, rail, st);  // reap re-sends what is still in flight
      return;
    }
    rail.inflight.pop();
    if (s->posted == &rail.fast_pkt) rail.fast_busy = false;
    on_small_sent(gate, *s, Status::ok);
  }
}

Ctrl* Core::Impl::new_ctrl(Gate& gate, wire::PacketType type, std::uint8_t priority,
                           std::span<const std::byte> body, std::uint16_t rail_index) noexcept {
  (void)gate;
  Ctrl* c = ctrls_.acquire();
  if (c == nullptr) return nullptr;
  SmallSend& s = c->send;
  s.kind = SmallSend::Kind::control;
  s.owner = c;
  s.priority = priority;
  s.frame.type = type;
  s.frame.priority = priority;
  s.frame.upper = wire::Upper::none;
  s.frame.source_endpoint = rank_;
  s.frame.destination_port = rail_index;
  s.frame.payload_length = static_cast<std::uint32_t>(body.size());
  if (!body.empty())
    std::memcpy(s.prefix.data() + wire::FrameHeader::size, body.data(), body.size());
  s.prefix_len = wire::FrameHeader::size + body.size();
  return c;
}

void Core::Impl::flush(Gate& gate) noexcept {
  if (gate.state != GateState::connected || gate.reap_due) return;
  if (!small_work(gate)) return;
  // Control packets first: they free the peer's resources and ours.
  while (Ctrl* c = gate.ctrl_pending.front()) {
    Status st = post_small(gate, c->send);
    if (st == Status::no_resource) break;
    gate.ctrl_pending.pop();
    if (st == Status::ok) on_small_sent(gate, c->send, Status::ok);
  }
  for (std::size_t p = wire::priority_count; p-- > 0;) {
    Priority& prio = gate.prio[p];
    while (SendMsg* m = prio.pending.front()) {
      Status st = post_small(gate, m->small);
      if (st == Status::no_resource) break;
      prio.pending.pop();
      m->state = SendState::posted;
      if (m->rendezvous) prefetch(*m);
      if (st == Status::ok) on_small_sent(gate, m->small, Status::ok);
    }
    if (prio.owed >= credit_threshold_ && gate.ctrl_pending.empty()) {
      Ctrl* c = new_ctrl(gate, wire::PacketType::credit, static_cast<std::uint8_t>(p), {});
      if (c == nullptr) continue;
      Status st = post_small(gate, c->send);
      if (st == Status::no_resource) {
        ctrls_.release(c);
        continue;
      }
      ++stats_.credit_packets;
      if (st == Status::ok) ctrls_.release(c);
    }
  }
}

}  // namespace pier::core
