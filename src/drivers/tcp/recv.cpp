// pier tcp: the receive path. Bytes are read into the instance's buffer
// (one recv often brings several small packets) and copied out to the
// posted packet; the rest of a packet larger than what is buffered is read
// straight into the packet's memory, with the buffer behind it in the same
// readv to catch the next header.
#include "base/log.hpp"
#include "driver/packet.hpp"
#include "drivers/tcp/context.hpp"
#include "drivers/tcp/gather.hpp"
#include "drivers/tcp/instance.hpp"
#include "drivers/tcp/net.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstring>

namespace pier::drivers::tcp {
namespace {

constexpr std::uint32_t max_read_iov = 65;

}  // namespace

Status TcpInstance::recv_post(driver::Packet& pkt) {
  if (!ctx_.running()) return Status::not_initialized;
  switch (state_) {
    case State::idle:
      return Status::invalid_argument;
    case State::broken:
      return Status::broken;
    case State::closed:
      return Status::closed;
    default:
      break;
  }
  // One receive at a time (N7), and none while a buffer is out.
  if (rpkt_ != nullptr || buf_out_) return Status::invalid_argument;
  // Every element reachable and every chunk inside its data (a null base
  // with a length crashed in the copy; a chunk past its data's end spun).
  if (const Status st = driver::validate_post(pkt, max_iov, true); st != Status::ok) return st;
  rpkt_ = &pkt;
  rcap_ = packet_bytes(pkt);
  rfilled_ = 0;
  pkt.length = 0;
  pkt.rdv_len = 0;
  pkt.driver_data[0] = mark_receiving;
  if (state_ == State::connected) {
    // Only what is already buffered (after a receive-any, all of it): the
    // caller polls next, and a read here would mostly find the socket empty.
    drained_ = true;
    progress_recv();
  }
  return pkt.driver_data[0] == mark_done ? static_cast<Status>(pkt.driver_data[1])
                                         : Status::in_progress;
}

Status TcpInstance::recv_poll(driver::Packet& pkt) {
  const bool posted_form =
      pkt.form == driver::Packet::Form::iovec || pkt.form == driver::Packet::Form::data;
  if (!posted_form) return recv_buffer(pkt);
  if (pkt.driver_data[0] == mark_done) return static_cast<Status>(pkt.driver_data[1]);
  if (&pkt != rpkt_ || pkt.driver_data[0] != mark_receiving) return Status::invalid_argument;
  if (state_ == State::connecting || state_ == State::accepting) progress_connect();
  if (state_ == State::connected) {
    tick();
    drained_ = false;
    progress_recv();
  }
  return pkt.driver_data[0] == mark_done ? static_cast<Status>(pkt.driver_data[1])
                                         : Status::in_progress;
}

Status TcpInstance::recv_buffer(driver::Packet& pkt) noexcept {
  if (rpkt_ != nullptr || buf_out_) return Status::invalid_argument;
  if (const Status st = post_state(); st != Status::ok) return st;
  if (state_ == State::connecting || state_ == State::accepting) progress_connect();
  if (state_ == State::connected) {
    tick();
    // The poll that handed out the last packet found the socket empty in
    // its read (it came back short): this one parses only what is
    // buffered, the next one reads. A caller that polls until nothing is
    // left (the core, after each packet) then pays no recv() for EAGAIN
    // before it answers: over loopback that read was the one system call
    // the core's ping-pong made beyond the bare driver's (strace,
    // port_bench --drivers tcp).
    drained_ = skip_read_;
    skip_read_ = false;
    read_short_ = false;
    // Without a posted receive this buffers ahead until a whole frame is in
    // rbuf_ (a small-track packet always fits it).
    progress_recv();
  }
  if (state_ != State::connected) {
    const Status st = post_state();  // ok while the connection is being set up
    return st == Status::ok ? Status::in_progress : st;
  }
  if (!in_frame_ || frame_left_ != frame_len_ || rtail_ - rhead_ < frame_len_)
    return Status::in_progress;  // not all here yet, or larger than the buffer
  pkt.form = driver::Packet::Form::buffer;
  pkt.buf = rbuf_.data() + rhead_;
  pkt.buf_len = frame_len_;
  pkt.length = frame_len_;
  pkt.driver_data[0] = 0;
  buf_out_ = true;
  // Only a read of this poll, and only with a packet out: a short read that
  // ended with part of a frame (or one by ready() before a sleep) says
  // nothing of what came since, and skipping then would cost a pass.
  skip_read_ = read_short_;
  return Status::ok;
}

Status TcpInstance::recv_buf_release(driver::Packet& pkt) {
  if (!buf_out_ || pkt.form != driver::Packet::Form::buffer || pkt.buf != rbuf_.data() + rhead_ ||
      pkt.buf_len != frame_len_)
    return Status::invalid_argument;
  buf_out_ = false;
  rhead_ += frame_len_;
  frame_left_ = 0;
  in_frame_ = false;
  header_first_ = false;
  return Status::ok;
}

Status TcpInstance::recv_wait(driver::Packet& pkt, driver::Deadline deadline) {
  for (;;) {
    const Status s = recv_poll(pkt);
    if (s != Status::in_progress) return s;
    if (driver::Clock::now() >= deadline) return Status::timeout;
    (void)wait_io(POLLIN, deadline);
  }
}

Status TcpInstance::recv_cancel(driver::Packet& pkt) {
  if (pkt.driver_data[0] == mark_done) return static_cast<Status>(pkt.driver_data[1]);
  if (&pkt != rpkt_) return Status::invalid_argument;
  if (in_frame_ && rfilled_ > 0) {
    // Part of a packet already sits in the caller's memory and cannot be
    // given back to the stream: the rest of that packet is dropped.
    discard_left_ = frame_left_;
    in_frame_ = false;
  }
  pkt.driver_data[0] = 0;
  rpkt_ = nullptr;
  return Status::ok;
}

bool TcpInstance::ready(bool read) noexcept {
  if (state_ == State::broken || state_ == State::closed) {
    if (death_reported_) return false;
    death_reported_ = true;
    return true;
  }
  if (state_ != State::connected || buf_out_) return false;
  if (rpkt_ != nullptr) {
    // A receive is already posted: the bytes go to it, and the instance is
    // ready once it has completed (its poll answers at once).
    drained_ = !read;
    progress_recv();
    return rpkt_ == nullptr;
  }
  // Without `read`, only what is already buffered is parsed: a packet read
  // ahead by an earlier receive is ready although the socket is empty.
  drained_ = !read;
  progress_recv();
  if (state_ != State::connected) return ready(false);
  return in_frame_ && rtail_ - rhead_ >= frame_left_;
}

bool TcpInstance::fill(std::size_t limit) noexcept {
  if (drained_) return false;
  if (rhead_ == rtail_) {
    rhead_ = rtail_ = 0;
  } else if (rtail_ == rbuf_.size() && rhead_ > 0) {
    std::memmove(rbuf_.data(), rbuf_.data() + rhead_, rtail_ - rhead_);
    rtail_ -= rhead_;
    rhead_ = 0;
  }
  std::size_t room = rbuf_.size() - rtail_;
  if (room > limit) room = limit;
  if (room == 0) return false;
  for (;;) {
    const ssize_t n = ::recv(fd_, rbuf_.data() + rtail_, room, MSG_DONTWAIT);
    if (n > 0) {
      rtail_ += static_cast<std::size_t>(n);
      // A short read means the socket is empty: no second recv for EAGAIN.
      drained_ = static_cast<std::size_t>(n) < room;
      read_short_ = drained_;
      return true;
    }
    if (n == 0) {
      fail(Status::broken, 0);
      return false;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      drained_ = true;
      return false;
    }
    fail(Status::broken, errno);
    return false;
  }
}

void TcpInstance::progress_recv() noexcept {
  while (state_ == State::connected) {
    const std::size_t avail = rtail_ - rhead_;
    if (discard_left_ > 0) {
      const std::size_t take = avail < discard_left_ ? avail : discard_left_;
      rhead_ += take;
      discard_left_ -= take;
      if (discard_left_ > 0 && !fill()) return;
      continue;
    }
    if (!in_frame_) {
      if (avail < frame_header_size) {
        const bool exact = rpkt_ != nullptr && header_first_;
        if (!fill(exact ? frame_header_size - avail : ~std::size_t{0})) return;
        continue;
      }
      const std::byte* at = rbuf_.data() + rhead_;
      Result<FrameHeader> h = decode_frame_header({at, frame_header_size});
      if (!h || (h->type == frame_data && h->length > recv_max_) ||
          (h->type == frame_local && h->length > max_local_payload)) {
        PIER_LOG(warn, "tcp", "malformed frame from {}: dropping the connection",
                 to_text(decode_url(remote_).value_or(Url{})));
        fail(Status::broken, 0);
        return;
      }
      if (h->type == frame_local) {
        if (avail < frame_header_size + h->length) {
          if (!fill()) return;
          continue;
        }
        const Status local = local_.feed({at + frame_header_size, h->length});
        if (local != Status::ok) {
          PIER_LOG(warn, "tcp", "driver-local packet from {} is {}: dropping the connection",
                   to_text(decode_url(remote_).value_or(Url{})), describe(local));
          fail(Status::broken, 0);
          return;
        }
        rhead_ += frame_header_size + h->length;
        continue;
      }
      in_frame_ = true;
      frame_len_ = frame_left_ = h->length;
      rhead_ += frame_header_size;
    }
    if (rpkt_ == nullptr) {
      // No receive posted: buffer ahead so receive-any can tell the packet
      // is complete; the socket holds the rest (back-pressure to the sender).
      if (rtail_ - rhead_ >= frame_left_ || !fill()) return;
      continue;
    }
    const std::size_t buffered = rtail_ - rhead_;
    const std::size_t take = buffered < frame_left_ ? buffered : frame_left_;
    const std::size_t room = rcap_ - rfilled_;
    const std::size_t copy = take < room ? take : room;
    if (copy > 0) copy_into(*rpkt_, rfilled_, rbuf_.data() + rhead_, copy);
    rfilled_ += copy;
    rhead_ += take;
    frame_left_ -= take;
    if (frame_left_ == 0 || rfilled_ == rcap_) {
      // A packet longer than the receive completes at once as truncated;
      // its rest is discarded from the stream before the next header.
      const bool truncated = frame_len_ > rcap_;
      // A copy of 16 KiB costs more than the extra system call it saves.
      header_first_ = frame_len_ >= 16384;
      discard_left_ = frame_left_;
      in_frame_ = false;
      complete_recv(truncated ? Status::truncated : Status::ok);
      return;
    }
    // Everything buffered is consumed and the packet wants more: read into
    // its memory directly, and into the empty buffer behind it.
    if (drained_) return;
    rhead_ = rtail_ = 0;
    ::iovec iov[max_read_iov];
    std::size_t direct = 0;
    const std::size_t want = frame_left_ < room - copy ? frame_left_ : room - copy;
    std::uint32_t n = gather(*rpkt_, rfilled_, want, iov, max_read_iov - 1, &direct);
    // On a large track only the next header is caught behind the packet, so
    // the next payload also lands straight in its packet (no extra copy).
    const std::size_t spill = track_ == driver::Track::large ? frame_header_size : rbuf_.size();
    iov[n++] = ::iovec{rbuf_.data(), spill};
    const ssize_t r = ::readv(fd_, iov, static_cast<int>(n));
    if (r < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        drained_ = true;
        return;
      }
      fail(Status::broken, errno);
      return;
    }
    if (r == 0) {
      fail(Status::broken, 0);
      return;
    }
    const auto got = static_cast<std::size_t>(r);
    const std::size_t into_pkt = got < direct ? got : direct;
    rfilled_ += into_pkt;
    frame_left_ -= into_pkt;
    rtail_ = got - into_pkt;
    if (got < direct + spill) drained_ = true;
  }
}

}  // namespace pier::drivers::tcp
