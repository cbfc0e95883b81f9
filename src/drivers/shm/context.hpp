// shm: the driver context (one per NI): the listening abstract socket that
// peers connect to, the url, the instances, and the receive-any machinery.
#pragma once

#include "drivers/shm/codec.hpp"
#include "drivers/shm/sys.hpp"

#include <pier/driver.hpp>

#include <poll.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

namespace pier::drivers::shm {

class ShmInstance;

/// Values read once from the configuration at init().
struct Settings {
  std::uint32_t ring_lines = 0;       ///< cells per ring and direction (power of two)
  std::uint32_t max_packet = 0;       ///< largest small-track packet
  bool cma = true;                    ///< single copy allowed
  std::size_t cma_min = 0;            ///< smaller large-track packets go through the cells
  std::size_t split_min = 0;          ///< single copies from this size are split in two
  std::int64_t spin_ns = 0;           ///< busy polling before a wait sleeps
  std::int64_t wait_any_spin_ns = 0;  ///< the same for wait_any: 0 when the caller spins
  std::int64_t peer_check_ns = 0;     ///< least time between two socket checks of a poller
  bool on_demand = false;             ///< Hints::on_demand: acceptors ask for a call back
  std::int64_t park_ns = 0;           ///< an accepted connection no instance adopts is dropped
  std::size_t max_pending = 0;        ///< accepted connections waiting at most
};

class ShmContext final : public driver::Context {
 public:
  ShmContext();
  ~ShmContext() override;

  std::string_view name() const noexcept override { return "shm"; }
  Result<driver::Properties> properties(const driver::Hints& hints) override;
  Result<std::vector<std::byte>> init() override;
  Status close() override;
  Result<std::unique_ptr<driver::Instance>> open_instance(driver::Track track) override;
  Status probe_any(driver::Instance** ready) override;
  Status wait_any(driver::Instance** ready, driver::Deadline deadline) override;
  Status cancel_any() override;
  Status wait_arm(std::vector<::pollfd>& fds) override;
  Status wait_disarm() override;
  Status incoming(std::vector<std::byte>& remote_url) override;
  std::string unavailable_reason() const override;
  std::string degraded_reason() const override;

  // --- for instances --------------------------------------------------
  bool ready() const noexcept { return phase_ == Phase::ready; }
  const Settings& settings() const noexcept { return settings_; }
  const Url& url() const noexcept { return url_; }
  std::span<const std::byte> url_bytes() const noexcept { return url_bytes_; }
  const driver::Caps& caps() const noexcept { return caps_; }
  int listen_fd() const noexcept { return listen_.get(); }
  /// Another live instance already connects (url, track).
  bool taken(std::span<const std::byte> url, driver::Track track,
             const ShmInstance* except) const noexcept;
  /// Accepts waiting connections and hands hellos to the instances that
  /// wait for them. Never blocks.
  void progress_accept() noexcept;
  /// Sleeps until the listening socket or a half-open connection has news,
  /// or the deadline.
  void wait_accept(driver::Deadline deadline) noexcept;
  void forget(ShmInstance* inst) noexcept;
  /// Publishers may use plain stores (this process is registered for the
  /// sleepers' heavy fence, wake.hpp).
  bool light_publisher() const noexcept { return light_; }
  /// Records why a pair runs without single copy, for degraded_reason().
  void note_degraded(std::string why) noexcept;
  /// Closes an instance's control socket under the lock receive-any reads
  /// it under, so a wait_any() on another thread never reads a closed (or
  /// reused) descriptor.
  void close_socket(Fd& sock) noexcept {
    std::lock_guard lock(mutex_);
    sock.reset();
  }

 private:
  enum class Phase : std::uint8_t { fresh, described, ready, closed };
  /// A connection accepted but not yet matched to an instance.
  struct Pending {
    Fd sock;
    bool has_hello = false;
    Hello hello;
    Fd segment;
    bool reported = false;            ///< by incoming()
    driver::Clock::time_point since;  ///< accepted at, then hello read at, then reported at
  };
  bool read_hello(Pending& p) noexcept;
  /// wait_arm's answer once armed: ok (sleep) or in_progress (a packet).
  Status probe_ready();

  Phase phase_ = Phase::fresh;
  /// Guards instances_ and pending_: instances on other threads connect,
  /// come and go while receive-any runs. Recursive because the connect path
  /// re-enters (progress_accept() asks taken()). Never held while sleeping.
  mutable std::recursive_mutex mutex_;
  Settings settings_;
  driver::Caps caps_;
  Url url_;
  std::vector<std::byte> url_bytes_;
  Fd listen_;
  Fd cancel_;  ///< eventfd that cancel_any() writes
  std::atomic<bool> canceled_{false};
  std::vector<ShmInstance*> instances_;
  std::vector<Pending> pending_;
  /// Peers that asked to be connected (a call-back hello), for incoming().
  std::vector<std::array<std::byte, Url::size>> asked_;
  /// Raises the sleepers word of every small instance (watched_) and lists
  /// what to poll: the cancel eventfd and the instances' sockets.
  void watch_all(std::vector<::pollfd>& fds);
  /// Lowers what watch_all() raised, on the instances still there.
  void unwatch_all();
  void drain_cancel();
  std::vector<::pollfd> pollfds_;      ///< wait_any()'s own: it sleeps on it unlocked
  std::vector<ShmInstance*> watched_;  ///< instances a wait raised a flag on
  std::size_t next_any_ = 0;           ///< round-robin start of probe_any()
  std::string unavailable_;
  std::string degraded_;  ///< guarded by mutex_
  bool light_ = false;
  /// The word peers read with process_vm_readv to test single copy.
  alignas(64) std::uint64_t probe_word_ = 0;
};

}  // namespace pier::drivers::shm
