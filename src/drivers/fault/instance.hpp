// pier fault driver: the Instance decorator. With an empty plan (or a plan
// for the other track) every call goes straight to the inner instance. Else
// each post is numbered, the plan decides its faults, and packets the
// wrapper must own (held, modified, duplicated) live in a SlotPool sized
// when the instance opened.
#pragma once

#include <pier/driver.hpp>

#include "drivers/fault/plan.hpp"
#include "drivers/fault/slots.hpp"

#include <cstdint>
#include <memory>
#include <mutex>

namespace pier::drivers::fault {

class Context;

class Instance final : public driver::Instance {
 public:
  Instance(Context& context, std::unique_ptr<driver::Instance> inner, driver::Track track,
           std::uint64_t stream);
  ~Instance() override;

  driver::Instance* inner() const noexcept { return inner_.get(); }
  bool faulty() const noexcept { return faulty_; }

  Status connect_async(std::span<const std::byte> remote_url) override;
  Status connect_wait(driver::Deadline deadline) override;
  Status disconnect() override;

  Status send_buf_get(driver::Packet& pkt) override;
  Status send_buf_post(driver::Packet& pkt, std::size_t len) override;
  Status send_post(driver::Packet& pkt) override;
  Status send_poll(driver::Packet& pkt) override;
  Status send_wait(driver::Packet& pkt, driver::Deadline deadline) override;
  Status send_prefetch(driver::Packet& pkt) override;
  Status send_unfetch(driver::Packet& pkt) override;

  Status recv_post(driver::Packet& pkt) override;
  Status recv_poll(driver::Packet& pkt) override;
  Status recv_buf_release(driver::Packet& pkt) override;
  Status recv_wait(driver::Packet& pkt, driver::Deadline deadline) override;
  Status recv_cancel(driver::Packet& pkt) override;
  Status recv_prefetch(driver::Packet& pkt) override;
  Status recv_unfetch(driver::Packet& pkt) override;

  /// For Context::wait_any(): moves held packets on unless a call is running.
  void try_progress() noexcept;
  /// Earliest time a held packet is due (time_point::max() when none).
  driver::Clock::time_point next_release() noexcept;

 private:
  /// Releases due held packets, posts waiting ones, reaps completed ones.
  void progress_locked() noexcept;
  /// The send path shared by send_post() and send_buf_post(); `own` is the
  /// slot of a buffer send, or -1.
  Status send_locked(driver::Packet& pkt, int own, std::size_t len) noexcept;
  /// Copies a caller packet into a fresh slot; -1 when impossible.
  int copy_to_slot(const driver::Packet& pkt, std::size_t len) noexcept;
  /// Points the slot's inner packet at its bytes, with the caller's rdv data.
  void prepare_slot(int index, const driver::Packet& from) noexcept;
  /// Marks the instance dead: the inner link is disconnected so the peer
  /// notices, and every later call answers broken.
  void die(Fault cause, std::uint64_t number) noexcept;
  /// Completes a caller's send inside the wrapper (marker in driver_data).
  Status complete_local(driver::Packet& pkt, Status status, std::size_t len) noexcept;
  /// A poll (or, `wait`, a wait) of a late send: completes it when its
  /// polls are used up, else counts one down.
  Status poll_late(driver::Packet& pkt, std::uintptr_t polls_left, bool wait) noexcept;
  void note(Fault f, std::uint64_t number, bool applied) noexcept;
  /// Waits through the inner wait in steps that end when a held packet is
  /// due, so delays expire even while the caller blocks.
  template <class WaitFn>
  Status stepped_wait(driver::Deadline deadline, WaitFn&& wait) noexcept;

  Context& context_;
  std::unique_ptr<driver::Instance> inner_;
  const std::uint64_t stream_;
  const driver::Track track_;
  const bool faulty_;
  std::mutex mutex_;  ///< serialises calls with Context::wait_any() progress
  bool dead_ = false;
  std::uint64_t ops_ = 0;    ///< numbered operations done (Counter::op)
  std::uint64_t sends_ = 0;  ///< numbered sends done (Counter::send)
  SlotPool slots_;
};

}  // namespace pier::drivers::fault
