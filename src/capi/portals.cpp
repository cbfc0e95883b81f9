// pier capi: the Portals 4 C entry points. Each packs its arguments into a
// lib::Call, forwards it to the LIB through the NAL and unpacks the Reply;
// outputs are written only on success. The blocking calls loop on the LIB's
// notifier (capi/state.hpp) so PtlAbort can end them.
#include <portals4.h>

#include <chrono>
#include <thread>

#include <cstring>

#include "capi/state.hpp"
#include "lib/atomic.hpp"

using pier::capi::call;
using pier::capi::State;
using pier::lib::Call;
using pier::lib::Op;
using pier::lib::Reply;
namespace wire = pier::wire;

namespace {
Call on(std::uint32_t handle) {
  Call c;
  c.handle = handle;
  return c;
}

int simple(Op op, std::uint32_t handle) {
  return call(op, on(handle));
}

/// `h`'s value from the mirror the LIB writes into `table` (the live
/// state's, which the caller holds pinned), without a forwarded call.
/// False when the mirror does not show `h` (stale, forged, not a CT, caught
/// mid-write): the LIB answers then.
bool ct_read(const pier::lib::CtMirror* table, ptl_handle_ct_t h, ptl_ct_event_t& value) {
  namespace lib = pier::lib;
  if (!table || lib::kind_of(h) != lib::Kind::ct) return false;
  return lib::read_ct(table[lib::ct_mirror_slot(h)], h, value);
}

/// PtlCTPoll's answer from the mirrors (ct_read), or false.
bool ct_mirrored(const pier::lib::CtMirror* table, const ptl_handle_ct_t* hs,
                 const ptl_size_t* tests, unsigned size, ptl_ct_event_t* event, unsigned* which,
                 int& rc) {
  if (size == 0) return false;
  ptl_ct_event_t v;
  const auto reached = [&](unsigned i) {
    // R-C4: the reference's condition, which a failure also satisfies.
    if (v.success < tests[i] && v.failure == 0) return false;
    if (event) *event = v;
    if (which) *which = i;
    rc = PTL_OK;
    return true;
  };
  if (size == 1) {
    // One handle (PtlCTWait): the read that checks it is the one tested.
    if (!ct_read(table, hs[0], v)) return false;
    if (!reached(0)) rc = PTL_CT_NONE_REACHED;
    return true;
  }
  // Every handle is checked before any is tested, as the LIB does.
  for (unsigned i = 0; i < size; ++i)
    if (pier::lib::ni_of(hs[i]) != pier::lib::ni_of(hs[0]) || !ct_read(table, hs[i], v))
      return false;
  for (unsigned i = 0; i < size; ++i) {
    if (!ct_read(table, hs[i], v)) return false;
    if (reached(i)) return true;
  }
  rc = PTL_CT_NONE_REACHED;
  return true;
}

/// One look at the counters, from the mirrors of `s` (pinned by the
/// caller), else from the LIB.
int ct_poll_once(const State& s, const ptl_handle_ct_t* hs, const ptl_size_t* tests, unsigned size,
                 ptl_ct_event_t* event, unsigned* which) {
  if (int rc = PTL_FAIL; ct_mirrored(s.ct_mirrors.get(), hs, tests, size, event, which, rc))
    return rc;
  Call c;
  c.ptr = hs;
  c.ptr2 = tests;
  c.size = size;
  Reply r;
  int rc = call(Op::ct_poll, c, &r);
  if (rc == PTL_OK) {
    if (event) *event = r.ct;
    if (which) *which = r.which;
  }
  return rc;
}

int eq_poll_once(const ptl_handle_eq_t* hs, unsigned size, ptl_event_t* event, unsigned* which) {
  Call c;
  c.ptr = hs;
  c.size = size;
  Reply r;
  int rc = call(Op::eq_poll, c, &r);
  if (rc == PTL_OK || rc == PTL_EQ_DROPPED) {
    if (event) *event = r.event;
    if (which) *which = r.which;
  }
  return rc;
}

int move(const pier::lib::Move& m, bool triggered, ptl_handle_ct_t trig, ptl_size_t threshold) {
  if (!triggered) return pier::capi::start_move(m);  // the Move alone, no Call around it
  Call c;
  c.move = m;
  c.triggered = triggered;
  c.trig_ct = trig;
  c.threshold = threshold;
  return call(Op::move, c);
}

pier::lib::Move put_args(ptl_handle_md_t md, ptl_size_t local_offset, ptl_size_t length,
                         ptl_ack_req_t ack_req, ptl_process_t target, ptl_pt_index_t pt,
                         ptl_match_bits_t bits, ptl_size_t remote_offset, void* user_ptr,
                         ptl_hdr_data_t hdr) {
  pier::lib::Move m;
  m.op = wire::PortalsOp::put;
  m.md = md;
  m.local_offset = local_offset;
  m.length = length;
  m.ack_req = ack_req;
  m.target = target;
  m.pt_index = pt;
  m.match_bits = bits;
  m.remote_offset = remote_offset;
  m.user_ptr = user_ptr;
  m.hdr_data = hdr;
  return m;
}

pier::lib::Move atomic_args(ptl_handle_md_t md, ptl_size_t local_offset, ptl_size_t length,
                            ptl_ack_req_t ack_req, ptl_process_t target, ptl_pt_index_t pt,
                            ptl_match_bits_t bits, ptl_size_t remote_offset, void* user_ptr,
                            ptl_hdr_data_t hdr, ptl_op_t op, ptl_datatype_t type) {
  auto m =
      put_args(md, local_offset, length, ack_req, target, pt, bits, remote_offset, user_ptr, hdr);
  m.op = wire::PortalsOp::atomic;
  m.atomic_op = op;
  m.atomic_type = type;
  return m;
}

pier::lib::Move fetch_args(wire::PortalsOp op, ptl_handle_md_t get_md, ptl_size_t get_off,
                           ptl_handle_md_t put_md, ptl_size_t put_off, ptl_size_t length,
                           ptl_process_t target, ptl_pt_index_t pt, ptl_match_bits_t bits,
                           ptl_size_t remote_offset, void* user_ptr, ptl_hdr_data_t hdr,
                           ptl_op_t aop, ptl_datatype_t type) {
  pier::lib::Move m = put_args(put_md, put_off, length, PTL_NO_ACK_REQ, target, pt, bits,
                               remote_offset, user_ptr, hdr);
  m.op = op;
  m.get_md = get_md;
  m.local_get_offset = get_off;
  m.atomic_op = aop;
  m.atomic_type = type;
  return m;
}

/// Swap's operand is one element, copied now (R-A3, R-A4); PTL_SWAP has none.
bool add_operand(pier::lib::Move& m, const void* operand) {
  if (m.atomic_op == PTL_SWAP) return true;
  std::size_t n = pier::lib::datatype_size(m.atomic_type);
  if (operand == nullptr || n == 0 || n > sizeof m.operand) return false;
  std::memcpy(m.operand, operand, n);
  m.operand_length = static_cast<std::uint32_t>(n);
  return true;
}
}  // namespace

extern "C" {

int PtlNIInit(ptl_interface_t iface, unsigned int options, ptl_pid_t pid,
              const ptl_ni_limits_t* desired, ptl_ni_limits_t* actual, ptl_handle_ni_t* ni_handle) {
  if (!pier::capi::state()) return PTL_NO_INIT;
  if (!ni_handle) return PTL_ARG_INVALID;
  Call c;
  c.iface = iface;
  c.options = options;
  c.pid = pid;
  if (desired) {
    c.has_limits = true;
    c.limits = *desired;
  }
  Reply r;
  int rc = call(Op::ni_init, c, &r);
  // The same NI, finalized with messages still in flight, keeps its place
  // until they end: they are progressed here (without the progress thread
  // nobody else would) for up to 2 s. Not a wait PtlAbort ends: PTL_ABORTED
  // is no answer of PtlNIInit.
  for (auto deadline = pier::base::Deadline::after_ms(2000);
       rc == PTL_NO_SPACE && r.busy && !deadline.expired();) {
    pier::capi::poll();
    std::this_thread::sleep_for(std::chrono::microseconds(20));
    r = Reply{};
    rc = call(Op::ni_init, c, &r);
  }
  if (rc == PTL_OK) {
    *ni_handle = r.handle;
    if (actual) *actual = r.limits;
  }
  return rc;
}

int PtlNIFini(ptl_handle_ni_t ni) {
  return simple(Op::ni_fini, ni);
}

int PtlNIStatus(ptl_handle_ni_t ni, ptl_sr_index_t reg, ptl_sr_value_t* status) {
  if (!pier::capi::state()) return PTL_NO_INIT;
  if (!status) return PTL_ARG_INVALID;
  Call c = on(ni);
  c.size = static_cast<ptl_size_t>(reg);
  Reply r;
  int rc = call(Op::ni_status, c, &r);
  if (rc == PTL_OK) *status = r.sr;
  return rc;
}

int PtlNIHandle(ptl_handle_any_t handle, ptl_handle_ni_t* ni) {
  if (!pier::capi::state()) return PTL_NO_INIT;
  if (!ni) return PTL_ARG_INVALID;
  Reply r;
  int rc = call(Op::ni_handle, on(handle), &r);
  if (rc == PTL_OK) *ni = r.handle;
  return rc;
}

int PtlSetMap(ptl_handle_ni_t ni, ptl_size_t size, const ptl_process_t* mapping) {
  Call c = on(ni);
  c.size = size;
  c.ptr = mapping;
  return call(Op::set_map, c);
}

int PtlGetMap(ptl_handle_ni_t ni, ptl_size_t size, ptl_process_t* mapping,
              ptl_size_t* actual_size) {
  Call c = on(ni);
  c.size = size;
  c.out = mapping;
  Reply r;
  int rc = call(Op::get_map, c, &r);
  if (rc == PTL_OK && actual_size) *actual_size = r.size;
  return rc;
}

int PtlPTAlloc(ptl_handle_ni_t ni, unsigned int options, ptl_handle_eq_t eq, ptl_pt_index_t req,
               ptl_pt_index_t* index) {
  if (!pier::capi::state()) return PTL_NO_INIT;
  if (!index) return PTL_ARG_INVALID;
  Call c = on(ni);
  c.options = options;
  c.handle2 = eq;
  c.pt_index = req;
  Reply r;
  int rc = call(Op::pt_alloc, c, &r);
  if (rc == PTL_OK) *index = r.pt_index;
  return rc;
}

int PtlPTFree(ptl_handle_ni_t ni, ptl_pt_index_t index) {
  Call c = on(ni);
  c.pt_index = index;
  return call(Op::pt_free, c);
}

int PtlPTDisable(ptl_handle_ni_t ni, ptl_pt_index_t index) {
  Call c = on(ni);
  c.pt_index = index;
  if (int rc = call(Op::pt_disable, c); rc != PTL_OK) return rc;
  // Returns once the messages already matched on the entry have finished
  // and posted their events (§5.5).
  pier::capi::Pin pin;
  State* s = pin.get();
  if (!s) return PTL_NO_INIT;
  auto deadline = pier::base::Deadline::after_ms(10000);
  pier::capi::PatientWait patient;  // a wait like the others
  while (!deadline.expired()) {
    if (pier::capi::state() != s) return PTL_NO_INIT;  // PtlFini waits for us
    Reply r;
    std::uint64_t seen = s->lib->notifier().epoch();
    if (int rc = call(Op::pt_busy, c, &r); rc != PTL_OK) return rc;
    if (!r.busy) return PTL_OK;
    patient.begin();
    (void)pier::capi::idle(*s, seen, pier::base::Deadline::after_ms(5));
  }
  return PTL_FAIL;
}

int PtlPTEnable(ptl_handle_ni_t ni, ptl_pt_index_t index) {
  Call c = on(ni);
  c.pt_index = index;
  return call(Op::pt_enable, c);
}

int PtlGetUid(ptl_handle_ni_t ni, ptl_uid_t* uid) {
  if (!pier::capi::state()) return PTL_NO_INIT;
  if (!uid) return PTL_ARG_INVALID;
  Reply r;
  int rc = call(Op::get_uid, on(ni), &r);
  if (rc == PTL_OK) *uid = r.uid;
  return rc;
}

int PtlGetId(ptl_handle_ni_t ni, ptl_process_t* id) {
  if (!pier::capi::state()) return PTL_NO_INIT;
  if (!id) return PTL_ARG_INVALID;
  Reply r;
  int rc = call(Op::get_id, on(ni), &r);
  if (rc == PTL_OK) *id = r.id;
  return rc;
}

int PtlGetPhysId(ptl_handle_ni_t ni, ptl_process_t* id) {
  if (!pier::capi::state()) return PTL_NO_INIT;
  if (!id) return PTL_ARG_INVALID;
  Reply r;
  int rc = call(Op::get_phys_id, on(ni), &r);
  if (rc == PTL_OK) *id = r.id;
  return rc;
}

int PtlMDBind(ptl_handle_ni_t ni, const ptl_md_t* md, ptl_handle_md_t* handle) {
  if (!pier::capi::state()) return PTL_NO_INIT;
  if (!md || !handle) return PTL_ARG_INVALID;
  Call c = on(ni);
  c.md = *md;
  Reply r;
  int rc = call(Op::md_bind, c, &r);
  if (rc == PTL_OK) *handle = r.handle;
  return rc;
}

int PtlMDRelease(ptl_handle_md_t md) {
  return simple(Op::md_release, md);
}

static int append(ptl_handle_ni_t ni, ptl_pt_index_t pt, const ptl_me_t& me, bool is_me,
                  ptl_list_t list, void* user_ptr, std::uint32_t* handle) {
  if (!pier::capi::state()) return PTL_NO_INIT;
  if (!handle) return PTL_ARG_INVALID;
  Call c = on(ni);
  c.pt_index = pt;
  c.me = me;
  c.is_me = is_me;
  c.list = list;
  c.user_ptr = user_ptr;
  Reply r;
  int rc = call(Op::append, c, &r);
  if (rc == PTL_OK) *handle = r.handle;
  return rc;
}

static ptl_me_t from_le(const ptl_le_t& le) {
  ptl_me_t me{};
  me.start = le.start;
  me.length = le.length;
  me.ct_handle = le.ct_handle;
  me.uid = le.uid;
  me.options = le.options;
  return me;
}

int PtlLEAppend(ptl_handle_ni_t ni, ptl_pt_index_t pt, const ptl_le_t* le, ptl_list_t list,
                void* user_ptr, ptl_handle_le_t* handle) {
  if (!pier::capi::state()) return PTL_NO_INIT;
  if (!le) return PTL_ARG_INVALID;
  return append(ni, pt, from_le(*le), false, list, user_ptr, handle);
}

int PtlMEAppend(ptl_handle_ni_t ni, ptl_pt_index_t pt, const ptl_me_t* me, ptl_list_t list,
                void* user_ptr, ptl_handle_me_t* handle) {
  if (!pier::capi::state()) return PTL_NO_INIT;
  if (!me) return PTL_ARG_INVALID;
  return append(ni, pt, *me, true, list, user_ptr, handle);
}

int PtlLEUnlink(ptl_handle_le_t le) {
  if (!pier::capi::state()) return PTL_NO_INIT;
  if (pier::lib::kind_of(le) != pier::lib::Kind::le) return PTL_ARG_INVALID;  // an ME's handle
  return simple(Op::unlink, le);
}
int PtlMEUnlink(ptl_handle_me_t me) {
  if (!pier::capi::state()) return PTL_NO_INIT;
  if (pier::lib::kind_of(me) != pier::lib::Kind::me) return PTL_ARG_INVALID;  // an LE's handle
  return simple(Op::unlink, me);
}

static int search(ptl_handle_ni_t ni, ptl_pt_index_t pt, const ptl_me_t& me, bool is_me,
                  ptl_search_op_t op, void* user_ptr) {
  Call c = on(ni);
  c.pt_index = pt;
  c.me = me;
  c.is_me = is_me;
  c.search_op = op;
  c.user_ptr = user_ptr;
  return call(Op::search, c);
}

int PtlLESearch(ptl_handle_ni_t ni, ptl_pt_index_t pt, const ptl_le_t* le, ptl_search_op_t op,
                void* user_ptr) {
  if (!pier::capi::state()) return PTL_NO_INIT;
  if (!le) return PTL_ARG_INVALID;
  return search(ni, pt, from_le(*le), false, op, user_ptr);
}

int PtlMESearch(ptl_handle_ni_t ni, ptl_pt_index_t pt, const ptl_me_t* me, ptl_search_op_t op,
                void* user_ptr) {
  if (!pier::capi::state()) return PTL_NO_INIT;
  if (!me) return PTL_ARG_INVALID;
  return search(ni, pt, *me, true, op, user_ptr);
}

int PtlCTAlloc(ptl_handle_ni_t ni, ptl_handle_ct_t* ct) {
  if (!pier::capi::state()) return PTL_NO_INIT;
  if (!ct) return PTL_ARG_INVALID;
  Reply r;
  int rc = call(Op::ct_alloc, on(ni), &r);
  if (rc == PTL_OK) *ct = r.handle;
  return rc;
}

int PtlCTFree(ptl_handle_ct_t ct) {
  return simple(Op::ct_free, ct);
}
int PtlCTCancelTriggered(ptl_handle_ct_t ct) {
  return simple(Op::ct_cancel, ct);
}

int PtlCTGet(ptl_handle_ct_t ct, ptl_ct_event_t* event) {
  if (!pier::capi::state()) return PTL_NO_INIT;
  if (!event) return PTL_ARG_INVALID;
  pier::capi::poll();
  {
    pier::capi::Pin pin;
    State* s = pin.get();
    if (ptl_ct_event_t v; s && ct_read(s->ct_mirrors.get(), ct, v)) {
      *event = v;
      return PTL_OK;
    }
  }
  Reply r;
  int rc = call(Op::ct_get, on(ct), &r);
  if (rc == PTL_OK) *event = r.ct;
  return rc;
}

int PtlCTWait(ptl_handle_ct_t ct, ptl_size_t test, ptl_ct_event_t* event) {
  if (!pier::capi::state()) return PTL_NO_INIT;
  return pier::capi::wait_for(
      [&](const State& s) { return ct_poll_once(s, &ct, &test, 1, event, nullptr); },
      PTL_CT_NONE_REACHED, PTL_TIME_FOREVER);
}

int PtlCTPoll(const ptl_handle_ct_t* cts, const ptl_size_t* tests, unsigned int size,
              ptl_time_t timeout, ptl_ct_event_t* event, unsigned int* which) {
  if (!pier::capi::state()) return PTL_NO_INIT;
  if (!cts || !tests || size == 0) return PTL_ARG_INVALID;
  return pier::capi::wait_for(
      [&](const State& s) { return ct_poll_once(s, cts, tests, size, event, which); },
      PTL_CT_NONE_REACHED, timeout);
}

int PtlCTSet(ptl_handle_ct_t ct, ptl_ct_event_t value) {
  Call c = on(ct);
  c.ct = value;
  return call(Op::ct_set, c);
}

int PtlCTInc(ptl_handle_ct_t ct, ptl_ct_event_t increment) {
  Call c = on(ct);
  c.ct = increment;
  return call(Op::ct_inc, c);
}

int PtlPut(ptl_handle_md_t md, ptl_size_t local_offset, ptl_size_t length, ptl_ack_req_t ack_req,
           ptl_process_t target, ptl_pt_index_t pt, ptl_match_bits_t bits, ptl_size_t remote_offset,
           void* user_ptr, ptl_hdr_data_t hdr) {
  return move(
      put_args(md, local_offset, length, ack_req, target, pt, bits, remote_offset, user_ptr, hdr),
      false, PTL_INVALID_HANDLE, 0);
}

int PtlGet(ptl_handle_md_t md, ptl_size_t local_offset, ptl_size_t length, ptl_process_t target,
           ptl_pt_index_t pt, ptl_match_bits_t bits, ptl_size_t remote_offset, void* user_ptr) {
  auto m = put_args(md, local_offset, length, PTL_NO_ACK_REQ, target, pt, bits, remote_offset,
                    user_ptr, 0);
  m.op = wire::PortalsOp::get;
  return move(m, false, PTL_INVALID_HANDLE, 0);
}

int PtlAtomic(ptl_handle_md_t md, ptl_size_t local_offset, ptl_size_t length, ptl_ack_req_t ack_req,
              ptl_process_t target, ptl_pt_index_t pt, ptl_match_bits_t bits,
              ptl_size_t remote_offset, void* user_ptr, ptl_hdr_data_t hdr, ptl_op_t op,
              ptl_datatype_t type) {
  return move(atomic_args(md, local_offset, length, ack_req, target, pt, bits, remote_offset,
                          user_ptr, hdr, op, type),
              false, PTL_INVALID_HANDLE, 0);
}

int PtlFetchAtomic(ptl_handle_md_t get_md, ptl_size_t get_off, ptl_handle_md_t put_md,
                   ptl_size_t put_off, ptl_size_t length, ptl_process_t target, ptl_pt_index_t pt,
                   ptl_match_bits_t bits, ptl_size_t remote_offset, void* user_ptr,
                   ptl_hdr_data_t hdr, ptl_op_t op, ptl_datatype_t type) {
  return move(fetch_args(wire::PortalsOp::fetch_atomic, get_md, get_off, put_md, put_off, length,
                         target, pt, bits, remote_offset, user_ptr, hdr, op, type),
              false, PTL_INVALID_HANDLE, 0);
}

int PtlSwap(ptl_handle_md_t get_md, ptl_size_t get_off, ptl_handle_md_t put_md, ptl_size_t put_off,
            ptl_size_t length, ptl_process_t target, ptl_pt_index_t pt, ptl_match_bits_t bits,
            ptl_size_t remote_offset, void* user_ptr, ptl_hdr_data_t hdr, const void* operand,
            ptl_op_t op, ptl_datatype_t type) {
  auto m = fetch_args(wire::PortalsOp::swap, get_md, get_off, put_md, put_off, length, target, pt,
                      bits, remote_offset, user_ptr, hdr, op, type);
  if (!pier::capi::state()) return PTL_NO_INIT;
  // Legality first: the operand's size depends on a datatype that must be
  // valid for the operation before the operand is read (R-A1).
  if (!pier::lib::atomic_legal(pier::lib::AtomicFn::swap, op, type) || !add_operand(m, operand))
    return PTL_ARG_INVALID;
  return move(m, false, PTL_INVALID_HANDLE, 0);
}

int PtlAtomicSync(void) {
  // Atomics are applied by the LIB with ordinary stores before their event
  // is posted, so once the event is seen host accesses are safe already.
  return pier::capi::state() ? PTL_OK : PTL_NO_INIT;
}

int PtlEQAlloc(ptl_handle_ni_t ni, ptl_size_t count, ptl_handle_eq_t* eq) {
  if (!pier::capi::state()) return PTL_NO_INIT;
  if (!eq) return PTL_ARG_INVALID;
  Call c = on(ni);
  c.size = count;
  Reply r;
  int rc = call(Op::eq_alloc, c, &r);
  if (rc == PTL_OK) *eq = r.handle;
  return rc;
}

int PtlEQFree(ptl_handle_eq_t eq) {
  return simple(Op::eq_free, eq);
}

int PtlEQGet(ptl_handle_eq_t eq, ptl_event_t* event) {
  if (!pier::capi::state()) return PTL_NO_INIT;
  if (!event) return PTL_ARG_INVALID;
  pier::capi::poll();
  return eq_poll_once(&eq, 1, event, nullptr);
}

int PtlEQWait(ptl_handle_eq_t eq, ptl_event_t* event) {
  if (!pier::capi::state()) return PTL_NO_INIT;
  if (!event) return PTL_ARG_INVALID;
  return pier::capi::wait_for([&](const State&) { return eq_poll_once(&eq, 1, event, nullptr); },
                              PTL_EQ_EMPTY, PTL_TIME_FOREVER);
}

int PtlEQPoll(const ptl_handle_eq_t* eqs, unsigned int size, ptl_time_t timeout, ptl_event_t* event,
              unsigned int* which) {
  if (!pier::capi::state()) return PTL_NO_INIT;
  if (!eqs || size == 0 || !event) return PTL_ARG_INVALID;  // an event taken would be lost
  return pier::capi::wait_for([&](const State&) { return eq_poll_once(eqs, size, event, which); },
                              PTL_EQ_EMPTY, timeout);
}

int PtlTriggeredPut(ptl_handle_md_t md, ptl_size_t local_offset, ptl_size_t length,
                    ptl_ack_req_t ack_req, ptl_process_t target, ptl_pt_index_t pt,
                    ptl_match_bits_t bits, ptl_size_t remote_offset, void* user_ptr,
                    ptl_hdr_data_t hdr, ptl_handle_ct_t trig, ptl_size_t threshold) {
  return move(
      put_args(md, local_offset, length, ack_req, target, pt, bits, remote_offset, user_ptr, hdr),
      true, trig, threshold);
}

int PtlTriggeredGet(ptl_handle_md_t md, ptl_size_t local_offset, ptl_size_t length,
                    ptl_process_t target, ptl_pt_index_t pt, ptl_match_bits_t bits,
                    ptl_size_t remote_offset, void* user_ptr, ptl_handle_ct_t trig,
                    ptl_size_t threshold) {
  auto m = put_args(md, local_offset, length, PTL_NO_ACK_REQ, target, pt, bits, remote_offset,
                    user_ptr, 0);
  m.op = wire::PortalsOp::get;
  return move(m, true, trig, threshold);
}

int PtlTriggeredAtomic(ptl_handle_md_t md, ptl_size_t local_offset, ptl_size_t length,
                       ptl_ack_req_t ack_req, ptl_process_t target, ptl_pt_index_t pt,
                       ptl_match_bits_t bits, ptl_size_t remote_offset, void* user_ptr,
                       ptl_hdr_data_t hdr, ptl_op_t op, ptl_datatype_t type, ptl_handle_ct_t trig,
                       ptl_size_t threshold) {
  return move(atomic_args(md, local_offset, length, ack_req, target, pt, bits, remote_offset,
                          user_ptr, hdr, op, type),
              true, trig, threshold);
}

int PtlTriggeredFetchAtomic(ptl_handle_md_t get_md, ptl_size_t get_off, ptl_handle_md_t put_md,
                            ptl_size_t put_off, ptl_size_t length, ptl_process_t target,
                            ptl_pt_index_t pt, ptl_match_bits_t bits, ptl_size_t remote_offset,
                            void* user_ptr, ptl_hdr_data_t hdr, ptl_op_t op, ptl_datatype_t type,
                            ptl_handle_ct_t trig, ptl_size_t threshold) {
  return move(fetch_args(wire::PortalsOp::fetch_atomic, get_md, get_off, put_md, put_off, length,
                         target, pt, bits, remote_offset, user_ptr, hdr, op, type),
              true, trig, threshold);
}

int PtlTriggeredSwap(ptl_handle_md_t get_md, ptl_size_t get_off, ptl_handle_md_t put_md,
                     ptl_size_t put_off, ptl_size_t length, ptl_process_t target, ptl_pt_index_t pt,
                     ptl_match_bits_t bits, ptl_size_t remote_offset, void* user_ptr,
                     ptl_hdr_data_t hdr, const void* operand, ptl_op_t op, ptl_datatype_t type,
                     ptl_handle_ct_t trig, ptl_size_t threshold) {
  auto m = fetch_args(wire::PortalsOp::swap, get_md, get_off, put_md, put_off, length, target, pt,
                      bits, remote_offset, user_ptr, hdr, op, type);
  if (!pier::capi::state()) return PTL_NO_INIT;
  // Legality first: the operand's size depends on a datatype that must be
  // valid for the operation before the operand is read (R-A1).
  if (!pier::lib::atomic_legal(pier::lib::AtomicFn::swap, op, type) || !add_operand(m, operand))
    return PTL_ARG_INVALID;
  return move(m, true, trig, threshold);
}

int PtlTriggeredCTInc(ptl_handle_ct_t ct, ptl_ct_event_t increment, ptl_handle_ct_t trig,
                      ptl_size_t threshold) {
  Call c = on(ct);
  c.ct = increment;
  c.options = 0;
  c.trig_ct = trig;
  c.threshold = threshold;
  return call(Op::trig_ct, c);
}

int PtlTriggeredCTSet(ptl_handle_ct_t ct, ptl_ct_event_t value, ptl_handle_ct_t trig,
                      ptl_size_t threshold) {
  Call c = on(ct);
  c.ct = value;
  c.options = 1;
  c.trig_ct = trig;
  c.threshold = threshold;
  return call(Op::trig_ct, c);
}

int PtlTriggeredMEAppend(ptl_handle_ni_t ni, ptl_pt_index_t pt, ptl_me_t* me, ptl_list_t list,
                         void* user_ptr, ptl_handle_me_t* me_handle, ptl_handle_ct_t trig,
                         ptl_size_t threshold) {
  Call c = on(ni);
  c.pt_index = pt;
  c.list = list;
  c.user_ptr = user_ptr;
  c.trig_me = me;
  c.trig_me_out = me_handle;
  c.trig_ct = trig;
  c.threshold = threshold;
  return call(Op::trig_append, c);
}

int PtlTriggeredMEUnlink(ptl_handle_me_t me, ptl_handle_ct_t trig, ptl_size_t threshold) {
  Call c = on(me);
  c.trig_ct = trig;
  c.threshold = threshold;
  return call(Op::trig_unlink, c);
}

int PtlStartBundle(ptl_handle_ni_t ni) {
  return simple(Op::bundle_start, ni);
}
int PtlEndBundle(ptl_handle_ni_t ni) {
  return simple(Op::bundle_end, ni);
}

int PtlHandleIsEqual(ptl_handle_any_t a, ptl_handle_any_t b) {
  // A handle names one object for its whole life and is never reused while
  // the object lives, so equal values are the same object.
  return a == b ? 1 : 0;
}

}  // extern "C"
