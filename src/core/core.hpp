// pier::core: gates (one per peer) holding rails (one driver context each),
// the eager / rendezvous / multi-rail protocols, credit flow control,
// ordering and the progress engine. docs/core.md describes the design.
//
// The LIB-side NAL contract of seeds 000/001, as the upper layers see it:
//   - an upper layer (the Portals LIB, the port layer) attaches a Client for
//     its wire::Upper value, giving its largest header size (an eager
//     packet says how long its own header is, up to that);
//   - send(): the core copies the upper header during the call, moves the
//     payload from a validated Region, and calls lib_finalize(cookie) exactly
//     once after the last byte left (never from inside send());
//   - for each arriving eager or rts packet the core calls lib_parse() once;
//     the client answers with exactly one recv() on the Arrival's handle,
//     inside lib_parse or later; recv(handle, nullptr, nullptr, 0, 0, 0) is
//     the "clean up the wire" form. A non-null cookie is finalized exactly
//     once after the last byte landed (or with the error that ended it);
//   - lib_finalize() and lib_parse() run only inside progress()/wait().
//
// Threads: a Core is driven by one thread at a time (src/nal's progress
// thread serialises the calls). No call blocks except wait(), which takes a
// deadline. Data-path calls allocate nothing: message states, staging slots
// and control packets come from pools sized when the Core is made.
#pragma once

#include <pier/driver.hpp>
#include <pier/result.hpp>
#include <pier/status.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/clock.hpp"
#include "wire/frame.hpp"

namespace pier::boot {
class Bootstrap;
}

namespace pier::core {

using Rank = std::uint32_t;

/// A translated address (seed 000): what validate() returns. The LIB keeps
/// it and hands it back with offsets; the core checks every access against
/// [base, base + extent) and that the region was not invalidated.
struct Region {
  std::uint32_t handle = 0;
  std::byte* base = nullptr;
  std::size_t extent = 0;
};

/// Where a node/pid pair lives, for the id mapping (rank <-> node/pid).
struct NodePid {
  std::string node;
  std::uint32_t pid = 0;
  bool operator==(const NodePid&) const = default;
};

class Incoming;  // opaque: the `private` of lib_parse

/// What lib_parse sees of one arriving message.
struct Arrival {
  Rank source = 0;
  std::uint8_t priority = 0;
  std::uint16_t source_port = 0;
  std::uint16_t destination_port = 0;
  /// The upper header, valid only during lib_parse.
  std::span<const std::byte> header;
  /// Payload bytes the sender sends (the rlen of recv()).
  std::uint64_t length = 0;
  /// Pass unchanged to Core::recv() (R8).
  Incoming* handle = nullptr;
  /// The payload came with the header (no rendezvous): a recv() inside
  /// this lib_parse copies it and ends the message before it returns, so
  /// a recv() with a null cookie leaves nothing to finalize.
  bool at_hand = false;
};

/// The LIB-side callbacks of an upper layer.
class Client {
 public:
  virtual ~Client() = default;
  /// Once per arriving message; must lead to exactly one Core::recv().
  virtual void lib_parse(const Arrival& arrival) noexcept = 0;
  /// Exactly once per non-null cookie, after the message's last byte, with
  /// ok or the error that ended it (broken, truncated, ...). Usually at the
  /// end of a progress pass; when lib_parse left exactly one finalize
  /// queued and none was queued before it, that one runs as soon as
  /// lib_parse returns, before the pass takes its next packet. progress()
  /// called from a finalize returns at once (no nested pass).
  virtual void lib_finalize(void* cookie, Status status) noexcept = 0;
  /// Once per peer whose gate failed (its pending operations were finalized
  /// with the error just before); later sends to it fail at once. Runs
  /// inside progress()/wait(), like lib_finalize. Default: nothing.
  virtual void peer_failed(Rank peer) noexcept { (void)peer; }
  /// After a send() answered no_resource, once there is room again (inside
  /// progress()): work queued behind the refusal can go. Default: nothing.
  virtual void send_room() noexcept {}
};

/// One send() call's arguments.
struct SendArgs {
  void* cookie = nullptr;  ///< may be null: nothing is finalized then (an ack)
  Rank peer = 0;
  std::uint8_t priority = 0;  ///< < wire::priority_count
  std::uint16_t source_port = 0;
  std::uint16_t destination_port = 0;
  wire::Upper upper = wire::Upper::none;
  std::span<const std::byte> header;  ///< copied during send()
  const Region* region = nullptr;     ///< null only when length is 0
  std::size_t offset = 0;
  std::size_t length = 0;
  /// Only if the core takes the bytes now: the eager fast path copies the
  /// header and the data into the driver's buffer before send() returns.
  /// Otherwise no_resource, and nothing was sent. With a null cookie such a
  /// send is complete, for its caller, when send() returns ok.
  bool copy_now_only = false;
};

/// Counters for tests and pier-info; all monotonic except the gauges.
struct Stats {
  std::uint64_t eager_sent = 0, rdv_sent = 0, eager_received = 0, rdv_received = 0;
  std::uint64_t rtr_sent = 0, credit_packets = 0, reordered = 0, duplicates = 0;
  std::uint64_t finalized = 0, deferred_recvs = 0, gates_failed = 0, rails_failed = 0;
  /// Messages that waited in a slot for a receive state (the pool was taken).
  std::uint64_t held_for_state = 0;
  std::uint64_t prefetches = 0, prefetch_hits = 0;  ///< send_prefetch()es, and those posted
  std::uint64_t probes = 0;  ///< numbered probes sent on quiet gates with protocol state
  /// Fast eager sends the driver had not finished at once (a message state
  /// took them over and progress polled them to the end).
  std::uint64_t fast_handovers = 0;
  /// Sleeps on the descriptors of several driver contexts at once (remote
  /// rails in more than one context, each offering wait_fds).
  std::uint64_t sleeps_on_all = 0;
  std::uint64_t sleeps_on_all_woken = 0;  ///< of those, ended by a descriptor, not the clock
  /// Of those, sleeps of an idle core, up to CORE_IDLE_SLEEP_MS, on every
  /// context that carries a remote rail or takes connections (an arming
  /// that found work already there counts too).
  std::uint64_t idle_sleeps = 0;
  std::size_t send_msgs_live = 0, recv_msgs_live = 0;  ///< gauges
  /// Changes whenever a message arrived or one was finalized: how waiters
  /// and the helpers tell a quiet spell.
  std::uint64_t activity() const noexcept { return eager_received + rdv_received + finalized; }
};

/// The thresholds and rails chosen for one peer.
struct GateInfo {
  bool connected = false;
  Status failure = Status::ok;                       ///< ok while the gate is usable
  std::vector<std::string> rails;                    ///< driver specs, primary first
  std::size_t eager_limit = 0;                       ///< largest eager payload
  std::size_t split_min = 0;                         ///< smallest message split over rails
  std::uint32_t credits[wire::priority_count] = {};  ///< send credits now
};

/// Thresholds and choices as pier-info prints them.
struct Settings {
  std::string drivers;          ///< CORE_DRIVERS as read
  bool eager_connect = false;   ///< CORE_CONNECT=eager
  std::size_t eager_limit = 0;  ///< 0: per driver (eager_limit_for)
  std::size_t split_min = 0;
  std::uint32_t credits = 0;
  std::uint32_t send_msgs = 0, recv_msgs = 0;
  std::uint32_t spin_us = 0;
  std::uint32_t gap_limit_ms = 0;
  std::uint32_t idle_sleep_ms = 0;  ///< longest sleep of a core with nothing under way
  /// Upper header + payload bytes that go eager to a peer with the same
  /// settings and drivers over the driver with the largest limit (set by
  /// Core::create; gate_info(peer).eager_limit for one peer); larger sends
  /// use the rendezvous.
  std::size_t eager_max = 0;
  static Settings from_config();
};

/// The largest eager payload (upper header included) toward a driver:
/// `configured` (CORE_EAGER_LIMIT) when not 0, else four latency-bandwidth
/// products of its profile as a power of two from 32 KiB to 256 KiB; in
/// both cases capped by its max_packet less the core's headers.
std::size_t eager_limit_for(const driver::Properties& props, std::size_t configured) noexcept;

class Core {
 public:
  /// Brings up one context per driver named in CORE_DRIVERS (those that fail
  /// are logged and skipped). Peers are given later with connect().
  static Result<std::unique_ptr<Core>> create(Rank rank, Rank size);
  /// create(), then the address exchange through `boot`, then connect().
  static Result<std::unique_ptr<Core>> from_bootstrap(boot::Bootstrap& boot);
  ~Core();
  Core(const Core&) = delete;
  Core& operator=(const Core&) = delete;

  /// This process's address (every driver url, node, pid, credits), to give
  /// the peers; opaque bytes.
  const std::vector<std::byte>& address() const noexcept;
  /// Every rank's address, indexed by rank (this one's included). Picks the
  /// rails of each peer; connects lazily or eagerly (CORE_CONNECT).
  Status connect(std::span<const std::vector<std::byte>> addresses,
                 base::Deadline deadline = base::Deadline::after_ms(30000));

  Rank rank() const noexcept;
  Rank size() const noexcept;
  const Settings& settings() const noexcept;

  /// in_use when another client holds `upper`; invalid_argument for none or
  /// a header larger than max_upper_header.
  Status attach(wire::Upper upper, Client* client, std::size_t header_size);
  /// Lets `client` go while the core lives: arrivals it has not answered
  /// are cleaned from the wire, queued finalizes for it are dropped, and its
  /// sends still in flight complete without lib_finalize. Later arrivals for
  /// `upper` are dropped until a client attaches again. invalid_argument
  /// when `client` is not the one attached for `upper`.
  Status detach(wire::Upper upper, Client* client) noexcept;
  static constexpr std::size_t max_upper_header = 192;

  Result<Region> validate(void* base, std::size_t extent) noexcept;
  /// in_use while an operation still uses the region; not_found when stale.
  Status invalidate(const Region& region) noexcept;
  /// The `write` callback: copies into a validated region (event slots).
  Status write(const Region& region, std::size_t offset, std::span<const std::byte> src) noexcept;

  /// ok: accepted, lib_finalize follows. Errors at once: invalid_argument,
  /// broken (the peer's gate failed), no_resource (no message state left).
  Status send(const SendArgs& args) noexcept;
  /// Answers a lib_parse. ok, or invalid_argument (bad handle, second recv,
  /// out of the region). mlen bytes land at region + offset; the rest of
  /// rlen is cleaned from the wire. rlen is informative: the sender's length
  /// rules.
  Status recv(Incoming* handle, void* cookie, const Region* region, std::size_t offset,
              std::size_t mlen, std::size_t rlen) noexcept;

  /// Polls every rail once; runs callbacks. ok, or not_initialized.
  Status progress() noexcept;
  /// Progresses until `done()` is true or the deadline passes (timeout):
  /// spins CORE_SPIN_US, then sleeps in the drivers' waits.
  template <class Pred>
  Status wait(Pred done, base::Deadline deadline) noexcept {
    return wait_for(done, deadline, static_cast<std::int64_t>(spin_ns()), 0);
  }
  /// wait() that also returns (timeout) `slice_ns` after it started: a
  /// bounded turn for a caller that must look up between turns, without a
  /// clock read of its own before each. Without `spin` it sleeps at once
  /// (a later turn of a wait that has seen nothing).
  template <class Pred>
  Status wait_turn(Pred done, base::Deadline deadline, std::int64_t slice_ns,
                   bool spin = true) noexcept {
    return wait_for(done, deadline, spin ? static_cast<std::int64_t>(spin_ns()) : 0, slice_ns);
  }
  /// wait() without the spinning: between progress passes it sleeps in the
  /// drivers' waits (at most 1 ms at a time) or until wake().
  template <class Pred>
  Status wait_sleeping(Pred done, base::Deadline deadline) noexcept {
    return wait_for(done, deadline, 0, 0);
  }
  /// Asks for Client::send_room() at the end of this progress pass (or the
  /// next), once there is send room: for an upper that freed room of its
  /// own inside a callback and must not send before the pass has run every
  /// finalize and peer_failed (a send to a failed gate fails at once).
  void owe_send_room() noexcept;
  /// Thread-safe, from any thread: ends a sleep of wait()/wait_sleeping()
  /// in the thread driving the core (or the next one to start), so it
  /// re-checks its predicate at once. Cheap when nobody sleeps.
  void wake() noexcept;

  /// Critical sections (cb_cli / cb_sti): a lock the progress thread also
  /// takes around each progress() call.
  void enter_critical() noexcept;
  void leave_critical() noexcept;
  /// Another thread waits in enter_critical(): a long holder should let go.
  bool contended() const noexcept;
  /// A thread that is not patient (see below) waits in enter_critical(): a
  /// holder sleeping in a wait should end its turn now, not at its end.
  bool contended_urgently() const noexcept;
  /// Marks the calling thread's requests for the critical section as
  /// patient (or not again): a thread that itself only waits, or a helper
  /// that polls. They still get the lock between turns, but neither wake a
  /// sleeping holder nor end its turn; two waiting threads that did would
  /// hand the lock back and forth without ever sleeping. Returns the
  /// previous setting.
  static bool set_patient(bool patient) noexcept;

  /// Id mapping.
  Result<NodePid> node_of(Rank rank) const;
  Result<Rank> rank_of(const NodePid& id) const;

  Stats stats() const noexcept;
  Result<GateInfo> gate_info(Rank peer) const;
  /// Whether `peer` is reachable, without allocating: ok while its gate is
  /// usable (connected or connecting), the failure (broken, ...) once it
  /// failed, invalid_argument for a rank out of range or before connect().
  Status gate_status(Rank peer) const noexcept;
  /// The client found a message of `peer` malformed (an upper header that
  /// does not decode, or disagrees with the frame): its gate fails with
  /// `why` (malformed if it names no failure), as for a malformed core
  /// packet, so both sides' operations end with an error
  /// instead of being matched to the wrong answers. Callable from
  /// lib_parse: the gate fails once the packet in hand is done with, before
  /// the next one of that peer is delivered.
  void reject_peer(Rank peer, Status why) noexcept;
  /// Credits `peer` grants per priority: how many of our messages its slots
  /// hold at once (an upper layer that holds arrivals keeps fewer than this
  /// in flight, so its controls always find one). Our own setting for a
  /// peer not known yet.
  std::uint32_t credit_limit(Rank peer) const noexcept;
  /// Sends queued or in flight plus messages awaiting data: 0 when idle.
  std::size_t pending() const noexcept;

  class Impl;

 private:
  explicit Core(std::unique_ptr<Impl> impl);
  std::uint64_t spin_ns() const noexcept;
  void sleep_briefly(base::Deadline deadline) noexcept;
  template <class Pred>
  Status wait_for(Pred& done, base::Deadline deadline, std::int64_t spin_ns,
                  std::int64_t slice_ns) noexcept {
    // A clock read costs about as much as an empty progress pass (25 ns on
    // this project's VMs), so while spinning the clock is read on the first
    // pass and then once every 16: the deadline and the spin end are late
    // by at most 15 passes.
    std::int64_t spin_until = 0;
    unsigned passes = 0;
    while (!done()) {
      if (Status s = progress(); s != Status::ok) return s;
      if (done()) break;
      if (spin_ns != 0 && (passes++ % 16) != 0) continue;
      const std::int64_t now = base::now_ns();
      if (spin_until == 0) {
        spin_until = now + spin_ns;
        if (slice_ns > 0 && (deadline.is_never() || now + slice_ns < deadline.at_ns()))
          deadline = base::Deadline::at(now + slice_ns);
      }
      if (!deadline.is_never() && now >= deadline.at_ns()) return Status::timeout;
      if (spin_ns == 0 || now > spin_until) sleep_briefly(deadline);
    }
    return Status::ok;
  }
  std::unique_ptr<Impl> impl_;
};

}  // namespace pier::core
