// shm: the context: configuration, url, the listening socket, receive-any.
#include "drivers/shm/context.hpp"

#include "driver/fd.hpp"

#include "drivers/shm/instance.hpp"
#include "drivers/shm/ring.hpp"
#include "drivers/shm/wake.hpp"

#include "base/config.hpp"
#include "base/log.hpp"

#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <ctime>

namespace pier::drivers::shm {

inline const config::IntKey ring_size_key{
    "SHM_RING_SIZE",
    std::int64_t{default_ring_lines} * line_size,
    std::int64_t{16} * 1024,
    std::int64_t{1} << 30,
    "bytes of cells per ring and direction of each connected pair (rounded up to a power "
    "of two); bounds the data in flight",
    config::Type::size};
inline const config::IntKey max_packet_key{
    "SHM_MAX_PACKET",
    std::int64_t{32} * 1024,
    64,
    std::int64_t{16} * 1024 * 1024,
    "largest small-track packet, and the fragment size of copies through the cells "
    "(at most a quarter of the ring)",
    config::Type::size};
inline const config::BoolKey cma_key{
    "SHM_CMA", true,
    "move large-track packets with one process_vm_writev where the per-pair probe allows it"};
inline const config::IntKey cma_min_key{
    "SHM_CMA_MIN",
    std::int64_t{1} << 30,
    0,
    std::int64_t{1} << 40,
    "large-track packets smaller than this go through the cells even when single copy is "
    "possible; measured here, the pipelined copy beats process_vm_writev at every size "
    "(docs/shm.md), hence the high default",
    config::Type::size};
inline const config::IntKey split_min_key{
    "SHM_SPLIT_MIN",
    std::int64_t{256} * 1024,
    0,
    std::int64_t{1} << 40,
    "single copies at least this large are split: the sender writes the first half while "
    "the receiver reads the second (two cores copying); 0 turns splitting off",
    config::Type::size};
inline const config::IntKey spin_key{
    "SHM_SPIN_US", 50, 0, 1000000,
    "microseconds a blocking wait polls before it sleeps (wait_any: only when its caller does not "
    "spin, as the core does)"};
inline const config::IntKey peer_check_key{
    "SHM_PEER_CHECK_US", 2000, 0, 1000000,
    "a polling instance looks at its control socket (the peer's death, its wakes) at most this "
    "often; 0: every 1024 empty polls, a recvmsg each time"};

inline const config::IntKey park_key{
    "SHM_PARK_MS", 60000, 1, 3600000,
    "an accepted connection that no instance of ours takes (a peer we do not know, a gate "
    "that failed, a hello that never comes) is closed after this long; the peer sees it "
    "broken"};
inline const config::IntKey pending_key{
    "SHM_BACKLOG", 4096, 1, 65536,
    "accepted connections waiting for their instance, per context; more are refused"};

ShmContext::ShmContext() = default;

ShmContext::~ShmContext() {
  std::lock_guard lock(mutex_);
  if (!instances_.empty())
    PIER_LOG(warn, "shm", "context destroyed with {} instances alive", instances_.size());
  for (ShmInstance* inst : instances_) inst->orphan();
}

Result<driver::Properties> ShmContext::properties(const driver::Hints& hints) {
  settings_.on_demand = hints.on_demand;
  if (phase_ == Phase::closed) return Status::not_initialized;
  const auto ring_bytes = std::bit_ceil(static_cast<std::uint64_t>(ring_size_key.get()));
  settings_.ring_lines = static_cast<std::uint32_t>(
      std::clamp<std::uint64_t>(ring_bytes / line_size, min_ring_lines, max_ring_lines));
  const std::size_t max_by_ring = payload_in(settings_.ring_lines / 4);
  settings_.max_packet = static_cast<std::uint32_t>(
      std::min<std::size_t>(static_cast<std::size_t>(max_packet_key.get()), max_by_ring));
  settings_.cma = cma_key.get();
  settings_.split_min = static_cast<std::size_t>(split_min_key.get());
  settings_.cma_min = static_cast<std::size_t>(cma_min_key.get());
  settings_.spin_ns = spin_key.get() * 1000;
  settings_.wait_any_spin_ns = hints.caller_spins ? 0 : settings_.spin_ns;
  settings_.peer_check_ns = peer_check_key.get() * 1000;
  settings_.park_ns = park_key.get() * 1'000'000;
  settings_.max_pending = static_cast<std::size_t>(pending_key.get());

  caps_ = driver::Caps{};
  caps_.supports_data = true;
  caps_.send_buf = true;
  caps_.recv_buf = true;
  caps_.recv_post = true;
  caps_.max_iov = 64;
  caps_.blocking_wait = true;
  caps_.recv_any = true;
  caps_.wait_fds = true;
  caps_.incoming = true;
  caps_.prefetch = false;
  caps_.rdv_data = settings_.cma;
  caps_.max_packet = settings_.max_packet;
  caps_.needs_rdv = true;

  driver::Properties props;
  props.caps = caps_;
  // Nominal figures for rail selection, not measurements (docs/shm.md has those).
  props.profile.latency_ns = 200;
  props.profile.bandwidth_mbps = 15000;
  if (phase_ == Phase::fresh) phase_ = Phase::described;
  return props;
}

Result<std::vector<std::byte>> ShmContext::init() {
  if (phase_ == Phase::closed || phase_ == Phase::ready) return Status::not_initialized;
  if (phase_ == Phase::fresh) {
    Result<driver::Properties> p = properties(driver::Hints{});
    if (!p) return p.status();
  }
  Result<std::array<std::byte, 16>> boot = boot_id();
  if (!boot) {
    unavailable_ = "cannot read the boot id";
    return boot.status();
  }
  url_.boot_id = *boot;
  url_.pid = static_cast<std::uint32_t>(::getpid());
  url_.max_packet = settings_.max_packet;
  probe_word_ = random_u64() | 1;
  url_.probe_addr = reinterpret_cast<std::uintptr_t>(&probe_word_);
  url_.probe_value = probe_word_;
  // The nonce makes the abstract name unique even for several contexts in
  // one process; retry on the (unlikely) clash.
  for (int attempt = 0; attempt < 4 && !listen_.valid(); ++attempt) {
    url_.nonce = random_u64();
    Result<Fd> fd = listen_abstract(socket_name(url_.pid, url_.nonce));
    if (fd) listen_ = std::move(*fd);
  }
  if (!listen_.valid()) {
    unavailable_ = "cannot listen on an abstract unix socket";
    return Status::system_error;
  }
  cancel_.reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!cancel_.valid()) {
    PIER_LOG(warn, "shm", "cannot create eventfd: {}", std::strerror(errno));
    return Status::system_error;
  }
  url_bytes_ = encode_url(url_);
  light_ = register_light_publisher();
  phase_ = Phase::ready;
  PIER_LOG(debug, "shm",
           "context ready: {} cells of {} B per ring, max packet {} B, cma {}, light publisher {}",
           settings_.ring_lines, line_size, settings_.max_packet, settings_.cma, light_);
  return url_bytes_;
}

Status ShmContext::close() {
  if (phase_ == Phase::closed) return Status::not_initialized;
  phase_ = Phase::closed;
  std::lock_guard lock(mutex_);
  // Instances should be gone by now; any left answer not_initialized.
  for (ShmInstance* inst : instances_) inst->orphan();
  instances_.clear();
  pending_.clear();
  listen_.reset();
  cancel_.reset();
  return Status::ok;
}

Result<std::unique_ptr<driver::Instance>> ShmContext::open_instance(driver::Track track) {
  if (phase_ != Phase::ready) return Status::not_initialized;
  if (track != driver::Track::small && track != driver::Track::large)
    return Status::invalid_argument;
  auto inst = std::make_unique<ShmInstance>(*this, track);
  std::lock_guard lock(mutex_);
  instances_.push_back(inst.get());
  // Sized here so wait_any() allocates nothing. Not pollfds_: a wait_any()
  // on another thread sleeps in ppoll() on it, outside the lock.
  watched_.reserve(instances_.size());
  return std::unique_ptr<driver::Instance>(std::move(inst));
}

void ShmContext::forget(ShmInstance* inst) noexcept {
  std::lock_guard lock(mutex_);
  std::erase(instances_, inst);
  next_any_ = 0;
}

bool ShmContext::taken(std::span<const std::byte> url, driver::Track track,
                       const ShmInstance* except) const noexcept {
  std::lock_guard lock(mutex_);
  return std::any_of(instances_.begin(), instances_.end(), [&](const ShmInstance* i) {
    return i != except && i->connected_to(url, track);
  });
}

bool ShmContext::read_hello(Pending& p) noexcept {
  std::array<std::byte, control_prefix + Hello::size + 8> buf{};
  Result<Received> r = recv_message(p.sock.get(), buf);
  if (!r || r->eof) return false;
  if (r->none) return true;
  Result<Control> msg = decode_control(std::span<const std::byte>(buf.data(), r->len));
  Result<Hello> h = msg && msg->type == LocalType::hello ? decode_hello(msg->body)
                                                         : Result<Hello>(Status::malformed);
  if (!h || r->fd.valid() == h->call_back) {
    PIER_LOG(warn, "shm", "dropping a connection with a malformed hello ({} bytes, {})", r->len,
             !h ? to_string(h.status())
                : (r->fd.valid() ? "a segment with a call back" : "no segment attached"));
    return false;
  }
  p.has_hello = true;
  p.hello = *h;
  p.segment = std::move(r->fd);
  return true;
}

void ShmContext::progress_accept() noexcept {
  if (phase_ != Phase::ready) return;
  std::lock_guard lock(mutex_);
  for (bool any = driver::readable_now(listen_.get()); any;) {
    const int fd = ::accept4(listen_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) break;
    Pending p;
    p.sock.reset(fd);
    if (!same_user(fd)) continue;  // p closes the socket
    if (pending_.size() >= settings_.max_pending) {
      PIER_LOG(warn, "shm", "refusing a connection: {} are already waiting (PIER_SHM_BACKLOG)",
               pending_.size());
      continue;  // p closes the socket
    }
    p.since = driver::Clock::now();
    pending_.push_back(std::move(p));
  }
  const auto now = driver::Clock::now();
  for (std::size_t i = 0; i < pending_.size();) {
    Pending& p = pending_[i];
    const bool had_hello = p.has_hello;
    bool keep = had_hello || read_hello(p);
    if (!had_hello && p.has_hello) p.since = now;  // parked from now on
    if (keep && p.has_hello && p.hello.call_back) {
      // The peer waits to accept our connection: reported by incoming()
      // unless an instance of ours already connects to it.
      const std::span<const std::byte> from(p.hello.url);
      if (!taken(from, p.hello.track, nullptr) && asked_.size() < 4096 &&
          std::find(asked_.begin(), asked_.end(), p.hello.url) == asked_.end())
        asked_.push_back(p.hello.url);
      keep = false;
    } else if (keep && p.has_hello) {
      const std::span<const std::byte> from(p.hello.url);
      auto waiting = std::find_if(instances_.begin(), instances_.end(), [&](ShmInstance* inst) {
        return inst->accepting() && inst->connected_to(from, p.hello.track);
      });
      if (waiting != instances_.end()) {
        (*waiting)->adopt(std::move(p.sock), p.hello, std::move(p.segment));
        keep = false;
      } else if (taken(from, p.hello.track, nullptr)) {
        (void)send_message(p.sock.get(), encode_reply(Reply{Answer::in_use}));
        keep = false;
      }
    }
    // The clock runs from the accept while no hello came, from the hello
    // while it waits for an instance and, on demand, only once incoming()
    // reported it: the core must have had its chance to take it.
    const bool waits_for_report = p.has_hello && settings_.on_demand && !p.reported;
    if (keep && !waits_for_report && now - p.since > std::chrono::nanoseconds(settings_.park_ns)) {
      // Nobody here will take it: closing tells the peer at once, where
      // keeping it would leave the peer waiting and the entry here forever.
      PIER_LOG(info, "shm", "closing a connection no instance took in {} ms (PIER_SHM_PARK_MS)",
               settings_.park_ns / 1'000'000);
      keep = false;
    }
    if (keep) {
      ++i;
    } else {
      pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }
}

namespace {

/// Milliseconds-free conversion of a deadline for ppoll; nullptr-free: a
/// far deadline sleeps at most a second per call (callers loop).
::timespec until(driver::Deadline deadline) noexcept {
  const auto now = driver::Clock::now();
  auto left = deadline > now ? deadline - now : driver::Clock::duration::zero();
  left = std::min<driver::Clock::duration>(left, std::chrono::seconds(1));
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
  return ::timespec{static_cast<std::time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
}

}  // namespace

void ShmContext::wait_accept(driver::Deadline deadline) noexcept {
  if (phase_ != Phase::ready) return;
  std::vector<::pollfd> fds;
  {
    std::lock_guard lock(mutex_);
    fds.push_back({listen_.get(), POLLIN, 0});
    for (const Pending& p : pending_)
      if (!p.has_hello) fds.push_back({p.sock.get(), POLLIN, 0});
  }
  const ::timespec ts = until(deadline);
  (void)::ppoll(fds.data(), fds.size(), &ts, nullptr);
}

Status ShmContext::probe_any(driver::Instance** ready) {
  *ready = nullptr;
  if (phase_ != Phase::ready) return Status::not_initialized;
  std::lock_guard lock(mutex_);
  const std::size_t n = instances_.size();
  for (std::size_t k = 0; k < n; ++k) {
    const std::size_t i = (next_any_ + k) % n;
    ShmInstance* inst = instances_[i];
    if (inst->track() == driver::Track::small && inst->has_news()) {
      next_any_ = i + 1;
      *ready = inst;
      return Status::ok;
    }
  }
  return Status::in_progress;
}

Status ShmContext::wait_any(driver::Instance** ready, driver::Deadline deadline) {
  *ready = nullptr;
  if (phase_ != Phase::ready) return Status::not_initialized;
  const auto spin_until =
      driver::Clock::now() + std::chrono::nanoseconds(settings_.wait_any_spin_ns);
  for (;;) {
    if (canceled_.exchange(false)) return Status::canceled;
    Status st = probe_any(ready);
    if (st != Status::in_progress) return st;
    const auto now = driver::Clock::now();
    if (now >= deadline) return Status::timeout;
    if (now < spin_until) continue;

    pollfds_.clear();
    watch_all(pollfds_);
    // The publishers' half of the Dekker pair may be a plain store (wake.hpp).
    (void)heavy_fence();
    st = probe_any(ready);
    if (st == Status::in_progress && !canceled_.load()) {
      const ::timespec ts = until(deadline);
      (void)::ppoll(pollfds_.data(), pollfds_.size(), &ts, nullptr);
    }
    drain_cancel();
    unwatch_all();
    if (st != Status::in_progress) return st;
  }
}

void ShmContext::watch_all(std::vector<::pollfd>& fds) {
  // Watch under the lock, sleep without it: instances may come and go
  // meanwhile, so only those still present are unwatched afterwards.
  std::lock_guard lock(mutex_);
  watched_.clear();
  // Grows only when instances were added since the last wait.
  fds.reserve(fds.size() + instances_.size() + 1);
  fds.push_back({cancel_.get(), POLLIN, 0});
  for (ShmInstance* inst : instances_) {
    if (inst->track() != driver::Track::small || !inst->watch()) continue;
    // What a socket holds from before (a wake-up for a packet taken since,
    // a late connection reply) ends the sleep at once, once: the sockets
    // are drained after it (unwatch_all). Not before as well: a recvmsg per
    // peer on every sleep costs more than the rare extra turn.
    watched_.push_back(inst);
    if (inst->socket_fd() >= 0 && !inst->peer_gone()) fds.push_back({inst->socket_fd(), POLLIN, 0});
  }
}

void ShmContext::unwatch_all() {
  std::lock_guard lock(mutex_);
  for (ShmInstance* inst : watched_) {
    if (std::find(instances_.begin(), instances_.end(), inst) == instances_.end()) continue;
    inst->unwatch();
    inst->drain_socket();
  }
  watched_.clear();
}

void ShmContext::drain_cancel() {
  std::uint64_t drained = 0;
  while (::read(cancel_.get(), &drained, sizeof drained) > 0) {
  }
}

Status ShmContext::wait_arm(std::vector<::pollfd>& fds) {
  if (phase_ != Phase::ready) return Status::not_initialized;
  watch_all(fds);
  (void)heavy_fence();  // as in wait_any: the senders' half may be a plain store
  if (canceled_.load()) return Status::in_progress;
  {
    // A caller may sleep long on these descriptors (an idle core), so a
    // connection must end the sleep too: the listener, and the accepted
    // sockets whose hello has not come. A hello read but not reported by
    // incoming() yet is work already here.
    // Only on demand: otherwise nobody calls incoming(), and a stray
    // connection would keep every sleep from starting.
    std::lock_guard lock(mutex_);
    if (!settings_.on_demand) return probe_ready();
    if (!asked_.empty()) return Status::in_progress;
    fds.push_back({listen_.get(), POLLIN, 0});
    for (const Pending& p : pending_) {
      if (p.has_hello && !p.reported) return Status::in_progress;
      if (!p.has_hello) fds.push_back({p.sock.get(), POLLIN, 0});
    }
  }
  return probe_ready();
}

Status ShmContext::probe_ready() {
  driver::Instance* ready = nullptr;
  return probe_any(&ready) == Status::in_progress ? Status::ok : Status::in_progress;
}

Status ShmContext::wait_disarm() {
  if (phase_ != Phase::ready) return Status::not_initialized;
  drain_cancel();
  canceled_.store(false);  // the caller's sleep has ended: the cancel was for it
  unwatch_all();
  return Status::ok;
}

Status ShmContext::incoming(std::vector<std::byte>& remote_url) {
  if (phase_ != Phase::ready) return Status::not_initialized;
  progress_accept();
  std::lock_guard lock(mutex_);
  for (Pending& p : pending_) {
    if (!p.has_hello || p.reported) continue;
    p.reported = true;
    p.since = driver::Clock::now();
    remote_url.assign(p.hello.url.begin(), p.hello.url.end());
    return Status::ok;
  }
  if (asked_.empty()) return Status::in_progress;
  remote_url.assign(asked_.front().begin(), asked_.front().end());
  asked_.erase(asked_.begin());
  return Status::ok;
}

Status ShmContext::cancel_any() {
  if (phase_ != Phase::ready) return Status::not_initialized;
  canceled_.store(true);
  const std::uint64_t one = 1;
  // A full counter (impossible in practice) still wakes the poll.
  (void)!::write(cancel_.get(), &one, sizeof one);
  return Status::ok;
}

std::string ShmContext::unavailable_reason() const {
  return unavailable_;
}

std::string ShmContext::degraded_reason() const {
  std::lock_guard lock(mutex_);
  return degraded_;
}

void ShmContext::note_degraded(std::string why) noexcept {
  std::lock_guard lock(mutex_);
  degraded_ = std::move(why);
}

}  // namespace pier::drivers::shm
