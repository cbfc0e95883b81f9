// pier fault driver: the bounded per-instance store for packets the wrapper
// owns (held, modified, duplicated, or handed out by send_buf_get()). Sized
// once when the instance opens; nothing here allocates afterwards.
#pragma once

#include <pier/driver.hpp>

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace pier::drivers::fault {

struct Slot {
  enum class State : std::uint8_t {
    free,
    user_buffer,  ///< given to the caller by send_buf_get(), not yet posted
    held,         ///< delayed or reordered: waits for its release
    pending,      ///< released, waits for room in the inner driver
    posted,       ///< posted to the inner driver, waits for its completion
  };
  State state = State::free;
  std::byte* bytes = nullptr;
  std::size_t len = 0;
  ::iovec iov{};
  driver::Packet pkt;  ///< what the inner driver sees
  std::uint64_t release_after_sends = 0;
  driver::Clock::time_point release_time = driver::Clock::time_point::max();
  std::uint64_t hold_order = 0;
};

/// A fixed-capacity FIFO of slot indices.
class SlotRing {
 public:
  void init(std::size_t capacity) { items_.assign(capacity, -1); }
  bool empty() const noexcept { return count_ == 0; }
  int front() const noexcept { return items_[head_]; }
  void pop() noexcept {
    head_ = (head_ + 1) % items_.size();
    --count_;
  }
  /// Never fails in use: every ring holds at most every slot once.
  void push(int index) noexcept {
    items_[(head_ + count_) % items_.size()] = index;
    ++count_;
  }
  void clear() noexcept { head_ = count_ = 0; }

 private:
  std::vector<int> items_;
  std::size_t head_ = 0;
  std::size_t count_ = 0;
};

class SlotPool {
 public:
  /// Allocates `count` slots of `bytes` each (set-up time only).
  void init(std::uint32_t count, std::size_t bytes);
  bool ready() const noexcept { return !slots_.empty(); }
  std::size_t slot_bytes() const noexcept { return slot_bytes_; }

  /// A free slot's index, or -1 when every slot is busy.
  int acquire() noexcept;
  void release(int index) noexcept;
  Slot& at(int index) noexcept { return slots_[static_cast<std::size_t>(index)]; }

  /// Holds a slot until `sends` sends have been counted or `when` passes.
  void hold(int index, std::uint64_t sends, driver::Clock::time_point when) noexcept;
  /// Moves the slot to the end of the queue waiting for the inner driver.
  void enqueue(int index) noexcept;
  /// Releases held slots whose count or time came, oldest hold first.
  void release_due(std::uint64_t sends, driver::Clock::time_point now) noexcept;
  /// Earliest time a held slot is due, or time_point::max().
  driver::Clock::time_point next_release() const noexcept;
  bool any_held() const noexcept { return held_ > 0; }

  SlotRing& pending() noexcept { return pending_; }
  SlotRing& posted() noexcept { return posted_; }
  /// Forgets every packet (disconnect, death). The memory stays until the
  /// pool is destroyed, since the inner driver may still hold pointers.
  void discard() noexcept;

 private:
  std::unique_ptr<std::byte[]> arena_;
  std::vector<Slot> slots_;
  std::size_t slot_bytes_ = 0;
  SlotRing pending_;
  SlotRing posted_;
  std::size_t held_ = 0;
  std::uint64_t next_hold_order_ = 0;
};

}  // namespace pier::drivers::fault
