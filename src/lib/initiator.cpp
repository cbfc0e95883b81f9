// pier lib: the initiator side: argument checks (§5.12, §5.13), the request
// on the wire, SEND at lib_finalize, then the ack or reply (R-E6..R-E8,
// R-K*). SEND always comes first: an answer that overtakes the request's
// finalize waits in the message state.
#include <cstring>

#include "base/log.hpp"
#include "lib/atomic.hpp"
#include "lib/lib.hpp"

namespace pier::lib {

Msg* Lib::new_msg(bool for_target) noexcept {
  // Initiators leave the last quarter of the pool to arrivals: a request
  // that finds no state is dropped, so in one process (self) a burst of
  // local puts would otherwise starve the very arrivals it sends, and data
  // already accepted by PtlPut would be lost. An initiator gets
  // PTL_NO_SPACE instead and retries after progress.
  if (!for_target && msgs_.capacity() - msgs_.outstanding() <= msgs_.capacity() / 4) return nullptr;
  if (bounce_free_count_ == 0) return nullptr;
  Msg* m = msgs_.acquire();
  if (!m) return nullptr;
  m->bounce = bounce_free_[--bounce_free_count_];
  return m;
}

bool Lib::stage_acquire(Msg* m, std::size_t bytes, bool target) noexcept {
  // First fit over the block bitmap: a run of free blocks long enough, in
  // the initiator's half or the target's. Halves, so that in one process
  // (self) requests holding staging never starve the targets they wait for.
  const std::size_t half = stage_blocks_ / 2;
  const std::size_t begin = target ? half : 0, end = target ? 2 * half : half;
  std::size_t need = (bytes + stage_block - 1) / stage_block;
  if (need == 0 || need > half) return false;
  std::size_t run = 0;
  for (std::size_t i = begin; i < end; ++i) {
    if (i % 64 == 0 && i + 64 <= end && stage_used_[i / 64] == ~std::uint64_t{0}) {
      run = 0;
      i += 63;
      continue;
    }
    if ((stage_used_[i / 64] >> (i % 64)) & 1u) {
      run = 0;
      continue;
    }
    if (++run < need) continue;
    std::size_t first = i + 1 - need;
    for (std::size_t k = first; k <= i; ++k) stage_used_[k / 64] |= std::uint64_t{1} << (k % 64);
    m->stage = static_cast<std::uint32_t>(first);
    m->stage_count = static_cast<std::uint32_t>(need);
    return true;
  }
  return false;
}

void Lib::stage_release(Msg* m) noexcept {
  for (std::size_t k = m->stage; k < std::size_t{m->stage} + m->stage_count; ++k)
    stage_used_[k / 64] &= ~(std::uint64_t{1} << (k % 64));
  m->stage_count = 0;
}

void Lib::peer_failed(core::Rank peer) noexcept {
  // The core finalized every operation it held for `peer` just before: what
  // still waits here is an ack or reply that can no longer come. Those end
  // with PTL_NI_UNDELIVERABLE now instead of waiting for ever.
  for (Msg* m = awaiting_.head; m;) {
    Msg* next = m->next;
    if (m->peer == peer) {
      stop_awaiting(m);
      m->answered = true;
      m->answer_fail = PTL_NI_UNDELIVERABLE;
      m->answer_mlength = 0;
      if (m->sent) deliver_answer(m);
    }
    m = next;
  }
  if (parked_retry_due_) retry_parked();  // states freed above
}

void Lib::release_msg(Msg* m) noexcept {
  stop_awaiting(m);
  Ni* ni = m->ni;
  if (m->md) --m->md->pending;
  if (m->get_md) --m->get_md->pending;
  // Never full while a message holds a slot; the test keeps a release made
  // twice by a bug (which the pool ignores) inside the array.
  if (bounce_free_count_ < bounce_free_.size()) bounce_free_[bounce_free_count_++] = m->bounce;
  if (m->stage_count) return release_staged(m, ni);
  msgs_.release(m);
  if (parked_count_ > 0) parked_retry_due_ = true;
  if (ni && --ni->inflight == 0 && ni->dying) return release_last(ni);
  if (stalled_count_ > 0) stalled_retry();
}

void Lib::release_staged(Msg* m, Ni* ni) noexcept {
  const bool target_staging = m->stage >= stage_blocks_ / 2;
  stage_release(m);
  msgs_.release(m);
  if (parked_count_ > 0) parked_retry_due_ = true;
  if (target_staging && !stage_waiting_.empty()) stage_retry();
  if (ni && --ni->inflight == 0 && ni->dying) return release_last(ni);
  if (stalled_count_ > 0) stalled_retry();
}

void Lib::release_last(Ni* ni) noexcept {
  ni->dying = false;
  destroy_ni(*ni);
  if (stalled_count_ > 0) stalled_retry();
}

namespace {
// The reply's data may land before the request's own finalize runs, so the
// two completions of one initiator message carry different cookies: the
// message, and the message with its low bit set (message states are
// aligned, the bit is free).
void* reply_cookie(Msg* m) {
  return reinterpret_cast<std::byte*>(m) + 1;
}
}  // namespace

void Lib::send_room() noexcept {
  flush_deferred();
  if (parked_retry_due_) retry_parked();
}

void Lib::lib_finalize(void* cookie, Status status) noexcept {
  flush_deferred();  // a finalize just gave the core room back
  finalize(cookie, status);
  if (parked_retry_due_) retry_parked();  // it may have freed a message state
}

void Lib::finalize(void* cookie, Status status) noexcept {
  auto bits = reinterpret_cast<std::uintptr_t>(cookie);
  auto* m = reinterpret_cast<Msg*>(bits & ~std::uintptr_t{1});
  if (!m->initiator) return finish_target(m, status);
  if (bits & 1) {
    m->answered = true;
    if (status != Status::ok) {
      m->answer_fail = PTL_NI_UNDELIVERABLE;
      m->answer_mlength = 0;  // R-E8: the data did not land
    }
    if (m->sent) deliver_answer(m);
    return;
  }
  m->sent = true;
  m->send_fail = status == Status::ok ? PTL_NI_OK : PTL_NI_UNDELIVERABLE;
  finish_initiator(m);
}

int Lib::check_move(const Move& mv, Checked& out) noexcept {
  Ni& ni = nis_[ni_of(mv.md)];
  if (ni.refs == 0) return PTL_ARG_INVALID;
  Md* md = ni.mds->lookup(mv.md);
  if (!md) return PTL_ARG_INVALID;
  out.ni = &ni;
  out.md = md;
  const auto& l = ni.limits;
  // The API side's block is checked as wire bytes would be: a NAL may carry
  // it from another protection domain, and the header forms written from
  // it (write_tiny, write_compact_send) take op, ack_req and operand as
  // they are.
  if (mv.op < wire::PortalsOp::put || mv.op > wire::PortalsOp::swap) return PTL_ARG_INVALID;
  if (mv.ack_req > PTL_OC_ACK_REQ) return PTL_ARG_INVALID;
  const std::uint32_t operand = mv.op == wire::PortalsOp::swap && mv.atomic_op != PTL_SWAP
                                    ? static_cast<std::uint32_t>(datatype_size(mv.atomic_type))
                                    : 0;
  if (mv.operand_length != operand) return PTL_ARG_INVALID;
  bool is_get = mv.op == wire::PortalsOp::get;
  bool fetch = mv.op == wire::PortalsOp::fetch_atomic || mv.op == wire::PortalsOp::swap;
  if (!md->buffer.holds(mv.local_offset, mv.length)) return PTL_ARG_INVALID;
  if (mv.length > l.max_msg_size) return PTL_ARG_INVALID;  // R-L1
  out.get_md = nullptr;
  if (fetch) {
    Md* g = ni.mds->lookup(mv.get_md);  // same NI: the handle names it
    if (!g) return PTL_ARG_INVALID;
    if (!g->buffer.holds(mv.local_get_offset, mv.length)) return PTL_ARG_INVALID;
    out.get_md = g;
  }
  if (!is_get && !fetch) {
    if (mv.ack_req == PTL_ACK_REQ && !md->eq) return PTL_ARG_INVALID;
    if (mv.ack_req == PTL_CT_ACK_REQ && !md->ct) return PTL_ARG_INVALID;
    if ((md->desc.options & PTL_MD_VOLATILE) && mv.length > l.max_volatile_size)
      return PTL_ARG_INVALID;  // R-L3
    if ((md->desc.options & PTL_MD_UNRELIABLE) && mv.ack_req == PTL_ACK_REQ) return PTL_ARG_INVALID;
  }
  if (wire::is_atomic(mv.op)) {
    AtomicFn fn = mv.op == wire::PortalsOp::atomic         ? AtomicFn::atomic
                  : mv.op == wire::PortalsOp::fetch_atomic ? AtomicFn::fetch_atomic
                                                           : AtomicFn::swap;
    if (!atomic_legal(fn, mv.atomic_op, mv.atomic_type)) return PTL_ARG_INVALID;  // R-A1
    ptl_size_t limit = fn == AtomicFn::atomic ? l.max_atomic_size : l.max_fetch_atomic_size;
    if (mv.length > limit) return PTL_ARG_INVALID;  // R-L2
    std::size_t element = datatype_size(mv.atomic_type);
    // Whole elements only (the target refuses a part of one).
    if (mv.length % element != 0) return PTL_ARG_INVALID;
    if (mv.atomic_op >= PTL_CSWAP && mv.length > element) return PTL_ARG_INVALID;
  }
  if (!rank_of(ni, mv.target, out.peer)) return PTL_ARG_INVALID;
  // An iovec range that crosses elements is staged: through the message's
  // bounce slot up to bounce_stage_max bytes, else through the staging
  // pool, which must be able to hold it.
  if (mv.length > bounce_stage_max && mv.length > staging_capacity() &&
      md->buffer.crosses(mv.local_offset, mv.length))
    return PTL_ARG_INVALID;
  return PTL_OK;
}

int Lib::move(const Call& c, Reply&) noexcept {
  Checked k;
  if (int rc = check_move(c.move, k); rc != PTL_OK) return rc;
  if (!c.triggered) return launch(c.move, k);
  Ct* ct = k.ni->cts->lookup(c.trig_ct);
  if (!ct) return PTL_ARG_INVALID;
  Trig t;
  t.kind = TrigKind::move;
  t.move = c.move;
  return add_trigger(ct, c.threshold, t);
}

int Lib::launch(const Move& mv, const Checked& k) noexcept {
  // Past half the answer queue only messages already accepted may add to it
  // (an ack each, which holds no state): a request waits, as for a state.
  if (answers_backed_up()) return PTL_NO_SPACE;
  // What check_move() found, not looked up again.
  Ni* ni = k.ni;
  Md* md = k.md;
  Md* get_md = k.get_md;
  bool fetch = mv.op == wire::PortalsOp::fetch_atomic || mv.op == wire::PortalsOp::swap;
  core::Rank peer = k.peer;
  wire::PortalsHeader h;
  h.op = mv.op;
  h.ack_request = fetch || mv.op == wire::PortalsOp::get
                      ? wire::AckRequest::none
                      : static_cast<wire::AckRequest>(mv.ack_req);
  h.matching = ni->matching ? wire::Matching::matching : wire::Matching::non_matching;
  h.addressing = ni->logical ? wire::Addressing::logical : wire::Addressing::physical;
  ptl_process_t me = my_id(*ni);
  h.initiator_nid = ni->logical ? me.rank : me.phys.nid;
  h.initiator_pid = ni->logical ? 0 : me.phys.pid;
  h.target_nid = ni->logical ? mv.target.rank : mv.target.phys.nid;
  h.target_pid = ni->logical ? 0 : mv.target.phys.pid;
  h.uid = uid_;
  h.pt_index = mv.pt_index;
  h.match_bits = mv.match_bits;
  h.hdr_data = mv.hdr_data;
  h.remote_offset = mv.remote_offset;
  h.length = mv.length;
  // A put nobody answers needs no message state when the core copies it
  // out at once; only with nothing of the NI in flight (whose SEND events
  // come first) and nothing deferred (which leaves first).
  if (mv.op == wire::PortalsOp::put && mv.ack_req == PTL_NO_ACK_REQ && ni->inflight == 0 &&
      deferred_count_ == 0 && put_copied(mv, k, h))
    return PTL_OK;
  Msg* m = new_msg(false);
  if (!m) return PTL_NO_SPACE;
  m->initiator = true;
  m->phase = Phase::init_send;
  m->op = mv.op;
  m->ni = ni;
  m->md = mv.op == wire::PortalsOp::get ? nullptr : md;
  m->get_md = mv.op == wire::PortalsOp::get ? md : get_md;
  m->user_ptr = mv.user_ptr;
  m->ack_req = mv.ack_req;
  m->length = mv.length;
  m->local_get_offset = mv.op == wire::PortalsOp::get ? mv.local_offset : mv.local_get_offset;
  m->want_answer = mv.op == wire::PortalsOp::get || fetch || mv.ack_req != PTL_NO_ACK_REQ;
  if (m->md) ++m->md->pending;
  if (m->get_md) ++m->get_md->pending;
  ++ni->inflight;
  m->peer = peer;
  if (m->want_answer) {
    awaiting_.push_back(m);
    m->awaiting = true;
  }
  // A long range that crosses elements of the MD's iovec is staged: a put
  // gathers it below, a get's reply lands there before it is scattered.
  bool put_data = mv.op == wire::PortalsOp::put && mv.length > 0;
  bool volatile_md = md->desc.options & PTL_MD_VOLATILE;
  if ((put_data || mv.op == wire::PortalsOp::get) && mv.length > bounce_stage_max &&
      md->buffer.crosses(mv.local_offset, mv.length) && !stage_acquire(m, mv.length, false)) {
    PIER_LOG(debug, "lib", "no staging run of {} bytes free now", mv.length);
    release_msg(m);
    return PTL_NO_SPACE;
  }

  h.cookie = static_cast<std::uint64_t>(msgs_.handle_of(m));
  const core::Region* region = nullptr;
  std::size_t offset = 0, length = 0;
  if (wire::is_atomic(mv.op)) {
    h.atomic_op = static_cast<wire::AtomicOp>(mv.atomic_op + 1);
    h.atomic_type = static_cast<wire::AtomicType>(mv.atomic_type + 1);
    h.operand_length = mv.operand_length;
    // The operand and the data travel as one payload from the bounce slot;
    // copying now also makes the MD reusable at once.
    std::memcpy(bounce(m), mv.operand, mv.operand_length);
    md->buffer.copy_out(mv.local_offset, mv.length, bounce(m) + mv.operand_length);
    region = &bounce_region_;
    offset = bounce_offset(m);
    length = mv.operand_length + mv.length;
  } else if (put_data) {
    std::size_t i = md->buffer.segment_at(mv.local_offset);
    std::size_t in = mv.local_offset - md->buffer.starts[i];
    if (!volatile_md && mv.length <= md->buffer.segments[i].extent - in) {
      region = &md->buffer.segments[i];
      offset = in;
    } else {
      // Crossing (or volatile, at most max_volatile_size): the bounce slot,
      // or the staging run taken above.
      md->buffer.copy_out(mv.local_offset, mv.length, staged(m));
      region = staged_region(m);
      offset = staged_offset(m);
    }
    length = mv.length;
  }
  // No room in the core now: the request waits with the answers and leaves
  // from a later progress pass; the call still succeeds (it is queued).
  Status s = send_answer(peer, h, m, region, offset, length);
  if (s == Status::no_resource) {
    release_msg(m);
    return PTL_NO_SPACE;
  }
  if (s != Status::ok) {
    // The request never left: SEND (and the answer) fail as undeliverable.
    PIER_LOG(debug, "lib", "cannot send a {} to rank {}: {}", wire::to_string(mv.op), peer,
             to_string(s));
    m->sent = true;
    m->send_fail = PTL_NI_UNDELIVERABLE;
    finish_initiator(m);
  }
  return PTL_OK;
}

bool Lib::put_copied(const Move& mv, const Checked& k, const wire::PortalsHeader& h) noexcept {
  Md* md = k.md;
  const core::Region* region = nullptr;
  std::size_t offset = 0;
  if (mv.length > 0) {
    const std::size_t i = md->buffer.segment_at(mv.local_offset);
    const std::size_t in = mv.local_offset - md->buffer.starts[i];
    if (mv.length > md->buffer.segments[i].extent - in) return false;  // staged: launch()
    region = &md->buffer.segments[i];
    offset = in;
  }
  if (send_header(k.peer, h, nullptr, region, offset, mv.length, true) != Status::ok) return false;
  // Sent, and the MD's bytes copied: finish_initiator()'s SEND and count.
  const unsigned o = md->desc.options;
  if (md->eq && !(o & (PTL_MD_EVENT_SEND_DISABLE | PTL_MD_EVENT_SUCCESS_DISABLE))) {
    ptl_event_t ev{};
    ev.type = PTL_EVENT_SEND;
    ev.user_ptr = mv.user_ptr;
    ev.ni_fail_type = PTL_NI_OK;
    ev.mlength = mv.length;
    post(md->eq, ev);
  }
  if (md->ct && (o & PTL_MD_EVENT_CT_SEND))
    count(md->ct, true, mv.length, o & PTL_MD_EVENT_CT_BYTES);  // R-C2
  return true;
}

void Lib::finish_initiator(Msg* m) noexcept {
  bool ok = m->send_fail == PTL_NI_OK;
  if (m->op != wire::PortalsOp::get) {
    Md* md = m->md;
    unsigned o = md->desc.options;
    bool quiet = ok && (o & (PTL_MD_EVENT_SEND_DISABLE | PTL_MD_EVENT_SUCCESS_DISABLE));
    if (!quiet && md->eq) {
      ptl_event_t ev{};
      ev.type = PTL_EVENT_SEND;
      ev.user_ptr = m->user_ptr;
      ev.ni_fail_type = m->send_fail;
      ev.mlength = ok ? m->length : 0;
      post(md->eq, ev);
    }
    if (md->ct && (o & PTL_MD_EVENT_CT_SEND))
      count(md->ct, ok, m->length, o & PTL_MD_EVENT_CT_BYTES);  // R-C2: rlength
  }
  if (!m->want_answer) return release_msg(m);
  if (!ok && !m->answered && m->phase != Phase::init_reply) {
    // No answer will come for a request that never left. (A reply already
    // landing ends by its own finalize, which the core still owes: making
    // one up here released the message under that finalize.)
    m->answered = true;
    m->answer_fail = PTL_NI_UNDELIVERABLE;
    m->answer_mlength = 0;
  }
  if (m->answered) deliver_answer(m);
}

void Lib::parse_answer(const core::Arrival& a, const wire::PortalsHeader& h) noexcept {
  auto handle = static_cast<base::Pool<Msg>::Handle>(static_cast<std::uint32_t>(h.cookie));
  Msg* m = h.cookie > 0xffffffffu ? nullptr : msgs_.lookup(handle);
  if (!m || !m->initiator || !m->want_answer || m->answered || m->phase != Phase::init_send ||
      m->peer != a.source) {
    PIER_LOG(warn, "lib", "answer from rank {} for no operation, dropped", a.source);
    (void)core_.recv(a.handle, nullptr, nullptr, 0, 0, 0);
    return;
  }
  if (h.op != answer_op(m->op, m->ack_req)) {
    // A reply to a put has no get MD to land in; an ack would end a get
    // without its data. The operation keeps waiting for its own answer.
    PIER_LOG(warn, "lib", "{} from rank {} answers a {}, dropped", wire::to_string(h.op), a.source,
             wire::to_string(m->op));
    (void)core_.recv(a.handle, nullptr, nullptr, 0, 0, 0);
    return;
  }
  stop_awaiting(m);
  m->answer_fail = static_cast<ptl_ni_fail_t>(h.ni_fail);
  m->answer_offset = h.remote_offset;
  m->answer_list = h.hdr_data == PTL_OVERFLOW_LIST ? PTL_OVERFLOW_LIST : PTL_PRIORITY_LIST;
  m->answer_mlength = m->answer_fail == PTL_NI_OK ? std::min<ptl_size_t>(h.mlength, m->length) : 0;
  // R-E8: a reply reports what it carried, whatever its header claims.
  if (h.op == wire::PortalsOp::reply)
    m->answer_mlength = std::min<ptl_size_t>(m->answer_mlength, a.length);
  if (h.op == wire::PortalsOp::reply && m->answer_mlength > 0 && a.length > 0) {
    Buffer& b = m->get_md->buffer;
    std::size_t n = std::min<std::size_t>(m->answer_mlength, a.length);
    m->answer_mlength = n;
    std::size_t i = b.segment_at(m->local_get_offset);
    std::size_t in = m->local_get_offset - b.starts[i];
    m->phase = Phase::init_reply;
    Status s;
    if (n <= b.segments[i].extent - in) {
      s = core_.recv(a.handle, reply_cookie(m), &b.segments[i], in, n, a.length);
    } else {
      // Crossing the get MD's elements: the bounce slot or the staging run
      // taken when the get started; deliver_answer scatters it.
      s = core_.recv(a.handle, reply_cookie(m), staged_region(m), staged_offset(m), n, a.length);
    }
    if (s != Status::ok) {
      m->phase = Phase::init_send;
      m->answered = true;
      m->answer_fail = PTL_NI_UNDELIVERABLE;
      m->answer_mlength = 0;
      if (m->sent) deliver_answer(m);
    }
    return;
  }
  (void)core_.recv(a.handle, nullptr, nullptr, 0, 0, 0);
  m->answered = true;
  if (m->sent) deliver_answer(m);
}

void Lib::deliver_answer(Msg* m) noexcept {
  bool ok = m->answer_fail == PTL_NI_OK;
  if (m->phase == Phase::init_reply) {
    // A reply staged for an iovec get MD: scatter it now.
    Buffer& b = m->get_md->buffer;
    std::size_t i = b.segment_at(m->local_get_offset);
    std::size_t in = m->local_get_offset - b.starts[i];
    if (ok && m->answer_mlength > b.segments[i].extent - in) {
      for (std::size_t done = 0; done < m->answer_mlength;) {
        std::size_t j = b.segment_at(m->local_get_offset + done);
        std::size_t k = m->local_get_offset + done - b.starts[j];
        std::size_t n = std::min<std::size_t>(m->answer_mlength - done, b.segments[j].extent - k);
        (void)core_.write(b.segments[j], k, {staged(m) + done, n});
        done += n;
      }
    }
  }
  ptl_event_t ev{};
  ev.user_ptr = m->user_ptr;
  ev.ni_fail_type = m->answer_fail;
  ev.mlength = m->answer_mlength;
  ev.remote_offset = m->answer_offset;
  ev.ptl_list = m->answer_list;
  bool reply = m->op == wire::PortalsOp::get || m->op == wire::PortalsOp::fetch_atomic ||
               m->op == wire::PortalsOp::swap;
  if (reply) {
    Md* g = m->get_md;
    unsigned o = g->desc.options;
    ev.type = PTL_EVENT_REPLY;
    if (g->eq && !(ok && (o & PTL_MD_EVENT_SUCCESS_DISABLE))) post(g->eq, ev);
    if (g->ct && (o & PTL_MD_EVENT_CT_REPLY))
      count(g->ct, ok, m->answer_mlength, o & PTL_MD_EVENT_CT_BYTES);
  } else {
    Md* md = m->md;
    unsigned o = md->desc.options;
    if (m->ack_req == PTL_ACK_REQ && md->eq && !(ok && (o & PTL_MD_EVENT_SUCCESS_DISABLE))) {
      ev.type = PTL_EVENT_ACK;
      post(md->eq, ev);
    }
    if (md->ct && (o & PTL_MD_EVENT_CT_ACK)) {
      // R-K3: an operation-completed ack counts operations, never bytes.
      bool bytes = (o & PTL_MD_EVENT_CT_BYTES) && m->ack_req != PTL_OC_ACK_REQ;
      count(md->ct, ok, m->answer_mlength, bytes);
    }
  }
  release_msg(m);
}

}  // namespace pier::lib
