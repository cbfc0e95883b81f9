// pier driver helpers: IovecData.
#include "driver/iovec_data.hpp"

#include <algorithm>

namespace pier::driver {

IovecData::IovecData(const ::iovec* iov, std::uint32_t count) noexcept
    : iov_(iov), count_(iov == nullptr ? 0 : count) {
  for (std::uint32_t i = 0; i < count_; ++i) size_ += iov_[i].iov_len;
}

IovecData::IovecData(void* base, std::size_t len) noexcept
    : count_(1), single_{base, len}, size_(len) {}

void IovecData::traverse(std::size_t offset, std::size_t len,
                         void (*visit)(void* ctx, std::byte* ptr, std::size_t len),
                         void* ctx) const noexcept {
  // single_ lives in this object, so it is looked up here rather than stored
  // as iov_ (a copied IovecData would otherwise point into its source).
  const ::iovec* entries = iov_ != nullptr ? iov_ : &single_;
  if (offset >= size_) return;
  len = std::min(len, size_ - offset);
  std::size_t skip = offset;
  for (std::uint32_t i = 0; i < count_ && len > 0; ++i) {
    const std::size_t entry_len = entries[i].iov_len;
    if (skip >= entry_len) {
      skip -= entry_len;
      continue;
    }
    const std::size_t take = std::min(entry_len - skip, len);
    visit(ctx, static_cast<std::byte*>(entries[i].iov_base) + skip, take);
    len -= take;
    skip = 0;
  }
}

}  // namespace pier::driver
