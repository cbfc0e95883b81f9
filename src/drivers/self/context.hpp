// pier self driver: the context, and the process-wide registry through which
// contexts find each other by url and instances pair into pipes.
#pragma once

#include <pier/driver.hpp>

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "drivers/self/pipe.hpp"

namespace pier::drivers::self {

class SelfInstance;

/// Sizes read once from the configuration when properties() runs.
struct Settings {
  std::uint32_t cells = 0;     ///< ring depth per direction
  std::size_t cell_bytes = 0;  ///< small-track cell size, the max_packet
  static constexpr std::uint32_t max_iov = 16;
};

/// The part of a context its instances share; it outlives the Context
/// object if an instance does.
struct ContextCore {
  std::uint64_t id = 0;  ///< 0 until init()
  Settings settings;
  std::shared_ptr<AnyWaiter> waiter = std::make_shared<AnyWaiter>();
  std::mutex mu;                         ///< guards the two fields below
  std::vector<SelfInstance*> instances;  ///< for probe_any()
  std::size_t probe_cursor = 0;          ///< round-robin start of probe_any()
};

/// Where a connecting instance ended up.
struct Attachment {
  std::shared_ptr<Pipe> pipe;
  int side = 0;
};

/// Pairs `local`'s instance with the remote context's instance of the same
/// track: creates the pipe (side 0) or joins the one the peer created (side
/// 1). `mine` is this side's direction, sized by the caller.
/// not_found: no such context; in_use: that (local, remote, track) exists.
Result<Attachment> attach(ContextCore& local, std::uint64_t remote_id, Track track,
                          Direction&& mine);
/// Forgets an instance's connection (it no longer blocks a new one).
void detach(const ContextCore& local, std::uint64_t remote_id, Track track, const Pipe* pipe);

class SelfContext final : public pier::driver::Context {
 public:
  SelfContext();
  ~SelfContext() override;

  std::string_view name() const noexcept override { return "self"; }
  Result<pier::driver::Properties> properties(const pier::driver::Hints& hints) override;
  Result<std::vector<std::byte>> init() override;
  Status close() override;
  Result<std::unique_ptr<pier::driver::Instance>> open_instance(Track track) override;
  Status probe_any(pier::driver::Instance** ready) override;
  Status wait_any(pier::driver::Instance** ready, pier::driver::Deadline deadline) override;
  Status cancel_any() override;

 private:
  enum class State : std::uint8_t { fresh, described, running, closed };
  State state_ = State::fresh;
  std::shared_ptr<ContextCore> core_;
};

}  // namespace pier::drivers::self
