// pier-perf: the helpers every measurement shares: the verification
// pattern, medians, and how a default count is fitted to a time budget.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

namespace pier::perf {

inline std::uint64_t mix(std::uint64_t x) {
  // splitmix64: cheap, and every byte depends on the position, so a shifted
  // or stale buffer does not pass for a correct one.
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

inline std::uint64_t seed_of(std::size_t size, int sender_role) {
  return (static_cast<std::uint64_t>(size) << 1) | static_cast<std::uint64_t>(sender_role);
}

inline void fill(std::span<std::byte> buf, std::uint64_t seed) {
  for (std::size_t off = 0; off < buf.size(); off += 8) {
    const std::uint64_t v = mix(seed * 0x100000001b3ull + off);
    std::memcpy(buf.data() + off, &v, std::min<std::size_t>(8, buf.size() - off));
  }
}

inline bool matches(std::span<const std::byte> buf, std::uint64_t seed) {
  for (std::size_t off = 0; off < buf.size(); off += 8) {
    const std::uint64_t v = mix(seed * 0x100000001b3ull + off);
    if (std::memcmp(buf.data() + off, &v, std::min<std::size_t>(8, buf.size() - off)) != 0)
      return false;
  }
  return true;
}

inline double median_of(std::vector<double>& v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/// Round trips timed per size by default: about 32 MiB per direction for
/// large sizes, at most 1000.
inline std::size_t default_latency_iters(std::size_t size) {
  return std::clamp<std::size_t>((std::size_t{32} << 20) / std::max<std::size_t>(size, 1), 5, 1000);
}

/// Messages streamed per size by default (about 128 MiB): a stream shorter
/// than a scheduler tick measures the scheduler.
inline std::size_t default_stream_count(std::size_t size, std::size_t max_messages) {
  return std::clamp<std::size_t>((std::size_t{128} << 20) / std::max<std::size_t>(size, 1), 8,
                                 max_messages);
}

/// `fallback`, or fewer items when each takes `per_item_s` and the budget
/// would be exceeded (never fewer than `floor`); a fixed count overrides.
inline std::size_t fit_count(std::size_t fixed, std::size_t fallback, double budget_s,
                             double per_item_s, std::size_t floor) {
  if (fixed) return fixed;
  if (per_item_s <= 0) return fallback;
  const double fit = budget_s / per_item_s;
  return std::clamp<std::size_t>(
      fit >= static_cast<double>(fallback) ? fallback : static_cast<std::size_t>(fit),
      std::min(floor, fallback), fallback);
}

}  // namespace pier::perf
