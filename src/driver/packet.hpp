// pier driver helpers: walking and copying a Packet's bytes, whatever its
// form (driver buffer, iovec, data iterator), with truncation.
//
// All functions here are noexcept, allocate nothing and may run on the data
// path. They trust the packet's description (validate_send()/validate_recv()
// check it once at post time).
#pragma once

#include <pier/driver.hpp>

#include <cstddef>
#include <span>

namespace pier::driver {

/// One contiguous piece of a packet, as visited by for_each_piece().
using PieceVisitor = void (*)(void* ctx, std::byte* ptr, std::size_t len);

/// Visits the contiguous pieces covering bytes [offset, offset + len) of the
/// packet, in order, clipped to the packet's size. Returns the bytes visited.
std::size_t for_each_piece(const Packet& pkt, std::size_t offset, std::size_t len,
                           PieceVisitor visit, void* ctx) noexcept;

/// Copies bytes [offset, offset + dst.size()) of the packet into dst; returns
/// the bytes copied (fewer when the packet ends first).
std::size_t copy_from_packet(const Packet& pkt, std::size_t offset,
                             std::span<std::byte> dst) noexcept;

/// Copies src into the packet starting at `offset`; returns the bytes copied
/// (fewer when the packet is shorter).
std::size_t copy_to_packet(Packet& pkt, std::size_t offset,
                           std::span<const std::byte> src) noexcept;

/// Result of a packet-to-packet copy.
struct CopyResult {
  std::size_t copied = 0;  ///< bytes written into the destination
  bool truncated = false;  ///< the source was longer than the destination
};

/// Copies the whole source packet into the destination packet; when the
/// destination is shorter it is filled and the rest is dropped (truncated).
CopyResult copy_packet(const Packet& src, Packet& dst) noexcept;
/// As copy_packet(), from contiguous memory.
CopyResult copy_into_packet(std::span<const std::byte> src, Packet& dst) noexcept;

/// Checks the description of a packet handed to send_post(): form iovec (non
/// null array, at most max_iov entries, no null base with a non-zero length)
/// or, when data_ok, form data (non-null iterator, chunk inside it).
/// Returns ok or invalid_argument.
Status validate_post(const Packet& pkt, std::uint32_t max_iov, bool data_ok) noexcept;

}  // namespace pier::driver
