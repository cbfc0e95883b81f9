// pier driver helpers: a DataIterator over an iovec array, so code written
// for Form::data (the seed's nm_data_s) also serves plain buffers and iovecs,
// and tests can drive the data form with memory they own.
#pragma once

#include <pier/driver.hpp>

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>

namespace pier::driver {

/// Presents iovec entries as one layout. Holds the pointer only: the array
/// must outlive the iterator and every packet that uses it.
class IovecData final : public DataIterator {
 public:
  IovecData() = default;
  IovecData(const ::iovec* iov, std::uint32_t count) noexcept;
  /// One contiguous range.
  IovecData(void* base, std::size_t len) noexcept;

  std::size_t size() const noexcept override { return size_; }
  void traverse(std::size_t offset, std::size_t len,
                void (*visit)(void* ctx, std::byte* ptr, std::size_t len),
                void* ctx) const noexcept override;

 private:
  const ::iovec* iov_ = nullptr;
  std::uint32_t count_ = 0;
  ::iovec single_{};
  std::size_t size_ = 0;
};

}  // namespace pier::driver
