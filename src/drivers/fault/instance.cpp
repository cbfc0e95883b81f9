#include "drivers/fault/instance.hpp"

#include "base/log.hpp"
#include "driver/packet.hpp"
#include "drivers/fault/context.hpp"

#include <algorithm>
#include <cstring>

namespace pier::drivers::fault {
namespace {

using driver::Clock;
using driver::Packet;

// A send the wrapper completed itself (dropped, copied, refused) was never
// seen by the inner driver, so its driver_data is free: the wrapper writes a
// marker there that send_poll() recognises. A forwarded send has the marker
// cleared before the inner driver sees it; the two magic words and the owner
// make a collision with inner state practically impossible.
constexpr std::uintptr_t marker_head = 0x70696572'66617531ULL;  // "pierfau1"
constexpr std::uintptr_t marker_tail = 0x31756166'72656970ULL;
static_assert(sizeof(std::uintptr_t) == 8, "markers pack a tag and a value in one word");

enum class Tag : std::uintptr_t { none = 0, done = 1, buffer = 2, late = 3 };

void set_marker(Packet& pkt, const void* owner, Tag tag, std::uintptr_t value) noexcept {
  pkt.driver_data = {marker_head, reinterpret_cast<std::uintptr_t>(owner),
                     (static_cast<std::uintptr_t>(tag) << 32) | (value & 0xffffffffU), marker_tail};
}

Tag read_marker(const Packet& pkt, const void* owner, std::uintptr_t* value) noexcept {
  const auto& d = pkt.driver_data;
  if (d[0] != marker_head || d[3] != marker_tail || d[1] != reinterpret_cast<std::uintptr_t>(owner))
    return Tag::none;
  *value = d[2] & 0xffffffffU;
  return static_cast<Tag>(d[2] >> 32);
}

/// Hands a caller packet to the inner driver as it would see it without the
/// wrapper: the wrapper's marker from an earlier use is wiped, inner state
/// (a prefetch) stays.
void forget_marker(Packet& pkt, const void* owner) noexcept {
  std::uintptr_t ignored = 0;
  if (read_marker(pkt, owner, &ignored) != Tag::none) pkt.driver_data = {};
}

}  // namespace

Instance::Instance(Context& context, std::unique_ptr<driver::Instance> inner, driver::Track track,
                   std::uint64_t stream)
    : context_(context),
      inner_(std::move(inner)),
      stream_(stream),
      track_(track),
      faulty_(!context.plan().empty() && context.plan().covers(track)) {
  if (faulty_) slots_.init(context.plan().slots, context.plan().slot_bytes);
}

Instance::~Instance() {
  context_.forget(this);
  // The inner instance may point into the slots: it goes first.
  inner_.reset();
}

void Instance::note(Fault f, std::uint64_t number, bool applied) noexcept {
  const std::uint64_t stream = f == Fault::connect_fail ? Injector::connect_stream : stream_;
  context_.record(Event{stream, number, f, applied});
}

void Instance::die(Fault cause, std::uint64_t number) noexcept {
  dead_ = true;
  note(cause, number, true);
  // Disconnecting the inner link makes the peer see the death as it would
  // see a real one; its status does not matter, the instance is gone.
  (void)inner_->disconnect();
  slots_.discard();
}

Status Instance::complete_local(Packet& pkt, Status status, std::size_t len) noexcept {
  set_marker(pkt, this, Tag::done, static_cast<std::uintptr_t>(status));
  pkt.length = status == Status::ok ? len : 0;
  return status;
}

void Instance::progress_locked() noexcept {
  if (dead_ || !slots_.ready()) return;
  if (slots_.any_held()) slots_.release_due(sends_, Clock::now());
  SlotRing& pending = slots_.pending();
  while (!pending.empty()) {
    const int i = pending.front();
    Slot& slot = slots_.at(i);
    const Status st = inner_->send_post(slot.pkt);
    if (st == Status::no_resource) break;
    pending.pop();
    if (st == Status::in_progress) {
      slot.state = Slot::State::posted;
      slots_.posted().push(i);
      continue;
    }
    if (st != Status::ok)
      PIER_LOG(debug, "fault", "instance {}: inner send of a held packet failed: {}", stream_,
               to_string(st));
    slots_.release(i);
  }
  // Inner sends complete in order, so the oldest posted slot finishes first.
  SlotRing& posted = slots_.posted();
  while (!posted.empty()) {
    const int i = posted.front();
    const Status st = inner_->send_poll(slots_.at(i).pkt);
    if (st == Status::in_progress) break;
    posted.pop();
    slots_.release(i);
  }
}

void Instance::try_progress() noexcept {
  if (!faulty_) return;
  std::unique_lock lock(mutex_, std::try_to_lock);
  if (lock.owns_lock()) progress_locked();
}

driver::Clock::time_point Instance::next_release() noexcept {
  if (!faulty_) return Clock::time_point::max();
  std::unique_lock lock(mutex_, std::try_to_lock);
  // A busy instance is being driven by its own caller.
  if (!lock.owns_lock() || dead_) return Clock::time_point::max();
  return slots_.next_release();
}

int Instance::copy_to_slot(const Packet& pkt, std::size_t len) noexcept {
  if (len > slots_.slot_bytes()) return -1;
  const int i = slots_.acquire();
  if (i < 0) return -1;
  Slot& slot = slots_.at(i);
  slot.len = driver::copy_from_packet(pkt, 0, {slot.bytes, len});
  return i;
}

void Instance::prepare_slot(int index, const Packet& from) noexcept {
  Slot& slot = slots_.at(index);
  slot.iov = {slot.bytes, slot.len};
  slot.pkt = Packet{};
  slot.pkt.set_iovec(&slot.iov, 1);
  slot.pkt.rdv_data = from.rdv_data;
  slot.pkt.rdv_len = from.rdv_len;
}

template <class WaitFn>
Status Instance::stepped_wait(driver::Deadline deadline, WaitFn&& wait) noexcept {
  for (;;) {
    const driver::Deadline step = std::min(deadline, slots_.next_release());
    const Status st = wait(step);
    if (st != Status::timeout || step >= deadline || Clock::now() >= deadline) return st;
    progress_locked();
    if (dead_) return Status::broken;
  }
}

// --- connection ------------------------------------------------------------

Status Instance::connect_async(std::span<const std::byte> remote_url) {
  if (!faulty_) return inner_->connect_async(remote_url);
  std::lock_guard lock(mutex_);
  if (dead_) return Status::broken;
  const Injector& injector = context_.injector();
  const std::uint64_t op = ops_ + 1;
  if (injector.fires(Fault::death, stream_, op)) {
    ops_ = op;
    die(Fault::death, op);
    return Status::broken;
  }
  const std::uint64_t attempt = context_.next_connect_number();
  if (injector.fires(Fault::connect_fail, Injector::connect_stream, attempt)) {
    // The inner instance never starts connecting; the peer's attempt runs
    // into its deadline, as with an unreachable host.
    ops_ = op;
    dead_ = true;
    note(Fault::connect_fail, attempt, true);
    return Status::broken;
  }
  const Status st = inner_->connect_async(remote_url);
  if (st != Status::no_resource) ops_ = op;
  return st;
}

Status Instance::connect_wait(driver::Deadline deadline) {
  if (!faulty_) return inner_->connect_wait(deadline);
  std::lock_guard lock(mutex_);
  if (dead_) return Status::broken;
  return inner_->connect_wait(deadline);
}

Status Instance::disconnect() {
  if (!faulty_) return inner_->disconnect();
  std::lock_guard lock(mutex_);
  if (dead_) return Status::broken;
  // Held packets are in flight in the simulated network; they are lost.
  slots_.discard();
  return inner_->disconnect();
}

// --- send ------------------------------------------------------------------

Status Instance::send_buf_get(Packet& pkt) {
  if (!faulty_) return inner_->send_buf_get(pkt);
  if (!context_.inner_caps().send_buf) return Status::unsupported;
  std::lock_guard lock(mutex_);
  if (dead_) return Status::broken;
  progress_locked();
  // With faults planned the buffer is a slot, so a dropped or held buffer
  // send never strands a buffer of the inner driver; it is sent by copy.
  const int i = slots_.acquire();
  if (i < 0) return Status::no_resource;
  std::size_t len = slots_.slot_bytes();
  if (const std::size_t max = context_.inner_caps().max_packet; max != 0) len = std::min(len, max);
  pkt.form = Packet::Form::buffer;
  pkt.buf = slots_.at(i).bytes;
  pkt.buf_len = len;
  set_marker(pkt, this, Tag::buffer, static_cast<std::uintptr_t>(i));
  return Status::ok;
}

Status Instance::send_buf_post(Packet& pkt, std::size_t len) {
  if (!faulty_) return inner_->send_buf_post(pkt, len);
  if (!context_.inner_caps().send_buf) return Status::unsupported;
  std::lock_guard lock(mutex_);
  std::uintptr_t value = 0;
  if (read_marker(pkt, this, &value) != Tag::buffer || len > pkt.buf_len)
    return Status::invalid_argument;
  const int i = static_cast<int>(value);
  if (dead_) {
    slots_.release(i);
    return complete_local(pkt, Status::broken, 0);
  }
  progress_locked();
  slots_.at(i).len = len;
  return send_locked(pkt, i, len);
}

Status Instance::send_post(Packet& pkt) {
  if (!faulty_) return inner_->send_post(pkt);
  std::lock_guard lock(mutex_);
  if (dead_) return complete_local(pkt, Status::broken, 0);
  // The wrapper may complete the send itself, so it rejects what the inner
  // driver would reject.
  const driver::Caps& caps = context_.inner_caps();
  if (const Status v = driver::validate_post(pkt, caps.max_iov, caps.supports_data);
      v != Status::ok)
    return v;
  if (track_ == driver::Track::small && caps.max_packet != 0 && pkt.size() > caps.max_packet)
    return Status::invalid_argument;
  progress_locked();
  // Packets the wrapper owns wait for room: a new send must not pass them.
  if (!slots_.pending().empty()) return Status::no_resource;
  return send_locked(pkt, -1, pkt.size());
}

Status Instance::send_locked(Packet& pkt, int own, std::size_t len) noexcept {
  const Injector& injector = context_.injector();
  const std::uint64_t op = ops_ + 1;
  const std::uint64_t send = sends_ + 1;
  if (injector.fires(Fault::death, stream_, op)) {
    ops_ = op;
    sends_ = send;
    if (own >= 0) slots_.release(own);
    die(Fault::death, op);
    return complete_local(pkt, Status::broken, 0);
  }
  auto fires = [&](Fault f) { return injector.fires(f, stream_, send); };
  if (fires(Fault::no_resource)) {
    // Numbered, so the retry is the next send and gets its own decision;
    // a buffer send keeps its slot for the retry.
    ops_ = op;
    sends_ = send;
    note(Fault::no_resource, send, true);
    return Status::no_resource;
  }
  if (fires(Fault::drop)) {
    ops_ = op;
    sends_ = send;
    if (own >= 0) slots_.release(own);
    note(Fault::drop, send, true);
    progress_locked();
    return complete_local(pkt, Status::ok, len);
  }
  bool truncate = fires(Fault::truncate);
  bool corrupt = fires(Fault::corrupt);
  const bool dup = fires(Fault::dup);
  bool reorder = !dup && fires(Fault::reorder);
  bool delay = !dup && !reorder && fires(Fault::delay);
  bool late = fires(Fault::late);

  int slot = own;
  const auto wanted = {std::pair{Fault::truncate, truncate},
                       {Fault::corrupt, corrupt},
                       {Fault::reorder, reorder},
                       {Fault::delay, delay},
                       {Fault::late, late}};
  bool skipped = false;
  if (slot < 0 && (truncate || corrupt || reorder || delay || late)) {
    slot = copy_to_slot(pkt, len);
    // Too large for a slot, or every slot busy: delivered as is.
    skipped = slot < 0;
  }

  if (slot < 0) {
    forget_marker(pkt, this);
    const Status st = inner_->send_post(pkt);
    // Not numbered: the retry is the same send and gets the same decision.
    if (st == Status::no_resource) return st;
    ops_ = op;
    sends_ = send;
    if (skipped)
      for (const auto& [f, fired] : wanted)
        if (fired) note(f, send, false);
    if (dup && is_success(st)) {
      const int copy = copy_to_slot(pkt, len);
      note(Fault::dup, send, copy >= 0);
      if (copy >= 0) {
        prepare_slot(copy, pkt);
        slots_.enqueue(copy);
      }
    }
    progress_locked();
    return st;
  }

  ops_ = op;
  sends_ = send;
  Slot& s = slots_.at(slot);
  if (truncate) {
    s.len /= 2;
    note(Fault::truncate, send, true);
  }
  if (corrupt) {
    if (s.len > 0) {
      const std::uint64_t r = injector.draw(Fault::corrupt, stream_, send);
      s.bytes[r % s.len] ^= static_cast<std::byte>(1U << ((r >> 32) % 8));
    }
    note(Fault::corrupt, send, s.len > 0);
  }
  prepare_slot(slot, pkt);
  int copy = -1;
  if (dup) {
    copy = slots_.acquire();
    if (copy >= 0) {
      std::memcpy(slots_.at(copy).bytes, s.bytes, s.len);
      slots_.at(copy).len = s.len;
      prepare_slot(copy, pkt);
    }
    note(Fault::dup, send, copy >= 0);
  }
  const auto& plan = context_.plan();
  const Clock::time_point due =
      plan.delay_time.count() > 0 ? Clock::now() + plan.delay_time : Clock::time_point::max();
  if (reorder) {
    slots_.hold(slot, sends_ + 1, due);
    note(Fault::reorder, send, true);
  } else if (delay) {
    slots_.hold(slot, sends_ + plan.delay_packets, due);
    note(Fault::delay, send, true);
  } else {
    slots_.enqueue(slot);
  }
  if (copy >= 0) slots_.enqueue(copy);
  progress_locked();
  if (late) {
    // The bytes are on their way; only the report is held back, so the
    // caller's poll loop (and a send in flight on its books) is exercised.
    note(Fault::late, send, true);
    pkt.length = len;
    set_marker(pkt, this, Tag::late, context_.plan().late_polls);
    return Status::in_progress;
  }
  // The bytes are the wrapper's now: the caller's memory is free at once.
  return complete_local(pkt, Status::ok, len);
}

Status Instance::poll_late(Packet& pkt, std::uintptr_t polls_left, bool wait) noexcept {
  // Dead meanwhile: like every send still pending then, it ends broken
  // (the bytes may have arrived, as on a real link that fails).
  if (dead_) return complete_local(pkt, Status::broken, 0);
  if (wait || polls_left <= 1) return complete_local(pkt, Status::ok, pkt.length);
  set_marker(pkt, this, Tag::late, polls_left - 1);
  return Status::in_progress;
}

Status Instance::send_poll(Packet& pkt) {
  if (!faulty_) return inner_->send_poll(pkt);
  std::lock_guard lock(mutex_);
  progress_locked();
  std::uintptr_t value = 0;
  switch (read_marker(pkt, this, &value)) {
    case Tag::done:
      return static_cast<Status>(value);
    case Tag::late:
      return poll_late(pkt, value, false);
    case Tag::buffer:
      return Status::invalid_argument;
    case Tag::none:
      break;
  }
  if (dead_) return Status::broken;
  return inner_->send_poll(pkt);
}

Status Instance::send_wait(Packet& pkt, driver::Deadline deadline) {
  if (!faulty_) return inner_->send_wait(pkt, deadline);
  std::lock_guard lock(mutex_);
  progress_locked();
  std::uintptr_t value = 0;
  switch (read_marker(pkt, this, &value)) {
    case Tag::done:
      return static_cast<Status>(value);
    case Tag::late:
      return poll_late(pkt, value, true);
    case Tag::buffer:
      return Status::invalid_argument;
    case Tag::none:
      break;
  }
  if (dead_) return Status::broken;
  return stepped_wait(deadline,
                      [&](driver::Deadline step) { return inner_->send_wait(pkt, step); });
}

Status Instance::send_prefetch(Packet& pkt) {
  if (!faulty_) return inner_->send_prefetch(pkt);
  std::lock_guard lock(mutex_);
  if (dead_) return Status::broken;
  forget_marker(pkt, this);
  return inner_->send_prefetch(pkt);
}

Status Instance::send_unfetch(Packet& pkt) {
  if (!faulty_) return inner_->send_unfetch(pkt);
  std::lock_guard lock(mutex_);
  if (dead_) return Status::broken;
  return inner_->send_unfetch(pkt);
}

// --- receive ---------------------------------------------------------------

Status Instance::recv_post(Packet& pkt) {
  if (!faulty_) return inner_->recv_post(pkt);
  std::lock_guard lock(mutex_);
  if (dead_) return Status::broken;
  progress_locked();
  const std::uint64_t op = ops_ + 1;
  if (context_.injector().fires(Fault::death, stream_, op)) {
    ops_ = op;
    die(Fault::death, op);
    return Status::broken;
  }
  forget_marker(pkt, this);
  const Status st = inner_->recv_post(pkt);
  if (st != Status::no_resource) ops_ = op;
  return st;
}

Status Instance::recv_poll(Packet& pkt) {
  if (!faulty_) return inner_->recv_poll(pkt);
  std::lock_guard lock(mutex_);
  if (dead_) return Status::broken;
  progress_locked();
  return inner_->recv_poll(pkt);
}

Status Instance::recv_buf_release(Packet& pkt) {
  if (!faulty_) return inner_->recv_buf_release(pkt);
  std::lock_guard lock(mutex_);
  // The buffer goes back even after death, so the inner pool stays whole.
  const Status st = inner_->recv_buf_release(pkt);
  return dead_ ? Status::broken : st;
}

Status Instance::recv_wait(Packet& pkt, driver::Deadline deadline) {
  if (!faulty_) return inner_->recv_wait(pkt, deadline);
  std::lock_guard lock(mutex_);
  if (dead_) return Status::broken;
  progress_locked();
  return stepped_wait(deadline,
                      [&](driver::Deadline step) { return inner_->recv_wait(pkt, step); });
}

Status Instance::recv_cancel(Packet& pkt) {
  if (!faulty_) return inner_->recv_cancel(pkt);
  std::lock_guard lock(mutex_);
  if (dead_) return Status::broken;
  return inner_->recv_cancel(pkt);
}

Status Instance::recv_prefetch(Packet& pkt) {
  if (!faulty_) return inner_->recv_prefetch(pkt);
  std::lock_guard lock(mutex_);
  if (dead_) return Status::broken;
  forget_marker(pkt, this);
  return inner_->recv_prefetch(pkt);
}

Status Instance::recv_unfetch(Packet& pkt) {
  if (!faulty_) return inner_->recv_unfetch(pkt);
  std::lock_guard lock(mutex_);
  if (dead_) return Status::broken;
  return inner_->recv_unfetch(pkt);
}

}  // namespace pier::drivers::fault
