// pier: the configuration registry. Keys register from static initialisers of
// many libraries, so the registry is a function-local static that is never
// destroyed (keys of other libraries may unregister during exit).
#include "base/config.hpp"

#include "base/log.hpp"
#include "base/mutex.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <limits>
#include <map>
#include <optional>
#include <set>

extern char** environ;  // NOLINT: POSIX, declared by no standard header

namespace pier::config {

namespace {

constexpr std::string_view prefix = "PIER_";

struct Registry {
  base::Mutex mutex;
  std::vector<detail::KeyBase*> keys PIER_GUARDED_BY(mutex);
  std::map<std::string, std::string, std::less<>> api PIER_GUARDED_BY(mutex);  // name -> text
  std::set<std::string, std::less<>> reported PIER_GUARDED_BY(mutex);  // "NAME=value" logged
  std::vector<std::string> reserved_prefixes PIER_GUARDED_BY(mutex);
};

Registry& registry() {
  static Registry* const r = new Registry;  // never destroyed, see the top
  return *r;
}

std::string_view strip_prefix(std::string_view name) {
  if (name.substr(0, prefix.size()) == prefix) name.remove_prefix(prefix.size());
  return name;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

bool iequal(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

std::optional<bool> parse_bool(std::string_view text) {
  text = trim(text);
  for (std::string_view t : {"1", "true", "yes", "on"})
    if (iequal(text, t)) return true;
  for (std::string_view f : {"0", "false", "no", "off"})
    if (iequal(text, f)) return false;
  return std::nullopt;
}

/// Decimal integer; for Type::size an optional k, m or g multiplies by 1024^n.
std::optional<std::int64_t> parse_int(std::string_view text, Type type) {
  text = trim(text);
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  std::int64_t multiplier = 1;
  if (type == Type::size && !text.empty()) {
    switch (std::tolower(static_cast<unsigned char>(text.back()))) {
      case 'k':
        multiplier = std::int64_t{1} << 10;
        break;
      case 'm':
        multiplier = std::int64_t{1} << 20;
        break;
      case 'g':
        multiplier = std::int64_t{1} << 30;
        break;
      default:
        break;
    }
    if (multiplier != 1) text.remove_suffix(1);
  }
  if (text.empty()) return std::nullopt;
  std::int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || end != text.data() + text.size()) return std::nullopt;
  if (value > std::numeric_limits<std::int64_t>::max() / multiplier ||
      value < std::numeric_limits<std::int64_t>::min() / multiplier)
    return std::nullopt;
  return value * multiplier;
}

bool bounded(const detail::KeyBase& key) {
  return key.type == Type::integer || key.type == Type::size;
}

std::string bounds_text(const detail::KeyBase& key) {
  if (!bounded(key)) return {};
  if (key.min == std::numeric_limits<std::int64_t>::min() &&
      key.max == std::numeric_limits<std::int64_t>::max())
    return {};
  return fmt::format("[{}, {}]", key.min, key.max);
}

/// Whether `text` is a valid value for `key`, bounds included.
bool valid(const detail::KeyBase& key, std::string_view text) {
  switch (key.type) {
    case Type::boolean:
      return parse_bool(text).has_value();
    case Type::integer:
    case Type::size: {
      auto v = parse_int(text, key.type);
      return v && *v >= key.min && *v <= key.max;
    }
    case Type::string:
      return true;
  }
  return false;
}

detail::KeyBase* find_locked(Registry& r, std::string_view name) PIER_REQUIRES(r.mutex) {
  name = strip_prefix(name);
  for (auto* k : r.keys)
    if (k->name == name) return k;
  return nullptr;
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t above = row[j];
      std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + cost});
      diagonal = above;
    }
  }
  return row[b.size()];
}

/// A rejected environment value, to be logged once the registry lock is
/// released (logging reads its own key through this registry).
struct Rejection {
  std::string name, value, bounds;
  Type type;
};

std::string lookup_locked(Registry& r, const detail::KeyBase& key, Source* source,
                          std::optional<Rejection>* rejected) PIER_REQUIRES(r.mutex) {
  if (auto it = r.api.find(key.name); it != r.api.end()) {
    if (source) *source = Source::api;
    return it->second;
  }
  std::string var = fmt::format("{}{}", prefix, key.name);
  if (const char* env = std::getenv(var.c_str())) {
    if (valid(key, env)) {
      if (source) *source = Source::environment;
      return env;
    }
    if (r.reported.insert(fmt::format("{}={}", var, env)).second)
      *rejected = Rejection{var, env, bounds_text(key), key.type};
  }
  if (source) *source = Source::default_value;
  return key.default_text;
}

void report(const std::optional<Rejection>& rejected, std::string_view default_text) {
  if (!rejected) return;
  PIER_LOG(warn, "config", "{}={} is not a valid {}{}{}; using the default {}", rejected->name,
           rejected->value, to_string(rejected->type), rejected->bounds.empty() ? "" : " in ",
           rejected->bounds, default_text);
}

}  // namespace

std::string_view to_string(Type t) noexcept {
  switch (t) {
    case Type::boolean:
      return "boolean";
    case Type::integer:
      return "integer";
    case Type::size:
      return "size";
    case Type::string:
      return "string";
  }
  return "unknown";
}

std::string_view to_string(Source s) noexcept {
  switch (s) {
    case Source::default_value:
      return "default";
    case Source::environment:
      return "environment";
    case Source::api:
      return "api";
  }
  return "unknown";
}

Status set(std::string_view name, std::string_view value) {
  Registry& r = registry();
  base::LockGuard lock(r.mutex);
  detail::KeyBase* key = find_locked(r, name);
  if (!key) return Status::not_found;
  if (!valid(*key, value)) return Status::invalid_argument;
  r.api.insert_or_assign(std::string(key->name), std::string(value));
  return Status::ok;
}

Status unset(std::string_view name) {
  Registry& r = registry();
  base::LockGuard lock(r.mutex);
  detail::KeyBase* key = find_locked(r, name);
  if (!key) return Status::not_found;
  if (auto it = r.api.find(key->name); it != r.api.end()) r.api.erase(it);
  return Status::ok;
}

Result<std::string> get_text(std::string_view name) {
  Registry& r = registry();
  std::optional<Rejection> rejected;
  std::string text, default_text;
  {
    base::LockGuard lock(r.mutex);
    detail::KeyBase* key = find_locked(r, name);
    if (!key) return Status::not_found;
    text = lookup_locked(r, *key, nullptr, &rejected);
    default_text = key->default_text;
  }
  report(rejected, default_text);
  return text;
}

std::vector<Entry> dump() {
  Registry& r = registry();
  std::vector<Entry> entries;
  std::vector<std::pair<std::optional<Rejection>, std::string>> rejections;
  {
    base::LockGuard lock(r.mutex);
    entries.reserve(r.keys.size());
    for (const auto* key : r.keys) {
      std::optional<Rejection> rejected;
      Entry e{fmt::format("{}{}", prefix, key->name),
              key->type,
              {},
              key->default_text,
              bounds_text(*key),
              Source::default_value,
              std::string(key->help)};
      e.value = lookup_locked(r, *key, &e.source, &rejected);
      if (rejected) rejections.emplace_back(std::move(rejected), key->default_text);
      entries.push_back(std::move(e));
    }
  }
  for (const auto& [rejected, default_text] : rejections) report(rejected, default_text);
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.name < b.name; });
  // A name declared twice (a programming error reported at registration)
  // shows once.
  entries.erase(std::unique(entries.begin(), entries.end(),
                            [](const Entry& a, const Entry& b) { return a.name == b.name; }),
                entries.end());
  return entries;
}

std::string closest_key(std::string_view name) {
  Registry& r = registry();
  base::LockGuard lock(r.mutex);
  name = strip_prefix(name);
  std::string_view best;
  std::size_t best_distance = std::numeric_limits<std::size_t>::max();
  for (const auto* key : r.keys) {
    std::size_t d = edit_distance(name, key->name);
    if (d < best_distance || (d == best_distance && key->name < best)) {
      best_distance = d;
      best = key->name;
    }
  }
  // Beyond a third of the name (at least 2 edits) a suggestion is noise.
  std::size_t limit = std::max<std::size_t>(2, name.size() / 3);
  if (best.empty() || best_distance > limit) return {};
  return fmt::format("{}{}", prefix, best);
}

std::vector<std::string> unknown_environment() {
  std::vector<std::string> unknown_names;
  {
    Registry& r = registry();
    base::LockGuard lock(r.mutex);
    for (char** env = environ; env && *env; ++env) {
      std::string_view entry(*env);
      std::string_view var = entry.substr(0, entry.find('='));
      if (var.substr(0, prefix.size()) != prefix) continue;
      if (find_locked(r, var)) continue;
      bool reserved = std::any_of(r.reserved_prefixes.begin(), r.reserved_prefixes.end(),
                                  [&](const std::string& p) { return var.starts_with(p); });
      if (!reserved) unknown_names.emplace_back(var);
    }
  }
  std::sort(unknown_names.begin(), unknown_names.end());
  std::vector<std::string> messages;
  for (const auto& var : unknown_names) {
    std::string suggestion = closest_key(var);
    if (suggestion.empty())
      messages.push_back(fmt::format("{} is unknown", var));
    else
      messages.push_back(fmt::format("{} is unknown; did you mean {}?", var, suggestion));
  }
  return messages;
}

void reserve_environment(std::string_view var_prefix) {
  Registry& r = registry();
  base::LockGuard lock(r.mutex);
  r.reserved_prefixes.emplace_back(var_prefix);
}

namespace detail {

void register_key(KeyBase* key) {
  key->name = strip_prefix(key->name);
  bool duplicate = false;
  bool default_ok = valid(*key, key->default_text);
  {
    Registry& r = registry();
    base::LockGuard lock(r.mutex);
    duplicate = find_locked(r, key->name) != nullptr;
    r.keys.push_back(key);
  }
  if (duplicate) PIER_LOG(error, "config", "key PIER_{} is declared twice", key->name);
  if (!default_ok)
    PIER_LOG(error, "config", "key PIER_{} has default {} outside its bounds {}", key->name,
             key->default_text, bounds_text(*key));
}

void unregister_key(KeyBase* key) {
  Registry& r = registry();
  base::LockGuard lock(r.mutex);
  std::erase(r.keys, key);
}

std::string lookup(const KeyBase& key, Source* source) {
  Registry& r = registry();
  std::optional<Rejection> rejected;
  std::string text;
  {
    base::LockGuard lock(r.mutex);
    text = lookup_locked(r, key, source, &rejected);
  }
  report(rejected, key.default_text);
  return text;
}

std::int64_t parse_integer_or_default(const KeyBase& key) {
  if (auto v = parse_int(lookup(key, nullptr), key.type)) return *v;
  // Only reachable if the default itself is malformed: fall back to min.
  return parse_int(key.default_text, key.type).value_or(key.min);
}

}  // namespace detail

Key<bool>::Key(std::string_view name, bool fallback, std::string_view help)
    : base_{name, Type::boolean, help, 0, 1, fallback ? "true" : "false"} {
  detail::register_key(&base_);
}

Key<bool>::~Key() {
  detail::unregister_key(&base_);
}

bool Key<bool>::get() const {
  return parse_bool(detail::lookup(base_, nullptr)).value_or(base_.default_text == "true");
}

Key<std::int64_t>::Key(std::string_view name, std::int64_t fallback, std::int64_t min,
                       std::int64_t max, std::string_view help, Type type)
    : base_{name, type == Type::size ? Type::size : Type::integer,
            help, min,
            max,  std::to_string(fallback)} {
  detail::register_key(&base_);
}

Key<std::int64_t>::~Key() {
  detail::unregister_key(&base_);
}

std::int64_t Key<std::int64_t>::get() const {
  return detail::parse_integer_or_default(base_);
}

Key<std::string>::Key(std::string_view name, std::string_view fallback, std::string_view help)
    : base_{name, Type::string, help, 0, 0, std::string(fallback)} {
  detail::register_key(&base_);
}

Key<std::string>::~Key() {
  detail::unregister_key(&base_);
}

std::string Key<std::string>::get() const {
  return detail::lookup(base_, nullptr);
}

ScopedSet::ScopedSet(std::string_view name, std::string_view value)
    : name_(strip_prefix(name)), status_(Status::ok) {
  Registry& r = registry();
  {
    base::LockGuard lock(r.mutex);
    if (auto it = r.api.find(name_); it != r.api.end()) {
      previous_ = it->second;
      had_previous_ = true;
    }
  }
  status_ = set(name_, value);
}

ScopedSet::~ScopedSet() {
  if (status_ != Status::ok) return;  // nothing was changed
  Status restored = had_previous_ ? set(name_, previous_) : unset(name_);
  if (restored != Status::ok)
    PIER_LOG(warn, "config", "cannot restore PIER_{}: {}", name_, to_string(restored));
}

}  // namespace pier::config
