// pier driver helpers: packet walking and copies.
#include "driver/packet.hpp"

#include <algorithm>
#include <cstring>

namespace pier::driver {

std::size_t Packet::size() const noexcept {
  switch (form) {
    case Form::none:
      return 0;
    case Form::buffer:
      return buf_len;
    case Form::iovec: {
      if (iov == nullptr) return 0;
      std::size_t total = 0;
      for (std::uint32_t i = 0; i < iov_count; ++i) total += iov[i].iov_len;
      return total;
    }
    case Form::data:
      return chunk_len;
  }
  return 0;
}

namespace {

struct ClipState {
  PieceVisitor visit;
  void* ctx;
  std::size_t visited;
};

void visit_counting(void* raw, std::byte* ptr, std::size_t len) {
  auto* state = static_cast<ClipState*>(raw);
  if (len == 0) return;
  state->visit(state->ctx, ptr, len);
  state->visited += len;
}

}  // namespace

std::size_t for_each_piece(const Packet& pkt, std::size_t offset, std::size_t len,
                           PieceVisitor visit, void* ctx) noexcept {
  const std::size_t total = pkt.size();
  if (offset >= total || len == 0) return 0;
  len = std::min(len, total - offset);
  switch (pkt.form) {
    case Packet::Form::none:
      return 0;
    case Packet::Form::buffer:
      visit(ctx, pkt.buf + offset, len);
      return len;
    case Packet::Form::iovec: {
      std::size_t done = 0;
      std::size_t skip = offset;
      for (std::uint32_t i = 0; i < pkt.iov_count && done < len; ++i) {
        const std::size_t entry_len = pkt.iov[i].iov_len;
        if (skip >= entry_len) {
          skip -= entry_len;
          continue;
        }
        const std::size_t take = std::min(entry_len - skip, len - done);
        visit(ctx, static_cast<std::byte*>(pkt.iov[i].iov_base) + skip, take);
        done += take;
        skip = 0;
      }
      return done;
    }
    case Packet::Form::data: {
      ClipState state{visit, ctx, 0};
      pkt.data->traverse(pkt.chunk_offset + offset, len, &visit_counting, &state);
      return state.visited;
    }
  }
  return 0;
}

namespace {

struct Cursor {
  std::byte* at;
};

void copy_out_piece(void* raw, std::byte* ptr, std::size_t len) {
  auto* cursor = static_cast<Cursor*>(raw);
  std::memcpy(cursor->at, ptr, len);
  cursor->at += len;
}

void copy_in_piece(void* raw, std::byte* ptr, std::size_t len) {
  auto* cursor = static_cast<Cursor*>(raw);
  std::memcpy(ptr, cursor->at, len);
  cursor->at += len;
}

struct PacketCursor {
  Packet* dst;
  std::size_t offset;
};

void copy_piece_to_packet(void* raw, std::byte* ptr, std::size_t len) {
  auto* cursor = static_cast<PacketCursor*>(raw);
  cursor->offset += copy_to_packet(*cursor->dst, cursor->offset, {ptr, len});
}

}  // namespace

std::size_t copy_from_packet(const Packet& pkt, std::size_t offset,
                             std::span<std::byte> dst) noexcept {
  Cursor cursor{dst.data()};
  return for_each_piece(pkt, offset, dst.size(), &copy_out_piece, &cursor);
}

std::size_t copy_to_packet(Packet& pkt, std::size_t offset,
                           std::span<const std::byte> src) noexcept {
  // The visitor writes through the pointers it is given; src is only read.
  Cursor cursor{const_cast<std::byte*>(src.data())};
  return for_each_piece(pkt, offset, src.size(), &copy_in_piece, &cursor);
}

CopyResult copy_packet(const Packet& src, Packet& dst) noexcept {
  const std::size_t src_len = src.size();
  const std::size_t dst_len = dst.size();
  PacketCursor cursor{&dst, 0};
  for_each_piece(src, 0, std::min(src_len, dst_len), &copy_piece_to_packet, &cursor);
  return {cursor.offset, src_len > dst_len};
}

CopyResult copy_into_packet(std::span<const std::byte> src, Packet& dst) noexcept {
  const std::size_t copied = copy_to_packet(dst, 0, src);
  return {copied, src.size() > copied};
}

Status validate_post(const Packet& pkt, std::uint32_t max_iov, bool data_ok) noexcept {
  switch (pkt.form) {
    case Packet::Form::iovec:
      if (pkt.iov == nullptr || pkt.iov_count > max_iov) return Status::invalid_argument;
      for (std::uint32_t i = 0; i < pkt.iov_count; ++i) {
        if (pkt.iov[i].iov_base == nullptr && pkt.iov[i].iov_len != 0)
          return Status::invalid_argument;
      }
      return Status::ok;
    case Packet::Form::data: {
      if (!data_ok || pkt.data == nullptr) return Status::invalid_argument;
      const std::size_t total = pkt.data->size();
      if (pkt.chunk_offset > total || pkt.chunk_len > total - pkt.chunk_offset)
        return Status::invalid_argument;
      return Status::ok;
    }
    case Packet::Form::none:
    case Packet::Form::buffer:
      return Status::invalid_argument;
  }
  return Status::invalid_argument;
}

}  // namespace pier::driver
