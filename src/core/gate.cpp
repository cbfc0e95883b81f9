// pier core: gates and rails: building them from the peer's address,
// connecting (asynchronously), and failing over or failing when a rail breaks.
//
// Gate connection states: idle -> connecting -> connected, or failed. A rail
// that breaks is marked dying at once (the driver may still be inside a call
// that holds our packets) and reaped at the end of the gate's progress turn:
// its instances are destroyed first, so no driver still refers to a packet,
// then what it carried is settled: small packets are re-sent on the new
// primary rail (the receiver drops duplicates by sequence), rendezvous chunks
// are re-requested on a live rail by the receiver. Packets the dead rail
// reported sent but never delivered cannot be recovered (no retransmission
// below the core): the peer sees the hole and the gate fails, never hangs.
// With no rail left the
// gate fails: every pending operation completes broken, later sends fail at
// once, other gates are untouched.
#include <algorithm>

#include "base/log.hpp"
#include "core/impl.hpp"

namespace pier::core {

Status Core::Impl::build_gate(Gate& gate, const PeerAddress& peer) {
  auto choices = parse_drivers(settings_.drivers);
  if (!choices) return Status::invalid_argument;
  // A rank reaches itself through self (a network driver may refuse to
  // connect a context to itself).
  const std::vector<std::vector<std::string>> loopback{{"self"}};
  auto chosen = choose_rails(gate.peer == rank_ ? loopback : *choices, local_, peer);
  if (!chosen) return chosen.status();
  gate.rails.reserve(chosen->size());
  // Eager packets may take any rail: the smallest limit of the rails rules,
  // each the peer's capacity on that driver; packets we hold (deferred or
  // ahead of a hole) may come from any rail: the largest of ours sizes them.
  gate.send_limit = peer.recv_capacity;
  std::size_t slot_bytes = 0;
  for (const auto& choice : *chosen) {
    // Named copies, not a structured binding: clang 14 cannot capture one.
    const auto& spec = choice.first;
    const auto index = choice.second;
    auto d = std::find_if(drivers_.begin(), drivers_.end(),
                          [&](const DriverSlot& s) { return s.spec == spec && s.index == index; });
    auto u = std::find_if(peer.urls.begin(), peer.urls.end(),
                          [&](const UrlEntry& e) { return e.spec == spec && e.index == index; });
    if (d == drivers_.end() || u == peer.urls.end()) return Status::not_found;
    Rail& r = gate.rails.emplace_back();
    r.spec = spec;
    r.context = d->context.get();
    r.props = d->props;
    r.remote_url = u->url;
    r.rx_capacity = d->recv_capacity;
    if (!r.props.caps.recv_buf)
      r.rx_buf = std::make_unique_for_overwrite<std::byte[]>(r.rx_capacity);
    gate.send_limit = std::min<std::size_t>(gate.send_limit, u->recv_capacity);
    if (r.props.caps.max_packet != 0)
      gate.send_limit = std::min(gate.send_limit, r.props.caps.max_packet);
    slot_bytes = std::max(slot_bytes, d->recv_capacity);
  }
  if (gate.send_limit < max_prefix + 1) return Status::unsupported;
  gate.split_min = settings_.split_min;
  gate.active = gate.peer != rank_;
  gate.peer_credits = peer.credits;
  for (Priority& p : gate.prio) {
    p.credits = peer.credits;
    p.stash.reserve(settings_.credits);
    p.held.reserve(settings_.credits);
  }
  // Per priority: one slot per granted credit (deferred packets, or
  // messages waiting for a receive state) and one per stash entry (packets
  // ahead of a hole).
  const std::size_t slots = std::size_t{2} * wire::priority_count * settings_.credits;
  gate.slot_bytes = slot_bytes;
  // Not zeroed: 4 MiB a peer with the defaults, and zeroing touched every
  // page of it when the gate was built; untouched pages cost no memory.
  gate.slot_mem = std::make_unique_for_overwrite<std::byte[]>(slots * gate.slot_bytes);
  gate.free_slots.reserve(slots);
  for (std::size_t i = slots; i-- > 0;) gate.free_slots.push_back(static_cast<int>(i));
  return Status::ok;
}

void Core::Impl::start_connect(Gate& gate) noexcept {
  if (gate.state != GateState::idle) return;
  gate.state = GateState::connecting;
  gate.last_heard_ns = base::now_ns();
  for (Rail& r : gate.rails) {
    auto small = r.context->open_instance(driver::Track::small);
    auto large = r.context->open_instance(driver::Track::large);
    if (!small || !large) {
      r.state = RailState::dead;
      PIER_LOG(warn, "core", "rail {} to rank {}: cannot open an instance", r.spec, gate.peer);
      continue;
    }
    r.small = std::move(*small);
    r.large = std::move(*large);
    Status a = r.small->connect_async(r.remote_url);
    Status b = is_success(a) ? r.large->connect_async(r.remote_url) : a;
    if (!is_success(a) || !is_success(b)) {
      PIER_LOG(warn, "core", "rail {} to rank {}: connect failed: {}", r.spec, gate.peer,
               to_string(is_success(a) ? b : a));
      r.small.reset();
      r.large.reset();
      r.state = RailState::dead;
      continue;
    }
    r.state = RailState::connecting;
    // Buffer-receive rails of a receive-any context are found by probe_any;
    // a rail with a posted receive is polled (its data never waits unclaimed).
    if (r.props.caps.recv_any && r.props.caps.recv_buf && gate.peer != rank_ &&
        std::find(any_contexts_.begin(), any_contexts_.end(), r.context) != any_contexts_.end()) {
      r.by_any = true;
      by_instance_[r.small.get()] = {&gate, &r};
    }
  }
  (void)step_connect(gate);
  touch(gate);
}

namespace {
/// One instance's connection: true when up; `failed` set when it never will be.
bool instance_up(driver::Instance& i, bool& up, Status& failed) noexcept {
  if (up) return true;
  Status s = i.connect_wait(driver::Clock::now());
  if (s == Status::ok || s == Status::unsupported) return up = true;
  if (s != Status::in_progress && s != Status::timeout) failed = s;
  return false;
}
}  // namespace

bool Core::Impl::step_connect(Gate& gate) noexcept {
  if (gate.state == GateState::connected || gate.state == GateState::failed) return true;
  if (gate.state == GateState::idle) start_connect(gate);
  bool waiting = false;
  for (Rail& r : gate.rails) {
    if (r.state != RailState::connecting) continue;
    Status failed = Status::ok;
    bool a = instance_up(*r.small, r.small_up, failed);
    bool b = instance_up(*r.large, r.large_up, failed);
    if (failed != Status::ok) {
      rail_failed(gate, r, failed);
    } else if (a && b) {
      r.state = RailState::connected;
      PIER_LOG(debug, "core", "rail {} to rank {} connected", r.spec, gate.peer);
    } else {
      waiting = true;
    }
  }
  reap(gate);
  if (gate.state == GateState::failed) return true;
  if (waiting) return false;
  for (std::size_t i = 0; i < gate.rails.size(); ++i)
    if (gate.rails[i].state == RailState::connected) {
      gate.primary = static_cast<std::uint8_t>(i);
      gate.state = GateState::connected;
      gate.last_heard_ns = base::now_ns();
      polled_stale_ = true;
      return true;
    }
  fail_gate(gate, Status::broken);
  return true;
}

void Core::Impl::rail_failed(Gate& gate, Rail& rail, Status why) noexcept {
  if (rail.dying || rail.state == RailState::dead) return;
  rail.dying = true;
  rail.why = why;
  gate.reap_due = true;
  polled_stale_ = true;
  touch(gate);
  ++stats_.rails_failed;
  PIER_LOG(warn, "core", "rail {} to rank {} failed: {}", rail.spec, gate.peer, to_string(why));
  if (&gate.rails[gate.primary] != &rail) return;
  for (std::size_t i = 0; i < gate.rails.size(); ++i) {
    const Rail& r = gate.rails[i];
    if (r.state == RailState::connected && !r.dying) {
      gate.primary = static_cast<std::uint8_t>(i);
      PIER_LOG(info, "core", "rank {}: small track fails over to rail {}", gate.peer, r.spec);
      return;
    }
  }
}

void Core::Impl::reap(Gate& gate) noexcept {
  bool any_dying = false;
  for (Rail& r : gate.rails) any_dying |= r.dying;
  if (!any_dying || in_progress_reap_) return;
  in_progress_reap_ = true;
  for (Rail& r : gate.rails)
    if (r.dying && !drain_dying(gate, r)) {
      in_progress_reap_ = false;  // the rest after this pass's finalizes
      return;
    }
  if (gate.state == GateState::failed) {  // a drained packet failed the peer
    in_progress_reap_ = false;
    return;
  }
  for (Rail& r : gate.rails) {
    if (!r.dying) continue;
    r.drain_until_ns = 0;
    // First the instances: once destroyed, no driver refers to our packets.
    r.small.reset();
    r.large.reset();
    r.rx_posted = false;
    r.fast_busy = false;
    r.state = RailState::dead;
    r.dying = false;
    // Small packets in flight go back, in order, ahead of what waits: the
    // receiver drops any that did arrive by their sequence.
    std::array<Fifo<SmallSend, &SmallSend::next>, wire::priority_count> again;
    Fifo<Ctrl, &Ctrl::next> ctrl_again;
    while (SmallSend* s = r.inflight.pop()) {
      if (s->kind == SmallSend::Kind::control) {
        ctrl_again.push(static_cast<Ctrl*>(s->owner));
      } else {
        again[s->priority].push(s);
      }
    }
    while (Ctrl* c = gate.ctrl_pending.pop()) ctrl_again.push(c);
    gate.ctrl_pending = ctrl_again;
    for (std::size_t p = 0; p < wire::priority_count; ++p) {
      Fifo<SendMsg, &SendMsg::next> merged;
      while (SmallSend* s = again[p].pop()) {
        SendMsg* m = static_cast<SendMsg*>(s->owner);
        m->state = SendState::queued;
        merged.push(m);
      }
      while (SendMsg* m = gate.prio[p].pending.pop()) merged.push(m);
      gate.prio[p].pending = merged;
    }
    while (Chunk* c = r.large_send.pop()) {
      c->state = Chunk::State::lost;
      SendMsg* m = static_cast<SendMsg*>(c->owner);
      --m->active_chunks;
      rdv_send_step(*m);
    }
    while (Chunk* c = r.large_recv.pop()) chunk_lost(*static_cast<Incoming*>(c->owner), *c);
  }
  in_progress_reap_ = false;
  gate.reap_due = false;
  for (const Rail& r : gate.rails) gate.reap_due |= r.dying;  // one failed during the reap
  bool alive = false;
  for (const Rail& r : gate.rails) alive |= r.state != RailState::dead;
  if (!alive && gate.state != GateState::failed) return fail_gate(gate, Status::broken);
  // A probe per priority on the new primary: if the dead rail swallowed
  // packets it had reported sent, the peer sees the hole now (and fails the
  // gate after CORE_GAP_LIMIT_MS) instead of waiting for a packet forever.
  for (std::uint8_t p = 0; p < wire::priority_count; ++p)
    if (Ctrl* c = new_ctrl(gate, wire::PacketType::credit, p, {})) gate.ctrl_pending.push(c);
}

bool Core::Impl::drain_dying(Gate& gate, Rail& rail) noexcept {
  // A send that failed because the peer closed (tcp: a reset) says nothing
  // of what the peer sent before it closed: that is still in the driver,
  // and destroying the instance would lose it. Read it first, in order,
  // as a live rail would, for a bounded time.
  if (!rail.small || rail.state != RailState::connected || gate.state == GateState::failed)
    return true;
  if (rail.drain_until_ns < 0) return true;  // gave up (said once)
  const std::int64_t now = base::now_ns();
  if (rail.drain_until_ns == 0) {
    rail.drain_until_ns = now + drain_limit_ns;
  } else if (now >= rail.drain_until_ns) {
    PIER_LOG(warn, "core", "rail {} to rank {}: input still unread after {} ms is dropped",
             rail.spec, gate.peer, drain_limit_ns / 1'000'000);
    rail.drain_until_ns = -1;
    return true;
  }
  rail.draining = true;
  // Twice when the first finds nothing: a poll right after a packet may
  // look only at what the driver buffered (tcp reads on the next one).
  bool more = poll_small_recv(gate, rail, 1024);
  if (!more && gate.state != GateState::failed) more = poll_small_recv(gate, rail, 1024);
  rail.draining = false;
  if (gate.state == GateState::failed) return true;
  // Eager messages read in full that wait for a receive state would go
  // with the gate once its last rail is reaped: wait, within the same
  // limit, for visit() to hand them over as the client frees states.
  bool last = true;
  for (const Rail& r : gate.rails)
    if (&r != &rail && r.state == RailState::connected && !r.dying) last = false;
  if (!more && last)
    for (const Priority& p : gate.prio)
      for (const Stashed& st : p.held)
        if (st.frame.type == wire::PacketType::eager) more = true;
  return !more;
}

void Core::Impl::poll_incoming() noexcept {
  incoming_polled_ns_ = base::now_ns();
  for (driver::Context* ctx : incoming_contexts_) {
    for (int budget = 64; budget > 0; --budget) {
      if (ctx->incoming(incoming_url_) != Status::ok) break;
      Gate* found = nullptr;
      for (auto& g : gates_) {
        if (g->peer == rank_) continue;
        for (const Rail& r : g->rails)
          if (r.context == ctx && r.remote_url == incoming_url_) found = g.get();
        if (found) break;
      }
      if (found == nullptr) {
        PIER_LOG(debug, "core", "a connection from an unknown peer ({}) is not answered",
                 ctx->name());
      } else if (found->state == GateState::idle) {
        PIER_LOG(debug, "core", "rank {} connects: opening our side", found->peer);
        start_connect(*found);
      }
    }
  }
}

void Core::Impl::fail_gate(Gate& gate, Status why) noexcept {
  if (gate.state == GateState::failed) return;
  gate.state = GateState::failed;
  polled_stale_ = true;
  if (failed_peers_.size() < failed_peers_.capacity()) failed_peers_.push_back(gate.peer);
  gate.failure = failure_of(why);
  ++stats_.gates_failed;
  PIER_LOG(warn, "core", "rank {} unreachable ({}): pending operations fail", gate.peer,
           to_string(why));
  for (Rail& r : gate.rails) {
    r.small.reset();
    r.large.reset();
    r.state = RailState::dead;
    r.dying = false;
    r.rx_posted = false;
    r.fast_busy = false;
    while (SmallSend* s = r.inflight.pop())
      if (s->kind == SmallSend::Kind::control) ctrls_.release(static_cast<Ctrl*>(s->owner));
    while (r.large_send.pop()) {
    }
    while (r.large_recv.pop()) {
    }
  }
  while (Ctrl* c = gate.ctrl_pending.pop()) ctrls_.release(c);
  for (Priority& p : gate.prio) {
    while (p.pending.pop()) {
    }
    for (Stashed& s : p.stash) gate.give_slot(s.slot);
    p.stash.clear();
    for (Stashed& s : p.held) gate.give_slot(s.slot);
    held_total_ -= p.held.size();
    p.held.clear();
  }
  while (gate.sends) complete_send(*gate.sends, gate.failure);
  // Messages the LIB has not answered yet stay until it calls recv(): R1
  // wants exactly one recv per lib_parse. Eager ones still hold their data.
  for (Incoming* in = gate.recvs; in;) {
    Incoming* next = in->live_next;
    if (in->state != RecvState::parsing && in->state != RecvState::deferred)
      complete_recv(*in, gate.failure);
    else if (in->rendezvous)
      in->status = gate.failure;
    in = next;
  }
}

}  // namespace pier::core
