// pier ofi: the bytes the ofi driver exchanges besides packets: its url, its
// control messages (seed-003 driver-local packets of src/wire), the tags it
// puts on tagged messages and the rendezvous data of a large-track receive.
// Every field is fixed-width little endian at a fixed offset; decoders trust
// no length and answer malformed or invalid_argument, never assert.
#pragma once

#include <pier/driver.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace pier::drivers::ofi {

// --- url ----------------------------------------------------------------
/// Url of a context (version 2):
///   [0] "POFI"  [4] u8 version (2)  [5] u8 name length (1..max_name)
///   [6] u16 reserved, zero
///   [8] u64 context id (random per context: a stale url is refused)
///   [16] u32 pid  [20] u32 provider hash (FNV-1a of the provider name)
///   [24] u64 host key (boot id and pid namespace: same key, same pid space)
///   [32] u32 max packet: the largest small-track packet the context takes
///        (its PIER_OFI_MAX_PACKET, min_max_packet..max_max_packet)
///   [36] u32 reserved, zero
///   [40] the libfabric endpoint name (fi_getname), name length bytes
/// The limit travels because each process sizes its small-track receives
/// by its own: a peer configured with a larger one sent packets we could
/// not take (truncated over tcp;ofi_rxm, a spin inside libfabric 1.17's
/// shm). Version 1 had no limit and is refused.
inline constexpr std::size_t url_header_size = 40;
inline constexpr std::size_t max_name = 200;
inline constexpr std::uint8_t url_version = 2;
inline constexpr std::size_t max_url_size = url_header_size + max_name;
/// The bounds of PIER_OFI_MAX_PACKET, and of the limit a url may name.
inline constexpr std::uint32_t min_max_packet = 64;
inline constexpr std::uint32_t max_max_packet = std::uint32_t{64} << 20;
inline constexpr std::uint32_t default_max_packet = 65536;

struct Url {
  std::uint64_t context_id = 0;
  std::uint32_t pid = 0;
  std::uint32_t provider_hash = 0;
  std::uint64_t host_key = 0;
  std::uint32_t max_packet = default_max_packet;  ///< the largest small packet it takes
  std::vector<std::byte> name;                    ///< set-up only: urls are decoded at connect
};

/// invalid_argument when the name is empty or longer than max_name, or the
/// max packet is out of its bounds.
Result<std::vector<std::byte>> encode_url(const Url& url);
/// invalid_argument for anything that is not an ofi url.
Result<Url> decode_url(std::span<const std::byte> in);

/// A url's header fields, its name left in place: a hello's url is checked
/// on receipt, from a peer we may not trust, without allocating.
struct UrlView {
  std::uint64_t context_id = 0;
  std::uint32_t pid = 0;
  std::uint32_t provider_hash = 0;
  std::uint64_t host_key = 0;
  std::uint32_t max_packet = 0;
  std::span<const std::byte> name;
};
/// The same checks as decode_url(); the view points into `in`.
Result<UrlView> peek_url(std::span<const std::byte> in) noexcept;

/// The /dev/shm file of a libfabric shm endpoint named
/// "fi_shm://<pid>:<n>:<n>" and owned by process `pid` ("<pid>:<n>:<n>"),
/// for removing it once that process has exited; empty for any other name
/// (another provider, another pid, anything else in it).
std::string shm_region_of(std::span<const std::byte> name, std::uint32_t pid);

std::uint32_t fnv1a(std::span<const std::byte> bytes) noexcept;

// --- tags ---------------------------------------------------------------
/// A tag is kind << 56 | target instance id. The top four bits stay zero
/// (some providers reserve them). Kind data and kind rdv_done differ only in
/// bit 57, which a posted receive ignores: one receive takes either the
/// packet itself or the notice that it was written by RMA.
enum class TagKind : std::uint64_t { data = 1, control = 2, rdv_done = 3 };
inline constexpr std::uint64_t tag_of(TagKind kind, std::uint32_t target) noexcept {
  return static_cast<std::uint64_t>(kind) << 56 | target;
}
inline constexpr std::uint64_t data_ignore = std::uint64_t{2} << 56;
inline constexpr std::uint64_t control_ignore = 0xffffffffULL;
inline constexpr TagKind kind_of(std::uint64_t tag) noexcept {
  return static_cast<TagKind>((tag >> 56) & 0xf);
}

// --- control messages ---------------------------------------------------
/// Driver-local subtypes (seed 003).
enum class ControlType : std::uint16_t { hello = 0, bye = 1, credit = 2, keepalive = 3, count = 4 };

/// Body of every control message, 40 bytes:
///   [0] u8 version (1)  [1] u8 track  [2] u8 flags  [3] u8 reserved
///   [4] u32 sender instance id
///   [8] u64 sender context id
///   [16] u64 target context id
///   [24] u32 target instance id (0 in a hello: not known yet)  [28] u32 reserved
///   [32] u64 value (bye: packets sent; credit: packets consumed)
/// A hello goes on with the sender's url (its Context::init()), so that a
/// peer with no instance for it yet can report it (Context::incoming()).
inline constexpr std::size_t control_body_size = 40;
/// bye: the instance was destroyed without disconnect(), not closed in order.
inline constexpr std::uint8_t flag_abandoned = 0x01;
/// hello: sent by the urls' acceptor while no hello of its peer came: a
/// peer with no instance for it reports it, each time (Hints::on_demand).
inline constexpr std::uint8_t flag_call_back = 0x02;
/// bye: answers a hello that no instance took (PIER_OFI_PARK_MS, or too
/// many waiting): the connecting instance fails.
inline constexpr std::uint8_t flag_refused = 0x04;

struct Control {
  ControlType type = ControlType::hello;
  driver::Track track = driver::Track::small;
  std::uint8_t flags = 0;
  std::uint32_t sender_instance = 0;
  std::uint64_t sender_context = 0;
  std::uint64_t target_context = 0;
  std::uint32_t target_instance = 0;
  std::uint64_t value = 0;
  /// hello: the sender's url, or empty. Decoded, it points into the
  /// parser, until its next decode().
  std::span<const std::byte> url;
};

/// wire driver-local prefix plus the body.
inline constexpr std::size_t control_size = 32 + control_body_size;
/// The largest control message: a hello with the longest url.
inline constexpr std::size_t control_max_size = control_size + max_url_size;
using ControlBytes = std::array<std::byte, control_size>;

/// The prefix and the body. A hello's length counts its url, which is not
/// copied: the caller sends c.url right after these bytes.
ControlBytes encode_control(const Control& c) noexcept;
/// Decodes control messages through src/wire's packet registry: a
/// HandlerTable with one handler per ControlType. Built at set-up (the parser
/// allocates its staging buffer there); decode() allocates nothing unless a
/// hostile message stopped the parser, which is then rebuilt.
class ControlParser {
 public:
  ControlParser();
  ~ControlParser();
  ControlParser(const ControlParser&) = delete;
  ControlParser& operator=(const ControlParser&) = delete;
  /// malformed (or version_mismatch) for anything but one whole control
  /// message of a known subtype (a hello's url included: peek_url()).
  Result<Control> decode(std::span<const std::byte> in) noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// --- rendezvous data ----------------------------------------------------
/// What a large-track recv_post() puts in Packet::rdv_data, 32 bytes:
///   [0] "PORV"  [4] u32 cookie (names the posted receive)
///   [8] u64 remote address  [16] u64 key  [24] u64 length
inline constexpr std::size_t rdv_size = 32;
struct Rdv {
  std::uint32_t cookie = 0;
  std::uint64_t address = 0;
  std::uint64_t key = 0;
  std::uint64_t length = 0;
};
void encode_rdv(const Rdv& r, driver::Packet& pkt) noexcept;
/// invalid_argument for rdv data that is not ours.
Result<Rdv> decode_rdv(const driver::Packet& pkt) noexcept;

/// Remote CQ data of an rdv_done notice: the sender's packet size (low 48
/// bits, so truncation is known) and the cookie's low 16 bits.
inline constexpr std::uint64_t rdv_done_data(std::uint64_t size, std::uint32_t cookie) noexcept {
  return (size & 0xffffffffffffULL) | static_cast<std::uint64_t>(cookie & 0xffff) << 48;
}
inline constexpr std::uint64_t rdv_done_size(std::uint64_t data) noexcept {
  return data & 0xffffffffffffULL;
}
inline constexpr std::uint32_t rdv_done_cookie(std::uint64_t data) noexcept {
  return static_cast<std::uint32_t>(data >> 48);
}

}  // namespace pier::drivers::ofi
