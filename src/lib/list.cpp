// pier lib: list entries (append, unlink, search), the match rule, and the
// unexpected headers that priority appends and searches consume (R-U*).
#include "base/log.hpp"
#include "lib/lib.hpp"

namespace pier::lib {

namespace {
ptl_event_kind_t overflow_kind(ptl_event_kind_t k) {
  return static_cast<ptl_event_kind_t>(k + 1);  // PUT -> PUT_OVERFLOW, ...
}

/// R-U6: whether `e` moves its offset past each header it takes from the
/// unexpected list (a persistent, locally managed entry that asked to).
bool advances_per_header(const Entry& e) noexcept {
  return (e.options & PTL_ME_LOCAL_INC_UH_RLENGTH) && (e.options & PTL_ME_MANAGE_LOCAL) &&
         !(e.options & PTL_ME_USE_ONCE);
}

/// R-U6, one step: the offset moves past a header of `rlength` bytes,
/// saturating (rlength is the peer's word, up to 2^64 - 1). True when less
/// than min_free is left: the entry takes no more headers.
bool advance_past_header(Entry& e, ptl_size_t rlength) noexcept {
  e.local_offset = rlength >= e.buffer.length - std::min(e.local_offset, e.buffer.length)
                       ? e.buffer.length
                       : e.local_offset + rlength;
  return e.min_free != 0 && e.buffer.length - e.local_offset < e.min_free;
}
}  // namespace

int Lib::check_entry(Ni& ni, ptl_pt_index_t pt, const ptl_me_t& me, bool is_me) noexcept {
  if (pt >= ni.pts.size() || !ni.pts[pt].allocated) return PTL_ARG_INVALID;
  if (is_me != ni.matching) return PTL_ARG_INVALID;
  if ((me.options & PTL_IOVEC) && me.length > static_cast<ptl_size_t>(ni.limits.max_iovecs))
    return PTL_ARG_INVALID;
  unsigned mask = is_me ? PTL_ME_APPEND_OPTIONS_MASK : PTL_LE_APPEND_OPTIONS_MASK;
  if ((me.options & ~mask) != 0) return PTL_ARG_INVALID;
  if (me.ct_handle != PTL_CT_NONE && !ni.cts->lookup(me.ct_handle)) return PTL_ARG_INVALID;
  return PTL_OK;
}

int Lib::append(const Call& c, Reply& r) noexcept {
  Ni* ni = find_ni(c.handle);
  if (!ni) return PTL_ARG_INVALID;
  if (int rc = check_entry(*ni, c.pt_index, c.me, c.is_me); rc != PTL_OK) return rc;
  if (c.list > PTL_OVERFLOW_LIST) return PTL_ARG_INVALID;
  return append_entry(*ni, c.pt_index, c.me, c.is_me, c.list, c.user_ptr, &r.handle);
}

int Lib::append_entry(Ni& ni, ptl_pt_index_t index, const ptl_me_t& me, bool is_me, ptl_list_t list,
                      void* user_ptr, std::uint32_t* handle) noexcept {
  Pt& pt = ni.pts[index];
  auto& target_list = list == PTL_PRIORITY_LIST ? pt.priority : pt.overflow;
  if (target_list.size >= static_cast<std::size_t>(ni.limits.max_list_size))
    return PTL_LIST_TOO_LONG;
  Entry* e = ni.entries->acquire();
  if (!e) return PTL_NO_SPACE;
  if (int rc = make_buffer(ni, me.start, me.length, me.options & PTL_IOVEC, e->buffer);
      rc != PTL_OK) {
    ni.entries->release(e);
    return rc;
  }
  e->ni = &ni;
  e->pt = &pt;
  e->is_me = is_me;
  e->list = list;
  e->options = me.options;
  e->ct = me.ct_handle == PTL_CT_NONE ? nullptr : ni.cts->lookup(me.ct_handle);
  e->uid = me.uid;
  if (is_me) {
    e->match_id = me.match_id;
    e->match_bits = me.match_bits;
    e->ignore_bits = me.ignore_bits;
    e->min_free = (me.options & PTL_ME_MANAGE_LOCAL) ? me.min_free : 0;
  }
  e->user_ptr = user_ptr;
  *handle = e->handle;

  // Counted once the walk is over: a count can fire triggered operations,
  // which must find the list and this entry settled.
  Ct* const ct = e->options & PTL_ME_EVENT_CT_OVERFLOW ? e->ct : nullptr;
  const bool ct_bytes = e->options & PTL_ME_EVENT_CT_BYTES;
  std::uint64_t taken = 0;
  ptl_size_t taken_bytes = 0;
  bool unlink_now = false;
  if (list == PTL_PRIORITY_LIST) {
    // R-U2: the unexpected list first, in arrival order.
    bool once = e->options & PTL_ME_USE_ONCE;
    const bool inc_rlength = advances_per_header(*e);
    for (Unexpected* u = pt.unexpected.head; u;) {
      Unexpected* next = u->next;
      if (matches(*e, u->match_bits, u->initiator, u->rlength, u->remote_offset)) {
        ptl_size_t rlength = u->rlength;  // consuming recycles the header
        if (u->complete) {
          ++taken;
          taken_bytes += u->mlength;
        }
        consume_unexpected(ni, pt, u, e, e, user_ptr, false, 0);
        if (once) {
          unlink_now = true;
          break;
        }
        if (inc_rlength && advance_past_header(*e, rlength)) {
          unlink_now = true;
          break;
        }
      }
      u = next;
    }
  }
  if (unlink_now) {
    auto_unlink_when_idle(e);
  } else {
    target_list.push_back(e);
    e->linked = true;
    if (!(e->options & PTL_ME_EVENT_LINK_DISABLE) && pt.eq) {
      if (e->claims > 0) {
        e->link_owed = true;  // R-U3: after the overflow events still to come
      } else {
        ptl_event_t ev{};
        ev.type = PTL_EVENT_LINK;
        ev.user_ptr = user_ptr;
        ev.pt_index = index;
        ev.ni_fail_type = PTL_NI_OK;
        post(pt.eq, ev);
      }
    }
  }
  count_successes(ct, taken, taken_bytes, ct_bytes);
  return PTL_OK;
}

namespace {

ptl_event_t overflow_event(const Ni& ni, const Pt& pt, const Unexpected& u, void* user_ptr,
                           bool as_search, ptl_ni_fail_t fail) noexcept {
  ptl_event_t ev{};
  ev.type = as_search ? PTL_EVENT_SEARCH : overflow_kind(u.kind);
  ev.start = u.entry ? u.entry->buffer.address(u.offset_used) : nullptr;
  ev.user_ptr = user_ptr;
  ev.hdr_data = u.hdr_data;
  ev.match_bits = u.match_bits;
  ev.rlength = u.rlength;
  ev.mlength = u.mlength;
  ev.remote_offset = u.remote_offset;
  ev.initiator = u.initiator;
  ev.uid = u.uid;
  ev.pt_index = static_cast<ptl_pt_index_t>(&pt - ni.pts.data());
  ev.ptl_list = PTL_OVERFLOW_LIST;
  ev.ni_fail_type = fail;
  ev.atomic_operation = u.atomic_op;
  ev.atomic_type = u.atomic_type;
  return ev;
}

}  // namespace

void Lib::consume_unexpected(Ni& ni, Pt& pt, Unexpected* u, Entry* by, Entry* keep, void* user_ptr,
                             bool as_search, std::uint64_t search_id) noexcept {
  if (!u->complete && !as_search) {
    // R-U2 in arrival order: the header is taken now, its event waits for
    // the data (the message completing posts it, finish_claim).
    pt.unexpected.remove(u);
    pt.claimed.push_back(u);
    u->claimed = true;
    u->claim_event = !(by->options & PTL_ME_EVENT_OVER_DISABLE);
    u->claim_counts = by->ct && (by->options & PTL_ME_EVENT_CT_OVERFLOW);
    u->claim_ct_bytes = by->options & PTL_ME_EVENT_CT_BYTES;
    u->claim_ct = by->ct ? by->ct->handle : 0;
    u->claim_user_ptr = user_ptr;
    u->claim_entry = keep;
    u->search_id = search_id;
    if (keep) {
      ++keep->pending;
      ++keep->claims;
    }
    return;
  }
  unsigned disable = as_search ? PTL_ME_EVENT_COMM_DISABLE : PTL_ME_EVENT_OVER_DISABLE;
  const ptl_event_t ev = overflow_event(ni, pt, *u, user_ptr, as_search, PTL_NI_OK);
  if (as_search) {
    if (!(by->options & disable)) post(pt.eq, ev);
    return;
  }
  pt.unexpected.remove(u);
  Entry* holder = u->entry;
  *u = Unexpected{};
  ni.unexpected_free.push_back(u);
  if (!(by->options & disable)) post(pt.eq, ev);
  if (holder && holder->uh_refs > 0) {
    --holder->uh_refs;
    maybe_auto_free(holder);
  }
}

void Lib::finish_claim(Ni& ni, Pt& pt, Unexpected* u, ptl_ni_fail_t fail) noexcept {
  const bool ok = fail == PTL_NI_OK;
  pt.claimed.remove(u);
  const Unexpected claim = *u;
  Entry* holder = u->entry;
  *u = Unexpected{};
  ni.unexpected_free.push_back(u);
  if (claim.claim_event)
    post(pt.eq, overflow_event(ni, pt, claim, claim.claim_user_ptr, false, fail));
  Entry* keep = claim.claim_entry;
  if (keep) {
    --keep->claims;
    if (keep->claims == 0 && keep->link_owed) {
      keep->link_owed = false;
      ptl_event_t ev{};
      ev.type = PTL_EVENT_LINK;
      ev.user_ptr = keep->user_ptr;
      ev.pt_index = static_cast<ptl_pt_index_t>(&pt - ni.pts.data());
      ev.ni_fail_type = PTL_NI_OK;
      post(pt.eq, ev);
    }
  }
  Ct* ct = claim.claim_counts ? ni.cts->lookup(claim.claim_ct) : nullptr;
  if (ct) {
    // R-C9: a persistent search ends (a failure) after the last header it
    // took has landed.
    bool search_ends = claim.search_id != 0;
    for (Unexpected* o = pt.claimed.head; o && search_ends; o = o->next)
      if (o->search_id == claim.search_id) search_ends = false;
    if (ok)
      ct->value.success += claim.claim_ct_bytes ? claim.mlength : 1;
    else
      ++ct->value.failure;
    if (search_ends) ++ct->value.failure;
    ct_changed(ct);
  }
  if (holder && holder->uh_refs > 0) {
    --holder->uh_refs;
    maybe_auto_free(holder);
  }
  if (keep && keep->pending > 0) {
    --keep->pending;
    if (keep->unlink_owed && keep->pending == 0) {
      keep->unlink_owed = false;
      entry_auto_unlink(keep, true);
    } else {
      maybe_auto_free(keep);
    }
  }
}

void Lib::auto_unlink_when_idle(Entry* e) noexcept {
  if (e->pending == 0) {
    entry_auto_unlink(e, true);
    return;
  }
  // R-E4 and R-U3: after the overflow events still waiting for their data.
  if (e->linked) (e->list == PTL_PRIORITY_LIST ? e->pt->priority : e->pt->overflow).remove(e);
  e->linked = false;
  e->unlink_owed = true;
}

void Lib::entry_auto_unlink(Entry* e, bool post_event) noexcept {
  Pt& pt = *e->pt;
  if (e->quiet_unlink) post_event = false;  // unlinked on purpose already
  if (e->linked) (e->list == PTL_PRIORITY_LIST ? pt.priority : pt.overflow).remove(e);
  e->linked = false;
  e->auto_unlinked = true;
  if (post_event && !(e->options & PTL_ME_EVENT_UNLINK_DISABLE) && pt.eq) {
    ptl_event_t ev{};
    ev.type = PTL_EVENT_AUTO_UNLINK;
    ev.user_ptr = e->user_ptr;
    ev.pt_index = static_cast<ptl_pt_index_t>(e->pt - e->ni->pts.data());
    ev.ni_fail_type = PTL_NI_OK;
    post(pt.eq, ev);
  }
  maybe_auto_free(e);
}

void Lib::maybe_auto_free(Entry* e) noexcept {
  if (!e->auto_unlinked || e->uh_refs > 0 || e->pending > 0) return;
  // R-U7: an overflow entry says when its buffer holds nothing unconsumed.
  if (e->list == PTL_OVERFLOW_LIST && !e->quiet_unlink &&
      !(e->options & PTL_ME_EVENT_UNLINK_DISABLE) && e->pt->eq) {
    ptl_event_t ev{};
    ev.type = PTL_EVENT_AUTO_FREE;
    ev.user_ptr = e->user_ptr;
    ev.pt_index = static_cast<ptl_pt_index_t>(e->pt - e->ni->pts.data());
    ev.ni_fail_type = PTL_NI_OK;
    post(e->pt->eq, ev);
  }
  free_entry(e);
}

void Lib::free_entry(Entry* e) noexcept {
  Ni& ni = *e->ni;
  drop_buffer(e->buffer);
  ni.entries->release(e);
}

int Lib::unlink(const Call& c, Reply&) noexcept {
  Ni& ni = nis_[ni_of(c.handle)];
  if (ni.refs == 0) return PTL_ARG_INVALID;
  Entry* e = ni.entries->lookup(c.handle);
  if (!e || e->auto_unlinked) return PTL_ARG_INVALID;
  if (e->pending > 0 || e->uh_refs > 0) return PTL_IN_USE;
  if (e->linked) (e->list == PTL_PRIORITY_LIST ? e->pt->priority : e->pt->overflow).remove(e);
  free_entry(e);
  return PTL_OK;
}

int Lib::search(const Call& c, Reply&) noexcept {
  Ni* ni = find_ni(c.handle);
  if (!ni) return PTL_ARG_INVALID;
  if (int rc = check_entry(*ni, c.pt_index, c.me, c.is_me); rc != PTL_OK) return rc;
  if (c.search_op > PTL_SEARCH_DELETE) return PTL_ARG_INVALID;
  Pt& pt = ni->pts[c.pt_index];
  // A probe entry that is never linked: only its matching fields matter.
  Entry probe;
  probe.ni = ni;
  probe.pt = &pt;
  probe.is_me = c.is_me;
  probe.options = c.me.options;
  probe.ct = c.me.ct_handle == PTL_CT_NONE ? nullptr : ni->cts->lookup(c.me.ct_handle);
  probe.match_id = c.me.match_id;
  probe.match_bits = c.me.match_bits;
  probe.ignore_bits = c.me.ignore_bits;
  probe.min_free = (c.me.options & PTL_ME_MANAGE_LOCAL) ? c.me.min_free : 0;
  // The same length an append would give the entry (no-truncate compares
  // against it): an iovec entry holds the sum of its elements.
  probe.buffer.length = c.me.length;
  if (c.me.options & PTL_IOVEC) {
    const auto* iov = static_cast<const ptl_iovec_t*>(c.me.start);
    ptl_size_t total = 0;
    for (ptl_size_t i = 0; iov != nullptr && i < c.me.length; ++i)
      total = iov[i].iov_len > ~ptl_size_t{0} - total ? ~ptl_size_t{0} : total + iov[i].iov_len;
    probe.buffer.length = total;
  }
  bool once = c.me.options & PTL_ME_USE_ONCE;
  bool only = c.search_op == PTL_SEARCH_ONLY;
  // The same walk as an append's (R-U6 included): a no-truncate search
  // takes only the headers an appended entry would have room for.
  const bool inc_rlength = probe.is_me && advances_per_header(probe);
  const bool counting = probe.ct && (probe.options & PTL_ME_EVENT_CT_OVERFLOW);
  // Headers whose data is still landing are counted when it has; a
  // persistent search's end then waits for the last of them (finish_claim).
  const std::uint64_t search_id = counting && !once && !only ? ++last_search_id_ : 0;
  std::size_t found = 0, claimed = 0;
  std::uint64_t taken = 0;
  ptl_size_t taken_bytes = 0;
  for (Unexpected* u = pt.unexpected.head; u;) {
    Unexpected* next = u->next;
    if (matches(probe, u->match_bits, u->initiator, u->rlength, u->remote_offset)) {
      ++found;
      if (u->complete || only) {
        ++taken;
        taken_bytes += u->mlength;
      } else {
        ++claimed;
      }
      const ptl_size_t rlength = u->rlength;  // consuming recycles the header
      consume_unexpected(*ni, pt, u, &probe, nullptr, c.user_ptr, only, search_id);
      if (once) break;
      if (inc_rlength && advance_past_header(probe, rlength)) break;
    }
    u = next;
  }
  if (found == 0 && !(probe.options & PTL_ME_EVENT_COMM_DISABLE) && pt.eq) {
    ptl_event_t ev{};
    ev.type = PTL_EVENT_SEARCH;
    ev.user_ptr = c.user_ptr;
    ev.pt_index = c.pt_index;
    ev.ni_fail_type = PTL_NI_NO_MATCH;
    post(pt.eq, ev);
  }
  if (counting) {
    // After the walk: a count can fire triggered operations.
    count_successes(probe.ct, taken, taken_bytes, probe.options & PTL_ME_EVENT_CT_BYTES);
    // R-C9: a failure marks the end of a persistent search, and of a
    // use-once search that found nothing.
    if ((!once || found == 0) && (search_id == 0 || claimed == 0)) {
      ++probe.ct->value.failure;
      ct_changed(probe.ct);
    }
  }
  return PTL_OK;
}

}  // namespace pier::lib
