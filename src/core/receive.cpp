// pier core: small-track arrivals. Each packet is decoded (never trusted),
// its credits applied, and delivered in sequence per (gate, priority): a
// packet ahead of a hole waits in a slot, a packet behind it is a duplicate
// and dropped; a hole older than CORE_GAP_LIMIT_MS fails the gate. Anything malformed fails
// the gate (the peer is broken), never the process.
#include <cstring>

#include "base/log.hpp"
#include "core/impl.hpp"

namespace pier::core {

bool Core::Impl::poll_small_recv(Gate& gate, Rail& rail, int budget) noexcept {
  // A bounded batch, so one busy peer cannot starve the others.
  while (budget-- > 0) {
    if (const PollNext next = may_poll(gate, rail); next != PollNext::poll)
      return next == PollNext::later;
    driver::Instance& inst = *rail.small;
    Status s;
    if (rail.props.caps.recv_buf) {
      // The rail's packet, not a fresh one: the driver fills what it hands
      // out, and zeroing a packet on every empty poll is measurable.
      const Status st = inst.recv_poll(rail.rx);
      if (st == Status::in_progress) {
        rail.took_one = rail.burst = false;
        return false;
      }
      return recv_polled(gate, rail, st, budget + 1);
    }
    if (!rail.rx_posted) {
      rail.rx = driver::Packet{};
      rail.rx_iov = {rail.rx_buf.get(), rail.rx_capacity};
      rail.rx.set_iovec(&rail.rx_iov, 1);
      Status st = inst.recv_post(rail.rx);
      if (st == Status::no_resource) return true;
      if (!is_success(st)) {
        rail_failed(gate, rail, st);
        return false;
      }
      rail.rx_posted = true;
    }
    Status st = inst.recv_poll(rail.rx);
    if (st == Status::in_progress) return false;
    rail.rx_posted = false;
    if (st == Status::truncated) {
      s = Status::malformed;  // larger than the capacity we advertised
    } else if (st != Status::ok) {
      rail_failed(gate, rail, st);
      return false;
    } else {
      s = on_packet(gate, std::span<const std::byte>(rail.rx_buf.get(), rail.rx.length));
    }
    if (!packet_taken(gate, s)) return false;
  }
  return true;  // the budget ran out: more may wait
}

bool Core::Impl::recv_polled(Gate& gate, Rail& rail, Status st, int budget) noexcept {
  // poll_small_recv()'s loop for a recv_buf rail, from its first answer on.
  if (rail.took_one) {
    rail.took_one = false;
    rail.burst = true;
  }
  for (;;) {
    if (st != Status::ok) {
      rail_failed(gate, rail, st);
      return false;
    }
    driver::Instance& inst = *rail.small;
    driver::Packet& pkt = rail.rx;
    const Status s = on_packet(gate, std::span<const std::byte>(pkt.buf, pkt.buf_len));
    // N9: exactly once, after parsing; lib_parse copied what it wanted.
    (void)inst.recv_buf_release(pkt);
    if (!packet_taken(gate, s)) return false;
    if (quiet_arrival_ && !rail.burst && !rail.draining) {
      rail.took_one = true;
      return true;  // not looked at: more may wait
    }
    if (--budget <= 0) return true;  // the budget ran out: more may wait
    if (const PollNext next = may_poll(gate, rail); next != PollNext::poll)
      return next == PollNext::later;
    st = rail.small->recv_poll(rail.rx);
    if (st == Status::in_progress) return false;
  }
}

Status Core::Impl::on_packet(Gate& gate, std::span<const std::byte> bytes) noexcept {
  quiet_arrival_ = false;
  auto frame = wire::FrameHeader::decode(bytes);
  if (!frame) return frame.status();
  const wire::FrameHeader& h = *frame;
  if (h.payload_length != bytes.size() - wire::FrameHeader::size) return Status::malformed;
  if (h.source_endpoint != gate.peer) return Status::malformed;
  // Never more than we advertised (our receive capacity): a deferred or
  // stashed packet is copied into a slot of that size.
  if (bytes.size() > gate.slot_bytes) return Status::malformed;
  const auto payload = bytes.subspan(wire::FrameHeader::size);
  if (h.type == wire::PacketType::data || h.type == wire::PacketType::driver_local)
    return Status::malformed;  // the core sends neither on a small track
  Priority& p = gate.prio[h.priority];
  const auto ahead = static_cast<std::int32_t>(h.sequence - p.recv_seq);
  if (ahead < 0) {
    ++stats_.duplicates;
    return Status::ok;
  }
  if (ahead > 0) {
    // Wait for the hole to fill; a peer honouring its credits never has
    // more packets in flight than we have slots.
    if (static_cast<std::uint32_t>(ahead) > 8 * settings_.credits) return Status::malformed;
    for (const Stashed& st : p.stash)
      if (st.sequence == h.sequence) {
        ++stats_.duplicates;
        return Status::ok;
      }
    if (p.stash.size() == p.stash.capacity()) return Status::malformed;
    const int slot = gate.take_slot();
    if (slot < 0) return Status::malformed;
    std::memcpy(gate.slot(slot), bytes.data(), bytes.size());
    if (p.stash.empty()) p.stash_since_ns = base::now_ns();
    p.stash.push_back({h.sequence, slot, bytes.size(), h});
    ++stats_.reordered;
    return Status::ok;
  }
  if (p.stash.empty()) {
    // The common case: nothing waits behind a hole. Only a client that
    // polled from inside lib_parse outside a pass could stash meanwhile.
    quiet_arrival_ = h.type == wire::PacketType::eager;
    const Status s =
        quiet_arrival_ ? eager_in_order(gate, p, h, payload) : on_ordered(gate, h, payload, -1);
    if (s != Status::ok) return s;
    if (!p.stash.empty()) return drain_stash(gate, p, true);
    p.stash_since_ns = 0;
    return Status::ok;
  }
  // Its stashed copy came first and waits, in sequence, for room in the
  // finalize ring: this one is the duplicate (delivering it would leave
  // the copy behind the sequence, never drained).
  for (const Stashed& st : p.stash)
    if (st.sequence == h.sequence) {
      ++stats_.duplicates;
      return drain_stash(gate, p, false);
    }
  quiet_arrival_ = false;
  Status s = on_ordered(gate, h, payload, -1);
  if (s != Status::ok) return s;
  return drain_stash(gate, p, true);
}

Status Core::Impl::drain_stash(Gate& gate, Priority& p, bool advanced) noexcept {
  // Anything stashed that is now in sequence, while the finalize ring has
  // room (the rest waits for visit(): the gate stays busy while it stashes).
  bool moved = advanced;
  for (bool found = true; found && !p.stash.empty() && completion_room();) {
    found = false;
    for (std::size_t i = 0; i < p.stash.size(); ++i) {
      if (p.stash[i].sequence != p.recv_seq) continue;
      const Stashed st = p.stash[i];
      p.stash[i] = p.stash.back();
      p.stash.pop_back();
      const std::span<const std::byte> held(gate.slot(st.slot), st.len);
      const Status s = on_ordered(gate, st.frame, held.subspan(wire::FrameHeader::size), st.slot);
      if (s != Status::ok) return s;
      found = moved = true;
      break;
    }
  }
  // The hole's clock restarts only when the hole moved: visit() calls this
  // every pass, and a timer restarted each time would never fire.
  if (p.stash.empty())
    p.stash_since_ns = 0;
  else if (moved)
    p.stash_since_ns = base::now_ns();
  return Status::ok;
}

Status Core::Impl::hold(Gate& gate, Priority& p, const wire::FrameHeader& h,
                        std::span<const std::byte> payload, int slot) noexcept {
  // Receive states are one pool for every peer: when the client holds all
  // of them (deferred messages, rendezvous in progress), a message within
  // its sender's grant waits for one instead of failing the sender. Only
  // messages wait: rtr, ack and credit packets, which free states, go on.
  // Its credit stays spent, so an honest peer never has more waiting and
  // live together than it was granted, and a slot is always free for it.
  if (p.live_recvs + p.held.size() >= settings_.credits || p.held.size() == p.held.capacity()) {
    PIER_LOG(warn, "core", "rank {} overran its credits: {} messages of priority {} unfinished",
             gate.peer, p.live_recvs + p.held.size(), h.priority);
    gate.give_slot(slot);
    return Status::malformed;
  }
  if (slot < 0) {
    slot = gate.take_slot();
    if (slot < 0) {
      PIER_LOG(warn, "core", "rank {} overran its credits: no slot left", gate.peer);
      return Status::malformed;
    }
    // The layout of a stashed packet: the frame's place, then the payload
    // (the frame itself is kept decoded, never read again).
    std::memcpy(gate.slot(slot) + wire::FrameHeader::size, payload.data(), payload.size());
  }
  if (held_total_ == 0)
    PIER_LOG(info, "core",
             "every receive state is taken: messages wait for one (PIER_CORE_RECV_MSGS={})",
             settings_.recv_msgs);
  p.held.push_back({h.sequence, slot, wire::FrameHeader::size + payload.size(), h});
  ++held_total_;
  ++stats_.held_for_state;
  quiet_arrival_ = false;  // the gate must be visited to release it
  return Status::ok;
}

Status Core::Impl::release_held(Gate& gate, Priority& p) noexcept {
  while (!p.held.empty() && recvs_.available() > 0 && completion_room() &&
         gate.state == GateState::connected) {
    if (gate.fail_due != Status::ok) return gate.fail_due;  // held packets stay in their slots
    const Stashed st = p.held.front();
    p.held.erase(p.held.begin());
    --held_total_;
    const std::span<const std::byte> payload(gate.slot(st.slot) + wire::FrameHeader::size,
                                             st.len - wire::FrameHeader::size);
    const Status s = st.frame.type == wire::PacketType::eager
                         ? eager_arrival(gate, st.frame, payload, st.slot)
                         : rts_arrival(gate, st.frame, payload, st.slot);
    if (s != Status::ok) return s;
  }
  return Status::ok;
}

Status Core::Impl::eager_in_order(Gate& gate, Priority& p, const wire::FrameHeader& h,
                                  std::span<const std::byte> payload) noexcept {
  const auto u = static_cast<std::size_t>(h.upper);
  Client* client = clients_[u];
  // Anything unusual takes the general path, which checks the same again
  // and says what went wrong: nothing has changed yet.
  if (gate.fail_due != Status::ok || client == nullptr || !p.held.empty() ||
      recvs_.available() <= held_total_ || gate.free_slots.empty() ||
      p.live_recvs >= settings_.credits || h.credit_return > gate.peer_credits - p.credits ||
      payload.size() < h.upper_length || h.upper_length > header_size_[u])
    return on_ordered(gate, h, payload, -1);
  ++p.recv_seq;
  p.credits += h.credit_return;
  Incoming& in = *recvs_.acquire();  // available() > held_total_: one is free
  ++p.live_recvs;
  ++stats_.eager_received;
  // The fields a fresh state does not already hold (rendezvous false, slot
  // -1, state parsing, no cookie or region).
  in.gate = &gate;
  in.priority = h.priority;
  in.upper = h.upper;
  in.payload = payload.data() + h.upper_length;
  in.length = payload.size() - h.upper_length;
  in.credit_pending = true;
  if (parse(*client, gate, h, payload.first(h.upper_length), in.length, in)) return Status::ok;
  return defer(gate, in);
}

Status Core::Impl::on_ordered(Gate& gate, const wire::FrameHeader& h,
                              std::span<const std::byte> payload, int slot) noexcept {
  // The client rejected this peer (Core::reject_peer): nothing more of it
  // is delivered, stashed or held packets included; the caller fails the gate.
  if (gate.fail_due != Status::ok) {
    gate.give_slot(slot);
    return gate.fail_due;
  }
  Priority& p = gate.prio[h.priority];
  ++p.recv_seq;
  // Credits never exceed what the peer was granted: more is a lie.
  if (h.credit_return > gate.peer_credits - p.credits) {
    gate.give_slot(slot);
    return Status::malformed;
  }
  p.credits += h.credit_return;
  switch (h.type) {
    case wire::PacketType::eager:
      if (!p.held.empty() || recvs_.available() <= held_total_)
        return hold(gate, p, h, payload, slot);
      return eager_arrival(gate, h, payload, slot);
    case wire::PacketType::rts:
      if (!p.held.empty() || recvs_.available() <= held_total_)
        return hold(gate, p, h, payload, slot);
      return rts_arrival(gate, h, payload, slot);
    case wire::PacketType::rtr:
      gate.give_slot(slot);  // decoded into the chunk at once
      return rtr_arrival(gate, h, payload);
    case wire::PacketType::ack:
      gate.give_slot(slot);
      return ack_arrival(gate, payload);
    case wire::PacketType::credit:
      // One with no credit in it is a probe (progress.cpp): answer, so a
      // packet of ours the peer lost shows as a hole there too.
      if (h.credit_return == 0) gate.probe_asked = true;
      gate.give_slot(slot);
      return Status::ok;
    default:
      gate.give_slot(slot);
      return Status::ok;
  }
}

}  // namespace pier::core
