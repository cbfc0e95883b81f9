// pier lib: triggered operations (R-T*). Each waits on its trigger CT's
// list in issue order; a change of the CT releases those whose threshold
// success + failure has reached. Released operations run through a queue,
// so a chain (an operation changing another CT) never recurses deeply.
#include "base/log.hpp"
#include "lib/lib.hpp"

namespace pier::lib {

int Lib::add_trigger(Ct* ct, ptl_size_t threshold, const Trig& t) noexcept {
  Ni& ni = *ct->ni;
  if (ni.triggered >= static_cast<std::uint32_t>(ni.limits.max_triggered_ops)) return PTL_NO_SPACE;
  Trig* x = trigs_.acquire(t);
  if (!x) return PTL_NO_SPACE;
  x->threshold = threshold;
  x->on = ct;
  x->ni = ni.index;
  ++ni.triggered;
  ct->triggered.push_back(x);
  ct_changed(ct);  // R-T2: a threshold already reached fires now
  return PTL_OK;
}

void Lib::ct_changed(Ct* ct) noexcept {
  if (ct->triggered.empty() && !in_fire_) {
    // Nothing to release and no release under way (so nothing owed to the
    // mirrors either: mirror_owed_ is drained before in_fire_ drops): what
    // the loop below would end with.
    mirror(*ct);
    notifier_.bump();
    stalled_retry();
    return;
  }
  // Saturating: PtlCTSet may give any values, and a wrapped sum would never
  // reach a threshold the true one passed (R-T1).
  const ptl_size_t sum = ct->value.success > ~ct->value.failure
                             ? ~ptl_size_t{0}
                             : ct->value.success + ct->value.failure;
  for (Trig* t = ct->triggered.head; t;) {
    Trig* next = t->next;
    if (sum >= t->threshold) {
      ct->triggered.remove(t);
      fire_queue_.push_back(t);
    }
    t = next;
  }
  if (in_fire_) {
    // Published once the operations it released have run (below); each CT
    // is listed once, so the list never outgrows the CTs.
    if (!ct->mirror_owed) {
      ct->mirror_owed = true;
      mirror_owed_.push_back(ct);
    }
    return;
  }
  in_fire_ = true;
  for (std::size_t i = 0; i < fire_queue_.size(); ++i) fire(fire_queue_[i]);
  fire_queue_.clear();
  in_fire_ = false;
  // The API thread reads the mirror without the LIB's lock: a waiter that
  // sees the new count must find done what the count released (a handle
  // written by a triggered append), so the count is published only now,
  // and before the bump, so a waiter that sees the new epoch sees it.
  for (Ct* owed : mirror_owed_) {
    owed->mirror_owed = false;
    mirror(*owed);
  }
  mirror_owed_.clear();
  mirror(*ct);
  notifier_.bump();
  stalled_retry();
}

void Lib::fire(Trig* t) noexcept {
  Ni& ni = nis_[t->ni];
  --ni.triggered;
  int rc = PTL_OK;
  switch (t->kind) {
    case TrigKind::move:
      // A released operation must happen: with no message state left it
      // waits for one (behind any that wait already, to keep their order).
      rc = stalled_count_ == 0 ? start_move(t->move) : PTL_NO_SPACE;
      if (rc == PTL_NO_SPACE) {
        stalled_[(stalled_head_ + stalled_count_) % stalled_.size()] = t;
        ++stalled_count_;
        return;
      }
      break;
    case TrigKind::ct_inc:
    case TrigKind::ct_set: {
      Ct* ct = ni.refs > 0 ? ni.cts->lookup(t->ct) : nullptr;
      if (!ct) {
        rc = PTL_ARG_INVALID;
        break;
      }
      if (t->kind == TrigKind::ct_set) {
        ct->value = t->value;
      } else {
        ct->value.success += t->value.success;
        ct->value.failure += t->value.failure;
      }
      ct_changed(ct);
      break;
    }
    case TrigKind::me_append: {
      if (ni.refs == 0 || t->pt_index >= ni.pts.size() || !ni.pts[t->pt_index].allocated) {
        rc = PTL_ARG_INVALID;
        break;
      }
      std::uint32_t h = PTL_INVALID_HANDLE;
      rc = append_entry(ni, t->pt_index, *t->me, true, t->list, t->user_ptr, &h);
      if (t->me_out) *t->me_out = h;
      break;
    }
    case TrigKind::me_unlink: {
      Call c;
      c.handle = t->ct;
      Reply r;
      rc = unlink(c, r);
      if (rc == PTL_IN_USE) {
        // Nobody is left to retry (R-T1): the entry leaves its list now
        // and is freed once what lands in it is done. Released by its own
        // counting event, it always meets its message still landing.
        Ni& owner = nis_[ni_of(t->ct)];
        Entry* e = owner.refs > 0 ? owner.entries->lookup(t->ct) : nullptr;
        if (e && !e->auto_unlinked) {
          if (e->linked)
            (e->list == PTL_PRIORITY_LIST ? e->pt->priority : e->pt->overflow).remove(e);
          e->linked = false;
          e->auto_unlinked = true;
          e->quiet_unlink = true;
          e->unlink_owed = false;
          rc = PTL_OK;
        }
      }
      break;
    }
  }
  if (rc != PTL_OK) PIER_LOG(warn, "lib", "a triggered operation failed when released: {}", rc);
  trigs_.release(t);
}

void Lib::stalled_retry_now() noexcept {
  if (in_stalled_retry_ || in_fire_) return;
  in_stalled_retry_ = true;
  while (stalled_count_ > 0) {
    Trig* t = stalled_[stalled_head_];
    int rc = start_move(t->move);
    if (rc == PTL_NO_SPACE) break;
    if (rc != PTL_OK) PIER_LOG(warn, "lib", "a triggered operation failed when started: {}", rc);
    stalled_head_ = (stalled_head_ + 1) % stalled_.size();
    --stalled_count_;
    trigs_.release(t);
  }
  in_stalled_retry_ = false;
}

void Lib::drop_triggers(Ct* ct) noexcept {
  // R-T6, R-T7: destroyed unrun, silently.
  while (Trig* t = ct->triggered.head) {
    ct->triggered.remove(t);
    --nis_[t->ni].triggered;
    trigs_.release(t);
  }
}

int Lib::trig_ct(const Call& c, Reply&) noexcept {
  Ni& ni = nis_[ni_of(c.handle)];
  if (ni.refs == 0) return PTL_ARG_INVALID;
  Ct* target = ni.cts->lookup(c.handle);
  Ct* trigger = ni.cts->lookup(c.trig_ct);  // another NI's CT does not resolve here
  if (!target || !trigger) return PTL_ARG_INVALID;
  bool set = c.options != 0;
  if (!set && c.ct.success != 0 && c.ct.failure != 0) return PTL_ARG_INVALID;
  Trig t;
  t.kind = set ? TrigKind::ct_set : TrigKind::ct_inc;
  t.ct = c.handle;
  t.value = c.ct;
  return add_trigger(trigger, c.threshold, t);
}

int Lib::trig_append(const Call& c, Reply&) noexcept {
  Ni* ni = find_ni(c.handle);
  if (!ni || !c.trig_me || !c.trig_me_out) return PTL_ARG_INVALID;
  if (int rc = check_entry(*ni, c.pt_index, *c.trig_me, true); rc != PTL_OK) return rc;
  if (c.list > PTL_OVERFLOW_LIST) return PTL_ARG_INVALID;
  Ct* trigger = ni->cts->lookup(c.trig_ct);
  if (!trigger) return PTL_ARG_INVALID;
  Trig t;
  t.kind = TrigKind::me_append;
  t.pt_index = c.pt_index;
  t.me = c.trig_me;
  t.list = c.list;
  t.user_ptr = c.user_ptr;
  t.me_out = c.trig_me_out;
  return add_trigger(trigger, c.threshold, t);
}

int Lib::trig_unlink(const Call& c, Reply&) noexcept {
  Ni& ni = nis_[ni_of(c.handle)];
  if (ni.refs == 0 || kind_of(c.handle) != Kind::me || !ni.entries->lookup(c.handle))
    return PTL_ARG_INVALID;
  Ct* trigger = ni.cts->lookup(c.trig_ct);
  if (!trigger) return PTL_ARG_INVALID;
  Trig t;
  t.kind = TrigKind::me_unlink;
  t.ct = c.handle;
  return add_trigger(trigger, c.threshold, t);
}

}  // namespace pier::lib
