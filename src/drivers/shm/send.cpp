// shm: the send side. Small-track packets are copied into the ring at post
// time (or built in place by send_buf_get/post) and complete at once; large-
// track packets go through a FIFO so single copies and pipelined copies keep
// their order.
#include "drivers/shm/context.hpp"
#include "drivers/shm/instance.hpp"

#include "driver/packet.hpp"

#include "base/log.hpp"

#include <algorithm>

namespace pier::drivers::shm {

namespace {

// Packet::driver_data on the send side: [0] state, [1] next in the FIFO,
// [2] bytes sent (frag) or written (single copy), [3] token, then the final
// status once done.
enum : std::uintptr_t {
  send_none = 0,
  send_done = 0x73686d01,
  send_frag,
  send_cma,
  send_done_record,
  send_split_wait,
};

/// The smallest fragment worth publishing when the ring is nearly full.
constexpr std::size_t min_frag = 4096;

struct PieceList {
  ::iovec* v;
  std::size_t n;
  std::size_t cap;
  bool overflow;
};

void collect_piece(void* raw, std::byte* ptr, std::size_t len) {
  auto* list = static_cast<PieceList*>(raw);
  if (list->n == list->cap) {
    list->overflow = true;
    return;
  }
  list->v[list->n++] = {ptr, len};
}

}  // namespace

void ShmInstance::complete_send(driver::Packet& pkt, Status st) noexcept {
  pkt.driver_data[0] = send_done;
  pkt.driver_data[3] = static_cast<std::uintptr_t>(st);
}

void ShmInstance::enqueue(driver::Packet& pkt) noexcept {
  pkt.driver_data[1] = 0;
  if (send_tail_ != nullptr)
    send_tail_->driver_data[1] = reinterpret_cast<std::uintptr_t>(&pkt);
  else
    send_head_ = &pkt;
  send_tail_ = &pkt;
}

Status ShmInstance::send_buf_get(driver::Packet& pkt) {
  const Status st = usable();
  if (st != Status::ok) return st;
  if (buf_reserved_) return Status::invalid_argument;
  if (send_head_ != nullptr) {
    pump();
    if (send_head_ != nullptr) return Status::no_resource;
  }
  std::size_t granted = 0;
  std::byte* p = tx_.reserve(max_packet_, max_packet_, granted);
  if (p == nullptr) {
    if (tx_.corrupt()) {
      fail(Status::broken);
      return Status::broken;
    }
    maybe_check_peer();
    return phase_ == Phase::connected ? Status::no_resource : fail_;
  }
  pkt.form = driver::Packet::Form::buffer;
  pkt.buf = p;
  pkt.buf_len = max_packet_;
  pkt.driver_data[0] = send_none;
  buf_reserved_ = true;
  return Status::ok;
}

Status ShmInstance::send_buf_post(driver::Packet& pkt, std::size_t len) {
  if (!buf_reserved_ || pkt.form != driver::Packet::Form::buffer || pkt.buf != tx_.current() ||
      len > pkt.buf_len)
    return Status::invalid_argument;
  buf_reserved_ = false;
  const Status st = usable();
  if (st != Status::ok) return st;
  if (const std::uint64_t s = tx_.publish(len, Kind::packet, 0)) wake_reader(s);
  pkt.length = len;
  complete_send(pkt, Status::ok);
  return Status::ok;
}

Status ShmInstance::send_post(driver::Packet& pkt) {
  Status st = usable();
  if (st != Status::ok) return st;
  if (buf_reserved_) return Status::invalid_argument;
  st = driver::validate_post(pkt, ctx_->caps().max_iov, ctx_->caps().supports_data);
  if (st != Status::ok) return st;
  const std::size_t size = pkt.size();
  if (track_ == driver::Track::small) {
    if (size > max_packet_) return Status::invalid_argument;
    std::size_t granted = 0;
    std::byte* p = tx_.reserve(size, size, granted);
    if (p == nullptr) {
      if (tx_.corrupt()) {
        fail(Status::broken);
        return Status::broken;
      }
      maybe_check_peer();
      return phase_ == Phase::connected ? Status::no_resource : fail_;
    }
    (void)driver::copy_from_packet(pkt, 0, std::span<std::byte>(p, size));
    if (const std::uint64_t s = tx_.publish(size, Kind::packet, 0)) wake_reader(s);
    pkt.length = size;
    complete_send(pkt, Status::ok);
    return Status::ok;
  }
  // A packet still queued here is ours (N3): posted again, it would be
  // linked to itself in the FIFO and its bytes sent twice.
  if (pkt.driver_data[0] >= send_frag && pkt.driver_data[0] <= send_split_wait)
    return Status::invalid_argument;
  std::uintptr_t mode = send_frag;
  if (pkt.rdv_len != 0 && cma_ok_ && size >= ctx_->settings().cma_min) {
    Result<Rdv> rdv = decode_rdv(pkt);
    if (rdv && rdv->pid == static_cast<std::uint32_t>(peer_pid_)) mode = send_cma;
  }
  pkt.driver_data[0] = mode;
  pkt.driver_data[2] = 0;
  pkt.length = 0;
  enqueue(pkt);
  pump();
  if (pkt.driver_data[0] == send_done) return static_cast<Status>(pkt.driver_data[3]);
  return Status::in_progress;
}

Status ShmInstance::send_poll(driver::Packet& pkt) {
  switch (pkt.driver_data[0]) {
    case send_done:
      return static_cast<Status>(pkt.driver_data[3]);
    case send_frag:
    case send_cma:
    case send_done_record:
    case send_split_wait:
      pump();
      if (pkt.driver_data[0] == send_done) return static_cast<Status>(pkt.driver_data[3]);
      maybe_check_peer();
      return Status::in_progress;
    default:
      return Status::invalid_argument;
  }
}

Status ShmInstance::send_wait(driver::Packet& pkt, driver::Deadline deadline) {
  std::int64_t spin_start = 0;
  for (;;) {
    const Status st = send_poll(pkt);
    if (st != Status::in_progress) return st;
    if (driver::Clock::now() >= deadline) return Status::timeout;
    if (spin_expired(spin_start)) sleep(true, deadline);
  }
}

void ShmInstance::pump() noexcept {
  while (send_head_ != nullptr && phase_ == Phase::connected) {
    driver::Packet& p = *send_head_;
    bool progressed = true;
    switch (p.driver_data[0]) {
      case send_cma:
        pump_cma(p);
        break;
      case send_done_record:
        progressed = pump_done(p);
        break;
      case send_frag:
        progressed = pump_frags(p);
        break;
      case send_split_wait:
        progressed = pump_split(p);
        break;
      default:
        // Only this file writes the states: anything else is our own bug.
        PIER_LOG(error, "shm", "send queue holds a packet in state {}", p.driver_data[0]);
        fail(Status::internal);
        return;
    }
    if (!progressed) {
      if (tx_.corrupt()) fail(Status::broken);
      return;
    }
    if (phase_ != Phase::connected) return;  // fail() already emptied the queue
    if (p.driver_data[0] == send_done) {
      send_head_ = reinterpret_cast<driver::Packet*>(p.driver_data[1]);
      if (send_head_ == nullptr) send_tail_ = nullptr;
    }
  }
}

bool ShmInstance::pump_frags(driver::Packet& pkt) noexcept {
  const std::size_t size = pkt.size();
  std::size_t off = pkt.driver_data[2];
  do {
    const std::size_t want = std::min(size - off, static_cast<std::size_t>(max_packet_));
    std::size_t granted = 0;
    std::byte* p = tx_.reserve(std::min(want, min_frag), want, granted);
    if (p == nullptr) {
      pkt.driver_data[2] = off;
      return false;
    }
    (void)driver::copy_from_packet(pkt, off, std::span<std::byte>(p, granted));
    off += granted;
    if (const std::uint64_t s = tx_.publish(granted, Kind::frag, off == size ? flag_last : 0))
      wake_reader(s);
  } while (off < size);
  pkt.length = size;
  complete_send(pkt, Status::ok);
  return true;
}

std::size_t ShmInstance::remote_iovs(const Rdv& rdv, std::span<::iovec> out) noexcept {
  if (rdv.iov_count == 1) {
    out[0] = {reinterpret_cast<void*>(rdv.addr), static_cast<std::size_t>(rdv.capacity)};
    return 1;
  }
  if (rdv.iov_count > out.size()) return out.size() + 1;
  if (rdv.iov_count != 0 &&
      cma_read(peer_pid_, rdv.addr, out.data(), rdv.iov_count * sizeof(::iovec)) != Status::ok)
    return out.size() + 1;
  return rdv.iov_count;
}

void ShmInstance::pump_cma(driver::Packet& pkt) noexcept {
  Result<Rdv> rdv = decode_rdv(pkt);
  if (!rdv) {
    pkt.driver_data[0] = send_frag;
    return;
  }
  if (!peer_present()) return;  // fail() ended the queue, this send with it
  // Claim the receive: the receiver cancels by swapping its token for 0, so
  // exactly one of the two wins and a canceled buffer is never written.
  std::uint64_t expected = rdv->token;
  if (!tx_.ctl_word(ctl_rdv_accept)
           .compare_exchange_strong(expected, rdv->token | rdv_claimed,
                                    std::memory_order_acq_rel)) {
    complete_send(pkt, Status::canceled);
    return;
  }
  std::array<::iovec, 64> remote;
  const std::size_t remote_n = remote_iovs(*rdv, remote);
  std::array<::iovec, 64> local;
  PieceList pieces{local.data(), 0, local.size(), false};
  (void)driver::for_each_piece(pkt, 0, pkt.size(), &collect_piece, &pieces);
  if (remote_n > remote.size() || pieces.overflow) {
    // Too scattered for one call: the cells carry it, into the same receive.
    pkt.driver_data[0] = send_frag;
    return;
  }
  const std::span<const ::iovec> remote_v(remote.data(), remote_n);
  std::size_t capacity = 0;
  for (const ::iovec& v : remote_v) capacity += v.iov_len;
  const std::size_t want = std::min(pkt.size(), capacity);
  const std::size_t split_min = ctx_->settings().split_min;
  if (split_min != 0 && want >= split_min && rdv->can_pull && pieces.n == 1) {
    // Two cores copy: the receiver pulls the second half while we push the
    // first. The split record goes first so its copy starts at once.
    const std::size_t offset = (want / 2) & ~std::size_t{63};
    std::size_t granted = 0;
    if (std::byte* p = tx_.reserve(Split::size, Split::size, granted); p != nullptr) {
      const auto base = reinterpret_cast<std::uintptr_t>(local[0].iov_base);
      encode_split(Split{rdv->token, offset, want - offset, base + offset},
                   std::span<std::byte>(p, Split::size));
      if (const std::uint64_t s = tx_.publish(Split::size, Kind::rdv_split, 0)) wake_reader(s);
      const ::iovec first{local[0].iov_base, offset};
      Result<std::size_t> w = cma_write(peer_pid_, std::span<const ::iovec>(&first, 1), remote_v);
      if (!w) {
        // The receiver is already pulling its half: no way back to the cells.
        fail(Status::broken);
        return;
      }
      pkt.driver_data[2] = want;
      pkt.driver_data[3] = rdv->token;
      pkt.driver_data[0] = send_split_wait;
      return;
    }
  }
  Result<std::size_t> written =
      cma_write(peer_pid_, std::span<const ::iovec>(local.data(), pieces.n), remote_v);
  if (!written) {
    if (written.status() == Status::broken) {
      fail(Status::broken);
      return;
    }
    cma_ok_ = false;  // the probe passed but the kernel says no: stop trying
    pkt.driver_data[0] = send_frag;
    pkt.driver_data[2] = 0;
    return;
  }
  pkt.driver_data[2] = *written;
  pkt.driver_data[3] = rdv->token;
  pkt.driver_data[0] = send_done_record;
}

bool ShmInstance::pump_split(driver::Packet& pkt) noexcept {
  const std::uint64_t token = pkt.driver_data[3];
  const std::uint64_t state = tx_.ctl_word(ctl_rdv_accept).load(std::memory_order_acquire);
  if (state == (token | rdv_claimed | rdv_split_ok)) {
    pkt.driver_data[0] = send_done_record;
    return true;
  }
  if (state == (token | rdv_claimed)) return false;  // still pulling
  if (state != (token | rdv_claimed | rdv_split_failed)) {
    // Neither answer, nor the claim: a word out of protocol (or a receiver
    // that gave the receive up). Waiting would never end.
    PIER_LOG(warn, "shm", "rendezvous word {:#x} from pid {} during a split copy", state,
             remote_.pid);
    fail(Status::broken);
    return true;
  }
  // The receiver could not pull its half: push it ourselves.
  Result<Rdv> rdv = decode_rdv(pkt);
  std::array<::iovec, 64> remote;
  const std::size_t remote_n = rdv ? remote_iovs(*rdv, remote) : remote.size() + 1;
  std::array<::iovec, 64> local;
  PieceList pieces{local.data(), 0, local.size(), false};
  (void)driver::for_each_piece(pkt, 0, pkt.size(), &collect_piece, &pieces);
  const std::size_t want = pkt.driver_data[2];
  const std::size_t offset = (want / 2) & ~std::size_t{63};
  if (remote_n > remote.size() || pieces.n != 1) {
    fail(Status::broken);
    return true;
  }
  if (!peer_present()) return true;
  const ::iovec rest{static_cast<std::byte*>(local[0].iov_base) + offset, want - offset};
  Result<std::size_t> w = cma_write_at(peer_pid_, std::span<const ::iovec>(&rest, 1),
                                       std::span<const ::iovec>(remote.data(), remote_n), offset);
  if (!w) {
    fail(Status::broken);
    return true;
  }
  pkt.driver_data[0] = send_done_record;
  return true;
}

bool ShmInstance::send_news() noexcept {
  if (tx_.ctl_word(ctl_consumed).load(std::memory_order_seq_cst) != tx_.consumed_cache())
    return true;
  if (send_head_ == nullptr || send_head_->driver_data[0] != send_split_wait) return false;
  const std::uint64_t token = send_head_->driver_data[3];
  return tx_.ctl_word(ctl_rdv_accept).load(std::memory_order_seq_cst) != (token | rdv_claimed);
}

bool ShmInstance::pump_done(driver::Packet& pkt) noexcept {
  std::size_t granted = 0;
  std::byte* p = tx_.reserve(Done::size, Done::size, granted);
  if (p == nullptr) return false;
  encode_done(Done{pkt.driver_data[3], pkt.driver_data[2], pkt.size()},
              std::span<std::byte>(p, Done::size));
  if (const std::uint64_t s = tx_.publish(Done::size, Kind::rdv_done, flag_last)) wake_reader(s);
  pkt.length = pkt.driver_data[2];
  complete_send(pkt, Status::ok);
  return true;
}

}  // namespace pier::drivers::shm
