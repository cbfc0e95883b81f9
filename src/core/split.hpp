// pier core: multi-rail splitting of a rendezvous, in proportion to the
// rails' bandwidth (nmad's split_balance). Pure, so tests check it alone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace pier::core {

struct Share {
  std::uint8_t rail = 0;
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
};

/// Cuts [0, length) into at most out.size() shares, one per usable rail
/// (bandwidth > 0), proportional to bandwidth, aligned to 4 KiB except the
/// last, and contiguous in rail order. Below `split_min`, or with one usable
/// rail, the whole message goes to the fastest rail (the first on a tie).
/// Returns the number of shares (0 when length is 0 or no rail is usable).
/// The shares' lengths always add up to `length`.
std::size_t split(std::uint64_t length, std::span<const std::uint32_t> bandwidth,
                  std::uint64_t split_min, std::span<Share> out) noexcept;

}  // namespace pier::core
