// pier tcp: instance life cycle. The side whose url is lexically larger
// connects and sends a hello naming (its url, track); the other side accepts
// and matches the hello to its instance (REFERENCE N14), so two peers that
// connect at once end with exactly one connection per track.
#include "drivers/tcp/instance.hpp"

#include "base/log.hpp"
#include "drivers/tcp/context.hpp"
#include "drivers/tcp/net.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <utility>

namespace pier::drivers::tcp {
namespace {

/// How long disconnect() waits for a buffer send it answered ok to leave.
constexpr auto flush_limit = std::chrono::seconds(2);

int wait_ms(driver::Deadline deadline) noexcept {
  const auto left = deadline - driver::Clock::now();
  if (left <= driver::Clock::duration::zero()) return 0;
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
  // Wake now and then to send keep-alives and notice a dead connect.
  return ms > 100 ? 100 : static_cast<int>(ms);
}

}  // namespace

TcpInstance::TcpInstance(TcpContext& ctx, driver::Track track)
    : ctx_(ctx),
      track_(track),
      slots_(ctx.send_queue_size()),
      rbuf_(ctx.recv_buffer_size(track)),
      recv_max_(track == driver::Track::small ? rbuf_.size() - frame_header_size
                                              : ~std::size_t{0}) {
  // A staged packet fits a small track's receive buffer on either track.
  stage_len_ = ctx.recv_buffer_size(driver::Track::small) - frame_header_size;
  stage_.reset(new std::byte[frame_header_size + stage_len_]);
}

TcpInstance::~TcpInstance() {
  // Packets still queued are not touched: nobody can poll them any more, and
  // their owner may already have let them go. Detached first: from then on
  // no other thread hands this instance a connection or reports it ready.
  ctx_.detach(this);
  release_fd();
  close_call_back();
}

Status TcpInstance::connect_async(std::span<const std::byte> remote_url) {
  if (!ctx_.running()) return Status::not_initialized;
  if (state_ != State::idle) return Status::invalid_argument;
  Result<Url> url = decode_url(remote_url);
  if (!url) return Status::invalid_argument;
  std::copy(remote_url.begin(), remote_url.end(), remote_.begin());
  // The peer's small track takes no more than its url says, whatever ours takes.
  send_max_ = track_ == driver::Track::small ? url->small_limit - frame_header_size : recv_max_;
  const UrlBytes& self = ctx_.url();
  if (remote_ == self) return Status::invalid_argument;  // a context cannot be its own peer
  const bool acceptor = std::lexicographical_compare(remote_.begin(), remote_.end(), self.begin(),
                                                     self.end()) == false;
  // The state is set before attach(): an acceptor may adopt a parked
  // connection inside it.
  state_ = acceptor ? State::accepting : State::connecting;
  const Status claimed = ctx_.attach(this, remote_, track_, acceptor);
  if (claimed != Status::ok) {
    state_ = State::idle;
    return claimed;
  }
  if (acceptor) {
    if (ctx_.on_demand() && state_ == State::accepting) start_call_back(*url);
    call_back_at_ = std::chrono::steady_clock::now();  // eager: the first probe 100 ms on
    return Status::ok;
  }

  const SockAddr addr = to_sockaddr(*url);
  fd_ = ::socket(addr.storage.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd_ < 0) {
    PIER_LOG(error, "tcp", "cannot create a socket: {}", std::strerror(errno));
    state_ = State::idle;
    return Status::system_error;
  }
  tune_connection(fd_);
  hello_ = encode_hello_frame(Hello{track_, url->context_id, self});
  hello_sent_ = 0;
  if (::connect(fd_, addr.get(), addr.length) != 0 && errno != EINPROGRESS) {
    fail(Status::broken, errno);
    return Status::broken;
  }
  // On loopback the kernel completes the handshake inside connect(): send
  // the hello now, so the peer can match it without our further progress.
  progress_connect();
  return state_ == State::broken ? Status::broken : Status::ok;
}

void TcpInstance::close_call_back() noexcept {
  if (call_back_fd_ >= 0) ::close(call_back_fd_);
  call_back_fd_ = -1;
  probing_ = false;
}

void TcpInstance::start_call_back(const Url& url) noexcept {
  call_back_at_ = std::chrono::steady_clock::now();
  const SockAddr addr = to_sockaddr(url);
  call_back_fd_ = ::socket(addr.storage.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (call_back_fd_ < 0) return;  // the peer may still connect by itself
  Hello h{track_, url.context_id, ctx_.url()};
  h.call_back = true;
  hello_ = encode_hello_frame(h);
  hello_sent_ = 0;
  if (::connect(call_back_fd_, addr.get(), addr.length) != 0 && errno != EINPROGRESS) {
    const int err = errno;
    PIER_LOG(debug, "tcp", "cannot ask {} to connect: {}", to_text(url), std::strerror(err));
    ::close(call_back_fd_);
    call_back_fd_ = -1;
    fail(Status::broken, err);
    return;
  }
  progress_call_back();
}

void TcpInstance::start_probe(const Url& url) noexcept {
  // Eager set-up: the peer connects to us and nobody calls it back, so a
  // peer that died before connecting kept us accepting for ever. Its
  // listener refuses a connection once it is gone; a live one takes it and
  // drops it quietly when it closes before any hello.
  call_back_at_ = std::chrono::steady_clock::now();
  const SockAddr addr = to_sockaddr(url);
  call_back_fd_ = ::socket(addr.storage.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (call_back_fd_ < 0) return;
  probing_ = true;
  if (::connect(call_back_fd_, addr.get(), addr.length) != 0 && errno != EINPROGRESS) {
    const int err = errno;
    close_call_back();
    fail(Status::broken, err);
    return;
  }
  progress_call_back();
}

void TcpInstance::progress_call_back() noexcept {
  if (probing_ && call_back_fd_ >= 0) {
    ::pollfd p{call_back_fd_, POLLOUT, 0};
    if (::poll(&p, 1, 0) == 0) return;  // still connecting
    int err = 0;
    socklen_t len = sizeof err;
    if (::getsockopt(call_back_fd_, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = 0;
    close_call_back();
    if (err != 0) fail(Status::broken, err);
    return;
  }
  while (call_back_fd_ >= 0 && hello_sent_ < hello_.size()) {
    const ssize_t n = ::send(call_back_fd_, hello_.data() + hello_sent_,
                             hello_.size() - hello_sent_, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      hello_sent_ += static_cast<std::size_t>(n);
      continue;
    }
    int err = n < 0 ? errno : ECONNRESET;
    if (err == EAGAIN || err == EWOULDBLOCK || err == EINTR || err == ENOTCONN ||
        err == EINPROGRESS) {
      socklen_t len = sizeof err;
      if (::getsockopt(call_back_fd_, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err == 0) return;
    }
    // Refused or reset: the peer is gone, and would never connect to us.
    ::close(call_back_fd_);
    call_back_fd_ = -1;
    fail(Status::broken, err);
    return;
  }
  // Sent: the peer reads it before it sees the close.
  if (call_back_fd_ >= 0) ::close(call_back_fd_);
  call_back_fd_ = -1;
}

void TcpInstance::progress_connect() noexcept {
  if (state_ == State::accepting) {
    if (call_back_fd_ >= 0) {
      progress_call_back();
    } else if (std::chrono::steady_clock::now() - call_back_at_ > std::chrono::milliseconds(100)) {
      if (Result<Url> url = decode_url(remote_)) {
        if (ctx_.on_demand())
          start_call_back(*url);
        else
          start_probe(*url);
      }
    }
    ctx_.progress_accepts();
    return;
  }
  if (state_ != State::connecting) return;
  while (hello_sent_ < hello_.size()) {
    const ssize_t n = ::send(fd_, hello_.data() + hello_sent_, hello_.size() - hello_sent_,
                             MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      hello_sent_ += static_cast<std::size_t>(n);
      continue;
    }
    const int err = errno;
    if (err == EAGAIN || err == EWOULDBLOCK || err == EINTR || err == ENOTCONN ||
        err == EINPROGRESS) {
      int so_error = 0;
      socklen_t len = sizeof so_error;
      if (::getsockopt(fd_, SOL_SOCKET, SO_ERROR, &so_error, &len) == 0 && so_error != 0)
        fail(Status::broken, so_error);
      return;
    }
    fail(Status::broken, err);
    return;
  }
  become_connected();
}

void TcpInstance::adopt(int fd) noexcept {
  // The call-back fd is the owner's: closed by its connect_wait() or
  // destructor, never from the thread that hands connections over.
  fd_ = fd;
  become_connected();
}

void TcpInstance::become_connected() noexcept {
  state_ = State::connected;
  last_check_ = std::chrono::steady_clock::now();
  if (track_ == driver::Track::small) ctx_.watch(fd_, this);
  PIER_LOG(debug, "tcp", "connected to {} ({} track)", to_text(decode_url(remote_).value_or(Url{})),
           track_ == driver::Track::small ? "small" : "large");
}

Status TcpInstance::connect_wait(driver::Deadline deadline) {
  for (;;) {
    switch (state_) {
      case State::idle:
        return Status::invalid_argument;
      case State::connected:
        close_call_back();
        return Status::ok;
      case State::broken:
        return Status::broken;
      case State::closed:
        return Status::closed;
      case State::connecting:
      case State::accepting:
        break;
    }
    progress_connect();
    if (state_ == State::connecting || state_ == State::accepting) {
      if (driver::Clock::now() >= deadline) return Status::timeout;
      (void)wait_io(POLLOUT, deadline);
    }
  }
}

void TcpInstance::release_fd() noexcept {
  if (fd_ < 0) return;
  if (track_ == driver::Track::small && state_ == State::connected) ctx_.unwatch(fd_);
  // close() with input unread resets the connection, and a reset throws
  // away our own queued bytes: packets whose send_post() answered ok would
  // never reach the peer. Read what is there first.
  std::array<std::byte, 16384> sink;
  for (int i = 0; i < 256; ++i)
    if (::recv(fd_, sink.data(), sink.size(), MSG_DONTWAIT) <= 0) break;
  ::close(fd_);
  fd_ = -1;
}

void TcpInstance::flush_staged(driver::Deadline deadline) noexcept {
  bool eof = false;
  while (stage_state_ == Stage::queued && state_ == State::connected) {
    progress_send();
    if (stage_state_ != Stage::queued || state_ != State::connected) return;
    if (driver::Clock::now() >= deadline) {
      PIER_LOG(warn, "tcp", "disconnect: a buffer send answered ok could not leave in time");
      return;
    }
    // Input is read and dropped meanwhile (the close drops it anyway): a
    // peer disconnecting us at the same time waits for room in its own
    // socket, which only our reading makes.
    ::pollfd p{fd_, static_cast<short>(POLLOUT | (eof ? 0 : POLLIN)), 0};
    (void)::poll(&p, 1, wait_ms(deadline));
    if (!eof && (p.revents & POLLIN) != 0) {
      std::array<std::byte, 16384> sink;
      for (int i = 0; i < 16; ++i) {
        const ssize_t n = ::recv(fd_, sink.data(), sink.size(), MSG_DONTWAIT);
        if (n == 0) eof = true;
        if (n <= 0) break;
      }
    }
  }
}

void TcpInstance::fail(Status why, int err) noexcept {
  if (state_ == State::broken || state_ == State::closed) return;
  PIER_LOG(debug, "tcp", "connection to {} lost: {}", to_text(decode_url(remote_).value_or(Url{})),
           err != 0 ? std::strerror(err) : "closed by the peer");
  release_fd();
  state_ = why == Status::closed ? State::closed : State::broken;
  while (send_count_ > 0) {
    complete_send(slots_[send_head_], why);
    send_head_ = (send_head_ + 1) % slots_.size();
    --send_count_;
  }
  if (rpkt_ != nullptr) complete_recv(why);
}

Status TcpInstance::disconnect() {
  if (state_ == State::idle) return Status::invalid_argument;
  if (state_ == State::closed) return Status::ok;
  close_call_back();
  // Our FIN follows what is queued: the peer drains it, then sees closed.
  // A buffer send already answered ok goes first (it was promised), and the
  // socket then lingers half closed until the peer's end of file.
  // The descriptor leaves the instance here, not through a flag that
  // another thread's receive-any (failing this instance under the
  // context's lock) could act on.
  if (state_ == State::connected && fd_ >= 0) {
    flush_staged(driver::Clock::now() + flush_limit);
    if (fd_ >= 0 && state_ == State::connected) {
      (void)::shutdown(fd_, SHUT_WR);
      if (track_ == driver::Track::small) ctx_.unwatch(fd_);
      ctx_.linger(std::exchange(fd_, -1));
    }
  }
  if (state_ != State::broken) {
    fail(Status::closed, 0);
  } else {
    release_fd();
    state_ = State::closed;
  }
  return Status::ok;
}

Status TcpInstance::wait_io(short events, driver::Deadline deadline) noexcept {
  if (state_ == State::accepting) {
    ctx_.wait_accepts(std::min(deadline, driver::Clock::now() + std::chrono::milliseconds(100)));
    return Status::ok;
  }
  if (fd_ < 0) return Status::ok;
  ::pollfd p{fd_, events, 0};
  if (state_ == State::connecting) p.events = POLLOUT;
  // A receive waiting while our frames are still queued wakes when the
  // socket takes more of them too (else they moved one socket buffer per
  // 100 ms wake-up).
  if (state_ == State::connected && send_count_ != 0) p.events |= POLLOUT;
  (void)::poll(&p, 1, wait_ms(deadline));
  return Status::ok;
}

void TcpInstance::tick() noexcept {
  // What the socket did not take yet goes on with every poll: a buffer
  // send answers ok at once, and a caller that then only receives (waiting
  // for the answer) would leave the rest of the frame unsent for ever.
  push_sends();
  // The clock is read once every 256 polls, so an idle-but-polled
  // connection sends a keep-alive and a dead host is noticed through
  // TCP_USER_TIMEOUT even when the caller has nothing to send.
  if ((++ticks_ & 255) != 0 || state_ != State::connected || ctx_.keepalive_ms() == 0) return;
  const auto now = std::chrono::steady_clock::now();
  if (now - last_check_ < std::chrono::milliseconds(ctx_.keepalive_ms())) return;
  if (frames_sent_ == frames_at_check_ && send_count_ == 0) (void)push_keepalive();
  frames_at_check_ = frames_sent_;
  last_check_ = now;
}

// --- packet completion marks, kept in Packet::driver_data ---------------

void TcpInstance::complete_send(SendSlot& slot, Status s) noexcept {
  if (slot.pkt == nullptr) {
    if (slot.frame == stage_.get()) stage_state_ = Stage::free;
    return;
  }
  slot.pkt->length = s == Status::ok ? slot.total - frame_header_size : 0;
  slot.pkt->driver_data[0] = mark_done;
  slot.pkt->driver_data[1] = static_cast<std::uintptr_t>(s);
  slot.pkt = nullptr;
}

void TcpInstance::complete_recv(Status s) noexcept {
  rpkt_->length = rfilled_;
  rpkt_->driver_data[0] = mark_done;
  rpkt_->driver_data[1] = static_cast<std::uintptr_t>(s);
  rpkt_ = nullptr;
}

}  // namespace pier::drivers::tcp
