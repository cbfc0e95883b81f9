// pier: a bounded single-producer single-consumer queue, lock-free.
//
// Contract: the capacity is a power of two fixed at construction (the only
// allocation); try_push() returns false when full and try_pop() false when
// empty, neither blocks. Exactly one thread pushes and exactly one thread pops
// (they may differ); any other use is a data race. Memory lives in this
// process: the shm driver keeps its own queues in shared segments.
#pragma once

#include <atomic>
#include <bit>
#include <cstddef>
#include <memory>
#include <new>
#include <stdexcept>
#include <type_traits>
#include <utility>

namespace pier::base {

/// Separates indices written by different threads so they do not share a line.
inline constexpr std::size_t cache_line = 64;

template <class T>
class SpscQueue {
  static_assert(std::is_nothrow_move_constructible_v<T>, "queue elements move without throwing");

 public:
  /// Setup path: throws std::invalid_argument unless `capacity` is a power of two.
  explicit SpscQueue(std::size_t capacity) : mask_(capacity - 1) {
    if (capacity == 0 || !std::has_single_bit(capacity))
      throw std::invalid_argument("pier::base::SpscQueue capacity must be a power of two");
    cells_ = std::make_unique<Cell[]>(capacity);
  }

  ~SpscQueue() {
    if constexpr (!std::is_trivially_destructible_v<T>) {
      std::size_t tail = producer_.tail.load(std::memory_order_acquire);
      for (std::size_t i = consumer_.head.load(std::memory_order_relaxed); i != tail; ++i)
        std::launder(reinterpret_cast<T*>(cells_[i & mask_].storage))->~T();
    }
  }

  SpscQueue(const SpscQueue&) = delete;
  SpscQueue& operator=(const SpscQueue&) = delete;

  /// Producer only. False (and `value` untouched) when full.
  template <class U>
  bool try_push(U&& value) noexcept(std::is_nothrow_constructible_v<T, U&&>) {
    std::size_t tail = producer_.tail.load(std::memory_order_relaxed);  // only we write it
    if (tail - producer_.head_cache > mask_) {
      // acquire: the consumer's pop of that slot (its read of the element)
      // happens before we overwrite it.
      producer_.head_cache = consumer_.head.load(std::memory_order_acquire);
      if (tail - producer_.head_cache > mask_) return false;
    }
    ::new (static_cast<void*>(cells_[tail & mask_].storage)) T(std::forward<U>(value));
    // release: the consumer that acquires the new tail sees the element.
    producer_.tail.store(tail + 1, std::memory_order_release);
    return true;
  }

  /// Consumer only. False when empty; otherwise moves the oldest element out.
  bool try_pop(T& out) noexcept(std::is_nothrow_move_assignable_v<T>) {
    std::size_t head = consumer_.head.load(std::memory_order_relaxed);  // only we write it
    if (head == consumer_.tail_cache) {
      // acquire: pairs with the producer's release of tail, so the element
      // constructed before it is visible.
      consumer_.tail_cache = producer_.tail.load(std::memory_order_acquire);
      if (head == consumer_.tail_cache) return false;
    }
    T* element = std::launder(reinterpret_cast<T*>(cells_[head & mask_].storage));
    out = std::move(*element);
    element->~T();
    // release: the producer that acquires the new head may reuse the slot.
    consumer_.head.store(head + 1, std::memory_order_release);
    return true;
  }

  /// Elements queued at some recent instant; exact only when both sides are idle.
  std::size_t size_approx() const noexcept {
    std::size_t tail = producer_.tail.load(std::memory_order_acquire);
    std::size_t head = consumer_.head.load(std::memory_order_acquire);
    return tail >= head ? tail - head : 0;
  }
  bool empty_approx() const noexcept { return size_approx() == 0; }
  std::size_t capacity() const noexcept { return mask_ + 1; }

 private:
  struct Cell {
    alignas(T) std::byte storage[sizeof(T)];
  };
  // Each side keeps a cached copy of the other side's index, so a non-full
  // push or non-empty pop touches only its own cache line.
  struct alignas(cache_line) Producer {
    std::atomic<std::size_t> tail{0};
    std::size_t head_cache = 0;
  };
  struct alignas(cache_line) Consumer {
    std::atomic<std::size_t> head{0};
    std::size_t tail_cache = 0;
  };

  Producer producer_;
  Consumer consumer_;
  std::size_t mask_;
  std::unique_ptr<Cell[]> cells_;
};

}  // namespace pier::base
