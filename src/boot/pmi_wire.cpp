// pier::boot::pmi: PMI-1 and PMI-2 simple wire codecs (see pmi_wire.hpp).
#include "boot/pmi_wire.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace pier::boot::pmi {
namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\r';
}

bool starts_message_v1(std::string_view text) {
  return text.starts_with("cmd=") || text.starts_with("mcmd=");
}

}  // namespace

const std::string* Command::find(std::string_view key) const noexcept {
  for (const auto& [k, v] : pairs)
    if (k == key) return &v;
  return nullptr;
}

Result<Command> parse_v1(std::string_view line) {
  if (line.size() > max_message) return Status::malformed;
  Command out;
  bool have_name = false;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && is_space(line[i])) ++i;
    if (i == line.size()) break;
    std::size_t end = i;
    while (end < line.size() && !is_space(line[end])) ++end;
    const std::string_view token = line.substr(i, end - i);
    i = end;
    const std::size_t eq = token.find('=');
    if (eq == std::string_view::npos || eq == 0) {
      // A word without '=' belongs to the previous value ("message=a b c").
      if (out.pairs.empty()) return Status::malformed;
      out.pairs.back().second.append(" ").append(token);
      continue;
    }
    const std::string_view key = token.substr(0, eq);
    const std::string_view value = token.substr(eq + 1);
    if (!have_name) {
      if (key != "cmd" && key != "mcmd") return Status::malformed;
      if (value.empty()) return Status::malformed;
      out.name = std::string(value);
      have_name = true;
      continue;
    }
    out.add(std::string(key), std::string(value));
  }
  if (!have_name) return Status::malformed;
  return out;
}

Result<Command> parse_v2(std::string_view body) {
  if (body.size() > max_message) return Status::malformed;
  Command out;
  bool have_name = false;
  std::size_t i = 0;
  while (i < body.size()) {
    const std::size_t eq = body.find('=', i);
    if (eq == std::string_view::npos || eq == i) return Status::malformed;
    const std::string_view key = body.substr(i, eq - i);
    if (key.find(';') != std::string_view::npos) return Status::malformed;
    std::string value;
    std::size_t j = eq + 1;
    for (;;) {
      if (j == body.size()) break;  // a last pair without ';' is tolerated
      if (body[j] == ';') {
        if (j + 1 < body.size() && body[j + 1] == ';') {
          value.push_back(';');
          j += 2;
          continue;
        }
        ++j;
        break;
      }
      value.push_back(body[j++]);
    }
    i = j;
    if (!have_name) {
      if (key != "cmd" || value.empty()) return Status::malformed;
      out.name = std::move(value);
      have_name = true;
      continue;
    }
    out.add(std::string(key), std::move(value));
  }
  if (!have_name) return Status::malformed;
  return out;
}

Result<std::string> format_v1(const Command& command) {
  auto clean = [](std::string_view s) {
    return s.find_first_of(" \n\r\t") == std::string_view::npos;
  };
  if (command.name.empty() || !clean(command.name)) return Status::invalid_argument;
  std::string out = "cmd=" + command.name;
  for (const auto& [k, v] : command.pairs) {
    if (k.empty() || !clean(k) || k.find('=') != std::string::npos || !clean(v))
      return Status::invalid_argument;
    out.append(" ").append(k).append("=").append(v);
  }
  out.push_back('\n');
  if (out.size() > max_message) return Status::invalid_argument;
  return out;
}

Result<std::string> format_v2(const Command& command) {
  if (command.name.empty() || command.name.find(';') != std::string::npos)
    return Status::invalid_argument;
  std::string body = "cmd=" + command.name + ";";
  for (const auto& [k, v] : command.pairs) {
    if (k.empty() || k.find_first_of("=;") != std::string::npos) return Status::invalid_argument;
    body.append(k).append("=");
    for (char c : v) {
      body.push_back(c);
      if (c == ';') body.push_back(';');
    }
    body.push_back(';');
  }
  if (body.size() > max_message) return Status::invalid_argument;
  // Right-aligned like hydra's "%6u"; MPICH's reader accepts either side.
  return fmt::format("{:>6}", body.size()) + body;
}

Result<std::optional<Message>> Reader::next_multi_line(std::string_view rest) {
  // "mcmd=spawn\nnprocs=2\n...\nendcmd\n": one command over several lines,
  // returned as one line of its key=value pairs (the "endcmd" left out).
  std::string joined;
  std::size_t at = 0;
  for (;;) {
    const std::size_t nl = rest.find('\n', at);
    if (nl == std::string_view::npos) {
      if (rest.size() > max_message) return Status::malformed;
      return std::optional<Message>{};
    }
    std::string_view line = rest.substr(at, nl - at);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    at = nl + 1;
    if (line == "endcmd") break;
    if (at > max_message) return Status::malformed;
    if (!joined.empty()) joined.push_back(' ');
    joined.append(line);
  }
  start_ += at;
  return std::optional<Message>{Message{Framing::v1, std::move(joined)}};
}

Result<std::optional<Message>> Reader::next() {
  // Keep the buffer from growing with consumed bytes.
  if (start_ > 0 && start_ * 2 >= buffer_.size()) {
    buffer_.erase(0, start_);
    start_ = 0;
  }
  const std::string_view rest = std::string_view(buffer_).substr(start_);
  if (rest.empty()) return std::optional<Message>{};
  // A partial "cmd=" still undecided: wait for more (a v2 prefix never
  // starts with a letter, so a 'c' or 'm' means v1).
  const bool v1 = starts_message_v1(rest) || rest.front() == 'c' || rest.front() == 'm';
  if (v1) {
    const std::size_t nl = rest.find('\n');
    if (nl == std::string_view::npos) {
      if (rest.size() > max_message) return Status::malformed;
      return std::optional<Message>{};
    }
    if (!starts_message_v1(rest)) return Status::malformed;
    if (rest.starts_with("mcmd=")) return next_multi_line(rest);
    std::string line(rest.substr(0, nl));
    start_ += nl + 1;
    return std::optional<Message>{Message{Framing::v1, std::move(line)}};
  }
  if (rest.size() < v2_prefix) {
    for (char c : rest)
      if (c != ' ' && (c < '0' || c > '9')) return Status::malformed;
    return std::optional<Message>{};
  }
  // The prefix: optional spaces, digits, optional spaces; nothing else.
  const std::string_view prefix = rest.substr(0, v2_prefix);
  std::size_t k = 0, length = 0, digits = 0;
  while (k < prefix.size() && prefix[k] == ' ') ++k;
  while (k < prefix.size() && prefix[k] >= '0' && prefix[k] <= '9') {
    length = length * 10 + static_cast<std::size_t>(prefix[k] - '0');
    ++k;
    ++digits;
  }
  while (k < prefix.size() && prefix[k] == ' ') ++k;
  if (k != prefix.size() || digits == 0 || length == 0 || length > max_message)
    return Status::malformed;
  if (rest.size() < v2_prefix + length) return std::optional<Message>{};
  std::string body(rest.substr(v2_prefix, length));
  start_ += v2_prefix + length;
  return std::optional<Message>{Message{Framing::v2, std::move(body)}};
}

}  // namespace pier::boot::pmi
