// pier::lib: the Portals objects the LIB keeps (NIs, portal table entries,
// list entries, MDs, EQs, CTs, unexpected headers, message states) and the
// handle tables that name them. Everything here is reached only with the
// core's critical section held (nal::Lib::dispatch and the core callbacks).
#pragma once

#include <portals4.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/core.hpp"

namespace pier::lib {

/// Object kinds as encoded in the top 4 bits of a handle. The values keep
/// PTL_EQ_NONE (0x3fffffff) and PTL_CT_NONE (0x5fffffff) out of reach: their
/// generation field is all ones, which no live object ever has.
enum class Kind : std::uint8_t { ni = 1, le = 3, me = 4, md = 5, eq = 6, ct = 7 };

/// Handle layout: [kind:4][ni:2][generation:10][index:16].
inline constexpr std::uint32_t max_table_capacity = 0xffff;
inline constexpr std::uint32_t generation_limit = 0x3ff;  // exclusive

constexpr std::uint32_t make_handle(Kind k, std::uint32_t ni, std::uint32_t gen,
                                    std::uint32_t index) noexcept {
  return (static_cast<std::uint32_t>(k) << 28) | ((ni & 3u) << 26) | ((gen & 0x3ffu) << 16) |
         (index & 0xffffu);
}
constexpr Kind kind_of(std::uint32_t h) noexcept {
  return static_cast<Kind>(h >> 28);
}
constexpr std::uint32_t ni_of(std::uint32_t h) noexcept {
  return (h >> 26) & 3u;
}
constexpr std::uint32_t gen_of(std::uint32_t h) noexcept {
  return (h >> 16) & 0x3ffu;
}
constexpr std::uint32_t index_of(std::uint32_t h) noexcept {
  return h & 0xffffu;
}

/// Where the generations of the tables of one (kind, NI index) go on: a
/// table created for the next life of that NI (after PtlNIFini, or PtlFini
/// and PtlInit) starts past every generation the last one handed out, so
/// no handle of a finalized NI names an object of the new one. Process-wide,
/// reached under init_mu or the core's critical section.
std::uint32_t& next_generation(Kind kind, std::uint32_t ni) noexcept;

/// A fixed-capacity table of T (sized when its NI is created) whose handles
/// carry a generation, so a stale or forged handle resolves to nothing.
/// Free slots are reused oldest first: a freed handle comes back only after
/// the generation of its slot went round, which takes about 1022 reuses of
/// every slot of the table, not of one.
template <class T>
class Table {
 public:
  Table(Kind kind, std::uint32_t ni, std::uint32_t capacity)
      : kind_(kind), ni_(ni), slots_(capacity), free_(capacity), free_count_(capacity) {
    const std::uint32_t first = next_generation(kind, ni);
    highest_ = first;
    for (std::uint32_t i = 0; i < capacity; ++i) {
      free_[i] = i;
      slots_[i].gen = first;
    }
  }
  ~Table() {
    std::uint32_t& next = next_generation(kind_, ni_);
    next = highest_ + 1 >= generation_limit ? 1 : highest_ + 1;
  }
  Table(const Table&) = delete;
  Table& operator=(const Table&) = delete;
  /// A fresh T, or nullptr when the table is full.
  T* acquire() noexcept {
    if (free_count_ == 0) return nullptr;
    std::uint32_t i = free_[free_head_];
    free_head_ = (free_head_ + 1) % free_.size();
    --free_count_;
    Slot& s = slots_[i];
    s.obj = T{};
    s.live = true;
    s.obj.handle = make_handle(kind_, ni_, s.gen, i);
    ++live_;
    return &s.obj;
  }
  T* lookup(std::uint32_t h) noexcept {
    if (kind_of(h) != kind_ || ni_of(h) != ni_) return nullptr;
    std::uint32_t i = index_of(h);
    if (i >= slots_.size()) return nullptr;
    Slot& s = slots_[i];
    if (!s.live || s.gen != gen_of(h)) return nullptr;
    return &s.obj;
  }
  void release(T* t) noexcept {
    std::uint32_t i = index_of(t->handle);
    Slot& s = slots_[i];
    s.live = false;
    s.obj = T{};
    s.gen = s.gen + 1 >= generation_limit ? 1 : s.gen + 1;
    // The next life starts past this (once a slot went round, nothing is
    // past everything: the wrap is the limit of a 10-bit generation).
    if (s.gen > highest_) highest_ = s.gen;
    free_[(free_head_ + free_count_) % free_.size()] = i;
    ++free_count_;
    --live_;
  }
  std::size_t live() const noexcept { return live_; }
  /// Calls f on every live object.
  template <class F>
  void for_each(F f) {
    for (auto& s : slots_)
      if (s.live) f(s.obj);
  }

 private:
  struct Slot {
    T obj{};
    std::uint32_t gen = 1;
    bool live = false;
  };
  Kind kind_;
  std::uint32_t ni_;
  std::vector<Slot> slots_;
  std::vector<std::uint32_t> free_;  ///< a ring of free indexes, oldest at free_head_
  std::size_t free_head_ = 0;
  std::size_t free_count_ = 0;
  std::uint32_t highest_ = 1;  ///< the largest generation a slot reached
  std::size_t live_ = 0;
};

/// A tiny intrusive doubly-linked list; T has `T* prev` and `T* next`.
template <class T>
struct List {
  T* head = nullptr;
  T* tail = nullptr;
  std::size_t size = 0;
  void push_back(T* t) noexcept {
    t->prev = tail;
    t->next = nullptr;
    if (tail)
      tail->next = t;
    else
      head = t;
    tail = t;
    ++size;
  }
  void remove(T* t) noexcept {
    if (t->prev)
      t->prev->next = t->next;
    else
      head = t->next;
    if (t->next)
      t->next->prev = t->prev;
    else
      tail = t->prev;
    t->prev = t->next = nullptr;
    --size;
  }
  bool empty() const noexcept { return head == nullptr; }
};

struct Ni;
struct Pt;
struct Trig;

/// A memory region as the LIB sees it: validated segments (one, or one per
/// iovec element) that behave as one contiguous range (R-O7).
struct Buffer {
  std::vector<core::Region> segments;
  std::vector<std::size_t> starts;  ///< offset of each segment in the range
  std::size_t length = 0;
  /// Offsets below `first` are outside the buffer: 1 for a buffer over all
  /// of memory (start NULL, length PTL_SIZE_MAX), whose offsets are
  /// addresses and whose region starts at address 1, since the core
  /// translates no null base.
  std::size_t first = 0;
  bool iovec = false;
  bool all_memory() const noexcept { return first != 0; }
  /// True when [offset, offset + n) lies inside the buffer.
  bool holds(std::size_t offset, std::size_t n) const noexcept {
    return offset >= first && offset <= length && n <= length - offset;
  }
  /// The segment holding `offset`; segments.size() when outside.
  std::size_t segment_at(std::size_t offset) const noexcept {
    // Inline for the one segment of every buffer but an iovec's. (starts
    // has one entry per segment.)
    if (offset >= length || offset < first) return starts.size();
    return starts.size() == 1 ? 0 : segment_search(offset);
  }
  /// segment_at() of an offset inside a buffer of several segments.
  std::size_t segment_search(std::size_t offset) const noexcept;
  /// True when [offset, offset + n) spans more than one segment.
  bool crosses(std::size_t offset, std::size_t n) const noexcept;
  /// Address of byte `offset` (for event start), nullptr past the end.
  void* address(std::size_t offset) const noexcept {
    if (starts.size() == 1 && offset >= first && offset < length)
      return segments.front().base + (offset - starts.front());
    return address_slow(offset);
  }
  void* address_slow(std::size_t offset) const noexcept;
  /// Copies [offset, offset + n) out to `out` / in from `in`, across
  /// elements; the range must be held.
  void copy_out(std::size_t offset, std::size_t n, std::byte* out) const noexcept;
  void copy_in(std::size_t offset, std::size_t n, const std::byte* in) const noexcept;
};

struct Eq {
  std::uint32_t handle = 0;
  Ni* ni = nullptr;
  std::vector<ptl_event_t> ring;
  std::size_t head = 0, count = 0;
  std::size_t requested = 1;  ///< the user's count; slots past it hold PT_DISABLED
  /// Events matched messages of flow-controlled indexes will post: flow
  /// control counts them as taken (a burst matches before any is posted).
  std::size_t owed = 0;
  std::size_t disabled_in = 0;  ///< PT_DISABLED events in the ring (they use the extra slots)
  bool dropped = false;
};

struct Ct {
  std::uint32_t handle = 0;
  Ni* ni = nullptr;
  ptl_ct_event_t value{0, 0};
  List<Trig> triggered;
  bool mirror_owed = false;  ///< in Lib::mirror_owed_, published after a fire
};

struct Md {
  std::uint32_t handle = 0;
  Ni* ni = nullptr;
  ptl_md_t desc{};
  Eq* eq = nullptr;
  Ct* ct = nullptr;
  Buffer buffer;
  std::uint32_t pending = 0;  ///< operations in flight from this MD
};

/// An LE or ME (an LE is an ME whose matching fields are ignored).
struct Entry {
  std::uint32_t handle = 0;
  Ni* ni = nullptr;
  Pt* pt = nullptr;
  Entry* prev = nullptr;
  Entry* next = nullptr;
  bool is_me = false;
  bool linked = false;
  ptl_list_t list = PTL_PRIORITY_LIST;
  unsigned options = 0;
  Buffer buffer;
  Ct* ct = nullptr;
  ptl_uid_t uid = PTL_UID_ANY;
  ptl_process_t match_id{};
  ptl_match_bits_t match_bits = 0, ignore_bits = 0;
  ptl_size_t min_free = 0;
  ptl_size_t local_offset = 0;
  void* user_ptr = nullptr;
  std::uint32_t pending = 0;  ///< messages in flight into this entry
  std::uint32_t uh_refs = 0;  ///< unexpected headers whose data sits here
  /// Headers this (appended) entry took whose data is still landing; its
  /// LINK waits for their overflow events (R-U3).
  std::uint32_t claims = 0;
  bool link_owed = false;
  bool auto_unlinked = false;  ///< waiting for uh_refs to drain (AUTO_FREE)
  /// Unlinked by a triggered PtlMEUnlink while messages still landed in it:
  /// freed when they are done, with no AUTO_UNLINK or AUTO_FREE event.
  bool quiet_unlink = false;
  /// Left its list when a message matched (use-once, min_free): AUTO_UNLINK
  /// waits for every message still landing in it (R-E4).
  bool unlink_owed = false;
};

/// A header kept on a PT's unexpected list (R-U1).
struct Unexpected {
  Unexpected* prev = nullptr;
  Unexpected* next = nullptr;
  Entry* entry = nullptr;                 ///< the overflow entry holding the data
  ptl_event_kind_t kind = PTL_EVENT_PUT;  ///< the comm kind it was
  ptl_process_t initiator{};
  ptl_uid_t uid = 0;
  ptl_match_bits_t match_bits = 0;
  ptl_hdr_data_t hdr_data = 0;
  ptl_size_t rlength = 0, mlength = 0, remote_offset = 0, offset_used = 0;
  ptl_op_t atomic_op = 0;
  ptl_datatype_t atomic_type = 0;
  bool complete = false;  ///< its data has landed
  /// Taken by an append or search-delete while its data was still landing
  /// (it left the list then, in arrival order): the overflow event is
  /// posted, and counted, when the data has landed.
  bool claimed = false;
  bool claim_event = false;     ///< the overflow event is wanted
  bool claim_counts = false;    ///< counted on claim_ct
  bool claim_ct_bytes = false;  ///< ... in bytes
  std::uint32_t claim_ct = 0;   ///< looked up again then: it may be gone
  void* claim_user_ptr = nullptr;
  Entry* claim_entry = nullptr;  ///< the appended entry, pending until then
  /// A persistent counting search that took it: the search's end (a
  /// failure, R-C9) is counted when its last such header has landed.
  std::uint64_t search_id = 0;
};

struct Pt {
  bool allocated = false;
  bool enabled = false;
  unsigned options = 0;
  Eq* eq = nullptr;
  List<Entry> priority, overflow;
  List<Unexpected> unexpected;
  List<Unexpected> claimed;  ///< taken while their data lands (finish_claim)
  std::uint32_t inflight = 0;
  /// A flow-control disable's PT_DISABLED waits for the messages already
  /// matched to post their events first (R-F3).
  bool disabled_owed = false;
};

/// Status registers and limits of one NI.
struct Ni {
  std::uint32_t handle = 0;
  std::uint32_t index = 0;  ///< 0..3: matching x addressing
  std::uint32_t refs = 0;
  unsigned options = 0;
  bool matching = true, logical = true;
  ptl_ni_limits_t limits{};
  std::array<ptl_sr_value_t, PTL_SR_LAST> status{};
  std::vector<Pt> pts;
  ptl_pt_index_t last_pt = PTL_PT_ANY;  ///< for PTL_PT_ANY's next-free rule
  std::unique_ptr<Table<Md>> mds;
  std::unique_ptr<Table<Eq>> eqs;
  std::unique_ptr<Table<Ct>> cts;
  std::unique_ptr<Table<Entry>> entries;  ///< MEs on a matching NI, LEs otherwise
  std::vector<Unexpected> unexpected_store;
  List<Unexpected> unexpected_free;
  std::uint32_t bundles = 0;
  std::uint32_t inflight = 0;   ///< messages touching this NI
  std::uint32_t triggered = 0;  ///< pending triggered operations
  bool dying = false;           ///< finalized, waiting for inflight to drain
};

}  // namespace pier::lib
