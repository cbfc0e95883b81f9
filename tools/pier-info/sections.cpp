#include "sections.hpp"

#include "base/config.hpp"
#include "base/log.hpp"

#include <fmt/format.h>

namespace pier::tools::info {

void Sink::begin(std::string_view name) {
  section_ = name;
  if (json_mode_)
    document_[section_] = nlohmann::json::object();
  else
    text_ += fmt::format("{}{}:\n", text_.empty() ? "" : "\n", name);
}

void Sink::field(std::string_view key, const nlohmann::json& value) {
  if (json_mode_) {
    document_[section_][std::string(key)] = value;
    return;
  }
  text_ +=
      fmt::format("  {}: {}\n", key, value.is_string() ? value.get<std::string>() : value.dump());
}

void Sink::list(std::string_view list) {
  if (!json_mode_) return;
  auto& l = document_[section_][std::string(list)];
  if (!l.is_array()) l = nlohmann::json::array();
}

void Sink::item(std::string_view list_name, const nlohmann::json& data, std::string_view text) {
  if (json_mode_) {
    list(list_name);
    document_[section_][std::string(list_name)].push_back(data);
    return;
  }
  text_ += fmt::format("  {}\n", text);
}

void Sink::finish(std::ostream& out) const {
  if (json_mode_)
    out << document_.dump(2) << '\n';
  else
    out << text_;
}

void section_build(Sink& out, const Options&) {
  out.begin("build");
  out.field("version", PIER_VERSION);
  out.field("build_type", PIER_BUILD_TYPE);
#if defined(__clang__)
  out.field("compiler",
            fmt::format("clang {}.{}.{}", __clang_major__, __clang_minor__, __clang_patchlevel__));
#elif defined(__GNUC__)
  out.field("compiler", fmt::format("gcc {}.{}.{}", __GNUC__, __GNUC_MINOR__, __GNUC_PATCHLEVEL__));
#endif
#if defined(__SANITIZE_ADDRESS__)
  out.field("sanitizer", "address");
#elif defined(__SANITIZE_THREAD__)
  out.field("sanitizer", "thread");
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  out.field("sanitizer", "address");
#elif __has_feature(thread_sanitizer)
  out.field("sanitizer", "thread");
#else
  out.field("sanitizer", "none");
#endif
#else
  out.field("sanitizer", "none");
#endif
  out.field("log_ceiling", PIER_LOG_CEILING);
}

void section_config(Sink& out, const Options& options) {
  if (!options.config) return;
  out.begin("config");
  out.list("keys");
  for (const auto& e : config::dump()) {
    nlohmann::json data = {{"name", e.name},
                           {"type", config::to_string(e.type)},
                           {"value", e.value},
                           {"default", e.default_value},
                           {"source", config::to_string(e.source)},
                           {"bounds", e.bounds},
                           {"help", e.help}};
    // The default is shown only when it is not the value in force.
    std::string text = fmt::format(
        "{} = {}  ({}{}; {}{}{})\n      {}", e.name, e.value, config::to_string(e.source),
        e.source == config::Source::default_value ? "" : ", default " + e.default_value,
        config::to_string(e.type), e.bounds.empty() ? "" : " ", e.bounds, e.help);
    out.item("keys", data, text);
  }
}

void section_environment(Sink& out, const Options&) {
  out.begin("environment");
  out.list("unknown");
  auto unknown = config::unknown_environment();
  if (unknown.empty()) {
    out.field("status", "no unknown PIER_ variables");
    return;
  }
  for (const auto& message : unknown) out.item("unknown", message, message);
}

}  // namespace pier::tools::info
