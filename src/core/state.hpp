// pier core: the internal state: message states, control packets, rails,
// gates. Everything here comes from pools or arrays sized at set-up.
#pragma once

#include <pier/driver.hpp>

#include <sys/uio.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/core.hpp"
#include "core/list.hpp"
#include "wire/frame.hpp"

namespace pier::core {

struct Gate;
struct Rail;
struct SendMsg;
struct RegionEntry;

inline constexpr std::size_t max_rails = 4;
/// A rendezvous is cut into at most this many chunks (one per rail, plus
/// re-requests after a rail failed).
inline constexpr std::size_t max_chunks = 2 * max_rails;
/// Frame + rts + the largest upper header: what precedes eager payload.
inline constexpr std::size_t max_prefix =
    wire::FrameHeader::size + wire::RtsHeader::size + Core::max_upper_header;

/// One packet on a small track: the prefix bytes (frame, sub-header, upper
/// header) and at most one payload piece.
struct SmallSend {
  enum class Kind : std::uint8_t { message, control };
  Kind kind = Kind::message;
  void* owner = nullptr;  ///< the SendMsg or Ctrl
  SmallSend* next = nullptr;
  driver::Packet pkt;
  /// The packet the driver holds: `pkt`, or the rail's fast_pkt for an
  /// eager message sent by the fast path whose post did not finish at once.
  driver::Packet* posted = &pkt;
  std::array<::iovec, 2> iov{};
  std::size_t prefix_len = 0;
  const std::byte* payload = nullptr;
  std::size_t payload_len = 0;
  wire::FrameHeader frame;          ///< written into prefix at each post
  std::uint16_t credit_return = 0;  ///< piggybacked; given back if the post fails
  std::uint8_t priority = 0;
  bool sequenced = false;  ///< holds its sequence (and credit) since a first post
  alignas(8) std::array<std::byte, max_prefix> prefix{};
};

/// A control packet: rtr, ack or credit.
struct Ctrl {
  Ctrl* next = nullptr;
  SmallSend send;
};

/// One large-track transfer of [offset, offset + length) of a message.
struct Chunk {
  enum class State : std::uint8_t { unused, queued, posted, done, lost };
  State state = State::unused;
  bool rtr_sent = false;    ///< receiver side: the ready-to-receive left
  bool prefetched = false;  ///< sender side: send_prefetch()ed, not yet posted
  std::uint8_t rail = 0;
  Chunk* next = nullptr;
  void* owner = nullptr;  ///< SendMsg (send side) or Incoming (receive side)
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  driver::Packet pkt;
  ::iovec iov{};
};

/// Sender-side states; eager.cpp and rendezvous.cpp hold the tables.
enum class SendState : std::uint8_t {
  queued,     ///< waiting for a credit or the small track
  posted,     ///< eager packet or rts handed to the driver
  sent,       ///< eager: the driver is done with the packet
  wait_rtr,   ///< rts out; chunks are sent as rtrs arrive, until the ack
  completed,  ///< finalize queued, state released
};

struct SendMsg {
  SendMsg* next = nullptr;       ///< the priority's pending FIFO
  SendMsg* live_next = nullptr;  ///< the gate's list of live sends
  SendMsg* live_prev = nullptr;
  Gate* gate = nullptr;
  void* cookie = nullptr;
  wire::Upper upper = wire::Upper::none;
  bool rendezvous = false;
  bool acked = false;
  SendState state = SendState::queued;
  Status status = Status::ok;
  RegionEntry* region = nullptr;  ///< the pinned region, null for none
  std::uint64_t id = 0;           ///< message_id on the wire
  const std::byte* data = nullptr;
  std::uint64_t length = 0;
  std::uint8_t active_chunks = 0;
  std::array<Chunk*, max_chunks> chunks{};  ///< from the chunk pool, released with the message
  SmallSend small;
};

/// Receiver-side states of a message announced by lib_parse.
enum class RecvState : std::uint8_t {
  parsing,    ///< inside lib_parse, recv() not called yet
  deferred,   ///< lib_parse returned without recv(): the packet waits in a slot
  receiving,  ///< rendezvous chunks outstanding
  acking,     ///< all data in; the ack to the sender waits for a control packet
  completed,
};

/// What a failed gate reports to later operations: why it failed, but an
/// error that concerns one operation only (a truncation, say) says
/// "broken" for the whole peer.
constexpr Status failure_of(Status why) noexcept {
  return scope_of(why) == Scope::op ? Status::broken : why;
}

}  // namespace pier::core

namespace pier::core {

class Incoming {
 public:
  Incoming* live_next = nullptr;
  Incoming* live_prev = nullptr;
  Gate* gate = nullptr;
  RecvState state = RecvState::parsing;
  bool rendezvous = false;
  std::uint8_t priority = 0;
  wire::Upper upper = wire::Upper::none;
  Status status = Status::ok;
  std::uint64_t sender_id = 0;
  std::uint64_t length = 0;  ///< rlen: what the sender sends
  /// Eager payload: in the driver's buffer during lib_parse, else in `slot`.
  const std::byte* payload = nullptr;
  int slot = -1;
  bool credit_pending = false;  ///< the packet's credit returns when it completes
  void* cookie = nullptr;
  RegionEntry* region = nullptr;  ///< the pinned region, null for none
  std::byte* dest = nullptr;
  std::uint64_t mlen = 0;
  std::uint8_t active_chunks = 0;
  std::uint8_t used_chunks = 0;
  wire::AckResult ack_result = wire::AckResult::ok;
  std::array<Chunk*, max_chunks> chunks{};  ///< from the chunk pool, released with the message
};

enum class RailState : std::uint8_t { idle, connecting, connected, dead };

struct Rail {
  std::string spec;
  driver::Context* context = nullptr;
  driver::Properties props;
  std::vector<std::byte> remote_url;
  std::unique_ptr<driver::Instance> small;
  std::unique_ptr<driver::Instance> large;
  RailState state = RailState::idle;
  bool small_up = false, large_up = false;
  bool dying = false;   ///< failed; instances are destroyed at the next reap
  bool by_any = false;  ///< its small track is found through probe_any()
  Status why = Status::ok;
  /// The reap reads what the peer sent before the failure (draining), until
  /// drain_until_ns at the latest (0: not started, -1: gave up).
  bool draining = false;
  std::int64_t drain_until_ns = 0;
  // small-track receive into a core buffer (drivers without recv_buf)
  driver::Packet rx;
  ::iovec rx_iov{};
  std::unique_ptr<std::byte[]> rx_buf;
  std::size_t rx_capacity = 0;  ///< our receive capacity on this driver (rx_buf's size)
  bool rx_posted = false;
  /// A pass that took an eager message in sequence that left the gate
  /// nothing to do (Impl::quiet_arrival_, the common one answered in
  /// lib_parse) ends its polling of this rail there (took_one): the next
  /// poll would read a ring line untouched for a lap, a cache miss the
  /// reply a ping-pong sends next would wait for. A pass that then finds a
  /// packet at once shows a stream (burst): its passes take packets in
  /// batches again, until a first poll finds none.
  bool took_one = false;
  bool burst = false;
  Fifo<SmallSend, &SmallSend::next> inflight;
  /// The fast eager path's driver buffer packet; busy while a fast send's
  /// post is still in flight (then a SendMsg in `inflight` refers to it).
  driver::Packet fast_pkt;
  bool fast_busy = false;
  Fifo<Chunk, &Chunk::next> large_send;
  Fifo<Chunk, &Chunk::next> large_recv;
};

/// Out-of-order packets of one priority, waiting for the gap to fill.
struct Stashed {
  std::uint32_t sequence = 0;
  int slot = -1;
  std::size_t len = 0;
  /// The frame as validated on arrival: the copy in the slot was read from
  /// the driver's buffer a second time (shared memory a peer may rewrite in
  /// between), so it is never decoded again.
  wire::FrameHeader frame{};
};

struct Priority {
  std::uint32_t credits = 0;  ///< packets we may still send to the peer
  std::uint32_t owed = 0;     ///< receive slots freed, not yet given back
  /// Receive states held by the peer's messages of this priority: each
  /// keeps its credit spent, so an honest peer never holds more than we grant.
  std::uint32_t live_recvs = 0;
  std::uint32_t send_seq = 0;
  std::uint32_t recv_seq = 0;
  Fifo<SendMsg, &SendMsg::next> pending;
  std::vector<Stashed> stash;  ///< capacity reserved at set-up
  /// Messages in sequence (eager or rts) that found no receive state free:
  /// each waits in a slot, in order, for one (capacity reserved at set-up).
  std::vector<Stashed> held;
  std::int64_t stash_since_ns = 0;  ///< when the oldest hole opened
};

enum class GateState : std::uint8_t { idle, connecting, connected, failed };

struct Gate {
  Rank peer = 0;
  GateState state = GateState::idle;
  Status failure = Status::ok;
  std::vector<Rail> rails;  ///< reserved at set-up, never reallocated
  std::uint8_t primary = 0;
  std::array<Priority, wire::priority_count> prio;
  Fifo<Ctrl, &Ctrl::next> ctrl_pending;
  std::uint32_t peer_credits = 0;  ///< what the peer granted per priority
  std::size_t send_limit = 0;      ///< largest small packet the peer takes
  std::size_t eager_limit = 0;     ///< largest eager payload (without upper header)
  std::size_t split_min = 0;
  std::int64_t last_heard_ns = 0;
  /// Quiet-gate probes: when the next check is due (0: not armed), and each
  /// priority's send_seq at the last check.
  std::int64_t probe_at_ns = 0;
  std::array<std::uint32_t, wire::priority_count> probe_seq{};
  bool probe_asked = false;       ///< the peer probed us: answer once per period
  std::int64_t answer_at_ns = 0;  ///< no answer before this
  bool acks_waiting = false;
  bool active = true;  ///< the loopback gate starts inactive: no pass visits it until a send
  bool dirty = false;  ///< in Impl::dirty_: the next pass visits it
  /// A rail failed and its packets in flight are not yet back in the
  /// queues (reap): nothing new is posted meanwhile, or it would overtake
  /// them on the new primary and fill the peer's reorder stash.
  bool reap_due = false;
  /// The client found what the peer sent malformed (Core::reject_peer): the
  /// gate fails once the packet in hand is done with.
  Status fail_due = Status::ok;
  // staging slots: deferred and out-of-order packets
  std::size_t slot_bytes = 0;
  std::unique_ptr<std::byte[]> slot_mem;
  std::vector<int> free_slots;
  SendMsg* sends = nullptr;   ///< live sends (doubly linked)
  Incoming* recvs = nullptr;  ///< live incoming messages

  std::byte* slot(int index) noexcept {
    return slot_mem.get() + static_cast<std::size_t>(index) * slot_bytes;
  }
  int take_slot() noexcept {
    if (free_slots.empty()) return -1;
    int s = free_slots.back();
    free_slots.pop_back();
    return s;
  }
  void give_slot(int s) noexcept {
    if (s >= 0) free_slots.push_back(s);
  }
  Rail* primary_rail() noexcept {
    return primary < rails.size() && rails[primary].state == RailState::connected &&
                   !rails[primary].dying
               ? &rails[primary]
               : nullptr;
  }
};

}  // namespace pier::core
