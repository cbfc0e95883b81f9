// pier nal: the direct protection domain: the LIB runs in the caller's
// thread, inside the core's critical section.
#include <algorithm>

#include "nal/nal.hpp"

namespace pier::nal {

Result<core::Region> Direct::validate(void* base, std::size_t extent) noexcept {
  core_.enter_critical();
  auto r = core_.validate(base, extent);
  core_.leave_critical();
  return r;
}

Status Direct::invalidate(const core::Region& region) noexcept {
  core_.enter_critical();
  Status s = core_.invalidate(region);
  core_.leave_critical();
  return s;
}

Status Direct::wait(Done done, void* arg, base::Deadline deadline) noexcept {
  for (;;) {
    // Slices of at most a millisecond: other threads' forward() get the
    // critical section between them.
    const base::Deadline slice =
        deadline.remaining_ns() < 1'000'000 ? deadline : base::Deadline::after_ms(1);
    core_.enter_critical();
    Status s = core_.wait([&] { return done(arg); }, slice);
    const bool ok = s == Status::ok && done(arg);
    core_.leave_critical();
    if (ok) return Status::ok;
    if (s != Status::ok && s != Status::timeout) return s;
    if (deadline.expired()) return Status::timeout;
  }
}

Status Direct::poll() noexcept {
  core_.enter_critical();
  Status s = core_.progress();
  core_.leave_critical();
  return s;
}

}  // namespace pier::nal
