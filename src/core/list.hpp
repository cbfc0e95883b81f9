// pier core: an intrusive FIFO. Message states and packets are pooled, so
// the queues that order them link through a member and never allocate.
#pragma once

#include <cstddef>

namespace pier::core {

/// A singly linked FIFO through `T::*Link` (a T* member, null when unlinked).
template <class T, T* T::*Link>
class Fifo {
 public:
  bool empty() const noexcept { return head_ == nullptr; }
  T* front() const noexcept { return head_; }
  std::size_t size() const noexcept { return size_; }

  void push(T* t) noexcept {
    t->*Link = nullptr;
    if (tail_)
      tail_->*Link = t;
    else
      head_ = t;
    tail_ = t;
    ++size_;
  }
  void push_front(T* t) noexcept {
    t->*Link = head_;
    head_ = t;
    if (!tail_) tail_ = t;
    ++size_;
  }
  T* pop() noexcept {
    T* t = head_;
    if (!t) return nullptr;
    head_ = t->*Link;
    if (!head_) tail_ = nullptr;
    t->*Link = nullptr;
    --size_;
    return t;
  }
  /// Unlinks `t` wherever it is; false when it is not queued here.
  bool remove(T* t) noexcept {
    T* prev = nullptr;
    for (T* at = head_; at; prev = at, at = at->*Link) {
      if (at != t) continue;
      if (prev)
        prev->*Link = at->*Link;
      else
        head_ = at->*Link;
      if (tail_ == at) tail_ = prev;
      at->*Link = nullptr;
      --size_;
      return true;
    }
    return false;
  }

 private:
  T* head_ = nullptr;
  T* tail_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace pier::core
