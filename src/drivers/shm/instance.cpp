// shm: instance life cycle: connection set-up, the socket, peer death.
#include "drivers/shm/instance.hpp"

#include "drivers/shm/context.hpp"
#include "drivers/shm/wake.hpp"

#include "base/log.hpp"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <ctime>
#include <string>

namespace pier::drivers::shm {

namespace {
/// How long ending a receive waits for a peer's copy into it (a few GiB
/// at the slowest single copy measured here, 2 GB/s).
constexpr auto settle_limit = std::chrono::seconds(10);
}  // namespace

ShmInstance::ShmInstance(ShmContext& ctx, driver::Track track) noexcept
    : ctx_(&ctx),
      track_(track),
      spin_ns_(ctx.settings().spin_ns),
      peer_check_ns_(ctx.settings().peer_check_ns) {}

ShmInstance::~ShmInstance() {
  if (ctx_ != nullptr) settle_posted(driver::Clock::now() + settle_limit);
  if (buf_out_ || posted_ != nullptr || send_head_ != nullptr)
    PIER_LOG(debug, "shm", "instance destroyed with packets pending");
  if (ctx_ != nullptr) ctx_->forget(this);
}

void ShmInstance::orphan() noexcept {
  fail(Status::not_initialized);
  phase_ = Phase::closed;
  fail_ = Status::not_initialized;
  ctx_ = nullptr;
}

bool ShmInstance::connected_to(std::span<const std::byte> url, driver::Track track) const noexcept {
  return track == track_ && !remote_url_.empty() &&
         std::equal(url.begin(), url.end(), remote_url_.begin(), remote_url_.end());
}

Status ShmInstance::connect_async(std::span<const std::byte> remote_url) {
  if (ctx_ == nullptr || !ctx_->ready()) return Status::not_initialized;
  if (phase_ != Phase::unconnected) return Status::invalid_argument;
  Result<Url> url = decode_url(remote_url);
  if (!url) return Status::invalid_argument;
  if (url->boot_id != ctx_->url().boot_id) {
    PIER_LOG(debug, "shm", "url of pid {} comes from another host or boot", url->pid);
    return Status::rejected;
  }
  const std::span<const std::byte> own = ctx_->url_bytes();
  if (std::equal(own.begin(), own.end(), remote_url.begin(), remote_url.end()))
    return Status::invalid_argument;  // a pair needs two contexts
  if (ctx_->taken(remote_url, track_, this)) return Status::in_use;
  remote_url_.assign(remote_url.begin(), remote_url.end());
  remote_ = *url;
  // Both ends order the two urls the same way, so exactly one connects.
  connector_ =
      std::lexicographical_compare(own.begin(), own.end(), remote_url.begin(), remote_url.end());
  if (connector_) {
    const Status st = start_connector();
    return st == Status::ok ? Status::in_progress : st;
  }
  phase_ = Phase::accepting;
  call_back_at_ = driver::Clock::now();  // eager: the first probe_peer() 100 ms from now
  ctx_->progress_accept();
  call_back_due_ = ctx_->settings().on_demand && phase_ == Phase::accepting;
  call_back();
  return Status::in_progress;
}

void ShmInstance::call_back() noexcept {
  if (!call_back_due_) return;
  Result<Fd> sock = seqpacket_socket();
  if (!sock) return;
  call_back_at_ = driver::Clock::now();
  const Status st = connect_abstract(sock->get(), socket_name(remote_.pid, remote_.nonce));
  if (st == Status::no_resource) return;  // backlog full: connect_wait retries
  call_back_due_ = false;
  if (st != Status::ok || !same_user(sock->get())) {
    fail(Status::broken);  // the peer is gone (or not ours): it would never connect to us
    return;
  }
  Hello hello;
  hello.track = track_;
  hello.call_back = true;
  std::copy(ctx_->url_bytes().begin(), ctx_->url_bytes().end(), hello.url.begin());
  // Read by the peer before it sees our end close; a full socket buffer
  // on a fresh connection cannot happen.
  (void)send_message(sock->get(), encode_hello(hello));
}

void ShmInstance::probe_peer() noexcept {
  // Eager set-up: the peer connects to us and nobody calls it back, so a
  // peer that died before connecting kept us accepting for ever. Its socket
  // name is unbound once it is gone; a connection closed at once, before
  // any hello, is dropped by a live peer without a word.
  call_back_at_ = driver::Clock::now();
  Result<Fd> sock = seqpacket_socket();
  if (!sock) return;
  const Status st = connect_abstract(sock->get(), socket_name(remote_.pid, remote_.nonce));
  if (st == Status::broken) fail(Status::broken);
}

Status ShmInstance::start_connector() noexcept {
  const Settings& s = ctx_->settings();
  SegmentHeader h;
  h.ring_lines = s.ring_lines;
  h.max_packet = s.max_packet;
  h.key = random_u64();
  h.size = segment_size(s.ring_lines);
  Result<Segment> seg = create_segment(h.size);
  if (!seg) {
    fail(seg.status());
    return seg.status();
  }
  write_header(seg->map.data(), h);
  layout_ = h;
  seg_ = std::move(seg->map);
  segment_fd_ = std::move(seg->fd);
  Result<Fd> sock = seqpacket_socket();
  if (!sock) {
    fail(sock.status());
    return sock.status();
  }
  sock_ = std::move(*sock);
  phase_ = Phase::connecting;
  return send_hello();
}

Status ShmInstance::send_hello() noexcept {
  const Status st = connect_abstract(sock_.get(), socket_name(remote_.pid, remote_.nonce));
  if (st == Status::no_resource) return Status::ok;  // backlog full: connect_wait retries
  if (st != Status::ok || !same_user(sock_.get())) {
    fail(Status::broken);
    return Status::broken;
  }
  probe_single_copy();
  Hello hello;
  hello.track = track_;
  std::copy(ctx_->url_bytes().begin(), ctx_->url_bytes().end(), hello.url.begin());
  hello.ring_lines = ctx_->settings().ring_lines;
  hello.max_packet = ctx_->settings().max_packet;
  hello.segment_size = seg_.size();
  const Status sent = send_message(sock_.get(), encode_hello(hello), segment_fd_.get());
  if (sent == Status::no_resource) return Status::ok;
  if (sent != Status::ok) {
    fail(Status::broken);
    return Status::broken;
  }
  // The acceptor now holds the memfd; ours can go. The memfd never had a
  // name, so nothing is left anywhere once both ends unmap.
  segment_fd_.reset();
  hello_sent_ = true;
  reply_pending_ = true;
  max_packet_ = std::min(ctx_->settings().max_packet, remote_.max_packet);
  attach_rings(true, layout_);
  phase_ = Phase::connected;
  return Status::ok;
}

void ShmInstance::probe_single_copy() noexcept {
  Result<pid_t> pid = peer_pid(sock_.get());
  peer_pid_ = pid ? *pid : 0;
  cma_ok_ = false;
  if (!ctx_->settings().cma) return;
  std::string why;
  if (peer_pid_ == 0) {
    why = "no peer credentials on the socket";
  } else if (static_cast<std::uint32_t>(peer_pid_) != remote_.pid) {
    // Different pid namespaces make the url's pid differ from the
    // credentials; single copy is then off, the cells still work.
    why = "the peer's pid differs from its url (another pid namespace?)";
  } else {
    why = probe_cma(peer_pid_, remote_.probe_addr, remote_.probe_value);
  }
  cma_ok_ = why.empty();
  if (!cma_ok_)
    ctx_->note_degraded("single copy with pid " + std::to_string(remote_.pid) + " refused (" + why +
                        "); large packets are copied through the cells");
}

void ShmInstance::attach_rings(bool connector, const SegmentHeader& h) noexcept {
  // `h` is what we wrote (connector) or checked (acceptor): the segment's
  // own header is shared with the peer, who may rewrite it at any time.
  RingView v[2];
  for (int d = 0; d < 2; ++d) {
    v[d].cells =
        seg_.data() + rings_offset + static_cast<std::size_t>(d) * h.ring_lines * line_size;
    v[d].ctl = seg_.data() + ctl_offset[d];
    v[d].lines = h.ring_lines;
    v[d].key = h.key;
  }
  // Ring 0 flows connector -> acceptor, ring 1 the other way. Our stores
  // need a locked instruction only when this process could not register for
  // the peer's heavy fence (wake.hpp).
  const bool strong = !ctx_->light_publisher();
  tx_.attach(v[connector ? 0 : 1], strong);
  rx_.attach(v[connector ? 1 : 0], strong);
}

void ShmInstance::adopt(Fd sock, const Hello& hello, Fd segment) noexcept {
  sock_ = std::move(sock);
  const auto reject = [&](const char* why) {
    PIER_LOG(warn, "shm", "rejecting connection from pid {}: {}", remote_.pid, why);
    (void)send_message(sock_.get(), encode_reply(Reply{Answer::rejected}));
    fail(Status::broken);
  };
  if (hello.ring_lines < min_ring_lines || hello.ring_lines > max_ring_lines ||
      !std::has_single_bit(hello.ring_lines))
    return reject("bad ring geometry");
  if (hello.ring_lines > accepted_ring_lines(ctx_->settings().ring_lines)) {
    PIER_LOG(warn, "shm", "pid {} asks for rings of {} lines; at most {} are accepted here",
             remote_.pid, hello.ring_lines, accepted_ring_lines(ctx_->settings().ring_lines));
    return reject("ring too large (PIER_SHM_RING_SIZE differs too much between the processes)");
  }
  if (hello.max_packet == 0 || hello.max_packet > payload_in(hello.ring_lines / 4))
    return reject("bad max packet");
  if (hello.segment_size != segment_size(hello.ring_lines)) return reject("bad segment size");
  Result<Mapping> map = map_segment(segment.get(), hello.segment_size);
  if (!map) return reject("cannot map the segment");
  seg_ = std::move(*map);
  SegmentHeader h;
  if (!read_header(seg_.data(), h) || h.ring_lines != hello.ring_lines ||
      h.max_packet != hello.max_packet || h.size != hello.segment_size)
    return reject("segment header does not match the hello");
  probe_single_copy();
  if (send_message(sock_.get(), encode_reply(Reply{Answer::accepted})) != Status::ok) {
    fail(Status::broken);
    return;
  }
  // The rings take the connector's largest packet; each side sends no more
  // than the smaller of the two sides' own, so neither gets a packet larger
  // than its PIER_SHM_MAX_PACKET (its caps) says.
  max_packet_ = std::min({hello.max_packet, ctx_->settings().max_packet, remote_.max_packet});
  attach_rings(false, h);
  phase_ = Phase::connected;
  PIER_LOG(debug, "shm", "connected to pid {} (track {}, single copy {})", peer_pid_,
           static_cast<int>(track_), cma_ok_);
}

Status ShmInstance::connect_wait(driver::Deadline deadline) {
  for (;;) {
    switch (phase_.load()) {
      case Phase::connected:
        return Status::ok;
      case Phase::failed:
      case Phase::closed:
        return fail_;
      case Phase::unconnected:
        return Status::invalid_argument;
      case Phase::connecting: {
        const Status st = send_hello();
        if (st != Status::ok) return st;
        if (phase_ == Phase::connected) return Status::ok;
        break;
      }
      case Phase::accepting:
        if (ctx_->settings().on_demand && !call_back_due_ &&
            driver::Clock::now() - call_back_at_ > std::chrono::milliseconds(100))
          call_back_due_ = true;
        call_back();
        ctx_->progress_accept();
        if (phase_ == Phase::accepting && !ctx_->settings().on_demand &&
            driver::Clock::now() - call_back_at_ > std::chrono::milliseconds(100))
          probe_peer();
        if (phase_ != Phase::accepting) continue;
        break;
    }
    if (driver::Clock::now() >= deadline) return Status::timeout;
    if (phase_ == Phase::accepting) {
      ctx_->wait_accept(std::min(deadline, driver::Clock::now() + std::chrono::milliseconds(100)));
    } else {
      ::timespec ts{0, 1000000};  // the peer's backlog was full: retry soon
      ::nanosleep(&ts, nullptr);
    }
  }
}

Status ShmInstance::disconnect() {
  if (phase_ == Phase::unconnected) return Status::invalid_argument;
  if (phase_ == Phase::closed) return Status::ok;
  // A receive the peer is copying into ends only once the copy did.
  settle_posted(driver::Clock::now() + settle_limit);
  fail(Status::closed);
  phase_ = Phase::closed;
  fail_ = Status::closed;
  // Closing our end is what the peer sees as EOF: it drains its ring and
  // then reports broken. A peer asleep on a futex looks at its socket as
  // soon as it wakes.
  ctx_->close_socket(sock_);
  if (tx_.attached()) wake(tx_.futex_word(ctl_reader_sleepers), sleeper_futex);
  if (rx_.attached()) wake(rx_.futex_word(ctl_writer_sleepers), sleeper_futex);
  return Status::ok;
}

void ShmInstance::fail(Status why) noexcept {
  if (phase_ == Phase::failed || phase_ == Phase::closed) return;
  if (why != Status::closed)
    PIER_LOG(debug, "shm", "peer pid {} lost: {}", remote_.pid, to_string(why));
  phase_ = Phase::failed;
  fail_ = why;
  buf_reserved_ = false;
  while (send_head_ != nullptr) {
    driver::Packet* p = send_head_;
    send_head_ = reinterpret_cast<driver::Packet*>(p->driver_data[1]);
    complete_send(*p, why);
  }
  send_tail_ = nullptr;
}

Status ShmInstance::usable() noexcept {
  absorb_gone();
  switch (phase_.load()) {
    case Phase::connected:
      return Status::ok;
    case Phase::failed:
    case Phase::closed:
      return fail_;
    case Phase::unconnected:
      return Status::invalid_argument;
    case Phase::accepting:
      ctx_->progress_accept();
      return phase_ == Phase::connected ? Status::ok : Status::no_resource;
    case Phase::connecting:
      (void)send_hello();
      return phase_ == Phase::connected ? Status::ok : Status::no_resource;
  }
  return Status::internal;
}

void ShmInstance::check_peer() noexcept {
  const std::int64_t now =
      std::chrono::duration_cast<std::chrono::nanoseconds>(driver::Clock::now().time_since_epoch())
          .count();
  if (!reply_pending_.load(std::memory_order_relaxed) && now - checked_ns_ < peer_check_ns_) return;
  checked_ns_ = now;
  drain_socket();
  absorb_gone();
}

bool ShmInstance::peer_present() noexcept {
  // process_vm_* name the peer by pid, and a dead peer's pid may be
  // another process's once it is reaped. The peer's end of our socket
  // closes before that can happen: a socket without EOF proves the pid is
  // still the peer's. One recvmsg, next to a copy of at least CMA_MIN bytes.
  drain_socket();
  absorb_gone();
  return phase_ == Phase::connected;
}

void ShmInstance::drain_socket() noexcept {
  if (!sock_.valid() || peer_gone_.load(std::memory_order_relaxed)) return;
  for (int i = 0; i < 256; ++i) {
    std::array<std::byte, control_prefix + 16> buf{};
    Result<Received> r = recv_message(sock_.get(), buf);
    if (r && r->none) return;
    if (!r || r->eof) {
      peer_gone_.store(true, std::memory_order_relaxed);
      return;
    }
    Result<Control> msg = decode_control(std::span<const std::byte>(buf.data(), r->len));
    if (msg && msg->type == LocalType::wake) continue;
    if (msg && msg->type == LocalType::reply && reply_pending_.load()) {
      Result<Reply> reply = decode_reply(msg->body);
      if (reply && reply->answer == Answer::accepted) {
        reply_pending_.store(false);
        continue;
      }
      PIER_LOG(warn, "shm", "pid {} refused the connection ({})", remote_.pid,
               reply && reply->answer == Answer::in_use ? "already connected" : "rejected");
    } else {
      PIER_LOG(warn, "shm", "malformed message from pid {} on the control socket", remote_.pid);
    }
    peer_gone_.store(true, std::memory_order_relaxed);
    return;
  }
}

void ShmInstance::wake(std::uint32_t* futex, std::uint64_t sleepers) noexcept {
  if ((sleepers & (sleeper_socket - 1)) != 0) {
    std::atomic_ref<std::uint32_t>(*futex).fetch_add(1, std::memory_order_release);
    futex_wake_all(futex);
  }
  if (sleepers >= sleeper_socket && sock_.valid()) {
    static const std::array<std::byte, control_prefix> msg = encode_wake();
    (void)send_message(sock_.get(), msg);
  }
}

bool ShmInstance::watch() noexcept {
  if (phase_ != Phase::connected) return false;
  rx_.ctl_word(ctl_reader_sleepers).fetch_add(sleeper_socket, std::memory_order_seq_cst);
  ++watching_;
  return true;
}

void ShmInstance::unwatch() noexcept {
  // Only what this very instance raised: a new instance may live at the
  // address of one destroyed while wait_any() slept.
  if (watching_ == 0) return;
  --watching_;
  rx_.ctl_word(ctl_reader_sleepers).fetch_sub(sleeper_socket, std::memory_order_seq_cst);
}

void ShmInstance::sleep(bool writer, driver::Deadline deadline) noexcept {
  if (phase_ != Phase::connected || !sock_.valid() || peer_gone()) return;
  std::atomic_ref<std::uint64_t> sleepers =
      writer ? tx_.ctl_word(ctl_writer_sleepers) : rx_.ctl_word(ctl_reader_sleepers);
  std::uint32_t* futex =
      writer ? tx_.futex_word(ctl_writer_sleepers) : rx_.futex_word(ctl_reader_sleepers);
  // Dekker with RingWriter::publish / RingReader::consume: raise the flag,
  // fence, then look again; the other side stores, then reads the flag. The
  // futex word is read before the last look, so a wake-up between the look
  // and the sleep makes futex_wait return at once.
  sleepers.fetch_add(sleeper_futex, std::memory_order_seq_cst);
  const std::uint32_t seq = std::atomic_ref<std::uint32_t>(*futex).load(std::memory_order_acquire);
  (void)heavy_fence();
  bool news = false;
  if (writer) {
    news = send_news();
  } else {
    Record r;
    news = rx_.peek(r) != 0;
  }
  if (!news) {
    // A SIGKILLed peer wakes nobody: sleep at most one liveness period, then
    // look at the socket (EOF) below.
    const auto now = driver::Clock::now();
    auto left = deadline > now ? deadline - now : driver::Clock::duration::zero();
    left = std::min<driver::Clock::duration>(left, liveness_period);
    futex_wait(futex, seq, std::chrono::duration_cast<std::chrono::nanoseconds>(left));
  }
  sleepers.fetch_sub(sleeper_futex, std::memory_order_seq_cst);
  drain_socket();
  absorb_gone();
}

bool ShmInstance::spin_expired(std::int64_t& start_ns) const noexcept {
  const std::int64_t now =
      std::chrono::duration_cast<std::chrono::nanoseconds>(driver::Clock::now().time_since_epoch())
          .count();
  if (start_ns == 0) start_ns = now;
  return now - start_ns >= spin_ns_;
}

bool ShmInstance::has_news() noexcept {
  const Phase phase = phase_.load();
  if (phase != Phase::connected && phase != Phase::failed) return false;
  if (buf_out_ || posted_ != nullptr) return false;
  if (!rx_.attached()) {
    // Failed before its rings were set up: its ring has no memory to read.
    if (phase != Phase::failed || death_reported_) return false;
    death_reported_ = true;
    return true;
  }
  Record r;
  int got = rx_.peek(r);
  // A skip record is followed by a real one at the ring's start; look past
  // it without consuming (consuming is the instance's own business).
  if (got > 0 && r.kind == Kind::skip) got = rx_.peek_at(rx_.head() + r.lines, r);
  if (got != 0) return true;  // a packet, or nonsense the receive will report
  if (phase == Phase::failed || peer_gone()) {
    if (death_reported_) return false;
    death_reported_ = true;
    return true;
  }
  if ((++any_polls_ & 1023u) == 0) drain_socket();
  return false;
}

}  // namespace pier::drivers::shm
