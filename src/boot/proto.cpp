// pier::boot: encoder and decoder of the pier-run protocol (see proto.hpp).
#include "boot/proto.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace pier::boot::proto {
namespace {

/// Appends little-endian fields; finish() patches the length in front.
class Writer {
 public:
  explicit Writer(Type type) {
    bytes_.resize(header_size);
    bytes_[4] = std::byte{version};
    bytes_[5] = static_cast<std::byte>(type);
  }
  void u8(std::uint8_t v) { bytes_.push_back(std::byte{v}); }
  void u16(std::uint16_t v) {
    for (int i = 0; i < 2; ++i) bytes_.push_back(static_cast<std::byte>(v >> (8 * i)));
  }
  void u32(std::uint32_t v) {
    for (int i = 0; i < 4; ++i) bytes_.push_back(static_cast<std::byte>(v >> (8 * i)));
  }
  void raw(std::span<const std::byte> b) { bytes_.insert(bytes_.end(), b.begin(), b.end()); }
  void text16(std::string_view s) {
    s = s.substr(0, max_text);
    u16(static_cast<std::uint16_t>(s.size()));
    raw(std::as_bytes(std::span(s.data(), s.size())));
  }
  void key(std::string_view k) {
    u16(static_cast<std::uint16_t>(k.size()));
    raw(std::as_bytes(std::span(k.data(), k.size())));
  }
  void value(std::span<const std::byte> v) {
    u32(static_cast<std::uint32_t>(v.size()));
    raw(v);
  }
  std::vector<std::byte> finish() && {
    const auto len = static_cast<std::uint32_t>(bytes_.size() - header_size);
    for (int i = 0; i < 4; ++i) bytes_[i] = static_cast<std::byte>(len >> (8 * i));
    return std::move(bytes_);
  }

 private:
  std::vector<std::byte> bytes_;
};

/// Reads little-endian fields; a short read sets a sticky failure, so a
/// decoder reads everything and checks ok() once at the end.
class Reader {
 public:
  explicit Reader(std::span<const std::byte> b) : bytes_(b) {}
  std::uint8_t u8() { return static_cast<std::uint8_t>(le(1)); }
  std::uint16_t u16() { return static_cast<std::uint16_t>(le(2)); }
  std::uint32_t u32() { return static_cast<std::uint32_t>(le(4)); }
  std::span<const std::byte> raw(std::size_t n) {
    if (failed_ || bytes_.size() - pos_ < n) {
      failed_ = true;
      return {};
    }
    auto out = bytes_.subspan(pos_, n);
    pos_ += n;
    return out;
  }
  std::string text(std::size_t n, std::size_t limit) {
    if (n > limit) failed_ = true;
    auto b = raw(failed_ ? 0 : n);
    return std::string(reinterpret_cast<const char*>(b.data()), b.size());
  }
  std::string text16(std::size_t limit) { return text(u16(), limit); }
  std::vector<std::byte> value() {
    const std::uint32_t n = u32();
    if (n > max_value) failed_ = true;
    auto b = raw(failed_ ? 0 : n);
    return {b.begin(), b.end()};
  }
  /// A count of items each at least `min_item` bytes long, checked against
  /// what remains so that a hostile count cannot make us reserve gigabytes.
  std::uint32_t count(std::size_t min_item) {
    const std::uint32_t n = u32();
    if (!failed_ && static_cast<std::uint64_t>(n) * min_item > bytes_.size() - pos_) failed_ = true;
    return failed_ ? 0 : n;
  }
  bool ok_at_end() const noexcept { return !failed_ && pos_ == bytes_.size(); }
  bool failed() const noexcept { return failed_; }

 private:
  std::uint64_t le(int n) {
    auto b = raw(static_cast<std::size_t>(n));
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < b.size(); ++i) v |= std::to_integer<std::uint64_t>(b[i]) << (8 * i);
    return v;
  }
  std::span<const std::byte> bytes_;
  std::size_t pos_ = 0;
  bool failed_ = false;
};

std::vector<std::byte> encode_report(Type type, const Report& report) {
  Writer w(type);
  w.u32(report.epoch);
  w.u32(static_cast<std::uint32_t>(report.ranks.size()));
  for (auto r : report.ranks) w.u32(r);
  w.text16(report.text);
  return std::move(w).finish();
}

Result<Report> decode_report(std::span<const std::byte> body) {
  Reader r(body);
  Report out;
  out.epoch = r.u32();
  const std::uint32_t n = r.count(4);
  out.ranks.reserve(n);
  for (std::uint32_t i = 0; i < n; ++i) out.ranks.push_back(r.u32());
  out.text = r.text16(max_text);
  if (!r.ok_at_end()) return Status::malformed;
  return out;
}

}  // namespace

std::vector<std::byte> encode_hello(const Hello& hello) {
  Writer w(Type::hello);
  w.u32(hello.rank);
  w.u32(hello.size);
  w.u32(hello.pid);
  w.text16(hello.library_version);
  w.text16(hello.session);
  return std::move(w).finish();
}

std::vector<std::byte> encode_welcome() {
  return Writer(Type::welcome).finish();
}

std::vector<std::byte> encode_error(Refusal why, std::string_view text) {
  Writer w(Type::error);
  w.u8(static_cast<std::uint8_t>(why));
  w.text16(text);
  return std::move(w).finish();
}

std::vector<std::byte> encode_commit(std::span<const Entry> entries) {
  Writer w(Type::commit);
  w.u32(static_cast<std::uint32_t>(entries.size()));
  for (const auto& e : entries) {
    w.key(e.key);
    w.value(e.value);
  }
  return std::move(w).finish();
}

std::vector<std::byte> encode_fence(std::uint32_t epoch) {
  Writer w(Type::fence);
  w.u32(epoch);
  return std::move(w).finish();
}

std::vector<std::byte> encode_fence_done(const FenceDone& done) {
  Writer w(Type::fence_done);
  w.u32(done.epoch);
  w.u32(static_cast<std::uint32_t>(done.entries.size()));
  for (const auto& e : done.entries) {
    w.u32(e.rank);
    w.key(e.key);
    w.value(e.value);
  }
  return std::move(w).finish();
}

std::vector<std::byte> encode_fence_failed(const Report& report) {
  return encode_report(Type::fence_failed, report);
}

std::vector<std::byte> encode_query(std::uint32_t epoch) {
  Writer w(Type::query);
  w.u32(epoch);
  return std::move(w).finish();
}

std::vector<std::byte> encode_query_reply(const Report& report) {
  return encode_report(Type::query_reply, report);
}

Result<Header> decode_header(std::span<const std::byte> bytes) {
  if (bytes.size() < header_size) return Status::malformed;
  Reader r(bytes.first(header_size));
  Header h;
  h.body_len = r.u32();
  auto rest = r.raw(4);
  h.version = std::to_integer<std::uint8_t>(rest[0]);
  // Only the length and version are stable across versions; the rest of a
  // foreign header is not interpreted.
  if (h.version != version) {
    h.type = Type::error;
    return h;
  }
  h.type = static_cast<Type>(rest[1]);
  if (rest[2] != std::byte{0} || rest[3] != std::byte{0}) return Status::malformed;
  if (h.type < Type::hello || h.type > Type::query_reply) return Status::malformed;
  if (h.body_len > max_body) return Status::malformed;
  return h;
}

bool valid_session(std::string_view name) noexcept {
  return name.size() <= max_session &&
         name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_.-") ==
             std::string_view::npos;
}

Result<Hello> decode_hello(std::span<const std::byte> body) {
  Reader r(body);
  Hello h;
  h.rank = r.u32();
  h.size = r.u32();
  h.pid = r.u32();
  h.library_version = r.text16(max_text);
  h.session = r.text16(max_session);
  if (!r.ok_at_end() || !valid_session(h.session)) return Status::malformed;
  return h;
}

Result<Error> decode_error(std::span<const std::byte> body) {
  Reader r(body);
  const std::uint8_t why = r.u8();
  std::string text = r.text16(max_text);
  if (!r.ok_at_end()) return Status::malformed;
  if (why < 1 || why > 3) return Status::malformed;
  return Error{static_cast<Refusal>(why), std::move(text)};
}

Result<std::vector<Entry>> decode_commit(std::span<const std::byte> body) {
  Reader r(body);
  const std::uint32_t n = r.count(2 + 4);
  if (n > max_commit_entries) return Status::malformed;
  std::vector<Entry> out;
  out.reserve(n);
  for (std::uint32_t i = 0; i < n && !r.failed(); ++i) {
    Entry e{0, r.text16(max_key), {}};
    e.value = r.value();
    if (e.key.empty()) return Status::malformed;
    out.push_back(std::move(e));
  }
  if (!r.ok_at_end()) return Status::malformed;
  return out;
}

Result<std::uint32_t> decode_fence(std::span<const std::byte> body) {
  Reader r(body);
  const std::uint32_t epoch = r.u32();
  if (!r.ok_at_end()) return Status::malformed;
  return epoch;
}

Result<FenceDone> decode_fence_done(std::span<const std::byte> body) {
  Reader r(body);
  FenceDone out;
  out.epoch = r.u32();
  const std::uint32_t n = r.count(4 + 2 + 4);
  out.entries.reserve(n);
  for (std::uint32_t i = 0; i < n && !r.failed(); ++i) {
    Entry e;
    e.rank = r.u32();
    e.key = r.text16(max_key);
    e.value = r.value();
    out.entries.push_back(std::move(e));
  }
  if (!r.ok_at_end()) return Status::malformed;
  return out;
}

Result<Report> decode_fence_failed(std::span<const std::byte> body) {
  return decode_report(body);
}

Result<std::uint32_t> decode_query(std::span<const std::byte> body) {
  return decode_fence(body);
}

Result<Report> decode_query_reply(std::span<const std::byte> body) {
  return decode_report(body);
}

void FrameReader::append(std::span<const std::byte> bytes) {
  // Compact lazily: only when everything buffered has been consumed or the
  // dead prefix dominates, so a burst of small frames is not quadratic.
  if (consumed_ == buffer_.size()) {
    buffer_.clear();
    consumed_ = 0;
  } else if (consumed_ > buffer_.size() / 2) {
    buffer_.erase(buffer_.begin(), buffer_.begin() + static_cast<std::ptrdiff_t>(consumed_));
    consumed_ = 0;
  }
  buffer_.insert(buffer_.end(), bytes.begin(), bytes.end());
}

Result<std::optional<Frame>> FrameReader::next() {
  std::span<const std::byte> avail(buffer_.data() + consumed_, buffer_.size() - consumed_);
  if (avail.size() < header_size) return std::optional<Frame>{};
  auto header = decode_header(avail);
  if (!header) return header.status();
  if (header->body_len > max_body) return Status::malformed;
  if (avail.size() - header_size < header->body_len) return std::optional<Frame>{};
  auto body = avail.subspan(header_size, header->body_len);
  Frame f{*header, {body.begin(), body.end()}};
  consumed_ += header_size + header->body_len;
  return std::optional<Frame>{std::move(f)};
}

std::string format_ranks(std::span<const std::uint32_t> ranks) {
  std::vector<std::uint32_t> sorted(ranks.begin(), ranks.end());
  std::sort(sorted.begin(), sorted.end());
  std::string out;
  for (std::size_t i = 0; i < sorted.size();) {
    std::size_t j = i;
    while (j + 1 < sorted.size() && sorted[j + 1] == sorted[j] + 1) ++j;
    if (!out.empty()) out += ", ";
    out += j > i + 1 ? fmt::format("{}-{}", sorted[i], sorted[j])
                     : (j == i + 1 ? fmt::format("{}, {}", sorted[i], sorted[j])
                                   : fmt::format("{}", sorted[i]));
    i = j + 1;
  }
  return out;
}

}  // namespace pier::boot::proto
