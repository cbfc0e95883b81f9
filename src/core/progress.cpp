// pier core: the progress engine. One pass visits every gate: connection
// steps, small-track receives, small sends in flight, large tracks, pending
// control and message packets, the lost-packet watchdog, and the reaping of
// failed rails; then the finalize callbacks run, outside any driver call.
#include <poll.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "base/log.hpp"
#include "core/impl.hpp"

namespace pier::core {

Status Core::Impl::progress() noexcept {
  if (!connected_) return Status::not_initialized;
  if (in_progress_) return Status::ok;  // called back from lib_parse: the pass goes on
  in_progress_ = true;
  // The fast part: the small tracks polled directly (a few peers per
  // context). Every 64th pass visits every gate: a safety net for work
  // nobody marked, and how a quiet probe_any instance's broken link (no
  // packet to report) is noticed.
  for (std::size_t i = 0; i < polled_.size(); ++i) {
    Gate& gate = *polled_[i].gate;
    Rail& rail = *polled_[i].rail;
    if (plainly_pollable(gate, rail)) {
      // poll_small_recv(gate, rail, 32) with its first poll here.
      const Status st = rail.small->recv_poll(rail.rx);
      if (st != Status::in_progress)
        recv_polled(gate, rail, st, 32);
      else
        rail.took_one = rail.burst = false;
    } else {
      poll_small_recv(gate, rail, 32);
    }
  }
  const bool sweep = (++passes_ & 63) == 0;
  if (sweep || !dirty_.empty() || !any_contexts_.empty() || polled_stale_) slow_pass(sweep);
  in_progress_ = false;
  if (completion_count_ != 0 || !failed_peers_.empty()) {
    // One finalize (a send's, in a ping-pong) runs here: run_completions()'s
    // call and loops cost twice as much. What it queues or fails goes on there.
    if (completion_count_ == 1 && failed_peers_.empty()) run_one_completion();
    if (completion_count_ != 0 || !failed_peers_.empty()) run_completions();
  }
  if (room_owed_ && send_room()) {
    room_owed_ = false;
    for (Client* c : clients_)
      if (c) c->send_room();
  }
  return Status::ok;
}

void Core::Impl::slow_pass(bool sweep) noexcept {
  for (driver::Context* ctx : any_contexts_) {
    // Anything odd (an unknown or unusable instance, a full budget) falls
    // back to polling every instance this pass, so nothing waits unseen.
    int budget = 64;
    for (; budget > 0; --budget) {
      driver::Instance* ready = nullptr;
      Status st = ctx->probe_any(&ready);
      if (st == Status::in_progress) break;
      auto it = st == Status::ok ? by_instance_.find(ready) : by_instance_.end();
      if (it == by_instance_.end()) {
        sweep = true;
        break;
      }
      Gate& gate = *it->second.first;
      Rail& rail = *it->second.second;
      if (gate.state != GateState::connected || rail.state != RailState::connected || rail.dying) {
        sweep = true;
        break;
      }
      poll_small_recv(gate, rail, 1);
    }
    if (budget == 0) sweep = true;
  }
  // Gates with something to do besides receiving.
  if (sweep) {
    // A driver's incoming() costs a system call (accept): at most once a
    // millisecond, so a busy ping-pong does not pay for it.
    if (!incoming_contexts_.empty()) {
      const std::int64_t now = base::now_ns();
      if (now - incoming_polled_ns_ > 1'000'000) poll_incoming();
    }
    for (auto& gp : gates_) visit(*gp, true);
    for (auto& gp : gates_) touch(*gp);
  } else {
    // Index-based: a visit may add gates (a send from inside lib_parse).
    for (std::size_t i = 0; i < dirty_.size(); ++i) visit(*dirty_[i], false);
  }
  if (!dirty_.empty()) {
    std::size_t kept = 0;
    for (Gate* g : dirty_) {
      g->dirty = busy(*g);
      if (g->dirty) dirty_[kept++] = g;
    }
    dirty_.resize(kept);
  }
  if (polled_stale_) rebuild_polled();
}

void Core::Impl::visit(Gate& gate, bool sweep) noexcept {
  // An idle gate has nothing queued: a send or the peer's connection opens it.
  if (gate.state == GateState::failed || gate.state == GateState::idle || !gate.active) return;
  if (gate.fail_due != Status::ok) {
    PIER_LOG(warn, "core", "rank {} sent a bad message: {}", gate.peer, to_string(gate.fail_due));
    return fail_gate(gate, gate.fail_due);
  }
  if (gate.state != GateState::connected) {
    if (!step_connect(gate) || gate.state != GateState::connected) return;
    polled_stale_ = true;
  }
  if (sweep)
    for (Rail& r : gate.rails)
      if (r.by_any) poll_small_recv(gate, r, 32);
  for (Rail& r : gate.rails) {
    if (r.state != RailState::connected || r.dying || gate.state == GateState::failed) continue;
    if (!r.inflight.empty()) poll_inflight(gate, r);
    if (!r.large_send.empty() || !r.large_recv.empty()) large_step(gate, r);
  }
  // Stashed packets in sequence left behind when the finalize ring was full.
  for (Priority& p : gate.prio) {
    if (p.stash.empty() || gate.state != GateState::connected) continue;
    if (const Status s = drain_stash(gate, p, false); s != Status::ok) {
      PIER_LOG(warn, "core", "rank {} sent a bad packet: {}", gate.peer, to_string(s));
      fail_gate(gate, s);
      break;
    }
  }
  // Messages that wait for a receive state, while states are free.
  for (Priority& p : gate.prio) {
    if (p.held.empty() || gate.state != GateState::connected) continue;
    if (const Status s = release_held(gate, p); s != Status::ok) {
      PIER_LOG(warn, "core", "rank {} sent a bad packet: {}", gate.peer, to_string(s));
      fail_gate(gate, s);
      break;
    }
  }
  if (gate.acks_waiting && gate.state != GateState::failed) {
    gate.acks_waiting = false;
    for (Incoming* in = gate.recvs; in;) {
      Incoming* next = in->live_next;
      if (in->state == RecvState::acking) rdv_recv_step(*in);
      in = next;
    }
  }
  std::int64_t now = 0;
  if (gate.state == GateState::connected && (gate.sends != nullptr || gate.recvs != nullptr)) {
    now = base::now_ns();
    probe_if_quiet(gate, now);
  } else {
    gate.probe_at_ns = 0;
  }
  if (gate.probe_asked && gate.state == GateState::connected) {
    gate.probe_asked = false;
    if (now == 0) now = base::now_ns();
    answer_probe(gate, now);
  }
  flush(gate);
  for (Priority& p : gate.prio) {
    if (p.stash.empty() || gate.state == GateState::failed) continue;
    if (now == 0) now = base::now_ns();
    if (now - p.stash_since_ns > std::int64_t{settings_.gap_limit_ms} * 1'000'000) {
      PIER_LOG(warn, "core", "rank {}: packet {} never came (lost)", gate.peer, p.recv_seq);
      fail_gate(gate, Status::broken);
    }
  }
  reap(gate);
}

void Core::Impl::probe_if_quiet(Gate& gate, std::int64_t now) noexcept {
  // A lost rts, rtr or ack followed by no other packet would leave both
  // sides waiting forever: the receiver sees a hole only when a later
  // packet arrives. So a gate with protocol state outstanding sends a
  // numbered (credit) packet on each priority it has been quiet on; a peer
  // missing a packet then sees the hole and fails the gate after
  // CORE_GAP_LIMIT_MS, which tears the connection down for both sides.
  const std::int64_t period =
      std::max<std::int64_t>(1, std::int64_t{settings_.gap_limit_ms} / 4) * 1'000'000;
  if (gate.probe_at_ns != 0 && now >= gate.probe_at_ns && gate.ctrl_pending.empty()) {
    // (Control packets still queued are numbered packets in line already: a
    // peer that takes nothing more must not pile probes up behind them.)
    for (std::uint8_t p = 0; p < wire::priority_count; ++p) {
      if (gate.prio[p].send_seq != gate.probe_seq[p] || gate.prio[p].send_seq == 0) continue;
      if (Ctrl* c = new_ctrl(gate, wire::PacketType::credit, p, {})) {
        gate.ctrl_pending.push(c);
        ++stats_.probes;
      }
    }
  } else if (gate.probe_at_ns != 0) {
    return;
  }
  gate.probe_at_ns = now + period;
  for (std::size_t p = 0; p < wire::priority_count; ++p) gate.probe_seq[p] = gate.prio[p].send_seq;
}

void Core::Impl::answer_probe(Gate& gate, std::int64_t now) noexcept {
  // At most once per probe period: two sides answering each other's empty
  // answers would otherwise chatter for ever.
  if (now < gate.answer_at_ns || !gate.ctrl_pending.empty()) return;
  gate.answer_at_ns =
      now + std::max<std::int64_t>(1, std::int64_t{settings_.gap_limit_ms} / 4) * 1'000'000;
  for (std::uint8_t p = 0; p < wire::priority_count; ++p)
    if (gate.prio[p].send_seq != 0)
      if (Ctrl* c = new_ctrl(gate, wire::PacketType::credit, p, {})) gate.ctrl_pending.push(c);
}

bool Core::Impl::busy(const Gate& g) const noexcept {
  if (g.state == GateState::failed || g.state == GateState::idle || !g.active) return false;
  if (g.state != GateState::connected || g.fail_due != Status::ok) return true;
  for (const Rail& r : g.rails)
    if (r.dying || !r.inflight.empty() || !r.large_send.empty() || !r.large_recv.empty())
      return true;
  if (g.acks_waiting || g.probe_asked || small_work(g)) return true;
  if (g.sends != nullptr || g.recvs != nullptr) return true;  // probes when quiet
  for (const Priority& p : g.prio)
    if (!p.stash.empty() || !p.held.empty()) return true;
  return false;
}

void Core::Impl::rebuild_polled() noexcept {
  polled_stale_ = false;
  rebuild_idle_set();
  polled_.clear();
  // The one context that carries every other process's rails, if there is
  // one: a sleep there wakes for every arrival. Otherwise a sleep in the
  // first context that can (self, by default) saw another's arrivals only
  // when it ended, up to 1 ms late.
  driver::Context* only = nullptr;
  bool several = false;
  sleep_set_.clear();  // for now: every context that carries a remote rail
  for (auto& gp : gates_) {
    Gate& g = *gp;
    if (g.state != GateState::connected || !g.active) continue;
    for (Rail& r : g.rails) {
      if (r.state != RailState::connected || r.dying) continue;
      if (!r.by_any && polled_.size() < polled_.capacity()) polled_.push_back({&g, &r});
      if (g.peer == rank_) continue;
      if (only == nullptr) only = r.context;
      several = several || r.context != only;
      if (r.context == only) continue;  // the common case, counted below
      bool listed = false;
      for (int i : sleep_set_)
        listed = listed || drivers_[static_cast<std::size_t>(i)].context.get() == r.context;
      for (std::size_t i = 0; i < drivers_.size() && !listed; ++i)
        if (drivers_[i].context.get() == r.context) {
          sleep_set_.push_back(static_cast<int>(i));
          listed = true;
        }
    }
  }
  sleep_slot_ = -1;
  for (std::size_t i = 0; i < drivers_.size() && !several && only != nullptr; ++i)
    if (drivers_[i].context.get() == only && drivers_[i].props.caps.recv_any &&
        drivers_[i].props.caps.blocking_wait)
      sleep_slot_ = static_cast<int>(i);
  // Several: a sleep polls the descriptors of every one of them (`only`
  // and those listed above), when each can give its own; one that cannot
  // would see its arrivals late.
  if (!several) {
    sleep_set_.clear();
    return;
  }
  for (std::size_t i = 0; i < drivers_.size(); ++i)
    if (drivers_[i].context.get() == only) sleep_set_.push_back(static_cast<int>(i));
  for (int i : sleep_set_) {
    const driver::Caps& c = drivers_[static_cast<std::size_t>(i)].props.caps;
    if (!c.recv_any || !c.blocking_wait || !c.wait_fds) {
      sleep_set_.clear();
      return;
    }
  }
}

void Core::Impl::rebuild_idle_set() noexcept {
  idle_set_.clear();
  idle_set_ok_ = settings_.idle_sleep_ms > 1 && !idle_set_refused_;
  // The loopback gate's packets come from this process, whose other threads
  // wake() a sleep; but a wrapper that holds them back (fault:self) lets
  // them go later with no descriptor to say so.
  for (auto& gp : gates_)
    if (gp->peer == rank_ && gp->active && gp->state != GateState::failed)
      for (const Rail& r : gp->rails)
        if (!r.props.caps.wait_fds && r.spec != "self") idle_set_ok_ = false;
  for (std::size_t i = 0; i < drivers_.size(); ++i) {
    driver::Context* ctx = drivers_[i].context.get();
    bool wanted = std::find(incoming_contexts_.begin(), incoming_contexts_.end(), ctx) !=
                  incoming_contexts_.end();
    for (auto& gp : gates_) {
      if (gp->peer == rank_ || gp->state == GateState::failed) continue;
      for (const Rail& r : gp->rails) wanted = wanted || r.context == ctx;
    }
    if (!wanted) continue;
    const driver::Caps& c = drivers_[i].props.caps;
    if (!c.recv_any || !c.blocking_wait || !c.wait_fds) idle_set_ok_ = false;
    idle_set_.push_back(static_cast<int>(i));
  }
  if (idle_set_.empty()) idle_set_ok_ = false;
}

bool Core::Impl::idle_now() const noexcept {
  if (completion_count_ != 0 || !failed_peers_.empty() || polled_stale_ || room_owed_ ||
      sends_.outstanding() != 0 || recvs_.outstanding() != 0)
    return false;
  for (const auto& gp : gates_)
    if (busy(*gp)) return false;
  return true;
}

bool Core::Impl::sleep_on_all(const std::vector<int>& set, bool& ok,
                              driver::Clock::time_point until) noexcept {
  // Arm every context, then one ppoll over all their descriptors; any
  // arrival, or a wake() (it cancels every context), ends it.
  sleep_fds_.clear();
  std::size_t armed = 0;
  bool ready = false, refused = false;
  for (; armed < set.size() && !ready; ++armed) {
    const Status s = drivers_[static_cast<std::size_t>(set[armed])].context->wait_arm(sleep_fds_);
    if (s == Status::in_progress) {
      ready = true;  // something is there already: disarm and go poll it
    } else if (s != Status::ok) {
      PIER_LOG(debug, "core", "driver {} cannot arm a shared sleep: {}",
               drivers_[static_cast<std::size_t>(set[armed])].spec, to_string(s));
      // Never, when it cannot at all (ofi without a queue descriptor);
      // otherwise (a context closing, say) just not this time.
      if (s == Status::unsupported) ok = false;
      refused = true;
      break;
    }
  }
  if (!refused && !ready) {
    const auto left = std::max<driver::Clock::duration>(until - driver::Clock::now(), {});
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
    const ::timespec ts{static_cast<std::time_t>(ns / 1'000'000'000),
                        static_cast<long>(ns % 1'000'000'000)};
    const int woke = ::ppoll(sleep_fds_.data(), sleep_fds_.size(), &ts, nullptr);
    ++stats_.sleeps_on_all;
    if (woke > 0) ++stats_.sleeps_on_all_woken;
  }
  // (A refusal breaks before it is counted: that context was not armed.)
  for (std::size_t k = 0; k < armed; ++k)
    (void)drivers_[static_cast<std::size_t>(set[k])].context->wait_disarm();
  return !refused;
}

void Core::Impl::run_completions() noexcept {
  while (completion_count_ > 0) {
    const Completion c = completions_[completion_head_];
    completion_head_ = (completion_head_ + 1) & completion_mask_;
    --completion_count_;
    ++stats_.finalized;
    if (c.client) c.client->lib_finalize(c.cookie, c.status);
  }
  // After the finalizes: a client learns of the failure once every pending
  // operation to the peer has ended.
  for (std::size_t i = 0; i < failed_peers_.size(); ++i)
    for (Client* client : clients_)
      if (client) client->peer_failed(failed_peers_[i]);
  failed_peers_.clear();
}

void Core::Impl::sleep_briefly(base::Deadline deadline) noexcept {
  // Sleep in a driver that can, but never long: other contexts and the
  // large tracks do not wake this wait. An idle core is the exception
  // (idle_set_): a sleep there ended every millisecond, and an idle process
  // spent 5% of a core on it.
  const auto now = driver::Clock::now();
  auto until = std::min(deadline.time_point(), now + std::chrono::milliseconds(1));
  // Long sleeps only once the core has been idle for a while: arming every
  // context (and disarming them) costs a few system calls per wake, which a
  // target woken every 2 ms paid in latency (a sleeping put 175 -> 200 us).
  const std::uint64_t activity = stats_.activity();
  bool idle = idle_set_ok_ && idle_now();
  if (!idle || activity != idle_activity_) {
    idle_activity_ = activity;
    idle_since_ = now;
    idle = false;
  } else if (now - idle_since_ < std::chrono::milliseconds(10)) {
    idle = false;
  }
  if (idle)
    until =
        std::min(deadline.time_point(), now + std::chrono::milliseconds(settings_.idle_sleep_ms));
  sleeping_.store(true, std::memory_order_seq_cst);
  if (wake_.exchange(false, std::memory_order_seq_cst)) {
    sleeping_.store(false, std::memory_order_relaxed);
    return;
  }
  const auto slept = [this] {
    sleeping_.store(false, std::memory_order_relaxed);
    wake_.store(false, std::memory_order_relaxed);  // this sleep has ended anyway
    // A peer's first connection wakes the wait too: answer it now rather
    // than at the next sweep, 64 passes (sleeps) away.
    if (!in_progress_ && !incoming_contexts_.empty() &&
        base::now_ns() - incoming_polled_ns_ > 1'000'000)
      poll_incoming();
  };
  // Remote rails in several contexts: all of them at once, where they can.
  if (idle) {
    if (sleep_on_all(idle_set_, idle_set_ok_, until)) {
      ++stats_.idle_sleeps;
      return slept();
    }
    idle_set_refused_ = !idle_set_ok_;  // unsupported: for good
    until = std::min(deadline.time_point(), now + std::chrono::milliseconds(1));
  }
  if (sleep_slot_ < 0 && !sleep_set_.empty() && sleep_set_ok_ &&
      sleep_on_all(sleep_set_, sleep_set_ok_, until))
    return slept();
  // The context of every remote rail first (rebuild_polled), else the
  // first that can sleep.
  const std::size_t first = sleep_slot_ >= 0 ? static_cast<std::size_t>(sleep_slot_) : 0;
  for (std::size_t k = 0; k < drivers_.size(); ++k) {
    const std::size_t i = k == 0 ? first : (k <= first ? k - 1 : k);
    DriverSlot& d = drivers_[i];
    if (!d.props.caps.recv_any || !d.props.caps.blocking_wait) continue;
    driver::Instance* ready = nullptr;
    Status s = d.context->wait_any(&ready, until);
    if (s == Status::ok || s == Status::timeout || s == Status::canceled) return slept();
  }
  // No driver to sleep in: a short nap, checking for wake() now and then.
  for (int i = 0; i < 10 && !wake_.load(std::memory_order_relaxed); ++i)
    std::this_thread::sleep_for(std::chrono::microseconds(5));
  sleeping_.store(false, std::memory_order_relaxed);
  wake_.store(false, std::memory_order_relaxed);
}

void Core::Impl::wake() noexcept {
  wake_.store(true, std::memory_order_seq_cst);
  if (!sleeping_.load(std::memory_order_seq_cst)) return;
  for (DriverSlot& d : drivers_)
    if (d.props.caps.recv_any && d.props.caps.blocking_wait) (void)d.context->cancel_any();
}

}  // namespace pier::core
