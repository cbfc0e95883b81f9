// pier tcp: the bytes the tcp driver puts on the wire, and its url. Every
// field is fixed-width little endian at a fixed offset; decoders trust no
// length and answer malformed rather than assert. The driver's own packets
// (hello, keep-alive) are seed-003 driver-local packets of src/wire, carried
// in a local frame and dispatched by subtype through a wire::HandlerTable
// (local.hpp).
#pragma once

#include <pier/driver.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

namespace pier::drivers::tcp {

/// Frame header, in front of every packet on a connection:
///   [0] u8 type   (frame_data: a core packet, opaque to the driver;
///                  frame_local: a wire driver-local packet of the driver's own)
///   [1] 7 bytes reserved, zero
///   [8] u64 payload length
inline constexpr std::size_t frame_header_size = 16;
inline constexpr std::uint8_t frame_data = 0x01;
inline constexpr std::uint8_t frame_local = 0x7f;

/// Driver-local packet subtypes (seed 003), indexes of the handler table.
enum class LocalType : std::uint16_t { hello = 0, keepalive = 1, count = 2 };

struct FrameHeader {
  std::uint8_t type = frame_data;
  std::uint64_t length = 0;
};

void encode_frame_header(std::span<std::byte, frame_header_size> out,
                         const FrameHeader& h) noexcept;
/// malformed for an unknown type or a non-zero reserved byte.
Result<FrameHeader> decode_frame_header(std::span<const std::byte> in) noexcept;

/// Url of a context, 32 bytes:
///   [0] u8 version (2)  [1] u8 family (4 or 6)  [2] u16 port
///   [4] u32 small limit: the context's small-track receive buffer, bytes
///   [8] u64 context id (random per context)
///   [16] 16 bytes address (IPv4 in the first 4, the rest zero)
/// The small limit travels so that a peer configured with a larger
/// PIER_TCP_RECV_BUFFER refuses, at its send, a packet we could not take
/// (it broke the connection as malformed at our end before).
inline constexpr std::size_t url_size = 32;
inline constexpr std::uint8_t url_version = 2;
/// The smallest small-track receive buffer a url may name (the key's minimum).
inline constexpr std::uint32_t min_small_limit = 4096;
using UrlBytes = std::array<std::byte, url_size>;

struct Url {
  std::uint8_t family = 4;  ///< 4 or 6
  std::uint16_t port = 0;
  std::uint32_t small_limit = min_small_limit;
  std::uint64_t context_id = 0;
  std::array<std::byte, 16> address{};
};

UrlBytes encode_url(const Url& url) noexcept;
Result<Url> decode_url(std::span<const std::byte> in) noexcept;

/// Hello, the body of the driver-local packet a connector sends first:
/// who is connecting, for which track, and which context it meant.
///   [0] u8 version (1)  [1] u8 track  [2] u8 flags (1: call back)
///   [3] 5 bytes reserved
///   [8] u64 context id of the target (a stale url is refused)
///   [16] 32 bytes the connector's url
inline constexpr std::size_t hello_size = 48;
/// Bytes of a wire driver-local packet before its body (wire FrameHeader
/// and DriverLocalHeader); checked against src/wire in codec.cpp.
inline constexpr std::size_t local_prefix = 32;
inline constexpr std::size_t hello_frame_size = frame_header_size + local_prefix + hello_size;
inline constexpr std::size_t keepalive_frame_size = frame_header_size + local_prefix;
/// The longest local frame payload any subtype has.
inline constexpr std::size_t max_local_payload = local_prefix + hello_size;

struct Hello {
  driver::Track track = driver::Track::small;
  std::uint64_t target_id = 0;
  UrlBytes connector_url{};
  /// Not a connection: the sender waits to accept one and asks the target
  /// to open its instance and connect (Hints::on_demand).
  bool call_back = false;
};

std::array<std::byte, hello_frame_size> encode_hello_frame(const Hello& h) noexcept;
std::array<std::byte, keepalive_frame_size> encode_keepalive_frame() noexcept;
/// Decodes a hello body.
Result<Hello> decode_hello(std::span<const std::byte> in) noexcept;

}  // namespace pier::drivers::tcp
