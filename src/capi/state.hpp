// pier::capi: the process-wide state behind the C entry points: the
// bootstrap, the core, the LIB and the NAL between the API and the LIB.
// PtlInit builds it, the last PtlFini tears it down.
#pragma once

#include <portals4.h>

#include <atomic>
#include <memory>
#include <mutex>

#include "base/clock.hpp"
#include "boot/boot.hpp"
#include "capi/helper.hpp"
#include "core/core.hpp"
#include "lib/lib.hpp"
#include "nal/nal.hpp"

namespace pier::capi {

/// Anonymous memory for the CT mirrors (lib::CtMirror): pages stay
/// untouched, so free, until a CT of their index is used.
class MirrorTable {
 public:
  MirrorTable();
  ~MirrorTable();
  MirrorTable(const MirrorTable&) = delete;
  MirrorTable& operator=(const MirrorTable&) = delete;
  /// Null when the memory could not be mapped: every CT read then asks the LIB.
  lib::CtMirror* get() const noexcept { return table_; }

 private:
  lib::CtMirror* table_ = nullptr;
};

struct State {
  /// Before the LIB, which writes into it: destroyed after it.
  MirrorTable ct_mirrors;
  std::unique_ptr<boot::Bootstrap> boot;
  std::unique_ptr<core::Core> core;
  std::unique_ptr<lib::Lib> lib;
  /// Direct in both modes (state.cpp says why): a forward runs the LIB in
  /// the calling thread and never waits, so it needs no deadline.
  std::unique_ptr<nal::Direct> api;
  /// Progress while no application thread waits (null: CAPI_PROGRESS_THREAD
  /// off, the LIB progresses only inside pier calls).
  std::unique_ptr<Helper> helper;
};

/// The live state, or nullptr before PtlInit / after the last PtlFini.
/// Only for a quick check: use it through a Pin.
State* state() noexcept;

/// The live state, held: the last PtlFini waits until no pin is left before
/// it tears the state down, so a thread inside a call (a wait, most of
/// all) never touches freed memory; it sees state() change and leaves with
/// PTL_NO_INIT.
class Pin {
 public:
  Pin() noexcept;
  ~Pin();
  Pin(const Pin&) = delete;
  Pin& operator=(const Pin&) = delete;
  /// Null before PtlInit or once the last PtlFini began.
  State* get() const noexcept { return s_; }

 private:
  State* s_ = nullptr;
};

/// Forwards `op` to the LIB; PTL_NO_INIT without state, PTL_FAIL when the
/// NAL could not deliver the call.
int call(lib::Op op, const lib::Call& c, lib::Reply* r = nullptr) noexcept;
/// Forwards a move that is not triggered (lib::Op::start_move): the Move
/// alone crosses, and the PTL_* code comes back. Same errors as call().
int start_move(const lib::Move& m) noexcept;

/// Bookkeeping of the blocking calls, for PtlAbort.
void wait_enter(State& s) noexcept;
void wait_exit() noexcept;
bool aborting() noexcept;
/// PtlAbort's half: sets the abort while a thread waits; false otherwise.
bool raise_abort() noexcept;
/// Lets time pass until something may have changed since `seen` (the LIB's
/// notifier epoch), at most about a millisecond: the caller drives the core
/// itself, spinning CORE_SPIN_US (when `spin`) and then sleeping in the
/// drivers' waits. True when the whole turn passed with nothing seen.
bool idle(State& s, std::uint64_t seen, const base::Deadline& deadline, bool spin = true) noexcept;
/// One progress pass of the core in the calling thread.
void poll() noexcept;

/// Marks the thread patient (core::Core::set_patient) from begin() to the
/// end of its scope: a waiter after its first attempt. The first attempt
/// stays urgent, so a thread that finds its event at once is not held for
/// another waiter's turn; the later ones do not cut other waiters' turns.
class PatientWait {
 public:
  PatientWait() = default;
  PatientWait(const PatientWait&) = delete;
  PatientWait& operator=(const PatientWait&) = delete;
  ~PatientWait() {
    if (on_) (void)core::Core::set_patient(was_);
  }
  void begin() noexcept {
    if (on_) return;
    was_ = core::Core::set_patient(true);
    on_ = true;
  }

 private:
  bool on_ = false;
  bool was_ = false;
};

/// Repeats `attempt(state)` until it returns something other than `empty`,
/// the timeout passes (returns `empty`) or PtlAbort (PTL_ABORTED). The
/// state is pinned for the whole wait, so attempts need no pin of their own.
template <class Attempt>
int wait_for(Attempt attempt, int empty, ptl_time_t timeout_ms) noexcept {
  Pin pin;
  State* s = pin.get();
  if (!s) return PTL_NO_INIT;
  if (timeout_ms == 0) {
    // A poll between the caller's own work: one pass of progress first (the
    // LIB may run in this thread and nobody else drives it), no waiting.
    if (aborting()) return PTL_ABORTED;
    poll();
    return attempt(*s);
  }
  auto deadline = timeout_ms == PTL_TIME_FOREVER ? base::Deadline::never()
                                                 : base::Deadline::after_ms(timeout_ms);
  wait_enter(*s);
  PatientWait patient;
  int rc = empty;
  // A turn spins first unless the last one passed whole with nothing seen:
  // an idle waiter's later turns sleep at once (they spun CORE_SPIN_US of
  // every millisecond before).
  bool quiet = false;
  while (true) {
    if (aborting()) {
      rc = PTL_ABORTED;
      break;
    }
    if (state() != s) {  // PtlFini began: it waits for us to leave
      rc = PTL_NO_INIT;
      break;
    }
    std::uint64_t seen = s->lib->notifier().epoch();
    rc = attempt(*s);
    if (rc != empty || deadline.expired()) break;
    patient.begin();
    quiet = idle(*s, seen, deadline, !quiet);
  }
  wait_exit();
  return rc;
}

}  // namespace pier::capi
