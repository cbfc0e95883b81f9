// pier-perf: a driver-level link to one peer (a context, a small and a large
// track), and the blocking transfer primitives the benchmarks are built
// from. Every wait spins on poll with a deadline; nothing here allocates
// once the link is up.
#pragma once

#include <pier/driver.hpp>

#include <sys/uio.h>

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <thread>

namespace pier::perf {

using driver::Clock;
using driver::Deadline;

/// One packet in flight, with the iovec it points at; never moved once
/// posted (it lives in a fixed array).
struct Op {
  driver::Packet pkt;
  ::iovec iov{};
  driver::Instance* inst = nullptr;
  bool send = false;
  bool active = false;

  void prepare(std::span<std::byte> bytes);
  /// ok (done), in_progress (poll later), no_resource (retry), or an error.
  Status post_send(driver::Instance& on, const driver::Packet* rdv_from = nullptr);
  Status post_recv(driver::Instance& on);
  /// ok once complete (active goes false); in_progress; or an error.
  Status poll();
};

/// A failure with its explanation, for the report.
struct Failure {
  Status status = Status::ok;
  std::string what;
  explicit operator bool() const noexcept { return status != Status::ok; }
};

class Link {
 public:
  /// Creates the context and its url (first half of the set-up).
  static Result<std::unique_ptr<Link>> create(std::string_view spec, std::uint32_t rank,
                                              std::uint32_t size, std::string* why);
  ~Link();

  const std::vector<std::byte>& url() const noexcept { return url_; }
  const driver::Caps& caps() const noexcept { return props_.caps; }
  const driver::Profile& profile() const noexcept { return props_.profile; }
  /// What the driver ran without with this peer ("" when nothing), e.g. shm
  /// single copy refused by the kernel.
  std::string degraded_reason() const { return ctx_->degraded_reason(); }
  /// Opens both tracks and connects them to the peer's context url.
  Failure connect(std::span<const std::byte> peer_url, Deadline deadline);

  driver::Instance& small() noexcept { return *small_; }
  driver::Instance& large() noexcept { return *large_; }
  /// Whether a message of this size goes over the large track (rendezvous).
  bool uses_large(std::size_t size) const noexcept {
    return props_.caps.max_packet != 0 && size > props_.caps.max_packet;
  }

  /// Blocking helpers: post, then poll until done or the deadline.
  Failure send(driver::Instance& on, std::span<std::byte> bytes, Deadline deadline,
               const driver::Packet* rdv_from = nullptr);
  Failure recv(driver::Instance& on, std::span<std::byte> bytes, Deadline deadline,
               std::size_t* got = nullptr);
  /// Polls until `op` completes.
  Failure wait(Op& op, Deadline deadline, const char* what);

 private:
  Link() = default;
  std::unique_ptr<driver::Context> ctx_;
  driver::Properties props_;
  std::vector<std::byte> url_;
  std::unique_ptr<driver::Instance> small_;
  std::unique_ptr<driver::Instance> large_;
};

/// Called on each fruitless poll of a spin loop: after a while it yields the
/// CPU, so that on an oversubscribed host the peer gets to run, while an
/// idle host still sees pure spinning for the short waits that matter.
inline void relax(std::uint32_t spins) noexcept {
  if (spins > 2000) std::this_thread::yield();
}

/// Retry-or-fail: no_resource and in_progress are not failures.
inline bool is_failure(Status s) noexcept {
  return s != Status::ok && s != Status::in_progress && s != Status::no_resource;
}

}  // namespace pier::perf
