#include "drivers/fault/slots.hpp"

namespace pier::drivers::fault {

void SlotPool::init(std::uint32_t count, std::size_t bytes) {
  slot_bytes_ = bytes;
  arena_ = std::make_unique<std::byte[]>(static_cast<std::size_t>(count) * bytes);
  slots_.assign(count, Slot{});
  for (std::uint32_t i = 0; i < count; ++i) slots_[i].bytes = arena_.get() + i * bytes;
  pending_.init(count);
  posted_.init(count);
}

int SlotPool::acquire() noexcept {
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i].state == Slot::State::free) {
      slots_[i].state = Slot::State::user_buffer;
      slots_[i].len = 0;
      return static_cast<int>(i);
    }
  }
  return -1;
}

void SlotPool::release(int index) noexcept {
  Slot& s = at(index);
  if (s.state == Slot::State::held) --held_;
  s.state = Slot::State::free;
  s.len = 0;
}

void SlotPool::hold(int index, std::uint64_t sends, driver::Clock::time_point when) noexcept {
  Slot& s = at(index);
  s.state = Slot::State::held;
  s.release_after_sends = sends;
  s.release_time = when;
  s.hold_order = next_hold_order_++;
  ++held_;
}

void SlotPool::enqueue(int index) noexcept {
  Slot& s = at(index);
  if (s.state == Slot::State::held) --held_;
  s.state = Slot::State::pending;
  pending_.push(index);
}

void SlotPool::release_due(std::uint64_t sends, driver::Clock::time_point now) noexcept {
  // Oldest hold first, so two packets delayed alike keep their order.
  while (held_ > 0) {
    int best = -1;
    for (std::size_t i = 0; i < slots_.size(); ++i) {
      const Slot& s = slots_[i];
      if (s.state != Slot::State::held) continue;
      if (s.release_after_sends > sends && s.release_time > now) continue;
      if (best < 0 || s.hold_order < at(best).hold_order) best = static_cast<int>(i);
    }
    if (best < 0) return;
    enqueue(best);
  }
}

driver::Clock::time_point SlotPool::next_release() const noexcept {
  auto when = driver::Clock::time_point::max();
  if (held_ == 0) return when;
  for (const Slot& s : slots_)
    if (s.state == Slot::State::held && s.release_time < when) when = s.release_time;
  return when;
}

void SlotPool::discard() noexcept {
  for (Slot& s : slots_) s.state = Slot::State::free;
  pending_.clear();
  posted_.clear();
  held_ = 0;
}

}  // namespace pier::drivers::fault
