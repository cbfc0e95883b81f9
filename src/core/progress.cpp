// pier core: the progress engine. One pass visits every gate: connection
// steps, small-track receives, small sends in flight, large tracks, pending
// control and message packets, the lost-packet watchdog, and the reaping of
// failed rails; then the finalize callbacks run, outside any driver call.
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
  std::int64_t now = 0;
  // Receive-any first: one probe per context finds the instance with a
  // packet instead of a poll of every peer's instance.
  // Anything odd (an unknown or unusable instance, a full budget) falls
  // back to polling every instance this pass, so nothing waits unseen; so
  // does every 64th pass, which is how a quiet instance's broken link (no
  // packet to report) is noticed.
  bool sweep = (++passes_ % 64) == 0;
  for (driver::Context* ctx : any_contexts_) {
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
  for (auto& gp : gates_) {
    Gate& gate = *gp;
    if (gate.state == GateState::failed || !gate.active) continue;
    if (gate.state != GateState::connected) {
      if (!step_connect(gate) || gate.state != GateState::connected) continue;
    }
    for (Rail& r : gate.rails)
      if (!r.by_any || sweep) poll_small_recv(gate, r, 32);
    for (Rail& r : gate.rails) {
      if (r.state != RailState::connected || r.dying || gate.state == GateState::failed) continue;
      poll_inflight(gate, r);
      large_step(gate, r);
    }
    if (gate.acks_waiting && gate.state != GateState::failed) {
      gate.acks_waiting = false;
      for (Incoming* in = gate.recvs; in;) {
        Incoming* next = in->live_next;
        if (in->state == RecvState::acking) rdv_recv_step(*in);
        in = next;
      }
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
  in_progress_ = false;
  run_completions();
  return Status::ok;
}

void Core::Impl::run_completions() noexcept {
  while (completion_count_ > 0) {
    const Completion c = completions_[completion_head_];
    completion_head_ = (completion_head_ + 1) % completions_.size();
    --completion_count_;
    ++stats_.finalized;
    if (c.client) c.client->lib_finalize(c.cookie, c.status);
  }
}

void Core::Impl::sleep_briefly(base::Deadline deadline) noexcept {
  // Sleep in a driver that can, but never long: other contexts and the
  // large tracks do not wake this wait.
  auto until = std::min(deadline.time_point(), driver::Clock::now() + std::chrono::milliseconds(1));
  for (DriverSlot& d : drivers_) {
    if (!d.props.caps.recv_any || !d.props.caps.blocking_wait) continue;
    driver::Instance* ready = nullptr;
    Status s = d.context->wait_any(&ready, until);
    if (s == Status::ok || s == Status::timeout || s == Status::canceled) return;
  }
  std::this_thread::sleep_for(std::chrono::microseconds(50));
}

}  // namespace pier::core
