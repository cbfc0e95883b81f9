// pier tcp: a packet's bytes as iovec pieces, whatever its form, so that
// send and receive hand the kernel the caller's memory directly (no copy).
#pragma once

#include <pier/driver.hpp>

#include <cstddef>
#include <cstdint>

namespace pier::drivers::tcp {

/// Total bytes the packet describes (iovec sum or chunk_len); 0 for a form
/// the tcp driver does not take.
std::size_t packet_bytes(const driver::Packet& pkt) noexcept;

/// Fills at most `max_out` entries of `out` with the pieces covering bytes
/// [offset, offset + max_bytes) of the packet (fewer when the packet ends or
/// the entries run out). Returns the number of entries; `*bytes` gets the
/// bytes they cover.
std::uint32_t gather(const driver::Packet& pkt, std::size_t offset, std::size_t max_bytes,
                     ::iovec* out, std::uint32_t max_out, std::size_t* bytes) noexcept;

/// Copies `len` bytes of `src` into the packet at `offset` (the receive side
/// of bytes already read into the driver's buffer). `len` must fit.
void copy_into(const driver::Packet& pkt, std::size_t offset, const std::byte* src,
               std::size_t len) noexcept;

}  // namespace pier::drivers::tcp
