// pier lib: memory descriptors, event queues, counting events, and the one
// path through which events and counts are written.
#include <algorithm>
#include <array>
#include <cstring>

#include "base/log.hpp"
#include "lib/lib.hpp"

namespace pier::lib {

std::uint32_t& next_generation(Kind kind, std::uint32_t ni) noexcept {
  static std::array<std::array<std::uint32_t, 4>, 8> next = [] {
    std::array<std::array<std::uint32_t, 4>, 8> a{};
    for (auto& row : a) row.fill(1);
    return a;
  }();
  return next[static_cast<std::size_t>(kind) & 7u][ni & 3u];
}

std::size_t Buffer::segment_search(std::size_t offset) const noexcept {
  auto it = std::upper_bound(starts.begin(), starts.end(), offset);
  return static_cast<std::size_t>(it - starts.begin()) - 1;
}

bool Buffer::crosses(std::size_t offset, std::size_t n) const noexcept {
  if (n == 0 || segments.size() < 2) return false;
  std::size_t i = segment_at(offset);
  if (i >= segments.size()) return false;
  return n > segments[i].extent - (offset - starts[i]);
}

void* Buffer::address_slow(std::size_t offset) const noexcept {
  if (segments.empty()) return nullptr;
  if (offset >= length) return segments.back().base + segments.back().extent;
  std::size_t i = segment_at(offset);
  if (i == segments.size()) return nullptr;  // address 0 of an all-memory buffer
  return segments[i].base + (offset - starts[i]);
}

void Buffer::copy_out(std::size_t offset, std::size_t n, std::byte* out) const noexcept {
  for (std::size_t done = 0; done < n;) {
    std::size_t i = segment_at(offset + done);
    std::size_t in = offset + done - starts[i];
    std::size_t k = std::min<std::size_t>(n - done, segments[i].extent - in);
    std::memcpy(out + done, segments[i].base + in, k);
    done += k;
  }
}

void Buffer::copy_in(std::size_t offset, std::size_t n, const std::byte* in) const noexcept {
  for (std::size_t done = 0; done < n;) {
    std::size_t i = segment_at(offset + done);
    std::size_t at = offset + done - starts[i];
    std::size_t k = std::min<std::size_t>(n - done, segments[i].extent - at);
    std::memcpy(segments[i].base + at, in + done, k);
    done += k;
  }
}

int Lib::make_buffer(Ni& ni, void* start, ptl_size_t length, bool iovec, Buffer& out) noexcept {
  out = Buffer{};
  out.iovec = iovec;
  try {
    if (iovec) {
      if (length > static_cast<ptl_size_t>(ni.limits.max_iovecs)) return PTL_ARG_INVALID;
      if (length > 0 && start == nullptr) return PTL_ARG_INVALID;
      const auto* iov = static_cast<const ptl_iovec_t*>(start);
      out.segments.reserve(length);
      for (ptl_size_t i = 0; i < length; ++i) {
        auto r = core_.validate(iov[i].iov_base, iov[i].iov_len);
        if (!r) {
          drop_buffer(out);
          return PTL_ARG_INVALID;
        }
        out.segments.push_back(*r);
        out.starts.push_back(out.length);
        out.length += iov[i].iov_len;
      }
      return PTL_OK;
    }
    if (start == nullptr && length == PTL_SIZE_MAX) {
      // All of memory (OpenSHMEM binds MDs and LEs so): offsets are
      // addresses. The core refuses a null base, so the region starts at
      // address 1 and offset 0 (a null address) lies outside.
      auto r = core_.validate(reinterpret_cast<void*>(std::uintptr_t{1}), PTL_SIZE_MAX - 1);
      if (!r) return r.status() == Status::no_resource ? PTL_NO_SPACE : PTL_ARG_INVALID;
      out.segments.push_back(*r);
      out.starts.push_back(1);
      out.first = 1;
      out.length = PTL_SIZE_MAX;
      return PTL_OK;
    }
    auto r = core_.validate(start, length);
    if (!r) return r.status() == Status::no_resource ? PTL_NO_SPACE : PTL_ARG_INVALID;
    out.segments.push_back(*r);
    out.starts.push_back(0);
    out.length = length;
  } catch (...) {
    drop_buffer(out);
    return PTL_NO_SPACE;
  }
  return PTL_OK;
}

void Lib::drop_buffer(Buffer& b) noexcept {
  for (auto& r : b.segments)
    if (Status s = core_.invalidate(r); s != Status::ok)
      PIER_LOG(warn, "lib", "cannot invalidate a region: {}", to_string(s));
  b = Buffer{};
}

int Lib::md_bind(const Call& c, Reply& r) noexcept {
  Ni* ni = find_ni(c.handle);
  if (!ni || (c.md.options & ~unsigned{PTL_MD_OPTIONS_MASK}) != 0) return PTL_ARG_INVALID;
  Eq* eq = nullptr;
  Ct* ct = nullptr;
  if (c.md.eq_handle != PTL_EQ_NONE && !(eq = ni->eqs->lookup(c.md.eq_handle)))
    return PTL_ARG_INVALID;
  if (c.md.ct_handle != PTL_CT_NONE && !(ct = ni->cts->lookup(c.md.ct_handle)))
    return PTL_ARG_INVALID;
  if ((c.md.options & PTL_IOVEC) && c.md.length > static_cast<ptl_size_t>(ni->limits.max_iovecs))
    return PTL_ARG_INVALID;
  Md* md = ni->mds->acquire();
  if (!md) return PTL_NO_SPACE;
  if (int rc = make_buffer(*ni, c.md.start, c.md.length, c.md.options & PTL_IOVEC, md->buffer);
      rc != PTL_OK) {
    ni->mds->release(md);
    return rc;
  }
  md->ni = ni;
  md->desc = c.md;
  md->eq = eq;
  md->ct = ct;
  r.handle = md->handle;
  return PTL_OK;
}

int Lib::md_release(const Call& c, Reply&) noexcept {
  Ni& ni = nis_[ni_of(c.handle)];
  Md* md = ni.refs > 0 ? ni.mds->lookup(c.handle) : nullptr;
  if (!md) return PTL_ARG_INVALID;
  if (md->pending > 0) return PTL_IN_USE;
  // A triggered operation on the MD that has not run yet would find it gone
  // (§5.7: only an MD with nothing outstanding may be released).
  auto names_md = [&](const Trig* t) {
    return t->kind == TrigKind::move && (t->move.md == md->handle || t->move.get_md == md->handle);
  };
  bool triggered = false;
  ni.cts->for_each([&](Ct& ct) {
    for (const Trig* t = ct.triggered.head; t && !triggered; t = t->next) triggered = names_md(t);
  });
  for (const Trig* t : fire_queue_) triggered = triggered || names_md(t);
  for (std::size_t i = 0; i < stalled_count_; ++i)  // a ring
    triggered = triggered || names_md(stalled_[(stalled_head_ + i) % stalled_.size()]);
  if (triggered) return PTL_IN_USE;
  drop_buffer(md->buffer);
  ni.mds->release(md);
  return PTL_OK;
}

int Lib::eq_alloc(const Call& c, Reply& r) noexcept {
  Ni* ni = find_ni(c.handle);
  if (!ni) return PTL_ARG_INVALID;
  constexpr ptl_size_t max_events = ptl_size_t{1} << 22;
  if (c.size > max_events) return PTL_NO_SPACE;
  Eq* eq = ni->eqs->acquire();
  if (!eq) return PTL_NO_SPACE;
  try {
    // One reserved slot per portal index, so flow control's PT_DISABLED is
    // never lost to a full queue (R-F6).
    eq->requested = std::max<ptl_size_t>(c.size, 1);
    eq->ring.resize(eq->requested + ni->pts.size());
  } catch (...) {
    ni->eqs->release(eq);
    return PTL_NO_SPACE;
  }
  eq->ni = ni;
  r.handle = eq->handle;
  return PTL_OK;
}

int Lib::eq_free(const Call& c, Reply&) noexcept {
  Ni& ni = nis_[ni_of(c.handle)];
  Eq* eq = ni.refs > 0 ? ni.eqs->lookup(c.handle) : nullptr;
  if (!eq) return PTL_ARG_INVALID;
  // Detach it, so a user who freed it early loses events instead of memory.
  for (auto& pt : ni.pts)
    if (pt.eq == eq) pt.eq = nullptr;
  ni.mds->for_each([&](Md& md) {
    if (md.eq == eq) md.eq = nullptr;
  });
  ni.eqs->release(eq);
  notifier_.bump();
  return PTL_OK;
}

int Lib::eq_poll(const Call& c, Reply& r) noexcept {
  const auto* hs = static_cast<const ptl_handle_eq_t*>(c.ptr);
  if (c.size == 0 || hs == nullptr) return PTL_ARG_INVALID;
  Ni& ni = nis_[ni_of(hs[0])];
  if (ni.refs == 0) return PTL_ARG_INVALID;
  for (ptl_size_t i = 0; i < c.size; ++i)
    if (!ni.eqs->lookup(hs[i])) return PTL_ARG_INVALID;  // also: another NI's
  for (ptl_size_t i = 0; i < c.size; ++i) {
    Eq* eq = ni.eqs->lookup(hs[i]);
    if (eq->count == 0) continue;
    r.event = eq->ring[eq->head];
    eq->head = (eq->head + 1) % eq->ring.size();
    --eq->count;
    if (r.event.type == PTL_EVENT_PT_DISABLED && eq->disabled_in > 0) --eq->disabled_in;
    r.which = static_cast<unsigned>(i);
    bool dropped = eq->dropped;
    eq->dropped = false;
    return dropped ? PTL_EQ_DROPPED : PTL_OK;
  }
  return PTL_EQ_EMPTY;
}

void Lib::post(Eq* eq, const ptl_event_t& ev) noexcept {
  if (!eq) return;
  std::size_t cap = eq->ring.size();
  const bool disabled = ev.type == PTL_EVENT_PT_DISABLED;
  // The user's count is for the other events: PT_DISABLED has slots of its
  // own past it (one per index), so it never pushes a comm event out.
  if (eq->count >= cap || (!disabled && eq->count - eq->disabled_in >= eq->requested)) {
    // Circular (R-Q2): the oldest event is lost and the next read says so;
    // but a PT_DISABLED is never lost (R-F6): the oldest other one goes.
    std::size_t k = 0;
    while (k < eq->count && eq->ring[(eq->head + k) % cap].type == PTL_EVENT_PT_DISABLED) ++k;
    if (k == eq->count) k = 0;  // nothing but PT_DISABLED: the oldest goes
    if (eq->ring[(eq->head + k) % cap].type == PTL_EVENT_PT_DISABLED && eq->disabled_in > 0)
      --eq->disabled_in;
    for (std::size_t i = k; i > 0; --i)
      eq->ring[(eq->head + i) % cap] = eq->ring[(eq->head + i - 1) % cap];
    eq->head = (eq->head + 1) % cap;
    --eq->count;
    eq->dropped = true;
  }
  eq->ring[(eq->head + eq->count) % cap] = ev;
  ++eq->count;
  if (disabled) ++eq->disabled_in;
  notifier_.bump();
}

void Lib::count_successes(Ct* ct, std::uint64_t n, ptl_size_t bytes, bool in_bytes) noexcept {
  if (!ct || n == 0) return;
  ct->value.success += in_bytes ? bytes : n;
  ct_changed(ct);
}

int Lib::ct_alloc(const Call& c, Reply& r) noexcept {
  Ni* ni = find_ni(c.handle);
  if (!ni) return PTL_ARG_INVALID;
  Ct* ct = ni->cts->acquire();
  if (!ct) return PTL_NO_SPACE;
  ct->ni = ni;
  mirror(*ct);
  r.handle = ct->handle;
  return PTL_OK;
}

namespace {
Ct* lookup_ct(std::array<Ni, 4>& nis, std::uint32_t h) {
  Ni& ni = nis[ni_of(h)];
  return ni.refs > 0 ? ni.cts->lookup(h) : nullptr;
}
}  // namespace

int Lib::ct_free(const Call& c, Reply&) noexcept {
  Ct* ct = lookup_ct(nis_, c.handle);
  if (!ct) return PTL_ARG_INVALID;
  Ni& ni = *ct->ni;
  drop_triggers(ct);
  ni.mds->for_each([&](Md& md) {
    if (md.ct == ct) md.ct = nullptr;
  });
  ni.entries->for_each([&](Entry& e) {
    if (e.ct == ct) e.ct = nullptr;
  });
  mirror(*ct, true);
  ni.cts->release(ct);
  notifier_.bump();
  return PTL_OK;
}

int Lib::ct_cancel(const Call& c, Reply&) noexcept {
  Ct* ct = lookup_ct(nis_, c.handle);
  if (!ct) return PTL_ARG_INVALID;
  drop_triggers(ct);
  return PTL_OK;
}

int Lib::ct_get(const Call& c, Reply& r) noexcept {
  Ct* ct = lookup_ct(nis_, c.handle);
  if (!ct) return PTL_ARG_INVALID;
  r.ct = ct->value;
  return PTL_OK;
}

int Lib::ct_set(const Call& c, Reply&) noexcept {
  Ct* ct = lookup_ct(nis_, c.handle);
  if (!ct) return PTL_ARG_INVALID;
  ct->value = c.ct;
  ct_changed(ct);
  return PTL_OK;
}

int Lib::ct_inc(const Call& c, Reply&) noexcept {
  Ct* ct = lookup_ct(nis_, c.handle);
  if (!ct || (c.ct.success != 0 && c.ct.failure != 0)) return PTL_ARG_INVALID;
  ct->value.success += c.ct.success;
  ct->value.failure += c.ct.failure;
  ct_changed(ct);
  return PTL_OK;
}

int Lib::ct_poll(const Call& c, Reply& r) noexcept {
  const auto* hs = static_cast<const ptl_handle_ct_t*>(c.ptr);
  const auto* tests = static_cast<const ptl_size_t*>(c.ptr2);
  if (c.size == 0 || hs == nullptr || tests == nullptr) return PTL_ARG_INVALID;
  Ni& ni = nis_[ni_of(hs[0])];
  if (ni.refs == 0) return PTL_ARG_INVALID;
  for (ptl_size_t i = 0; i < c.size; ++i)
    if (!ni.cts->lookup(hs[i])) return PTL_ARG_INVALID;
  for (ptl_size_t i = 0; i < c.size; ++i) {
    Ct* ct = ni.cts->lookup(hs[i]);
    // R-C4: the reference's condition, which a failure also satisfies.
    if (ct->value.success >= tests[i] || ct->value.failure != 0) {
      r.ct = ct->value;
      r.which = static_cast<unsigned>(i);
      return PTL_OK;
    }
  }
  return PTL_CT_NONE_REACHED;
}

}  // namespace pier::lib
