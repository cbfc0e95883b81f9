// pier core: the rendezvous protocol, with multi-rail splitting.
//
//   sender                                   receiver
//   rts (frame + RtsHeader + upper header) ->  lib_parse -> recv(dest, mlen)
//                                              plan chunks over rails (split.cpp)
//                                              per chunk: post a large-track
//                                              receive, then send its rtr
//                                              (tcp: the next chunk's rtr
//                                              goes while this one flows)
//   <- rtr (offset, length, rdv_data; the frame's destination_port names
//      the rail)
//   post the chunk on that rail's large track with rdv_data
//                                              chunks complete -> lib_finalize
//   <- ack (ok or truncated)                   (mlen < rlen: only mlen was
//   ack and every chunk done -> lib_finalize    asked for; the rest never moves)
//
// A large track carries one transfer at a time in each direction, in FIFO
// order on both sides, so a chunk's data always meets its own receive.
// Duplicated rtrs (a small packet re-sent after a rail failed) are
// recognised by (offset, length, rail) and ignored. A chunk whose rail dies
// is re-requested by the receiver on a live rail; the sender drops its copy.
//
// Sender states: queued -> posted (rts in the driver) -> wait_rtr ->
// completed once acked with no chunk in flight. Receiver: parsing ->
// (deferred) -> receiving -> acking -> completed.
#include <cstring>
#include <string_view>

#include "base/log.hpp"
#include "core/impl.hpp"
#include "core/split.hpp"

namespace pier::core {

namespace {

using Impl = Core::Impl;

struct SendHandler {
  std::string_view name;
  SendState (*fn)(Impl& core, SendMsg& m) noexcept;
};

SendState send_waiting(Impl&, SendMsg& m) noexcept {
  return m.state;
}
SendState send_sent(Impl&, SendMsg&) noexcept {
  return SendState::wait_rtr;
}
SendState send_wait_rtr(Impl& core, SendMsg& m) noexcept {
  if (!m.acked || m.active_chunks != 0) return SendState::wait_rtr;
  core.unfetch(m);                  // a prefetch no transfer used (truncated to nothing)
  core.complete_send(m, m.status);  // releases m
  return SendState::completed;
}
SendState send_done(Impl&, SendMsg&) noexcept {
  return SendState::completed;
}

constexpr SendHandler send_table[] = {
    {"queued", send_waiting},    {"posted", send_waiting}, {"sent", send_sent},
    {"wait_rtr", send_wait_rtr}, {"completed", send_done},
};
static_assert(std::size(send_table) == static_cast<std::size_t>(SendState::completed) + 1);

struct RecvHandler {
  std::string_view name;
  RecvState (*fn)(Impl& core, Incoming& in) noexcept;
};

RecvState recv_waiting(Impl&, Incoming& in) noexcept {
  return in.state;
}
RecvState recv_receiving(Impl&, Incoming& in) noexcept {
  return in.active_chunks == 0 ? RecvState::acking : RecvState::receiving;
}
RecvState recv_acking(Impl& core, Incoming& in) noexcept {
  Gate& gate = *in.gate;
  if (gate.state != GateState::failed) {
    wire::AckHeader ack;
    ack.message_id = in.sender_id;
    ack.result = in.ack_result;
    std::array<std::byte, wire::AckHeader::size> body{};
    (void)wire::encode(ack, body);
    Ctrl* c = core.new_ctrl(gate, wire::PacketType::ack, in.priority, body);
    if (c == nullptr) {
      gate.acks_waiting = true;  // progress retries
      return RecvState::acking;
    }
    gate.ctrl_pending.push(c);
  }
  core.complete_recv(in, in.status);  // releases in
  return RecvState::completed;
}
RecvState recv_done(Impl&, Incoming&) noexcept {
  return RecvState::completed;
}

constexpr RecvHandler recv_table[] = {
    {"parsing", recv_waiting}, {"deferred", recv_waiting}, {"receiving", recv_receiving},
    {"acking", recv_acking},   {"completed", recv_done},
};
static_assert(std::size(recv_table) == static_cast<std::size_t>(RecvState::completed) + 1);

bool rail_usable(const Rail& r) noexcept {
  return r.state == RailState::connected && !r.dying;
}

}  // namespace

void Core::Impl::rdv_send_step(SendMsg& m) noexcept {
  for (;;) {
    const SendState now = m.state;
    const SendState next = send_table[static_cast<std::size_t>(now)].fn(*this, m);
    PIER_LOG(data, "core", "rdv send {} -> {}", send_table[static_cast<std::size_t>(now)].name,
             send_table[static_cast<std::size_t>(next)].name);
    if (next == SendState::completed || next == now) return;
    m.state = next;
  }
}

void Core::Impl::rdv_recv_step(Incoming& in) noexcept {
  for (;;) {
    const RecvState now = in.state;
    const RecvState next = recv_table[static_cast<std::size_t>(now)].fn(*this, in);
    PIER_LOG(data, "core", "rdv recv {} -> {}", recv_table[static_cast<std::size_t>(now)].name,
             recv_table[static_cast<std::size_t>(next)].name);
    if (next == RecvState::completed || next == now) return;
    in.state = next;
  }
}

Status Core::Impl::rdv_send(SendMsg& m) noexcept {
  Gate& gate = *m.gate;
  ++stats_.rdv_sent;
  m.state = SendState::queued;
  Priority& p = gate.prio[m.small.priority];
  const bool first = p.pending.empty();
  p.pending.push(&m);
  if (gate.state == GateState::idle) start_connect(gate);
  if (first && gate.state == GateState::connected) flush(gate);
  return Status::ok;
}

void Core::Impl::prefetch(SendMsg& m) noexcept {
  Gate& gate = *m.gate;
  if (m.chunks[0] != nullptr) return;  // once per message
  // The rts is out: let the driver prepare the whole message (pin,
  // register) on the rail most likely to carry it while rts and rtr travel.
  if (Rail* rail = gate.primary_rail(); rail && rail->props.caps.prefetch) {
    Chunk* c = chunks_.acquire();
    if (c != nullptr) {
      m.chunks[0] = c;
      c->owner = &m;
      c->rail = gate.primary;
      c->offset = 0;
      c->length = m.length;
      c->iov = {const_cast<std::byte*>(m.data), m.length};
      c->pkt.set_iovec(&c->iov, 1);
      c->prefetched = rail->large->send_prefetch(c->pkt) == Status::ok;
      stats_.prefetches += c->prefetched;
    }
  }
}

void Core::Impl::unfetch(SendMsg& m) noexcept {
  for (Chunk* c : m.chunks) {
    if (c == nullptr || !c->prefetched) continue;
    c->prefetched = false;
    Rail& rail = m.gate->rails[c->rail];
    if (rail_usable(rail)) (void)rail.large->send_unfetch(c->pkt);
  }
}

Status Core::Impl::rts_arrival(Gate& gate, const wire::FrameHeader& h,
                               std::span<const std::byte> payload, int slot) noexcept {
  auto rts = wire::RtsHeader::decode(payload);
  if (!rts) {
    gate.give_slot(slot);
    return Status::malformed;
  }
  Incoming* in = nullptr;
  if (Status s = acquire_incoming(gate, h.priority, in); s != Status::ok) {
    gate.give_slot(slot);
    return s;
  }
  in->rendezvous = true;
  in->sender_id = rts->message_id;
  Status s = deliver(gate, h, payload.subspan(wire::RtsHeader::size), rts->total_length, *in);
  // The upper header was only needed during lib_parse.
  gate.give_slot(slot);
  return s;
}

Status Core::Impl::rdv_recv(Incoming& in, void* cookie, std::byte* dest,
                            std::size_t mlen) noexcept {
  Gate& gate = *in.gate;
  in.cookie = cookie;
  in.dest = dest;
  in.mlen = mlen;
  // The rts's credit stays spent until the data has landed (complete_recv
  // gives it back, on the ack): a peer holds at most its grant of our
  // receive states per priority, so it cannot open rendezvous without end
  // and leave none for other peers.
  in.ack_result = mlen < in.length ? wire::AckResult::truncated : wire::AckResult::ok;
  ++stats_.rdv_received;
  if (in.status != Status::ok || gate.state == GateState::failed) {
    complete_recv(in, in.status != Status::ok ? in.status : gate.failure);
    return Status::ok;
  }
  in.state = RecvState::receiving;
  if (mlen > 0) {
    std::array<std::uint32_t, max_rails> bw{};
    for (std::size_t i = 0; i < gate.rails.size() && i < max_rails; ++i)
      if (rail_usable(gate.rails[i]))
        bw[i] = std::max<std::uint32_t>(1, gate.rails[i].props.profile.bandwidth_mbps);
    std::array<Share, max_rails> shares{};
    const std::size_t n =
        split(mlen, std::span(bw.data(), gate.rails.size()), gate.split_min, shares);
    if (n == 0) {
      complete_recv(in, Status::broken);
      return Status::ok;
    }
    for (std::size_t i = 0; i < n; ++i) {
      // The pool holds max_chunks per message state: never empty here.
      Chunk& c = *(in.chunks[in.used_chunks++] = chunks_.acquire());
      c.state = Chunk::State::queued;
      c.owner = &in;
      c.rail = shares[i].rail;
      c.offset = shares[i].offset;
      c.length = shares[i].length;
      c.rtr_sent = false;
      gate.rails[c.rail].large_recv.push(&c);
      ++in.active_chunks;
    }
    // Post the receives and send the rtrs now rather than at the next pass.
    for (std::size_t i = 0; i < n; ++i) large_step(gate, gate.rails[shares[i].rail]);
    flush(gate);
    return Status::ok;
  }
  rdv_recv_step(in);
  flush(gate);
  return Status::ok;
}

Status Core::Impl::rtr_arrival(Gate& gate, const wire::FrameHeader& h,
                               std::span<const std::byte> payload) noexcept {
  auto rtr = wire::RtrHeader::decode(payload);
  if (!rtr) return Status::malformed;
  if (h.destination_port >= gate.rails.size()) return Status::malformed;
  if ((rtr->message_id >> 32) != 0) return Status::malformed;
  SendMsg* m = sends_.lookup(static_cast<base::Pool<SendMsg>::Handle>(rtr->message_id));
  if (m == nullptr || m->gate != &gate || !m->rendezvous) {
    // The message already ended (failed over, or failed): nothing to send.
    PIER_LOG(debug, "core", "rtr for unknown message {} from rank {}", rtr->message_id, gate.peer);
    return Status::ok;
  }
  if (rtr->length == 0 || rtr->offset > m->length || rtr->length > m->length - rtr->offset)
    return Status::malformed;
  Rail& rail = gate.rails[h.destination_port];
  if (!rail_usable(rail)) return Status::ok;  // the receiver re-requests once it sees the rail die
  Chunk** free_chunk = nullptr;
  for (Chunk*& p : m->chunks) {
    if (p == nullptr || p->state == Chunk::State::lost || p->state == Chunk::State::unused) {
      if (!free_chunk) free_chunk = &p;
    } else if (p->offset == rtr->offset && p->length == rtr->length &&
               p->rail == h.destination_port) {
      return Status::ok;  // a duplicate of an rtr already served
    }
  }
  if (free_chunk == nullptr) return Status::malformed;
  // The pool holds max_chunks per message state: never empty here.
  if (*free_chunk == nullptr) *free_chunk = chunks_.acquire();
  Chunk& c = **free_chunk;
  // A prefetch serves only the transfer it described; anything else undoes it.
  const bool keep = c.prefetched && c.rail == h.destination_port && c.offset == rtr->offset &&
                    c.length == rtr->length;
  if (c.prefetched && !keep) {
    c.prefetched = false;
    Rail& was = gate.rails[c.rail];
    if (rail_usable(was)) (void)was.large->send_unfetch(c.pkt);
  }
  c.state = Chunk::State::queued;
  c.owner = m;
  c.rail = static_cast<std::uint8_t>(h.destination_port);
  c.offset = rtr->offset;
  c.length = rtr->length;
  if (!keep) c.pkt = driver::Packet{};
  stats_.prefetch_hits += keep;
  c.prefetched = false;  // the post consumes it
  c.pkt.rdv_len = rtr->rdv_len;
  std::memcpy(c.pkt.rdv_data.data(), rtr->rdv_data.data(), rtr->rdv_len);
  ++m->active_chunks;
  rail.large_send.push(&c);
  large_step(gate, rail);
  return Status::ok;
}

Status Core::Impl::ack_arrival(Gate& gate, std::span<const std::byte> payload) noexcept {
  auto ack = wire::AckHeader::decode(payload);
  if (!ack) return Status::malformed;
  if ((ack->message_id >> 32) != 0) return Status::malformed;
  SendMsg* m = sends_.lookup(static_cast<base::Pool<SendMsg>::Handle>(ack->message_id));
  if (m == nullptr || m->gate != &gate || !m->rendezvous || m->acked) return Status::ok;
  m->acked = true;
  if (ack->result == wire::AckResult::rejected) m->status = Status::rejected;
  if (ack->result == wire::AckResult::canceled) m->status = Status::canceled;
  if (m->state == SendState::wait_rtr) rdv_send_step(*m);
  return Status::ok;
}

void Core::Impl::chunk_lost(Incoming& in, Chunk& c) noexcept {
  Gate& gate = *in.gate;
  if (in.status == Status::ok && gate.state != GateState::failed) {
    for (std::size_t i = 0; i < gate.rails.size(); ++i) {
      if (!rail_usable(gate.rails[i])) continue;
      c.state = Chunk::State::queued;
      c.rail = static_cast<std::uint8_t>(i);
      c.rtr_sent = false;
      gate.rails[i].large_recv.push(&c);
      PIER_LOG(info, "core", "rank {}: chunk at {} re-requested on rail {}", gate.peer, c.offset,
               gate.rails[i].spec);
      return;
    }
  }
  PIER_LOG(debug, "core", "rank {}: chunk at {} lost with no rail to take it", gate.peer, c.offset);
  c.state = Chunk::State::lost;
  --in.active_chunks;
  if (in.status == Status::ok) in.status = Status::broken;
  rdv_recv_step(in);
}

bool Core::Impl::send_rtr(Gate& gate, Rail& rail, Chunk& c) noexcept {
  const Incoming& in = *static_cast<const Incoming*>(c.owner);
  wire::RtrHeader rtr;
  rtr.message_id = in.sender_id;
  rtr.offset = c.offset;
  rtr.length = c.length;
  // A chunk asked for ahead of its post has none (its driver offers none).
  rtr.rdv_len = static_cast<std::uint8_t>(
      std::min<std::size_t>(c.pkt.rdv_len, wire::RtrHeader::rdv_capacity));
  std::memcpy(rtr.rdv_data.data(), c.pkt.rdv_data.data(), rtr.rdv_len);
  std::array<std::byte, wire::RtrHeader::size> body{};
  (void)wire::encode(rtr, body);
  const auto index = static_cast<std::uint16_t>(&rail - gate.rails.data());
  Ctrl* ctrl = new_ctrl(gate, wire::PacketType::rtr, in.priority, body, index);
  if (ctrl == nullptr) return false;
  gate.ctrl_pending.push(ctrl);
  c.rtr_sent = true;
  ++stats_.rtr_sent;
  return true;
}

void Core::Impl::ask_ahead(Gate& gate, Rail& rail, const Chunk& receiving) noexcept {
  // A driver whose large track takes a send before its receive is posted,
  // and whose receive has no rdv_data to hand over (tcp), lets the next
  // chunk's rtr go while this chunk's data still flows: the sender's data
  // then waits in the track, not for a round trip after every chunk (over
  // loopback tcp, 1 MiB messages moved at 0.78 times the bare driver's
  // rate before). Only one ahead: the track carries one transfer at a time
  // anyway. Its data stays behind this chunk's (FIFO on both sides), and
  // every chunk in large_recv is posted in turn, so it meets its own
  // receive. Only within one priority: small packets are ordered per
  // priority, so the sender could take an rtr of another priority before
  // this chunk's, and send that chunk's data into this chunk's receive
  // (found by a review).
  const driver::Caps& caps = rail.props.caps;
  if (caps.needs_rdv || caps.rdv_data) return;
  Chunk* next = receiving.next;
  if (next == nullptr || next->state != Chunk::State::queued || next->rtr_sent) return;
  if (static_cast<const Incoming*>(next->owner)->priority !=
      static_cast<const Incoming*>(receiving.owner)->priority)
    return;
  next->pkt = driver::Packet{};
  (void)send_rtr(gate, rail, *next);  // no room: sent when it is posted
}

void Core::Impl::large_step(Gate& gate, Rail& rail) noexcept {
  if (!rail_usable(rail)) return;
  driver::Instance& large = *rail.large;
  while (Chunk* c = rail.large_send.front()) {
    SendMsg& m = *static_cast<SendMsg*>(c->owner);
    Status st = Status::in_progress;
    if (c->state == Chunk::State::queued) {
      c->iov = {const_cast<std::byte*>(m.data + c->offset), c->length};
      c->pkt.set_iovec(&c->iov, 1);
      st = large.send_post(c->pkt);
      if (st == Status::no_resource) break;
      if (!is_success(st)) return rail_failed(gate, rail, st);
      c->state = Chunk::State::posted;
    }
    if (st == Status::in_progress) st = large.send_poll(c->pkt);
    if (st == Status::in_progress) break;
    if (st != Status::ok) return rail_failed(gate, rail, st);
    rail.large_send.pop();
    c->state = Chunk::State::done;
    --m.active_chunks;
    rdv_send_step(m);
  }
  while (Chunk* c = rail.large_recv.front()) {
    Incoming& in = *static_cast<Incoming*>(c->owner);
    if (c->state == Chunk::State::queued) {
      c->pkt = driver::Packet{};
      c->iov = {in.dest + c->offset, c->length};
      c->pkt.set_iovec(&c->iov, 1);
      Status st = large.recv_post(c->pkt);
      if (st == Status::no_resource) break;
      if (!is_success(st)) return rail_failed(gate, rail, st);
      c->state = Chunk::State::posted;
    }
    if (!c->rtr_sent && !send_rtr(gate, rail, *c)) break;  // retried at the next progress
    Status st = large.recv_poll(c->pkt);
    if (st == Status::in_progress) {
      ask_ahead(gate, rail, *c);
      break;
    }
    if (st != Status::ok && st != Status::truncated) return rail_failed(gate, rail, st);
    rail.large_recv.pop();
    c->state = Chunk::State::done;
    if (st == Status::truncated || c->pkt.length != c->length) {
      PIER_LOG(warn, "core", "rank {}: chunk of {} bytes came with {}", gate.peer, c->length,
               c->pkt.length);
      if (in.status == Status::ok) in.status = Status::malformed;
    }
    --in.active_chunks;
    rdv_recv_step(in);
  }
}

}  // namespace pier::core
