// pier: the configuration registry. Every tunable is a Key declared once, next
// to its user, with a default, bounds and help text. A key named "SHM_CELLS"
// is read from PIER_SHM_CELLS in the environment or set through set(); only
// this registry reads the environment.
#pragma once

#include <pier/result.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pier::config {

enum class Type : std::uint8_t { boolean, integer, size, string };
/// Where a key's current value came from; later sources win.
enum class Source : std::uint8_t { default_value, environment, api };

std::string_view to_string(Type t) noexcept;
std::string_view to_string(Source s) noexcept;

/// One row of the dump: everything pier-info --config prints.
struct Entry {
  std::string name;  ///< full variable name, "PIER_SHM_CELLS"
  Type type;
  std::string value;          ///< current value, as text
  std::string default_value;  ///< as text
  std::string bounds;         ///< "[1, 4096]" or "" when unbounded
  Source source;
  std::string help;
};

/// Sets a key through the API (source `api`). `name` may be given with or
/// without the PIER_ prefix. Returns not_found for an unknown key and
/// invalid_argument for a value that does not parse or is out of bounds.
Status set(std::string_view name, std::string_view value);
/// Drops an API value, falling back to the environment or the default.
Status unset(std::string_view name);
/// Current value of any key as text.
Result<std::string> get_text(std::string_view name);
/// Every registered key, sorted by name.
std::vector<Entry> dump();
/// PIER_* environment variables that name no key, each as a message that
/// names the closest real key ("PIER_SHM_CELS is unknown; did you mean
/// PIER_SHM_CELLS?"). Call after every library has registered its keys.
std::vector<std::string> unknown_environment();
/// The closest registered key to `name` by edit distance, or "".
/// The answer carries the PIER_ prefix ("PIER_SHM_CELLS").
std::string closest_key(std::string_view name);
/// Declares that PIER_ variables starting with `var_prefix` (e.g.
/// "PIER_RUN_") are read by other means (a launcher protocol) and are not
/// reported by unknown_environment().
void reserve_environment(std::string_view var_prefix);

namespace detail {
struct KeyBase;
/// Keys register on construction and unregister on destruction; the registry
/// keeps a pointer, so a key never moves. `name` must outlive the key (a
/// string literal); a leading PIER_ is dropped.
void register_key(KeyBase* key);
void unregister_key(KeyBase* key);
/// The text value for a key, from the api layer, the environment or default.
struct KeyBase {
  std::string_view name;  ///< without the PIER_ prefix
  Type type;
  std::string_view help;
  std::int64_t min;
  std::int64_t max;
  std::string default_text;
};
std::string lookup(const KeyBase& key, Source* source);
std::int64_t parse_integer_or_default(const KeyBase& key);
}  // namespace detail

/// A typed key. Construct it as a namespace-scope `inline const` object (or a
/// function-local static) next to the code that reads it. get() is cheap but
/// not free: hot paths read it once at set-up and keep the value.
template <class T>
class Key;

template <>
class Key<bool> {
 public:
  Key(std::string_view name, bool fallback, std::string_view help);
  ~Key();
  Key(const Key&) = delete;
  Key& operator=(const Key&) = delete;
  bool get() const;

 private:
  detail::KeyBase base_;
};

/// Integers; Type::size also accepts the suffixes k, m, g (powers of 1024).
template <>
class Key<std::int64_t> {
 public:
  Key(std::string_view name, std::int64_t fallback, std::int64_t min, std::int64_t max,
      std::string_view help, Type type = Type::integer);
  ~Key();
  Key(const Key&) = delete;
  Key& operator=(const Key&) = delete;
  std::int64_t get() const;

 private:
  detail::KeyBase base_;
};

template <>
class Key<std::string> {
 public:
  Key(std::string_view name, std::string_view fallback, std::string_view help);
  ~Key();
  Key(const Key&) = delete;
  Key& operator=(const Key&) = delete;
  std::string get() const;

 private:
  detail::KeyBase base_;
};

using BoolKey = Key<bool>;
using IntKey = Key<std::int64_t>;
using StringKey = Key<std::string>;

/// Test helper: sets a key for the lifetime of the object, then restores the
/// previous API value (or none). Tests push and pop config, never setenv.
class ScopedSet {
 public:
  ScopedSet(std::string_view name, std::string_view value);
  ~ScopedSet();
  ScopedSet(const ScopedSet&) = delete;
  ScopedSet& operator=(const ScopedSet&) = delete;
  Status status() const noexcept { return status_; }

 private:
  std::string name_;
  std::string previous_;
  bool had_previous_ = false;
  Status status_;
};

}  // namespace pier::config
