#include "drivers/ofi/instance.hpp"

#include "base/log.hpp"
#include "driver/driver.hpp"
#include "drivers/ofi/context.hpp"

#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

#include <algorithm>
#include <chrono>

namespace pier::drivers::ofi {

OfiInstance::OfiInstance(OfiContext& ctx, driver::Track track, std::uint32_t id)
    : ctx_(ctx), track_(track), id_(id) {}

OfiInstance::~OfiInstance() {
  std::unique_lock lock(ctx_.mutex());
  if (state_ == State::idle) return;
  hello_due_ = false;  // progress below must not greet the peer for a dying instance
  if (state_ == State::connected && ctx_.running() && !ctx_.peer_dead(peer_) && !peer_bye_) {
    // Destroyed without disconnect(): the peer's pending packets break
    // (unless it left already: then nobody is there to tell, and over
    // libfabric 1.17's shm a send to an endpoint closed in this process
    // crashed inside the provider).
    Control bye;
    bye.type = ControlType::bye;
    bye.track = track_;
    bye.flags = flag_abandoned;
    bye.sender_instance = id_;
    bye.sender_context = ctx_.id();
    bye.target_context = remote_ctx_;
    bye.target_instance = remote_id_;
    bye.value = sent_;
    Status sent = Status::no_resource;
    for (int i = 0; i < 100 && (sent = ctx_.send_control(peer_, bye)) == Status::no_resource; ++i)
      ctx_.progress();
    if (sent == Status::no_resource) ctx_.owe_bye(peer_, bye);
  }
  // The caller's memory is its own again once we return: a receive the
  // provider holds is let go of first (it wrote into it after the destroy).
  if (recv_op_ != nullptr && !cancel_and_wait_recv_op(lock))
    PIER_LOG(error, "ofi", "a receive into caller memory did not leave libfabric in time");
  // Likewise a send the provider may still read the caller's memory for:
  // ended first, so that nothing the wait progresses posts it again (a
  // refused RMA write falls back to a send, a retried op is re-posted).
  ctx_.fail_ops(this, Status::closed);
  if (!cancel_and_wait_sends(lock))
    PIER_LOG(error, "ofi", "a send from caller memory did not leave libfabric in time");
  end_small(Status::closed);
  // A bounce receive the provider already matched (rxm segments still
  // arriving) cannot be canceled: the buffer stays with the context until
  // the receive leaves the provider (it was written after being freed).
  if (pre_op_ != nullptr && pre_op_->in_provider) ctx_.keep_until_done(pre_op_, std::move(bounce_));
  close_mr();
  ctx_.detach(this);
}

// --- connection ----------------------------------------------------------

Status OfiInstance::connect_async(std::span<const std::byte> remote_url) {
  std::lock_guard lock(ctx_.mutex());
  if (!ctx_.running()) return Status::not_initialized;
  if (state_ != State::idle) return Status::invalid_argument;
  Result<Url> url = decode_url(remote_url);
  if (!url) return Status::invalid_argument;
  if (track_ == driver::Track::small && bounce_.empty()) {
    try {
      bounce_.resize(ctx_.max_packet());
    } catch (...) {
      return Status::no_memory;
    }
  }
  // The peer's receives take no more than its url says; our own limit
  // stays a bound too (caps.max_packet is the track's largest packet).
  send_max_ = std::min<std::size_t>(ctx_.max_packet(), url->max_packet);
  remote_ctx_ = url->context_id;
  acceptor_ = ctx_.on_demand() && ctx_.acceptor_for(remote_url);
  called_back_ = false;
  state_ = State::connecting;
  if (Status s = ctx_.attach(this, *url, track_, &peer_); s != Status::ok) {
    if (s == Status::broken) {
      fail(Status::broken);
      return s;
    }
    state_ = State::idle;
    remote_ctx_ = 0;
    return s;
  }
  hello_due_ = true;
  flush_control();
  if (track_ == driver::Track::small) post_prepost();
  return state_ == State::connected && hello_sent_ ? Status::ok : Status::in_progress;
}

Status OfiInstance::connect_wait(driver::Deadline deadline) {
  std::unique_lock lock(ctx_.mutex());
  if (!ctx_.running()) return Status::not_initialized;
  if (state_ == State::idle) return Status::invalid_argument;
  const Status s = ctx_.wait(
      lock, deadline,
      [](void* self) {
        auto* i = static_cast<OfiInstance*>(self);
        return i->state_ != State::connecting && (i->hello_sent_ || i->state_ != State::connected);
      },
      this);
  if (s != Status::ok) return s;
  if (state_ == State::connected) return Status::ok;
  return end_status_;
}

Status OfiInstance::disconnect() {
  std::unique_lock lock(ctx_.mutex());
  if (!ctx_.running()) return Status::not_initialized;
  if (state_ == State::connected && !ctx_.peer_dead(peer_)) {
    // Rendezvous writes on their way finish, and their notices leave,
    // before the bye: it counts those packets, and a write whose notice
    // never went would hold the peer's receive for ever. Bounded: a peer
    // that stopped answering is not waited for, and the wait lets go of the
    // context's lock between rounds, so the other instances' calls go on.
    if (ctx_.rdv_in_flight(this))
      (void)ctx_.spin(
          lock, driver::Clock::now() + std::chrono::seconds(2),
          [](void* arg) {
            auto* self = static_cast<OfiInstance*>(arg);
            return !self->ctx_.rdv_in_flight(self) || self->ctx_.peer_dead(self->peer_);
          },
          this);
    Control bye;
    bye.type = ControlType::bye;
    bye.track = track_;
    bye.sender_instance = id_;
    bye.sender_context = ctx_.id();
    bye.target_context = remote_ctx_;
    bye.target_instance = remote_id_;
    bye.value = sent_;
    Status sent = Status::no_resource;
    for (int i = 0; i < 1000 && (sent = ctx_.send_control(peer_, bye)) == Status::no_resource; ++i)
      ctx_.progress();
    if (sent == Status::no_resource) ctx_.owe_bye(peer_, bye);  // sent from progress later
  }
  if (state_ == State::connected || state_ == State::connecting) {
    state_ = State::closed;
    end_status_ = Status::closed;
    ctx_.fail_ops(this, Status::closed);
    if (recv_op_ != nullptr && !recv_op_->done) {
      cancel_recv_op();
      recv_op_->done = true;
      recv_op_->status = Status::closed;
    }
    end_small(Status::closed);
    close_mr();
  }
  return Status::ok;
}

void OfiInstance::on_hello(const Control& c) noexcept {
  remote_id_ = c.sender_instance;
  if (state_ == State::connecting) state_ = State::connected;
  // The peer connected because we called it back: the call back it took
  // may have been an older one, dropped, or from before it had an
  // instance, so it hears our hello once more, now.
  if (called_back_ && state_ == State::connected) {
    called_back_ = false;
    hello_due_ = true;
    flush_control();
  }
}

void OfiInstance::repeat_call_back(std::chrono::steady_clock::time_point now,
                                   std::chrono::steady_clock::duration period) noexcept {
  if (!acceptor_ || !awaiting_hello() || hello_due_ || now - call_back_at_ < period) return;
  hello_due_ = true;
  flush_control();
}

void OfiInstance::on_bye(const Control& c) noexcept {
  if (c.flags & flag_refused) {
    PIER_LOG(warn, "ofi",
             "peer context {:x} dropped our hello: no instance there took it in time "
             "(its PIER_OFI_PARK_MS), or too many waited",
             remote_ctx_);
    fail(Status::broken);
    return;
  }
  if (c.flags & flag_abandoned) {
    fail(Status::broken);
    return;
  }
  if (c.value < consumed_) {
    // It says it sent fewer packets than we already took: a lie or a bug,
    // and receives would wait for a count that went past.
    PIER_LOG(warn, "ofi", "a bye counting {} packets after {} arrived", c.value, consumed_);
    fail(Status::broken);
    return;
  }
  peer_bye_ = true;
  peer_sent_total_ = c.value;
  // The receive posted now ends once what the peer sent has been taken.
  if (user_ != nullptr && recv_ended_by_peer() && !has_packet()) end_user(Status::closed);
  if (recv_op_ != nullptr && !recv_op_->done && recv_ended_by_peer()) {
    cancel_recv_op();
    recv_op_->done = true;
    recv_op_->status = Status::closed;
    close_mr();
  }
}

void OfiInstance::on_credit(const Control& c) noexcept {
  if (c.value > sent_) {
    // Credit for packets never sent: sent_ - peer_consumed_ would wrap, and
    // every send answer no_resource for ever.
    PIER_LOG(warn, "ofi", "a credit for {} packets when {} were sent", c.value, sent_);
    fail(Status::broken);
    return;
  }
  peer_consumed_ = std::max(peer_consumed_, c.value);
}

void OfiInstance::fail(Status why) noexcept {
  if (state_ == State::broken || state_ == State::idle) return;
  if (state_ != State::closed) {
    state_ = State::broken;
    end_status_ = why;
  }
  ctx_.fail_ops(this, why);
  if (recv_op_ != nullptr && !recv_op_->done) {
    cancel_recv_op();
    recv_op_->done = true;
    recv_op_->status = why;
  }
  end_small(why);
  close_mr();
}

void OfiInstance::on_peer_gone() noexcept {
  if (!peer_bye_) {
    fail(Status::broken);
    return;
  }
  // Sends to a peer that left in order end closed; receives drain first.
  ctx_.fail_ops(this, Status::closed);
}

void OfiInstance::flush_control() noexcept {
  if (state_ == State::idle || ctx_.peer_dead(peer_)) return;
  if (prepost_due_) post_prepost();
  Control c;
  c.track = track_;
  c.sender_instance = id_;
  c.sender_context = ctx_.id();
  c.target_context = remote_ctx_;
  if (hello_due_) {
    c.type = ControlType::hello;
    const bool call_back = acceptor_ && awaiting_hello();
    if (call_back) c.flags = flag_call_back;
    const Status s = ctx_.send_control(peer_, c);
    c.flags = 0;
    if (s == Status::ok) {
      hello_due_ = false;
      hello_sent_ = true;
      if (call_back) {
        called_back_ = true;
        call_back_at_ = std::chrono::steady_clock::now();
      }
    } else if (s == Status::no_resource) {
      ctx_.owe_control();
    } else {
      fail(Status::broken);
      return;
    }
  }
  if (credit_due_ && remote_id_ != 0) {
    c.type = ControlType::credit;
    c.target_instance = remote_id_;
    c.value = consumed_;
    const Status s = ctx_.send_control(peer_, c);
    if (s == Status::ok) {
      credit_due_ = false;
      credit_reported_ = consumed_;
    } else if (s == Status::no_resource) {
      ctx_.owe_control();
    }
  }
}

void OfiInstance::owe_credit() noexcept {
  credit_due_ = true;
  flush_control();
}

// --- posting -------------------------------------------------------------

Status OfiInstance::check_post(const driver::Packet& pkt, bool send) const noexcept {
  if (pkt.form == driver::Packet::Form::data) return Status::unsupported;  // no supports_data
  if (pkt.form != driver::Packet::Form::iovec || pkt.iov_count == 0)
    return Status::invalid_argument;
  if (Status s = driver::validate_post(pkt, ctx_.max_iov(), false); s != Status::ok) return s;
  if (pkt.driver_data[0] == mark_sending || pkt.driver_data[0] == mark_receiving)
    return Status::invalid_argument;
  // Refused here, the connection intact: a larger packet would be
  // truncated at the peer (tcp;ofi_rxm) or hang its completion queue read
  // (libfabric 1.17's shm).
  if (send && track_ == driver::Track::small && pkt.size() > send_max_)
    return Status::invalid_argument;
  return Status::ok;
}

void OfiInstance::post_op(Op* op, bool peer_checked) noexcept {
  // Only receives into the bounce buffer have no packet.
  const driver::Packet* pkt = op->pkt;
  fid_ep* ep = ctx_.ep();
  // Receives name their peer where the provider can: tags alone let shm
  // 1.17 hand one peer's packet to another instance's receive.
  const fi_addr_t source = ctx_.directed() ? ctx_.peer_addr(peer_) : FI_ADDR_UNSPEC;
  const bool sends = op->kind == Op::Kind::send || op->kind == Op::Kind::rma_write ||
                     op->kind == Op::Kind::rdv_notice;
  // Looked at once per send: send_post() did, and nothing between there
  // and here (the same lock held) can close the peer that this check
  // would see and that one missed; a context closing in another thread
  // can come just after either check alike. A later post (a retry after
  // -FI_EAGAIN, a notice after its write, a fallback after a refused
  // write) looks again.
  if (sends && !peer_checked && ctx_.peer_unreachable(peer_)) {
    // Posted after the peer's context closed: never to its endpoint.
    op->done = true;
    op->status = Status::broken;
    return;
  }
  ssize_t rc = 0;
  switch (op->kind) {
    case Op::Kind::send:
      rc = pkt->size() == 0 ? fi_tsend(ep, nullptr, 0, nullptr, op->peer,
                                       tag_of(TagKind::data, remote_id_), &op->fctx)
                            : fi_tsendv(ep, pkt->iov, nullptr, pkt->iov_count, op->peer,
                                        tag_of(TagKind::data, remote_id_), &op->fctx);
      break;
    case Op::Kind::rma_write: {
      // Only what the receive can hold is written; the notice carries the
      // full size, so the receiver knows it was truncated.
      std::size_t left = std::min<std::uint64_t>(op->length, op->rdv.length);
      if (left == 0) {
        op->kind = Op::Kind::rdv_notice;
        post_op(op, peer_checked);
        return;
      }
      std::array<::iovec, 16> iov{};
      std::size_t n = 0;
      for (std::uint32_t i = 0; i < pkt->iov_count && left > 0; ++i) {
        const std::size_t take = std::min(left, pkt->iov[i].iov_len);
        if (take == 0) continue;
        iov[n++] = {pkt->iov[i].iov_base, take};
        left -= take;
      }
      rc = fi_writev(ep, iov.data(), nullptr, n, op->peer, op->rdv.address, op->rdv.key, &op->fctx);
      break;
    }
    case Op::Kind::rdv_notice:
      rc = fi_tsenddata(ep, nullptr, 0, nullptr, rdv_done_data(op->length, op->rdv.cookie),
                        op->peer, tag_of(TagKind::rdv_done, remote_id_), &op->fctx);
      break;
    case Op::Kind::recv:
      if (op->bounce) {
        rc = fi_trecv(ep, bounce_.data(), bounce_.size(), nullptr, source,
                      tag_of(TagKind::data, id_), data_ignore, &op->fctx);
        break;
      }
      rc = fi_trecvv(ep, pkt->iov, nullptr, pkt->iov_count, source, tag_of(TagKind::data, id_),
                     data_ignore, &op->fctx);
      break;
    default:
      return;
  }
  if (rc == 0) {
    op->in_provider = true;
  } else if (rc == -FI_EAGAIN) {
    ctx_.retry_later(op);
  } else {
    PIER_LOG(warn, "ofi", "cannot post: {}", fi_strerror(static_cast<int>(-rc)));
    op->done = true;
    op->status = Status::broken;
    if (op->kind == Op::Kind::recv) on_recv_done(op);
  }
}

}  // namespace pier::drivers::ofi
