// pier: logging. Levels by volume (error, warn, info, debug, trace, data),
// a runtime level per tag (the folder name: "shm", "core", ...) set through
// PIER_LOG ("warn", "shm=debug,core=trace", "*=info"), and a compile-time
// ceiling so trace and data cost nothing in release builds.
// Logging preserves errno and never throws, returns or jumps.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <string_view>
#include <utility>

#ifndef PIER_LOG_CEILING
#define PIER_LOG_CEILING 6
#endif

namespace pier::log {

enum class Level : std::uint8_t {
  off = 0,
  error = 1,
  warn = 2,
  info = 3,
  debug = 4,
  trace = 5,
  data = 6
};

std::string_view to_string(Level level) noexcept;

/// Whether a message of this level and tag is printed now (cheap: a table lookup).
bool enabled(std::string_view tag, Level level) noexcept;
/// Writes one line "pier[<pid>] <tag> <level>: <message>" to stderr.
void write(Level level, std::string_view tag, std::string_view message) noexcept;
/// Re-reads a PIER_LOG style specification ("warn", "shm=debug,core=trace").
/// Returns false (and changes nothing) when the text does not parse.
bool configure(std::string_view spec) noexcept;
/// Counts of error and warn lines written since start; tests assert on them.
std::uint64_t error_count() noexcept;
std::uint64_t warn_count() noexcept;

/// Formats and writes; a formatting failure becomes a line saying so.
template <class... Args>
void emit(Level level, std::string_view tag, fmt::format_string<Args...> format,
          Args&&... args) noexcept {
  try {
    write(level, tag, fmt::format(format, std::forward<Args>(args)...));
  } catch (...) {
    write(level, tag, "(log message could not be formatted)");
  }
}

}  // namespace pier::log

/// PIER_LOG(warn, "shm", "cannot map {}: {}", path, std::strerror(err));
#define PIER_LOG(level, tag, ...)                                                    \
  do {                                                                               \
    if constexpr (static_cast<int>(::pier::log::Level::level) <= PIER_LOG_CEILING) { \
      if (::pier::log::enabled(tag, ::pier::log::Level::level))                      \
        ::pier::log::emit(::pier::log::Level::level, tag, __VA_ARGS__);              \
    }                                                                                \
  } while (0)
