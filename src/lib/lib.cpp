// pier lib: creation, dispatch of forwarded calls, NIs, maps, portal table,
// identity and bundles.
#include "lib/lib.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "base/config.hpp"
#include "base/log.hpp"

namespace pier::lib {

inline const config::IntKey messages_key{
    "LIB_MESSAGES", 1024, 16, 65536,
    "Portals message states per process: operations in flight, initiator and target together"};
inline const config::IntKey staging_key{
    "LIB_STAGING_KIB", 16384, 0, std::int64_t{8} << 20,
    "KiB of staging memory per process for iovec ranges that cross elements and are longer than "
    "544 bytes (gathered before they leave, scattered after they land); half serves ranges "
    "leaving, half ranges landing, and a crossing range longer than a half is refused at the "
    "initiator and dropped at a target"};
inline const config::IntKey triggered_key{"LIB_TRIGGERED", 4096, 16, 1 << 20,
                                          "triggered operations pending per process, all NIs"};

namespace {
constexpr ptl_size_t four_gib = ptl_size_t{4} << 30;
// Entries and MDs may bind all of memory (start NULL, length PTL_SIZE_MAX;
// an entry's offsets are then addresses), whether asked for or not. Not
// offered: total data ordering (a large put's data may land after a later
// small put's). Atomics are coherent with the host's own atomic
// instructions on aligned elements of at most 8 bytes within one iovec
// element of the target (lib/atomic.cpp; docs/portals.md lists the rest).
constexpr unsigned offered_features = PTL_TARGET_BIND_INACCESSIBLE | PTL_COHERENT_ATOMICS;

int clamp_int(int v, int lo, int hi) {
  return std::clamp(v, lo, hi);
}
ptl_size_t clamp_size(ptl_size_t v, ptl_size_t lo, ptl_size_t hi) {
  return std::clamp(v, lo, hi);
}

ptl_ni_limits_t default_limits() {
  ptl_ni_limits_t l{};
  l.max_entries = 1024;
  l.max_unexpected_headers = 1024;
  l.max_mds = 1024;
  l.max_cts = 1024;
  l.max_eqs = 1024;
  l.max_pt_index = 63;
  l.max_iovecs = 64;
  l.max_list_size = 1024;
  l.max_triggered_ops = 1024;
  l.max_msg_size = four_gib;
  l.max_atomic_size = max_atomic_bytes;
  l.max_fetch_atomic_size = max_atomic_bytes;
  l.max_waw_ordered_size = 64;
  l.max_war_ordered_size = 8;
  l.max_volatile_size = 512;
  l.features = offered_features;
  return l;
}

/// Each field into pier's range (a zero is a request for the minimum).
ptl_ni_limits_t clamp_limits(const ptl_ni_limits_t& d) {
  constexpr int table_max = static_cast<int>(max_table_capacity) - 1;
  ptl_ni_limits_t l{};
  l.max_entries = clamp_int(d.max_entries, 0, table_max);
  l.max_unexpected_headers = clamp_int(d.max_unexpected_headers, 0, table_max);
  l.max_mds = clamp_int(d.max_mds, 0, table_max);
  l.max_cts = clamp_int(d.max_cts, 0, table_max);
  l.max_eqs = clamp_int(d.max_eqs, 0, table_max);
  l.max_pt_index = clamp_int(d.max_pt_index, 1, 511);
  l.max_iovecs = clamp_int(d.max_iovecs, 0, 1024);
  l.max_list_size = clamp_int(d.max_list_size, 0, table_max);
  l.max_triggered_ops = clamp_int(d.max_triggered_ops, 0, table_max);
  l.max_msg_size = clamp_size(d.max_msg_size, 0, four_gib);
  l.max_atomic_size = clamp_size(d.max_atomic_size, 0, max_atomic_bytes);
  l.max_fetch_atomic_size = clamp_size(d.max_fetch_atomic_size, 8, max_atomic_bytes);
  l.max_waw_ordered_size = clamp_size(d.max_waw_ordered_size, 8, 64);
  l.max_war_ordered_size = clamp_size(d.max_war_ordered_size, 8, 64);
  l.max_volatile_size = clamp_size(d.max_volatile_size, 0, 512);
  l.features = offered_features;
  return l;
}
}  // namespace

void Notifier::wake_sleepers() noexcept {
  std::lock_guard lock(mu_);
  cv_.notify_all();
}

void Notifier::wait(std::uint64_t seen, std::int64_t max_ns) noexcept {
  std::unique_lock lock(mu_);
  sleepers_.fetch_add(1, std::memory_order_acq_rel);
  cv_.wait_for(lock, std::chrono::nanoseconds(max_ns), [&] { return epoch() != seen; });
  sleepers_.fetch_sub(1, std::memory_order_acq_rel);
}

Lib::Lib(core::Core& core)
    : core_(core),
      msgs_(static_cast<std::size_t>(messages_key.get())),
      trigs_(static_cast<std::size_t>(triggered_key.get())) {
  // NI handles go on from the last LIB of this process (PtlFini, PtlInit).
  for (std::uint32_t i = 0; i < ni_gen_.size(); ++i) ni_gen_[i] = next_generation(Kind::ni, i);
}

Lib::~Lib() {
  // Off the core first: arrivals still unanswered (parked requests, data
  // waiting for staging) are cleaned from the wire so their senders get
  // their credits back, and nothing the core still holds finalizes into
  // a LIB that is gone.
  (void)core_.detach(wire::Upper::portals, this);
  parked_count_ = 0;
  for (auto& ni : nis_)
    if (ni.refs > 0 || ni.dying) destroy_ni(ni);
  for (std::uint32_t i = 0; i < ni_gen_.size(); ++i) next_generation(Kind::ni, i) = ni_gen_[i];
  if (bounce_region_.handle != 0) (void)core_.invalidate(bounce_region_);
  if (staging_region_.handle != 0) (void)core_.invalidate(staging_region_);
}

Result<std::unique_ptr<Lib>> Lib::create(core::Core& core) {
  std::unique_ptr<Lib> lib(new Lib(core));
  std::size_t n = lib->msgs_.capacity();
  lib->bounce_.resize(n * bounce_slot);
  lib->bounce_free_.resize(n);
  for (std::size_t i = n; i > 0; --i)
    lib->bounce_free_[lib->bounce_free_count_++] = static_cast<std::uint32_t>(i - 1);
  auto region = core.validate(lib->bounce_.data(), lib->bounce_.size());
  if (!region) return region.status();
  lib->bounce_region_ = *region;
  // Blocks of the staging pool; the memory is not touched until used.
  std::size_t blocks =
      (static_cast<std::size_t>(staging_key.get()) * 1024 + stage_block - 1) / stage_block;
  if (blocks > 0) {
    lib->staging_ = std::make_unique_for_overwrite<std::byte[]>(blocks * stage_block);
    auto staging = core.validate(lib->staging_.get(), blocks * stage_block);
    if (!staging) return staging.status();
    lib->staging_region_ = *staging;
    lib->stage_blocks_ = blocks;
    lib->stage_used_.assign((blocks + 63) / 64, 0);
  }
  lib->pid_ = core.rank();
  lib->uid_ = static_cast<std::uint32_t>(geteuid());
  lib->fire_queue_.reserve(lib->trigs_.capacity());
  lib->stalled_.resize(lib->trigs_.capacity());
  lib->deferred_.resize(2 * n);
  // Room for every request the peers may send ahead (one per low-priority
  // credit), but for at most half the core's receive states: each parked
  // request holds one, and the core fails a peer that finds none left.
  // Beyond that a request finding no state is dropped and counted.
  const std::size_t holdable = std::size_t{core.size()} * core.settings().credits;
  const std::size_t room = std::max<std::size_t>(1, core.settings().recv_msgs / 2);
  lib->parked_.resize(std::min({holdable, room, max_parked}));
  // A nid names a host: the lowest rank on the same node.
  lib->nid_of_rank_.resize(core.size());
  for (core::Rank r = 0; r < core.size(); ++r) {
    lib->nid_of_rank_[r] = r;
    auto mine = core.node_of(r);
    for (core::Rank q = 0; q < r && mine; ++q) {
      auto other = core.node_of(q);
      if (other && other->node == mine->node) {
        lib->nid_of_rank_[r] = lib->nid_of_rank_[q];
        break;
      }
    }
  }
  lib->nid_ = lib->nid_of_rank_[core.rank()];
  for (core::Rank r = 0; r < core.size(); ++r) {
    ptl_process_t p{};
    p.phys.nid = lib->nid_of_rank_[r];
    p.phys.pid = r;
    lib->map_.push_back(p);
  }
  lib->my_rank_ = core.rank();
  if (Status s = core.attach(wire::Upper::portals, lib.get(), wire::PortalsHeader::size);
      s != Status::ok)
    return s;
  return lib;
}

Reply Lib::call(Op op, const Call& c) noexcept {
  Reply r;
  call(op, c, r);
  return r;
}

void Lib::call(Op op, const Call& c, Reply& r) noexcept {
  switch (op) {
    case Op::ni_init:
      r.rc = ni_init(c, r);
      break;
    case Op::ni_fini:
      r.rc = ni_fini(c, r);
      break;
    case Op::ni_status:
      r.rc = ni_status(c, r);
      break;
    case Op::ni_handle:
      r.rc = ni_handle(c, r);
      break;
    case Op::set_map:
      r.rc = set_map(c, r);
      break;
    case Op::get_map:
      r.rc = get_map(c, r);
      break;
    case Op::pt_alloc:
      r.rc = pt_alloc(c, r);
      break;
    case Op::pt_free:
      r.rc = pt_free(c, r);
      break;
    case Op::pt_disable:
      r.rc = pt_disable(c, r);
      break;
    case Op::pt_enable:
      r.rc = pt_enable(c, r);
      break;
    case Op::pt_busy:
      r.rc = pt_busy(c, r);
      break;
    case Op::get_uid: {
      r.rc = find_ni(c.handle) ? PTL_OK : PTL_ARG_INVALID;
      r.uid = uid_;
      break;
    }
    case Op::get_id:
      r.rc = get_id(c, r, false);
      break;
    case Op::get_phys_id:
      r.rc = get_id(c, r, true);
      break;
    case Op::md_bind:
      r.rc = md_bind(c, r);
      break;
    case Op::md_release:
      r.rc = md_release(c, r);
      break;
    case Op::append:
      r.rc = append(c, r);
      break;
    case Op::unlink:
      r.rc = unlink(c, r);
      break;
    case Op::search:
      r.rc = search(c, r);
      break;
    case Op::ct_alloc:
      r.rc = ct_alloc(c, r);
      break;
    case Op::ct_free:
      r.rc = ct_free(c, r);
      break;
    case Op::ct_cancel:
      r.rc = ct_cancel(c, r);
      break;
    case Op::ct_get:
      r.rc = ct_get(c, r);
      break;
    case Op::ct_set:
      r.rc = ct_set(c, r);
      break;
    case Op::ct_inc:
      r.rc = ct_inc(c, r);
      break;
    case Op::ct_poll:
      r.rc = ct_poll(c, r);
      break;
    case Op::eq_alloc:
      r.rc = eq_alloc(c, r);
      break;
    case Op::eq_free:
      r.rc = eq_free(c, r);
      break;
    case Op::eq_poll:
      r.rc = eq_poll(c, r);
      break;
    case Op::move:
      r.rc = move(c, r);
      break;
    case Op::trig_ct:
      r.rc = trig_ct(c, r);
      break;
    case Op::trig_append:
      r.rc = trig_append(c, r);
      break;
    case Op::trig_unlink:
      r.rc = trig_unlink(c, r);
      break;
    case Op::bundle_start:
      r.rc = bundle(c, r, true);
      break;
    case Op::bundle_end:
      r.rc = bundle(c, r, false);
      break;
    case Op::pending:
      r.size = core_.pending();
      r.rc = PTL_OK;
      break;
    default:
      r.rc = PTL_ARG_INVALID;
      break;
  }
  if (parked_retry_due_) retry_parked();
}

Status Lib::dispatch(std::uint32_t op, std::span<const std::byte> args,
                     std::span<std::byte> ret) noexcept {
  const auto aligned = [](const void* p, std::size_t a) {
    return reinterpret_cast<std::uintptr_t>(p) % a == 0;
  };
  if (op == static_cast<std::uint32_t>(Op::start_move)) {
    if (args.size() != sizeof(Move) || ret.size() != sizeof(int)) return Status::invalid_argument;
    int rc;
    if (aligned(args.data(), alignof(Move))) {
      rc = start_move(*reinterpret_cast<const Move*>(args.data()));
    } else {
      Move m;
      std::memcpy(static_cast<void*>(&m), args.data(), sizeof m);
      rc = start_move(m);
    }
    if (parked_retry_due_) retry_parked();
    std::memcpy(ret.data(), &rc, sizeof rc);
    return Status::ok;
  }
  if (args.size() != sizeof(Call) || ret.size() != sizeof(Reply)) return Status::invalid_argument;
  // A direct NAL hands the API side's own Call and Reply objects (aligned):
  // the LIB works on them in place, since copying the 700 bytes of the two
  // blocks in and out cost more than a small put's whole LIB path. Blocks
  // that are not (unaligned bytes from elsewhere) go through copies.
  if (aligned(args.data(), alignof(Call)) && aligned(ret.data(), alignof(Reply))) {
    call(static_cast<Op>(op), *reinterpret_cast<const Call*>(args.data()),
         *reinterpret_cast<Reply*>(ret.data()));
    return Status::ok;
  }
  Call c;
  std::memcpy(static_cast<void*>(&c), args.data(), sizeof c);
  Reply r;
  call(static_cast<Op>(op), c, r);
  std::memcpy(ret.data(), static_cast<const void*>(&r), sizeof r);
  return Status::ok;
}

Ni* Lib::find_ni(std::uint32_t h) noexcept {
  if (kind_of(h) != Kind::ni) return nullptr;
  std::uint32_t i = ni_of(h);
  Ni& ni = nis_[i];
  if (ni.refs == 0 || ni.handle != h) return nullptr;
  return &ni;
}

/// The live NI owning an object handle of any kind.
Ni* Lib::owner_ni(std::uint32_t h) noexcept {
  Ni& ni = nis_[ni_of(h)];
  if (ni.refs == 0) return nullptr;
  switch (kind_of(h)) {
    case Kind::ni:
      return find_ni(h);
    case Kind::md:
      return ni.mds->lookup(h) ? &ni : nullptr;
    case Kind::eq:
      return ni.eqs->lookup(h) ? &ni : nullptr;
    case Kind::ct:
      return ni.cts->lookup(h) ? &ni : nullptr;
    case Kind::me:
    case Kind::le:
      return ni.entries->lookup(h) ? &ni : nullptr;
  }
  return nullptr;
}

int Lib::ni_init(const Call& c, Reply& r) noexcept {
  if (c.iface != PTL_IFACE_DEFAULT && c.iface != 0) return PTL_ARG_INVALID;
  unsigned o = c.options;
  if ((o & ~unsigned{PTL_NI_INIT_OPTIONS_MASK}) != 0) return PTL_ARG_INVALID;
  bool m = o & PTL_NI_MATCHING, nm = o & PTL_NI_NO_MATCHING;
  bool lg = o & PTL_NI_LOGICAL, ph = o & PTL_NI_PHYSICAL;
  if (m == nm || lg == ph) return PTL_ARG_INVALID;
  std::uint32_t index = (nm ? 1u : 0u) | (ph ? 2u : 0u);
  Ni& ni = nis_[index];
  if (ni.refs > 0) {
    ++ni.refs;
    r.limits = ni.limits;
    r.handle = ni.handle;
    return PTL_OK;
  }
  if (ni.dying) {  // the previous NI still has messages in flight
    r.busy = true;
    return PTL_NO_SPACE;
  }
  if (c.pid != PTL_PID_ANY && c.pid != pid_) return PTL_ARG_INVALID;
  ni = Ni{};
  ni.index = index;
  ni.options = o;
  ni.matching = m;
  ni.logical = lg;
  ni.limits = c.has_limits ? clamp_limits(c.limits) : default_limits();
  // No more than the LIB's pool of triggered operations (LIB_TRIGGERED)
  // can hold: a limit above it promised operations that failed NO_SPACE.
  ni.limits.max_triggered_ops =
      std::min(ni.limits.max_triggered_ops, static_cast<int>(trigs_.capacity()));
  const auto& l = ni.limits;
  try {
    ni.pts.resize(static_cast<std::size_t>(l.max_pt_index) + 1);
    ni.mds = std::make_unique<Table<Md>>(Kind::md, index, l.max_mds);
    ni.eqs = std::make_unique<Table<Eq>>(Kind::eq, index, l.max_eqs);
    ni.cts = std::make_unique<Table<Ct>>(Kind::ct, index, l.max_cts);
    // Room to list each CT of every NI that has CTs (triggered.cpp).
    std::size_t cts = 0;
    for (const Ni& other : nis_)
      if (other.cts) cts += static_cast<std::size_t>(other.limits.max_cts);
    mirror_owed_.reserve(cts);
    ni.entries = std::make_unique<Table<Entry>>(m ? Kind::me : Kind::le, index, l.max_entries);
    ni.unexpected_store.resize(static_cast<std::size_t>(l.max_unexpected_headers));
  } catch (...) {
    ni = Ni{};
    return PTL_NO_SPACE;
  }
  for (auto& u : ni.unexpected_store) ni.unexpected_free.push_back(&u);
  ni.refs = 1;
  ni.handle = make_handle(Kind::ni, index, ni_gen_[index], 0);
  r.limits = ni.limits;
  r.handle = ni.handle;
  PIER_LOG(debug, "lib", "ni {} up: {} {}", index, m ? "matching" : "non-matching",
           lg ? "logical" : "physical");
  return PTL_OK;
}

int Lib::ni_fini(const Call& c, Reply&) noexcept {
  Ni* ni = find_ni(c.handle);
  if (!ni) return PTL_ARG_INVALID;
  if (--ni->refs == 0) destroy_ni(*ni);
  return PTL_OK;
}

void Lib::destroy_ni(Ni& ni) noexcept {
  std::uint32_t i = ni.index;
  ni_gen_[i] = ni_gen_[i] + 1 >= generation_limit ? 1 : ni_gen_[i] + 1;
  ni.refs = 0;
  // Requests parked for this NI are refused when their turn comes (the
  // next safe point, if they are first), so their senders get their
  // credits back.
  if (parked_count_ > 0) parked_retry_due_ = true;
  ni.handle = 0;
  // Its CTs are gone for the API at once, even while messages finish; a
  // thread waiting on one looks again now and gets PTL_ARG_INVALID.
  if (ni.cts) ni.cts->for_each([&](Ct& ct) { mirror(ct, true); });
  notifier_.bump();
  if (ni.inflight > 0) {
    // Messages still point at this NI's objects; the last one to finish
    // (release_msg) comes back here.
    ni.dying = true;
    return;
  }
  if (ni.cts) ni.cts->for_each([&](Ct& ct) { drop_triggers(&ct); });
  if (ni.mds) ni.mds->for_each([&](Md& md) { drop_buffer(md.buffer); });
  if (ni.entries) ni.entries->for_each([&](Entry& e) { drop_buffer(e.buffer); });
  ni = Ni{};
  ni.index = i;
}

int Lib::ni_status(const Call& c, Reply& r) noexcept {
  Ni* ni = find_ni(c.handle);
  if (!ni || c.size >= PTL_SR_LAST) return PTL_ARG_INVALID;
  r.sr = ni->status[c.size];
  return PTL_OK;
}

int Lib::ni_handle(const Call& c, Reply& r) noexcept {
  Ni* ni = owner_ni(c.handle);
  if (!ni) return PTL_ARG_INVALID;
  r.handle = ni->handle;
  return PTL_OK;
}

int Lib::set_map(const Call& c, Reply&) noexcept {
  Ni* ni = find_ni(c.handle);
  if (!ni || !ni->logical || c.ptr == nullptr || c.size == 0) return PTL_ARG_INVALID;
  if (map_set_) return PTL_IGNORED;
  const auto* in = static_cast<const ptl_process_t*>(c.ptr);
  std::size_t mine = c.size;
  for (std::size_t i = 0; i < c.size; ++i) {
    const auto& p = in[i];
    if (p.phys.pid >= core_.size() || nid_of_rank_[p.phys.pid] != p.phys.nid)
      return PTL_ARG_INVALID;  // not a process of this job
    if (p.phys.nid == nid_ && p.phys.pid == pid_ && mine == c.size) mine = i;
  }
  if (mine == c.size) return PTL_ARG_INVALID;
  try {
    map_.assign(in, in + c.size);
  } catch (...) {
    return PTL_NO_SPACE;
  }
  my_rank_ = static_cast<ptl_rank_t>(mine);
  map_set_ = true;
  return PTL_OK;
}

int Lib::get_map(const Call& c, Reply& r) noexcept {
  Ni* ni = find_ni(c.handle);
  if (!ni || !ni->logical) return PTL_ARG_INVALID;
  if (c.size > 0 && c.out == nullptr) return PTL_ARG_INVALID;
  std::size_t n = std::min<std::size_t>(c.size, map_.size());
  if (n > 0) std::memcpy(c.out, map_.data(), n * sizeof(ptl_process_t));
  r.size = map_.size();
  return PTL_OK;
}

int Lib::pt_alloc(const Call& c, Reply& r) noexcept {
  Ni* ni = find_ni(c.handle);
  if (!ni || (c.options & ~unsigned{PTL_PT_ALLOC_OPTIONS_MASK}) != 0) return PTL_ARG_INVALID;
  Eq* eq = nullptr;
  if (c.handle2 == PTL_EQ_NONE) {
    if (c.options & PTL_PT_FLOWCTRL) return PTL_PT_EQ_NEEDED;
  } else if (!(eq = ni->eqs->lookup(c.handle2))) {
    return PTL_ARG_INVALID;
  }
  auto n = static_cast<ptl_pt_index_t>(ni->pts.size());
  ptl_pt_index_t index = c.pt_index;
  if (index == PTL_PT_ANY) {
    ptl_pt_index_t start = ni->last_pt == PTL_PT_ANY ? 0 : (ni->last_pt + 1) % n;
    index = n;
    for (ptl_pt_index_t k = 0; k < n; ++k) {
      ptl_pt_index_t i = (start + k) % n;
      if (!ni->pts[i].allocated) {
        index = i;
        break;
      }
    }
    if (index == n) return PTL_PT_FULL;
  } else if (index >= n) {
    return PTL_ARG_INVALID;
  } else if (ni->pts[index].allocated) {
    return PTL_PT_IN_USE;
  }
  Pt& pt = ni->pts[index];
  pt = Pt{};
  pt.allocated = true;
  pt.enabled = (c.options & PTL_PT_ALLOC_DISABLED) == 0;
  pt.options = c.options;
  pt.eq = eq;
  ni->last_pt = index;
  r.pt_index = index;
  return PTL_OK;
}

namespace {
Pt* find_pt(Ni* ni, ptl_pt_index_t i) {
  if (!ni || i >= ni->pts.size() || !ni->pts[i].allocated) return nullptr;
  return &ni->pts[i];
}
}  // namespace

int Lib::pt_free(const Call& c, Reply&) noexcept {
  Ni* ni = find_ni(c.handle);
  Pt* pt = find_pt(ni, c.pt_index);
  if (!pt) return PTL_ARG_INVALID;
  if (!pt->priority.empty() || !pt->overflow.empty() || pt->inflight > 0) return PTL_PT_IN_USE;
  while (Unexpected* u = pt->unexpected.head) {
    pt->unexpected.remove(u);
    Entry* e = u->entry;
    *u = Unexpected{};
    ni->unexpected_free.push_back(u);
    if (e && e->uh_refs > 0) {
      --e->uh_refs;
      maybe_auto_free(e);
    }
  }
  *pt = Pt{};
  return PTL_OK;
}

int Lib::pt_disable(const Call& c, Reply&) noexcept {
  Pt* pt = find_pt(find_ni(c.handle), c.pt_index);
  if (!pt) return PTL_ARG_INVALID;
  pt->enabled = false;
  return PTL_OK;
}

int Lib::pt_busy(const Call& c, Reply& r) noexcept {
  Pt* pt = find_pt(find_ni(c.handle), c.pt_index);
  if (!pt) return PTL_ARG_INVALID;
  r.busy = pt->inflight > 0;
  return PTL_OK;
}

int Lib::pt_enable(const Call& c, Reply&) noexcept {
  Pt* pt = find_pt(find_ni(c.handle), c.pt_index);
  if (!pt) return PTL_ARG_INVALID;
  // A disable still owes its PT_DISABLED (messages matched before it are
  // landing): it comes now, before anything the enabled index takes, and a
  // later disable owes its own.
  if (pt->disabled_owed) post_pt_disabled(*pt, c.pt_index);
  pt->enabled = true;
  return PTL_OK;
}

int Lib::get_id(const Call& c, Reply& r, bool physical) noexcept {
  Ni* ni = find_ni(c.handle);
  if (!ni) return PTL_ARG_INVALID;
  if (physical) {
    r.id.phys.nid = nid_;
    r.id.phys.pid = pid_;
  } else {
    r.id = my_id(*ni);
  }
  return PTL_OK;
}

int Lib::bundle(const Call& c, Reply&, bool start) noexcept {
  Ni* ni = find_ni(c.handle);
  if (!ni) return PTL_ARG_INVALID;
  // Operations are handed to the core at once, so there is nothing to defer
  // and nothing to flush; the count only checks the nesting.
  if (start) {
    ++ni->bundles;
  } else {
    if (ni->bundles == 0) return PTL_ARG_INVALID;
    --ni->bundles;
  }
  return PTL_OK;
}

}  // namespace pier::lib
