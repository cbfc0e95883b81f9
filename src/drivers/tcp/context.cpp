#include "drivers/tcp/context.hpp"

#include "driver/fd.hpp"

#include "base/clock.hpp"
#include "base/config.hpp"
#include "base/log.hpp"
#include "drivers/tcp/instance.hpp"
#include "drivers/tcp/local.hpp"
#include "drivers/tcp/net.hpp"

#include <fcntl.h>
#include <linux/sockios.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

namespace pier::drivers::tcp {

inline const config::IntKey send_queue_key{"TCP_SEND_QUEUE", 64, 1, 65536,
                                           "packets one instance may have posted for sending"};
inline const config::IntKey recv_buffer_key{
    "TCP_RECV_BUFFER",
    std::int64_t{256} * 1024,
    min_small_limit,
    1 << 30,
    "receive buffer of a small-track instance; the largest small packet is this less 16 bytes",
    config::Type::size};
inline const config::IntKey handshakes_key{
    "TCP_BACKLOG", 64, 1, 65536, "accepted connections waiting for their instance, per context"};
inline const config::IntKey keepalive_key{
    "TCP_KEEPALIVE_MS", 5000, 0, 3600000,
    "an idle connection that is polled sends a keep-alive packet this often (0: never)"};

inline const config::IntKey park_key{
    "TCP_PARK_MS", 60000, 1, 3600000,
    "an accepted connection that no instance of ours takes (a peer we do not know, a gate "
    "that failed, a hello that never comes) is closed after this long; the peer sees it "
    "broken"};

namespace {

// epoll tags besides instance pointers (which are never this small).
constexpr std::uint64_t tag_listen = 1;
constexpr std::uint64_t tag_cancel = 2;
constexpr std::uint64_t tag_handshake = 3;
constexpr std::uint64_t tag_linger = 4;
/// A peer that never closes its end does not keep our socket for ever.
constexpr auto linger_limit = std::chrono::seconds(30);
constexpr std::size_t max_lingering = 256;
/// What close() gives lingering sockets, all together.
constexpr auto close_linger_limit = std::chrono::seconds(2);
constexpr auto lingering_check_period = std::chrono::milliseconds(5);

/// Bytes we sent that the peer has not acknowledged (0 on error).
int unacknowledged(int fd) noexcept {
  int n = 0;
  if (::ioctl(fd, SIOCOUTQ, &n) != 0) return 0;
  return n;
}
constexpr std::size_t large_recv_buffer = std::size_t{64} * 1024;

void close_fd(int& fd) noexcept {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

int remaining_ms(driver::Deadline deadline) noexcept {
  const auto left = deadline - driver::Clock::now();
  if (left <= driver::Clock::duration::zero()) return 0;
  // Round up, so that a wait never returns before its deadline.
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
  return ms > 60000 ? 60000 : static_cast<int>(ms);
}

}  // namespace

TcpContext::~TcpContext() {
  if (state_ != State::closed) (void)close();
}

Result<driver::Properties> TcpContext::properties(const driver::Hints& hints) {
  if (state_ == State::closed) return Status::not_initialized;
  if (state_ != State::fresh) return Status::invalid_argument;
  send_queue_ = static_cast<std::size_t>(send_queue_key.get());
  recv_buffer_ = static_cast<std::size_t>(recv_buffer_key.get());
  max_handshakes_ = static_cast<std::size_t>(handshakes_key.get());
  keepalive_ms_ = keepalive_key.get();
  park_ms_ = park_key.get();
  on_demand_ = hints.on_demand;
  // On demand, a peer's connections wait parked until the core polls
  // incoming(): room for every peer's two tracks, not a fixed backlog.
  if (on_demand_)
    max_handshakes_ = std::max<std::size_t>(max_handshakes_, std::size_t{4} * hints.session_size);
  state_ = State::described;

  driver::Properties props;
  driver::Caps& caps = props.caps;
  caps.supports_data = true;
  caps.send_buf = true;
  caps.recv_buf = true;
  caps.recv_post = true;
  caps.max_iov = TcpInstance::max_iov;
  caps.blocking_wait = true;
  caps.recv_any = true;
  caps.wait_fds = true;
  caps.max_packet = recv_buffer_ - frame_header_size;
  caps.needs_rdv = false;
  caps.incoming = true;
  // Nominal: loopback TCP on this class of machine (bare busy-poll ping-pong
  // 2.75 us, stream 6.7 GB/s, docs/tcp.md); a real NIC is slower.
  props.profile.latency_ns = 3000;
  props.profile.bandwidth_mbps = 6000;
  return props;
}

std::size_t TcpContext::recv_buffer_size(driver::Track track) const noexcept {
  return track == driver::Track::small ? recv_buffer_ : large_recv_buffer;
}

Result<std::vector<std::byte>> TcpContext::init() {
  if (state_ == State::closed) return Status::not_initialized;
  if (state_ != State::described) return Status::invalid_argument;
  Result<SockAddr> addr = choose_listen_address();
  if (!addr) return addr.status();

  const int family = addr->storage.ss_family;
  listen_fd_ = ::socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) {
    PIER_LOG(error, "tcp", "cannot create a socket: {}", std::strerror(errno));
    return Status::system_error;
  }
  int one = 1;
  (void)::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(listen_fd_, addr->get(), addr->length) != 0 || ::listen(listen_fd_, 1024) != 0) {
    Url want;
    from_sockaddr(*addr, want);
    PIER_LOG(error, "tcp", "cannot listen on {}: {}", to_text(want), std::strerror(errno));
    close_fds();
    return Status::system_error;
  }
  SockAddr bound;
  bound.length = sizeof bound.storage;
  (void)::getsockname(listen_fd_, reinterpret_cast<::sockaddr*>(&bound.storage), &bound.length);

  spare_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  cancel_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (epoll_fd_ < 0 || cancel_fd_ < 0) {
    PIER_LOG(error, "tcp", "cannot create epoll or eventfd: {}", std::strerror(errno));
    close_fds();
    return Status::system_error;
  }
  ::epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = tag_listen;
  (void)::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev);
  ev.data.u64 = tag_cancel;
  (void)::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, cancel_fd_, &ev);

  Url self;
  from_sockaddr(bound, self);
  // A random id per context: a url left over from a dead process whose port
  // was reused names another id, and that context refuses the connection.
  do {
    if (!random_bytes(&id_, sizeof id_)) {
      PIER_LOG(error, "tcp", "cannot read random bytes: {}", std::strerror(errno));
      close_fds();
      return Status::system_error;
    }
  } while (id_ == 0);
  self.context_id = id_;
  self.small_limit = static_cast<std::uint32_t>(recv_buffer_);
  url_ = encode_url(self);
  handshakes_.reserve(max_handshakes_);
  parked_.reserve(max_handshakes_);
  state_ = State::running;
  PIER_LOG(debug, "tcp", "listening on {}", to_text(self));
  return std::vector<std::byte>(url_.begin(), url_.end());
}

void TcpContext::close_fds() noexcept {
  drain_lingering(true);
  for (Handshake& h : handshakes_) close_fd(h.fd);
  for (Parked& p : parked_) close_fd(p.fd);
  handshakes_.clear();
  parked_.clear();
  close_fd(listen_fd_);
  close_fd(spare_fd_);
  close_fd(epoll_fd_);
  close_fd(cancel_fd_);
}

Status TcpContext::close() {
  if (state_ == State::closed) return Status::not_initialized;
  {
    std::lock_guard lock(mutex_);
    if (!instances_.empty()) {
      PIER_LOG(warn, "tcp", "close() with {} instances still open", instances_.size());
      return Status::in_use;
    }
  }
  // Lingering sockets get a last, bounded while for the peer to take what
  // we sent (the core closes its contexts right after disconnecting): a
  // close before that, with the peer sending, resets and loses it.
  const auto until = driver::Clock::now() + close_linger_limit;
  for (;;) {
    drain_lingering();
    if (!lingering() || driver::Clock::now() >= until) break;
    ::poll(nullptr, 0, 2);
  }
  close_fds();
  state_ = State::closed;
  return Status::ok;
}

Result<std::unique_ptr<driver::Instance>> TcpContext::open_instance(driver::Track track) {
  if (state_ == State::closed) return Status::not_initialized;
  if (state_ != State::running) return Status::invalid_argument;
  if (track != driver::Track::small && track != driver::Track::large)
    return Status::invalid_argument;
  auto inst = std::make_unique<TcpInstance>(*this, track);
  {
    std::lock_guard lock(mutex_);
    instances_.push_back(inst.get());
  }
  return std::unique_ptr<driver::Instance>(std::move(inst));
}

Status TcpContext::attach(TcpInstance* inst, const UrlBytes& remote, driver::Track track,
                          bool acceptor) {
  std::lock_guard lock(mutex_);
  for (TcpInstance* other : instances_)
    if (other != inst && other->attached() && other->track() == track && other->remote() == remote)
      return Status::in_use;
  if (!acceptor) return Status::ok;
  for (auto it = parked_.begin(); it != parked_.end(); ++it) {
    if (it->track == track && it->url == remote) {
      const int fd = it->fd;
      parked_.erase(it);
      inst->adopt(fd);
      break;
    }
  }
  return Status::ok;
}

void TcpContext::detach(TcpInstance* inst) noexcept {
  std::lock_guard lock(mutex_);
  instances_.erase(std::remove(instances_.begin(), instances_.end(), inst), instances_.end());
  next_probe_ = 0;
}

void TcpContext::watch(int fd, TcpInstance* inst) noexcept {
  ::epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = inst;
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0)
    PIER_LOG(warn, "tcp", "cannot watch a connection: {}", std::strerror(errno));
}

void TcpContext::unwatch(int fd) noexcept {
  (void)::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
}

TcpInstance* TcpContext::find_acceptor(const UrlBytes& url, driver::Track track) noexcept {
  for (TcpInstance* inst : instances_)
    if (inst->awaiting_accept() && inst->track() == track && inst->remote() == url) return inst;
  return nullptr;
}

void TcpContext::linger(int fd) noexcept {
  std::lock_guard lock(linger_mutex_);
  if (state_ != State::running) {
    ::close(fd);
    return;
  }
  ::epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = tag_linger;
  (void)::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
  lingering_.push_back({fd, driver::Clock::now()});
  lingering_count_.store(lingering_.size(), std::memory_order_relaxed);
}

void TcpContext::drain_lingering(bool force) noexcept {
  std::lock_guard lock(linger_mutex_);
  const auto now = driver::Clock::now();
  lingering_checked_ = now;
  const std::size_t excess =
      lingering_.size() > max_lingering ? lingering_.size() - max_lingering : 0;
  std::size_t kept = 0;
  for (std::size_t i = 0; i < lingering_.size(); ++i) {
    Lingering& l = lingering_[i];
    bool done = force || i < excess || now - l.since > linger_limit;
    // Input first (a close with input unread resets), a bounded amount: a
    // peer streaming into the socket must not keep this call going.
    std::array<std::byte, 16384> sink;
    for (int k = 0; k < 16 && !done; ++k) {
      const ssize_t n = ::recv(l.fd, sink.data(), sink.size(), MSG_DONTWAIT);
      if (n > 0) continue;
      if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) done = true;
      break;
    }
    // Everything of ours acknowledged: a reset can no longer lose any of it.
    if (!done && unacknowledged(l.fd) == 0) done = true;
    if (done) {
      if (force)
        for (int k = 0; k < 16; ++k)
          if (::recv(l.fd, sink.data(), sink.size(), MSG_DONTWAIT) <= 0) break;
      unwatch(l.fd);
      close_fd(l.fd);
    } else {
      lingering_[kept++] = l;
    }
  }
  lingering_.resize(kept);
  lingering_count_.store(kept, std::memory_order_relaxed);
}

void TcpContext::drain_lingering_now_and_then() noexcept {
  if (!lingering()) return;
  {
    std::lock_guard lock(linger_mutex_);
    if (driver::Clock::now() - lingering_checked_ < lingering_check_period) return;
  }
  drain_lingering();
}

void TcpContext::progress_accepts() noexcept {
  if (state_ != State::running) return;
  std::lock_guard lock(mutex_);
  if (lingering()) drain_lingering();
  accept_new();
  handshakes_.erase(std::remove_if(handshakes_.begin(), handshakes_.end(),
                                   [this](Handshake& h) { return !read_hello(h); }),
                    handshakes_.end());
  drop_stale();
}

void TcpContext::drop_stale() noexcept {
  // Nobody here will take these: closing tells the peer at once, where
  // keeping them would leave it waiting and hold a backlog place for ever.
  const auto limit = driver::Clock::now() - std::chrono::milliseconds(park_ms_);
  std::size_t dropped = 0;
  for (std::size_t i = 0; i < handshakes_.size();) {
    if (handshakes_[i].since >= limit) {
      ++i;
      continue;
    }
    unwatch(handshakes_[i].fd);
    close_fd(handshakes_[i].fd);
    handshakes_.erase(handshakes_.begin() + static_cast<std::ptrdiff_t>(i));
    ++dropped;
  }
  for (std::size_t i = 0; i < parked_.size();) {
    // On demand the clock runs only once incoming() reported the
    // connection: the core must have had its chance to take it.
    if (parked_[i].since >= limit || (on_demand_ && !parked_[i].reported)) {
      ++i;
      continue;
    }
    close_fd(parked_[i].fd);
    parked_.erase(parked_.begin() + static_cast<std::ptrdiff_t>(i));
    ++dropped;
  }
  if (dropped != 0)
    PIER_LOG(info, "tcp", "closed {} connection(s) no instance took in {} ms (PIER_TCP_PARK_MS)",
             dropped, park_ms_);
}

void TcpContext::accept_starved(int err) noexcept {
  // The connection stays queued and the listener readable: left so, every
  // wait_any() and idle sleep would wake at once, for ever. Hellos already
  // here are read first (those connections are handed over or refused), so
  // a real peer's connection is never the one given up; then the oldest
  // connection silent for a second goes (a peer writes its hello at once).
  // Failing that, the spare descriptor takes the newcomer, kept as any
  // other: it may be a real peer, and closing it would fail that peer for
  // good. Once the spare is spent too, waits wake early until a descriptor
  // frees up.
  handshakes_.erase(std::remove_if(handshakes_.begin(), handshakes_.end(),
                                   [this](Handshake& h) { return !read_hello(h); }),
                    handshakes_.end());
  // A lingering socket is the most expendable descriptor: the oldest goes
  // first (its peer has had the longest to take what we sent).
  {
    std::lock_guard lock(linger_mutex_);
    if (!lingering_.empty()) {
      unwatch(lingering_.front().fd);
      close_fd(lingering_.front().fd);
      lingering_.erase(lingering_.begin());
      lingering_count_.store(lingering_.size(), std::memory_order_relaxed);
      return;
    }
  }
  const auto now = driver::Clock::now();
  auto silent = std::find_if(handshakes_.begin(), handshakes_.end(), [&](const Handshake& h) {
    return h.got == 0 && now - h.since >= std::chrono::seconds(1);
  });
  if (silent != handshakes_.end()) {
    close_fd(silent->fd);
    handshakes_.erase(silent);
  } else if (spare_fd_ >= 0) {
    close_fd(spare_fd_);
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      tune_connection(fd);
      watch_handshake(fd);
    }
    spare_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  }
  const std::int64_t now_ns = base::now_ns();
  if (now_ns - accept_warned_ns_ > 1'000'000'000) {
    accept_warned_ns_ = now_ns;
    PIER_LOG(warn, "tcp", "accept failed: {}; closing silent connections, {}", std::strerror(err),
             spare_fd_ >= 0 ? "a spare descriptor left" : "none spare");
  }
}

void TcpContext::accept_new() noexcept {
  if (!driver::readable_now(listen_fd_)) return;
  if (spare_fd_ < 0) spare_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);  // spent earlier
  for (;;) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      const int err = errno;
      if (err == ECONNABORTED || err == EINTR) continue;
      if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM)
        return accept_starved(err);
      if (err != EAGAIN && err != EWOULDBLOCK)
        PIER_LOG(warn, "tcp", "accept failed: {}", std::strerror(err));
      return;
    }
    if (handshakes_.size() + parked_.size() >= max_handshakes_) {
      // Hellos already sent are read first: those connections leave the
      // queue (handed over or refused), and a real peer is never the one
      // closed to make room.
      handshakes_.erase(std::remove_if(handshakes_.begin(), handshakes_.end(),
                                       [this](Handshake& h) { return !read_hello(h); }),
                        handshakes_.end());
    }
    if (handshakes_.size() + parked_.size() >= max_handshakes_) {
      // A peer writes its hello at once: the oldest connection that sent
      // nothing gives up its place rather than the newcomer, so silent
      // connections cannot shut real peers out for PIER_TCP_PARK_MS.
      // (Failing that, the oldest: a few bytes of a hello that never ends
      // must not hold a place for ever either; a real hello comes whole.)
      auto silent = std::find_if(handshakes_.begin(), handshakes_.end(),
                                 [](const Handshake& h) { return h.got == 0; });
      if (silent == handshakes_.end()) silent = handshakes_.begin();
      if (silent != handshakes_.end()) {
        PIER_LOG(warn, "tcp",
                 "closing a connection that sent no whole hello: {} are waiting "
                 "(PIER_TCP_BACKLOG)",
                 max_handshakes_);
        unwatch(silent->fd);
        close_fd(silent->fd);
        handshakes_.erase(silent);
      }
    }
    if (handshakes_.size() + parked_.size() >= max_handshakes_) {
      PIER_LOG(warn, "tcp", "refusing a connection: {} are already waiting (PIER_TCP_BACKLOG)",
               max_handshakes_);
      ::close(fd);
      continue;
    }
    tune_connection(fd);
    watch_handshake(fd);
  }
}

void TcpContext::watch_handshake(int fd) noexcept {
  ::epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = tag_handshake;
  (void)::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
  handshakes_.push_back(Handshake{fd, 0, {}, driver::Clock::now()});
}

bool TcpContext::read_hello(Handshake& h) noexcept {
  // Exactly the hello's bytes: whatever follows belongs to the instance.
  const ssize_t n = ::recv(h.fd, h.buf.data() + h.got, h.buf.size() - h.got, MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return true;
  if (n <= 0) {
    PIER_LOG(debug, "tcp", "a connection closed before its hello");
    close_fd(h.fd);
    return false;
  }
  h.got += static_cast<std::size_t>(n);
  if (h.got < h.buf.size()) return true;
  unwatch(h.fd);

  const std::span<const std::byte> bytes(h.buf);
  Result<FrameHeader> header = decode_frame_header(bytes.first(frame_header_size));
  Result<Hello> hello = Status::malformed;
  if (header && header->type == frame_local &&
      header->length == hello_frame_size - frame_header_size) {
    LocalParser parser(LocalParser::Role::handshake);
    const Status parsed = parser.feed(bytes.subspan(frame_header_size));
    hello = parsed == Status::ok ? parser.hello() : Result<Hello>(parsed);
  }
  if (!hello) {
    PIER_LOG(warn, "tcp", "refusing a connection: its hello is {}", describe(hello.status()));
    close_fd(h.fd);
    return false;
  }
  if (hello->target_id != id_) {
    PIER_LOG(info, "tcp", "refusing a connection meant for an older context (stale url)");
    close_fd(h.fd);
    return false;
  }
  if (hello->call_back) {
    // The peer waits to accept our connection: report it unless an
    // instance of ours already serves it (it connects by itself).
    close_fd(h.fd);
    const bool served = std::any_of(instances_.begin(), instances_.end(), [&](TcpInstance* i) {
      return i->attached() && i->track() == hello->track && i->remote() == hello->connector_url;
    });
    if (!served && asked_.size() < max_handshakes_ &&
        std::find(asked_.begin(), asked_.end(), hello->connector_url) == asked_.end())
      asked_.push_back(hello->connector_url);
    return false;
  }
  hand_over(h.fd, hello->connector_url, hello->track);
  return false;
}

Status TcpContext::incoming(std::vector<std::byte>& remote_url) {
  if (state_ != State::running)
    return state_ == State::closed ? Status::not_initialized : Status::invalid_argument;
  progress_accepts();
  std::lock_guard lock(mutex_);
  for (Parked& p : parked_) {
    if (p.reported) continue;
    p.reported = true;
    p.since = driver::Clock::now();
    remote_url.assign(p.url.begin(), p.url.end());
    return Status::ok;
  }
  if (asked_.empty()) return Status::in_progress;
  remote_url.assign(asked_.front().begin(), asked_.front().end());
  asked_.erase(asked_.begin());
  return Status::ok;
}

void TcpContext::hand_over(int fd, const UrlBytes& url, driver::Track track) noexcept {
  if (TcpInstance* inst = find_acceptor(url, track)) {
    inst->adopt(fd);
    return;
  }
  parked_.push_back(Parked{fd, url, track, false, driver::Clock::now()});
}

void TcpContext::wait_accepts(driver::Deadline deadline) noexcept {
  if (state_ != State::running) return;
  ::pollfd fds[65];
  nfds_t n = 0;
  {
    std::lock_guard lock(mutex_);
    fds[n++] = ::pollfd{listen_fd_, POLLIN, 0};
    for (const Handshake& h : handshakes_) {
      if (n == 65) break;
      fds[n++] = ::pollfd{h.fd, POLLIN, 0};
    }
  }
  (void)::poll(fds, n, remaining_ms(deadline));
}

Status TcpContext::probe_any(driver::Instance** ready) {
  if (ready == nullptr) return Status::invalid_argument;
  *ready = nullptr;
  if (state_ != State::running)
    return state_ == State::closed ? Status::not_initialized : Status::invalid_argument;
  return probe_once(ready, false, driver::Deadline{});
}

Status TcpContext::wait_any(driver::Instance** ready, driver::Deadline deadline) {
  if (ready == nullptr) return Status::invalid_argument;
  *ready = nullptr;
  if (state_ != State::running)
    return state_ == State::closed ? Status::not_initialized : Status::invalid_argument;
  for (;;) {
    bool lent_only = false;
    const Status s = probe_once(ready, true, deadline, &lent_only);
    if (s != Status::in_progress) return s;
    const auto now = driver::Clock::now();
    if (now >= deadline) return Status::timeout;
    // A socket stays readable while its instance has lent out its buffer
    // (the bytes wait for the release): nap instead of spinning on it.
    if (lent_only)
      std::this_thread::sleep_for(
          std::min<driver::Clock::duration>(std::chrono::microseconds(200), deadline - now));
  }
}

Status TcpContext::cancel_any() {
  if (state_ != State::running)
    return state_ == State::closed ? Status::not_initialized : Status::invalid_argument;
  const std::uint64_t one = 1;
  // eventfd writes are atomic and thread-safe: this is the one context call
  // that may run while wait_any() sleeps in another thread.
  if (::write(cancel_fd_, &one, sizeof one) != sizeof one) return Status::system_error;
  return Status::ok;
}

Status TcpContext::wait_arm(std::vector<::pollfd>& fds) {
  if (state_ != State::running)
    return state_ == State::closed ? Status::not_initialized : Status::invalid_argument;
  // The epoll set holds every socket, the listener and the cancel eventfd,
  // and is itself readable while any of them is: a probe first takes bytes
  // already buffered (the kernel does not report those) and what the
  // sockets hold, and accepts a connection waiting on the listener, which
  // would otherwise keep the set readable for the whole sleep.
  driver::Instance* ready = nullptr;
  const Status s = probe_once(&ready, false, driver::Clock::now(), nullptr);
  if (s == Status::ok) return Status::in_progress;
  if (s != Status::in_progress) return s;
  {
    // A connection whose handshake ended (in that probe, say) waits for
    // incoming() to report it, and no descriptor says so: a caller that may
    // sleep long (an idle core) must not.
    // Only on demand: otherwise nobody calls incoming().
    std::lock_guard lock(mutex_);
    if (on_demand_ && !asked_.empty()) return Status::in_progress;
    if (on_demand_)
      for (const Parked& p : parked_)
        if (!p.reported) return Status::in_progress;
  }
  fds.push_back({epoll_fd_, POLLIN, 0});
  return Status::ok;
}

Status TcpContext::wait_disarm() {
  if (state_ != State::running)
    return state_ == State::closed ? Status::not_initialized : Status::invalid_argument;
  std::uint64_t value = 0;
  (void)::read(cancel_fd_, &value, sizeof value);  // a cancel that ended the sleep
  return Status::ok;
}

Status TcpContext::probe_once(driver::Instance** ready, bool block, driver::Deadline deadline,
                              bool* lent_only) noexcept {
  drain_lingering_now_and_then();
  // Bytes already buffered first: the kernel does not report those.
  {
    std::lock_guard lock(mutex_);
    const std::size_t n = instances_.size();
    for (std::size_t k = 0; k < n; ++k) {
      TcpInstance* inst = instances_[(next_probe_ + k) % n];
      // Bytes a buffer send left queued go on here too: a caller that only
      // probes (the core, for rails it polls through probe_any) would
      // otherwise leave a frame half sent while it waits for the answer.
      // Not from wait_any(): the fault wrapper sends on an instance while
      // another thread waits in its context, so a wait touches only the
      // receive side (a caller probes before it sleeps, which pushes).
      if (!block) inst->push_sends();
      if (inst->track() == driver::Track::small && inst->ready(false)) {
        next_probe_ = (next_probe_ + k + 1) % n;
        *ready = inst;
        return Status::ok;
      }
    }
  }
  ::epoll_event events[32];
  const int timeout = block ? remaining_ms(deadline) : 0;
  const int n = ::epoll_wait(epoll_fd_, events, 32, timeout);
  if (n < 0) return errno == EINTR ? Status::in_progress : Status::system_error;
  bool accepts = false;
  bool canceled = false;
  bool lent = false, partial = false;
  TcpInstance* found = nullptr;
  for (int i = 0; i < n; ++i) {
    const std::uint64_t tag = events[i].data.u64;
    if (tag == tag_cancel) {
      canceled = true;
    } else if (tag == tag_listen || tag == tag_handshake || tag == tag_linger) {
      accepts = true;
    } else if (found == nullptr) {
      // The event was fetched without the lock: its instance may have been
      // destroyed since (on another thread), so it is used only if still
      // listed. One new at the same address gets a harmless extra look.
      auto* inst = static_cast<TcpInstance*>(events[i].data.ptr);
      std::lock_guard lock(mutex_);
      if (std::find(instances_.begin(), instances_.end(), inst) == instances_.end()) continue;
      if (inst->ready(true))
        found = inst;
      else if (inst->lent())
        lent = true;
      else
        partial = true;  // a frame on its way: wait for the rest at once
    }
  }
  if (lent_only) *lent_only = lent && !partial && found == nullptr && !accepts && !canceled;
  if (accepts) progress_accepts();
  if (found != nullptr) {
    *ready = found;
    return Status::ok;
  }
  if (canceled && block) {
    std::uint64_t value = 0;
    (void)::read(cancel_fd_, &value, sizeof value);
    return Status::canceled;
  }
  return Status::in_progress;
}

}  // namespace pier::drivers::tcp
