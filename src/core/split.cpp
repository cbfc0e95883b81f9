// pier core: the multi-rail split.
#include "core/split.hpp"

namespace pier::core {

std::size_t split(std::uint64_t length, std::span<const std::uint32_t> bandwidth,
                  std::uint64_t split_min, std::span<Share> out) noexcept {
  if (length == 0 || out.empty()) return 0;
  std::uint64_t total = 0;
  std::size_t usable = 0;
  std::size_t fastest = bandwidth.size();
  for (std::size_t i = 0; i < bandwidth.size(); ++i) {
    if (bandwidth[i] == 0) continue;
    total += bandwidth[i];
    ++usable;
    if (fastest == bandwidth.size() || bandwidth[i] > bandwidth[fastest]) fastest = i;
  }
  if (usable == 0) return 0;
  if (usable == 1 || length < split_min || out.size() == 1) {
    out[0] = {static_cast<std::uint8_t>(fastest), 0, length};
    return 1;
  }
  constexpr std::uint64_t align = 4096;
  std::size_t n = 0;
  std::uint64_t offset = 0;
  std::uint64_t seen = 0;
  for (std::size_t i = 0; i < bandwidth.size() && n < out.size(); ++i) {
    if (bandwidth[i] == 0) continue;
    seen += bandwidth[i];
    // Cumulative boundaries avoid drift: the share ends where the running
    // bandwidth fraction of the message ends, rounded down to the alignment.
    // 128-bit arithmetic: length * total may exceed 64 bits.
    std::uint64_t end =
        static_cast<std::uint64_t>(static_cast<unsigned __int128>(length) * seen / total);
    if (seen != total && n + 1 < out.size())
      end -= end % align;
    else
      end = length;
    if (end <= offset) continue;
    out[n++] = {static_cast<std::uint8_t>(i), offset, end - offset};
    offset = end;
    if (offset == length) break;
  }
  if (offset < length && n > 0) out[n - 1].length += length - offset;
  return n;
}

}  // namespace pier::core
