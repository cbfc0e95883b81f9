// pier fault driver: the Context decorator. It forwards everything to the
// inner context (name aside), so caps and profile are the inner driver's, and
// hands out Instances that wrap the inner instances.
#pragma once

#include <pier/driver.hpp>

#include "drivers/fault/plan.hpp"

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace pier::drivers::fault {

class Instance;

/// One injected fault, as recorded for tests and replay.
struct Event {
  std::uint64_t stream = 0;  ///< instance ordinal on its context, or Injector::connect_stream
  std::uint64_t number = 0;  ///< the operation number (its counter: counter_of(fault))
  Fault fault = Fault::drop;
  bool applied = true;  ///< false when it fired but could not act (no free slot, too large)
  friend bool operator==(const Event&, const Event&) = default;
};

/// Counts of faults applied, by Fault.
struct Stats {
  std::array<std::uint64_t, fault_count> applied{};
  std::array<std::uint64_t, fault_count> skipped{};
  std::uint64_t of(Fault f) const noexcept { return applied[static_cast<std::size_t>(f)]; }
};

class Context final : public driver::Context {
 public:
  /// Events kept for events(); older ones are overwritten.
  static constexpr std::size_t event_capacity = 4096;

  Context(std::unique_ptr<driver::Context> inner, Plan plan);
  ~Context() override;

  std::string_view name() const noexcept override { return "fault"; }
  Result<driver::Properties> properties(const driver::Hints& hints) override;
  Result<std::vector<std::byte>> init() override;
  Status close() override;
  Result<std::unique_ptr<driver::Instance>> open_instance(driver::Track track) override;
  Status probe_any(driver::Instance** ready) override;
  Status wait_any(driver::Instance** ready, driver::Deadline deadline) override;
  Status cancel_any() override;
  /// Connections are not faulted: the inner driver's reports as they are.
  Status incoming(std::vector<std::byte>& remote_url) override {
    return inner_->incoming(remote_url);
  }
  std::string unavailable_reason() const override;

  /// Replaces the plan; only before init() (else in_use).
  Status install(Plan plan);
  const Plan& plan() const noexcept { return plan_; }
  Stats stats() const;
  /// The most recent injected faults, oldest first.
  std::vector<Event> events() const;

  // --- for Instance -----------------------------------------------------
  const Injector& injector() const noexcept { return injector_; }
  const driver::Caps& inner_caps() const noexcept { return caps_; }
  std::uint64_t next_connect_number() noexcept { return ++connects_; }
  /// Counts, logs (debug, with the seed) and remembers an injected fault.
  void record(const Event& event) noexcept;
  void forget(Instance* instance) noexcept;

 private:
  /// Progress of every instance holding packets, skipping busy ones.
  void progress_instances() noexcept;
  driver::Clock::time_point next_release() noexcept;
  driver::Instance* outer_of(driver::Instance* inner) noexcept;

  std::unique_ptr<driver::Context> inner_;
  Plan plan_;
  Injector injector_{plan_};
  driver::Caps caps_;
  bool initialized_ = false;
  std::uint64_t next_stream_ = 0;
  std::atomic<std::uint64_t> connects_{0};
  std::atomic<bool> cancel_{false};  ///< a cancel_any() for the running wait_any()

  mutable std::mutex mutex_;  ///< guards instances_, events_, stats_
  std::vector<Instance*> instances_;
  std::vector<Event> events_;
  std::size_t event_next_ = 0;
  std::uint64_t event_total_ = 0;
  Stats stats_;
};

}  // namespace pier::drivers::fault
