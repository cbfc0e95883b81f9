// pier::port internals: the state behind Node and Port. docs/port.md gives
// the protocol; this header gives the objects:
//   sender side    Op (one per send token in use), Connection (per priority,
//                  target node, target port: ops in flight, parked, queued);
//   receiver side  Buffer (one per receive token in use), Stream (per
//                  priority, sending node, sending port: held arrivals,
//                  suspension, acks owed), Held (an arrival waiting);
//   events         three rings (other, low, high) of Slots, reserved in
//                  arrival order and made ready when the data landed.
// Everything comes from pools sized when the port opens.
#pragma once

#include <pier/port.hpp>

#include <array>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "base/clock.hpp"
#include "base/pool.hpp"
#include "core/core.hpp"
#include "wire/port.hpp"

namespace pier::port {

/// Either a C++ or a C callback, with its context.
struct Completion {
  Callback cpp = nullptr;
  pier_port_callback_t c = nullptr;
  void* context = nullptr;
};

/// A FIFO threaded through a `next` member.
template <class T>
struct Fifo {
  T* head = nullptr;
  T* tail = nullptr;
  std::size_t count = 0;
  bool empty() const noexcept { return head == nullptr; }
  void push(T* t) noexcept {
    t->next = nullptr;
    if (tail)
      tail->next = t;
    else
      head = t;
    tail = t;
    ++count;
  }
  void push_front(T* t) noexcept {
    t->next = head;
    head = t;
    if (!tail) tail = t;
    ++count;
  }
  T* pop() noexcept {
    T* t = head;
    if (!t) return nullptr;
    head = t->next;
    if (!head) tail = nullptr;
    t->next = nullptr;
    --count;
    return t;
  }
  /// Appends every element of `other`, leaving it empty.
  void splice(Fifo& other) noexcept {
    if (other.empty()) return;
    if (tail)
      tail->next = other.head;
    else
      head = other.head;
    tail = other.tail;
    count += other.count;
    other = Fifo{};
  }
};

/// 64-bit key -> 32-bit value; open addressing with backward-shift deletion
/// (no tombstones), fixed capacity.
class KeyIndex {
 public:
  static constexpr std::uint32_t npos = 0xffff'ffff;
  explicit KeyIndex(std::size_t entries);
  std::uint32_t find(std::uint64_t key) const noexcept;
  bool insert(std::uint64_t key, std::uint32_t value) noexcept;
  void erase(std::uint64_t key) noexcept;

 private:
  struct Cell {
    std::uint64_t key = 0;
    std::uint32_t value = npos;
  };
  std::size_t home(std::uint64_t key) const noexcept;
  std::vector<Cell> cells_;
  std::size_t mask_;
};

/// (priority, node, port) as one key, for connections and streams.
constexpr std::uint64_t link_key(std::uint8_t priority, std::uint32_t node,
                                 std::uint16_t port) noexcept {
  return std::uint64_t{node} | (std::uint64_t{port} << 32) | (std::uint64_t{priority} << 48);
}

enum class OpKind : std::uint8_t { send, put, get, resume, drop };

struct Connection;

struct Op {
  // User-provided, so Pool::acquire's `T()` runs only the member
  // initializers below instead of first clearing the whole object (a
  // `rep stos` that cost more than the rest of a send's set-up).
  Op() noexcept {}
  OpKind kind = OpKind::send;
  Port::Impl* owner = nullptr;
  bool counted = false;  ///< its failure already disabled the connection
  Completion done;
  Connection* conn = nullptr;
  std::uint8_t size = 0;
  std::byte* local = nullptr;  ///< send/put source, get destination
  std::uint64_t remote = 0;
  std::uint32_t length = 0;
  core::Region region{};  ///< of [local, local + length), when length > 0 and not staged
  /// A small send or put's bytes, copied at start into the port's staging
  /// store (Port::Impl::stage_region): 1 + its slot there, 0 when not staged.
  /// Saves a core validate and invalidate per message.
  std::uint32_t stage = 0;
  bool core_busy = false;     ///< our core.send awaits lib_finalize
  bool landing = false;       ///< a get's data awaits lib_finalize
  bool replied = false;       ///< the target's answer came (or stands in)
  bool holds_credit = false;  ///< counted in Node::Impl::data_in_flight
  Status local_status = Status::ok;
  Status reply_status = Status::ok;
  Status parked_reason = Status::broken;  ///< a nack behind a failure: its reason
  Op* next = nullptr;
};

struct Connection {
  std::uint64_t key = 0;
  std::uint32_t node = 0;
  std::uint16_t port = 0;
  std::uint8_t priority = 0;
  std::uint32_t failures = 0;  ///< reported, not yet resumed or dropped
  Fifo<Op> in_flight;          ///< posted, in the target's answer order
  Fifo<Op> parked;             ///< posted once, failed after a failure: resent on resume
  Fifo<Op> queued;             ///< not posted yet (disabled, or the core was full)
  bool on_retry = false;
  Connection* next = nullptr;  ///< in the port's retry list
  bool on_settle = false;
  Connection* settle_next = nullptr;  ///< in the port's settle list
};

struct Buffer {
  std::byte* ptr = nullptr;
  std::uint8_t size = 0;
  std::uint8_t priority = 0;
  std::uint8_t tag = 0;
  Buffer* next = nullptr;
};

/// An arrival that waits: for a buffer, for the stream to resume, or for
/// the arrivals ahead of it. A marker (handle null) stands for a resume or
/// drop control that owes only an ack when it reaches the head.
struct Held {
  core::Incoming* handle = nullptr;
  std::uint32_t controls = 0;  ///< a marker: how many consecutive controls it stands for
  wire::PortHeader header{};
  std::int64_t since_ns = 0;
  Held* next = nullptr;
};

struct Stream {
  std::uint64_t key = 0;
  std::uint32_t node = 0;
  std::uint16_t port = 0;
  std::uint8_t priority = 0;
  std::uint32_t suspended = 0;  ///< failures reported, not yet resumed or dropped
  std::uint32_t owed_acks = 0;
  std::uint16_t sender_epoch = 0;  ///< the incarnation of the port its ops come from
  Fifo<Held> held;
  bool on_ack_list = false;
  Stream* next = nullptr;  ///< in the port's ack list
};

/// An answer (ack, nack, get_reply) the core had no room for; retried from poll.
struct Reply {
  std::uint32_t node = 0;
  std::uint16_t port = 0;
  std::uint8_t priority = 0;
  wire::PortKind kind = wire::PortKind::ack;
  std::uint16_t peer_epoch = 0;  ///< of the port whose op it answers
  std::uint64_t tag = 0;
  std::uint64_t cookie = 0;
  core::Region region{};
  std::size_t offset = 0;
  std::uint32_t length = 0;
  /// The request it answers, taken from the core only once the answer
  /// leaves: while answers wait, the asker's credits stay spent, so it
  /// cannot queue more than the core holds (null: nothing to take).
  core::Incoming* request = nullptr;
  Reply* next = nullptr;
};

/// One event queue entry.
struct Slot {
  Event event{};
  std::size_t fast_offset = 0;  ///< its inline bytes in fast_store
  bool ready = false;
  bool flushed = false;  ///< a canceled alarm or a withdrawn receive: skipped
  std::uint64_t seq = 0;
  core::Region region{};  ///< the buffer's, while its data lands
  Port::Impl* owner = nullptr;
};

class Ring {
 public:
  void init(Port::Impl* owner, std::size_t capacity);
  /// Null when full.
  Slot* reserve(std::uint64_t seq) noexcept {
    if (count_ == capacity_) return nullptr;
    Slot& s = slots_[wrap(first_ + count_)];
    ++count_;
    s.ready = false;
    s.flushed = false;
    s.seq = seq;
    return &s;
  }
  /// The oldest entry, ready or not; null when empty.
  Slot* head() noexcept { return count_ == 0 ? nullptr : &slots_[first_]; }
  void pop() noexcept {
    if (count_ == 0) return;
    first_ = wrap(first_ + 1);
    --count_;
  }
  std::size_t size() const noexcept { return count_; }
  Slot& at(std::size_t i) noexcept { return slots_[wrap(first_ + i)]; }

 private:
  /// i < 2 * capacity: a compare instead of a division per access.
  std::size_t wrap(std::size_t i) const noexcept { return i >= capacity_ ? i - capacity_ : i; }
  std::vector<Slot> slots_;
  std::size_t capacity_ = 0;  ///< slots_.size(), without a division per access
  std::size_t first_ = 0;
  std::size_t count_ = 0;
};

struct AlarmRec {
  std::int64_t due_ns = 0;
  AlarmCallback callback = nullptr;
  void* context = nullptr;
  Slot* queued = nullptr;  ///< its event, once due
  Alarm* user = nullptr;
  bool handed = false;  ///< its event was handed out (receive): unknown() may end it
};

struct RegisteredRange {
  core::Region region{};
  bool used = false;
};

/// The cookie tag of a core call, in the low bits of the pointer.
enum class CookieTag : std::uintptr_t { op_send = 0, op_landing = 1, slot = 2 };

class Port::Impl {
 public:
  Impl(Node::Impl& node, unsigned id, std::uint16_t epoch);
  ~Impl();

  // ---- setup and ids
  Node::Impl& node;
  core::Core& node_core;  ///< node.core, without reaching through the node
  const unsigned id;
  /// This incarnation of the number: answers naming another are not ours.
  const std::uint16_t epoch;
  const std::uint32_t node_count;  ///< node_core.size(), fixed: checked per op
  Port* facade = nullptr;
  /// When it opened, on the node's answer clock (Node::Impl::answer_clock):
  /// its answers leave after those of sources stamped earlier.
  std::uint64_t opened_at = 0;
  bool closed = false;
  /// Core cookies naming this port's objects, not yet finalized: a closed
  /// port lives on until this is 0.
  std::size_t pinned = 0;
  bool closing = false;  ///< close() waits on it: not reaped meanwhile

  // ---- tokens
  unsigned send_total;
  unsigned recv_total;
  unsigned send_held;
  unsigned recv_held;

  // ---- sender side (send.cpp)
  Status start(OpKind kind, const Completion& done, std::uint8_t priority, std::uint32_t node_id,
               unsigned port, std::byte* local, std::uint64_t remote, std::size_t length,
               unsigned size) noexcept;
  Status resume_or_drop(bool drop, const Completion& done, std::uint8_t priority,
                        std::uint32_t node_id, unsigned port) noexcept;
  void on_reply(const core::Arrival& a, const wire::PortHeader& h) noexcept;
  void on_send_finalized(Op* op, Status s) noexcept;
  /// Takes `op` off its node's data_in_flight count (once).
  void release_credit(const Connection* c, Op* op) noexcept;
  /// Acks that rode in a send's tag, for our connection to its sender.
  void on_piggyback(std::uint8_t priority, std::uint32_t node_id, std::uint16_t port,
                    std::uint64_t acks) noexcept;
  void apply_acks(Connection* c, std::uint32_t count) noexcept;
  /// Completes what piggybacked acks answered (settle_head), from the
  /// next poll: an arrival's own event goes out first, and its SENT
  /// events follow at the next receive that polls.
  void settle_acked() noexcept;
  void on_landing_finalized(Op* op, Status s) noexcept;
  void retry_sends() noexcept;
  /// The core's gate to `node_id` failed: every op waiting for its answer
  /// there fails unreachable (once per connection, G10).
  void on_peer_failed(std::uint32_t node_id) noexcept;
  /// Receiving side of a peer's failure: its held arrivals give their core
  /// messages back (nobody is left to answer) and its streams start over.
  void forget_streams_of(std::uint32_t node_id) noexcept;
  void fail_unanswered(Connection* c) noexcept;
  void close_sender() noexcept;

  // ---- receiver side (recv.cpp)
  void on_arrival(const core::Arrival& a, const wire::PortHeader& h) noexcept;
  void on_slot_finalized(Slot* slot, Status s) noexcept;
  /// A receive whose data cannot land: its event slot is skipped, and its
  /// buffer provided again when the slot leaves the ring (reprovide).
  void withdraw_receive(Slot* slot) noexcept;
  void reprovide(const Event& e) noexcept;
  Status provide(std::byte* ptr, unsigned size, std::uint8_t priority, std::uint8_t tag) noexcept;
  void flush_acks() noexcept;
  void serve_streams() noexcept;
  void retry_replies() noexcept;
  void close_receiver() noexcept;
  Status register_range(void* ptr, std::size_t len) noexcept;
  Status deregister_range(void* ptr, std::size_t len) noexcept;
  std::uint64_t acceptable[priority_count] = {~std::uint64_t{0}, ~std::uint64_t{0}};

  // ---- events (port.cpp)
  const Event& receive() noexcept;
  const Event& blocking(int timeout_ms, bool spin) noexcept;
  void unknown(const Event& e) noexcept;
  /// The oldest ready event of the three rings (null when none); inline
  /// for the common empty case (a receive polls while nothing is ready).
  Slot* next_ready(Ring** from = nullptr) noexcept {
    return ready_events == 0 ? nullptr : scan_ready(from);
  }
  Slot* scan_ready(Ring** from) noexcept;
  /// Takes the flushed entries at the head of `r` out (cold path).
  void skip_flushed(Ring& r) noexcept;
  void mark_ready(Slot* slot) noexcept {
    slot->ready = true;
    ++ready_events;
  }
  void push_sent(Op* op) noexcept;
  void poll() noexcept;  ///< one round of the whole node
  /// Answers owed and retries, before core progress (inline: usually
  /// there is nothing to do).
  void poll_before() noexcept {
    if (settle_head) settle_acked();
    if (!reply_retry.empty()) retry_replies();
    // While answers wait for core room, acks stay owed in their streams
    // (one count each) instead of queueing an entry per stream every poll.
    if (ack_head && reply_retry.empty()) flush_acks();
  }
  /// Retries and timers, after core progress.
  void poll_after() noexcept {
    if (retry_head) retry_sends();
    if (!reply_retry.empty()) retry_replies();
    if (waiting > 0 && buffers_added) serve_streams();
    // The clock costs as much as the rest of a poll: timers (held arrivals,
    // alarms) are looked at every 16th poll only.
    if ((++polls & 15) != 0) return;
    poll_timers();
  }
  void poll_timers() noexcept;
  Status set_alarm(Alarm& a, std::uint64_t usecs, AlarmCallback cb, void* ctx) noexcept;
  void cancel_alarm(Alarm& a) noexcept;
  void fire_alarms() noexcept;
  std::size_t fast_max = 0;

  // state shared by the .cpp files
  base::Pool<Op> ops;
  /// Sends and puts of up to stage_bytes are copied here at start (one slot
  /// per send token, validated once at open) instead of validating the
  /// client's memory for each message.
  static constexpr std::size_t stage_bytes = 64;
  std::vector<std::byte> stage_store;
  core::Region stage_region{};
  /// Slots of stage_store not in use, a stack of free_stage_count.
  std::unique_ptr<std::uint32_t[]> free_stages;
  std::uint32_t free_stage_count = 0;
  /// Gives back what an op's source holds: its region, or its staging slot.
  void release_source(Op* op) noexcept {
    if (op->region.handle) {
      (void)core().invalidate(op->region);
      op->region = {};
    }
    if (op->stage != 0) {
      free_stages[free_stage_count++] = op->stage - 1;  // one slot per op: never full
      op->stage = 0;
    }
  }
  base::Pool<Connection> conns;
  KeyIndex conn_index;
  Connection* retry_head = nullptr;
  /// Connections whose ops piggybacked acks answered, not yet settled.
  Connection* settle_head = nullptr;
  /// The last connection and stream looked up: a ping-pong or a stream of
  /// sends hits them every time, without hashing.
  Connection* last_conn = nullptr;
  Stream* last_stream = nullptr;
  /// One Buffer per receive token, on a free list: a provide and a delivery
  /// cost a pointer push and pop (no handles name buffers).
  std::unique_ptr<Buffer[]> buffer_store;
  Buffer* spare_buffers = nullptr;
  Buffer* acquire_buffer() noexcept {
    Buffer* b = spare_buffers;
    if (b) spare_buffers = b->next;
    return b;
  }
  void release_buffer(Buffer* b) noexcept {
    b->next = spare_buffers;
    spare_buffers = b;
  }
  Fifo<Buffer> free_buffers[priority_count][max_size + 1];
  bool buffers_added = false;
  base::Pool<Stream> streams;
  KeyIndex stream_index;
  /// Streams one node may hold (PORT_STREAMS_PER_NODE), and how many each
  /// holds: one peer leaving streams suspended cannot starve the others.
  std::uint32_t streams_per_node = 0;
  std::vector<std::uint32_t> streams_of_node;
  base::Pool<Held> helds;
  std::size_t waiting = 0;  ///< held arrivals, all streams
  Stream* ack_head = nullptr;
  base::Pool<Reply> replies;
  Fifo<Reply> reply_retry;
  std::vector<RegisteredRange> ranges;
  std::vector<Connection*> live_conns;  ///< reserved at open: no allocation later
  std::vector<Stream*> live_streams;
  std::vector<AlarmRec*> armed;
  Ring rings[3];  ///< 0 other, 1 low, 2 high
  /// Slots marked ready and not popped yet: receive() on an idle port
  /// skips the ring scan.
  std::size_t ready_events = 0;
  std::uint64_t next_seq = 1;
  std::vector<std::byte> fast_store;  ///< fast_max bytes per low/high slot
  core::Region fast_region{};
  Event current{};
  base::Pool<AlarmRec> alarms;
  std::size_t alarms_armed = 0;
  std::int64_t next_check_ns = 0;
  std::uint32_t polls = 0;
  std::int64_t timeout_ns = 0;
  std::int64_t spin_ns = 0;

  core::Core& core() noexcept { return node_core; }
  std::uint32_t self() const noexcept { return node_core.rank(); }
  // The last one looked up is checked inline: a ping-pong or a stream of
  // sends finds it there every time.
  Connection* connection(std::uint8_t priority, std::uint32_t node_id, std::uint16_t port,
                         bool create) noexcept {
    if (last_conn && last_conn->key == link_key(priority, node_id, port)) return last_conn;
    return find_connection(priority, node_id, port, create);
  }
  Stream* stream(std::uint8_t priority, std::uint32_t node_id, std::uint16_t port,
                 bool create) noexcept {
    if (last_stream && last_stream->key == link_key(priority, node_id, port)) return last_stream;
    return find_stream(priority, node_id, port, create);
  }
  Connection* find_connection(std::uint8_t priority, std::uint32_t node_id, std::uint16_t port,
                              bool create) noexcept;
  Stream* find_stream(std::uint8_t priority, std::uint32_t node_id, std::uint16_t port,
                      bool create) noexcept;
  void maybe_release_stream(Stream* s) noexcept;
  /// Sends an answer now, or queues it behind those already waiting;
  /// `request`, when given, is taken from the core once the answer leaves.
  Status send_answer(std::uint8_t priority, std::uint32_t node_id, std::uint16_t port,
                     std::uint16_t peer_epoch, wire::PortKind kind, std::uint64_t tag,
                     std::uint64_t cookie = 0, const core::Region* region = nullptr,
                     std::size_t offset = 0, std::uint32_t length = 0,
                     core::Incoming* request = nullptr) noexcept;
  void nack(Stream* s, Status why, core::Incoming* request = nullptr) noexcept;
  /// Takes `request` from the core (its sender's credit comes back).
  void take(core::Incoming* request) noexcept;
  /// Ops of a new incarnation of the sending port: what the old one left
  /// (held ops, a suspension, acks owed) goes without answers.
  void restart_stream(Stream* s, std::uint16_t sender_epoch) noexcept;
  void owe_ack(Stream* s, std::uint32_t count = 1) noexcept;

 private:
  Status post(Op* op) noexcept;
  void drain(Connection* c) noexcept;
  /// Puts `c` on the retry list (its queue's head waits for core room).
  void wait_for_room(Connection* c) noexcept;
  void flush_stream(Stream* s) noexcept;
  Status post_reply(const Reply& r) noexcept;
  void fail_or_park(Connection* c, Op* op, Status why) noexcept;
  void settle(Connection* c) noexcept;
  void complete(Op* op) noexcept;
  bool serve_head(Stream* s) noexcept;
  /// `at_hand`: inside the arrival's lib_parse, its payload with it
  /// (core::Arrival::at_hand), so a small message lands before recv()
  /// returns and its event is ready at once.
  bool deliver(Stream* s, core::Incoming* handle, const wire::PortHeader& h,
               bool at_hand = false) noexcept;
  Buffer* take_buffer(std::uint8_t priority, std::uint8_t size) noexcept {
    return free_buffers[priority][size].pop();
  }
  const RegisteredRange* find_range(std::uint64_t addr, std::uint64_t len) const noexcept;
  void hold(Stream* s, core::Incoming* handle, const wire::PortHeader& h) noexcept;
  void drop_held(Stream* s) noexcept;
  /// The held arrival `x` of `s` as the request of its nack: it goes back
  /// to the core when the nack leaves, so its sender's credit stays spent
  /// meanwhile and a peer cannot queue more nacks than it has credits.
  /// With one credit per priority (no spare one for answers) it goes back
  /// now instead: two nodes each holding the other's only credit until
  /// their nacks leave would wait for each other for good.
  core::Incoming* nack_request(const Stream* s, core::Incoming* x) noexcept;
};

/// The one mapping of Status to the C codes (capi.cpp).
pier_port_status_t to_c_status(Status s) noexcept;

class Node::Impl final : public core::Client {
 public:
  Impl(core::Core& core, std::unique_ptr<core::Core> owned) noexcept;
  ~Impl() override;
  void lib_parse(const core::Arrival& a) noexcept override;
  void lib_finalize(void* cookie, Status status) noexcept override;
  void peer_failed(core::Rank peer) noexcept override;
  /// The core has room again, or an op's credit came back (owe_send_room):
  /// what waits goes now, not at the next poll (whoever progresses the
  /// core, the answers of closed ports included).
  void send_room() noexcept override;

  Result<Port::Impl*> open(unsigned id);
  void close(Port::Impl* port) noexcept;
  /// Frees closed ports whose core cookies all finalized.
  void reap() noexcept;
  /// One round for every open port: answers owed, core progress, timers.
  void poll() noexcept;
  /// Answers an op sent to a port that is not open (queued while the core
  /// has no room, retried from poll()).
  void nack_closed(const core::Arrival& a, const wire::PortHeader& h) noexcept;
  /// Takes `request` from the core (its sender's credit comes back).
  void take(core::Incoming* request) noexcept;

  struct ClosedNack {
    std::uint32_t node = 0;
    std::uint16_t closed_port = 0;
    std::uint16_t sender_port = 0;
    std::uint8_t priority = 0;
    std::uint16_t peer_epoch = 0;
    core::Incoming* request = nullptr;  ///< taken once the nack leaves
    std::uint64_t queued_at = 0;        ///< on the answer clock
  };
  Status post_closed_nack(const ClosedNack& n) noexcept;
  void retry_closed_nacks() noexcept;
  /// Answers from port number `id` to node `to` leave in the order their
  /// sources came to be (a sender matches them to its ops in order): each
  /// incarnation of the number from its open, each nack for the number
  /// while no port had it from when it was queued. Whether answers of a
  /// source stamped before `since` still wait for that node, in a closed
  /// incarnation's queue or in the closed-port nacks. Other nodes' answers
  /// are not held up.
  bool older_answers_wait(unsigned id, std::uint32_t to, std::uint64_t since) const noexcept {
    if (zombies.empty() && closed_nacks_count == 0) return false;
    return older_answers_wait_slow(id, to, since);
  }
  bool older_answers_wait_slow(unsigned id, std::uint32_t to, std::uint64_t since) const noexcept;
  /// Stamps port opens and queued closed-port nacks, in the order they
  /// happen (older_answers_wait).
  std::uint64_t answer_clock = 0;
  /// Retries the closed ports' queued answers, oldest first.
  void retry_zombies() noexcept;
  /// A ring, sized at construction for every receive state of the core:
  /// each queued nack keeps its request's.
  std::vector<ClosedNack> closed_nacks;
  std::size_t closed_nacks_first = 0;
  std::size_t closed_nacks_count = 0;

  core::Core& core;
  Node* facade = nullptr;
  std::unique_ptr<core::Core> owned_core;
  std::vector<std::unique_ptr<Port::Impl>> ports;  ///< by number; open ones
  std::vector<std::uint16_t> epochs;               ///< by number: the incarnation opened last
  std::vector<std::unique_ptr<Port::Impl>> zombies;
  std::vector<Port::Impl*> open_ports;  ///< reserved at construction
  /// Sends, puts and gets of every port in flight to each node, per
  /// priority: an arrival the target holds (no buffer yet, or its stream
  /// suspended after a failure) keeps a core credit, so the ports keep
  /// fewer than the target's credits in flight and resume/drop, which
  /// do not count, always find a credit (sized at construction).
  std::vector<std::uint32_t> data_in_flight[wire::priority_count];
  /// An op waits for data_in_flight to fall: a credit that comes back asks
  /// the core for send_room() at the end of the pass (after every finalize
  /// and peer_failed, so a retry never overtakes an older op's failure).
  bool limit_waiting = false;
  /// How many data ops may be in flight to `node` on one priority.
  std::uint32_t data_limit(std::uint32_t node) const noexcept {
    const std::uint32_t credits = core.credit_limit(node);
    return credits > 1 ? credits - 1 : 1;
  }
  std::shared_ptr<void> keep_alive;  ///< the bootstrap of Node::create()

  /// While no port is open nobody polls the node, yet peers still send to
  /// its closed numbers and its closed ports still owe answers: a caretaker
  /// thread polls it every PORT_IDLE_POLL_MS until a port opens (GM's NIC
  /// answers "port closed" on its own). Only a node that owns its core
  /// (an attached core has another driver), and only once a port was
  /// open: a job's ranks open theirs while peers may already send. open()
  /// and the destructor stop it first: one thread uses the node at a time.
  void start_caretaker() noexcept;
  void stop_caretaker() noexcept;
  std::thread caretaker;
  std::mutex caretaker_mutex;
  std::condition_variable caretaker_cv;
  bool caretaker_stop = false;  ///< under caretaker_mutex
  bool ending = false;          ///< in the destructor
};

inline void Port::Impl::poll() noexcept {
  node.poll();
}

}  // namespace pier::port
