// pier: Result<T>, a T or a failure Status. Must be used; has no default
// constructor, so `return {}` cannot hide a missing value.
#pragma once

#include <pier/status.hpp>

#include <cassert>
#include <type_traits>
#include <utility>
#include <variant>

namespace pier {

template <class T>
class [[nodiscard]] Result {
  static_assert(!std::is_same_v<std::remove_cv_t<T>, Status>, "use Status directly");

 public:
  Result(T value) noexcept(std::is_nothrow_move_constructible_v<T>)  // NOLINT: implicit by design
      : state_(std::in_place_index<0>, std::move(value)) {}
  Result(Status failure) noexcept  // NOLINT: implicit by design
      : state_(std::in_place_index<1>, failure) {
    assert(failure != Status::ok && "a Result holding ok must hold a value");
  }

  bool has_value() const noexcept { return state_.index() == 0; }
  explicit operator bool() const noexcept { return has_value(); }

  /// ok when a value is held, else the failure.
  Status status() const noexcept {
    const Status* failure = std::get_if<1>(&state_);
    return failure == nullptr ? Status::ok : *failure;
  }

  T& value() & noexcept { return *std::get_if<0>(&state_); }
  const T& value() const& noexcept { return *std::get_if<0>(&state_); }
  T&& value() && noexcept { return std::move(*std::get_if<0>(&state_)); }
  T& operator*() & noexcept { return value(); }
  const T& operator*() const& noexcept { return value(); }
  T&& operator*() && noexcept { return std::move(*this).value(); }
  T* operator->() noexcept { return &value(); }
  const T* operator->() const noexcept { return &value(); }

  template <class U>
  T value_or(U&& fallback) const& {
    return has_value() ? value() : static_cast<T>(std::forward<U>(fallback));
  }

 private:
  std::variant<T, Status> state_;
};

}  // namespace pier
