// pier::lib: the Portals 4 LIB of seed 000. It holds every Portals object of
// one process, answers the API side's forwarded calls in dispatch(), and is
// the core's Client for wire::Upper::portals: lib_parse matches arriving
// requests and answers, lib_finalize completes them (events, counters,
// acks, replies). Runs only with the core's critical section held.
//
// The forwarded call: op (Op) with a Call block in, a Reply block out. The
// blocks are plain data; pointers in them (maps, poll arrays, operands) are
// read only during the call, which both NALs built today (direct, progress
// thread) run inside the caller's process.
#pragma once

#include <portals4.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "base/pool.hpp"
#include "core/core.hpp"
#include "lib/msg.hpp"
#include "lib/objects.hpp"
#include "nal/nal.hpp"
#include "wire/portals.hpp"

namespace pier::lib {

enum class Op : std::uint32_t {
  ni_init = 1,
  ni_fini,
  ni_status,
  ni_handle,
  set_map,
  get_map,
  pt_alloc,
  pt_free,
  pt_disable,
  pt_enable,
  pt_busy,
  get_uid,
  get_id,
  get_phys_id,
  md_bind,
  md_release,
  append,
  unlink,
  search,
  ct_alloc,
  ct_free,
  ct_cancel,
  ct_get,
  ct_set,
  ct_inc,
  ct_poll,
  eq_alloc,
  eq_free,
  eq_poll,
  move,
  trig_ct,
  trig_append,
  trig_unlink,
  bundle_start,
  bundle_end,
  pending,  ///< Reply::size = the core's sends and receives still under way
  /// A move that is not triggered, carried alone: the argument block is a
  /// Move and the return block an int (the PTL_* code), not a Call and a
  /// Reply. PtlPut and its kin use it: building, checking and reading
  /// those large blocks cost a small put a tenth of its LIB path.
  start_move,
};

struct Call {
  std::uint32_t handle = PTL_INVALID_HANDLE;  ///< the NI or object the op is on
  std::uint32_t handle2 = PTL_INVALID_HANDLE;
  unsigned options = 0;
  ptl_interface_t iface = 0;
  ptl_pid_t pid = 0;
  bool has_limits = false;
  // The large C structs below are left unset by default: each is read only
  // by the op whose entry point fills it (limits when has_limits), and
  // zeroing the whole block on every call cost more than a small put's LIB
  // path (rep stos of 450 + 250 bytes per call).
  ptl_ni_limits_t limits;
  ptl_pt_index_t pt_index = 0;
  ptl_size_t size = 0;
  const void* ptr = nullptr;   ///< map in, handle arrays
  const void* ptr2 = nullptr;  ///< CT poll tests
  void* out = nullptr;         ///< map out
  ptl_md_t md;                 ///< md_bind
  ptl_me_t me;                 ///< append, search; an LE is carried in the first five fields
  bool is_me = false;
  ptl_list_t list = 0;
  ptl_search_op_t search_op = 0;
  void* user_ptr = nullptr;
  ptl_ct_event_t ct{0, 0};
  Move move;
  bool triggered = false;
  ptl_handle_ct_t trig_ct = PTL_INVALID_HANDLE;
  ptl_size_t threshold = 0;
  ptl_me_t* trig_me = nullptr;  ///< PtlTriggeredMEAppend
  ptl_handle_me_t* trig_me_out = nullptr;
};

struct Reply {
  int rc = PTL_FAIL;
  std::uint32_t handle = PTL_INVALID_HANDLE;
  ptl_ni_limits_t limits;  ///< set with rc == PTL_OK by ni_init (see Call)
  ptl_process_t id{};
  ptl_uid_t uid = 0;
  ptl_pt_index_t pt_index = 0;
  ptl_sr_value_t sr = 0;
  ptl_ct_event_t ct{0, 0};
  ptl_event_t event;  ///< set with rc == PTL_OK or PTL_EQ_DROPPED by eq_poll
  unsigned which = 0;
  ptl_size_t size = 0;
  bool busy = false;
};

/// Wakes API-side waiters when an event or counter changes (and on abort).
class Notifier {
 public:
  std::uint64_t epoch() const noexcept { return epoch_.load(std::memory_order_acquire); }
  /// Inline, the rare wake apart: every event and count bumps.
  void bump() noexcept {
    epoch_.fetch_add(1, std::memory_order_acq_rel);
    if (sleepers_.load(std::memory_order_acquire) > 0) wake_sleepers();
  }
  /// Sleeps until the epoch differs from `seen` or `max_ns` pass.
  void wait(std::uint64_t seen, std::int64_t max_ns) noexcept;

 private:
  void wake_sleepers() noexcept;

  std::atomic<std::uint64_t> epoch_{0};
  std::atomic<int> sleepers_{0};
  std::mutex mu_;
  std::condition_variable cv_;
};

/// A counting event's value in API-side memory, written by the LIB on every
/// change (seed 000's write into the application's space), so PtlCTGet and
/// the CT waits read it without a forwarded call. One per (NI, CT index):
/// `handle` names the CT shown (0: none), `seq` is odd while the LIB
/// writes. Plain integers reached through atomic_ref, so the table can live
/// in untouched anonymous memory until a CT of that index is used.
struct CtMirror {
  std::uint32_t handle;
  std::uint32_t seq;
  std::uint64_t success;
  std::uint64_t failure;
};
/// Mirrors per NI: one per possible CT index.
inline constexpr std::size_t ct_mirrors_per_ni = std::size_t{max_table_capacity} + 1;
/// Where the mirror of CT handle `h` lives in the table.
constexpr std::size_t ct_mirror_slot(std::uint32_t h) noexcept {
  return ni_of(h) * ct_mirrors_per_ni + index_of(h);
}

/// Writes `value` for `handle` (0 clears). Only the LIB writes, one thread
/// at a time (the critical section). Inline, as read_ct(): every counted
/// message writes, and every CT wait reads.
inline void publish_ct(CtMirror& m, std::uint32_t handle, const ptl_ct_event_t& value) noexcept {
  // A seqlock without fences (ThreadSanitizer has none): the odd sequence
  // is stored before the fields, whose release stores keep it first; a
  // reader that sees any new field therefore sees the sequence moved on.
  std::atomic_ref<std::uint32_t> seq(m.seq);
  const std::uint32_t s = seq.load(std::memory_order_relaxed);
  seq.store(s + 1, std::memory_order_relaxed);
  std::atomic_ref<std::uint32_t>(m.handle).store(handle, std::memory_order_release);
  std::atomic_ref<std::uint64_t>(m.success).store(value.success, std::memory_order_release);
  std::atomic_ref<std::uint64_t>(m.failure).store(value.failure, std::memory_order_release);
  seq.store(s + 2, std::memory_order_release);
}
/// The value `m` shows for `handle`; false when it shows another CT (or
/// none): the caller asks the LIB, which tells a stale handle.
inline bool read_ct(const CtMirror& m, std::uint32_t handle, ptl_ct_event_t& value) noexcept {
  auto& w = const_cast<CtMirror&>(m);  // atomic_ref needs a non-const object; loads only
  std::atomic_ref<std::uint32_t> seq(w.seq);
  // Caught mid-write, the caller asks the LIB instead of spinning here: the
  // writer may be a thread preempted on this very core. The fields' acquire
  // loads keep the second read of the sequence after them.
  const std::uint32_t before = seq.load(std::memory_order_acquire);
  if (before & 1u) return false;
  const std::uint32_t shown =
      std::atomic_ref<std::uint32_t>(w.handle).load(std::memory_order_acquire);
  value.success = std::atomic_ref<std::uint64_t>(w.success).load(std::memory_order_acquire);
  value.failure = std::atomic_ref<std::uint64_t>(w.failure).load(std::memory_order_acquire);
  return seq.load(std::memory_order_relaxed) == before && shown == handle;
}

/// The largest atomic (max_atomic_size, max_fetch_atomic_size).
inline constexpr std::size_t max_atomic_bytes = 512;
/// Bytes per message for atomics and small staged copies: an operand, the
/// data and the fetched values, each up to the atomic size limit.
inline constexpr std::size_t bounce_slot = 1088;
static_assert(bounce_slot >= 32 + 2 * max_atomic_bytes);
/// iovec ranges that cross elements up to this length go through the
/// message's bounce slot; longer ones through the staging pool.
inline constexpr std::size_t bounce_stage_max = bounce_slot / 2;
/// The staging pool's unit: runs of whole blocks are handed out.
inline constexpr std::size_t stage_block = std::size_t{64} * 1024;

class Lib final : public core::Client, public nal::Lib {
 public:
  /// Attaches to `core` as the portals client; sizes the message pool.
  static Result<std::unique_ptr<Lib>> create(core::Core& core);
  ~Lib() override;

  Status dispatch(std::uint32_t op, std::span<const std::byte> args,
                  std::span<std::byte> ret) noexcept override;
  void lib_parse(const core::Arrival& arrival) noexcept override;
  void lib_finalize(void* cookie, Status status) noexcept override;
  /// The core has room again: queued answers go, then parked requests.
  void send_room() noexcept override;
  /// lib_finalize's work for one message (the initiator's or the target's).
  void finalize(void* cookie, Status status) noexcept;
  /// Ends the operations whose ack or reply `peer` can no longer send.
  void peer_failed(core::Rank peer) noexcept override;

  Notifier& notifier() noexcept { return notifier_; }
  /// API-side memory for CT values: 4 x ct_mirrors_per_ni, zeroed, alive
  /// until the LIB goes. Set before the first call, or never (no mirrors).
  void set_ct_mirrors(CtMirror* table) noexcept { ct_mirrors_ = table; }
  /// Messages in flight (tests check that nothing leaks).
  std::size_t messages_live() const noexcept { return msgs_.outstanding(); }

  Reply call(Op op, const Call& c) noexcept;
  /// The same into `r`, which the caller default-constructed: each op
  /// writes only the fields it answers.
  void call(Op op, const Call& c, Reply& r) noexcept;

 private:
  explicit Lib(core::Core& core);

  // lib.cpp: NIs, maps, PTs, identity, bundles
  int ni_init(const Call& c, Reply& r) noexcept;
  int ni_fini(const Call& c, Reply& r) noexcept;
  int ni_status(const Call& c, Reply& r) noexcept;
  int ni_handle(const Call& c, Reply& r) noexcept;
  int set_map(const Call& c, Reply& r) noexcept;
  int get_map(const Call& c, Reply& r) noexcept;
  int pt_alloc(const Call& c, Reply& r) noexcept;
  int pt_free(const Call& c, Reply& r) noexcept;
  int pt_disable(const Call& c, Reply& r) noexcept;
  int pt_enable(const Call& c, Reply& r) noexcept;
  int pt_busy(const Call& c, Reply& r) noexcept;
  int get_id(const Call& c, Reply& r, bool physical) noexcept;
  int bundle(const Call& c, Reply& r, bool start) noexcept;
  void destroy_ni(Ni& ni) noexcept;
  // objects.cpp: MD, EQ, CT
  int md_bind(const Call& c, Reply& r) noexcept;
  int md_release(const Call& c, Reply& r) noexcept;
  int eq_alloc(const Call& c, Reply& r) noexcept;
  int eq_free(const Call& c, Reply& r) noexcept;
  int eq_poll(const Call& c, Reply& r) noexcept;
  int ct_alloc(const Call& c, Reply& r) noexcept;
  int ct_free(const Call& c, Reply& r) noexcept;
  int ct_cancel(const Call& c, Reply& r) noexcept;
  int ct_get(const Call& c, Reply& r) noexcept;
  int ct_set(const Call& c, Reply& r) noexcept;
  int ct_inc(const Call& c, Reply& r) noexcept;
  int ct_poll(const Call& c, Reply& r) noexcept;
  int make_buffer(Ni& ni, void* start, ptl_size_t length, bool iovec, Buffer& out) noexcept;
  void drop_buffer(Buffer& b) noexcept;
  /// The one path events take into an EQ (objects.cpp).
  void post(Eq* eq, const ptl_event_t& ev) noexcept;
  /// A counting event: +1 or +bytes on success, +1 failure (objects.cpp).
  /// Inline: every counted message takes it.
  void count(Ct* ct, bool ok, ptl_size_t bytes, bool in_bytes) noexcept {
    if (!ct) return;
    if (ok)
      ct->value.success += in_bytes ? bytes : 1;
    else
      ct->value.failure += 1;
    ct_changed(ct);
  }
  /// `n` successes of `bytes` together, one change for the triggers.
  void count_successes(Ct* ct, std::uint64_t n, ptl_size_t bytes, bool in_bytes) noexcept;
  /// Wakes waiters and releases triggered operations (triggered.cpp).
  void ct_changed(Ct* ct) noexcept;
  // list.cpp: appends, unlink, search, unexpected headers
  int append(const Call& c, Reply& r) noexcept;
  int unlink(const Call& c, Reply& r) noexcept;
  int search(const Call& c, Reply& r) noexcept;
  int append_entry(Ni& ni, ptl_pt_index_t pt, const ptl_me_t& me, bool is_me, ptl_list_t list,
                   void* user_ptr, std::uint32_t* handle) noexcept;
  int check_entry(Ni& ni, ptl_pt_index_t pt, const ptl_me_t& me, bool is_me) noexcept;
  void free_entry(Entry* e) noexcept;
  void entry_auto_unlink(Entry* e, bool post_event) noexcept;
  void maybe_auto_free(Entry* e) noexcept;
  /// `by` matched `u`: its overflow (or search) event. `keep` is the
  /// appended entry (null for a search's probe): when u's data is still
  /// landing, it stays pending until then.
  /// Counting is the caller's, after its loop over the list (a count can
  /// fire triggered operations that change the list): of the headers that
  /// were complete when taken; finish_claim counts the others.
  void consume_unexpected(Ni& ni, Pt& pt, Unexpected* u, Entry* by, Entry* keep, void* user_ptr,
                          bool as_search, std::uint64_t search_id) noexcept;
  /// The data of a claimed header has landed (or failed): its deferred
  /// overflow event and count; the header is free again.
  void finish_claim(Ni& ni, Pt& pt, Unexpected* u, ptl_ni_fail_t fail) noexcept;
  /// AUTO_UNLINK of an entry that left its list, once nothing lands in it.
  void auto_unlink_when_idle(Entry* e) noexcept;
  // target.cpp: arriving requests
  /// False when no message state is free for the request (or older
  /// requests wait for one, unless `from_park`): the caller parks it.
  bool parse_request(const core::Arrival& a, const wire::PortalsHeader& h,
                     bool from_park = false) noexcept;
  /// A put that lands now in one piece into `e`, which it leaves linked,
  /// with nothing to wait behind: copied, counted, posted and acknowledged
  /// here, without a message state. False (nothing done) when its range
  /// crosses the entry's iovec elements.
  bool put_now(const core::Arrival& a, const wire::PortalsHeader& h, Ni& ni, Pt& pt, Entry& e,
               const ptl_process_t& initiator) noexcept;
  /// Keeps a request that found no message state, in arrival order; false
  /// when the ring is full.
  bool park(const core::Arrival& a, const wire::PortalsHeader& h) noexcept;
  /// Parses parked requests, oldest first, while message states are free.
  /// Runs only where parsing is safe (after a parse or finalize, after an
  /// API call); release_msg() only marks it due.
  void retry_parked() noexcept;
  /// Inline, and the writes made at completion kept apart (below): a put
  /// that landed in place, the common case, paid for their stack frame.
  void finish_target(Msg* m, Status status) noexcept {
    if (status != Status::ok) return complete_target(m, PTL_NI_UNDELIVERABLE);
    // A reply that left, or a put that landed in place (neither held nor
    // crossing elements): nothing to write, and the entry's range needs no
    // second look.
    if (m->phase == Phase::target_send ||
        (m->op == wire::PortalsOp::put && (m->length == 0 || (!m->held_put && !m->cross))))
      return complete_target(m, PTL_NI_OK);
    finish_late_write(m);
  }
  /// finish_target() of a held or staged put, or of an atomic: the data is
  /// written (or the operation applied) now, then the message completes.
  [[gnu::noinline]] void finish_late_write(Msg* m) noexcept;
  /// Answers a request with a failure (cleaning its data off the wire);
  /// true, for parse_request's "handled".
  bool refuse(const core::Arrival& a, const wire::PortalsHeader& h, wire::NiFail fail) noexcept;
  /// Which of the four NIs a request is for.
  static std::uint32_t ni_index(const wire::PortalsHeader& h) noexcept {
    return (h.matching == wire::Matching::non_matching ? 1u : 0u) |
           (h.addressing == wire::Addressing::physical ? 2u : 0u);
  }
  /// Whether entry `e` takes a message (R-M*). Inline: the match walk.
  bool matches(const Entry& e, ptl_match_bits_t bits, ptl_process_t initiator, ptl_size_t rlength,
               ptl_size_t remote_offset) const noexcept {
    if (!e.is_me) return true;  // R-M4: an LE takes every message
    if (((bits ^ e.match_bits) & ~e.ignore_bits) != 0) return false;
    if (e.ni->logical) {
      if (e.match_id.rank != PTL_RANK_ANY && e.match_id.rank != initiator.rank) return false;
    } else {
      if (e.match_id.phys.nid != PTL_NID_ANY && e.match_id.phys.nid != initiator.phys.nid)
        return false;
      if (e.match_id.phys.pid != PTL_PID_ANY && e.match_id.phys.pid != initiator.phys.pid)
        return false;
    }
    if (e.options & PTL_ME_NO_TRUNCATE) {
      ptl_size_t offset = (e.options & PTL_ME_MANAGE_LOCAL) ? e.local_offset : remote_offset;
      if (!e.buffer.holds(offset, rlength)) return false;
    }
    return true;
  }
  void complete_target(Msg* m, ptl_ni_fail_t fail) noexcept;
  void deliver_answer(Msg* m) noexcept;
  Status send_header(core::Rank peer, const wire::PortalsHeader& h, void* cookie,
                     const core::Region* region, std::size_t offset, std::size_t length,
                     bool copy_now_only = false) noexcept;
  /// send_header, but when the core has no room now the packet waits in
  /// deferred_ (in order) and leaves from a later parse or finalize.
  /// Inline: every request and answer leaves through it, and it is a
  /// call to send_header on almost all of them.
  Status send_answer(core::Rank peer, const wire::PortalsHeader& h, void* cookie,
                     const core::Region* region, std::size_t offset, std::size_t length) noexcept {
    if (deferred_count_ == 0) {
      const Status s = send_header(peer, h, cookie, region, offset, length);
      if (s != Status::no_resource) return s;
    }
    return defer_answer(peer, h, cookie, region, offset, length);
  }
  /// Queues the packet in deferred_; no_resource when the queue is full.
  Status defer_answer(core::Rank peer, const wire::PortalsHeader& h, void* cookie,
                      const core::Region* region, std::size_t offset, std::size_t length) noexcept;
  /// Sends the answers waiting in deferred_ while the core takes them.
  void flush_deferred() noexcept {
    if (deferred_count_ > 0) flush_deferred_now();  // inline: empty on almost every call
  }
  void flush_deferred_now() noexcept;
  std::byte* bounce(const Msg* m) noexcept { return bounce_.data() + m->bounce * bounce_slot; }
  std::size_t bounce_offset(const Msg* m) const noexcept { return m->bounce * bounce_slot; }
  /// Takes a staging run of at least `bytes` for `m` from the initiator's
  /// or the target's half of the pool; false when none is free now.
  bool stage_acquire(Msg* m, std::size_t bytes, bool target) noexcept;
  void stage_release(Msg* m) noexcept;
  /// The longest run either half can hand out.
  std::size_t staging_capacity() const noexcept { return stage_blocks_ / 2 * stage_block; }
  /// Gives freed target staging to the parked messages, oldest first.
  void stage_retry() noexcept;
  /// Starts stalled triggered moves, oldest first, while states allow.
  void stalled_retry() noexcept {
    if (stalled_count_ > 0) stalled_retry_now();  // inline: none stalled on almost every call
  }
  void stalled_retry_now() noexcept;
  /// Moves a parked target message's data now that it has its run.
  void resume_staged(Msg* m) noexcept;
  /// Where a crossing range of `m` is staged: its staging run if it has
  /// one, else its bounce slot.
  std::byte* staged(const Msg* m) noexcept {
    return m->stage_count ? staging_.get() + std::size_t{m->stage} * stage_block : bounce(m);
  }
  const core::Region* staged_region(const Msg* m) const noexcept {
    return m->stage_count ? &staging_region_ : &bounce_region_;
  }
  std::size_t staged_offset(const Msg* m) const noexcept {
    return m->stage_count ? std::size_t{m->stage} * stage_block : bounce_offset(m);
  }
  void disable_for_flow(Ni& ni, ptl_pt_index_t index, Entry* cause) noexcept;
  /// PT_DISABLED of index `index` (R-F3), now.
  void post_pt_disabled(Pt& pt, ptl_pt_index_t index) noexcept;
  // initiator.cpp
  int move(const Call& c, Reply& r) noexcept;
  /// What check_move() found for a move it passed: launch() takes it
  /// rather than looking the handles and the target up again.
  struct Checked {
    Ni* ni = nullptr;
    Md* md = nullptr;      ///< the put MD (the get MD of a get)
    Md* get_md = nullptr;  ///< fetch_atomic, swap
    core::Rank peer = 0;
  };
  int check_move(const Move& mv, Checked& out) noexcept;
  /// Inline: PtlPut and its kin reach it from dispatch().
  int start_move(const Move& mv) noexcept {
    Checked k;
    if (int rc = check_move(mv, k); rc != PTL_OK) return rc;
    return launch(mv, k);
  }
  /// start_move() of a move check_move() just passed (`k`).
  int launch(const Move& mv, const Checked& k) noexcept;
  /// A put without an ack, sent only if the core copies it out at once:
  /// then it is complete (its SEND event and count come now) and needs no
  /// message state. False when nothing was sent.
  bool put_copied(const Move& mv, const Checked& k, const wire::PortalsHeader& h) noexcept;
  void parse_answer(const core::Arrival& a, const wire::PortalsHeader& h) noexcept;
  void finish_initiator(Msg* m) noexcept;
  void release_msg(Msg* m) noexcept;
  /// release_msg() of a message holding a staging run: kept apart, as is
  /// release_last(), so that the common release needs no stack frame.
  [[gnu::noinline]] void release_staged(Msg* m, Ni* ni) noexcept;
  /// The end of release_msg() when it released the last message of a
  /// finalized NI.
  [[gnu::noinline]] void release_last(Ni* ni) noexcept;
  /// Inline: every message's release asks it, and almost none is awaiting.
  void stop_awaiting(Msg* m) noexcept {
    if (!m->awaiting) return;
    awaiting_.remove(m);
    m->awaiting = false;
  }
  /// A message state, or null when none is left for this side (initiators
  /// may not take the last quarter of the pool).
  Msg* new_msg(bool for_target) noexcept;
  /// The core rank of process `target` as `ni` names it; false when no
  /// process has that id. Inline: every request asks it at both ends.
  bool rank_of(const Ni& ni, ptl_process_t target, core::Rank& out) const noexcept {
    ptl_process_t phys = target;
    if (ni.logical) {
      if (target.rank >= map_.size()) return false;
      phys = map_[target.rank];
    }
    // nid_of_rank_ has one entry per rank of the core.
    if (phys.phys.pid >= nid_of_rank_.size() || nid_of_rank_[phys.phys.pid] != phys.phys.nid)
      return false;
    out = static_cast<core::Rank>(phys.phys.pid);
    return true;
  }
  ptl_process_t my_id(const Ni& ni) const noexcept {
    ptl_process_t p{};
    if (ni.logical) {
      p.rank = my_rank_;
    } else {
      p.phys.nid = nid_;
      p.phys.pid = pid_;
    }
    return p;
  }
  ptl_process_t initiator_of(const Ni& ni, const wire::PortalsHeader& h) const noexcept {
    ptl_process_t p{};
    if (ni.logical) {
      p.rank = h.initiator_nid;
    } else {
      p.phys.nid = h.initiator_nid;
      p.phys.pid = h.initiator_pid;
    }
    return p;
  }
  // triggered.cpp
  int trig_ct(const Call& c, Reply& r) noexcept;
  int trig_append(const Call& c, Reply& r) noexcept;
  int trig_unlink(const Call& c, Reply& r) noexcept;
  int add_trigger(Ct* ct, ptl_size_t threshold, const Trig& t) noexcept;
  void fire(Trig* t) noexcept;
  void drop_triggers(Ct* ct) noexcept;

  Ni* find_ni(std::uint32_t handle) noexcept;
  Ni* owner_ni(std::uint32_t handle) noexcept;

  core::Core& core_;
  Notifier notifier_;
  std::uint64_t last_search_id_ = 0;  ///< numbers counting searches (Unexpected::search_id)
  CtMirror* ct_mirrors_ = nullptr;
  /// Writes `ct`'s value (or, with `clear`, nothing) where the API reads it.
  void mirror(const Ct& ct, bool clear = false) noexcept {
    if (ct_mirrors_ == nullptr) return;
    // A finalized NI's CTs are gone for the API, even while its last
    // messages still count on them.
    if (ct.ni == nullptr || ct.ni->refs == 0) clear = true;
    CtMirror& m = ct_mirrors_[ct_mirror_slot(ct.handle)];
    publish_ct(m, clear ? 0 : ct.handle, clear ? ptl_ct_event_t{0, 0} : ct.value);
  }
  std::array<Ni, 4> nis_{};
  std::array<std::uint32_t, 4> ni_gen_{1, 1, 1, 1};
  std::vector<ptl_process_t> map_;  ///< logical rank -> physical id
  bool map_set_ = false;
  ptl_rank_t my_rank_ = 0;  ///< index of this process in map_
  std::vector<ptl_nid_t> nid_of_rank_;
  base::Pool<Msg> msgs_;
  base::Pool<Trig> trigs_;
  std::vector<std::byte> bounce_;  ///< one slot per message (atomics)
  core::Region bounce_region_{};
  /// A stack of the free slots, bounce_free_count_ of them: sized once,
  /// since every slot is either here or held by one message state.
  std::vector<std::uint32_t> bounce_free_;
  std::size_t bounce_free_count_ = 0;
  /// The staging pool (LIB_STAGING_KIB, allocated and validated once):
  /// crossing iovec ranges longer than a bounce slot's half are gathered
  /// here before they leave and land here before they are scattered.
  std::unique_ptr<std::byte[]> staging_;
  core::Region staging_region_{};
  std::size_t stage_blocks_ = 0;
  std::vector<std::uint64_t> stage_used_;  ///< one bit per block
  /// Target messages matched while the target half had no run for them,
  /// in arrival order (they use Msg::prev/next, which only initiator
  /// messages use otherwise).
  List<Msg> stage_waiting_;
  bool in_stage_retry_ = false;
  std::uint32_t pid_ = 0;
  std::uint32_t uid_ = 0;  ///< effective uid, sent in every request
  ptl_nid_t nid_ = 0;
  struct Deferred {
    core::Rank peer = 0;
    wire::PortalsHeader header;
    void* cookie = nullptr;
    const core::Region* region = nullptr;
    std::size_t offset = 0, length = 0;
  };
  std::vector<Deferred> deferred_;  ///< a ring, sized at creation
  /// Requests parked while no message state was free. Their packets stay
  /// in the core (deferred), so the sender's credits stay spent: an incast
  /// beyond the pool slows the senders instead of dropping their data.
  struct Parked {
    core::Arrival arrival;  ///< `header` is not valid after lib_parse
    wire::PortalsHeader header;
    /// ni_gen_ of its NI when it was parked: a request for an NI finalized
    /// since (and perhaps initialized again) is refused, never matched
    /// against the new one.
    std::uint32_t ni_gen = 0;
  };
  static constexpr std::size_t max_parked = 16384;
  std::vector<Parked> parked_;  ///< a ring, sized at creation
  std::size_t parked_head_ = 0, parked_count_ = 0;
  bool parked_retry_due_ = false, in_parked_retry_ = false;
  /// Target messages whose data is written when they complete (atomics,
  /// puts staged across iovec elements, held puts): while there are some,
  /// a small put is held too, so writes land in arrival order (R-L4).
  std::uint32_t late_writes_ = 0;
  std::size_t deferred_head_ = 0, deferred_count_ = 0;
  /// Whether answers that hold no message state must wait: states fill at
  /// most half of the answer queue, so theirs always find room.
  bool answers_backed_up() const noexcept { return deferred_count_ >= deferred_.size() / 2; }
  bool in_fire_ = false;
  std::vector<Trig*> fire_queue_;
  /// CTs changed while released operations run, published after them;
  /// room for every CT is reserved when an NI is made.
  std::vector<Ct*> mirror_owed_;
  /// Triggered moves released while no message state was left for them, in
  /// release order: a ring sized at creation, retried as states free.
  std::vector<Trig*> stalled_;
  std::size_t stalled_head_ = 0, stalled_count_ = 0;
  bool in_stalled_retry_ = false;
  List<Msg> awaiting_;  ///< initiator messages whose ack or reply is due
};

}  // namespace pier::lib
