// pier tcp: the send path. A post writes header and payload with one
// sendmsg straight from the caller's memory (a lone frame of at most 1 KiB
// is copied into one piece and written with send()); what the socket cannot
// take stays in a fixed ring and is continued from poll. Several queued
// packets are written with one sendmsg when the socket has room.
#include "driver/packet.hpp"
#include "drivers/tcp/context.hpp"
#include "drivers/tcp/gather.hpp"
#include "drivers/tcp/instance.hpp"
#include "drivers/tcp/net.hpp"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>

namespace pier::drivers::tcp {
namespace {

constexpr std::uint32_t max_write_iov = 128;
/// A lone frame up to this size is copied into one piece and written with
/// send(): over loopback, sendmsg() of the header and payload as two pieces
/// cost 150-200 ns more per 8-byte packet (tcp_bench, side by side), far
/// more than the copy.
constexpr std::size_t flat_send_max = 1024;

Status closed_status(bool broken) noexcept {
  return broken ? Status::broken : Status::closed;
}

}  // namespace

Status TcpInstance::post_state() const noexcept {
  if (!ctx_.running()) return Status::not_initialized;
  switch (state_) {
    case State::idle:
      return Status::invalid_argument;
    case State::broken:
    case State::closed:
      return closed_status(state_ == State::broken);
    default:
      return Status::ok;
  }
}

Status TcpInstance::send_buf_get(driver::Packet& pkt) {
  if (const Status st = post_state(); st != Status::ok) return st;
  if (sends_ended_) return Status::broken;
  if (stage_state_ == Stage::lent) return Status::invalid_argument;  // one at a time
  if (stage_state_ == Stage::queued && state_ == State::connected) progress_send();
  if (stage_state_ != Stage::free) return Status::no_resource;
  if (send_count_ == slots_.size()) return Status::no_resource;
  stage_state_ = Stage::lent;
  pkt.form = driver::Packet::Form::buffer;
  pkt.buf = stage_.get() + frame_header_size;
  pkt.buf_len = std::min(stage_len_, send_max_);
  pkt.driver_data[0] = 0;
  return Status::ok;
}

Status TcpInstance::send_buf_post(driver::Packet& pkt, std::size_t len) {
  if (stage_state_ != Stage::lent || pkt.form != driver::Packet::Form::buffer ||
      pkt.buf != stage_.get() + frame_header_size || len > std::min(stage_len_, send_max_))
    return Status::invalid_argument;
  if (const Status st = post_state(); st != Status::ok || sends_ended_) {
    stage_state_ = Stage::free;
    return st != Status::ok ? st : Status::broken;
  }
  // send_buf_get() kept a slot free and nothing else posts meanwhile (one
  // caller per instance).
  SendSlot& slot = slots_[(send_head_ + send_count_) % slots_.size()];
  slot.pkt = nullptr;
  slot.frame = stage_.get();
  slot.total = frame_header_size + len;
  slot.sent = 0;
  encode_frame_header(slot.header, FrameHeader{frame_data, len});
  std::copy(slot.header.begin(), slot.header.end(), stage_.get());
  stage_state_ = Stage::queued;
  ++send_count_;
  if (state_ == State::connected && send_count_ == 1) progress_send();
  // The bytes are the driver's now: the packet is done, whatever the socket
  // has taken so far (the next send_buf_get() waits for the rest).
  pkt.length = len;
  pkt.driver_data[0] = mark_done;
  pkt.driver_data[1] = static_cast<std::uintptr_t>(Status::ok);
  return Status::ok;
}

Status TcpInstance::send_post(driver::Packet& pkt) {
  if (const Status st = post_state(); st != Status::ok) return st;
  if (sends_ended_) return Status::broken;
  if (stage_state_ == Stage::lent) return Status::invalid_argument;         // post the buffer first
  if (pkt.driver_data[0] == mark_sending) return Status::invalid_argument;  // still queued
  // Every element reachable and every chunk inside its data (a null base
  // with a length crashed in the copy; a chunk past its data's end spun).
  if (const Status st = driver::validate_post(pkt, max_iov, true); st != Status::ok) return st;
  const std::size_t len = packet_bytes(pkt);
  if (len > send_max_) return Status::invalid_argument;
  if (send_count_ == slots_.size()) return Status::no_resource;

  SendSlot& slot = slots_[(send_head_ + send_count_) % slots_.size()];
  slot.pkt = &pkt;
  slot.frame = nullptr;
  slot.total = frame_header_size + len;
  slot.sent = 0;
  encode_frame_header(slot.header, FrameHeader{frame_data, len});
  pkt.driver_data[0] = mark_sending;
  pkt.length = 0;
  ++send_count_;
  if (state_ == State::connected && send_count_ == 1) progress_send();
  return pkt.driver_data[0] == mark_done ? static_cast<Status>(pkt.driver_data[1])
                                         : Status::in_progress;
}

void TcpInstance::send_failed(int err) noexcept {
  if (err != EPIPE && err != ECONNRESET) return fail(Status::broken, err);
  // The peer closed (a reset came back for what we sent after its close),
  // but what it sent before may still sit unread in our socket: the sends
  // end, the receives go on until the input ends (end of file or the
  // reset's error), and only then does the instance break. Failing it now
  // threw that input away with the socket.
  if (sends_ended_) return;
  sends_ended_ = true;
  while (send_count_ > 0) {
    complete_send(slots_[send_head_], Status::broken);
    send_head_ = (send_head_ + 1) % slots_.size();
    --send_count_;
  }
}

bool TcpInstance::push_keepalive() noexcept {
  if (sends_ended_) return false;
  // A lent staging buffer owns the last free slot.
  if (send_count_ + (stage_state_ == Stage::lent ? 1 : 0) >= slots_.size()) return false;
  SendSlot& slot = slots_[(send_head_ + send_count_) % slots_.size()];
  slot.pkt = nullptr;
  slot.frame = keepalive_.data();
  slot.total = keepalive_frame_size;
  slot.sent = 0;
  std::copy(keepalive_.begin(), keepalive_.begin() + frame_header_size, slot.header.begin());
  ++send_count_;
  progress_send();
  return true;
}

bool TcpInstance::send_flat() noexcept {
  SendSlot& slot = slots_[send_head_];
  if (slot.sent != 0 || slot.total > flat_send_max) return false;
  std::array<std::byte, flat_send_max> flat;
  const std::byte* from = slot.frame;  // a driver frame holds its header
  if (slot.pkt != nullptr) {
    std::copy(slot.header.begin(), slot.header.end(), flat.begin());
    (void)driver::copy_from_packet(
        *slot.pkt, 0, {flat.data() + frame_header_size, slot.total - frame_header_size});
    from = flat.data();
  }
  const ssize_t w = ::send(fd_, from, slot.total, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (w < 0) {
    const int err = errno;
    if (err == EINTR) return false;  // the general path tries again
    if (status_of_errno(err) != Status::in_progress && err != ENOBUFS) send_failed(err);
    return true;
  }
  slot.sent = static_cast<std::size_t>(w);
  if (slot.sent < slot.total) return true;  // poll continues from `sent`
  complete_send(slot, Status::ok);
  ++frames_sent_;
  send_head_ = (send_head_ + 1) % slots_.size();
  --send_count_;
  return true;
}

void TcpInstance::progress_send() noexcept {
  if (sends_ended_) return;
  if (send_count_ == 1 && state_ == State::connected && send_flat()) return;
  while (send_count_ > 0 && state_ == State::connected) {
    ::iovec iov[max_write_iov];
    std::uint32_t n = 0;
    std::size_t want = 0;
    for (std::size_t k = 0; k < send_count_ && n < max_write_iov; ++k) {
      SendSlot& slot = slots_[(send_head_ + k) % slots_.size()];
      std::size_t at = slot.sent;
      if (at < frame_header_size) {
        iov[n++] = ::iovec{slot.header.data() + at, frame_header_size - at};
        want += frame_header_size - at;
        at = frame_header_size;
      }
      if (at == slot.total) continue;
      std::size_t got = 0;
      if (slot.pkt != nullptr) {
        n += gather(*slot.pkt, at - frame_header_size, slot.total - at, iov + n, max_write_iov - n,
                    &got);
      } else if (n < max_write_iov) {
        got = slot.total - at;
        iov[n++] = ::iovec{const_cast<std::byte*>(slot.frame) + at, got};
      }
      want += got;
      if (at + got < slot.total) break;  // out of entries: the rest goes next round
    }
    ::msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = n;
    const ssize_t w = ::sendmsg(fd_, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0) {
      const int err = errno;
      if (err == EINTR) continue;
      if (status_of_errno(err) == Status::in_progress || err == ENOBUFS) return;
      send_failed(err);
      return;
    }
    auto left = static_cast<std::size_t>(w);
    while (left > 0 && send_count_ > 0) {
      SendSlot& slot = slots_[send_head_];
      const std::size_t take = std::min(left, slot.total - slot.sent);
      slot.sent += take;
      left -= take;
      if (slot.sent < slot.total) break;
      complete_send(slot, Status::ok);
      ++frames_sent_;
      send_head_ = (send_head_ + 1) % slots_.size();
      --send_count_;
    }
    if (static_cast<std::size_t>(w) < want) return;  // the socket is full
  }
}

Status TcpInstance::send_poll(driver::Packet& pkt) {
  if (pkt.driver_data[0] == mark_done) return static_cast<Status>(pkt.driver_data[1]);
  if (pkt.driver_data[0] != mark_sending) return Status::invalid_argument;
  if (state_ == State::connecting || state_ == State::accepting) progress_connect();
  if (state_ == State::connected) {
    tick();
    progress_send();
  }
  return pkt.driver_data[0] == mark_done ? static_cast<Status>(pkt.driver_data[1])
                                         : Status::in_progress;
}

Status TcpInstance::send_wait(driver::Packet& pkt, driver::Deadline deadline) {
  for (;;) {
    const Status s = send_poll(pkt);
    if (s != Status::in_progress) return s;
    if (driver::Clock::now() >= deadline) return Status::timeout;
    (void)wait_io(POLLOUT, deadline);
  }
}

}  // namespace pier::drivers::tcp
