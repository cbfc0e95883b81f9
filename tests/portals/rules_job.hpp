// portals_rules_job: one rule of PORTALS4.md §6 across two processes
// started by pier-run, public C API only. Rank 0 is usually the target and
// rank 1 the initiator; each checks its own side (events, counters, data,
// status registers) and every failed check prints one line with the value
// seen and the value expected.
//
// The two ranks meet through a handshake made of Portals itself on its own
// portal index (sync_pt): each side has a persistent entry there counting
// arrivals on a CT, and sync() puts zero bytes to the peer's and waits for
// the peer's. The handshake's MD has no EQ and the index has none, so it
// leaves no event in the queues a rule checks. Every wait has a deadline.
#pragma once

#include <portals4.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace pier::portals::rules {

/// The index every rule uses (allocated with Job::teq), the handshake's,
/// and one that is never allocated.
inline constexpr ptl_pt_index_t rule_pt = 4;
inline constexpr ptl_pt_index_t sync_pt = 63;
inline constexpr ptl_pt_index_t unallocated_pt = 40;

/// How long "nothing more comes" is watched for (PtlEQPoll until empty).
inline constexpr ptl_time_t quiet_ms = 100;

/// An event that never came (PtlEQPoll timed out).
inline constexpr ptl_event_kind_t no_event = 0xff;

struct Job {
  const char* rule = "";
  ptl_handle_ni_t ni = PTL_INVALID_HANDLE;
  bool logical = true, matching = true;
  int rank = -1;
  ptl_process_t me{}, peer{};            ///< as targets on this NI
  ptl_process_t my_phys{}, peer_phys{};  ///< physical ids
  ptl_uid_t uid = 0;
  ptl_ni_limits_t limits{};
  ptl_handle_eq_t teq = PTL_INVALID_HANDLE;  ///< rule_pt's queue
  ptl_handle_eq_t ieq = PTL_INVALID_HANDLE;  ///< the MDs' queue (bind())
  int errors = 0;

  // The handshake.
  ptl_handle_ct_t sync_arrivals = PTL_INVALID_HANDLE, sync_acks = PTL_INVALID_HANDLE;
  ptl_handle_md_t sync_md = PTL_INVALID_HANDLE;
  ptl_size_t syncs = 0;

  bool target() const { return rank == 0; }
  /// 10 s, or 1 s once a check failed so a broken run ends quickly.
  ptl_time_t wait_ms() const { return errors == 0 ? 10000 : 1000; }

  /// Meets the peer: both ranks return once both have called it (false,
  /// with an error printed, after the deadline).
  bool sync();

  /// Records a failed check, printing `what`.
  void fail(int line, const char* what);
  void fail_value(int line, const char* what, long long seen, long long want);

  /// The first `n` bytes of `seen` and `want` are equal (else the first
  /// difference is printed).
  bool check_bytes(int line, const char* what, const void* seen, const void* want, std::size_t n);

  template <class A, class B>
  bool check_eq(int line, const char* what, A seen, B want) {  // by value: arrays decay
    if (as_number(seen) == as_number(want)) return true;
    fail_value(line, what, as_number(seen), as_number(want));
    return false;
  }
  template <class T>
  static long long as_number(const T& v) {
    if constexpr (std::is_pointer_v<T> || std::is_null_pointer_v<T>)
      return static_cast<long long>(reinterpret_cast<std::uintptr_t>(v));
    else
      return static_cast<long long>(v);
  }

  // Entries and descriptors.
  ptl_process_t any_id() const;
  ptl_me_t me_for(void* start, ptl_size_t length, unsigned options, ptl_match_bits_t bits = 0,
                  ptl_match_bits_t ignore = 0, ptl_handle_ct_t ct = PTL_CT_NONE) const;
  /// Appends to rule_pt (or `pt`, whose queue must be teq) and expects
  /// the LINK event with `tag`. PTL_INVALID_HANDLE if the append failed.
  ptl_handle_me_t add(const ptl_me_t& m, ptl_list_t list, void* tag, ptl_pt_index_t pt = rule_pt);
  /// Appends without looking at the queue.
  ptl_handle_me_t append(const ptl_me_t& m, ptl_list_t list, void* tag,
                         ptl_pt_index_t pt = rule_pt);
  ptl_handle_md_t bind(void* start, ptl_size_t length, unsigned options = 0,
                       ptl_handle_ct_t ct = PTL_CT_NONE);
  ptl_handle_md_t bind_to(void* start, ptl_size_t length, unsigned options, ptl_handle_eq_t eq,
                          ptl_handle_ct_t ct);
  ptl_handle_ct_t new_ct();

  // Waits, each with a deadline.
  /// The next event of `eq`; type no_event (and an error) after the deadline.
  ptl_event_t next(ptl_handle_eq_t eq, int line);
  /// The next event, which must be of `kind`.
  ptl_event_t expect(ptl_handle_eq_t eq, ptl_event_kind_t kind, int line);
  /// Nothing more arrives at `eq` within quiet_ms.
  void expect_quiet(ptl_handle_eq_t eq, int line);
  /// The counter once success >= test or failure != 0 (PtlCTPoll).
  ptl_ct_event_t ct_reach(ptl_handle_ct_t ct, ptl_size_t test, int line);
  /// The counter after quiet_ms, which must still read `want`.
  void ct_stays(ptl_handle_ct_t ct, ptl_ct_event_t want, int line);
  ptl_ct_event_t ct_get(ptl_handle_ct_t ct);
  ptl_sr_value_t status(ptl_sr_index_t reg);

  /// A put to the peer with PTL_ACK_REQ: expects SEND (always PTL_NI_OK,
  /// R-E8) then returns the ACK.
  ptl_event_t put_acked(ptl_handle_md_t md, ptl_size_t local_offset, ptl_size_t length,
                        ptl_match_bits_t bits, ptl_size_t remote_offset, int line,
                        ptl_hdr_data_t hdr = 0, ptl_pt_index_t pt = rule_pt);
  /// A get from the peer: returns the REPLY.
  ptl_event_t get_reply(ptl_handle_md_t md, ptl_size_t local_offset, ptl_size_t length,
                        ptl_match_bits_t bits, ptl_size_t remote_offset, int line,
                        ptl_pt_index_t pt = rule_pt);
  /// The event names the peer as its initiator (rank, or nid and pid).
  void check_initiator(const ptl_event_t& ev, int line);
};

/// One rule: each rank runs its side; `matching` picks the NI kind and
/// `tune_limits`, if set, changes the limits rank 0 asks for.
struct Rule {
  const char* name;
  void (*run)(Job&);
  bool matching = true;
  void (*tune_limits)(ptl_ni_limits_t&) = nullptr;
};

// The rule groups, one file each; every group lists its rules.
extern const Rule addressing_rules[];  // R-P*, R-F*  (rules_flow.cpp)
extern const Rule matching_rules[];    // R-M*        (rules_match.cpp)
extern const Rule offset_rules[];      // R-O*        (rules_offsets.cpp)
extern const Rule unexpected_rules[];  // R-U*        (rules_unexpected.cpp)
extern const Rule event_rules[];       // R-E*        (rules_events.cpp)
extern const Rule ack_rules[];         // R-K*        (rules_acks.cpp)
extern const Rule counting_rules[];    // R-C*        (rules_counting.cpp)
extern const Rule triggered_rules[];   // R-T*, R-C7  (rules_triggered.cpp)
extern const Rule atomic_rules[];      // R-A*        (rules_atomic.cpp)
extern const Rule limit_rules[];       // R-L*, R-S1  (rules_limits.cpp)

}  // namespace pier::portals::rules

/// A check: on failure, one line with the rank, rule, line and values.
#define RULE_EQ(j, seen, want) (j).check_eq(__LINE__, #seen " == " #want, (seen), (want))
#define RULE_BYTES(j, seen, want, n) \
  (j).check_bytes(__LINE__, #seen " == " #want, (seen), (want), (n))
#define RULE_TRUE(j, cond) ((cond) ? true : ((j).fail(__LINE__, #cond), false))
/// A call that must return PTL_OK, or the rule's side ends here.
#define RULE_CALL(j, call)                                                  \
  do {                                                                      \
    const int rc_ = (call);                                                 \
    if (rc_ != PTL_OK) return (j).fail_value(__LINE__, #call, rc_, PTL_OK); \
  } while (0)
