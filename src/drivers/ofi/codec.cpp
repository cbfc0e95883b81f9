#include "drivers/ofi/codec.hpp"

#include "wire/bytes.hpp"
#include "wire/packet_registry.hpp"

#include <cstring>
#include <optional>
#include <string_view>

namespace pier::drivers::ofi {

namespace {

constexpr std::array<std::byte, 4> url_magic{std::byte{'P'}, std::byte{'O'}, std::byte{'F'},
                                             std::byte{'I'}};
constexpr std::array<std::byte, 4> rdv_magic{std::byte{'P'}, std::byte{'O'}, std::byte{'R'},
                                             std::byte{'V'}};
static_assert(wire::driver_local_prefix == 32, "control_size assumes a 32-byte wire prefix");
static_assert(rdv_size <= driver::Packet::rdv_capacity);

}  // namespace

std::uint32_t fnv1a(std::span<const std::byte> bytes) noexcept {
  std::uint32_t h = 2166136261u;
  for (std::byte b : bytes) {
    h ^= static_cast<std::uint8_t>(b);
    h *= 16777619u;
  }
  return h;
}

Result<std::vector<std::byte>> encode_url(const Url& url) {
  if (url.name.empty() || url.name.size() > max_name || url.max_packet < min_max_packet ||
      url.max_packet > max_max_packet)
    return Status::invalid_argument;
  std::vector<std::byte> out(url_header_size + url.name.size());
  std::span<std::byte> s(out);
  std::memcpy(out.data(), url_magic.data(), 4);
  wire::store_u8(s, 4, url_version);
  wire::store_u8(s, 5, static_cast<std::uint8_t>(url.name.size()));
  wire::store_u16(s, 6, 0);
  wire::store_u64(s, 8, url.context_id);
  wire::store_u32(s, 16, url.pid);
  wire::store_u32(s, 20, url.provider_hash);
  wire::store_u64(s, 24, url.host_key);
  wire::store_u32(s, 32, url.max_packet);
  wire::store_u32(s, 36, 0);
  std::memcpy(out.data() + url_header_size, url.name.data(), url.name.size());
  return out;
}

Result<UrlView> peek_url(std::span<const std::byte> in) noexcept {
  if (in.size() < url_header_size + 1 || in.size() > max_url_size) return Status::invalid_argument;
  if (std::memcmp(in.data(), url_magic.data(), 4) != 0) return Status::invalid_argument;
  if (wire::load_u8(in, 4) != url_version) return Status::invalid_argument;
  const std::size_t name_len = wire::load_u8(in, 5);
  if (name_len == 0 || in.size() != url_header_size + name_len || wire::load_u16(in, 6) != 0 ||
      wire::load_u32(in, 36) != 0)
    return Status::invalid_argument;
  // A limit we would never configure is not a url of ours (and 0 would
  // refuse every send to it).
  const std::uint32_t max_packet = wire::load_u32(in, 32);
  if (max_packet < min_max_packet || max_packet > max_max_packet) return Status::invalid_argument;
  UrlView url;
  url.context_id = wire::load_u64(in, 8);
  url.pid = wire::load_u32(in, 16);
  url.provider_hash = wire::load_u32(in, 20);
  url.host_key = wire::load_u64(in, 24);
  url.max_packet = max_packet;
  url.name = in.subspan(url_header_size);
  return url;
}

Result<Url> decode_url(std::span<const std::byte> in) {
  Result<UrlView> view = peek_url(in);
  if (!view) return view.status();
  Url url;
  url.context_id = view->context_id;
  url.pid = view->pid;
  url.provider_hash = view->provider_hash;
  url.host_key = view->host_key;
  url.max_packet = view->max_packet;
  url.name.assign(view->name.begin(), view->name.end());
  return url;
}

std::string shm_region_of(std::span<const std::byte> name, std::uint32_t pid) {
  std::string_view s(reinterpret_cast<const char*>(name.data()), name.size());
  if (const auto nul = s.find('\0'); nul != std::string_view::npos) s = s.substr(0, nul);
  constexpr std::string_view prefix = "fi_shm://";
  if (!s.starts_with(prefix)) return {};
  s.remove_prefix(prefix.size());
  if (!s.starts_with(std::to_string(pid) + ':')) return {};
  // Digits and exactly two colons: never a path, never someone else's file.
  int colons = 0;
  for (const char ch : s) {
    if (ch == ':') {
      ++colons;
    } else if (ch < '0' || ch > '9') {
      return {};
    }
  }
  if (colons != 2 || s.back() == ':') return {};
  return std::string(s);
}

ControlBytes encode_control(const Control& c) noexcept {
  ControlBytes out{};
  std::span<std::byte> s(out);
  // Cannot fail: the buffer holds the prefix and the body length is small.
  (void)wire::encode_driver_local(static_cast<std::uint16_t>(c.type),
                                  static_cast<std::uint32_t>(control_body_size + c.url.size()), s);
  std::span<std::byte> b = s.subspan(wire::driver_local_prefix);
  wire::store_u8(b, 0, 1);
  wire::store_u8(b, 1, static_cast<std::uint8_t>(c.track));
  wire::store_u8(b, 2, c.flags);
  wire::store_u32(b, 4, c.sender_instance);
  wire::store_u64(b, 8, c.sender_context);
  wire::store_u64(b, 16, c.target_context);
  wire::store_u32(b, 24, c.target_instance);
  wire::store_u64(b, 32, c.value);
  return out;
}

struct ControlParser::Impl {
  wire::CoreHandlers core;  ///< empty: a core packet here is malformed
  wire::HandlerTable table{static_cast<std::uint16_t>(ControlType::count)};
  std::optional<wire::StreamParser> parser;
  Result<Control> last = Status::malformed;
  /// The url of the last hello: the parser's head is valid only in the call.
  std::array<std::byte, max_url_size> url{};

  Impl() { build(); }

  void build() { parser.emplace(core, &table, control_body_size + max_url_size, this); }

  static Status on_control(void* self, const wire::Incoming& in,
                           wire::Continuation& rest) noexcept {
    auto* impl = static_cast<Impl*>(self);
    const auto type = static_cast<ControlType>(in.subtype);
    // The whole body is in the head: the parser was built to hold the
    // largest one. Only a hello carries more than the fixed body.
    if (in.body_length < control_body_size || in.head.size() != in.body_length)
      return Status::malformed;
    const std::span<const std::byte> b = in.head.first(control_body_size);
    const std::span<const std::byte> url = in.head.subspan(control_body_size);
    if (type != ControlType::hello && !url.empty()) return Status::malformed;
    if (!url.empty() && !peek_url(url)) return Status::malformed;
    if (wire::load_u8(b, 0) != 1) return Status::version_mismatch;
    const std::uint8_t track = wire::load_u8(b, 1);
    if (track > 1 || wire::load_u8(b, 3) != 0 || wire::load_u32(b, 28) != 0)
      return Status::malformed;
    const std::uint8_t flags = wire::load_u8(b, 2);
    const std::uint8_t allowed = type == ControlType::hello ? flag_call_back
                                 : type == ControlType::bye ? flag_abandoned | flag_refused
                                                            : 0;
    if ((flags & ~allowed) != 0) return Status::malformed;
    Control c;
    c.type = type;
    c.track = static_cast<driver::Track>(track);
    c.flags = flags;
    c.sender_instance = wire::load_u32(b, 4);
    c.sender_context = wire::load_u64(b, 8);
    c.target_context = wire::load_u64(b, 16);
    c.target_instance = wire::load_u32(b, 24);
    c.value = wire::load_u64(b, 32);
    std::memcpy(impl->url.data(), url.data(), url.size());
    c.url = std::span<const std::byte>(impl->url).first(url.size());
    impl->last = c;
    rest.consumed = in.head.size();
    return Status::ok;
  }
};

ControlParser::ControlParser() : impl_(std::make_unique<Impl>()) {
  for (std::uint16_t t = 0; t < static_cast<std::uint16_t>(ControlType::count); ++t)
    (void)impl_->table.register_handler(t, wire::Handler{&Impl::on_control, impl_.get()});
}
ControlParser::~ControlParser() = default;

Result<Control> ControlParser::decode(std::span<const std::byte> in) noexcept {
  if (in.size() < control_size || in.size() > control_max_size) return Status::malformed;
  if (!impl_->parser) return Status::no_memory;
  impl_->last = Status::malformed;
  const Status s = impl_->parser->feed_packet(in);
  if (s != Status::ok) {
    // A stopped parser stays stopped; hostile input must not silence the
    // next peer, so start afresh (allocation on this error path only).
    try {
      impl_->build();
    } catch (...) {
      impl_->parser.reset();
    }
    return s;
  }
  return impl_->last;
}

void encode_rdv(const Rdv& r, driver::Packet& pkt) noexcept {
  std::span<std::byte> s(pkt.rdv_data);
  std::memcpy(s.data(), rdv_magic.data(), 4);
  wire::store_u32(s, 4, r.cookie);
  wire::store_u64(s, 8, r.address);
  wire::store_u64(s, 16, r.key);
  wire::store_u64(s, 24, r.length);
  pkt.rdv_len = rdv_size;
}

Result<Rdv> decode_rdv(const driver::Packet& pkt) noexcept {
  if (pkt.rdv_len != rdv_size) return Status::invalid_argument;
  std::span<const std::byte> s(pkt.rdv_data);
  if (std::memcmp(s.data(), rdv_magic.data(), 4) != 0) return Status::invalid_argument;
  Rdv r;
  r.cookie = wire::load_u32(s, 4);
  r.address = wire::load_u64(s, 8);
  r.key = wire::load_u64(s, 16);
  r.length = wire::load_u64(s, 24);
  return r;
}

}  // namespace pier::drivers::ofi
