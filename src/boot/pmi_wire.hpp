// pier::boot::pmi: the PMI "simple" wire protocols that MPICH's hydra (and
// Slurm, for PMI-2) serve over the PMI_FD socket. Pure text codecs, shared by
// the PMI back end of src/boot and the PMI server of pier-run.
//
// PMI-1: one command per line, space-separated key=value pairs, the first
//   being cmd=<name>:  "cmd=put kvsname=pier-7 key=a value=b\n".
// PMI-2: a 6-character decimal length, then "key=value;" pairs, ";;" standing
//   for a ';' inside a value:  "    36cmd=fullinit;pmirank=0;threaded=FALSE;".
// A PMI-2 client starts with one PMI-1 line (cmd=init pmi_version=2) and
// frames everything after the answer; a stream therefore tells its framing at
// each message boundary: "cmd=" or "mcmd=" starts a PMI-1 line, anything else
// a PMI-2 length.
//
// Input is hostile: every decoder trusts no length and returns malformed
// instead of asserting.
#pragma once

#include <pier/result.hpp>

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace pier::boot::pmi {

enum class Framing : unsigned char { v1, v2 };

/// One command or response: cmd=<name> and the pairs after it, in order.
struct Command {
  std::string name;
  std::vector<std::pair<std::string, std::string>> pairs;

  /// The value of the first pair named `key`, or nullptr.
  const std::string* find(std::string_view key) const noexcept;
  Command& add(std::string key, std::string value) {
    pairs.emplace_back(std::move(key), std::move(value));
    return *this;
  }
};

/// Longest message accepted in either framing (hydra's limit is 1 KiB per
/// PMI-1 line and 64 KiB per PMI-2 command; this leaves room for both).
inline constexpr std::size_t max_message = std::size_t{64} * 1024;
/// Length of the PMI-2 length prefix.
inline constexpr std::size_t v2_prefix = 6;

/// A PMI-1 line without its newline. A token without '=' continues the
/// previous value (an abort message with spaces), as hydra reads it.
Result<Command> parse_v1(std::string_view line);
/// A PMI-2 body, without the length prefix.
Result<Command> parse_v2(std::string_view body);
/// "cmd=<name> k=v ...\n"; values must hold no space or newline (PMI-1 has
/// no escape), else invalid_argument.
Result<std::string> format_v1(const Command& command);
/// The length prefix and "cmd=<name>;k=v;..." with ';' doubled in values.
Result<std::string> format_v2(const Command& command);

/// A message cut from a stream: its framing and its text (a PMI-1 line
/// without newline, or a PMI-2 body without prefix).
struct Message {
  Framing framing;
  std::string text;
};

/// Cuts messages from a byte stream whose framing can change at any message
/// boundary (see above).
class Reader {
 public:
  void append(std::string_view bytes) { buffer_.append(bytes); }
  /// The next complete message, nullopt when more bytes are needed, or
  /// malformed (a bad length prefix, a message over max_message).
  Result<std::optional<Message>> next();
  /// Bytes received but not yet returned as a message.
  std::size_t pending() const noexcept { return buffer_.size() - start_; }

 private:
  /// PMI-1 "mcmd=" commands span lines up to "endcmd".
  Result<std::optional<Message>> next_multi_line(std::string_view rest);
  std::string buffer_;
  std::size_t start_ = 0;
};

}  // namespace pier::boot::pmi
