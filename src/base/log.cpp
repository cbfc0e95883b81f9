// pier: logging. The level table is read on every PIER_LOG, so readers take
// no lock and allocate nothing: a fixed table of packed tags and levels, all
// atomics, guarded by a sequence counter (a seqlock) against configure().
// Writers are serialised by a mutex; readers never wait for it.
#include "base/log.hpp"

#include "base/config.hpp"
#include "base/mutex.hpp"

#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace pier::log {

namespace {

constexpr std::size_t max_tags = 32;
constexpr std::size_t max_tag_length = 16;  // a tag is packed into two words

struct Packed {
  std::uint64_t w0 = 0, w1 = 0;
};

bool pack(std::string_view tag, Packed& out) noexcept {
  if (tag.empty() || tag.size() > max_tag_length) return false;
  char buffer[max_tag_length] = {};
  std::memcpy(buffer, tag.data(), tag.size());
  std::memcpy(&out.w0, buffer, sizeof out.w0);
  std::memcpy(&out.w1, buffer + sizeof out.w0, sizeof out.w1);
  return true;
}

struct Slot {
  std::atomic<std::uint64_t> w0{0}, w1{0};
  std::atomic<std::uint8_t> level{0};
};

struct Table {
  std::atomic<std::uint32_t> sequence{0};  // odd while configure() rewrites
  std::atomic<std::uint8_t> fallback{static_cast<std::uint8_t>(Level::warn)};
  std::atomic<std::uint32_t> count{0};
  // The most verbose level of any tag: most disabled messages stop here,
  // before the table is searched.
  std::atomic<std::uint8_t> loudest{static_cast<std::uint8_t>(Level::warn)};
  std::array<Slot, max_tags> slots{};
};

// Constant-initialised, so usable from any static initialiser of any library.
constinit Table table;
constinit base::Mutex writer_mutex;        // configure() against configure() only
constinit std::atomic<int> init_state{0};  // 0 not read, 1 reading PIER_LOG, 2 done
constinit std::atomic<std::uint64_t> errors{0};
constinit std::atomic<std::uint64_t> warnings{0};

const config::StringKey& spec_key() {
  static const config::StringKey key{
      "LOG", "warn",
      "log levels: a level for every tag, or tag=level pairs separated by commas "
      "(\"shm=debug,core=trace\", \"*=info\"); levels off, error, warn, info, debug, trace, "
      "data"};
  return key;
}
// Registers PIER_LOG at start-up so pier-info lists it before any log line.
[[maybe_unused]] const config::StringKey& spec_key_registered = spec_key();

std::string_view trim(std::string_view s) noexcept {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

bool parse_level(std::string_view text, Level& out) noexcept {
  constexpr std::array<Level, 7> levels{Level::off,   Level::error, Level::warn, Level::info,
                                        Level::debug, Level::trace, Level::data};
  for (Level l : levels) {
    std::string_view name = to_string(l);
    bool same = name.size() == text.size();
    for (std::size_t i = 0; same && i < name.size(); ++i)
      same = std::tolower(static_cast<unsigned char>(text[i])) == name[i];
    if (same || (text.size() == 1 && text[0] == '0' + static_cast<int>(l))) {
      out = l;
      return true;
    }
  }
  return false;
}

struct Parsed {
  Level fallback = Level::warn;
  std::array<std::pair<Packed, Level>, max_tags> tags{};
  std::size_t count = 0;
};

bool parse_spec(std::string_view spec, Parsed& out) noexcept {
  spec = trim(spec);
  while (!spec.empty()) {
    std::size_t comma = spec.find(',');
    std::string_view item = trim(spec.substr(0, comma));
    spec = comma == std::string_view::npos ? std::string_view{} : spec.substr(comma + 1);
    if (item.empty()) continue;
    std::size_t eq = item.find('=');
    Level level;
    if (eq == std::string_view::npos) {
      if (!parse_level(item, level)) return false;
      out.fallback = level;
      continue;
    }
    std::string_view tag = trim(item.substr(0, eq));
    if (!parse_level(trim(item.substr(eq + 1)), level)) return false;
    if (tag == "*") {
      out.fallback = level;
      continue;
    }
    Packed key;
    if (!pack(tag, key)) return false;
    std::size_t i = 0;
    while (i < out.count && (out.tags[i].first.w0 != key.w0 || out.tags[i].first.w1 != key.w1)) ++i;
    if (i == out.count) {
      if (out.count == max_tags) return false;
      ++out.count;
    }
    out.tags[i] = {key, level};  // a later mention of a tag wins
  }
  return true;
}

/// Publishes a parsed spec. `from_environment` applies only if no configure()
/// call won the race meanwhile: the API beats the environment.
void apply(const Parsed& p, bool from_environment) noexcept {
  base::LockGuard lock(writer_mutex);
  if (from_environment && init_state.load(std::memory_order_relaxed) == 2) return;
  std::uint32_t sequence = table.sequence.load(std::memory_order_relaxed);
  table.sequence.store(sequence + 1, std::memory_order_relaxed);
  // release on every entry: a reader that loads any of them (acquire) also
  // sees the odd sequence stored above, so it retries.
  table.fallback.store(static_cast<std::uint8_t>(p.fallback), std::memory_order_release);
  table.count.store(static_cast<std::uint32_t>(p.count), std::memory_order_release);
  for (std::size_t i = 0; i < p.count; ++i) {
    table.slots[i].w0.store(p.tags[i].first.w0, std::memory_order_release);
    table.slots[i].w1.store(p.tags[i].first.w1, std::memory_order_release);
    table.slots[i].level.store(static_cast<std::uint8_t>(p.tags[i].second),
                               std::memory_order_release);
  }
  Level loudest = p.fallback;
  for (std::size_t i = 0; i < p.count; ++i) loudest = std::max(loudest, p.tags[i].second);
  // relaxed: a reader racing with configure() may use the old or the new
  // bound, as it may see the old or the new levels.
  table.loudest.store(static_cast<std::uint8_t>(loudest), std::memory_order_relaxed);
  // release: a reader that acquires this even sequence sees every entry.
  table.sequence.store(sequence + 2, std::memory_order_release);
  // release: pairs with ensure_init's acquire.
  init_state.store(2, std::memory_order_release);
}

/// Reads PIER_LOG once. A re-entrant or concurrent first call sees the
/// defaults instead of waiting, so logging from inside the config registry
/// cannot deadlock.
void init_slow() noexcept {
  int expected = 0;
  if (!init_state.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) return;
  std::string spec;
  try {
    spec = spec_key().get();
  } catch (...) {
    spec.clear();
  }
  Parsed parsed;
  bool ok = parse_spec(spec, parsed);
  apply(ok ? parsed : Parsed{}, true);
  if (!ok) {
    char line[256];
    int n = std::snprintf(line, sizeof line, "PIER_LOG=\"%.*s\" does not parse; using warn",
                          static_cast<int>(std::min<std::size_t>(spec.size(), 160)), spec.data());
    write(Level::warn, "log", std::string_view(line, n > 0 ? static_cast<std::size_t>(n) : 0));
  }
}

inline void ensure_init() noexcept {
  // acquire: pairs with the release store at the end of init_slow's configure.
  if (init_state.load(std::memory_order_acquire) != 2) init_slow();
}

Level level_of(std::string_view tag) noexcept {
  Packed key;
  bool packable = pack(tag, key);
  for (;;) {
    // acquire: the entries read below are at least as new as this sequence.
    std::uint32_t before = table.sequence.load(std::memory_order_acquire);
    if (before & 1u) continue;  // a configure() is rewriting; it is short
    auto found = static_cast<Level>(table.fallback.load(std::memory_order_acquire));
    if (packable) {
      std::uint32_t n = table.count.load(std::memory_order_acquire);
      for (std::uint32_t i = 0; i < n && i < max_tags; ++i) {
        const Slot& s = table.slots[i];
        if (s.w0.load(std::memory_order_acquire) == key.w0 &&
            s.w1.load(std::memory_order_acquire) == key.w1) {
          found = static_cast<Level>(s.level.load(std::memory_order_acquire));
          break;
        }
      }
    }
    // The entry loads above are acquire (no fences: GCC's TSan lacks them):
    // the re-check below cannot move before them, and an entry written by a
    // configure() that started meanwhile carries its odd sequence with it, so
    // the re-check sees a changed sequence and the reader retries.
    if (table.sequence.load(std::memory_order_relaxed) == before) return found;
  }
}

}  // namespace

std::string_view to_string(Level level) noexcept {
  switch (level) {
    case Level::off:
      return "off";
    case Level::error:
      return "error";
    case Level::warn:
      return "warn";
    case Level::info:
      return "info";
    case Level::debug:
      return "debug";
    case Level::trace:
      return "trace";
    case Level::data:
      return "data";
  }
  return "unknown";
}

bool enabled(std::string_view tag, Level level) noexcept {
  if (level == Level::off) return false;
  ensure_init();
  if (static_cast<std::uint8_t>(level) > table.loudest.load(std::memory_order_relaxed))
    return false;
  return static_cast<int>(level) <= static_cast<int>(level_of(tag));
}

void write(Level level, std::string_view tag, std::string_view message) noexcept {
  int saved_errno = errno;
  if (level == Level::error) errors.fetch_add(1, std::memory_order_relaxed);
  if (level == Level::warn) warnings.fetch_add(1, std::memory_order_relaxed);
  std::string_view name = to_string(level);
  char head[96];
  int n = std::snprintf(head, sizeof head, "pier[%d] %.*s %.*s: ", static_cast<int>(::getpid()),
                        static_cast<int>(std::min<std::size_t>(tag.size(), 32)), tag.data(),
                        static_cast<int>(name.size()), name.data());
  if (n < 0) n = 0;
  if (static_cast<std::size_t>(n) >= sizeof head) n = sizeof head - 1;
  char newline = '\n';
  // One writev: the line reaches stderr in one piece even with many threads.
  iovec parts[3] = {{head, static_cast<std::size_t>(n)},
                    {const_cast<char*>(message.data()), message.size()},
                    {&newline, 1}};
  while (::writev(STDERR_FILENO, parts, 3) < 0 && errno == EINTR) {
  }
  errno = saved_errno;
}

bool configure(std::string_view spec) noexcept {
  Parsed parsed;
  if (!parse_spec(spec, parsed)) return false;
  apply(parsed, false);
  return true;
}

std::uint64_t error_count() noexcept {
  return errors.load(std::memory_order_relaxed);
}
std::uint64_t warn_count() noexcept {
  return warnings.load(std::memory_order_relaxed);
}

}  // namespace pier::log
