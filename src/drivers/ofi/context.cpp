#include "drivers/ofi/context.hpp"

#include "base/clock.hpp"
#include "base/config.hpp"
#include "base/log.hpp"
#include "drivers/ofi/instance.hpp"

#include <poll.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>
#include <thread>

namespace pier::drivers::ofi {

inline const config::IntKey send_queue_key{"OFI_SEND_QUEUE", 256, 1, 65536,
                                           "packets one instance may have posted for sending"};
inline const config::IntKey credits_key{
    "OFI_CREDITS", 128, 2, 65536,
    "small-track packets a sender may have unreceived at its peer before no_resource"};
// Its bounds are those a url may name (codec.hpp): the url carries it.
inline const config::IntKey max_packet_key{
    "OFI_MAX_PACKET",
    default_max_packet,
    min_max_packet,
    max_max_packet,
    "largest small-track packet (caps.max_packet); a peer's url lowers it for the sends to that "
    "peer",
    config::Type::size};
inline const config::IntKey ops_key{
    "OFI_OPS", 4096, 128, 1 << 20,
    "libfabric operations a context may have outstanding (all instances together)"};
inline const config::IntKey keepalive_key{
    "OFI_KEEPALIVE_MS", 1000, 0, 3600000,
    "a peer on another host (or pid space) gets a keep-alive this often while the context is "
    "polled, so its death shows as a send error (0: never)"};
inline const config::IntKey progress_key{
    "OFI_PROGRESS_US", -1, -1, 1000000,
    "a progress thread polls the context this often, for providers that complete a send only "
    "when the receiver polls (0: never; -1: only for udp;ofi_rxd)"};
inline const config::IntKey inject_key{
    "OFI_INJECT",
    1024,
    0,
    1024,
    "small packets up to this size (and the provider's inject size) are sent with fi_tinject "
    "and complete at once (0: never)",
    config::Type::size};
inline const config::IntKey park_key{
    "OFI_PARK_MS", 60000, 1, 3600000,
    "a hello that no instance of ours takes (a peer we do not know, a gate that failed) is "
    "dropped after this long, counted on demand from its report by incoming(); its sender "
    "fails broken"};
inline const config::BoolKey rma_key{
    "OFI_RMA", true, "large-track rendezvous by RMA write where the provider offers it"};

namespace {

/// An acceptor's call back is repeated this often while unanswered: a
/// busy peer's core may have passed over its report.
constexpr auto call_back_period = std::chrono::milliseconds(100);
constexpr auto check_period = std::chrono::milliseconds(20);
constexpr std::uint32_t check_every_polls = 64;
/// Byes kept for later at once (instances going away under back-pressure).
constexpr std::size_t max_owed_byes = 1024;
constexpr auto drain_limit = std::chrono::seconds(2);

/// Boot id and pid namespace: two processes with the same key see each
/// other's pids.
std::uint64_t host_key() {
  std::string boot;
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::getline(in, boot);
  struct stat ns {};
  if (::stat("/proc/self/ns/pid", &ns) != 0) ns.st_ino = 0;
  boot += ':' + std::to_string(ns.st_ino);
  std::uint64_t h = 1469598103934665603ULL;
  for (char ch : boot) {
    h ^= static_cast<unsigned char>(ch);
    h *= 1099511628211ULL;
  }
  return h;
}

std::uint32_t provider_hash(const fi_info* info) {
  const std::string_view n = info->fabric_attr->prov_name;
  return fnv1a({reinterpret_cast<const std::byte*>(n.data()), n.size()});
}

int ms_ceil(driver::Clock::duration d) {
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(d).count();
  return ms < 0 ? 0 : static_cast<int>(std::min<long long>(ms, 1000));
}

template <class T>
void close_fid(T*& obj) noexcept {
  if (obj != nullptr) {
    const int rc = fi_close(&obj->fid);
    if (rc != 0) PIER_LOG(warn, "ofi", "fi_close: {}", fi_strerror(-rc));
    obj = nullptr;
  }
}

/// Contexts of this process. libfabric's data progress is manual: a
/// rendezvous between two contexts of one process needs both polled, but a
/// caller may poll only the receiver. An idle context therefore gives its
/// neighbours a turn (try_lock: never waits, never deadlocks).
struct Neighbours {
  std::mutex mu;
  std::vector<OfiContext*> all;
};

Neighbours& neighbours() {
  static Neighbours n;
  return n;
}

/// The contexts this copy of the driver closed, the latest 4096: a url of
/// one names an endpoint that is gone, and nothing else tells (no pidfd
/// fires for our own process; a send to it crashed libfabric 1.17's shm).
/// Kept by id and by endpoint name: a hello's url may pair a closed
/// endpoint's name with a made-up id, and its refusal went to that endpoint.
/// A name is kept only while no open context of this process has it (a tcp
/// port may be given again): such a context is reachable. Its own lock,
/// taken with no other held inside it.
struct ClosedContexts {
  /// What a scan reads: 24 bytes an entry, so a look touches 96 KiB, not
  /// the names' 800 KiB (a name is compared only when its hash matches).
  struct Key {
    std::uint64_t id = 0;
    std::uint64_t name_hash = 0;
    std::uint32_t provider = 0;  ///< its provider's hash: names of two providers may match
    std::uint32_t name_len = 0;  ///< 0: its name is not kept
  };
  std::mutex mu;
  std::array<Key, 4096> keys{};
  std::array<std::array<std::byte, max_name>, 4096> names{};
  std::size_t next = 0;
};

ClosedContexts& closed_contexts() {
  static ClosedContexts c;
  return c;
}

/// How many contexts this copy closed: a context looks at its in-process
/// peers again only when it moved (one load per control message).
std::atomic<std::uint64_t> closes{0};

std::uint64_t hash_name(std::span<const std::byte> name) noexcept {
  std::uint64_t h = 1469598103934665603ULL;  // FNV-1a
  for (const std::byte b : name) h = (h ^ std::to_integer<std::uint64_t>(b)) * 1099511628211ULL;
  return h;
}

bool same_name(const ClosedContexts& c, std::size_t i, std::span<const std::byte> name,
               std::uint64_t hash, std::uint32_t provider) noexcept {
  const ClosedContexts::Key& k = c.keys[i];
  return k.name_len != 0 && k.name_hash == hash && k.provider == provider &&
         k.name_len == name.size() && std::equal(name.begin(), name.end(), c.names[i].begin());
}

/// `name` empty: an open context has it, and only the id is kept.
void remember_closed(std::uint64_t id, std::span<const std::byte> name,
                     std::uint32_t provider) noexcept {
  ClosedContexts& c = closed_contexts();
  std::lock_guard lock(c.mu);
  const std::size_t i = c.next++ % c.keys.size();
  const std::size_t len = std::min(name.size(), max_name);
  c.keys[i] = {id, hash_name(name.first(len)), provider, static_cast<std::uint32_t>(len)};
  std::copy_n(name.begin(), len, c.names[i].begin());
  closes.fetch_add(1, std::memory_order_release);
}

/// A context of this process opened with `name`: the name reaches it now,
/// whatever closed context had it before.
void forget_closed_name(std::span<const std::byte> name, std::uint32_t provider) noexcept {
  ClosedContexts& c = closed_contexts();
  const std::uint64_t hash = hash_name(name);
  std::lock_guard lock(c.mu);
  for (std::size_t i = 0; i < c.keys.size(); ++i)
    if (same_name(c, i, name, hash, provider)) c.keys[i].name_len = 0;
}

bool closed_here(std::uint64_t id, std::span<const std::byte> name,
                 std::uint32_t provider) noexcept {
  ClosedContexts& c = closed_contexts();
  const std::uint64_t hash = hash_name(name);
  std::lock_guard lock(c.mu);
  for (std::size_t i = 0; i < c.keys.size(); ++i)
    if (c.keys[i].id == id || same_name(c, i, name, hash, provider)) return true;
  return false;
}

}  // namespace

void OfiContext::progress_neighbours(OfiContext* self) noexcept {
  Neighbours& n = neighbours();
  std::unique_lock list(n.mu, std::try_to_lock);
  if (!list.owns_lock()) return;
  for (OfiContext* other : n.all) {
    if (other == self) continue;
    std::unique_lock lock(other->mutex_, std::try_to_lock);
    if (lock.owns_lock() && other->state_ == State::running) (void)other->read_cq();
  }
}

OfiContext::OfiContext(std::string provider) : wanted_(std::move(provider)) {}

OfiContext::~OfiContext() {
  if (state_ == State::running) (void)close();
  stop_progress_thread();
  if (choice_.info != nullptr) fi_freeinfo(choice_.info);
}

bool OfiContext::ensure_choice() const {
  if (!chosen_) {
    choice_ = choose_provider(wanted_);
    chosen_ = true;
  }
  return choice_.info != nullptr;
}

std::string OfiContext::unavailable_reason() const {
  return ensure_choice() ? std::string() : choice_.why_not;
}

bool OfiContext::mr_virt_addr() const noexcept {
  return (choice_.info->domain_attr->mr_mode & FI_MR_VIRT_ADDR) != 0;
}
bool OfiContext::mr_endpoint() const noexcept {
  return (choice_.info->domain_attr->mr_mode & FI_MR_ENDPOINT) != 0;
}
std::uint64_t OfiContext::next_mr_key() noexcept {
  std::uint64_t key = 0;
  if (::getrandom(&key, sizeof key, GRND_NONBLOCK) != static_cast<ssize_t>(sizeof key)) {
    // No entropy yet (early boot): the clock's low bits, mixed, beat a count.
    key = static_cast<std::uint64_t>(base::now_ns()) * 0x9e3779b97f4a7c15ULL;
    key ^= key >> 29;
  }
  const std::size_t size = choice_.info->domain_attr->mr_key_size;
  if (size != 0 && size < sizeof key) key &= (std::uint64_t{1} << (8 * size)) - 1;
  return key == 0 ? 1 : key;
}

bool OfiContext::mr_prov_key() const noexcept {
  return (choice_.info->domain_attr->mr_mode & FI_MR_PROV_KEY) != 0;
}

Result<driver::Properties> OfiContext::properties(const driver::Hints& hints) {
  if (state_ == State::closed) return Status::not_initialized;
  if (state_ != State::fresh) return Status::invalid_argument;
  if (!ensure_choice()) {
    PIER_LOG(info, "ofi", "unavailable: {}", choice_.why_not);
    return Status::unsupported;
  }
  const fi_info* fi = choice_.info;
  send_queue_ = static_cast<std::size_t>(send_queue_key.get());
  credits_ = static_cast<std::uint64_t>(credits_key.get());
  max_packet_ = static_cast<std::size_t>(max_packet_key.get());
  keepalive_ms_ = keepalive_key.get();
  rma_ = choice_.rma && rma_key.get();
  std::size_t iov = std::min<std::size_t>({fi->tx_attr->iov_limit, fi->rx_attr->iov_limit, 16});
  if (rma_) iov = std::min<std::size_t>(iov, fi->tx_attr->rma_iov_limit);
  max_iov_ = static_cast<std::uint32_t>(std::max<std::size_t>(iov, 1));
  inject_size_ = std::min<std::size_t>({fi->tx_attr->inject_size, max_inject, max_packet_,
                                        static_cast<std::size_t>(inject_key.get())});
  on_demand_ = hints.on_demand;
  park_ms_ = park_key.get();
  max_parked_ =
      std::clamp<std::size_t>(std::size_t{4} * hints.session_size, min_parked, max_parked);
  hello_url_ = fi->tx_attr->iov_limit >= 2;
  state_ = State::described;

  driver::Properties props;
  driver::Caps& caps = props.caps;
  caps.recv_post = true;
  caps.recv_any = true;
  // When the provider's queue has no wait descriptor, wait_arm() answers
  // unsupported and a caller sleeps as it would without this.
  caps.wait_fds = true;
  caps.max_iov = max_iov_;
  caps.blocking_wait = true;
  caps.rdv_data = rma_;
  caps.max_packet = max_packet_;
  caps.needs_rdv = true;
  // A peer with no instance for us is reported by the url its hello
  // carries; libfabric has no connection to report.
  caps.incoming = hello_url_;
  // Nominal: pier-perf medians on this project's loaded 2-core test machine
  // for tcp and shm (docs/ofi.md); a native fabric is assumed far better.
  const std::string_view prov = fi->fabric_attr->prov_name;
  if (provider_matches(prov, "shm")) {
    props.profile.latency_ns = 850;
    props.profile.bandwidth_mbps = 500;
  } else if (provider_rank(prov) > 0) {
    props.profile.latency_ns = 7500;
    props.profile.bandwidth_mbps = 600;
  } else {
    props.profile.latency_ns = 2000;
    props.profile.bandwidth_mbps = 10000;
  }
  return props;
}

Result<std::vector<std::byte>> OfiContext::init() {
  if (state_ == State::closed) return Status::not_initialized;
  if (state_ != State::described) return Status::invalid_argument;
  std::unique_lock lock(mutex_);
  std::random_device rd;
  id_ = (std::uint64_t{rd()} << 32 | rd()) | 1;
  try {
    ops_.resize(static_cast<std::size_t>(ops_key.get()));
    retry_.reserve(ops_.size());
    retrying_.reserve(ops_.size());
    owed_byes_.reserve(max_owed_byes);
    parked_.reserve(max_parked_);
    control_bufs_.resize(control_recvs_);
  } catch (...) {
    return Status::no_memory;
  }
  for (std::size_t i = ops_.size(); i-- > 0;) {
    ops_[i].next_free = free_ops_;
    free_ops_ = &ops_[i];
  }
  if (Status s = open_fabric(); s != Status::ok) {
    close_fabric();
    return s;
  }
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) {
    PIER_LOG(error, "ofi", "cannot create an eventfd: {}", std::strerror(errno));
    close_fabric();
    return Status::system_error;
  }
  std::array<std::byte, max_name> name{};
  std::size_t len = name.size();
  const int rc = fi_getname(&ep_->fid, name.data(), &len);
  if (rc != 0 || len == 0 || len > max_name) {
    PIER_LOG(error, "ofi", "fi_getname: {}", rc != 0 ? fi_strerror(-rc) : "name too long");
    close_fabric();
    return Status::system_error;
  }
  Url url;
  url.context_id = id_;
  url.pid = static_cast<std::uint32_t>(::getpid());
  url.provider_hash = provider_hash(choice_.info);
  url.host_key = host_key();
  // Our small-track receives land in bounce buffers of this size: a peer
  // sends us no larger packet (OfiInstance::check_post).
  url.max_packet = static_cast<std::uint32_t>(max_packet_);
  url.name.assign(name.begin(), name.begin() + static_cast<std::ptrdiff_t>(len));
  provider_hash_ = url.provider_hash;
  std::copy_n(name.begin(), len, name_.begin());
  name_len_ = len;
  auto bytes = encode_url(url);
  if (!bytes) {
    close_fabric();
    return bytes.status();
  }
  try {
    url_ = *bytes;
  } catch (...) {
    close_fabric();
    return Status::no_memory;
  }
  for (std::size_t i = 0; i < control_recvs_; ++i) {
    Op* op = get_op(Op::Kind::control_recv, nullptr);
    if (op != nullptr) op->buf = control_bufs_[i].data();
    if (op == nullptr || post_control_recv(op) != Status::ok) {
      close_fabric();
      return Status::system_error;
    }
  }
  state_ = State::running;
  last_check_ = std::chrono::steady_clock::now();
  start_progress_thread();
  // The list after our own lock, never inside it: close() takes the list
  // first, then the context's lock (TSAN saw the two orders).
  lock.unlock();
  {
    std::lock_guard list(neighbours().mu);
    neighbours().all.push_back(this);
    // Under the list, as close() records a name: a name is in the record
    // only while no open context has it.
    forget_closed_name(std::span<const std::byte>(name_.data(), name_len_), provider_hash_);
  }
  PIER_LOG(info, "ofi", "context up on {} ({} / {}), rendezvous by {}",
           choice_.info->fabric_attr->prov_name, choice_.info->fabric_attr->name,
           choice_.info->domain_attr->name, rma_ ? "RMA" : "tagged messages");
  return std::move(*bytes);
}

Status OfiContext::open_fabric() noexcept {
  fi_info* fi = choice_.info;
  int rc = fi_fabric(fi->fabric_attr, &fabric_, nullptr);
  if (rc == 0) rc = fi_domain(fabric_, fi, &domain_, nullptr);
  if (rc != 0) {
    PIER_LOG(error, "ofi", "cannot open {}: {}", fi->fabric_attr->prov_name, fi_strerror(-rc));
    return Status::system_error;
  }
  fi_av_attr av_attr{};
  av_attr.type = fi->domain_attr->av_type != FI_AV_UNSPEC ? fi->domain_attr->av_type : FI_AV_MAP;
  rc = fi_av_open(domain_, &av_attr, &av_, nullptr);
  if (rc != 0) {
    PIER_LOG(error, "ofi", "fi_av_open: {}", fi_strerror(-rc));
    return Status::system_error;
  }
  fi_cq_attr cq_attr{};
  cq_attr.format = FI_CQ_FORMAT_TAGGED;
  cq_attr.size = ops_.size();
  cq_attr.wait_obj = FI_WAIT_FD;
  rc = fi_cq_open(domain_, &cq_attr, &cq_, nullptr);
  if (rc == 0) {
    rc = fi_control(&cq_->fid, FI_GETWAIT, &wait_fd_);
    if (rc != 0) {
      wait_fd_ = -1;
      close_fid(cq_);
      rc = -FI_ENOSYS;
    }
  }
  if (rc != 0) {
    // No file descriptor to sleep on: waits sleep in short slices instead.
    PIER_LOG(debug, "ofi", "no wait fd on the completion queue: {}", fi_strerror(-rc));
    cq_attr.wait_obj = FI_WAIT_NONE;
    rc = fi_cq_open(domain_, &cq_attr, &cq_, nullptr);
  }
  if (rc != 0) {
    PIER_LOG(error, "ofi", "fi_cq_open: {}", fi_strerror(-rc));
    return Status::system_error;
  }
  rc = fi_endpoint(domain_, fi, &ep_, nullptr);
  if (rc == 0) rc = fi_ep_bind(ep_, &av_->fid, 0);
  if (rc == 0) rc = fi_ep_bind(ep_, &cq_->fid, FI_TRANSMIT | FI_RECV);
  if (rc == 0) rc = fi_enable(ep_);
  if (rc != 0) {
    PIER_LOG(error, "ofi", "cannot open an endpoint: {}", fi_strerror(-rc));
    return Status::system_error;
  }
  return Status::ok;
}

void OfiContext::close_fabric() noexcept {
  // The endpoint goes first: libfabric drops what it still holds, so no
  // completion refers to an op after this.
  close_fid(ep_);
  close_fid(cq_);
  wait_fd_ = -1;
  close_fid(av_);
  close_fid(domain_);
  close_fid(fabric_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
  wake_fd_ = -1;
  for (Peer& p : peers_)
    if (p.pidfd >= 0) ::close(p.pidfd);
  peers_.clear();
  wire_peers_ = 0;
}

Status OfiContext::close() {
  if (state_ == State::closed) return Status::not_initialized;
  const bool running = state_ == State::running;
  if (running) {
    {
      std::lock_guard list(neighbours().mu);
      std::lock_guard lock(mutex_);
      if (!instances_.empty()) return Status::in_use;
    }
    stop_progress_thread();
    {
      // Byes and the last packets must leave before the endpoint goes.
      std::lock_guard lock(mutex_);
      const auto limit = std::chrono::steady_clock::now() + drain_limit;
      while (std::chrono::steady_clock::now() < limit &&
             (sends_in_provider() || !owed_byes_.empty())) {
        (void)read_cq();
        if (!owed_byes_.empty()) send_owed_byes();
      }
    }
    // Only now does an in-process peer see us gone: our byes are out, so
    // its orderly close is not taken for a death (list first, as above).
    std::lock_guard list(neighbours().mu);
    std::erase(neighbours().all, this);
    const std::span<const std::byte> name(name_.data(), name_len_);
    const bool name_open =
        std::any_of(neighbours().all.begin(), neighbours().all.end(), [&](const OfiContext* c) {
          return c->provider_hash_ == provider_hash_ && c->name_len_ == name_len_ &&
                 std::equal(name.begin(), name.end(), c->name_.begin());
        });
    remember_closed(id_, name_open ? std::span<const std::byte>() : name, provider_hash_);
  }
  std::lock_guard lock(mutex_);
  close_fabric();
  kept_buffers_.clear();  // the endpoint is gone: nothing can land any more
  state_ = State::closed;
  return Status::ok;
}

void OfiContext::start_progress_thread() {
  std::int64_t us = progress_key.get();
  if (us < 0)
    us = std::string_view(choice_.info->fabric_attr->prov_name) == "udp;ofi_rxd" ? 1000 : 0;
  if (us == 0) return;
  stop_progress_ = false;
  try {
    progress_thread_ = std::thread([this, us] {
      while (!stop_progress_.load(std::memory_order_acquire)) {
        std::this_thread::sleep_for(std::chrono::microseconds(us));
        // Never waits for the lock: a caller polling now makes progress anyway.
        std::unique_lock lock(mutex_, std::try_to_lock);
        if (lock.owns_lock()) progress();
      }
    });
  } catch (...) {
    PIER_LOG(warn, "ofi", "cannot start a progress thread: sends may wait for the peer to poll");
  }
}

void OfiContext::stop_progress_thread() noexcept {
  stop_progress_.store(true, std::memory_order_release);
  if (progress_thread_.joinable()) progress_thread_.join();
}

Result<std::unique_ptr<driver::Instance>> OfiContext::open_instance(driver::Track track) {
  if (state_ == State::closed) return Status::not_initialized;
  if (state_ != State::running) return Status::invalid_argument;
  std::lock_guard lock(mutex_);
  return std::unique_ptr<driver::Instance>(
      std::make_unique<OfiInstance>(*this, track, next_instance_++));
}

bool OfiContext::acceptor_for(std::span<const std::byte> remote) const noexcept {
  return !std::lexicographical_compare(remote.begin(), remote.end(), url_.begin(), url_.end());
}

Result<std::size_t> OfiContext::peer_of(const UrlView& remote, bool from_wire) noexcept {
  for (std::size_t i = 0; i < peers_.size(); ++i) {
    Peer& p = peers_[i];
    if (p.context_id != remote.context_id) continue;
    // What a hello said of a context never outranks our caller's url for
    // it: a forged hello must not lend its address (or a pid to watch) to
    // the connection the caller asks for later.
    if (p.wire_only && !from_wire) {
      const bool same = p.pid == remote.pid && p.name_len == remote.name.size() &&
                        std::equal(remote.name.begin(), remote.name.end(), p.name.begin());
      // Described aside, and taken only whole: a failure leaves the peer
      // as it was (and counted as it was).
      Peer fresh;
      fresh.context_id = remote.context_id;
      if (same) fresh.addr = p.addr;
      if (Status s = describe_peer(fresh, remote, false, !same); s != Status::ok) {
        if (fresh.pidfd >= 0) ::close(fresh.pidfd);
        return s;
      }
      fresh.last_keepalive = p.last_keepalive;
      p = std::move(fresh);
      --wire_peers_;
    }
    return i;
  }
  if (from_wire && wire_peers_ >= max_wire_peers) return Status::no_resource;
  Peer p;
  p.context_id = remote.context_id;
  Status s = describe_peer(p, remote, from_wire);
  // Its descriptor, if it opened one, is closed on any failure (a Peer
  // does not own it: the list's entries are closed at close_fabric()).
  const int pidfd = p.pidfd;
  if (s == Status::ok) {
    try {
      peers_.push_back(std::move(p));
    } catch (...) {
      s = Status::no_memory;
    }
  }
  if (s != Status::ok) {
    if (pidfd >= 0) ::close(pidfd);
    return s;
  }
  wire_peers_ += from_wire;
  return peers_.size() - 1;
}

Status OfiContext::describe_peer(Peer& p, const UrlView& remote, bool from_wire,
                                 bool insert) noexcept {
  const bool same_host = remote.host_key == host_key();
  const bool this_process = same_host && remote.pid == static_cast<std::uint32_t>(::getpid());
  p.wire_only = from_wire;
  p.this_process = this_process;
  p.pid = remote.pid;
  p.name_len = std::min(remote.name.size(), p.name.size());
  std::copy_n(remote.name.begin(), p.name_len, p.name.begin());
  // Not for a url off the wire: registered_here() takes the neighbours'
  // list, which the thread reading our queue may hold already.
  p.in_process = !from_wire && this_process && registered_here(remote.context_id);
  // A context of ours that closed: nothing would ever answer, and its
  // address is not even inserted. Its name tells too, whatever id the url
  // pairs it with (a forged hello's, refused to that address).
  p.dead = this_process && closed_here(remote.context_id, remote.name, provider_hash_);
  if (insert) p.addr = FI_ADDR_NOTAVAIL;
  if (insert && !p.dead) {
    // A name ends where its length says: some providers read it as a
    // string, so it goes in zero-terminated, never as the bytes that
    // happen to follow it.
    std::array<char, max_name + 1> name{};
    std::memcpy(name.data(), p.name.data(), p.name_len);
    fi_addr_t addr = FI_ADDR_NOTAVAIL;
    const int n = fi_av_insert(av_, name.data(), 1, &addr, 0, nullptr);
    if (n != 1) {
      PIER_LOG(warn, "ofi", "cannot insert a peer address: {}",
               n < 0 ? fi_strerror(-n) : "refused");
      return Status::invalid_argument;
    }
    p.addr = addr;
  }
  // A pid named off the wire is not watched: any process could be named.
  if (same_host && !p.in_process && !p.dead && !from_wire)
    p.pidfd = static_cast<int>(::syscall(SYS_pidfd_open, remote.pid, 0));
  try {
    if (p.pidfd >= 0) p.shm_region = shm_region_of(remote.name, remote.pid);
  } catch (...) {
    return Status::no_memory;
  }
  return Status::ok;
}

Status OfiContext::attach(OfiInstance* inst, const Url& remote, driver::Track track,
                          std::size_t* peer) {
  for (const OfiInstance* other : instances_)
    if (other->remote_context() == remote.context_id && other->track() == track)
      return Status::in_use;
  if (remote.provider_hash != provider_hash_) {
    PIER_LOG(warn, "ofi", "peer url is for another provider than {}",
             choice_.info->fabric_attr->prov_name);
    return Status::invalid_argument;
  }
  UrlView view;
  view.context_id = remote.context_id;
  view.pid = remote.pid;
  view.provider_hash = remote.provider_hash;
  view.host_key = remote.host_key;
  view.name = remote.name;
  Result<std::size_t> index = peer_of(view);
  if (!index) return index.status();
  try {
    instances_.push_back(inst);
  } catch (...) {
    return Status::no_memory;
  }
  *peer = *index;
  if (peers_[*index].dead) return Status::broken;
  for (auto it = parked_.begin(); it != parked_.end(); ++it) {
    if (it->hello.sender_context == remote.context_id && it->hello.track == track) {
      const Control hello = it->hello;
      parked_.erase(it);
      inst->on_hello(hello);
      break;
    }
  }
  return Status::ok;
}

void OfiContext::detach(OfiInstance* inst) noexcept {
  std::erase(instances_, inst);
  for (Op& op : ops_) {
    if (op.owner != inst) continue;
    op.owner = nullptr;
    op.pkt = nullptr;
    maybe_free(&op);
  }
}

void OfiContext::fail_ops(OfiInstance* inst, Status why) noexcept {
  for (Op& op : ops_) {
    if (op.owner != inst || op.done) continue;
    if (op.kind == Op::Kind::send || op.kind == Op::Kind::rma_write ||
        op.kind == Op::Kind::rdv_notice) {
      op.done = true;
      op.status = why;
      op.pkt = nullptr;
    }
  }
}

bool OfiContext::sends_in_provider(const OfiInstance* inst) const noexcept {
  // One already reported was waited for by its poll (send_lingers) until
  // the limit: not again.
  for (const Op& op : ops_)
    if (op.owner == inst && op.in_provider && !op.reported &&
        (op.kind == Op::Kind::send || op.kind == Op::Kind::rma_write))
      return true;
  return false;
}

void OfiContext::cancel_sends(const OfiInstance* inst) noexcept {
  for (Op& op : ops_)
    if (op.owner == inst && op.in_provider && !op.reported &&
        (op.kind == Op::Kind::send || op.kind == Op::Kind::rma_write))
      if (ep_ != nullptr) (void)fi_cancel(&ep_->fid, &op.fctx);
}

bool OfiContext::rdv_in_flight(const OfiInstance* inst) const noexcept {
  for (const Op& op : ops_)
    if (op.owner == inst && !op.done &&
        (op.kind == Op::Kind::rma_write || op.kind == Op::Kind::rdv_notice))
      return true;
  return false;
}

Op* OfiContext::get_op(Op::Kind kind, OfiInstance* owner) noexcept {
  Op* op = free_ops_;
  if (op == nullptr) return nullptr;
  free_ops_ = op->next_free;
  *op = Op{};
  op->kind = kind;
  op->owner = owner;
  return op;
}

void OfiContext::maybe_free(Op* op) noexcept {
  if (op->kind == Op::Kind::free || op->in_provider || op->retry) return;
  if (op->owner != nullptr && !op->reported) return;
  if (!kept_buffers_.empty())
    std::erase_if(kept_buffers_, [op](const auto& k) { return k.first == op; });
  op->kind = Op::Kind::free;
  op->next_free = free_ops_;
  free_ops_ = op;
}

void OfiContext::keep_until_done(Op* op, std::vector<std::byte>&& buffer) noexcept {
  try {
    kept_buffers_.emplace_back(op, std::move(buffer));
  } catch (...) {
    // Leaked rather than freed under the provider.
    new std::vector<std::byte>(std::move(buffer));  // NOLINT(cppcoreguidelines-owning-memory)
  }
}

void OfiContext::retry_later(Op* op) noexcept {
  if (op->retry) return;
  op->retry = true;
  retry_.push_back(op);  // never grows: reserved for every op
}

void OfiContext::notice_closed_peers() noexcept {
  const std::uint64_t n = closes.load(std::memory_order_acquire);
  if (n == closes_seen_) return;
  closes_seen_ = n;
  // Only no more sends: marked dead by check_in_process_peers(), once what
  // it sent before it closed (a packet, then its bye) has been read; a
  // death declared now failed the receive that packet was for.
  // A peer known from a hello only is never declared dead (nothing
  // watches it), but a context of this process that closed takes no send
  // either.
  for (Peer& p : peers_)
    if ((p.in_process || (p.wire_only && p.this_process)) && !p.dead &&
        closed_here(p.context_id, std::span<const std::byte>(p.name.data(), p.name_len),
                    provider_hash_))
      p.closed = true;
}

Status OfiContext::send_control(std::size_t peer, const Control& c) noexcept {
  // A peer context of this process may have closed since we last looked
  // (progress checks every 20 ms): a send to its endpoint crashed libfabric
  // 1.17's shm (a core's bye at teardown, right after another core in the
  // process closed).
  notice_closed_peers();
  if (peers_[peer].dead || peers_[peer].closed) return Status::broken;
  Control out = c;
  // A hello names us by our url, which stays in place until close: it goes
  // as a second iovec, so an op holds only the fixed bytes.
  out.url = {};
  if (c.type == ControlType::hello && hello_url_) out.url = url_;
  return send_control_bytes(peer, encode_control(out), out.url, c.target_instance);
}

Status OfiContext::send_control_bytes(std::size_t peer, const ControlBytes& head,
                                      std::span<const std::byte> tail,
                                      std::uint32_t target_instance) noexcept {
  Op* op = get_op(Op::Kind::control_send, nullptr);
  if (op == nullptr) return Status::no_resource;
  op->ctl = head;
  op->peer = peers_[peer].addr;
  op->control_peer = peer;
  std::array<::iovec, 2> iov{::iovec{op->ctl.data(), op->ctl.size()},
                             ::iovec{const_cast<std::byte*>(tail.data()), tail.size()}};
  const std::size_t n = tail.empty() ? 1 : 2;
  const ssize_t rc = choice_.msg ? fi_sendv(ep_, iov.data(), nullptr, n, op->peer, &op->fctx)
                                 : fi_tsendv(ep_, iov.data(), nullptr, n, op->peer,
                                             tag_of(TagKind::control, target_instance), &op->fctx);
  if (rc == 0) {
    op->in_provider = true;
    return Status::ok;
  }
  maybe_free(op);
  if (rc == -FI_EAGAIN) return Status::no_resource;
  PIER_LOG(warn, "ofi", "cannot send a control message: {}", fi_strerror(static_cast<int>(-rc)));
  return Status::broken;
}

Status OfiContext::post_control_recv(Op* op) noexcept {
  // With FI_MSG the control receives sit in their own queue: in the tagged
  // one, every data packet was first tried against all 64 of them (shm and
  // rxm search posted receives in order).
  const ssize_t rc =
      choice_.msg ? fi_recv(ep_, op->buf, control_max_size, nullptr, FI_ADDR_UNSPEC, &op->fctx)
                  : fi_trecv(ep_, op->buf, control_max_size, nullptr, FI_ADDR_UNSPEC,
                             tag_of(TagKind::control, 0), control_ignore, &op->fctx);
  if (rc == 0) {
    op->in_provider = true;
    return Status::ok;
  }
  if (rc == -FI_EAGAIN) {
    retry_later(op);
    return Status::ok;
  }
  PIER_LOG(error, "ofi", "cannot post a control receive: {}", fi_strerror(static_cast<int>(-rc)));
  return Status::system_error;
}

bool OfiContext::sends_in_provider() const noexcept {
  return std::any_of(ops_.begin(), ops_.end(), [](const Op& op) {
    return op.in_provider && op.kind != Op::Kind::recv && op.kind != Op::Kind::control_recv;
  });
}

std::size_t OfiContext::read_cq() noexcept {
  std::size_t seen = 0;
  std::array<fi_cq_tagged_entry, 16> entries;
  for (int round = 0; round < 8; ++round) {
    const ssize_t n = fi_cq_read(cq_, entries.data(), entries.size());
    if (n > 0) {
      for (ssize_t i = 0; i < n; ++i)
        on_completion(static_cast<Op*>(entries[static_cast<std::size_t>(i)].op_context),
                      entries[static_cast<std::size_t>(i)]);
      seen += static_cast<std::size_t>(n);
      if (static_cast<std::size_t>(n) < entries.size()) break;
      continue;
    }
    if (n == -FI_EAVAIL) {
      fi_cq_err_entry err{};
      if (fi_cq_readerr(cq_, &err, 0) > 0) on_error(static_cast<Op*>(err.op_context), err);
      ++seen;
      continue;
    }
    if (n != -FI_EAGAIN) PIER_LOG(warn, "ofi", "fi_cq_read: {}", fi_strerror(static_cast<int>(-n)));
    break;
  }
  if (!retry_.empty()) retry_ops();
  return seen;
}

void OfiContext::owe_bye(std::size_t peer, const Control& c) noexcept {
  if (owed_byes_.size() == owed_byes_.capacity()) {
    PIER_LOG(warn, "ofi", "{} byes already owed: one to peer {} is dropped", owed_byes_.size(),
             peer);
    return;
  }
  owed_byes_.push_back({peer, c});
  control_owed_ = true;
}

void OfiContext::send_owed_byes() noexcept {
  // A peer context of this process may have closed since (its endpoint is
  // gone: a send to it crashed libfabric 1.17's shm); progress notices
  // that only now and then, close()'s drain not at all.
  check_in_process_peers();
  std::size_t kept = 0;
  for (std::size_t i = 0; i < owed_byes_.size(); ++i) {
    const OwedBye& b = owed_byes_[i];
    if (peer_dead(b.peer)) continue;  // nobody left to tell
    if (peers_[b.peer].in_process) {
      const std::optional<bool> open = in_process_peer_open(b.peer);
      if (!open) {
        owed_byes_[kept++] = b;  // the list was busy: asked again next time
        continue;
      }
      if (!*open) {
        mark_dead(b.peer);
        continue;
      }
    }
    const Status s = send_control(b.peer, b.control);
    if (s == Status::no_resource) owed_byes_[kept++] = b;  // order kept: older first
  }
  owed_byes_.resize(kept);
  if (kept != 0) control_owed_ = true;
}

void OfiContext::progress() noexcept {
  if (state_ != State::running) return;
  ++progress_epoch_;
  const std::size_t seen = read_cq();
  if (control_owed_) {
    control_owed_ = false;
    if (!owed_byes_.empty()) send_owed_byes();
    for (OfiInstance* inst : instances_) inst->flush_control();
  }
  // Reading the clock on every poll cost a fifth of a busy 8-byte ping-pong
  // (perf, shm): the peers' 20 ms check looks at it every 64th poll, and
  // wait() asks for it before each sleep.
  if (++polls_since_check_ >= check_every_polls) {
    polls_since_check_ = 0;
    const auto now = std::chrono::steady_clock::now();
    if (now - last_check_ >= check_period) {
      last_check_ = now;
      check_peers();
      if (!parked_.empty()) expire_parked(now);
      if (on_demand_)
        for (OfiInstance* inst : instances_) inst->repeat_call_back(now, call_back_period);
    }
  }
  if (seen == 0 && (++idle_polls_ & 63) == 0) progress_neighbours(this);
}

void OfiContext::on_completion(Op* op, const fi_cq_tagged_entry& e) noexcept {
  if (op == nullptr || op->kind == Op::Kind::free) return;
  op->in_provider = false;
  switch (op->kind) {
    case Op::Kind::control_recv:
      on_control_bytes({op->buf, std::min(e.len, control_max_size)});
      if (state_ == State::running) (void)post_control_recv(op);
      return;
    case Op::Kind::control_send:
      maybe_free(op);
      return;
    case Op::Kind::rma_write:
      // The data is placed; now tell the receiver, in order behind it.
      op->kind = Op::Kind::rdv_notice;
      if (op->owner != nullptr && !op->done) {
        op->owner->post_op(op);
      } else {
        maybe_free(op);
      }
      return;
    case Op::Kind::send:
    case Op::Kind::rdv_notice:
      if (!op->done) {
        op->done = true;
        op->status = Status::ok;
      }
      maybe_free(op);
      return;
    case Op::Kind::recv:
      if (!op->done && op->owner != nullptr) {
        op->tag = e.tag;
        op->data = e.data;
        op->length = e.len;
        op->status = Status::ok;
        // Another instance's packet (a provider matching fault, seen with
        // shm 1.17 before receives named their peer) is never delivered.
        if ((e.tag & ~data_ignore) != tag_of(TagKind::data, op->owner->id())) {
          PIER_LOG(error, "ofi", "instance {} got a packet tagged {:#x}", op->owner->id(), e.tag);
          op->status = Status::malformed;
        }
        op->done = true;
        op->owner->on_recv_done(op);
      }
      maybe_free(op);
      return;
    case Op::Kind::free:
      return;
  }
}

void OfiContext::on_error(Op* op, const fi_cq_err_entry& e) noexcept {
  if (op == nullptr || op->kind == Op::Kind::free) return;
  op->in_provider = false;
  // Providers disagree on the sign (shm reports -FI_ETRUNC).
  const int err = e.err < 0 ? -e.err : e.err;
  switch (op->kind) {
    case Op::Kind::control_recv:
      // Truncated junk or a cancel at close: post again while running.
      if (state_ == State::running && err != FI_ECANCELED) (void)post_control_recv(op);
      return;
    case Op::Kind::control_send: {
      PIER_LOG(debug, "ofi", "control message failed: {}", fi_strerror(err));
      // Charged to the peer it was sent to: a peer known from a hello may
      // share a real peer's address (a forged url naming its endpoint).
      if (err != FI_ECANCELED && op->control_peer < peers_.size() &&
          peers_[op->control_peer].addr == op->peer && !peers_[op->control_peer].wire_only)
        mark_dead(op->control_peer);
      maybe_free(op);
      return;
    }
    case Op::Kind::rma_write:
      // A refused key or address (a forged or stale rdv_data): the data
      // goes as a tagged message instead, which the posted receive takes.
      // A cancel (ours, at an end) is final: never sent again.
      if (err == FI_ECANCELED) {
        if (!op->done) {
          op->done = true;
          op->status = Status::canceled;
        }
        maybe_free(op);
        return;
      }
      PIER_LOG(debug, "ofi", "rma write refused ({}): sending by message", fi_strerror(err));
      op->kind = Op::Kind::send;
      if (op->owner != nullptr && !op->done) {
        op->owner->post_op(op);
      } else {
        maybe_free(op);
      }
      return;
    case Op::Kind::send:
    case Op::Kind::rdv_notice:
      if (!op->done) {
        op->done = true;
        op->status = err == FI_ECANCELED ? Status::canceled : Status::broken;
      }
      if (err != FI_ECANCELED) {
        PIER_LOG(debug, "ofi", "send failed: {}", fi_strerror(err));
        if (OfiInstance* owner = op->owner) mark_dead(owner->peer());
      }
      maybe_free(op);
      return;
    case Op::Kind::recv:
      if (err != FI_ECANCELED && err != FI_ETRUNC)
        PIER_LOG(debug, "ofi", "receive failed: {} ({}, len {}, olen {})", fi_strerror(err), err,
                 e.len, e.olen);
      if (!op->done && op->owner != nullptr) {
        op->tag = e.tag;
        op->data = e.data;
        op->length = e.len;
        op->status = err == FI_ETRUNC      ? Status::truncated
                     : err == FI_ECANCELED ? Status::canceled
                                           : Status::broken;
        op->done = true;
        op->owner->on_recv_done(op);
      }
      maybe_free(op);
      return;
    case Op::Kind::free:
      return;
  }
}

void OfiContext::on_control_bytes(std::span<const std::byte> bytes) noexcept {
  Result<Control> c = parser_.decode(bytes);
  if (c)
    on_control(*c);
  else
    PIER_LOG(debug, "ofi", "dropped a control message: {}", to_string(c.status()));
}

void OfiContext::on_control(const Control& c) noexcept {
  if (c.target_context != id_) return;  // a stale url: meant for an older context
  if (c.type == ControlType::hello) {
    on_hello(c);
    return;
  }
  for (OfiInstance* inst : instances_) {
    if (inst->id() != c.target_instance || inst->remote_context() != c.sender_context) continue;
    if (c.type == ControlType::bye) inst->on_bye(c);
    if (c.type == ControlType::credit) inst->on_credit(c);
    return;
  }
}

void OfiContext::on_hello(const Control& c) noexcept {
  if (!c.url.empty()) {
    // Reported to the core as is, and used to reach the sender: it must
    // be the sender's own, for our provider (the parser checked its form).
    const Result<UrlView> url = peek_url(c.url);
    if (!url || url->context_id != c.sender_context || url->provider_hash != provider_hash_) {
      PIER_LOG(warn, "ofi", "dropped a hello whose url is not its sender's, over {}",
               choice_.info->fabric_attr->prov_name);
      return;
    }
  }
  for (OfiInstance* inst : instances_) {
    if (inst->remote_context() != c.sender_context || inst->track() != c.track) continue;
    if (inst->awaiting_hello()) {
      inst->on_hello(c);
      return;
    }
    // A call back repeated before ours arrived, or the answer to ours.
    if (inst->remote_instance() == c.sender_instance) return;
  }
  // The local connect_async() has not come yet (or an old instance still
  // holds the pair): kept for it, and reported by incoming().
  park(c);
}

void OfiContext::park(const Control& c) noexcept {
  const auto now = std::chrono::steady_clock::now();
  const bool call_back = (c.flags & flag_call_back) != 0;
  Parked* slot = nullptr;
  for (Parked& p : parked_) {
    if (p.hello.sender_context != c.sender_context || p.hello.track != c.track) continue;
    // A plain hello comes once per instance: the same again is not a new
    // attempt. A call back repeated is (its first report may have been
    // passed over), and a newer instance of the peer replaces an older.
    if (p.hello.sender_instance == c.sender_instance && !call_back) return;
    slot = &p;
    break;
  }
  if (slot == nullptr && parked_.size() == max_parked_) {
    // Full: a hello reported already, which the core passed over (a url it
    // does not know, a gate that failed), makes room, the oldest first;
    // else anyone who can send us packets could keep the list full and
    // every real connector out for PIER_OFI_PARK_MS.
    // (A hello without a url waits for a local connect_async() only.)
    Parked* oldest = nullptr;
    for (Parked& p : parked_)
      if (p.reported && p.url_len > 0 && (!oldest || p.since < oldest->since)) oldest = &p;
    if (oldest != nullptr) {
      if ((oldest->hello.flags & flag_call_back) == 0)
        refuse(oldest->hello, std::span<const std::byte>(oldest->url).first(oldest->url_len));
      slot = oldest;
    }
  }
  if (slot == nullptr) {
    if (parked_.size() == max_parked_) {
      if (call_back) return;  // it comes again
      PIER_LOG(warn, "ofi", "refusing a connection: {} are already waiting", max_parked_);
      refuse(c, c.url);
      return;
    }
    slot = &parked_.emplace_back();  // reserved at init: no allocation
  }
  slot->hello = c;
  slot->hello.url = {};
  std::copy(c.url.begin(), c.url.end(), slot->url.begin());
  slot->url_len = c.url.size();
  // Without a url there is nothing to report: only a local connect_async()
  // takes it, and its time runs from now.
  slot->reported = c.url.empty();
  slot->since = now;
}

void OfiContext::refuse(const Control& hello, std::span<const std::byte> url) noexcept {
  std::optional<std::size_t> peer;
  for (std::size_t i = 0; i < peers_.size(); ++i)
    if (peers_[i].context_id == hello.sender_context) peer = i;
  if (!peer) {
    const Result<UrlView> view = peek_url(url);
    if (!view) return;  // nobody we can reach
    // Bounded (max_wire_peers): beyond, the sender learns by its own
    // deadline instead.
    const Result<std::size_t> added = peer_of(*view, true);
    if (!added) return;
    peer = *added;
  }
  if (peers_[*peer].dead) return;
  Control bye;
  bye.type = ControlType::bye;
  bye.track = hello.track;
  bye.flags = flag_refused;
  bye.sender_context = id_;
  bye.target_context = hello.sender_context;
  bye.target_instance = hello.sender_instance;
  if (send_control(*peer, bye) == Status::no_resource) owe_bye(*peer, bye);
}

void OfiContext::expire_parked(std::chrono::steady_clock::time_point now) noexcept {
  const auto limit = std::chrono::milliseconds(park_ms_);
  std::size_t dropped = 0;
  for (std::size_t i = 0; i < parked_.size();) {
    const Parked& p = parked_[i];
    // On demand the time runs only once incoming() reported it: the core
    // must have had its chance to take it.
    if ((on_demand_ && !p.reported) || now - p.since < limit) {
      ++i;
      continue;
    }
    // An acceptor waits for its own user's deadline and calls back again.
    if ((p.hello.flags & flag_call_back) == 0)
      refuse(p.hello, std::span<const std::byte>(p.url).first(p.url_len));
    parked_.erase(parked_.begin() + static_cast<std::ptrdiff_t>(i));
    ++dropped;
  }
  if (dropped != 0)
    PIER_LOG(info, "ofi", "dropped {} hello(s) no instance took in {} ms (PIER_OFI_PARK_MS)",
             dropped, park_ms_);
}

Status OfiContext::incoming(std::vector<std::byte>& remote_url) {
  std::lock_guard lock(mutex_);
  if (state_ != State::running)
    return state_ == State::closed ? Status::not_initialized : Status::invalid_argument;
  progress();
  const auto now = std::chrono::steady_clock::now();
  expire_parked(now);
  for (Parked& p : parked_) {
    if (p.reported) continue;
    try {
      remote_url.assign(p.url.begin(), p.url.begin() + static_cast<std::ptrdiff_t>(p.url_len));
    } catch (...) {
      return Status::no_memory;
    }
    p.reported = true;
    p.since = now;
    return Status::ok;
  }
  return Status::in_progress;
}

void OfiContext::retry_ops() noexcept {
  // Two lists reserved at init, swapped: a post that meets EAGAIN again
  // goes back on retry_ while this pass walks the other (no allocation).
  retrying_.clear();
  retrying_.swap(retry_);
  for (Op* op : retrying_) {
    op->retry = false;
    if (op->kind == Op::Kind::control_recv) {
      if (state_ == State::running) (void)post_control_recv(op);
    } else if (op->owner != nullptr && !op->done) {
      op->owner->post_op(op);
    } else {
      maybe_free(op);
    }
  }
}

bool OfiContext::registered_here(std::uint64_t context_id) noexcept {
  // Same pid and host key, yet maybe not ours: a degenerate host key (no
  // /proc), or another copy of this driver in the process. Those keep
  // their keep-alives. A busy list (try_lock: we hold our mutex) trusts
  // the pid.
  Neighbours& n = neighbours();
  std::unique_lock list(n.mu, std::try_to_lock);
  if (!list.owns_lock()) return true;
  return std::any_of(n.all.begin(), n.all.end(),
                     [&](const OfiContext* c) { return c->id_ == context_id; });
}

std::optional<bool> OfiContext::in_process_peer_open(std::size_t peer) noexcept {
  // try_lock, as below: not known when the list is busy.
  Neighbours& n = neighbours();
  std::unique_lock list(n.mu, std::try_to_lock);
  if (!list.owns_lock()) return std::nullopt;
  return std::any_of(n.all.begin(), n.all.end(),
                     [&](const OfiContext* c) { return c->id_ == peers_[peer].context_id; });
}

void OfiContext::check_in_process_peers() noexcept {
  // try_lock: close() takes the list, then its own context's mutex, while
  // we hold ours; a busy list is checked next time.
  Neighbours& n = neighbours();
  std::unique_lock list(n.mu, std::try_to_lock);
  if (!list.owns_lock()) return;
  for (std::size_t i = 0; i < peers_.size(); ++i) {
    if (!peers_[i].in_process || peers_[i].dead) continue;
    const bool open = std::any_of(n.all.begin(), n.all.end(), [&](const OfiContext* c) {
      return c->id_ == peers_[i].context_id;
    });
    if (open) continue;
    PIER_LOG(debug, "ofi", "peer context {:x} of this process closed", peers_[i].context_id);
    for (int round = 0; round < 16 && read_cq() > 0;) ++round;
    mark_dead(i);
  }
}

void OfiContext::check_peers() noexcept {
  const auto now = std::chrono::steady_clock::now();
  check_in_process_peers();
  for (std::size_t i = 0; i < peers_.size(); ++i) {
    // In-process peers: the list of open contexts says whether they are
    // there; a keep-alive to a closed one crashed libfabric 1.17's shm.
    // Peers known from a hello only are not watched.
    if (peers_[i].dead || peers_[i].in_process || peers_[i].wire_only) continue;
    if (peers_[i].pidfd >= 0) {
      pollfd pfd{peers_[i].pidfd, POLLIN, 0};
      if (::poll(&pfd, 1, 0) > 0) {
        PIER_LOG(debug, "ofi", "peer context {:x} exited", peers_[i].context_id);
        // What it sent before it went (its bye included) is taken first.
        // That may add peers (a hello refused), so peers_[i] is looked up
        // again after it, never held across.
        for (int round = 0; round < 16 && read_cq() > 0;) ++round;
        mark_dead(i);
        // libfabric's shm provider removes its file at close; a killed
        // process leaves it in /dev/shm (16 MiB each, one per kill). Its
        // owner has exited, so nobody opens that name again.
        const std::string& region = peers_[i].shm_region;
        if (!region.empty() && ::shm_unlink(region.c_str()) == 0)
          PIER_LOG(debug, "ofi", "removed the shm file {} of an exited peer", region);
      }
      continue;
    }
    Peer& p = peers_[i];
    if (keepalive_ms_ == 0 || now - p.last_keepalive < std::chrono::milliseconds(keepalive_ms_))
      continue;
    p.last_keepalive = now;
    const bool used = std::any_of(instances_.begin(), instances_.end(), [&](OfiInstance* inst) {
      return inst->peer() == i && inst->attached();
    });
    if (!used) continue;
    Control k;
    k.type = ControlType::keepalive;
    k.sender_context = id_;
    k.target_context = p.context_id;
    (void)send_control(i, k);
  }
}

void OfiContext::mark_dead(std::size_t peer) noexcept {
  if (peer >= peers_.size() || peers_[peer].dead) return;
  peers_[peer].dead = true;
  for (OfiInstance* inst : instances_)
    if (inst->peer() == peer && inst->attached()) inst->on_peer_gone();
}

Status OfiContext::spin(std::unique_lock<ContextMutex>& lock, driver::Deadline deadline,
                        bool (*ready)(void*), void* arg) noexcept {
  for (;;) {
    progress();
    if (ready(arg)) return Status::ok;
    if (state_ != State::running) return Status::not_initialized;
    if (driver::Clock::now() >= deadline) return Status::timeout;
    lock.unlock();
    std::this_thread::yield();
    lock.lock();
  }
}

Status OfiContext::wait(std::unique_lock<ContextMutex>& lock, driver::Deadline deadline,
                        bool (*ready)(void*), void* arg) noexcept {
  for (;;) {
    polls_since_check_ = check_every_polls;  // a sleeper checks its peers each slice
    progress();
    if (ready(arg)) return Status::ok;
    if (state_ != State::running) return Status::not_initialized;
    const auto now = driver::Clock::now();
    if (now >= deadline) return Status::timeout;
    // Sleep in slices: peers are checked between them, and a completion
    // another thread read (so the fd stayed quiet) is seen at the next one.
    const auto slice = std::min<driver::Clock::duration>(deadline - now, wait_slice_);
    if (wait_fd_ >= 0) {
      fid* fids[1] = {&cq_->fid};
      if (fi_trywait(fabric_, fids, 1) != FI_SUCCESS) continue;
      std::array<pollfd, 2> pfd{pollfd{wait_fd_, POLLIN, 0}, pollfd{wake_fd_, POLLIN, 0}};
      lock.unlock();
      (void)::poll(pfd.data(), pfd.size(), ms_ceil(slice));
      lock.lock();
      // The flag is what cancels; a count it left behind (see wait_disarm)
      // must not end every later sleep at once. A count with the flag up is
      // a cancel on its way to wait_any() (maybe on another thread): left
      // for it, or its own poll would miss it.
      if ((pfd[1].revents & POLLIN) != 0 && !cancel_any_.load(std::memory_order_acquire)) {
        std::uint64_t drained = 0;
        (void)::read(wake_fd_, &drained, sizeof drained);
      }
    } else {
      if (cancel_any_.load(std::memory_order_acquire)) continue;
      lock.unlock();
      std::this_thread::sleep_for(
          std::min<driver::Clock::duration>(slice, std::chrono::microseconds(200)));
      lock.lock();
    }
  }
}

// --- receive-any ----------------------------------------------------------

OfiInstance* OfiContext::find_ready() noexcept {
  // Round robin, so one busy peer does not hide the others.
  const std::size_t n = instances_.size();
  for (std::size_t k = 0; k < n; ++k) {
    OfiInstance* inst = instances_[(next_probe_ + k) % n];
    if (inst->has_packet()) {
      next_probe_ = (next_probe_ + k + 1) % n;
      return inst;
    }
  }
  return nullptr;
}

Status OfiContext::probe_any(driver::Instance** ready) {
  *ready = nullptr;
  std::lock_guard lock(mutex_);
  if (state_ != State::running)
    return state_ == State::closed ? Status::not_initialized : Status::invalid_argument;
  progress();
  OfiInstance* inst = find_ready();
  if (inst == nullptr) return Status::in_progress;
  *ready = inst;
  return Status::ok;
}

Status OfiContext::wait_any(driver::Instance** ready, driver::Deadline deadline) {
  *ready = nullptr;
  std::unique_lock lock(mutex_);
  if (state_ != State::running)
    return state_ == State::closed ? Status::not_initialized : Status::invalid_argument;
  const Status s = wait(
      lock, deadline,
      [](void* self) {
        auto* ctx = static_cast<OfiContext*>(self);
        return ctx->cancel_any_.load(std::memory_order_acquire) || ctx->find_ready() != nullptr;
      },
      this);
  if (cancel_any_.exchange(false, std::memory_order_acq_rel)) {
    std::uint64_t drained = 0;
    (void)::read(wake_fd_, &drained, sizeof drained);
    return Status::canceled;
  }
  if (s != Status::ok) return s;
  *ready = find_ready();
  return *ready != nullptr ? Status::ok : Status::in_progress;
}

Status OfiContext::wait_arm(std::vector<::pollfd>& fds) {
  std::lock_guard lock(mutex_);
  if (state_ != State::running)
    return state_ == State::closed ? Status::not_initialized : Status::invalid_argument;
  if (wait_fd_ < 0) return Status::unsupported;  // the provider's queue has no descriptor
  progress();
  if (cancel_any_.load(std::memory_order_acquire) || find_ready() != nullptr)
    return Status::in_progress;
  // A hello read in that progress waits for incoming() to report it, and
  // the queue's descriptor will not say so again: a caller that may sleep
  // long (an idle core) must not. Only on demand: otherwise nobody asks.
  if (on_demand_ &&
      std::any_of(parked_.begin(), parked_.end(), [](const Parked& p) { return !p.reported; }))
    return Status::in_progress;
  // The queue's descriptor is armed only when it is empty (fi_trywait).
  fid* fids[1] = {&cq_->fid};
  if (fi_trywait(fabric_, fids, 1) != FI_SUCCESS) return Status::in_progress;
  fds.push_back({wait_fd_, POLLIN, 0});
  fds.push_back({wake_fd_, POLLIN, 0});
  return Status::ok;
}

Status OfiContext::wait_disarm() {
  if (state_ != State::running || wake_fd_ < 0)
    return state_ == State::closed ? Status::not_initialized : Status::invalid_argument;
  // Always drained: cancel_any() raises the flag before it writes, so a
  // disarm between the two finds the flag and no count yet, and a count
  // left behind with no flag would end every later sleep at once.
  cancel_any_.store(false, std::memory_order_release);
  std::uint64_t drained = 0;
  (void)::read(wake_fd_, &drained, sizeof drained);
  return Status::ok;
}

Status OfiContext::cancel_any() {
  // Runs while wait_any() sleeps in another thread: no lock, only the flag
  // and the eventfd the sleeper polls.
  const int fd = wake_fd_;
  if (state_ != State::running || fd < 0) return Status::not_initialized;
  cancel_any_.store(true, std::memory_order_release);
  const std::uint64_t one = 1;
  (void)::write(fd, &one, sizeof one);
  return Status::ok;
}

}  // namespace pier::drivers::ofi
