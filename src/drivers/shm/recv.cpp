// shm: the receive side: posted receives (copied out of the ring, or filled
// by the sender's single copy), buffer-based receives handing out the cell
// itself, truncation, cancel.
#include "drivers/shm/context.hpp"
#include "drivers/shm/instance.hpp"

#include "driver/packet.hpp"

#include "base/log.hpp"

#include <unistd.h>

namespace pier::drivers::shm {

namespace {

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

void ShmInstance::consume(std::uint64_t lines) noexcept {
  if (const std::uint64_t s = rx_.consume(lines)) wake_writer(s);
}

Status ShmInstance::recv_post(driver::Packet& pkt) {
  Status st = usable();
  if (st != Status::ok) return st;
  if (posted_ != nullptr || buf_out_) return Status::invalid_argument;
  st = driver::validate_post(pkt, ctx_->caps().max_iov, ctx_->caps().supports_data);
  if (st != Status::ok) return st;
  posted_ = &pkt;
  recv_off_ = 0;
  recv_trunc_ = false;
  pkt.length = 0;
  pkt.rdv_len = 0;
  token_ = 0;
  split_seen_ = false;
  can_pull_ = false;
  if (track_ == driver::Track::large && ctx_->caps().rdv_data) {
    Rdv rdv;
    rdv.capacity = pkt.size();
    rdv.pid = static_cast<std::uint32_t>(::getpid());
    rdv.can_pull = cma_ok_;
    bool describable = true;
    if (pkt.form == driver::Packet::Form::iovec && pkt.iov_count != 1) {
      rdv.iov_count = pkt.iov_count;
      rdv.addr = reinterpret_cast<std::uintptr_t>(pkt.iov);
    } else {
      // One contiguous piece, or a data layout flattened into our own iovec
      // array (which lives as long as the receive).
      PieceList pieces{recv_iov_.data(), 0, recv_iov_.size(), false};
      (void)driver::for_each_piece(pkt, 0, pkt.size(), &collect_piece, &pieces);
      describable = !pieces.overflow;
      if (pieces.n == 1) {
        rdv.iov_count = 1;
        rdv.addr = reinterpret_cast<std::uintptr_t>(recv_iov_[0].iov_base);
      } else {
        rdv.iov_count = static_cast<std::uint32_t>(pieces.n);
        rdv.addr = reinterpret_cast<std::uintptr_t>(recv_iov_.data());
      }
    }
    if (describable) {
      token_ = next_token_++;
      can_pull_ = rdv.can_pull;
      rdv.token = token_;
      // Published before the rdv data leaves this process, so the sender's
      // claim always finds it.
      rx_.ctl_word(ctl_rdv_accept).store(token_, std::memory_order_release);
      encode_rdv(rdv, pkt);
    }
  }
  return Status::in_progress;
}

Status ShmInstance::complete_recv(Status st) noexcept {
  if (token_ != 0) {
    rx_.ctl_word(ctl_rdv_accept).store(0, std::memory_order_release);
    token_ = 0;
  }
  posted_ = nullptr;
  return st;
}

Status ShmInstance::progress_recv() noexcept {
  // No packet moves after disconnect() (its settle step already let a copy
  // into the receive end): what is posted ends closed.
  if (phase_ == Phase::closed)
    return posted_ != nullptr ? complete_recv(fail_) : Status::in_progress;
  // At most a ring's worth per call: a peer streaming fragments must not
  // keep this call from returning.
  std::uint64_t taken = 0;
  while ((posted_ != nullptr || discard_frag_) && taken < rx_.lines()) {
    Record r;
    const int got = rx_.peek(r);
    if (got < 0) {
      PIER_LOG(warn, "shm", "malformed record from pid {}", remote_.pid);
      fail(Status::broken);
      break;
    }
    if (got == 0) break;
    switch (r.kind) {
      case Kind::skip:
        consume(r.lines);
        taken += r.lines;
        continue;
      case Kind::packet: {
        if (in_frag_ || discard_frag_) break;
        if (posted_ == nullptr) return Status::in_progress;
        const std::size_t n =
            driver::copy_to_packet(*posted_, 0, std::span<const std::byte>(r.payload, r.len));
        posted_->length = n;
        consume(r.lines);
        return complete_recv(n < r.len ? Status::truncated : Status::ok);
      }
      case Kind::frag: {
        const bool last = (r.flags & flag_last) != 0;
        if (discard_frag_) {
          consume(r.lines);
          taken += r.lines;
          if (last) discard_frag_ = in_frag_ = false;
          continue;
        }
        if (posted_ == nullptr) return Status::in_progress;
        const std::size_t n = driver::copy_to_packet(*posted_, recv_off_,
                                                     std::span<const std::byte>(r.payload, r.len));
        if (n < r.len) recv_trunc_ = true;
        recv_off_ += n;
        in_frag_ = !last;
        consume(r.lines);
        taken += r.lines;
        if (last) {
          posted_->length = recv_off_;
          return complete_recv(recv_trunc_ ? Status::truncated : Status::ok);
        }
        continue;
      }
      case Kind::rdv_split: {
        Result<Split> sp = decode_split(std::span<const std::byte>(r.payload, r.len));
        // One split per receive, one that offered to pull, after the sender
        // claimed it: a peer streaming splits would otherwise keep this call
        // copying (the whole buffer each time) and never returning.
        if (!sp || posted_ == nullptr || in_frag_ || token_ == 0 || sp->token != token_ ||
            split_seen_ || !can_pull_ ||
            rx_.ctl_word(ctl_rdv_accept).load(std::memory_order_acquire) != (token_ | rdv_claimed))
          break;
        split_seen_ = true;
        const bool pulled = pull_split(*sp);
        // seq_cst, then the sleepers load: the sender may sleep waiting for it.
        rx_.ctl_word(ctl_rdv_accept)
            .exchange(token_ | rdv_claimed | (pulled ? rdv_split_ok : rdv_split_failed),
                      std::memory_order_seq_cst);
        if (const std::uint64_t s =
                rx_.ctl_word(ctl_writer_sleepers).load(std::memory_order_seq_cst))
          wake_writer(s);
        consume(r.lines);
        taken += r.lines;
        continue;
      }
      case Kind::rdv_done: {
        Result<Done> d = decode_done(std::span<const std::byte>(r.payload, r.len));
        // Our token (never 0) and no more than the receive holds: the
        // peer wrote the length.
        if (!d || posted_ == nullptr || in_frag_ || token_ == 0 || d->token != token_ ||
            d->written > posted_->size() || d->written > d->total)
          break;
        consume(r.lines);
        posted_->length = d->written;
        return complete_recv(d->total > d->written ? Status::truncated : Status::ok);
      }
    }
    // Every path that reaches here met a record out of protocol.
    PIER_LOG(warn, "shm", "unexpected record kind {} from pid {}", static_cast<int>(r.kind),
             remote_.pid);
    fail(Status::broken);
    break;
  }
  if (posted_ == nullptr) return Status::in_progress;
  absorb_gone();
  if (phase_ == Phase::failed || phase_ == Phase::closed) return complete_recv(fail_);
  return Status::in_progress;
}

bool ShmInstance::pull_split(const Split& sp) noexcept {
  if (!peer_present()) return false;
  std::array<::iovec, 64> local;
  PieceList pieces{local.data(), 0, local.size(), false};
  const std::size_t covered =
      driver::for_each_piece(*posted_, sp.offset, sp.len, &collect_piece, &pieces);
  if (pieces.overflow || covered != sp.len) return false;
  return cma_read_iov(peer_pid_, sp.addr, std::span<const ::iovec>(local.data(), pieces.n)) ==
         Status::ok;
}

Status ShmInstance::recv_poll(driver::Packet& pkt) {
  if (posted_ == &pkt) {
    const Status st = progress_recv();
    if (st == Status::in_progress) maybe_check_peer();
    return st;
  }
  if (posted_ != nullptr || buf_out_) return Status::invalid_argument;
  absorb_gone();
  if (phase_ != Phase::failed) {
    const Status st = usable();
    if (st != Status::ok) return st;
  }
  // Failed before its rings were set up (a bad hello, a peer found dead):
  // nothing to read, ever.
  if (!rx_.attached()) return phase_ == Phase::failed ? fail_ : Status::in_progress;
  for (std::uint64_t taken = 0;;) {
    if (taken >= rx_.lines()) return Status::in_progress;  // a ring's worth per call
    Record r;
    const int got = rx_.peek(r);
    if (got < 0) {
      fail(Status::broken);
      return Status::broken;
    }
    if (got == 0) {
      if (phase_ == Phase::failed) return fail_;
      maybe_check_peer();
      return Status::in_progress;
    }
    if (r.kind == Kind::skip || (r.kind == Kind::frag && discard_frag_)) {
      if (r.kind == Kind::frag && (r.flags & flag_last) != 0) discard_frag_ = in_frag_ = false;
      consume(r.lines);
      taken += r.lines;
      continue;
    }
    if (r.kind != Kind::packet) {
      // A small track carries whole packets only (max_packet fits a
      // quarter ring), so a fragment or a single-copy record there is out of
      // protocol: waiting for a posted receive would wait for ever.
      if (track_ == driver::Track::small) {
        PIER_LOG(warn, "shm", "unexpected record kind {} on a small track from pid {}",
                 static_cast<int>(r.kind), remote_.pid);
        fail(Status::broken);
        return Status::broken;
      }
      if (phase_ == Phase::failed) return fail_;
      return Status::in_progress;  // fragments and single-copy completions need a posted receive
    }
    pkt.form = driver::Packet::Form::buffer;
    pkt.buf = r.payload;
    pkt.buf_len = r.len;
    pkt.length = r.len;
    buf_out_ = true;
    buf_ptr_ = r.payload;
    buf_lines_ = r.lines;
    return Status::ok;
  }
}

Status ShmInstance::recv_buf_release(driver::Packet& pkt) {
  if (!buf_out_ || pkt.form != driver::Packet::Form::buffer || pkt.buf != buf_ptr_)
    return Status::invalid_argument;
  buf_out_ = false;
  consume(buf_lines_);
  return Status::ok;
}

Status ShmInstance::recv_wait(driver::Packet& pkt, driver::Deadline deadline) {
  std::int64_t spin_start = 0;
  for (;;) {
    const Status st = recv_poll(pkt);
    if (st != Status::in_progress) return st;
    if (driver::Clock::now() >= deadline) return Status::timeout;
    if (spin_expired(spin_start)) sleep(false, deadline);
  }
}

void ShmInstance::settle_posted(driver::Deadline deadline) noexcept {
  if (posted_ == nullptr || token_ == 0 || phase_ != Phase::connected) return;
  if (progress_recv() != Status::in_progress || posted_ == nullptr) return;
  std::uint64_t expected = token_;
  if (rx_.ctl_word(ctl_rdv_accept)
          .compare_exchange_strong(expected, 0, std::memory_order_acq_rel)) {
    token_ = 0;  // never claimed: nobody will write it now
    return;
  }
  const std::uint64_t claimed = token_ | rdv_claimed;
  if ((expected & ~(rdv_split_ok | rdv_split_failed)) != claimed) {
    PIER_LOG(warn, "shm", "peer pid {} wrote {:#x} over a receive's rendezvous word", remote_.pid,
             expected);
    fail(Status::broken);
    return;
  }
  // Claimed: the peer is copying (or about to). Its done record ends the
  // receive; a split asks us to pull our half, which progress_recv does.
  while (posted_ != nullptr && phase_ == Phase::connected) {
    if (progress_recv() != Status::in_progress) return;
    // Our own sends go on meanwhile: a peer ending at the same time may
    // wait for the done record of a split copy we are in the middle of.
    pump();
    if (driver::Clock::now() >= deadline) {
      PIER_LOG(error, "shm", "peer pid {} still copies into a receive being ended", remote_.pid);
      return;
    }
    sleep(false, std::min(deadline, driver::Clock::now() + std::chrono::milliseconds(10)));
  }
}

Status ShmInstance::recv_cancel(driver::Packet& pkt) {
  if (posted_ != &pkt) return Status::invalid_argument;
  Status st = progress_recv();
  if (st != Status::in_progress) return st;
  if (token_ != 0) {
    std::uint64_t expected = token_;
    if (!rx_.ctl_word(ctl_rdv_accept)
             .compare_exchange_strong(expected, 0, std::memory_order_acq_rel)) {
      // Only the sender's claim of this very receive may stand there; any
      // other value is a peer out of protocol, and waiting for a done
      // record it will never write would wait for ever.
      const std::uint64_t claimed = token_ | rdv_claimed;
      if ((expected & ~(rdv_split_ok | rdv_split_failed)) != claimed) {
        PIER_LOG(warn, "shm", "peer pid {} wrote {:#x} over a receive's rendezvous word",
                 remote_.pid, expected);
        fail(Status::broken);
        return Status::broken;
      }
      // The sender claimed the buffer and is writing into it: the only safe
      // answer is the receive's real end, which its done record (or the
      // peer's death, seen on the socket) brings.
      for (;;) {
        st = progress_recv();
        if (st != Status::in_progress) return st;
        // Our own sends go on meanwhile (as in settle_posted): a peer
        // canceling its receive at the same time waits for the done record
        // of a split copy of ours, and we for its: neither would end.
        pump();
        sleep(false, driver::Clock::now() + std::chrono::milliseconds(100));
      }
    }
    token_ = 0;
  }
  if (in_frag_) discard_frag_ = true;
  posted_ = nullptr;
  return Status::ok;
}

}  // namespace pier::drivers::shm
