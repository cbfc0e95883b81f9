// pier: a bounded multi-producer single-consumer queue, lock-free (after
// D. Vyukov's bounded queue: a sequence number per cell says whose turn it is).
//
// Contract: the capacity is a power of two fixed at construction (the only
// allocation); try_push() may be called from any number of threads at once
// and returns false when full; try_pop() is called by one consumer thread at
// a time and returns false when empty. Neither blocks. A producer that stops
// between claiming a cell and publishing it delays the consumer at that cell
// (try_pop returns false) but never corrupts the queue.
#pragma once

#include "base/spsc_queue.hpp"  // cache_line

#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <stdexcept>
#include <type_traits>
#include <utility>

namespace pier::base {

template <class T>
class MpscQueue {
  static_assert(std::is_nothrow_move_constructible_v<T>, "queue elements move without throwing");

 public:
  /// Setup path: throws std::invalid_argument unless `capacity` is a power of two.
  explicit MpscQueue(std::size_t capacity) : mask_(capacity - 1) {
    if (capacity == 0 || !std::has_single_bit(capacity))
      throw std::invalid_argument("pier::base::MpscQueue capacity must be a power of two");
    cells_ = std::make_unique<Cell[]>(capacity);
    // Cell i is free for the producer holding ticket i.
    for (std::size_t i = 0; i < capacity; ++i)
      cells_[i].sequence.store(i, std::memory_order_relaxed);
  }

  ~MpscQueue() {
    if constexpr (!std::is_trivially_destructible_v<T>) {
      for (;; ++head_) {
        Cell& cell = cells_[head_ & mask_];
        if (cell.sequence.load(std::memory_order_acquire) != head_ + 1) break;
        std::launder(reinterpret_cast<T*>(cell.storage))->~T();
      }
    }
  }

  MpscQueue(const MpscQueue&) = delete;
  MpscQueue& operator=(const MpscQueue&) = delete;

  /// Any thread. False (and `value` untouched) when full.
  template <class U>
  bool try_push(U&& value) noexcept(std::is_nothrow_constructible_v<T, U&&>) {
    std::size_t ticket = tail_.load(std::memory_order_relaxed);
    for (;;) {
      Cell& cell = cells_[ticket & mask_];
      // acquire: when the sequence says the cell is free, the consumer's
      // move-out of the previous element happened before our write.
      std::size_t sequence = cell.sequence.load(std::memory_order_acquire);
      auto diff = static_cast<std::intptr_t>(sequence) - static_cast<std::intptr_t>(ticket);
      if (diff == 0) {
        // relaxed: the ticket only arbitrates among producers; the element
        // is published by the cell's sequence below, not by tail_.
        if (tail_.compare_exchange_weak(ticket, ticket + 1, std::memory_order_relaxed)) {
          ::new (static_cast<void*>(cell.storage)) T(std::forward<U>(value));
          // release: the consumer that acquires ticket + 1 sees the element.
          cell.sequence.store(ticket + 1, std::memory_order_release);
          return true;
        }
        // a failed CAS reloaded `ticket`; try that cell
      } else if (diff < 0) {
        return false;  // the cell still holds the element of the previous lap: full
      } else {
        ticket = tail_.load(std::memory_order_relaxed);  // another producer got there first
      }
    }
  }

  /// The single consumer. False when empty (or the next element is not yet
  /// published); otherwise moves the oldest element out.
  bool try_pop(T& out) noexcept(std::is_nothrow_move_assignable_v<T>) {
    Cell& cell = cells_[head_ & mask_];
    // acquire: pairs with the producer's release, so the element is complete.
    std::size_t sequence = cell.sequence.load(std::memory_order_acquire);
    if (sequence != head_ + 1) return false;
    T* element = std::launder(reinterpret_cast<T*>(cell.storage));
    out = std::move(*element);
    element->~T();
    // release: a producer that acquires this value (one lap later) may reuse
    // the cell, and our read of the element happened before.
    cell.sequence.store(head_ + mask_ + 1, std::memory_order_release);
    ++head_;
    return true;
  }

  std::size_t capacity() const noexcept { return mask_ + 1; }

 private:
  struct Cell {
    std::atomic<std::size_t> sequence{0};
    alignas(T) std::byte storage[sizeof(T)];
  };

  alignas(cache_line) std::atomic<std::size_t> tail_{0};  // producers' ticket counter
  alignas(cache_line) std::size_t head_ = 0;              // the consumer's alone
  alignas(cache_line) std::size_t mask_;
  std::unique_ptr<Cell[]> cells_;
};

}  // namespace pier::base
