// pier::port: a port's set-up, its event queue (receive, blocking receive,
// unknown), alarms, and the public facade.
#include <algorithm>
#include <bit>
#include <mutex>
#include <thread>

#include "base/config.hpp"
#include "base/log.hpp"
#include "port/impl.hpp"

namespace pier::port {

namespace {

inline const config::IntKey send_tokens_key{"PORT_SEND_TOKENS", 32, 1, 4096,
                                            "send tokens of a port (gm_num_send_tokens)"};
inline const config::IntKey recv_tokens_key{"PORT_RECV_TOKENS", 64, 1, 65536,
                                            "receive tokens of a port (gm_num_receive_tokens)"};
inline const config::IntKey fast_max_key{"PORT_FAST_MAX", 128, 0, 4096,
                                         "messages up to this many bytes arrive as FAST events"};
inline const config::IntKey timeout_key{
    "PORT_SEND_TIMEOUT_MS", 2000, 1, 3'600'000,
    "how long an arrival waits for a matching receive buffer before its send times out"};
inline const config::IntKey spin_key{"PORT_SPIN_US", 1000, 0, 10'000'000,
                                     "blocking_receive polls this long before sleeping"};
inline const config::IntKey connections_key{"PORT_CONNECTIONS", 1024, 1, 1 << 20,
                                            "(priority, node, port) targets a port can send to"};
inline const config::IntKey streams_key{"PORT_STREAMS", 1024, 1, 1 << 20,
                                        "(priority, node, port) sources a port tracks at once"};
inline const config::IntKey streams_per_node_key{
    "PORT_STREAMS_PER_NODE", 0, 0, 1 << 20,
    "of those, how many one node may hold, so one peer cannot take every stream (0: 256, or "
    "two per port a node may open if that is more)"};
inline const config::IntKey held_key{
    "PORT_HELD", 1024, 1, 1 << 20,
    "arrivals a port holds while they wait for a buffer (raised to 2 x CORE_RECV_MSGS + 1)"};
inline const config::IntKey alarms_key{"PORT_ALARMS", 64, 1, 65536,
                                       "alarms a port can have set at once"};
inline const config::IntKey regions_key{"PORT_REGIONS", 64, 1, 4096,
                                        "memory ranges a port can register for put and get"};

/// Each held arrival keeps a core receive message state, and consecutive
/// controls share one entry behind it, so a pool of twice the core's states
/// (plus one) is never exhausted: an arrival is never answered ahead of
/// older ones of its stream for want of an entry.
std::size_t held_capacity(const core::Core& core) {
  const std::size_t needed = 2 * std::size_t{core.settings().recv_msgs} + 1;
  return std::max(static_cast<std::size_t>(held_key.get()), needed);
}

constexpr std::uint64_t alarm_magic = 0x7069'6572'616c'726dULL;  // "pieralrm"
constexpr std::int64_t check_period_ns = 10'000'000;

/// A node has at most two streams (priorities) per port it can open: the
/// default quota never refuses one that stays within that.
std::uint32_t stream_quota(const Node::Impl& node) {
  std::int64_t quota = streams_per_node_key.get();
  if (quota == 0)
    quota = std::max<std::int64_t>(256, 2 * static_cast<std::int64_t>(node.ports.size()));
  return static_cast<std::uint32_t>(std::min(quota, streams_key.get()));
}

}  // namespace

// ---- KeyIndex

KeyIndex::KeyIndex(std::size_t entries)
    : cells_(std::bit_ceil(entries * 2 + 2)), mask_(cells_.size() - 1) {}

std::size_t KeyIndex::home(std::uint64_t key) const noexcept {
  return static_cast<std::size_t>((key * 0x9e37'79b9'7f4a'7c15ULL) >> 20) & mask_;
}

std::uint32_t KeyIndex::find(std::uint64_t key) const noexcept {
  for (std::size_t i = home(key);; i = (i + 1) & mask_) {
    const Cell& c = cells_[i];
    if (c.value == npos) return npos;
    if (c.key == key) return c.value;
  }
}

bool KeyIndex::insert(std::uint64_t key, std::uint32_t value) noexcept {
  for (std::size_t i = home(key), n = 0; n < cells_.size(); i = (i + 1) & mask_, ++n) {
    Cell& c = cells_[i];
    if (c.value == npos || c.key == key) {
      c.key = key;
      c.value = value;
      return true;
    }
  }
  return false;
}

void KeyIndex::erase(std::uint64_t key) noexcept {
  std::size_t i = home(key);
  while (cells_[i].value != npos && cells_[i].key != key) i = (i + 1) & mask_;
  if (cells_[i].value == npos) return;
  // Backward shift: pull later cells of the run into the hole when the hole
  // lies between their home and their place, so lookups never stop early.
  for (std::size_t j = (i + 1) & mask_; cells_[j].value != npos; j = (j + 1) & mask_) {
    const std::size_t h = home(cells_[j].key);
    if (((j - h) & mask_) >= ((j - i) & mask_)) {
      cells_[i] = cells_[j];
      i = j;
    }
  }
  cells_[i] = Cell{};
}

// ---- Ring

void Ring::init(Port::Impl* owner, std::size_t capacity) {
  slots_.resize(capacity);
  capacity_ = capacity;
  for (auto& s : slots_) s.owner = owner;
}

// ---- Port::Impl

Port::Impl::Impl(Node::Impl& n, unsigned port_id, std::uint16_t port_epoch)
    : node(n),
      node_core(n.core),
      id(port_id),
      epoch(port_epoch),
      node_count(n.core.size()),
      send_total(static_cast<unsigned>(send_tokens_key.get())),
      recv_total(static_cast<unsigned>(recv_tokens_key.get())),
      send_held(send_total),
      recv_held(recv_total),
      fast_max(static_cast<std::size_t>(fast_max_key.get())),
      ops(send_total),
      conns(static_cast<std::size_t>(connections_key.get())),
      conn_index(static_cast<std::size_t>(connections_key.get())),
      streams(static_cast<std::size_t>(streams_key.get())),
      stream_index(static_cast<std::size_t>(streams_key.get())),
      streams_per_node(stream_quota(n)),
      streams_of_node(node.core.size(), 0),
      helds(held_capacity(node.core)),
      // Every held arrival and every op answers at most one reply or control.
      replies(held_capacity(node.core) + send_total + recv_total + 64),
      alarms(static_cast<std::size_t>(alarms_key.get())) {
  buffer_store = std::make_unique<Buffer[]>(recv_total);
  for (std::size_t i = recv_total; i-- > 0;) release_buffer(&buffer_store[i]);
  ranges.resize(static_cast<std::size_t>(regions_key.get()));
  live_conns.reserve(conns.capacity());
  live_streams.reserve(streams.capacity());
  armed.reserve(alarms.capacity());
  // Each event stands for a token (or an alarm), so the rings cannot overflow.
  rings[0].init(this, send_total + alarms.capacity());
  rings[1].init(this, recv_total);
  rings[2].init(this, recv_total);
  // Allocated before the first region is validated: a failure here leaves
  // no region behind in the core.
  stage_store.resize(std::size_t{send_total} * stage_bytes);
  free_stages = std::make_unique<std::uint32_t[]>(send_total);
  for (std::uint32_t i = send_total; i-- > 0;) free_stages[free_stage_count++] = i;
  if (fast_max > 0) {
    fast_store.resize(2 * std::size_t{recv_total} * fast_max);
    for (std::size_t r = 1; r <= 2; ++r)
      for (std::size_t i = 0; i < recv_total; ++i)
        rings[r].at(i).fast_offset = ((r - 1) * recv_total + i) * fast_max;
    auto region = core().validate(fast_store.data(), fast_store.size());
    if (!region) throw std::bad_alloc();
    fast_region = *region;
  }
  {
    auto region = core().validate(stage_store.data(), stage_store.size());
    if (!region) {
      if (fast_region.handle) (void)core().invalidate(fast_region);
      throw std::bad_alloc();
    }
    stage_region = *region;
  }
  timeout_ns = timeout_key.get() * 1'000'000;
  spin_ns = spin_key.get() * 1'000;
}

namespace {
/// Keeps memory a core may still read after its port is gone, for the rest
/// of the process (reachable, so leak checkers do not report it).
void keep_for_core(std::vector<std::byte>&& store) {
  static std::mutex mu;
  static auto* kept = new std::vector<std::vector<std::byte>>();
  std::lock_guard lock(mu);
  kept->push_back(std::move(store));  // moving keeps the bytes where they are
}
}  // namespace

Port::Impl::~Impl() {
  // Requests whose answers never left go back to the core (it may live on).
  while (Reply* r = reply_retry.pop()) take(r->request);
  // A region the core still pins (a send of a closed port it still holds,
  // as after a close that gave up waiting) is left allocated on purpose:
  // the core reads it until that op ends, even after this port is gone.
  const auto release = [this](core::Region& region, std::vector<std::byte>& store,
                              const char* what) {
    if (!region.handle) return;
    const Status st = core().invalidate(region);
    if (st == Status::ok) return;
    PIER_LOG(warn, "port", "port {}: the core still uses its {} ({}); it is left allocated", id,
             what, to_string(st));
    keep_for_core(std::move(store));
  };
  release(fast_region, fast_store, "fast receive area");
  release(stage_region, stage_store, "staging area");
}

void Port::Impl::poll_timers() noexcept {
  const std::int64_t now = base::now_ns();
  if (waiting > 0 && (buffers_added || now >= next_check_ns)) serve_streams();
  if (alarms_armed > 0) fire_alarms();
  if (now >= next_check_ns) next_check_ns = now + check_period_ns;
}

void Port::Impl::push_sent(Op* op) noexcept {
  Slot* slot = rings[0].reserve(next_seq++);
  if (slot == nullptr) {  // cannot happen: one slot per send token
    PIER_LOG(error, "port", "port {}: event queue full", id);
    return;
  }
  slot->event = Event{.type = PIER_PORT_SENT_EVENT,
                      .priority = 0,
                      .size = 0,
                      .tag = 0,
                      .sender_port_id = 0,
                      .receiver_port_id = static_cast<std::uint16_t>(id),
                      .sender_node_id = 0,
                      .length = 0,
                      .message = nullptr,
                      .buffer = nullptr,
                      .internal_ = static_cast<std::uint64_t>(ops.handle_of(op))};
  mark_ready(slot);
}

[[gnu::noinline]] void Port::Impl::skip_flushed(Ring& r) noexcept {
  Slot* h = r.head();
  while (h && h->flushed) {  // ready, never handed out
    // A canceled alarm's record was kept until now: each alarm record
    // stands for at most one slot, which is what bounds the ring.
    if (h->event.type == PIER_PORT_ALARM_EVENT) {
      if (AlarmRec* rec =
              alarms.lookup(static_cast<base::Pool<AlarmRec>::Handle>(h->event.internal_)))
        alarms.release(rec);
    } else if (is_receive_event(h->event.type)) {
      reprovide(h->event);  // a withdrawn receive: its buffer is free now
    }
    --ready_events;
    r.pop();
    h = r.head();
  }
}

Slot* Port::Impl::scan_ready(Ring** from) noexcept {
  Slot* best = nullptr;
  for (Ring& r : rings) {
    Slot* h = r.head();
    if (h && h->flushed) {
      skip_flushed(r);
      h = r.head();
    }
    if (h && h->ready && (!best || h->seq < best->seq)) {
      best = h;
      if (from) *from = &r;
    }
  }
  return best;
}

const Event& Port::Impl::receive() noexcept {
  // Events already queued are handed out first; the node is polled when
  // the queue runs dry (GM's receive queue works the same way).
  Ring* ring = nullptr;
  Slot* s = next_ready(&ring);
  if (s == nullptr) {
    poll();
    s = next_ready(&ring);
  }
  if (s == nullptr && settle_head) {
    // Acks that came in this poll with nothing else to hand out: their
    // SENT events now, not at the next call (nor after a sleep).
    settle_acked();
    s = next_ready(&ring);
  }
  if (s == nullptr) {
    current = Event{};
    return current;
  }
  current = s->event;
  ring->pop();
  --ready_events;
  if (is_receive_event(current.type)) ++recv_held;
  if (current.type == PIER_PORT_ALARM_EVENT) {
    auto* rec = alarms.lookup(static_cast<base::Pool<AlarmRec>::Handle>(current.internal_));
    if (rec) {
      rec->queued = nullptr;
      rec->handed = true;
    }
  }
  return current;
}

const Event& Port::Impl::blocking(int timeout_ms, bool spin) noexcept {
  auto deadline = base::Deadline::after_ms(timeout_ms);
  const std::int64_t spin_until = base::now_ns() + (spin ? spin_ns : 0);
  for (;;) {
    const Event& e = receive();
    if (e.type != PIER_PORT_NO_RECV_EVENT || closed || deadline.expired()) return e;
    if (base::now_ns() < spin_until) continue;
    // Sleep in the drivers (no spinning: our own spin, if any, is over),
    // waking at least every millisecond for alarms and timeouts.
    (void)core().wait_sleeping([this] { return next_ready() != nullptr || settle_head; },
                               base::Deadline::after_ms(1));
    polls |= 15;  // after a sleep the next poll looks at the timers
  }
}

void Port::Impl::unknown(const Event& e) noexcept {
  switch (e.type) {
    case PIER_PORT_SENT_EVENT: {
      // Another port's event names an op of that port's pool; an op still
      // in flight has not produced its event yet.
      if (e.receiver_port_id != id) return;
      Op* op = ops.lookup(static_cast<base::Pool<Op>::Handle>(e.internal_));
      if (op == nullptr || op->conn != nullptr) return;  // handed in twice, or not ours
      const Completion done = op->done;
      const Status st = op->reply_status;
      ops.release(op);
      ++send_held;
      if (done.cpp)
        done.cpp(*facade, done.context, st);
      else if (done.c)
        done.c(reinterpret_cast<pier_port_t*>(facade), done.context, to_c_status(st));
      return;
    }
    case PIER_PORT_ALARM_EVENT: {
      // Another port's event names a record of that port's pool (the same
      // handle may be armed here); a record whose event was not handed out
      // is armed or queued, never ended here.
      if (e.receiver_port_id != id) return;
      auto h = static_cast<base::Pool<AlarmRec>::Handle>(e.internal_);
      AlarmRec* rec = alarms.lookup(h);
      if (rec == nullptr || !rec->handed) return;  // canceled after its event was taken
      const AlarmCallback cb = rec->callback;
      void* ctx = rec->context;
      // Only if the client's alarm still names this record: it may have
      // been set again since (a new record), and must stay cancelable.
      if (rec->user && rec->user->opaque_[0] == static_cast<std::uint64_t>(h))
        rec->user->opaque_[1] = 0;
      alarms.release(rec);
      if (cb) cb(ctx);
      return;
    }
    default:
      break;
  }
  if (is_receive_event(e.type) && e.buffer != nullptr) {
    // The token goes back to pier: the buffer is provided again.
    (void)provide(static_cast<std::byte*>(e.buffer), e.size, e.priority, e.tag);
  }
}

Status Port::Impl::set_alarm(Alarm& a, std::uint64_t usecs, AlarmCallback cb, void* ctx) noexcept {
  if (closed) return Status::not_initialized;
  if (usecs > (std::uint64_t{1} << 40)) return Status::invalid_argument;
  cancel_alarm(a);
  AlarmRec* rec = alarms.acquire();
  if (rec == nullptr) return Status::no_resource;
  rec->due_ns = base::now_ns() + static_cast<std::int64_t>(usecs * 1000);
  rec->queued = nullptr;
  rec->handed = false;
  rec->callback = cb;
  rec->context = ctx;
  rec->user = &a;
  armed.push_back(rec);
  ++alarms_armed;
  a.opaque_[0] = static_cast<std::uint64_t>(alarms.handle_of(rec));
  a.opaque_[1] = alarm_magic;
  return Status::ok;
}

void Port::Impl::cancel_alarm(Alarm& a) noexcept {
  if (a.opaque_[1] != alarm_magic) return;
  a.opaque_[1] = 0;
  AlarmRec* rec = alarms.lookup(static_cast<base::Pool<AlarmRec>::Handle>(a.opaque_[0]));
  if (rec == nullptr || rec->user != &a) return;
  if (rec->queued) {
    // Its event is skipped (the alarm never fires); the record goes when
    // the slot leaves the ring (next_ready), so the ring cannot outgrow
    // the alarm pool that sizes it.
    rec->queued->flushed = true;
    rec->callback = nullptr;
    rec->user = nullptr;
    return;
  } else {
    for (auto& x : armed)
      if (x == rec) {
        x = armed.back();
        armed.pop_back();
        --alarms_armed;
        break;
      }
  }
  alarms.release(rec);
}

void Port::Impl::fire_alarms() noexcept {
  const std::int64_t now = base::now_ns();
  for (std::size_t i = 0; i < armed.size();) {
    AlarmRec* rec = armed[i];
    if (rec->due_ns > now) {
      ++i;
      continue;
    }
    Slot* slot = rings[0].reserve(next_seq++);
    if (slot == nullptr) return;  // cannot happen: a slot per alarm
    slot->event = Event{};
    slot->event.type = PIER_PORT_ALARM_EVENT;
    slot->event.receiver_port_id = static_cast<std::uint16_t>(id);
    slot->event.internal_ = static_cast<std::uint64_t>(alarms.handle_of(rec));
    mark_ready(slot);
    rec->queued = slot;
    armed[i] = armed.back();
    armed.pop_back();
    --alarms_armed;
  }
}

// ---- facade

Port::~Port() {
  impl_->node.close(impl_);
}

unsigned Port::id() const noexcept {
  return impl_->id;
}
Node& Port::node() noexcept {
  return *impl_->node.facade;
}
std::uint32_t Port::global_id() const noexcept {
  return (impl_->self() << 16) | impl_->id;
}
unsigned Port::send_tokens() const noexcept {
  return impl_->send_total;
}
unsigned Port::receive_tokens() const noexcept {
  return impl_->recv_total;
}
unsigned Port::send_tokens_held() const noexcept {
  return impl_->send_held;
}
unsigned Port::receive_tokens_held() const noexcept {
  return impl_->recv_held;
}
std::size_t Port::fast_max() const noexcept {
  return impl_->fast_max;
}

Status Port::set_acceptable_sizes(Priority priority, std::uint64_t mask) noexcept {
  const auto p = static_cast<unsigned>(priority);
  if (p >= priority_count) return Status::invalid_argument;
  impl_->acceptable[p] = mask;
  return Status::ok;
}

Status Port::register_memory(void* ptr, std::size_t len) noexcept {
  return impl_->register_range(ptr, len);
}
Status Port::deregister_memory(void* ptr, std::size_t len) noexcept {
  return impl_->deregister_range(ptr, len);
}

Status Port::send(const void* message, unsigned size, std::size_t length, Priority priority,
                  std::uint32_t node, unsigned port, Callback callback, void* context) noexcept {
  return impl_->start(OpKind::send, Completion{callback, nullptr, context},
                      static_cast<std::uint8_t>(priority), node, port,
                      static_cast<std::byte*>(const_cast<void*>(message)), 0, length, size);
}
Status Port::send_to_peer(const void* message, unsigned size, std::size_t length, Priority priority,
                          std::uint32_t node, Callback callback, void* context) noexcept {
  return send(message, size, length, priority, node, impl_->id, callback, context);
}
Status Port::put(const void* local, std::uint64_t remote, std::size_t length, Priority priority,
                 std::uint32_t node, unsigned port, Callback callback, void* context) noexcept {
  return impl_->start(OpKind::put, Completion{callback, nullptr, context},
                      static_cast<std::uint8_t>(priority), node, port,
                      static_cast<std::byte*>(const_cast<void*>(local)), remote, length, 0);
}
Status Port::get(std::uint64_t remote, void* local, std::size_t length, Priority priority,
                 std::uint32_t node, unsigned port, Callback callback, void* context) noexcept {
  return impl_->start(OpKind::get, Completion{callback, nullptr, context},
                      static_cast<std::uint8_t>(priority), node, port,
                      static_cast<std::byte*>(local), remote, length, 0);
}
Status Port::resume_sending(Priority priority, std::uint32_t node, unsigned port, Callback callback,
                            void* context) noexcept {
  return impl_->resume_or_drop(false, Completion{callback, nullptr, context},
                               static_cast<std::uint8_t>(priority), node, port);
}
Status Port::drop_sends(Priority priority, std::uint32_t node, unsigned port, Callback callback,
                        void* context) noexcept {
  return impl_->resume_or_drop(true, Completion{callback, nullptr, context},
                               static_cast<std::uint8_t>(priority), node, port);
}
Status Port::provide_receive_buffer(void* buffer, unsigned size, Priority priority,
                                    std::uint8_t tag) noexcept {
  return impl_->provide(static_cast<std::byte*>(buffer), size, static_cast<std::uint8_t>(priority),
                        tag);
}
const Event& Port::receive() noexcept {
  return impl_->receive();
}
const Event& Port::blocking_receive(int timeout_ms) noexcept {
  return impl_->blocking(timeout_ms, true);
}
const Event& Port::blocking_receive_no_spin(int timeout_ms) noexcept {
  return impl_->blocking(timeout_ms, false);
}
void Port::unknown(const Event& event) noexcept {
  impl_->unknown(event);
}
bool Port::receive_pending() noexcept {
  impl_->poll();
  if (impl_->settle_head && !impl_->next_ready()) impl_->settle_acked();  // as receive() would
  return impl_->next_ready() != nullptr;
}
int Port::next_event_peek(std::uint32_t* sender) noexcept {
  impl_->poll();
  if (impl_->settle_head && !impl_->next_ready()) impl_->settle_acked();  // as receive() would
  Slot* s = impl_->next_ready();
  if (s == nullptr) return PIER_PORT_NO_RECV_EVENT;
  if (sender) *sender = s->event.sender_node_id;
  return s->event.type;
}
Status Port::set_alarm(Alarm& alarm, std::uint64_t usecs, AlarmCallback callback,
                       void* context) noexcept {
  return impl_->set_alarm(alarm, usecs, callback, context);
}
void Port::cancel_alarm(Alarm& alarm) noexcept {
  impl_->cancel_alarm(alarm);
}

}  // namespace pier::port
