// pier core: Core::Impl, shared by the files of src/core. Each protocol
// lives in its own file (eager.cpp, rendezvous.cpp, split.cpp); gate.cpp
// connects and fails gates, small.cpp moves small-track packets and credits,
// receive.cpp parses arriving packets, progress.cpp runs the engine.
#pragma once

#include <pier/driver.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/bytes.hpp"
#include "base/futex_mutex.hpp"
#include "base/log.hpp"
#include "base/pool.hpp"
#include "core/address.hpp"
#include "core/core.hpp"
#include "core/state.hpp"

namespace pier::core {

struct RegionEntry {
  std::byte* base = nullptr;
  std::size_t extent = 0;
  std::uint32_t pins = 0;
};

/// One driver context this process brought up.
struct DriverSlot {
  std::string spec;  ///< "tcp", "fault:self"
  std::uint8_t index = 0;
  std::unique_ptr<driver::Context> context;
  driver::Properties props;
  std::vector<std::byte> url;
  std::size_t recv_capacity = 0;  ///< largest small packet accepted on it
};

struct Completion {
  Client* client = nullptr;
  void* cookie = nullptr;
  Status status = Status::ok;
};

using base::copy_bytes;

class Core::Impl {
 public:
  Impl(Rank rank, Rank size, const Settings& settings);
  ~Impl();

  // --- set-up (core.cpp, gate.cpp) ---
  Status bring_up_drivers();
  Status connect(std::span<const std::vector<std::byte>> addresses, base::Deadline deadline);
  Status build_gate(Gate& gate, const PeerAddress& peer);
  /// Opens instances and calls connect_async on every rail of the gate.
  void start_connect(Gate& gate) noexcept;
  /// Drives connect_wait; true once the gate is connected or failed.
  bool step_connect(Gate& gate) noexcept;

  // --- failure (gate.cpp) ---
  void rail_failed(Gate& gate, Rail& rail, Status why) noexcept;
  /// Destroys the instances of dying rails and settles what they carried.
  void reap(Gate& gate) noexcept;
  void fail_gate(Gate& gate, Status why) noexcept;
  /// Opens the gates of peers that connected first (lazy set-up).
  void poll_incoming() noexcept;

  // --- small track (small.cpp) ---
  /// Posts one small packet on the primary rail: ok (done), in_progress
  /// (in flight), no_resource (retry later) or the failure.
  Status post_small(Gate& gate, SmallSend& s) noexcept;
  void poll_inflight(Gate& gate, Rail& rail) noexcept;
  void on_small_sent(Gate& gate, SmallSend& s, Status status) noexcept;
  /// A control packet with its frame written, or nullptr when none is free.
  Ctrl* new_ctrl(Gate& gate, wire::PacketType type, std::uint8_t priority,
                 std::span<const std::byte> body, std::uint16_t rail_index = 0) noexcept;
  void flush(Gate& gate) noexcept;

  // --- receive (receive.cpp) ---
  /// Receives up to `budget` small-track packets of the rail; true when it
  /// stopped with packets maybe left (budget, or no room to finalize them).
  bool poll_small_recv(Gate& gate, Rail& rail, int budget) noexcept;
  /// poll_small_recv() of a recv_buf rail from what its first recv_poll()
  /// answered (not in_progress), `budget` counting that packet.
  bool recv_polled(Gate& gate, Rail& rail, Status st, int budget) noexcept;
  /// Whether a receive loop may poll `rail` again: `stop` (the rail or the
  /// gate is out; a gate the client rejected is failed now), `later` (more
  /// may wait: the next pass) or `poll`.
  enum class PollNext { stop, later, poll };
  PollNext may_poll(Gate& gate, const Rail& rail) noexcept {
    if (rail.state != RailState::connected || (rail.dying && !rail.draining) ||
        gate.state == GateState::failed)
      return PollNext::stop;
    if (gate.fail_due != Status::ok) {
      fail_gate(gate, gate.fail_due);
      return PollNext::stop;
    }
    // Each arrival may queue one completion, and an eager message answered
    // in lib_parse frees its state for the next packet of this pass: taken
    // without limit, a pass overran the finalize ring (cookies finalized
    // twice, others never). What waits stays in the driver for the next
    // pass, after this one's completions ran.
    return completion_room() ? PollNext::poll : PollNext::later;
  }
  /// Whether poll_small_recv() would poll the rail now with nothing else to
  /// do first: progress() polls such a rail inline, and most passes find
  /// nothing (the call and its prologue were half of an empty pass).
  bool plainly_pollable(const Gate& gate, const Rail& rail) const noexcept {
    return rail.props.caps.recv_buf && rail.state == RailState::connected && !rail.dying &&
           gate.state != GateState::failed && gate.fail_due == Status::ok && completion_room();
  }
  /// After a packet: fails the gate for a bad one (or one whose peer the
  /// client rejected), else marks it for a visit when it may have work.
  /// false: stop polling it.
  bool packet_taken(Gate& gate, Status s) noexcept {
    if (s == Status::ok) s = gate.fail_due;  // the client rejected what it parsed
    if (s != Status::ok) {
      PIER_LOG(warn, "core", "rank {} sent a bad packet: {}", gate.peer, to_string(s));
      fail_gate(gate, s);
      return false;
    }
    // An eager message answered in lib_parse leaves nothing to do (recv()
    // marked the gate if credits are due); anything else (control packets,
    // packets out of order) may have, so the gate is checked.
    if (!quiet_arrival_) touch(gate);
    return true;
  }
  /// Reaping a rail: delivers what its peer sent before it failed (see
  /// gate.cpp); false while more waits for room in the finalize ring.
  bool drain_dying(Gate& gate, Rail& rail) noexcept;
  static constexpr std::int64_t drain_limit_ns = 1'000'000'000;
  /// Delivers the stashed packets of `p` that are now in sequence;
  /// `advanced`: a packet in sequence just came (the hole moved).
  Status drain_stash(Gate& gate, Priority& p, bool advanced) noexcept;
  /// An eager or rts message in sequence that finds no receive state free
  /// (or others already waiting for one): kept in a slot, in order.
  Status hold(Gate& gate, Priority& p, const wire::FrameHeader& h,
              std::span<const std::byte> payload, int slot) noexcept;
  /// Delivers held messages of `p` while states and finalize room last.
  Status release_held(Gate& gate, Priority& p) noexcept;
  /// Room in the finalize ring for one more arrival: every live state will
  /// queue one completion, and an arrival adds at most one.
  bool completion_room() const noexcept {
    return completion_count_ + sends_.outstanding() + recvs_.outstanding() <= completion_mask_;
  }

  /// One whole small packet. `stable`: the bytes outlive this call.
  Status on_packet(Gate& gate, std::span<const std::byte> bytes) noexcept;
  /// An eager or rts packet in sequence. `slot`: the stash slot holding
  /// it, or -1 while it sits in the driver's buffer.
  Status on_ordered(Gate& gate, const wire::FrameHeader& h, std::span<const std::byte> payload,
                    int slot) noexcept;
  /// The common arrival, an eager message in sequence with nothing
  /// stashed: on_ordered, eager_arrival and deliver in one, for the case
  /// that needs none of their other branches (it falls back to on_ordered).
  Status eager_in_order(Gate& gate, Priority& p, const wire::FrameHeader& h,
                        std::span<const std::byte> payload) noexcept;
  /// Gives back a receive slot's credit to the peer (piggybacked later).
  void owe_credit(Gate& gate, std::uint8_t priority) noexcept { ++gate.prio[priority].owed; }

  // --- eager (eager.cpp) ---
  /// The fast path: an eager message written straight into the primary
  /// rail's send buffer, with no message state when the post completes at
  /// once. false: nothing happened, take the queued path. Inline: send()'s
  /// only callee on the common path, whose call and prologue cost as much
  /// as its checks.
  bool eager_fast(Gate& gate, const SendArgs& a, std::byte* data, RegionEntry* entry) noexcept {
    Priority& p = gate.prio[a.priority];
    // In order only when nothing of this priority waits; control packets go
    // first when queued (they free resources on both sides).
    if (gate.state != GateState::connected || !p.pending.empty() || !gate.ctrl_pending.empty() ||
        p.credits == 0 || gate.reap_due)
      return false;
    Rail* rail = gate.primary_rail();
    if (rail == nullptr || !rail->props.caps.send_buf || rail->fast_busy) return false;
    // A post that does not finish at once needs a message state to track it.
    if (sends_.available() == 0) return false;
    driver::Instance& inst = *rail->small;
    driver::Packet& pkt = rail->fast_pkt;
    Status st = inst.send_buf_get(pkt);
    if (st != Status::ok) return false;  // the queued path retries or fails the rail
    const std::size_t prefix = wire::FrameHeader::size + a.header.size();
    const std::size_t total = prefix + a.length;
    if (pkt.buf_len < total) {
      fast_buffer_short(gate, *rail, pkt.buf_len, total);
      return false;
    }
    wire::FrameHeader h;
    h.type = wire::PacketType::eager;
    h.priority = a.priority;
    h.upper = a.upper;
    h.upper_length = static_cast<std::uint8_t>(a.header.size());
    h.source_endpoint = rank_;
    h.source_port = a.source_port;
    h.destination_port = a.destination_port;
    h.payload_length = static_cast<std::uint32_t>(a.header.size() + a.length);
    h.sequence = p.send_seq;
    const auto give = static_cast<std::uint16_t>(std::min<std::uint32_t>(p.owed, 0xffff));
    h.credit_return = give;
    // In range by construction: send() checked priority, upper and header
    // length, and the packet fits the peer's limit.
    wire::write_frame(
        h, std::span<std::byte, wire::FrameHeader::size>(pkt.buf, wire::FrameHeader::size));
    copy_bytes(pkt.buf + wire::FrameHeader::size, a.header.data(), a.header.size());
    copy_bytes(pkt.buf + prefix, data, a.length);
    st = inst.send_buf_post(pkt, total);
    if (st == Status::in_progress) st = inst.send_poll(pkt);
    if (st == Status::no_resource) return false;
    if (!is_success(st)) {
      rail_failed(gate, *rail, st);
      return false;  // queued: the next primary sends it, or the gate fails
    }
    p.owed -= give;
    --p.credits;
    ++p.send_seq;
    ++stats_.eager_sent;
    if (st == Status::ok) {
      if (a.cookie) {
        Completion& c = completions_[(completion_head_ + completion_count_) & completion_mask_];
        c = {clients_[static_cast<std::size_t>(a.upper)], a.cookie, Status::ok};
        ++completion_count_;
      }
      return true;
    }
    return eager_handover(gate, *rail, a, data, entry, h, give);
  }
  /// The fast path's post did not complete at once: a message state takes
  /// the packet over (eager.cpp).
  bool eager_handover(Gate& gate, Rail& rail, const SendArgs& a, std::byte* data,
                      RegionEntry* entry, const wire::FrameHeader& h, std::uint16_t give) noexcept;
  /// A send buffer smaller than the packet: fails the rail (eager.cpp).
  void fast_buffer_short(Gate& gate, Rail& rail, std::size_t got, std::size_t total) noexcept;
  Status eager_send(SendMsg& m) noexcept;
  void eager_step(SendMsg& m) noexcept;
  /// A receive state for a message of `priority` from the gate's peer:
  /// malformed when the peer already holds its whole grant (it overran its
  /// credits), no_memory when the pool is empty.
  Status acquire_incoming(Gate& gate, std::uint8_t priority, Incoming*& out) noexcept {
    Priority& p = gate.prio[priority];
    if (p.live_recvs >= settings_.credits) {
      PIER_LOG(warn, "core", "rank {} overran its credits: {} messages of priority {} unfinished",
               gate.peer, p.live_recvs, priority);
      return Status::malformed;
    }
    out = recvs_.acquire();
    if (out == nullptr) {
      PIER_LOG(error, "core", "no receive message state left (PIER_CORE_RECV_MSGS)");
      return Status::no_memory;
    }
    ++p.live_recvs;
    return Status::ok;
  }
  Status eager_arrival(Gate& gate, const wire::FrameHeader& h, std::span<const std::byte> payload,
                       int slot) noexcept;
  Status eager_recv(Incoming& in, void* cookie, std::byte* dest, std::size_t mlen) noexcept;

  // --- rendezvous (rendezvous.cpp) ---
  Status rdv_send(SendMsg& m) noexcept;
  void rdv_send_step(SendMsg& m) noexcept;
  /// send_prefetch() of the whole message on the primary rail's large track.
  void prefetch(SendMsg& m) noexcept;
  /// Undoes any send_prefetch() of the message not consumed by a post.
  void unfetch(SendMsg& m) noexcept;
  Status rts_arrival(Gate& gate, const wire::FrameHeader& h, std::span<const std::byte> payload,
                     int slot) noexcept;
  Status rtr_arrival(Gate& gate, const wire::FrameHeader& h,
                     std::span<const std::byte> payload) noexcept;
  Status ack_arrival(Gate& gate, std::span<const std::byte> payload) noexcept;
  Status rdv_recv(Incoming& in, void* cookie, std::byte* dest, std::size_t mlen) noexcept;
  void rdv_recv_step(Incoming& in) noexcept;
  void large_step(Gate& gate, Rail& rail) noexcept;
  /// The rtr of a receive-side chunk; false when no control packet is free.
  bool send_rtr(Gate& gate, Rail& rail, Chunk& c) noexcept;
  /// Asks for the chunk after `receiving` before it is posted, where the
  /// rail's driver allows it (rendezvous.cpp).
  void ask_ahead(Gate& gate, Rail& rail, const Chunk& receiving) noexcept;
  /// A receive-side chunk ended badly: re-request it on a live rail or fail.
  void chunk_lost(Incoming& in, Chunk& c) noexcept;

  // --- common message life (core.cpp) ---
  Status deliver(Gate& gate, const wire::FrameHeader& h, std::span<const std::byte> header,
                 std::uint64_t length, Incoming& in) noexcept;
  /// Hands an arrival to its client's lib_parse: true when the client
  /// answered inside it. The message may then be released already.
  bool parse(Client& client, const Gate& gate, const wire::FrameHeader& h,
             std::span<const std::byte> header, std::uint64_t length, Incoming& in) noexcept {
    Arrival a;
    a.source = gate.peer;
    a.priority = h.priority;
    a.source_port = h.source_port;
    a.destination_port = h.destination_port;
    a.header = header;
    a.length = length;
    a.handle = &in;
    a.at_hand = !in.rendezvous;
    parsing_ = &in;
    parse_answered_ = false;
    const bool ring_was_empty = completion_count_ == 0;
    client.lib_parse(a);
    parsing_ = nullptr;
    // An answered message may already be released: only the flag is safe.
    if (!parse_answered_) return false;
    // The message ended inside lib_parse. With no finalize queued before
    // it, its finalize runs now instead of through the ring at the end of
    // the pass: the order is the one a pass that took this packet alone
    // gives, and the ring's write and read were a fifth of the receive
    // path. Only inside a pass (never from send() or connect()), and not
    // while a reap drains a dying rail.
    if (ring_was_empty && completion_count_ == 1 && in_progress_ && !in_progress_reap_)
      run_one_completion();
    return true;
  }
  /// lib_parse returned without recv(): the message waits, its eager
  /// payload copied into a slot (the driver's buffer goes back now).
  Status defer(Gate& gate, Incoming& in) noexcept;
  void complete_send(SendMsg& m, Status status) noexcept;
  void complete_recv(Incoming& in, Status status) noexcept;
  // The lists and pins below are inline: out of line, each was a call on
  // every message's path.
  void link(Gate& gate, SendMsg& m) noexcept {
    m.live_prev = nullptr;
    m.live_next = gate.sends;
    if (gate.sends) gate.sends->live_prev = &m;
    gate.sends = &m;
  }
  void unlink(Gate& gate, SendMsg& m) noexcept {
    if (m.live_prev)
      m.live_prev->live_next = m.live_next;
    else if (gate.sends == &m)
      gate.sends = m.live_next;
    if (m.live_next) m.live_next->live_prev = m.live_prev;
    m.live_next = m.live_prev = nullptr;
  }
  void link(Gate& gate, Incoming& in) noexcept {
    in.live_prev = nullptr;
    in.live_next = gate.recvs;
    if (gate.recvs) gate.recvs->live_prev = &in;
    gate.recvs = &in;
  }
  void unlink(Gate& gate, Incoming& in) noexcept {
    if (in.live_prev)
      in.live_prev->live_next = in.live_next;
    else if (gate.recvs == &in)
      gate.recvs = in.live_next;
    if (in.live_next) in.live_next->live_prev = in.live_prev;
    in.live_next = in.live_prev = nullptr;
  }
  void unpin(RegionEntry* e) noexcept {
    // A pinned entry cannot be invalidated (in_use), so the pointer is live.
    if (e && e->pins > 0) --e->pins;
  }
  Status pin(const Region* region, std::size_t offset, std::size_t length, std::byte** at) noexcept;
  /// pin() without the pin: checks [offset, offset + length) of the region.
  /// Inline: send() and recv() both call it for every message.
  Status resolve(const Region* region, std::size_t offset, std::size_t length, RegionEntry** entry,
                 std::byte** at) noexcept {
    *entry = nullptr;
    *at = nullptr;
    if (length == 0) return Status::ok;
    if (region == nullptr) return Status::invalid_argument;
    RegionEntry* e = regions_.lookup(static_cast<base::Pool<RegionEntry>::Handle>(region->handle));
    if (e == nullptr) return Status::invalid_argument;
    if (offset > e->extent || length > e->extent - offset) return Status::invalid_argument;
    *entry = e;
    *at = e->base + offset;
    return Status::ok;
  }

  // --- progress (progress.cpp) ---
  Status progress() noexcept;
  /// The rest of a pass: receive-any probes, the dirty gates (all of them
  /// when `sweep`), the polled list's rebuild.
  void slow_pass(bool sweep) noexcept;
  /// One gate's turn: connection, large tracks, queued packets, watchdog,
  /// reaping. `sweep`: also poll small tracks normally found by probe_any.
  void visit(Gate& gate, bool sweep) noexcept;
  /// Whether the gate has anything a pass must look at besides receiving.
  bool busy(const Gate& gate) const noexcept;
  /// Sends a numbered probe on priorities quiet for a while (see progress.cpp).
  void probe_if_quiet(Gate& gate, std::int64_t now) noexcept;
  /// The peer probed: one numbered packet per priority we have sent on.
  void answer_probe(Gate& gate, std::int64_t now) noexcept;
  /// Puts the gate on the dirty list when it has work (cheap when it has not).
  void touch(Gate& gate) noexcept {
    if (!gate.dirty && busy(gate)) {
      gate.dirty = true;
      dirty_.push_back(&gate);
    }
  }
  /// Queued small packets or credits to give back.
  bool small_work(const Gate& g) const noexcept {
    if (!g.ctrl_pending.empty()) return true;
    for (const Priority& p : g.prio)
      if (!p.pending.empty() || p.owed >= credit_threshold_) return true;
    return false;
  }
  /// Rebuilds polled_ from the gates' connected, directly polled rails.
  void rebuild_polled() noexcept;
  void run_completions() noexcept;
  /// Runs the oldest queued finalize (the ring is not empty).
  void run_one_completion() noexcept {
    const Completion c = completions_[completion_head_];
    completion_head_ = (completion_head_ + 1) & completion_mask_;
    --completion_count_;
    ++stats_.finalized;
    if (c.client) c.client->lib_finalize(c.cookie, c.status);
  }
  void sleep_briefly(base::Deadline deadline) noexcept;
  void wake() noexcept;

  Rank rank_;
  Rank size_;
  Settings settings_;
  std::vector<DriverSlot> drivers_;
  /// Small-track instances of buffer-receive rails, for probe_any().
  std::unordered_map<const driver::Instance*, std::pair<Gate*, Rail*>> by_instance_;
  /// Receives any-source first on these contexts (recv_any and recv_buf).
  std::vector<driver::Context*> any_contexts_;
  /// Lazy set-up: contexts whose peers may connect first (Caps::incoming).
  std::vector<driver::Context*> incoming_contexts_;
  std::vector<std::byte> incoming_url_;  ///< poll_incoming()'s buffer
  std::int64_t incoming_polled_ns_ = 0;
  LocalAddress local_;
  std::vector<std::byte> address_;
  std::vector<PeerAddress> peers_;
  std::vector<std::unique_ptr<Gate>> gates_;
  /// Small tracks polled directly each pass (the rest come from probe_any).
  struct Polled {
    Gate* gate;
    Rail* rail;
  };
  std::vector<Polled> polled_;  ///< capacity reserved at connect()
  bool polled_stale_ = false;   ///< rebuilt at the end of the pass
  /// drivers_ index of the context that carries every remote rail, where a
  /// sleep wakes for any arrival; -1 when there is none or several.
  int sleep_slot_ = -1;
  /// When remote rails live in several contexts: their drivers_ indexes, if
  /// every one of them offers wait_fds (else empty), and the descriptors a
  /// sleep polls on all of them at once (capacities reserved at connect()).
  std::vector<int> sleep_set_;
  std::vector<::pollfd> sleep_fds_;
  /// Cleared when a context of the set answered that it cannot arm at all
  /// (unsupported: ofi without a queue descriptor): sleeps go back to one
  /// context.
  bool sleep_set_ok_ = true;
  /// Arms every context of `set`, then one ppoll over their descriptors
  /// until `until`; false when one refused (`ok` cleared when it never can).
  bool sleep_on_all(const std::vector<int>& set, bool& ok,
                    driver::Clock::time_point until) noexcept;
  /// An idle core sleeps longer (CORE_IDLE_SLEEP_MS) on every context that
  /// carries a remote rail or takes incoming connections, when each offers
  /// wait_fds: their descriptors then announce whatever could give it work.
  std::vector<int> idle_set_;
  bool idle_set_ok_ = false;
  bool idle_set_refused_ = false;         ///< a context of it answered unsupported
  std::uint64_t idle_activity_ = 0;       ///< arrivals + finalizes when the idle spell began
  driver::Clock::time_point idle_since_;  ///< when it began
  void rebuild_idle_set() noexcept;
  /// Nothing under way that a driver's descriptor would not announce.
  bool idle_now() const noexcept;
  /// Gates with work besides receiving; the rest are visited every 64th pass.
  std::vector<Gate*> dirty_;            ///< capacity reserved at connect()
  std::uint32_t credit_threshold_ = 1;  ///< owed credits that warrant a credit packet
  std::size_t send_budget_ = 0;         ///< live sends + queued completions allowed
  /// A send() was refused for want of room: the clients hear when there
  /// is room again (an upper that queued work behind it has no other cue
  /// when nothing it sent carries a cookie).
  bool room_owed_ = false;
  /// Whether a send() would find a message state and budget now.
  bool send_room() const noexcept {
    return completion_count_ + sends_.outstanding() < send_budget_ &&
           sends_.outstanding() < sends_.capacity();
  }
  bool connected_ = false;
  std::size_t recv_capacity_ = 0;  ///< largest small packet we accept

  std::array<Client*, wire::upper_limit> clients_{};
  std::array<std::size_t, wire::upper_limit> header_size_{};

  base::Pool<SendMsg> sends_;
  base::Pool<Incoming> recvs_;
  base::Pool<Ctrl> ctrls_;
  base::Pool<Chunk> chunks_;
  base::Pool<RegionEntry> regions_;
  std::vector<Completion> completions_;  ///< ring, fixed capacity, a power of two
  /// completions_.size() - 1, kept: the size of 24-byte elements costs a
  /// multiplication, on every packet and every empty pass.
  std::size_t completion_mask_ = 0;
  std::size_t completion_head_ = 0;
  std::size_t completion_count_ = 0;
  std::uint64_t next_slot_id_ = 0;
  bool in_progress_ = false;
  bool in_progress_reap_ = false;
  std::uint64_t passes_ = 0;
  Incoming* parsing_ = nullptr;  ///< the message inside lib_parse now
  bool parse_answered_ = false;  ///< recv() was called for it
  /// The last packet on_packet() took was an in-order eager message with
  /// nothing stashed: its gate needs no check (see poll_small_recv).
  bool quiet_arrival_ = false;
  /// Messages held for a receive state over every gate: the states that
  /// free go to them before any new arrival.
  std::size_t held_total_ = 0;
  Stats stats_;
  /// Inline when free: every Portals call and every wait's turn takes it.
  base::FutexMutex critical_;
  /// Threads waiting in enter_critical(): a waiter's turn ends early for
  /// them, and the waiter lets them in before taking the lock again.
  std::atomic<int> contenders_{0};
  std::atomic<int> urgent_contenders_{0};  ///< of contenders_, those not patient
  /// Peers whose gate failed, told to the clients after the finalizes.
  std::vector<Rank> failed_peers_;  ///< capacity reserved at connect()
  /// wake(): set by any thread; the driving thread's sleep checks it, and
  /// a sleeper announces itself in sleeping_ (both seq_cst: either the
  /// waker sees the sleeper and cancels its driver wait, or the sleeper
  /// sees the flag and does not sleep).
  std::atomic<bool> wake_{false};
  std::atomic<bool> sleeping_{false};
};

}  // namespace pier::core
