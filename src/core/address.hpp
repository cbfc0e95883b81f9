// pier core: a process's address (what the bootstrap spreads: node, pid,
// credits, and one url per driver context), and the choice of rails for a
// peer from CORE_DRIVERS and reachability.
//
// The address is bootstrap data, never core traffic; it is decoded with the
// same care as wire input (a bad one is rejected, never trusted).
#pragma once

#include <pier/result.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace pier::core {

struct UrlEntry {
  std::string spec;        ///< driver spec, "tcp" or "fault:self"
  std::uint8_t index = 0;  ///< several contexts of one driver (multi-rail)
  std::vector<std::byte> url;
  /// Largest small packet this process accepts on that driver: its eager
  /// limit (core.hpp eager_limit_for) plus the core's headers.
  std::uint32_t recv_capacity = 0;
  bool operator==(const UrlEntry&) const = default;
};

struct LocalAddress {
  std::string node;
  std::uint32_t pid = 0;
  std::uint32_t credits = 0;        ///< receive slots per priority we grant
  std::uint32_t recv_capacity = 0;  ///< largest small packet we accept on any driver
  std::vector<UrlEntry> urls;
  bool operator==(const LocalAddress&) const = default;
};
using PeerAddress = LocalAddress;

std::vector<std::byte> encode_address(const LocalAddress& a);
/// malformed for anything that does not parse exactly.
Result<LocalAddress> decode_address(std::span<const std::byte> bytes);

/// "self,shm,tcp+tcp" -> {{self}, {shm}, {tcp, tcp}}: choices in order of
/// preference, each a list of rails. invalid_argument for empty parts.
Result<std::vector<std::vector<std::string>>> parse_drivers(std::string_view text);

/// The driver under any fault: wrappers ("fault:fault:shm" -> "shm").
std::string_view base_driver(std::string_view spec) noexcept;

/// Whether a driver can reach the peer: self only inside one process, shm
/// only on one node, the others anywhere.
bool reachable(std::string_view spec, const LocalAddress& local, const PeerAddress& peer) noexcept;

/// The rails for one peer: the first choice whose every rail is reachable
/// and has a url on both sides. Each entry names (spec, index). not_found
/// when no choice fits.
Result<std::vector<std::pair<std::string, std::uint8_t>>> choose_rails(
    const std::vector<std::vector<std::string>>& choices, const LocalAddress& local,
    const PeerAddress& peer);

}  // namespace pier::core
