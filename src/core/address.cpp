// pier core: address codec and rail choice.
#include "core/address.hpp"

#include <map>

#include "wire/bytes.hpp"

namespace pier::core {

namespace {

constexpr std::uint32_t address_magic = 0x524f4350;  // "PCOR"
constexpr std::uint8_t address_version = 2;          // 2: a receive capacity per url

void put_u8(std::vector<std::byte>& out, std::uint8_t v) {
  out.push_back(std::byte{v});
}
void put_u16(std::vector<std::byte>& out, std::uint16_t v) {
  for (int i = 0; i < 2; ++i) out.push_back(static_cast<std::byte>(v >> (8 * i)));
}
void put_u32(std::vector<std::byte>& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<std::byte>(v >> (8 * i)));
}
void put_bytes(std::vector<std::byte>& out, std::span<const std::byte> b) {
  out.insert(out.end(), b.begin(), b.end());
}

/// A bounds-checked reader: every take fails once the input is short.
class Reader {
 public:
  explicit Reader(std::span<const std::byte> in) : in_(in) {}
  bool u8(std::uint8_t& v) {
    if (!need(1)) return false;
    v = wire::load_u8(in_, at_);
    at_ += 1;
    return true;
  }
  bool u16(std::uint16_t& v) {
    if (!need(2)) return false;
    v = wire::load_u16(in_, at_);
    at_ += 2;
    return true;
  }
  bool u32(std::uint32_t& v) {
    if (!need(4)) return false;
    v = wire::load_u32(in_, at_);
    at_ += 4;
    return true;
  }
  bool bytes(std::size_t n, std::span<const std::byte>& out) {
    if (!need(n)) return false;
    out = in_.subspan(at_, n);
    at_ += n;
    return true;
  }
  bool done() const { return at_ == in_.size(); }

 private:
  bool need(std::size_t n) const { return in_.size() - at_ >= n; }
  std::span<const std::byte> in_;
  std::size_t at_ = 0;
};

std::string to_text(std::span<const std::byte> b) {
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

}  // namespace

std::vector<std::byte> encode_address(const LocalAddress& a) {
  std::vector<std::byte> out;
  put_u32(out, address_magic);
  put_u8(out, address_version);
  put_u16(out, static_cast<std::uint16_t>(a.node.size()));
  put_bytes(out, std::as_bytes(std::span(a.node.data(), a.node.size())));
  put_u32(out, a.pid);
  put_u32(out, a.credits);
  put_u32(out, a.recv_capacity);
  put_u8(out, static_cast<std::uint8_t>(a.urls.size()));
  for (const UrlEntry& u : a.urls) {
    put_u8(out, static_cast<std::uint8_t>(u.spec.size()));
    put_bytes(out, std::as_bytes(std::span(u.spec.data(), u.spec.size())));
    put_u8(out, u.index);
    put_u32(out, u.recv_capacity);
    put_u32(out, static_cast<std::uint32_t>(u.url.size()));
    put_bytes(out, u.url);
  }
  return out;
}

Result<LocalAddress> decode_address(std::span<const std::byte> bytes) {
  Reader r(bytes);
  LocalAddress a;
  std::uint32_t magic = 0;
  std::uint8_t version = 0;
  std::uint16_t node_len = 0;
  std::span<const std::byte> text;
  if (!r.u32(magic) || magic != address_magic || !r.u8(version)) return Status::malformed;
  if (version != address_version) return Status::version_mismatch;
  if (!r.u16(node_len) || !r.bytes(node_len, text)) return Status::malformed;
  a.node = to_text(text);
  std::uint8_t count = 0;
  if (!r.u32(a.pid) || !r.u32(a.credits) || !r.u32(a.recv_capacity) || !r.u8(count))
    return Status::malformed;
  for (std::uint8_t i = 0; i < count; ++i) {
    UrlEntry u;
    std::uint8_t spec_len = 0;
    std::uint32_t url_len = 0;
    std::span<const std::byte> url;
    if (!r.u8(spec_len) || spec_len == 0 || !r.bytes(spec_len, text) || !r.u8(u.index) ||
        !r.u32(u.recv_capacity) || !r.u32(url_len) || !r.bytes(url_len, url))
      return Status::malformed;
    u.spec = to_text(text);
    u.url.assign(url.begin(), url.end());
    a.urls.push_back(std::move(u));
  }
  if (!r.done() || a.credits == 0 || a.recv_capacity == 0) return Status::malformed;
  for (const UrlEntry& u : a.urls)
    if (u.recv_capacity == 0 || u.recv_capacity > a.recv_capacity) return Status::malformed;
  return a;
}

Result<std::vector<std::vector<std::string>>> parse_drivers(std::string_view text) {
  std::vector<std::vector<std::string>> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t comma = text.find(',', start);
    std::string_view choice = text.substr(
        start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    std::vector<std::string> rails;
    std::size_t at = 0;
    while (at <= choice.size()) {
      std::size_t plus = choice.find('+', at);
      std::string_view rail =
          choice.substr(at, plus == std::string_view::npos ? std::string_view::npos : plus - at);
      while (!rail.empty() && rail.front() == ' ') rail.remove_prefix(1);
      while (!rail.empty() && rail.back() == ' ') rail.remove_suffix(1);
      if (rail.empty()) return Status::invalid_argument;
      rails.emplace_back(rail);
      if (plus == std::string_view::npos) break;
      at = plus + 1;
    }
    if (rails.size() > 4) return Status::invalid_argument;
    out.push_back(std::move(rails));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  if (out.empty()) return Status::invalid_argument;
  return out;
}

std::string_view base_driver(std::string_view spec) noexcept {
  constexpr std::string_view fault = "fault:";
  while (spec.substr(0, fault.size()) == fault) spec.remove_prefix(fault.size());
  return spec;
}

bool reachable(std::string_view spec, const LocalAddress& local, const PeerAddress& peer) noexcept {
  std::string_view base = base_driver(spec);
  if (base == "self") return local.node == peer.node && local.pid == peer.pid;
  if (base == "shm") return local.node == peer.node;
  return true;
}

Result<std::vector<std::pair<std::string, std::uint8_t>>> choose_rails(
    const std::vector<std::vector<std::string>>& choices, const LocalAddress& local,
    const PeerAddress& peer) {
  auto has = [](const LocalAddress& a, const std::string& spec, std::uint8_t index) {
    for (const UrlEntry& u : a.urls)
      if (u.spec == spec && u.index == index) return true;
    return false;
  };
  for (const auto& choice : choices) {
    std::vector<std::pair<std::string, std::uint8_t>> rails;
    std::map<std::string, std::uint8_t> used;
    bool ok = true;
    for (const std::string& spec : choice) {
      std::uint8_t index = used[spec]++;
      if (!reachable(spec, local, peer) || !has(local, spec, index) || !has(peer, spec, index)) {
        ok = false;
        break;
      }
      rails.emplace_back(spec, index);
    }
    if (ok) return rails;
  }
  return Status::not_found;
}

}  // namespace pier::core
