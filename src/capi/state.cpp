// pier capi: PtlInit / PtlFini / PtlAbort, the forward path to the LIB, and
// the one mapping from pier::Status to PTL_* return codes.
#include <portals4.h>

#include <sys/mman.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>

#include "base/config.hpp"
#include "base/log.hpp"
#include "base/pins.hpp"
#include "capi/state.hpp"

namespace pier::capi {

inline const config::BoolKey progress_thread_key{
    "CAPI_PROGRESS_THREAD", true,
    "run a helper thread that progresses the Portals LIB while no application thread waits, "
    "so a target completes puts, gets and atomics without calling into pier; off: the LIB "
    "progresses only inside pier calls"};

namespace {
std::mutex init_mu;
int init_count = 0;
/// Pinned (Pin, base::pins) by every call: the last PtlFini waits until
/// no pin is left.
std::atomic<State*> live{nullptr};
// Threads inside a blocking call, times two, plus the abort bit: one word,
// so "set the abort only while someone waits" and "the last waiter clears
// it" cannot interleave into an abort that outlives every waiter.
std::atomic<std::uint64_t> wait_state{0};
constexpr std::uint64_t abort_bit = 1, one_waiter = 2;

// Bumped by every API call (a plain store: it must change, not count
// exactly), so the helper can tell an application that progresses itself.
std::atomic<std::uint64_t> api_calls{0};

std::uint64_t app_calls() noexcept {
  return api_calls.load(std::memory_order_relaxed);
}

bool app_waiting() noexcept {
  return wait_state.load(std::memory_order_seq_cst) >= one_waiter;
}

/// Status of a failed forward to PTL_*; the LIB itself answers in PTL_*.
int to_ptl(Status s) noexcept {
  switch (s) {
    case Status::ok:
    case Status::in_progress:
      return PTL_OK;
    case Status::invalid_argument:
    case Status::not_found:
    case Status::malformed:
      return PTL_ARG_INVALID;
    case Status::in_use:
      return PTL_IN_USE;
    case Status::no_resource:
    case Status::no_memory:
      return PTL_NO_SPACE;
    case Status::not_initialized:
      return PTL_NO_INIT;
    case Status::unsupported:
    case Status::truncated:
    case Status::canceled:
    case Status::timeout:
    case Status::rejected:
    case Status::dropped:
    case Status::permission_denied:
    case Status::version_mismatch:
    case Status::closed:
    case Status::broken:
    case Status::system_error:
    case Status::internal:
      return PTL_FAIL;
  }
  return PTL_FAIL;
}

constexpr std::size_t mirror_bytes = 4 * lib::ct_mirrors_per_ni * sizeof(lib::CtMirror);

int build(State& s) {
  auto boot = boot::Bootstrap::open("portals");
  if (!boot) return to_ptl(boot.status());
  s.boot = std::move(*boot);
  auto core = core::Core::from_bootstrap(*s.boot);
  if (!core) {
    PIER_LOG(error, "capi", "cannot bring up the core: {}", to_string(core.status()));
    return to_ptl(core.status());
  }
  s.core = std::move(*core);
  auto lib = lib::Lib::create(*s.core);
  if (!lib) return to_ptl(lib.status());
  s.lib = std::move(*lib);
  s.lib->set_ct_mirrors(s.ct_mirrors.get());
  // Calls run the LIB in the caller's thread in both modes: handing each one
  // to a progress thread cost a thread switch per call, and on a machine
  // with as many cores as processes the thread competed with the
  // application for them.
  try {
    s.api = std::make_unique<nal::Direct>(*s.core, *s.lib);
    if (progress_thread_key.get())
      s.helper = std::make_unique<Helper>(*s.core, &app_waiting, &app_calls);
  } catch (...) {
    return PTL_NO_SPACE;
  }
  return PTL_OK;
}

/// Lets answers already handed to the core (acks, replies) leave before the
/// core goes away, for a bounded time: a peer that waits for an ack must not
/// lose it to this process's PtlFini.
void drain(State& s) {
  auto deadline = base::Deadline::after_ms(2000);
  lib::Call c;
  while (!deadline.expired()) {
    lib::Reply r;
    if (s.api->forward(static_cast<std::uint32_t>(lib::Op::pending),
                       std::as_bytes(std::span(&c, 1)), std::as_writable_bytes(std::span(&r, 1)),
                       deadline) != Status::ok ||
        r.size == 0)
      return;
    (void)s.api->poll();
  }
}

void tear_down(State* s) {
  if (s->api) drain(*s);
  // The helper and the NAL first: they must stop before the LIB and the
  // core they drive go away.
  s->helper.reset();
  s->api.reset();
  s->lib.reset();
  s->core.reset();
  s->boot.reset();
  delete s;
}
}  // namespace

MirrorTable::MirrorTable() {
  void* p = ::mmap(nullptr, mirror_bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    PIER_LOG(warn, "capi", "no memory for CT mirrors: CT reads go through the LIB");
    return;
  }
  table_ = static_cast<lib::CtMirror*>(p);  // zero pages: every mirror shows no CT
}

MirrorTable::~MirrorTable() {
  if (table_) ::munmap(table_, mirror_bytes);
}

State* state() noexcept {
  return live.load(std::memory_order_acquire);
}

Pin::Pin() noexcept {
  // Either we see the state gone, or PtlFini (its exchange, then
  // pins::fence()) sees our pin.
  base::pins::enter();
  s_ = live.load(std::memory_order_seq_cst);
  if (s_ == nullptr) base::pins::leave();
}

Pin::~Pin() {
  if (s_ != nullptr) base::pins::leave();
}

int call(lib::Op op, const lib::Call& c, lib::Reply* r) noexcept {
  Pin pin;
  State* s = pin.get();
  if (!s) return PTL_NO_INIT;
  api_calls.store(api_calls.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  lib::Reply local;
  lib::Reply& out = r ? *r : local;
  // never(): the direct NAL's forward is a call, not a wait, and reading the
  // clock for a deadline it ignores cost a tenth of a small put.
  Status st = s->api->forward(static_cast<std::uint32_t>(op), std::as_bytes(std::span(&c, 1)),
                              std::as_writable_bytes(std::span(&out, 1)), base::Deadline::never());
  if (st != Status::ok) return to_ptl(st);
  return out.rc;
}

int start_move(const lib::Move& m) noexcept {
  Pin pin;
  State* s = pin.get();
  if (!s) return PTL_NO_INIT;
  api_calls.store(api_calls.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  int rc = PTL_FAIL;
  Status st = s->api->forward(static_cast<std::uint32_t>(lib::Op::start_move),
                              std::as_bytes(std::span(&m, 1)),
                              std::as_writable_bytes(std::span(&rc, 1)), base::Deadline::never());
  if (st != Status::ok) return to_ptl(st);
  return rc;
}

void wait_enter(State& s) noexcept {
  const std::uint64_t before = wait_state.fetch_add(one_waiter, std::memory_order_seq_cst);
  // A helper asleep in the core, or another waiter in a long turn, learns
  // of this waiter now (a waiter's later looks are patient and wake
  // nobody), not when its sleep ends. Only then: wake() costs a locked
  // store on every wait of a ping-pong. (The helper raises its flag before
  // it reads wait_state, we read the flag after raising wait_state: one of
  // the two sees the other; a waiter's long turn ends on a second waiter.)
  if (before >= one_waiter || (s.helper && s.helper->in_core())) s.core->wake();
}

void wait_exit() noexcept {
  // Ref semantics: the abort lasts while someone waits, and ends with the
  // last waiter.
  std::uint64_t s = wait_state.load(std::memory_order_acquire);
  while (true) {
    std::uint64_t n = s - one_waiter;
    if (n < one_waiter) n = 0;
    if (wait_state.compare_exchange_weak(s, n, std::memory_order_acq_rel)) return;
  }
}

bool aborting() noexcept {
  return wait_state.load(std::memory_order_acquire) & abort_bit;
}

/// Sets the abort bit if a thread waits; false if nobody does.
bool raise_abort() noexcept {
  std::uint64_t s = wait_state.load(std::memory_order_acquire);
  while (s >= one_waiter)
    if (wait_state.compare_exchange_weak(s, s | abort_bit, std::memory_order_acq_rel)) return true;
  return false;
}

bool idle(State& s, std::uint64_t seen, const base::Deadline& deadline, bool spin) noexcept {
  // A bounded turn: the waiter re-checks PtlAbort, its deadline and its
  // peers between turns, and other threads get the critical section. Each
  // of those also ends a turn at once (PtlAbort and PtlFini wake the core,
  // an event bumps the notifier, a caller's enter_critical wakes it), so a
  // waiter that has seen nothing for a whole turn takes longer ones: at
  // 1 ms an idle PtlEQWait cost 3% of a core in wake-ups.
  // Not with another waiter: waiters take the lock patiently (they wake
  // nobody), so the other would wait out our whole turn for its own look.
  const bool alone = wait_state.load(std::memory_order_acquire) < 2 * one_waiter;
  const std::int64_t turn_ns = spin || !alone ? 1'000'000 : 50'000'000;
  lib::Notifier& n = s.lib->notifier();
  s.core->enter_critical();
  // While transfers are under way, spin: the drivers' waits do not wake for
  // every track (a large transfer's progress), and a sleep there would
  // stall a stream for a whole turn.
  bool quiet = false;
  // Another thread's call (not another waiter's: Core::set_patient) wakes
  // our sleep in enter_critical; the turn then ends so that the call gets
  // in now, not when the turn would have.
  const auto done = [&] {
    return n.epoch() != seen || s.core->pending() != 0 || s.core->contended_urgently() ||
           (turn_ns > 1'000'000 && wait_state.load(std::memory_order_acquire) >= 2 * one_waiter);
  };
  // With transfers under way, one pass. When that pass ends them (a put's
  // own send, say) and shows nothing new, the turn goes on here rather than
  // after a round through the lock and a look at the caller's condition
  // that could not have changed (it moves only with the epoch); unless
  // another thread waits for the lock, whose look comes first, as before.
  bool turn = true;
  if (s.core->pending() != 0) {
    (void)s.core->progress();
    turn = !done() && !s.core->contended();
  }
  if (turn) quiet = s.core->wait_turn(done, deadline, turn_ns, spin) == Status::timeout;
  s.core->leave_critical();
  // Others asked for the lock during our turn: let them take it before our
  // next turn does (a mutex hands it to whoever comes first, often us).
  for (int i = 0; i < 1000 && s.core->contended(); ++i) std::this_thread::yield();
  return quiet;
}

void poll() noexcept {
  api_calls.store(api_calls.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  Pin pin;
  if (State* s = pin.get()) (void)s->api->poll();
}

}  // namespace pier::capi

using pier::capi::State;

extern "C" {

int PtlInit(void) {
  try {
    std::lock_guard lock(pier::capi::init_mu);
    if (pier::capi::init_count > 0) {
      ++pier::capi::init_count;
      return PTL_OK;
    }
    auto* s = new State;
    int rc = pier::capi::build(*s);
    if (rc != PTL_OK) {
      pier::capi::tear_down(s);
      return PTL_FAIL;
    }
    // Before the state is published: PtlFini's fence must match the pins
    // that may see it (base/pins.hpp).
    (void)pier::base::pins::prepare();
    pier::capi::live.store(s, std::memory_order_release);
    pier::capi::init_count = 1;
    return PTL_OK;
  } catch (...) {
    return PTL_FAIL;
  }
}

void PtlFini(void) {
  std::lock_guard lock(pier::capi::init_mu);
  if (pier::capi::init_count == 0) return;
  if (--pier::capi::init_count > 0) return;
  State* s = pier::capi::live.exchange(nullptr, std::memory_order_seq_cst);
  if (!s) return;
  pier::base::pins::fence();
  // Threads still inside a call leave within a turn (a wait looks up the
  // state between turns of at most a millisecond); wake the sleepers.
  auto deadline = pier::base::Deadline::after_ms(10000);
  while (pier::base::pins::held() != 0) {
    if (deadline.expired()) {
      PIER_LOG(error, "capi",
               "PtlFini: {} calls still inside pier after 10 s; the state is left in place",
               pier::base::pins::held());
      return;
    }
    s->lib->notifier().bump();
    s->core->wake();
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  pier::capi::tear_down(s);
}

void PtlAbort(void) {
  if (!pier::capi::raise_abort()) return;
  pier::capi::Pin pin;
  if (State* s = pin.get()) {
    s->lib->notifier().bump();
    s->core->wake();  // a waiter asleep in a driver hears of it now, not at its turn's end
  }
}

}  // extern "C"
