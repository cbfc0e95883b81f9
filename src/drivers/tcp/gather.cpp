#include "drivers/tcp/gather.hpp"

#include <cstring>

namespace pier::drivers::tcp {
namespace {

struct Collector {
  ::iovec* out;
  std::uint32_t max_out;
  std::uint32_t count = 0;
  std::size_t bytes = 0;
};

void collect(void* ctx, std::byte* ptr, std::size_t len) {
  auto* c = static_cast<Collector*>(ctx);
  if (c->count == c->max_out || len == 0) return;
  // Pieces after the first gap are dropped, so what is returned is always a
  // contiguous prefix of the requested range.
  c->out[c->count++] = ::iovec{ptr, len};
  c->bytes += len;
}

}  // namespace

std::size_t packet_bytes(const driver::Packet& pkt) noexcept {
  switch (pkt.form) {
    case driver::Packet::Form::iovec: {
      std::size_t total = 0;
      for (std::uint32_t i = 0; i < pkt.iov_count; ++i) total += pkt.iov[i].iov_len;
      return total;
    }
    case driver::Packet::Form::data:
      return pkt.chunk_len;
    case driver::Packet::Form::buffer:
    case driver::Packet::Form::none:
      break;
  }
  return 0;
}

std::uint32_t gather(const driver::Packet& pkt, std::size_t offset, std::size_t max_bytes,
                     ::iovec* out, std::uint32_t max_out, std::size_t* bytes) noexcept {
  *bytes = 0;
  if (max_bytes == 0 || max_out == 0) return 0;
  if (pkt.form == driver::Packet::Form::iovec) {
    std::uint32_t n = 0;
    std::size_t got = 0;
    for (std::uint32_t i = 0; i < pkt.iov_count && n < max_out && got < max_bytes; ++i) {
      std::size_t len = pkt.iov[i].iov_len;
      if (offset >= len) {
        offset -= len;
        continue;
      }
      std::byte* base = static_cast<std::byte*>(pkt.iov[i].iov_base) + offset;
      len -= offset;
      offset = 0;
      if (len > max_bytes - got) len = max_bytes - got;
      out[n++] = ::iovec{base, len};
      got += len;
    }
    *bytes = got;
    return n;
  }
  if (pkt.form == driver::Packet::Form::data && pkt.data != nullptr && offset < pkt.chunk_len) {
    std::size_t len = pkt.chunk_len - offset;
    if (len > max_bytes) len = max_bytes;
    Collector c{out, max_out};
    pkt.data->traverse(pkt.chunk_offset + offset, len, &collect, &c);
    // A layout may hand back more than asked in its last piece; clip it.
    if (c.bytes > len) {
      std::size_t excess = c.bytes - len;
      while (excess > 0 && c.count > 0) {
        ::iovec& last = out[c.count - 1];
        if (last.iov_len > excess) {
          last.iov_len -= excess;
          excess = 0;
        } else {
          excess -= last.iov_len;
          --c.count;
        }
      }
      c.bytes = len;
    }
    *bytes = c.bytes;
    return c.count;
  }
  return 0;
}

void copy_into(const driver::Packet& pkt, std::size_t offset, const std::byte* src,
               std::size_t len) noexcept {
  ::iovec pieces[16];
  while (len > 0) {
    std::size_t covered = 0;
    const std::uint32_t n = gather(pkt, offset, len, pieces, 16, &covered);
    if (n == 0) return;
    for (std::uint32_t i = 0; i < n; ++i) {
      std::memcpy(pieces[i].iov_base, src, pieces[i].iov_len);
      src += pieces[i].iov_len;
    }
    offset += covered;
    len -= covered;
  }
}

}  // namespace pier::drivers::tcp
