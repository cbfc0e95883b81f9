// shm: the shared segment of one connected pair, and the single-producer
// single-consumer rings of cache-line cells inside it.
//
// Segment (one memfd per connected instance pair, see docs/shm.md):
//   [0, 64)        header: magic, version, ring lines, max packet, stamp key,
//                  segment size (little-endian, checked by the acceptor)
//   [512, 1024)    control of ring 0 (connector -> acceptor)
//   [1024, 1536)   control of ring 1 (acceptor -> connector)
//   [4096, ...)    ring 0 cells, then ring 1 cells
// A ring's control holds four blocks of 128 bytes, so the adjacent-line
// prefetcher does not make them share: consumed (written by the reader),
// reader sleepers and the reader's futex word, writer sleepers and the
// writer's futex word, rdv_accept (the token of the receive open to single
// copy). A sleepers word counts futex sleepers in its low half and sleepers
// on the control socket (receive-any) in its high half (wake.hpp).
//
// A record starts on a 64-byte line: stamp (u64), payload length (u32), kind
// (u8), flags (u8), 2 reserved bytes, then the payload over as many lines as
// it needs. The stamp is (absolute line position + 1) ^ key and is written
// last, so the reader spins on one word of one line and an 8-byte message is
// exactly one line moved between the cores. Records never wrap: a skip record
// fills the tail of the ring. The key is random per segment so stale payload
// from an earlier lap cannot pass for a stamp.
#pragma once

#include "wire/bytes.hpp"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

namespace pier::drivers::shm {

inline constexpr std::size_t line_size = 64;
inline constexpr std::size_t record_header = 16;
inline constexpr std::size_t rings_offset = 4096;
inline constexpr std::size_t ctl_offset[2] = {512, 1024};
inline constexpr std::size_t ctl_consumed = 0;
inline constexpr std::size_t ctl_reader_sleepers = 128;
inline constexpr std::size_t ctl_writer_sleepers = 256;
/// The futex word of each sleepers block: bumped by every wake-up.
inline constexpr std::size_t ctl_futex = 8;
inline constexpr std::uint64_t sleeper_futex = 1;
inline constexpr std::uint64_t sleeper_socket = std::uint64_t{1} << 32;
inline constexpr std::size_t ctl_rdv_accept = 384;
inline constexpr std::uint32_t segment_magic = 0x6d687370;  // "pshm"
inline constexpr std::uint32_t segment_version = 2;
// rdv_accept holds the open receive's token, with these bits as it goes:
// the sender claimed it, then the receiver finished (or failed) its half of
// a split copy.
inline constexpr std::uint64_t rdv_claimed = std::uint64_t{1} << 63;
inline constexpr std::uint64_t rdv_split_ok = std::uint64_t{1} << 62;
inline constexpr std::uint64_t rdv_split_failed = std::uint64_t{1} << 61;

/// Hard bounds on a peer's ring geometry, whatever our own configuration.
inline constexpr std::uint32_t min_ring_lines = 64;
inline constexpr std::uint32_t max_ring_lines = 1u << 24;
/// SHM_RING_SIZE's default (512 KiB of cells per ring and direction).
inline constexpr std::uint32_t default_ring_lines = 8192;
/// The largest ring an acceptor maps for a peer: this many times the larger
/// of its own and the default. The peer chooses the size and the acceptor
/// maps (and populates) the whole segment, so without a bound one peer
/// could make it commit gigabytes per connection.
constexpr std::uint32_t accepted_ring_lines(std::uint32_t own) noexcept {
  const std::uint64_t most =
      std::uint64_t{16} * (own > default_ring_lines ? own : default_ring_lines);
  return most < max_ring_lines ? static_cast<std::uint32_t>(most) : max_ring_lines;
}

enum class Kind : std::uint8_t { packet = 1, frag = 2, skip = 3, rdv_done = 4, rdv_split = 5 };
inline constexpr std::uint8_t flag_last = 1;

/// Lines a record of `len` payload bytes occupies.
constexpr std::uint64_t lines_for(std::uint64_t len) noexcept {
  return (record_header + len + line_size - 1) / line_size;
}
/// Payload bytes that fit in `lines` lines.
constexpr std::size_t payload_in(std::uint64_t lines) noexcept {
  return static_cast<std::size_t>(lines * line_size - record_header);
}

constexpr std::size_t segment_size(std::uint32_t ring_lines) noexcept {
  return rings_offset + 2 * std::size_t{ring_lines} * line_size;
}

struct SegmentHeader {
  std::uint32_t ring_lines = 0;
  std::uint32_t max_packet = 0;
  std::uint64_t key = 0;
  std::uint64_t size = 0;
};

inline void write_header(std::byte* seg, const SegmentHeader& h) noexcept {
  std::span<std::byte> o(seg, 64);
  wire::store_u32(o, 0, segment_magic);
  wire::store_u32(o, 4, segment_version);
  wire::store_u32(o, 8, h.ring_lines);
  wire::store_u32(o, 12, h.max_packet);
  wire::store_u64(o, 16, h.key);
  wire::store_u64(o, 24, h.size);
}

/// The header, or false when it is not a segment of this version.
inline bool read_header(const std::byte* seg, SegmentHeader& h) noexcept {
  std::span<const std::byte> in(seg, 64);
  if (wire::load_u32(in, 0) != segment_magic || wire::load_u32(in, 4) != segment_version)
    return false;
  h.ring_lines = wire::load_u32(in, 8);
  h.max_packet = wire::load_u32(in, 12);
  h.key = wire::load_u64(in, 16);
  h.size = wire::load_u64(in, 24);
  return true;
}

/// A 64-bit word of the shared segment, accessed atomically.
inline std::atomic_ref<std::uint64_t> word(std::byte* at) noexcept {
  return std::atomic_ref<std::uint64_t>(*reinterpret_cast<std::uint64_t*>(at));
}

/// Stores `value` into `slot`, then reads `sleepers`, with the store-load
/// order a Dekker pair needs: a locked exchange (`strong`), or a plain store
/// when this process is registered for the sleeper's heavy_fence()
/// (wake.hpp). Returns the sleepers word.
inline std::uint64_t store_then_check(std::atomic_ref<std::uint64_t> slot, std::uint64_t value,
                                      std::atomic_ref<std::uint64_t> sleepers,
                                      bool strong) noexcept {
  if (strong) {
    slot.exchange(value, std::memory_order_seq_cst);
    return sleepers.load(std::memory_order_seq_cst);
  }
  slot.store(value, std::memory_order_release);
  // Only the compiler must keep the load after the store; the sleeper's
  // membarrier orders the CPU.
  std::atomic_signal_fence(std::memory_order_seq_cst);
  return sleepers.load(std::memory_order_relaxed);
}

/// One direction of a pair, as seen by either end.
struct RingView {
  std::byte* cells = nullptr;
  std::byte* ctl = nullptr;
  std::uint64_t lines = 0;  ///< a power of two
  std::uint64_t key = 0;

  std::byte* line(std::uint64_t pos) const noexcept {
    return cells + (pos & (lines - 1)) * line_size;
  }
  std::atomic_ref<std::uint64_t> ctl_word(std::size_t off) const noexcept {
    return word(ctl + off);
  }
  std::uint32_t* futex_word(std::size_t off) const noexcept {
    return reinterpret_cast<std::uint32_t*>(ctl + off + ctl_futex);
  }
};

/// The producer end. Not thread-safe: one writer per ring.
class RingWriter {
 public:
  void attach(const RingView& v, bool strong) noexcept {
    v_ = v;
    pos_ = 0;
    consumed_ = 0;
    strong_ = strong;
  }

  /// Room for one record of at least `min_len` and at most `max_len` payload
  /// bytes, contiguous; returns the payload pointer and sets `granted`, or
  /// nullptr when the ring is full (or the reader wrote nonsense: corrupt()).
  std::byte* reserve(std::size_t min_len, std::size_t max_len, std::size_t& granted) noexcept {
    const std::uint64_t need = lines_for(min_len);
    std::uint64_t to_end = v_.lines - (pos_ & (v_.lines - 1));
    const std::uint64_t skip = to_end < need ? to_end : 0;
    std::uint64_t avail = v_.lines - (pos_ - consumed_);
    if (avail < skip + lines_for(max_len)) {
      // The reader's position lives on its own line; read it only when the
      // cached one says there is no room, so a flowing ring costs no traffic.
      const std::uint64_t c = v_.ctl_word(ctl_consumed).load(std::memory_order_acquire);
      if (c > pos_ || pos_ - c > v_.lines) {
        corrupt_ = true;
        return nullptr;
      }
      consumed_ = c;
      avail = v_.lines - (pos_ - consumed_);
      if (avail < skip + need) return nullptr;
    }
    if (skip != 0) {
      std::byte* h = v_.line(pos_);
      const auto len = static_cast<std::uint32_t>(payload_in(skip));
      std::memcpy(h + 8, &len, 4);
      h[12] = static_cast<std::byte>(Kind::skip);
      h[13] = std::byte{0};
      word(h).store((pos_ + 1) ^ v_.key, std::memory_order_release);
      pos_ += skip;
      avail -= skip;
      to_end = v_.lines;
    }
    const std::uint64_t lines = std::min({lines_for(max_len), to_end, avail});
    granted = std::min(max_len, payload_in(lines));
    return v_.line(pos_) + record_header;
  }

  /// The payload pointer of the record reserve() prepared.
  std::byte* current() const noexcept { return v_.line(pos_) + record_header; }

  /// Publishes the record at the current position. Returns the reader's
  /// sleepers word: non-zero when it sleeps and must be woken.
  std::uint64_t publish(std::size_t len, Kind kind, std::uint8_t flags) noexcept {
    std::byte* h = v_.line(pos_);
    const auto len32 = static_cast<std::uint32_t>(len);
    std::memcpy(h + 8, &len32, 4);
    h[12] = static_cast<std::byte>(kind);
    h[13] = static_cast<std::byte>(flags);
    h[14] = std::byte{0};
    h[15] = std::byte{0};
    // The stamp releases the payload; the reader raises its sleepers word
    // and then re-reads the stamp, so one of the two always sees the other
    // (no lost wake-up).
    const std::uint64_t sleepers =
        store_then_check(word(h), (pos_ + 1) ^ v_.key, v_.ctl_word(ctl_reader_sleepers), strong_);
    pos_ += lines_for(len);
    return sleepers;
  }

  bool corrupt() const noexcept { return corrupt_; }
  /// The reader position reserve() last read: a sleeping writer compares it
  /// with the live one after raising its flag.
  std::uint64_t consumed_cache() const noexcept { return consumed_; }
  std::atomic_ref<std::uint64_t> ctl_word(std::size_t off) const noexcept {
    return v_.ctl_word(off);
  }
  /// The futex word of the sleepers block at `off`.
  std::uint32_t* futex_word(std::size_t off) const noexcept { return v_.futex_word(off); }
  bool attached() const noexcept { return v_.ctl != nullptr; }

 private:
  RingView v_;
  std::uint64_t pos_ = 0;
  std::uint64_t consumed_ = 0;
  bool corrupt_ = false;
  bool strong_ = true;
};

/// One record as the reader sees it.
struct Record {
  std::byte* payload = nullptr;
  std::uint32_t len = 0;
  Kind kind = Kind::packet;
  std::uint8_t flags = 0;
  std::uint64_t lines = 0;
};

/// The consumer end. Not thread-safe: one reader per ring.
class RingReader {
 public:
  void attach(const RingView& v, bool strong) noexcept {
    v_ = v;
    head_ = 0;
    strong_ = strong;
  }

  /// 1 with `r` filled when a record is there, 0 when none, -1 when the
  /// writer published a record that cannot be (the peer is then broken).
  int peek(Record& r) const noexcept { return peek_at(head_, r); }
  std::uint64_t lines() const noexcept { return v_.lines; }

  /// As peek(), for the record that starts `pos` lines into the stream.
  int peek_at(std::uint64_t pos, Record& r) const noexcept {
    std::byte* h = v_.line(pos);
    if (word(h).load(std::memory_order_acquire) != ((pos + 1) ^ v_.key)) return 0;
    std::uint32_t len = 0;
    std::memcpy(&len, h + 8, 4);
    const auto kind = static_cast<std::uint8_t>(h[12]);
    r.lines = lines_for(len);
    if (r.lines > v_.lines - (pos & (v_.lines - 1))) return -1;
    if (kind < static_cast<std::uint8_t>(Kind::packet) ||
        kind > static_cast<std::uint8_t>(Kind::rdv_split))
      return -1;
    // A writer skips only to wrap: to the ring's end, exactly. A stream of
    // short skips would keep a reader consuming for as long as the peer
    // writes them.
    if (kind == static_cast<std::uint8_t>(Kind::skip) &&
        r.lines != v_.lines - (pos & (v_.lines - 1)))
      return -1;
    r.payload = h + record_header;
    r.len = len;
    r.kind = static_cast<Kind>(kind);
    r.flags = static_cast<std::uint8_t>(h[13]);
    return 1;
  }

  /// Hands `lines` lines back to the writer. Returns the writer's sleepers
  /// word: non-zero when it sleeps waiting for room and must be woken.
  std::uint64_t consume(std::uint64_t lines) noexcept {
    head_ += lines;
    // Releases our reads of the cells; the mirror of RingWriter::publish.
    return store_then_check(v_.ctl_word(ctl_consumed), head_, v_.ctl_word(ctl_writer_sleepers),
                            strong_);
  }

  std::atomic_ref<std::uint64_t> ctl_word(std::size_t off) const noexcept {
    return v_.ctl_word(off);
  }
  std::uint32_t* futex_word(std::size_t off) const noexcept { return v_.futex_word(off); }
  bool attached() const noexcept { return v_.ctl != nullptr; }
  std::uint64_t head() const noexcept { return head_; }

 private:
  RingView v_;
  std::uint64_t head_ = 0;
  bool strong_ = true;
};

}  // namespace pier::drivers::shm
