// pier::boot: the bootstrap key-value exchange that spreads each process's
// driver urls (seed 002) before any driver can connect.
//
// Usage, in every rank:
//   auto boot = pier::boot::Bootstrap::open();   // picks the back end
//   boot->put("shm.url", url);  boot->commit();
//   boot->fence(deadline);                       // collective
//   auto peer_url = boot->get(peer, "shm.url");
//
// Semantics (those of PMI): put() stages a value; commit() publishes what was
// staged; after fence() returns ok, every value committed by every rank before
// it entered the fence is visible to get(). Keys are 1 to 255 bytes, values
// at most 1 MiB; a key put twice keeps the last value.
//
// Back ends, chosen by open() (PIER_BOOT_METHOD forces one):
//   pier-run   PIER_RUN_SOCKET, PIER_RUN_RANK and PIER_RUN_SIZE are set:
//              a Unix socket to the launcher (docs/launching.md);
//   singleton  otherwise: rank 0 of 1, fence() is immediate.
// A third back end (PMIx, PMI-1/2) derives from Bootstrap and is added to
// open() in bootstrap.cpp; nothing else changes.
//
// Errors: version_mismatch (the launcher or another rank runs an incompatible
// pier), timeout (fence deadline passed; last_error() names the missing
// ranks), broken (the launcher went away, or a rank died before the fence),
// invalid_argument, not_found (get of an unknown key). After a failed fence
// the exchange is unusable and every call answers broken. Not thread-safe:
// one thread uses a Bootstrap at a time. Setup path only: calls may allocate.
#pragma once

#include <pier/result.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace pier::boot {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

/// Version of pier that built this library ("0.1.0"); ranks must agree.
std::string_view library_version() noexcept;

class Bootstrap {
 public:
  /// The back end for this process, connected and handshaken. Fails with
  /// version_mismatch, broken (cannot reach the launcher) or invalid_argument
  /// (inconsistent PIER_RUN_* variables, a session name that is not at most
  /// 64 bytes of [a-z0-9_.-]) or unsupported (a second session under PMI-1,
  /// which gives a process one connection); the log says why.
  ///
  /// `session` names the exchange: a process may hold one Bootstrap per
  /// session at once (the Portals library and the port layer each bring up
  /// their own core), and each is fenced among the ranks' Bootstraps of the
  /// same session only. Under pier-run the sessions are separate exchanges;
  /// under PMIx and PMI their keys are kept apart and the launcher's fences
  /// serve them in turn. Opening one and fencing it is collective (as
  /// MPI_Init is): every rank opens its sessions in the same order.
  static Result<std::unique_ptr<Bootstrap>> open(std::string_view session = {});

  virtual ~Bootstrap() = default;
  Bootstrap(const Bootstrap&) = delete;
  Bootstrap& operator=(const Bootstrap&) = delete;

  std::uint32_t rank() const noexcept { return rank_; }
  std::uint32_t size() const noexcept { return size_; }
  /// "pier-run", "singleton", ...
  virtual std::string_view method() const noexcept = 0;
  const std::string& session() const noexcept { return session_; }

  /// Stages a value (visible to others after commit() and fence()).
  Status put(std::string_view key, std::span<const std::byte> value);
  Status put(std::string_view key, std::string_view value) {
    return put(key, std::as_bytes(std::span(value.data(), value.size())));
  }
  /// Publishes every staged value.
  virtual Status commit() = 0;
  /// Collective: returns once every rank entered the fence, or at the
  /// deadline (timeout).
  virtual Status fence(Deadline deadline) = 0;
  /// A value `rank` committed before the last completed fence.
  virtual Result<std::vector<std::byte>> get(std::uint32_t rank, std::string_view key) const;

  /// The text of the last failure, naming ranks where it can ("" if none).
  const std::string& last_error() const noexcept { return last_error_; }

 protected:
  Bootstrap(std::uint32_t rank, std::uint32_t size) : rank_(rank), size_(size) {}
  static Result<std::unique_ptr<Bootstrap>> open_backend(std::string_view session);
  /// Records a failure for last_error() and the log; returns `status`.
  Status fail(Status status, std::string text);
  /// `key` in this session's part of a key space the whole job shares
  /// (PMIx, PMI): "<session>/<key>", or `key` for the default session.
  std::string scoped(std::string_view key) const;

  using Staged = std::vector<std::pair<std::string, std::vector<std::byte>>>;
  using Store = std::map<std::pair<std::uint32_t, std::string>, std::vector<std::byte>>;

  /// What put() staged, in put order; the stage is empty after.
  Staged take_staged() noexcept;
  bool nothing_staged() const noexcept { return staged_.empty(); }

  std::uint32_t rank_;
  std::uint32_t size_;
  std::string session_;
  Store visible_;  ///< what get() sees
  bool broken_ = false;
  std::string last_error_;

 private:
  Staged staged_;  ///< put() but not yet commit()
  /// Where each staged key is in staged_: a put of a key already staged
  /// replaces its value, and a scan per put made 20000 puts quadratic.
  std::unordered_map<std::string, std::size_t> staged_at_;
};

}  // namespace pier::boot
