// shm: the bytes this driver exchanges outside the rings, as fixed-width
// little-endian fields at fixed offsets with a version byte and reserved
// bytes checked to be zero. Decoders trust no length and answer a Status.
//
//   url    (56 B) magic "pshm", version, 3 reserved, boot id (16), pid (u32),
//                 max packet (u32: the context's PIER_SHM_MAX_PACKET, so a
//                 peer sends us no larger packet), nonce (u64), probe
//                 address (u64), probe value (u64). The listening socket is the abstract name
//                 "pier-shm-<pid>-<nonce>"; the probe word lets a peer test
//                 single copy into this process without asking it.
// Messages on the control socket are seed-003 driver-local packets: the
// src/wire frame and DriverLocalHeader (32 B, encode_driver_local()) with a
// subtype below, then the body. One message per SOCK_SEQPACKET record.
//   hello  (80 B) connector -> acceptor, with the segment's memfd attached:
//                 magic "psHL", version, track, 2 reserved, the connector's
//                 url (56), ring lines (u32), max packet (u32), segment size
//                 (u64).
//   reply  (8 B)  acceptor -> connector: magic "psRP", version, answer
//                 (0 accepted, 1 in use, 2 rejected), 2 reserved.
//   wake   (0 B)  either way: "look at the rings again" (see docs/shm.md).
//   rdv    (40 B) in Packet::rdv_data: kind (1 = single copy), flags (bit 0:
//                 the receiver can read the sender: split copies), 2 reserved,
//                 iovec count (u32), token (u64), address (u64: the buffer
//                 when count is 1, else the receiver's iovec array),
//                 capacity (u64), receiver pid (u32), reserved (u32).
//   done   (24 B) ring record payload after a single copy: token, bytes
//                 written, bytes the sender had.
//   split  (32 B) ring record payload: token, offset, length, sender address:
//                 "read these bytes of mine into your buffer at offset".
#pragma once

#include <pier/driver.hpp>
#include <pier/result.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace pier::drivers::shm {

inline constexpr std::uint8_t codec_version = 2;  // 2: the url names its max packet

/// Driver-local subtypes on the control socket.
enum class LocalType : std::uint16_t { hello = 1, reply = 2, wake = 3 };
/// Frame plus wrapper before every control body.
inline constexpr std::size_t control_prefix = 32;

/// A control message split into its subtype and body.
struct Control {
  LocalType type = LocalType::wake;
  std::span<const std::byte> body;
};
/// Checks the frame and wrapper; malformed for anything else.
Result<Control> decode_control(std::span<const std::byte> msg) noexcept;

struct Url {
  static constexpr std::size_t size = 56;
  std::array<std::byte, 16> boot_id{};
  std::uint32_t pid = 0;
  std::uint32_t max_packet = 0;  ///< the largest small packet this context takes; not 0
  std::uint64_t nonce = 0;
  std::uint64_t probe_addr = 0;
  std::uint64_t probe_value = 0;
};
std::vector<std::byte> encode_url(const Url& url);
/// malformed for bytes that are not an shm url, version_mismatch for another
/// version.
Result<Url> decode_url(std::span<const std::byte> bytes) noexcept;
/// The abstract socket name (without its leading NUL) a url listens on.
std::string socket_name(std::uint32_t pid, std::uint64_t nonce);

struct Hello {
  static constexpr std::size_t size = 80;
  driver::Track track = driver::Track::small;
  std::array<std::byte, Url::size> url{};
  std::uint32_t ring_lines = 0;
  std::uint32_t max_packet = 0;
  std::uint64_t segment_size = 0;
  /// No connection and no segment: the sender waits to accept one and asks
  /// the target to open its instance and connect (Hints::on_demand).
  bool call_back = false;
};
std::array<std::byte, control_prefix + Hello::size> encode_hello(const Hello& h) noexcept;
Result<Hello> decode_hello(std::span<const std::byte> bytes) noexcept;

enum class Answer : std::uint8_t { accepted = 0, in_use = 1, rejected = 2 };
struct Reply {
  static constexpr std::size_t size = 8;
  Answer answer = Answer::accepted;
};
std::array<std::byte, control_prefix + Reply::size> encode_reply(const Reply& r) noexcept;
Result<Reply> decode_reply(std::span<const std::byte> bytes) noexcept;

std::array<std::byte, control_prefix> encode_wake() noexcept;

struct Rdv {
  static constexpr std::size_t size = 40;
  static constexpr std::uint8_t kind_cma = 1;
  static constexpr std::uint8_t flag_can_pull = 1;
  bool can_pull = false;  ///< the receiver may read the sender's memory
  std::uint32_t iov_count = 0;
  std::uint64_t token = 0;
  std::uint64_t addr = 0;
  std::uint64_t capacity = 0;
  std::uint32_t pid = 0;
};
static_assert(Rdv::size <= driver::Packet::rdv_capacity);
void encode_rdv(const Rdv& r, driver::Packet& pkt) noexcept;
Result<Rdv> decode_rdv(const driver::Packet& pkt) noexcept;

struct Done {
  static constexpr std::size_t size = 24;
  std::uint64_t token = 0;
  std::uint64_t written = 0;
  std::uint64_t total = 0;
};
void encode_done(const Done& d, std::span<std::byte> out) noexcept;
Result<Done> decode_done(std::span<const std::byte> bytes) noexcept;

struct Split {
  static constexpr std::size_t size = 32;
  std::uint64_t token = 0;
  std::uint64_t offset = 0;
  std::uint64_t len = 0;
  std::uint64_t addr = 0;
};
void encode_split(const Split& s, std::span<std::byte> out) noexcept;
Result<Split> decode_split(std::span<const std::byte> bytes) noexcept;

}  // namespace pier::drivers::shm
