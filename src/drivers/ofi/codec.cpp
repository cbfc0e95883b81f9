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
  if (url.name.empty() || url.name.size() > max_name) return Status::invalid_argument;
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
  std::memcpy(out.data() + url_header_size, url.name.data(), url.name.size());
  return out;
}

Result<Url> decode_url(std::span<const std::byte> in) {
  if (in.size() < url_header_size + 1 || in.size() > url_header_size + max_name)
    return Status::invalid_argument;
  if (std::memcmp(in.data(), url_magic.data(), 4) != 0) return Status::invalid_argument;
  if (wire::load_u8(in, 4) != url_version) return Status::invalid_argument;
  const std::size_t name_len = wire::load_u8(in, 5);
  if (name_len == 0 || in.size() != url_header_size + name_len || wire::load_u16(in, 6) != 0)
    return Status::invalid_argument;
  Url url;
  url.context_id = wire::load_u64(in, 8);
  url.pid = wire::load_u32(in, 16);
  url.provider_hash = wire::load_u32(in, 20);
  url.host_key = wire::load_u64(in, 24);
  url.name.assign(in.begin() + url_header_size, in.end());
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
  (void)wire::encode_driver_local(static_cast<std::uint16_t>(c.type), control_body_size, s);
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

  Impl() {
    for (std::uint16_t t = 0; t < static_cast<std::uint16_t>(ControlType::count); ++t)
      (void)table.register_handler(t, wire::Handler{&on_control, this});
    parser.emplace(core, &table, 0, this);
  }

  static Status on_control(void* self, const wire::Incoming& in,
                           wire::Continuation& rest) noexcept {
    auto* impl = static_cast<Impl*>(self);
    // The whole body is in the head: control_body_size is below the parser's
    // minimum head capacity.
    if (in.body_length != control_body_size || in.head.size() != control_body_size)
      return Status::malformed;
    const std::span<const std::byte> b = in.head;
    if (wire::load_u8(b, 0) != 1) return Status::version_mismatch;
    const std::uint8_t track = wire::load_u8(b, 1);
    if (track > 1 || wire::load_u8(b, 3) != 0 || wire::load_u32(b, 28) != 0)
      return Status::malformed;
    const std::uint8_t flags = wire::load_u8(b, 2);
    if ((flags & ~flag_abandoned) != 0) return Status::malformed;
    Control c;
    c.type = static_cast<ControlType>(in.subtype);
    c.track = static_cast<driver::Track>(track);
    c.flags = flags;
    c.sender_instance = wire::load_u32(b, 4);
    c.sender_context = wire::load_u64(b, 8);
    c.target_context = wire::load_u64(b, 16);
    c.target_instance = wire::load_u32(b, 24);
    c.value = wire::load_u64(b, 32);
    impl->last = c;
    rest.consumed = in.head.size();
    return Status::ok;
  }
};

ControlParser::ControlParser() : impl_(std::make_unique<Impl>()) {}
ControlParser::~ControlParser() = default;

Result<Control> ControlParser::decode(std::span<const std::byte> in) noexcept {
  if (in.size() != control_size) return Status::malformed;
  if (!impl_->parser) return Status::no_memory;
  impl_->last = Status::malformed;
  const Status s = impl_->parser->feed_packet(in);
  if (s != Status::ok) {
    // A stopped parser stays stopped; hostile input must not silence the
    // next peer, so start afresh (allocation on this error path only).
    try {
      impl_->parser.emplace(impl_->core, &impl_->table, 0, impl_.get());
    } catch (...) {
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
