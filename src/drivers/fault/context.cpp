#include "drivers/fault/context.hpp"

#include "base/log.hpp"
#include "drivers/fault/instance.hpp"

#include <algorithm>

namespace pier::drivers::fault {

using driver::Clock;

Context::Context(std::unique_ptr<driver::Context> inner, Plan plan)
    : inner_(std::move(inner)), plan_(std::move(plan)) {
  events_.reserve(event_capacity);
}

Context::~Context() = default;

Result<driver::Properties> Context::properties(const driver::Hints& hints) {
  // A decorator: the caller sees the inner driver's caps and profile, which
  // every wrapped function honours.
  Result<driver::Properties> props = inner_->properties(hints);
  if (!props) return props;
  // Not the inner descriptors: packets this wrapper holds back and lets go
  // of later would make none of them readable, so a sleep on them would
  // miss those. Its wait_any() knows to wake for them.
  props->caps.wait_fds = false;
  caps_ = props->caps;
  return props;
}

Result<std::vector<std::byte>> Context::init() {
  Result<std::vector<std::byte>> url = inner_->init();
  if (url) {
    initialized_ = true;
    if (!plan_.empty())
      PIER_LOG(info, "fault", "injecting over {}: {}", inner_->name(), format_plan(plan_));
  }
  return url;
}

Status Context::close() {
  return inner_->close();
}

Result<std::unique_ptr<driver::Instance>> Context::open_instance(driver::Track track) {
  Result<std::unique_ptr<driver::Instance>> inner = inner_->open_instance(track);
  if (!inner) return inner.status();
  auto outer = std::make_unique<Instance>(*this, std::move(*inner), track, next_stream_++);
  {
    std::lock_guard lock(mutex_);
    instances_.push_back(outer.get());
  }
  return std::unique_ptr<driver::Instance>(std::move(outer));
}

void Context::forget(Instance* instance) noexcept {
  std::lock_guard lock(mutex_);
  instances_.erase(std::remove(instances_.begin(), instances_.end(), instance), instances_.end());
}

driver::Instance* Context::outer_of(driver::Instance* inner) noexcept {
  if (inner == nullptr) return nullptr;
  std::lock_guard lock(mutex_);
  for (Instance* i : instances_)
    if (i->inner() == inner) return i;
  return nullptr;
}

void Context::progress_instances() noexcept {
  if (plan_.empty()) return;
  std::lock_guard lock(mutex_);
  for (Instance* i : instances_) i->try_progress();
}

driver::Clock::time_point Context::next_release() noexcept {
  auto when = Clock::time_point::max();
  if (plan_.empty()) return when;
  std::lock_guard lock(mutex_);
  for (Instance* i : instances_) when = std::min(when, i->next_release());
  return when;
}

Status Context::probe_any(driver::Instance** ready) {
  progress_instances();
  driver::Instance* inner = nullptr;
  const Status st = inner_->probe_any(&inner);
  *ready = outer_of(inner);
  return st;
}

Status Context::wait_any(driver::Instance** ready, driver::Deadline deadline) {
  // Waits in steps that end when a held packet is due, so a delay expires
  // even while the caller sleeps here. A cancel_any() landing between two
  // steps is remembered, since the inner driver only ends a running wait.
  // Our instances may send meanwhile (on other threads, under their own
  // locks): the inner wait_any() must touch only the receive side, which
  // every built-in driver's does (FaultOver.WaitAnyInAnotherThreadWhileSending).
  cancel_.store(false, std::memory_order_relaxed);
  for (bool first = true;; first = false) {
    if (!first && cancel_.exchange(false, std::memory_order_acq_rel)) {
      *ready = nullptr;
      return Status::canceled;
    }
    progress_instances();
    const driver::Deadline step = std::min(deadline, next_release());
    driver::Instance* inner = nullptr;
    const Status st = inner_->wait_any(&inner, step);
    if (st != Status::timeout || step >= deadline || Clock::now() >= deadline) {
      *ready = outer_of(inner);
      return st;
    }
  }
}

Status Context::cancel_any() {
  const Status st = inner_->cancel_any();
  if (st == Status::ok) cancel_.store(true, std::memory_order_release);
  return st;
}

std::string Context::unavailable_reason() const {
  return inner_->unavailable_reason();
}

Status Context::install(Plan plan) {
  if (initialized_) return Status::in_use;
  plan_ = std::move(plan);
  return Status::ok;
}

void Context::record(const Event& event) noexcept {
  const auto f = static_cast<std::size_t>(event.fault);
  if (event.stream == Injector::connect_stream) {
    PIER_LOG(debug, "fault", "seed {} connect {}: {}{}", plan_.seed, event.number,
             to_string(event.fault), event.applied ? "" : " (not applied)");
  } else {
    PIER_LOG(debug, "fault", "seed {} instance {} {} {}: {}{}", plan_.seed, event.stream,
             counter_of(event.fault) == Counter::send ? "send" : "op", event.number,
             to_string(event.fault), event.applied ? "" : " (not applied: too large or no slot)");
  }
  std::lock_guard lock(mutex_);
  (event.applied ? stats_.applied : stats_.skipped)[f]++;
  if (events_.size() < event_capacity) {
    events_.push_back(event);
  } else {
    events_[event_next_] = event;
  }
  event_next_ = (event_next_ + 1) % event_capacity;
  ++event_total_;
}

Stats Context::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

std::vector<Event> Context::events() const {
  std::lock_guard lock(mutex_);
  if (events_.size() < event_capacity) return events_;
  std::vector<Event> out;
  out.reserve(event_capacity);
  for (std::size_t k = 0; k < event_capacity; ++k)
    out.push_back(events_[(event_next_ + k) % event_capacity]);
  return out;
}

}  // namespace pier::drivers::fault
