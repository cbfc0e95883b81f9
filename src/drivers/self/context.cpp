// pier self driver: contexts, the registry, and the driver entry.
#include "drivers/self/context.hpp"

#include <unistd.h>

#include <map>
#include <set>
#include <tuple>

#include "base/config.hpp"
#include "base/log.hpp"
#include "drivers/self/instance.hpp"
#include "drivers/self/self.hpp"
#include "drivers/self/url.hpp"

namespace pier::drivers::self {

inline const pier::config::IntKey cells_key{
    "SELF_CELLS", 64, 1, 4096,
    "packets a connection queues per direction before a send answers no_resource"};
inline const pier::config::IntKey cell_bytes_key{
    "SELF_CELL_BYTES",
    65536,
    64,
    std::int64_t{16} << 20,
    "largest small-track packet (max_packet); a small-track connection reserves "
    "SELF_CELLS cells of this size per direction",
    pier::config::Type::size};

namespace {

using Key = std::tuple<std::uint64_t, std::uint64_t, Track>;

/// Process-wide: open contexts by id, live connections, and pipes whose
/// creator waits for its peer. One mutex; taken before any pipe's.
struct Registry {
  std::mutex mu;
  std::uint64_t next_id = 1;
  std::map<std::uint64_t, std::weak_ptr<ContextCore>> contexts;
  std::set<Key> live;                          ///< (local, remote, track)
  std::map<Key, std::weak_ptr<Pipe>> waiting;  ///< (lower id, higher id, track)
};

Registry& registry() {
  static Registry r;
  return r;
}

Key waiting_key(std::uint64_t a, std::uint64_t b, Track track) {
  return a < b ? Key{a, b, track} : Key{b, a, track};
}

}  // namespace

Result<Attachment> attach(ContextCore& local, std::uint64_t remote_id, Track track,
                          Direction&& mine) {
  Registry& reg = registry();
  std::lock_guard lock(reg.mu);
  auto ctx = reg.contexts.find(remote_id);
  if (ctx == reg.contexts.end() || ctx->second.expired()) return Status::not_found;
  const Key key{local.id, remote_id, track};
  if (reg.live.contains(key)) return Status::in_use;

  const Key wkey = waiting_key(local.id, remote_id, track);
  auto found = reg.waiting.find(wkey);
  if (remote_id != local.id && found != reg.waiting.end()) {
    // The creator is the remote side: had it been this context, `live`
    // would have held `key` above.
    std::shared_ptr<Pipe> pipe = found->second.lock();
    reg.waiting.erase(found);
    if (pipe) {
      bool has_data = false;
      {
        std::lock_guard pipe_lock(pipe->mu);
        pipe->dir[1] = std::move(mine);
        pipe->attached[1] = true;
        pipe->waiter[1] = local.waiter;
        has_data = !pipe->dir[0].empty();
      }
      pipe->cv.notify_all();
      if (has_data) local.waiter->notify();
      reg.live.insert(key);
      return Attachment{std::move(pipe), 1};
    }
  }
  auto pipe = std::make_shared<Pipe>(track);
  pipe->dir[0] = std::move(mine);
  pipe->attached[0] = true;
  pipe->waiter[0] = local.waiter;
  if (remote_id == local.id) {
    pipe->loop = true;
  } else {
    reg.waiting[wkey] = pipe;
  }
  reg.live.insert(key);
  return Attachment{std::move(pipe), 0};
}

void detach(const ContextCore& local, std::uint64_t remote_id, Track track, const Pipe* pipe) {
  Registry& reg = registry();
  std::lock_guard lock(reg.mu);
  reg.live.erase(Key{local.id, remote_id, track});
  auto found = reg.waiting.find(waiting_key(local.id, remote_id, track));
  if (found != reg.waiting.end()) {
    auto waiting = found->second.lock();
    if (!waiting || waiting.get() == pipe) reg.waiting.erase(found);
  }
}

SelfContext::SelfContext() : core_(std::make_shared<ContextCore>()) {}

SelfContext::~SelfContext() {
  if (state_ != State::running) return;
  Registry& reg = registry();
  std::lock_guard lock(reg.mu);
  reg.contexts.erase(core_->id);
}

Result<pier::driver::Properties> SelfContext::properties(const pier::driver::Hints& hints) {
  (void)hints;  // one process: session size and rank change nothing here
  if (state_ == State::closed) return Status::not_initialized;
  if (state_ != State::fresh) return Status::invalid_argument;
  core_->settings.cells = static_cast<std::uint32_t>(cells_key.get());
  core_->settings.cell_bytes = static_cast<std::size_t>(cell_bytes_key.get());
  state_ = State::described;

  pier::driver::Properties props;
  auto& caps = props.caps;
  caps.supports_data = true;
  caps.send_buf = true;
  caps.recv_buf = true;
  caps.recv_post = true;
  caps.max_iov = Settings::max_iov;
  caps.blocking_wait = true;
  caps.recv_any = true;
  caps.prefetch = true;
  caps.rdv_data = true;
  caps.max_packet = core_->settings.cell_bytes;
  caps.needs_rdv = false;
  // For rail selection. Measured on the development machine (release build,
  // post + poll of both ends): 0.24 us for 8 bytes, 5.7 to 24 GB/s for 64 KiB
  // to 16 MiB; rounded down, as the copy shares the memory bus with the app.
  props.profile.latency_ns = 250;
  props.profile.bandwidth_mbps = 5000;
  return props;
}

Result<std::vector<std::byte>> SelfContext::init() {
  if (state_ == State::closed) return Status::not_initialized;
  if (state_ != State::described) return Status::invalid_argument;
  Registry& reg = registry();
  {
    std::lock_guard lock(reg.mu);
    core_->id = reg.next_id++;
    reg.contexts[core_->id] = core_;
  }
  state_ = State::running;
  const auto url = encode_url({static_cast<std::uint32_t>(::getpid()), core_->id});
  PIER_LOG(debug, "self", "context {} up", core_->id);
  return std::vector<std::byte>(url.begin(), url.end());
}

Status SelfContext::close() {
  if (state_ == State::closed) return Status::not_initialized;
  {
    std::lock_guard lock(core_->mu);
    if (!core_->instances.empty()) {
      PIER_LOG(warn, "self", "close with {} instances still open", core_->instances.size());
      return Status::in_use;
    }
  }
  if (state_ == State::running) {
    Registry& reg = registry();
    std::lock_guard lock(reg.mu);
    reg.contexts.erase(core_->id);
  }
  state_ = State::closed;
  return Status::ok;
}

Result<std::unique_ptr<pier::driver::Instance>> SelfContext::open_instance(Track track) {
  if (state_ != State::running) return Status::not_initialized;
  if (track != Track::small && track != Track::large) return Status::invalid_argument;
  return std::unique_ptr<pier::driver::Instance>(std::make_unique<SelfInstance>(core_, track));
}

Status SelfContext::probe_any(pier::driver::Instance** ready) {
  if (ready == nullptr) return Status::invalid_argument;
  *ready = nullptr;
  if (state_ != State::running) return Status::not_initialized;
  std::lock_guard lock(core_->mu);
  const std::size_t n = core_->instances.size();
  for (std::size_t i = 0; i < n; ++i) {
    // Round robin, so one busy peer cannot starve the others.
    const std::size_t at = (core_->probe_cursor + i) % n;
    if (core_->instances[at]->has_ready()) {
      core_->probe_cursor = at + 1;
      *ready = core_->instances[at];
      return Status::ok;
    }
  }
  return Status::in_progress;
}

Status SelfContext::wait_any(pier::driver::Instance** ready, pier::driver::Deadline deadline) {
  if (ready == nullptr) return Status::invalid_argument;
  *ready = nullptr;
  if (state_ != State::running) return Status::not_initialized;
  AnyWaiter& w = *core_->waiter;
  for (;;) {
    std::uint64_t seen = 0;
    {
      std::lock_guard lock(w.mu);
      if (w.cancel_pending) {
        w.cancel_pending = false;
        return Status::canceled;
      }
      seen = w.seq.load(std::memory_order_seq_cst);
    }
    // Read seq before probing: a packet that lands after the probe bumps seq
    // and ends the wait below, so no wake-up is lost.
    const Status s = probe_any(ready);
    if (s != Status::in_progress) return s;
    std::unique_lock lock(w.mu);
    w.sleepers.fetch_add(1, std::memory_order_seq_cst);
    const bool woken = w.cv.wait_until(lock, deadline, [&] {
      return w.seq.load(std::memory_order_seq_cst) != seen || w.cancel_pending;
    });
    w.sleepers.fetch_sub(1, std::memory_order_seq_cst);
    if (!woken) return Status::timeout;
  }
}

Status SelfContext::cancel_any() {
  if (state_ != State::running) return Status::not_initialized;
  {
    std::lock_guard lock(core_->waiter->mu);
    // Sticky: a cancel that races ahead of wait_any() still ends it.
    core_->waiter->cancel_pending = true;
  }
  core_->waiter->cv.notify_all();
  return Status::ok;
}

namespace {

Result<std::unique_ptr<pier::driver::Context>> make(std::string_view argument) {
  if (!argument.empty()) {
    PIER_LOG(warn, "self", "the self driver takes no argument, got '{}'", argument);
    return Status::invalid_argument;
  }
  return std::unique_ptr<pier::driver::Context>(std::make_unique<SelfContext>());
}

}  // namespace

const pier::driver::DriverEntry& entry() {
  static const pier::driver::DriverEntry e{
      "self", "loopback between contexts of one process (the reference driver)", &make};
  return e;
}

}  // namespace pier::drivers::self
