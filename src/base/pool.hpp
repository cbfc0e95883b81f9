// pier: a fixed-capacity object pool. Message state objects, packet
// descriptors and event slots come from pools sized at init, so the data path
// never allocates.
//
// Contract:
// - The capacity is fixed at construction (the only allocation); acquire()
//   constructs a T in a free slot or returns nullptr when none is left.
// - release() destroys the object and frees its slot. Releasing a pointer the
//   pool does not own, or twice, is a programming error (asserted in debug
//   builds); release(Handle) instead validates and returns a Status.
// - Handles: a 32-bit value made of the slot index (low bits) and a
//   generation that changes each time the slot is released, so a stale or
//   forged handle is detected by lookup(), which returns nullptr. The values
//   0 and 0xffffffff are never valid handles.
// - Not thread-safe: one owner thread (or external locking). outstanding()
//   lets tests check that nothing leaked; the destructor destroys whatever
//   is still outstanding.
#pragma once

#include <pier/status.hpp>

#include <bit>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <stdexcept>
#include <type_traits>
#include <utility>

namespace pier::base {

template <class T>
class Pool {
 public:
  enum class Handle : std::uint32_t {};
  static constexpr Handle invalid_handle{0};
  static constexpr std::size_t max_capacity = std::size_t{1} << 24;

  /// Setup path: throws std::invalid_argument for a capacity of 0 or above
  /// max_capacity, std::bad_alloc when memory is short.
  explicit Pool(std::size_t capacity)
      : capacity_(checked(capacity)),
        index_bits_(capacity <= 1 ? 1 : static_cast<unsigned>(std::bit_width(capacity - 1))),
        index_mask_((std::uint32_t{1} << index_bits_) - 1),
        // The generation field has 32 - index_bits_ bits; 0 and the
        // all-ones value are skipped so that handles 0 and 0xffffffff never
        // name a live object.
        generation_limit_(0xffffffffu >> index_bits_) {
    slots_ = std::make_unique<Slot[]>(capacity);
    // Free list in index order, so the first acquisitions are predictable.
    for (std::size_t i = 0; i < capacity; ++i)
      slots_[i].next_free = static_cast<std::uint32_t>(i + 1);
    free_head_ = 0;
  }

  ~Pool() {
    for (std::size_t i = 0; i < capacity_; ++i)
      if (slots_[i].live) object(i)->~T();
  }

  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  /// A new T built from `args`, or nullptr when every slot is in use.
  template <class... Args>
  T* acquire(Args&&... args) noexcept(std::is_nothrow_constructible_v<T, Args...>) {
    if (free_head_ == capacity_) return nullptr;
    std::uint32_t index = free_head_;
    Slot& slot = slots_[index];
    T* t = ::new (static_cast<void*>(slot.storage)) T(std::forward<Args>(args)...);
    free_head_ = slot.next_free;
    slot.live = true;
    ++outstanding_;
    return t;
  }

  /// Destroys `t` (acquired from this pool) and frees its slot; stale
  /// handles to it stop resolving.
  void release(T* t) noexcept {
    // Our own pointers (acquire()'s): a slot boundary needs no check here,
    // only in owns(), which judges pointers from outside.
    std::size_t index = slot_of(t);
    assert(index < capacity_ && slots_[index].live &&
           "release of a pointer this pool does not own");
    if (index >= capacity_ || !slots_[index].live) return;
    free_slot(index);
  }

  /// release() for a handle: not_found for a stale, forged or invalid handle.
  Status release(Handle h) noexcept {
    T* t = lookup(h);
    if (!t) return Status::not_found;
    free_slot(index_of(t));
    return Status::ok;
  }

  /// The handle naming the live object `t`; invalid_handle if `t` is not a
  /// live object of this pool.
  Handle handle_of(const T* t) const noexcept {
    std::size_t index = index_of(t);
    if (index >= capacity_ || !slots_[index].live) return invalid_handle;
    return static_cast<Handle>((slots_[index].generation << index_bits_) |
                               static_cast<std::uint32_t>(index));
  }

  /// The live object `h` names, or nullptr if `h` is stale, forged or invalid.
  T* lookup(Handle h) noexcept {
    auto bits = static_cast<std::uint32_t>(h);
    std::uint32_t index = bits & index_mask_;
    std::uint32_t generation = bits >> index_bits_;
    if (index >= capacity_) return nullptr;
    Slot& slot = slots_[index];
    if (!slot.live || slot.generation != generation) return nullptr;
    return object(index);
  }
  const T* lookup(Handle h) const noexcept { return const_cast<Pool*>(this)->lookup(h); }

  /// Whether `t` points at a live object of this pool.
  bool owns(const T* t) const noexcept {
    std::size_t index = index_of(t);
    return index < capacity_ && slots_[index].live;
  }

  std::size_t capacity() const noexcept { return capacity_; }
  std::size_t outstanding() const noexcept { return outstanding_; }
  std::size_t available() const noexcept { return capacity_ - outstanding_; }

 private:
  struct Slot {
    alignas(T) std::byte storage[sizeof(T)];
    std::uint32_t generation = 1;  // never 0, so handle 0 is never valid
    std::uint32_t next_free = 0;
    bool live = false;
  };

  T* object(std::size_t index) noexcept {
    return std::launder(reinterpret_cast<T*>(slots_[index].storage));
  }

  /// Slot index of `t` when it points at a slot's object, else anything
  /// (capacity_ or more when outside the array): release()'s cheap form.
  std::size_t slot_of(const T* t) const noexcept {
    auto address = reinterpret_cast<std::uintptr_t>(t);
    auto first = reinterpret_cast<std::uintptr_t>(slots_.get());
    return address < first ? capacity_ : (address - first) / sizeof(Slot);
  }

  /// Slot index of `t`, or capacity_ when `t` is not inside the slot array.
  std::size_t index_of(const T* t) const noexcept {
    auto address = reinterpret_cast<std::uintptr_t>(t);
    auto first = reinterpret_cast<std::uintptr_t>(slots_.get());
    if (address < first) return capacity_;
    std::size_t offset = address - first;
    std::size_t index = offset / sizeof(Slot);
    if (index >= capacity_ || offset % sizeof(Slot) != offsetof(Slot, storage)) return capacity_;
    return index;
  }

  void free_slot(std::size_t index) noexcept {
    Slot& slot = slots_[index];
    object(index)->~T();
    slot.live = false;
    std::uint32_t next = slot.generation + 1;
    if (next >= generation_limit_) next = 1;
    slot.generation = next;
    slot.next_free = free_head_;
    free_head_ = static_cast<std::uint32_t>(index);
    --outstanding_;
  }

  /// Checked before the members derived from it: a shift by the index
  /// bits of a capacity beyond 32 bits would be undefined.
  static std::size_t checked(std::size_t capacity) {
    if (capacity == 0 || capacity > max_capacity)
      throw std::invalid_argument("pier::base::Pool capacity out of range");
    return capacity;
  }

  std::size_t capacity_;
  unsigned index_bits_;
  std::uint32_t index_mask_;
  std::uint32_t generation_limit_;
  std::unique_ptr<Slot[]> slots_;
  std::uint32_t free_head_ = 0;  // == capacity_ when empty
  std::size_t outstanding_ = 0;
};

}  // namespace pier::base
