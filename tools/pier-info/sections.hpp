// pier-info: the report is a list of sections; each section is one function
// that writes into a Sink, which renders either text or JSON.
#pragma once

#include <nlohmann/json.hpp>

#include <ostream>
#include <string>
#include <string_view>

namespace pier::tools::info {

class Sink {
 public:
  explicit Sink(bool json) : json_mode_(json) {}
  /// Starts a section: a heading in text, an object under `name` in JSON.
  void begin(std::string_view name);
  /// One named value: "  key: value" in text, section.key = value in JSON.
  void field(std::string_view key, const nlohmann::json& value);
  /// One element of the list `list`: `text` in text, `data` appended to
  /// section.list in JSON (the list exists, possibly empty, once touched).
  void item(std::string_view list, const nlohmann::json& data, std::string_view text);
  /// Makes `list` exist (empty) in JSON, so consumers need not test for it.
  void list(std::string_view list);
  /// Prints the report: text as it went, JSON as one document.
  void finish(std::ostream& out) const;

 private:
  bool json_mode_;
  std::string section_;
  std::string text_;
  nlohmann::json document_ = nlohmann::json::object();
};

struct Options {
  bool config = false;
  bool init_drivers = true;  ///< bring each driver up (and close it) to learn if it runs
};

/// Version, build type, compiler and sanitizer.
void section_build(Sink& out, const Options& options);
/// Every configuration key: value, default, source, bounds, type and help.
void section_config(Sink& out, const Options& options);
/// PIER_ environment variables that name no key, with suggestions.
void section_environment(Sink& out, const Options& options);
/// Every built-in driver: usable or why not, capabilities, profile.
void section_drivers(Sink& out, const Options& options);
/// The libfabric providers found here, which one "ofi" takes and why.
void section_ofi_providers(Sink& out, const Options& options);
/// The core's protocol thresholds (CORE_* keys as the core reads them).
void section_thresholds(Sink& out, const Options& options);
/// The bootstrap back end this process would use, and whether PMIx is built.
void section_bootstrap(Sink& out, const Options& options);

}  // namespace pier::tools::info
