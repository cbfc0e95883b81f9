// pier lib: the target side. lib_parse matches an arriving request against
// the portal table entry (R-F*, R-M*, R-O*), reserves what its completion
// needs, and answers the core with one recv(); complete_target posts the
// events, counts, keeps the unexpected header and sends the ack or reply.
#include <array>
#include <cstring>

#include "base/log.hpp"
#include "lib/atomic.hpp"
#include "lib/lib.hpp"

namespace pier::lib {

namespace {
bool wants_answer(const wire::PortalsHeader& h) {
  switch (h.op) {
    case wire::PortalsOp::get:
    case wire::PortalsOp::fetch_atomic:
    case wire::PortalsOp::swap:
      return true;
    default:
      return h.ack_request != wire::AckRequest::none;
  }
}

ptl_event_kind_t comm_kind(wire::PortalsOp op) {
  switch (op) {
    case wire::PortalsOp::get:
      return PTL_EVENT_GET;
    case wire::PortalsOp::atomic:
      return PTL_EVENT_ATOMIC;
    case wire::PortalsOp::fetch_atomic:
    case wire::PortalsOp::swap:
      return PTL_EVENT_FETCH_ATOMIC;
    default:
      return PTL_EVENT_PUT;
  }
}

/// The entry segment holding [offset, offset + length), or nullptr when the
/// range crosses iovec elements.
inline const core::Region* contiguous(const Buffer& b, std::size_t offset, std::size_t length,
                                      std::size_t* local) {
  const std::size_t count = b.starts.size();  // one per segment
  if (count == 0) return nullptr;
  if (length == 0) {
    *local = 0;
    return &b.segments.front();
  }
  if (count == 1) {  // every buffer but an iovec's
    if (offset >= b.length || offset < b.first) return nullptr;
    const std::size_t in = offset - b.starts.front();
    if (length > b.segments.front().extent - in) return nullptr;
    *local = in;
    return &b.segments.front();
  }
  std::size_t i = b.segment_at(offset);
  if (i >= count) return nullptr;
  std::size_t in = offset - b.starts[i];
  if (length > b.segments[i].extent - in) return nullptr;
  *local = in;
  return &b.segments[i];
}
}  // namespace

void Lib::lib_parse(const core::Arrival& a) noexcept {
  flush_deferred();
  // The upper header's length tells the forms apart; any other length
  // (an rts carries whatever follows its own header) is malformed, not a
  // full header with bytes ignored after it.
  const std::size_t n = a.header.size();
  const bool tiny = n == wire::PortalsHeader::tiny_size || n == wire::PortalsHeader::tiny_get_size;
  auto h = tiny ? wire::PortalsHeader::decode_tiny(a.header, a.length)
           : n == wire::PortalsHeader::compact_size ? wire::PortalsHeader::decode_compact(a.header)
           : n == wire::PortalsHeader::size         ? wire::PortalsHeader::decode(a.header)
                                            : Result<wire::PortalsHeader>(Status::malformed);
  if (h && tiny && h->addressing == wire::Addressing::physical && !wire::is_answer(h->op)) {
    // A tiny request's physical initiator is the sender itself (pid_ is the
    // core rank, lib.cpp).
    if (a.source < nid_of_rank_.size()) {
      h->initiator_nid = nid_of_rank_[a.source];
      h->initiator_pid = a.source;
    } else {
      h = Result<wire::PortalsHeader>(Status::malformed);
    }
  }
  if (!h) {
    PIER_LOG(warn, "lib", "malformed portals header from rank {}: {}", a.source,
             to_string(h.status()));
    (void)core_.recv(a.handle, nullptr, nullptr, 0, 0, 0);
    return;
  }
  if (wire::is_answer(h->op)) {
    parse_answer(a, *h);
  } else if (!parse_request(a, *h) && !park(a, *h)) {
    PIER_LOG(warn, "lib", "no message state left for a request from rank {}", a.source);
    Ni& ni = nis_[ni_index(*h)];
    if (ni.refs > 0) ++ni.status[PTL_SR_DROP_COUNT];
    refuse(a, *h, wire::NiFail::dropped);
  }
  if (parked_retry_due_) retry_parked();
}

bool Lib::park(const core::Arrival& a, const wire::PortalsHeader& h) noexcept {
  if (parked_count_ == parked_.size()) return false;
  Parked& p = parked_[(parked_head_ + parked_count_) % parked_.size()];
  p.arrival = a;
  p.arrival.header = {};
  p.header = h;
  p.ni_gen = ni_gen_[ni_index(h)];
  ++parked_count_;
  return true;
}

void Lib::retry_parked() noexcept {
  parked_retry_due_ = false;
  if (in_parked_retry_) return;
  in_parked_retry_ = true;
  while (parked_count_ > 0) {
    Parked& p = parked_[parked_head_];
    if (wants_answer(p.header) && answers_backed_up()) break;  // as in parse_request
    if (p.ni_gen != ni_gen_[ni_index(p.header)])
      (void)refuse(p.arrival, p.header, wire::NiFail::dropped);
    else if (!parse_request(p.arrival, p.header, true))
      break;  // still no state: wait for the next
    parked_head_ = (parked_head_ + 1) % parked_.size();
    --parked_count_;
  }
  in_parked_retry_ = false;
}

Status Lib::send_header(core::Rank peer, const wire::PortalsHeader& h, void* cookie,
                        const core::Region* region, std::size_t offset, std::size_t length,
                        bool copy_now_only) noexcept {
  // Not zeroed: the encoders write every byte of the length they return,
  // and only those are sent.
  std::array<std::byte, wire::PortalsHeader::size> bytes;
  // The LIB builds only valid headers (checked in debug builds): the common
  // tiny and compact forms skip the encoders' checks (60 instructions a
  // message). Every request's initiator is this process, as the tiny form
  // of a physical one implies; answers name nobody (tiny_length()).
  const Result<std::size_t> n =
      h.fits_tiny()      ? Result<std::size_t>(wire::write_tiny(
                               h, std::span<std::byte, wire::PortalsHeader::tiny_get_size>(
                                 bytes.data(), wire::PortalsHeader::tiny_get_size)))
      : h.fits_compact() ? Result<std::size_t>(wire::write_compact(
                               h, std::span<std::byte, wire::PortalsHeader::compact_size>(
                                      bytes.data(), wire::PortalsHeader::compact_size)))
                         : wire::encode(h, bytes);
  if (!n) return n.status();
  core::SendArgs s;
  s.cookie = cookie;
  s.peer = peer;
  // Answers travel on the high priority, requests on the low one, each with
  // its own credits: a request parked for want of a state keeps a low
  // credit, and the reply that would free a state must not wait behind it.
  s.priority = wire::is_answer(h.op) ? 1 : 0;
  s.upper = wire::Upper::portals;
  s.header = std::span<const std::byte>(bytes).first(*n);
  s.region = region;
  s.offset = offset;
  s.length = length;
  s.copy_now_only = copy_now_only;
  return core_.send(s);
}

Status Lib::defer_answer(core::Rank peer, const wire::PortalsHeader& h, void* cookie,
                         const core::Region* region, std::size_t offset,
                         std::size_t length) noexcept {
  if (deferred_count_ == deferred_.size()) {
    PIER_LOG(error, "lib", "answer to rank {} lost: {} answers already wait for the core", peer,
             deferred_count_);
    return Status::no_resource;
  }
  deferred_[(deferred_head_ + deferred_count_) % deferred_.size()] =
      Deferred{peer, h, cookie, region, offset, length};
  ++deferred_count_;
  return Status::ok;
}

void Lib::flush_deferred_now() noexcept {
  bool drained = false;
  while (deferred_count_ > 0) {
    Deferred& d = deferred_[deferred_head_];
    Status s = send_header(d.peer, d.header, d.cookie, d.region, d.offset, d.length);
    if (s == Status::no_resource) break;
    drained = true;
    deferred_head_ = (deferred_head_ + 1) % deferred_.size();
    --deferred_count_;
    if (parked_count_ > 0) parked_retry_due_ = true;  // room for their answers
    if (s != Status::ok) {
      PIER_LOG(warn, "lib", "cannot send to rank {}: {}", d.peer, to_string(s));
      if (d.cookie) lib_finalize(d.cookie, s);  // the send failed: complete it as failed
    }
  }
  // Triggered moves refused while the queue was backed up (launch) go now.
  if (drained && stalled_count_ > 0 && !answers_backed_up()) stalled_retry();
}

bool Lib::refuse(const core::Arrival& a, const wire::PortalsHeader& h, wire::NiFail fail) noexcept {
  (void)core_.recv(a.handle, nullptr, nullptr, 0, 0, 0);
  if (!wants_answer(h)) return true;
  wire::PortalsHeader r;
  r.op = answer_op(h.op, static_cast<ptl_ack_req_t>(h.ack_request));
  r.matching = h.matching;
  r.addressing = h.addressing;
  r.ni_fail = fail;
  r.pt_index = h.pt_index;
  r.cookie = h.cookie;
  r.remote_offset = h.remote_offset;
  r.length = h.length;
  r.initiator_nid = h.target_nid;
  r.initiator_pid = h.target_pid;
  if (Status s = send_answer(a.source, r, nullptr, nullptr, 0, 0); s != Status::ok)
    PIER_LOG(warn, "lib", "cannot answer rank {}: {}", a.source, to_string(s));
  return true;
}

void Lib::disable_for_flow(Ni& ni, ptl_pt_index_t index, Entry* cause) noexcept {
  Pt& pt = ni.pts[index];
  if (!pt.enabled) return;
  pt.enabled = false;
  // R-F3: one PT_DISABLED per disable, once the messages already matched
  // have finished: a recovery takes it to mean every earlier message on the
  // index has reported. (Their events' places were reserved when they
  // matched, Eq::owed; this one has slots of its own.)
  if (cause && (cause->options & PTL_ME_EVENT_FLOWCTRL_DISABLE)) return;
  if (pt.inflight > 0) {
    pt.disabled_owed = true;
    return;
  }
  post_pt_disabled(pt, index);
}

void Lib::post_pt_disabled(Pt& pt, ptl_pt_index_t index) noexcept {
  pt.disabled_owed = false;
  ptl_event_t ev{};
  ev.type = PTL_EVENT_PT_DISABLED;
  ev.pt_index = index;
  ev.ni_fail_type = PTL_NI_PT_DISABLED;
  post(pt.eq, ev);
}

bool Lib::parse_request(const core::Arrival& a, const wire::PortalsHeader& h,
                        bool from_park) noexcept {
  // Behind parked requests, in order: an entry must match them first.
  if (parked_count_ > 0 && !from_park) return false;
  // An answer that holds no message state (a refusal) may take only the
  // half of the answer queue that states cannot fill; beyond it the request
  // waits, its credit held, instead of its answer being lost (its initiator
  // would wait for it forever).
  if (wants_answer(h) && answers_backed_up()) return false;
  Ni& ni = nis_[ni_index(h)];
  if (ni.refs == 0) return refuse(a, h, wire::NiFail::dropped);
  if (h.pt_index >= ni.pts.size() || !ni.pts[h.pt_index].allocated) {
    ++ni.status[PTL_SR_DROP_COUNT];  // R-F1
    return refuse(a, h, wire::NiFail::dropped);
  }
  // What the peer cannot truthfully say: the data it carries must be what
  // the header announces (a short payload would leave stale bytes of an
  // earlier message to be applied or scattered), and it must be the
  // initiator it names (entries restricted to another rank match only it).
  const bool carries = h.op == wire::PortalsOp::put || wire::is_atomic(h.op);
  const ptl_process_t initiator = initiator_of(ni, h);
  core::Rank claimed = 0;
  const bool known = rank_of(ni, initiator, claimed);
  if (a.length != (carries ? std::uint64_t{h.operand_length} + h.length : 0) || !known ||
      claimed != a.source) {
    PIER_LOG(warn, "lib", "malformed {} from rank {} dropped", wire::to_string(h.op), a.source);
    ++ni.status[PTL_SR_DROP_COUNT];
    return refuse(a, h, wire::NiFail::dropped);
  }
  Pt& pt = ni.pts[h.pt_index];
  if (!pt.enabled) {
    ++ni.status[PTL_SR_DROP_COUNT];  // R-F2
    return refuse(a, h, wire::NiFail::pt_disabled);
  }
  bool flow = pt.options & PTL_PT_FLOWCTRL;
  if (flow && pt.eq && pt.eq->count - pt.eq->disabled_in + pt.eq->owed >= pt.eq->requested) {
    // R-F6: a full queue disables every flow-controlled index feeding it.
    Eq* full = pt.eq;
    for (std::size_t i = 0; i < ni.pts.size(); ++i)
      if (ni.pts[i].allocated && ni.pts[i].eq == full && (ni.pts[i].options & PTL_PT_FLOWCTRL))
        disable_for_flow(ni, static_cast<ptl_pt_index_t>(i), nullptr);
    ++ni.status[PTL_SR_DROP_COUNT];
    return refuse(a, h, wire::NiFail::pt_disabled);
  }
  // The priority list, then the overflow list (R-M1).
  Entry* e = pt.priority.head;
  while (e && !matches(*e, h.match_bits, initiator, h.length, h.remote_offset)) e = e->next;
  if (!e) {
    e = pt.overflow.head;
    while (e && !matches(*e, h.match_bits, initiator, h.length, h.remote_offset)) e = e->next;
  }
  if (!e) {
    ++ni.status[PTL_SR_DROP_COUNT];  // R-M7
    if (flow) {
      disable_for_flow(ni, h.pt_index, nullptr);
      return refuse(a, h, wire::NiFail::pt_disabled);
    }
    return refuse(a, h, wire::NiFail::dropped);
  }
  if (e->uid != PTL_UID_ANY && e->uid != h.uid) {
    ++ni.status[PTL_SR_PERMISSION_VIOLATIONS];  // R-M6
    return refuse(a, h, wire::NiFail::perm_violation);
  }
  unsigned need = 0;
  switch (h.op) {
    case wire::PortalsOp::put:
    case wire::PortalsOp::atomic:
      need = PTL_ME_OP_PUT;
      break;
    case wire::PortalsOp::get:
      need = PTL_ME_OP_GET;
      break;
    default:
      need = PTL_ME_OP_PUT | PTL_ME_OP_GET;
      break;
  }
  if ((e->options & need) != need) {
    ++ni.status[PTL_SR_OPERATION_VIOLATIONS];
    return refuse(a, h, wire::NiFail::op_violation);
  }
  bool atomic = wire::is_atomic(h.op);
  std::size_t element = 1;
  if (atomic) {
    auto op = static_cast<ptl_op_t>(static_cast<unsigned>(h.atomic_op) - 1);
    auto type = static_cast<ptl_datatype_t>(static_cast<unsigned>(h.atomic_type) - 1);
    AtomicFn fn = h.op == wire::PortalsOp::atomic         ? AtomicFn::atomic
                  : h.op == wire::PortalsOp::fetch_atomic ? AtomicFn::fetch_atomic
                                                          : AtomicFn::swap;
    if (h.atomic_op == wire::AtomicOp::none || !atomic_legal(fn, op, type) ||
        h.operand_length > wire::max_operand_length)
      return refuse(a, h, wire::NiFail::op_violation);
    // Whole elements only, and the compare and mask forms (which take an
    // operand) on one element with an operand of that size, as PtlSwap
    // demands of its caller.
    element = datatype_size(type);
    const bool one_element = h.operand_length != 0;
    if (h.length % element != 0 ||
        (one_element && (h.operand_length != element || h.length > element)))
      return refuse(a, h, wire::NiFail::op_violation);
  }
  if (e->buffer.all_memory()) {
    // Offsets are addresses: the null page is no memory of this process.
    ptl_size_t at = (e->options & PTL_ME_MANAGE_LOCAL) ? e->local_offset : h.remote_offset;
    if (at < e->buffer.first && h.length > 0) {
      ++ni.status[PTL_SR_DROP_COUNT];  // R-S1: neither a permission nor an operation violation
      return refuse(a, h, wire::NiFail::segv);
    }
  }
  Unexpected* uh = nullptr;
  if (e->list == PTL_OVERFLOW_LIST && !(e->options & PTL_ME_UNEXPECTED_HDR_DISABLE)) {
    uh = ni.unexpected_free.head;
    if (!uh) {
      ++ni.status[PTL_SR_DROP_COUNT];
      if (flow) {
        disable_for_flow(ni, h.pt_index, e);
        return refuse(a, h, wire::NiFail::pt_disabled);
      }
      return refuse(a, h, wire::NiFail::dropped);
    }
  }
  // No message state for a put that ends here and now: one that lands in
  // one piece from the packet, takes no unexpected header, does not unlink
  // or move its entry's offset, and has nothing before it to wait behind
  // (no late write, R-L4; nothing of this portal entry in flight, whose
  // events come first).
  if (a.at_hand && h.op == wire::PortalsOp::put && !uh && late_writes_ == 0 && pt.inflight == 0 &&
      !(e->options & (PTL_ME_USE_ONCE | PTL_ME_MANAGE_LOCAL)) &&
      put_now(a, h, ni, pt, *e, initiator))
    return true;
  Msg* m = new_msg(true);
  if (!m) return false;  // parked: nothing above changed any state

  ptl_size_t offset = (e->options & PTL_ME_MANAGE_LOCAL) ? e->local_offset : h.remote_offset;
  ptl_size_t room = offset > e->buffer.length ? 0 : e->buffer.length - offset;
  ptl_size_t mlength = std::min<ptl_size_t>(h.length, room);  // R-O2
  if (atomic) {
    ptl_size_t limit = h.op == wire::PortalsOp::atomic ? ni.limits.max_atomic_size
                                                       : ni.limits.max_fetch_atomic_size;
    mlength = std::min(mlength, limit);  // R-L5
    // An entry shorter than the request still takes whole elements only:
    // a fetched tail would otherwise be whatever the bounce slot held.
    mlength -= mlength % element;
  } else {
    mlength = std::min(mlength, ni.limits.max_msg_size);
  }
  std::size_t local = 0;
  const core::Region* seg = contiguous(e->buffer, offset, mlength, &local);
  bool cross = seg == nullptr;
  // A long range across the entry's iovec elements lands in (or leaves
  // from) a staging run of the target's half of the pool.
  bool long_cross = cross && mlength > bounce_stage_max && !atomic;
  if (long_cross && mlength > staging_capacity()) {
    PIER_LOG(warn, "lib",
             "a {} of {} bytes across iovec elements from rank {} exceeds the {} "
             "bytes of staging (PIER_LIB_STAGING_KIB)",
             wire::to_string(h.op), mlength, a.source, staging_capacity());
    release_msg(m);
    ++ni.status[PTL_SR_DROP_COUNT];
    return refuse(a, h, wire::NiFail::dropped);
  }
  m->cross = cross;
  if (uh) ni.unexpected_free.remove(uh);
  if (e->options & PTL_ME_MANAGE_LOCAL) {
    e->local_offset += mlength;  // R-O3
    if (e->min_free != 0 &&
        e->buffer.length - std::min(e->local_offset, e->buffer.length) < e->min_free)
      m->unlink_after = true;  // R-O4
  }
  if (e->options & PTL_ME_USE_ONCE) m->unlink_after = true;
  if (m->unlink_after) {
    (e->list == PTL_PRIORITY_LIST ? pt.priority : pt.overflow).remove(e);
    e->linked = false;
  }

  m->initiator = false;
  m->op = h.op;
  m->ni = &ni;
  m->pt = &pt;
  m->entry = e;
  m->uh = uh;
  m->source = a.source;
  m->cookie = h.cookie;
  m->target_ack = static_cast<ptl_ack_req_t>(h.ack_request);
  m->offset_used = offset;
  m->operand_length = h.operand_length;
  m->length = mlength;
  ++e->pending;
  ++pt.inflight;
  ++ni.inflight;
  if (flow && pt.eq) {
    // Its comm event, and an AUTO_UNLINK if it takes the entry away.
    const bool comm = !(e->options & PTL_ME_EVENT_COMM_DISABLE);
    const bool unlink = m->unlink_after && !(e->options & PTL_ME_EVENT_UNLINK_DISABLE);
    m->eq_held = (comm ? 1u : 0u) + (unlink ? 1u : 0u);
    m->eq_held_handle = pt.eq->handle;
    pt.eq->owed += m->eq_held;  // (0: nothing to hold)
  }
  ptl_event_t& ev = m->ev;
  ev.type = comm_kind(h.op);
  ev.start = e->buffer.address(offset);
  ev.user_ptr = e->user_ptr;
  ev.hdr_data = h.hdr_data;
  ev.match_bits = h.match_bits;
  ev.rlength = h.length;
  ev.mlength = mlength;
  ev.remote_offset = h.remote_offset;
  ev.initiator = initiator;
  ev.uid = h.uid;
  ev.pt_index = h.pt_index;
  ev.ptl_list = e->list;
  ev.ni_fail_type = PTL_NI_OK;
  ev.atomic_operation = 0;
  ev.atomic_type = 0;
  if (atomic) {
    ev.atomic_operation = static_cast<ptl_op_t>(static_cast<unsigned>(h.atomic_op) - 1);
    ev.atomic_type = static_cast<ptl_datatype_t>(static_cast<unsigned>(h.atomic_type) - 1);
  }
  if (uh) {
    // R-U2: the header joins the unexpected list now, in arrival order,
    // though its data may land after that of later messages.
    uh->entry = e;
    uh->kind = ev.type;
    uh->initiator = ev.initiator;
    uh->uid = ev.uid;
    uh->match_bits = ev.match_bits;
    uh->hdr_data = ev.hdr_data;
    uh->rlength = ev.rlength;
    uh->mlength = ev.mlength;
    uh->remote_offset = ev.remote_offset;
    uh->offset_used = offset;
    uh->atomic_op = ev.atomic_operation;
    uh->atomic_type = ev.atomic_type;
    uh->complete = false;
    pt.unexpected.push_back(uh);
    ++e->uh_refs;
  }

  if (long_cross && (!stage_waiting_.empty() || !stage_acquire(m, mlength, true))) {
    // No run free now: the message is matched and waits, in order, for
    // target staging to be released (a put's data stays in the core until
    // then, a get's reply leaves then).
    m->phase = h.op == wire::PortalsOp::put ? Phase::target_recv : Phase::target_send;
    if (h.op == wire::PortalsOp::put) {
      m->parked = a.handle;
      m->parked_rlen = a.length;
    } else {
      (void)core_.recv(a.handle, nullptr, nullptr, 0, 0, 0);
    }
    stage_waiting_.push_back(m);
    return true;
  }
  Status s = Status::ok;
  // R-L4, write after write and write after read: a small put behind
  // writes still to be made (an atomic or a staged put, applied when they
  // complete; a fetching atomic also reads then) is held in the bounce slot
  // and written at its own completion, in arrival order. Both limits count:
  // an NI may order reads further than writes.
  m->held_put = h.op == wire::PortalsOp::put && !cross && late_writes_ > 0 &&
                mlength <= std::max(ni.limits.max_waw_ordered_size, ni.limits.max_war_ordered_size);
  m->late_write = atomic || m->held_put || (h.op == wire::PortalsOp::put && cross);
  if (m->late_write) ++late_writes_;
  if (h.op == wire::PortalsOp::put) {
    m->phase = Phase::target_recv;
    if (cross || m->held_put)
      s = core_.recv(a.handle, m, staged_region(m), staged_offset(m), mlength, a.length);
    else
      s = core_.recv(a.handle, m, seg, local, mlength, a.length);
  } else if (h.op == wire::PortalsOp::get) {
    (void)core_.recv(a.handle, nullptr, nullptr, 0, 0, 0);
    wire::PortalsHeader r;
    r.op = wire::PortalsOp::reply;
    r.matching = h.matching;
    r.addressing = h.addressing;
    r.pt_index = h.pt_index;
    r.cookie = h.cookie;
    r.length = h.length;
    r.mlength = mlength;
    r.remote_offset = offset;
    r.hdr_data = e->list;
    m->phase = Phase::target_send;
    if (cross || mlength <= ni.limits.max_war_ordered_size) {
      // Gather the iovec range into the bounce slot or the staging run; and
      // a small get's bytes are taken now (R-L4, write after read): its
      // answer may wait for room while a later put lands.
      e->buffer.copy_out(offset, mlength, staged(m));
      s = send_answer(a.source, r, m, staged_region(m), staged_offset(m), mlength);
    } else {
      s = send_answer(a.source, r, m, seg, local, mlength);
    }
  } else {
    // Atomics land in the bounce slot and are applied when complete.
    m->phase = Phase::target_recv;
    std::size_t n = std::min<std::size_t>(a.length, h.operand_length + mlength);
    s = core_.recv(a.handle, m, &bounce_region_, bounce_offset(m), n, a.length);
  }
  if (s != Status::ok) {
    PIER_LOG(warn, "lib", "cannot take a {} from rank {}: {}", wire::to_string(h.op), a.source,
             to_string(s));
    complete_target(m, PTL_NI_UNDELIVERABLE);
  }
  return true;
}

bool Lib::put_now(const core::Arrival& a, const wire::PortalsHeader& h, Ni& ni, Pt& pt, Entry& e,
                  const ptl_process_t& initiator) noexcept {
  const ptl_size_t offset = h.remote_offset;
  const ptl_size_t room = offset > e.buffer.length ? 0 : e.buffer.length - offset;
  const ptl_size_t mlength = std::min(std::min<ptl_size_t>(h.length, room), ni.limits.max_msg_size);
  std::size_t local = 0;
  const core::Region* seg = contiguous(e.buffer, offset, mlength, &local);
  if (seg == nullptr) return false;
  ptl_ni_fail_t fail = PTL_NI_OK;
  if (Status s = core_.recv(a.handle, nullptr, seg, local, mlength, a.length); s != Status::ok) {
    PIER_LOG(warn, "lib", "cannot take a put from rank {}: {}", a.source, to_string(s));
    (void)core_.recv(a.handle, nullptr, nullptr, 0, 0, 0);  // clean it off the wire
    fail = PTL_NI_UNDELIVERABLE;
  }
  const bool ok = fail == PTL_NI_OK;
  // complete_target()'s order: the event, the count, the ack.
  if (!(e.options & PTL_ME_EVENT_COMM_DISABLE) &&
      !(ok && (e.options & PTL_ME_EVENT_SUCCESS_DISABLE))) {
    ptl_event_t ev{};
    ev.type = PTL_EVENT_PUT;
    ev.start = e.buffer.address(offset);
    ev.user_ptr = e.user_ptr;
    ev.hdr_data = h.hdr_data;
    ev.match_bits = h.match_bits;
    ev.rlength = h.length;
    ev.mlength = mlength;
    ev.remote_offset = h.remote_offset;
    ev.initiator = initiator;
    ev.uid = h.uid;
    ev.pt_index = h.pt_index;
    ev.ptl_list = e.list;
    ev.ni_fail_type = fail;
    post(pt.eq, ev);  // R-E2
  }
  const ptl_list_t list = e.list;
  // A count may run triggered operations (an unlink of `e` among them):
  // nothing of the entry is read after it.
  if (e.ct && (e.options & PTL_ME_EVENT_CT_COMM))
    count(e.ct, ok, mlength, e.options & PTL_ME_EVENT_CT_BYTES);
  const auto ack = static_cast<ptl_ack_req_t>(h.ack_request);
  if (ack != PTL_NO_ACK_REQ && ok) {
    wire::PortalsHeader r;
    r.op = answer_op(h.op, ack);
    r.matching = ni.matching ? wire::Matching::matching : wire::Matching::non_matching;
    r.addressing = ni.logical ? wire::Addressing::logical : wire::Addressing::physical;
    r.ni_fail = static_cast<wire::NiFail>(fail);
    r.pt_index = h.pt_index;
    r.cookie = h.cookie;
    r.length = h.length;
    r.mlength = mlength;
    r.remote_offset = offset;
    r.hdr_data = list;
    if (Status s = send_answer(a.source, r, nullptr, nullptr, 0, 0); s != Status::ok)
      PIER_LOG(warn, "lib", "cannot ack rank {}: {}", a.source, to_string(s));
  }
  return true;
}

void Lib::stage_retry() noexcept {
  if (in_stage_retry_) return;  // a resume released staging: the loop below goes on
  in_stage_retry_ = true;
  while (Msg* m = stage_waiting_.head) {
    if (!stage_acquire(m, m->length, true)) break;
    stage_waiting_.remove(m);
    resume_staged(m);
  }
  in_stage_retry_ = false;
}

void Lib::resume_staged(Msg* m) noexcept {
  Entry* e = m->entry;
  Status s = Status::ok;
  if (m->op == wire::PortalsOp::put) {
    core::Incoming* in = m->parked;
    m->parked = nullptr;
    s = core_.recv(in, m, staged_region(m), staged_offset(m), m->length, m->parked_rlen);
  } else {
    e->buffer.copy_out(m->offset_used, m->length, staged(m));
    wire::PortalsHeader r;
    r.op = wire::PortalsOp::reply;
    r.matching = m->ni->matching ? wire::Matching::matching : wire::Matching::non_matching;
    r.addressing = m->ni->logical ? wire::Addressing::logical : wire::Addressing::physical;
    r.pt_index = m->ev.pt_index;
    r.cookie = m->cookie;
    r.length = m->ev.rlength;
    r.mlength = m->length;
    r.remote_offset = m->offset_used;
    r.hdr_data = e->list;
    s = send_answer(m->source, r, m, staged_region(m), staged_offset(m), m->length);
  }
  if (s != Status::ok) {
    PIER_LOG(warn, "lib", "cannot take a staged {} from rank {}: {}", wire::to_string(m->op),
             m->source, to_string(s));
    complete_target(m, PTL_NI_UNDELIVERABLE);
  }
}

void Lib::finish_late_write(Msg* m) noexcept {
  Entry* e = m->entry;
  if (m->op == wire::PortalsOp::put) {
    std::size_t local = 0;
    const core::Region* seg = contiguous(e->buffer, m->offset_used, m->length, &local);
    if (m->held_put && seg != nullptr) {
      (void)core_.write(*seg, local, {staged(m), static_cast<std::size_t>(m->length)});
    } else if (m->length > 0 && seg == nullptr) {
      // Staged iovec data: scatter it into each element in turn through
      // the core's write path.
      for (std::size_t done = 0; done < m->length;) {
        std::size_t i = e->buffer.segment_at(m->offset_used + done);
        std::size_t in = m->offset_used + done - e->buffer.starts[i];
        std::size_t n = std::min<std::size_t>(m->length - done, e->buffer.segments[i].extent - in);
        (void)core_.write(e->buffer.segments[i], in, {staged(m) + done, n});
        done += n;
      }
    }
    return complete_target(m, PTL_NI_OK);
  }
  // Atomic: operand, then data, in the bounce slot; old values go after.
  std::size_t local = 0;
  const core::Region* seg = contiguous(e->buffer, m->offset_used, m->length, &local);
  std::byte* slot = bounce(m);
  std::byte* old = slot + wire::max_operand_length + max_atomic_bytes;
  bool fetch = m->op != wire::PortalsOp::atomic;
  const std::byte* operand = m->operand_length ? slot : nullptr;
  if (m->length > 0 && seg) {
    (void)apply_atomic(m->ev.atomic_operation, m->ev.atomic_type, seg->base + local,
                       slot + m->operand_length, operand, m->length, fetch ? old : nullptr);
  } else if (m->length > 0) {
    // A range across iovec elements: each element of the datatype inside
    // one iovec element is updated in place (coherently, where the host can);
    // one that straddles two is gathered, operated on, and scattered back
    // (the LIB applies one atomic at a time, so no Portals atomic sees it
    // half done; the host's own atomics cannot reach it as one word anyway).
    const std::size_t size = datatype_size(m->ev.atomic_type);
    for (std::size_t done = 0; size > 0 && done + size <= m->length; done += size) {
      std::size_t at_local = 0;
      const core::Region* one = contiguous(e->buffer, m->offset_used + done, size, &at_local);
      std::array<std::byte, max_element_bytes> gathered;
      std::byte* at = one ? one->base + at_local : gathered.data();
      if (!one) e->buffer.copy_out(m->offset_used + done, size, gathered.data());
      (void)apply_atomic(m->ev.atomic_operation, m->ev.atomic_type, at,
                         slot + m->operand_length + done, operand, size,
                         fetch ? old + done : nullptr);
      if (!one) e->buffer.copy_in(m->offset_used + done, size, gathered.data());
    }
  }
  if (!fetch) return complete_target(m, PTL_NI_OK);
  wire::PortalsHeader r;
  r.op = wire::PortalsOp::reply;
  r.matching = e->ni->matching ? wire::Matching::matching : wire::Matching::non_matching;
  r.addressing = e->ni->logical ? wire::Addressing::logical : wire::Addressing::physical;
  r.pt_index = m->ev.pt_index;
  r.cookie = m->cookie;
  r.length = m->ev.rlength;
  r.mlength = m->length;
  r.remote_offset = m->offset_used;
  r.hdr_data = e->list;
  m->phase = Phase::target_send;
  Status s = send_answer(m->source, r, m, &bounce_region_,
                         bounce_offset(m) + wire::max_operand_length + max_atomic_bytes, r.mlength);
  if (s != Status::ok) complete_target(m, PTL_NI_UNDELIVERABLE);
}

void Lib::complete_target(Msg* m, ptl_ni_fail_t fail) noexcept {
  Entry* e = m->entry;
  Pt& pt = *m->pt;
  Ni& ni = *m->ni;
  m->ev.ni_fail_type = fail;
  bool ok = fail == PTL_NI_OK;
  if (m->late_write) {
    m->late_write = false;
    if (late_writes_ > 0) --late_writes_;
  }
  if (m->eq_held > 0) {
    if (Eq* q = ni.eqs->lookup(m->eq_held_handle))
      q->owed -= std::min<std::size_t>(q->owed, m->eq_held);
    m->eq_held = 0;
  }
  bool comm_off = (e->options & PTL_ME_EVENT_COMM_DISABLE) ||
                  (ok && (e->options & PTL_ME_EVENT_SUCCESS_DISABLE));
  if (!comm_off) post(pt.eq, m->ev);  // R-E2
  if (e->ct && (e->options & PTL_ME_EVENT_CT_COMM))
    count(e->ct, ok, m->ev.mlength, e->options & PTL_ME_EVENT_CT_BYTES);
  if (Unexpected* u = m->uh) {
    m->uh = nullptr;
    if (u->claimed) {
      finish_claim(ni, pt, u, fail);
    } else if (ok) {
      u->complete = true;
    } else {
      // Nothing landed: the header was never there (the entry's pending
      // count still holds it, so it is not freed under us).
      pt.unexpected.remove(u);
      *u = Unexpected{};
      ni.unexpected_free.push_back(u);
      if (e->uh_refs > 0) --e->uh_refs;
    }
  }
  // Puts and atomics answer now (gets and fetches answered with their reply).
  if (m->op == wire::PortalsOp::put || m->op == wire::PortalsOp::atomic) {
    if (m->target_ack != PTL_NO_ACK_REQ && fail != PTL_NI_UNDELIVERABLE) {
      wire::PortalsHeader r;
      r.op = answer_op(m->op, m->target_ack);
      r.matching = ni.matching ? wire::Matching::matching : wire::Matching::non_matching;
      r.addressing = ni.logical ? wire::Addressing::logical : wire::Addressing::physical;
      r.ni_fail = static_cast<wire::NiFail>(fail);
      r.pt_index = m->ev.pt_index;
      r.cookie = m->cookie;
      r.length = m->ev.rlength;
      r.mlength = m->ev.mlength;
      r.remote_offset = m->offset_used;
      r.hdr_data = e->list;
      if (Status s = send_answer(m->source, r, nullptr, nullptr, 0, 0); s != Status::ok)
        PIER_LOG(warn, "lib", "cannot ack rank {}: {}", m->source, to_string(s));
    }
  }
  --e->pending;
  if (--pt.inflight == 0 && pt.disabled_owed) post_pt_disabled(pt, m->ev.pt_index);
  // R-E4: AUTO_UNLINK after the comm events, of every message in flight
  // into the entry (a rendezvous that matched earlier may land later).
  if (m->unlink_after) e->unlink_owed = true;
  if (e->unlink_owed && e->pending == 0) {
    e->unlink_owed = false;
    entry_auto_unlink(e, true);
  } else {
    maybe_auto_free(e);
  }
  release_msg(m);
}

}  // namespace pier::lib
