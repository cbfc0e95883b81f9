#include "drivers/fault/plan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <limits>

namespace pier::drivers::fault {
namespace {

constexpr std::array<std::string_view, fault_count> fault_names = {
    "death",   "connect_fail", "no_resource", "drop",  "truncate",
    "corrupt", "dup",          "reorder",     "delay", "late"};

std::uint64_t splitmix64(std::uint64_t x) noexcept {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/// Counter-based draw: each (seed, stream, fault, number, salt) has its own
/// value, so adding a rule for one fault never shifts the draws of another.
std::uint64_t hash_draw(std::uint64_t seed, std::uint64_t stream, Fault f, std::uint64_t number,
                        std::uint64_t salt) noexcept {
  std::uint64_t h = splitmix64(seed);
  h = splitmix64(h ^ stream);
  h = splitmix64(h ^ (static_cast<std::uint64_t>(f) | (salt << 8)));
  return splitmix64(h ^ number);
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

template <class T>
bool parse_number(std::string_view text, T& out) {
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, out);
  return ec == std::errc{} && ptr == end && !text.empty();
}

int fault_index(std::string_view name) {
  for (std::size_t i = 0; i < fault_count; ++i)
    if (fault_names[i] == name) return static_cast<int>(i);
  return -1;
}

Status fail(std::string* error, std::string message) {
  if (error) *error = std::move(message);
  return Status::invalid_argument;
}

/// One "name=value" option that is not a fault probability.
Status parse_option(Plan& plan, std::string_view name, std::string_view value, std::string* error) {
  std::uint64_t n = 0;
  if (name == "track") {
    if (value == "any")
      plan.track = TrackFilter::any;
    else if (value == "small")
      plan.track = TrackFilter::small;
    else if (value == "large")
      plan.track = TrackFilter::large;
    else
      return fail(error, fmt::format("track must be any, small or large, not '{}'", value));
    return Status::ok;
  }
  if (!parse_number(value, n))
    return fail(error, fmt::format("'{}' needs a non-negative integer, not '{}'", name, value));
  if (name == "seed") {
    plan.seed = n;
  } else if (name == "from") {
    if (n < 1) return fail(error, "from must be at least 1");
    plan.from = n;
  } else if (name == "delay_packets") {
    if (n < 1 || n > 1'000'000) return fail(error, "delay_packets must be in [1, 1000000]");
    plan.delay_packets = static_cast<std::uint32_t>(n);
  } else if (name == "delay_us") {
    if (n > 60'000'000) return fail(error, "delay_us must be at most 60000000");
    plan.delay_time = std::chrono::microseconds(n);
  } else if (name == "late_polls") {
    if (n < 1 || n > 1'000'000) return fail(error, "late_polls must be in [1, 1000000]");
    plan.late_polls = static_cast<std::uint32_t>(n);
  } else if (name == "slots") {
    if (n < 1 || n > 4096) return fail(error, "slots must be in [1, 4096]");
    plan.slots = static_cast<std::uint32_t>(n);
  } else if (name == "slot_bytes") {
    if (n < 64 || n > (std::uint64_t{1} << 30))
      return fail(error, "slot_bytes must be in [64, 1g]");
    plan.slot_bytes = static_cast<std::size_t>(n);
  } else {
    return fail(error, fmt::format("unknown fault or option '{}'", name));
  }
  return Status::ok;
}

}  // namespace

std::string_view to_string(Fault f) noexcept {
  const auto i = static_cast<std::size_t>(f);
  return i < fault_count ? fault_names[i] : "unknown_fault";
}

Counter counter_of(Fault f) noexcept {
  switch (f) {
    case Fault::connect_fail:
      return Counter::connect;
    case Fault::death:
      return Counter::op;
    case Fault::no_resource:
    case Fault::drop:
    case Fault::truncate:
    case Fault::corrupt:
    case Fault::dup:
    case Fault::reorder:
    case Fault::delay:
    case Fault::late:
      return Counter::send;
  }
  return Counter::send;
}

bool Plan::empty() const noexcept {
  for (std::size_t i = 0; i < fault_count; ++i)
    if (probability[i] > 0.0 || !at[i].empty()) return false;
  return true;
}

bool Plan::covers(driver::Track t) const noexcept {
  switch (track) {
    case TrackFilter::any:
      return true;
    case TrackFilter::small:
      return t == driver::Track::small;
    case TrackFilter::large:
      return t == driver::Track::large;
  }
  return true;
}

Result<Plan> parse_plan(std::string_view text, std::string* error) {
  Plan plan;
  while (!text.empty()) {
    const std::size_t comma = text.find(',');
    const std::string_view item = trim(text.substr(0, comma));
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
    if (item.empty()) continue;

    if (const std::size_t at = item.find('@'); at != std::string_view::npos) {
      const std::string_view name = trim(item.substr(0, at));
      const int f = fault_index(name);
      if (f < 0) return fail(error, fmt::format("unknown fault '{}'", name));
      std::uint64_t n = 0;
      if (!parse_number(trim(item.substr(at + 1)), n) || n == 0)
        return fail(error, fmt::format("'{}' needs an operation number >= 1", item));
      plan.at[static_cast<std::size_t>(f)].push_back(n);
      continue;
    }
    const std::size_t eq = item.find('=');
    if (eq == std::string_view::npos)
      return fail(error, fmt::format("'{}' is neither name=value nor name@N", item));
    const std::string_view name = trim(item.substr(0, eq));
    const std::string_view value = trim(item.substr(eq + 1));
    if (const int f = fault_index(name); f >= 0) {
      double p = -1.0;
      if (!parse_number(value, p) || !(p >= 0.0 && p <= 1.0))
        return fail(error,
                    fmt::format("probability of '{}' must be in [0, 1], not '{}'", name, value));
      plan.probability[static_cast<std::size_t>(f)] = p;
      continue;
    }
    if (const Status s = parse_option(plan, name, value, error); s != Status::ok) return s;
  }
  return plan;
}

std::string format_plan(const Plan& plan) {
  std::string out = fmt::format("seed={}", plan.seed);
  for (std::size_t i = 0; i < fault_count; ++i) {
    if (plan.probability[i] > 0.0)
      out += fmt::format(",{}={}", fault_names[i], plan.probability[i]);
    for (const std::uint64_t n : plan.at[i]) out += fmt::format(",{}@{}", fault_names[i], n);
  }
  out += fmt::format(",delay_packets={},delay_us={}", plan.delay_packets, plan.delay_time.count());
  if (plan.late_polls != 2) out += fmt::format(",late_polls={}", plan.late_polls);
  if (plan.from > 1) out += fmt::format(",from={}", plan.from);
  if (plan.track == TrackFilter::small) out += ",track=small";
  if (plan.track == TrackFilter::large) out += ",track=large";
  out += fmt::format(",slots={},slot_bytes={}", plan.slots, plan.slot_bytes);
  return out;
}

bool Injector::fires(Fault f, std::uint64_t stream, std::uint64_t number) const noexcept {
  const auto i = static_cast<std::size_t>(f);
  const auto& list = plan_.at[i];
  if (std::find(list.begin(), list.end(), number) != list.end()) return true;
  const double p = plan_.probability[i];
  if (p <= 0.0 || number < plan_.from) return false;
  if (p >= 1.0) return true;
  // 53 random bits give a uniform double in [0, 1).
  const double u = static_cast<double>(hash_draw(plan_.seed, stream, f, number, 0) >> 11) *
                   (1.0 / 9007199254740992.0);
  return u < p;
}

std::uint64_t Injector::draw(Fault f, std::uint64_t stream, std::uint64_t number) const noexcept {
  return hash_draw(plan_.seed, stream, f, number, 1);
}

}  // namespace pier::drivers::fault
