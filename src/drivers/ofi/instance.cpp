#include "drivers/ofi/instance.hpp"

#include "base/log.hpp"
#include "driver/driver.hpp"
#include "drivers/ofi/context.hpp"

#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

#include <algorithm>

namespace pier::drivers::ofi {

namespace {

constexpr auto cancel_limit = std::chrono::seconds(2);

Op* op_of(const driver::Packet& pkt) noexcept {
  return reinterpret_cast<Op*>(pkt.driver_data[1]);
}

}  // namespace

OfiInstance::OfiInstance(OfiContext& ctx, driver::Track track, std::uint32_t id)
    : ctx_(ctx), track_(track), id_(id) {}

OfiInstance::~OfiInstance() {
  std::lock_guard lock(ctx_.mutex());
  if (state_ == State::idle) return;
  if (state_ == State::connected && ctx_.running() && !ctx_.peer_dead(peer_)) {
    // Destroyed without disconnect(): the peer's pending packets break.
    Control bye;
    bye.type = ControlType::bye;
    bye.track = track_;
    bye.flags = flag_abandoned;
    bye.sender_instance = id_;
    bye.sender_context = ctx_.id();
    bye.target_context = remote_ctx_;
    bye.target_instance = remote_id_;
    bye.value = sent_;
    for (int i = 0; i < 100 && ctx_.send_control(peer_, bye) == Status::no_resource; ++i)
      ctx_.progress();
  }
  if (recv_op_ != nullptr) cancel_recv_op();
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
  remote_ctx_ = url->context_id;
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
  std::lock_guard lock(ctx_.mutex());
  if (!ctx_.running()) return Status::not_initialized;
  if (state_ == State::connected && !ctx_.peer_dead(peer_)) {
    Control bye;
    bye.type = ControlType::bye;
    bye.track = track_;
    bye.sender_instance = id_;
    bye.sender_context = ctx_.id();
    bye.target_context = remote_ctx_;
    bye.target_instance = remote_id_;
    bye.value = sent_;
    for (int i = 0; i < 1000 && ctx_.send_control(peer_, bye) == Status::no_resource; ++i)
      ctx_.progress();
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
    close_mr();
  }
  return Status::ok;
}

void OfiInstance::on_hello(const Control& c) noexcept {
  remote_id_ = c.sender_instance;
  if (state_ == State::connecting) state_ = State::connected;
}

void OfiInstance::on_bye(const Control& c) noexcept {
  if (c.flags & flag_abandoned) {
    fail(Status::broken);
    return;
  }
  peer_bye_ = true;
  peer_sent_total_ = c.value;
  // The receive posted now ends once what the peer sent has been taken.
  if (recv_op_ != nullptr && !recv_op_->done && recv_ended_by_peer()) {
    cancel_recv_op();
    recv_op_->done = true;
    recv_op_->status = Status::closed;
    close_mr();
  }
}

void OfiInstance::on_credit(const Control& c) noexcept {
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
  Control c;
  c.track = track_;
  c.sender_instance = id_;
  c.sender_context = ctx_.id();
  c.target_context = remote_ctx_;
  if (hello_due_) {
    c.type = ControlType::hello;
    const Status s = ctx_.send_control(peer_, c);
    if (s == Status::ok) {
      hello_due_ = false;
      hello_sent_ = true;
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
  if (send && track_ == driver::Track::small && pkt.size() > ctx_.max_packet())
    return Status::invalid_argument;
  return Status::ok;
}

void OfiInstance::post_op(Op* op) noexcept {
  driver::Packet& pkt = *op->pkt;
  fid_ep* ep = ctx_.ep();
  ssize_t rc = 0;
  switch (op->kind) {
    case Op::Kind::send:
      rc = pkt.size() == 0 ? fi_tsend(ep, nullptr, 0, nullptr, op->peer,
                                      tag_of(TagKind::data, remote_id_), &op->fctx)
                           : fi_tsendv(ep, pkt.iov, nullptr, pkt.iov_count, op->peer,
                                       tag_of(TagKind::data, remote_id_), &op->fctx);
      break;
    case Op::Kind::rma_write: {
      // Only what the receive can hold is written; the notice carries the
      // full size, so the receiver knows it was truncated.
      std::size_t left = std::min<std::uint64_t>(op->length, op->rdv.length);
      if (left == 0) {
        op->kind = Op::Kind::rdv_notice;
        post_op(op);
        return;
      }
      std::array<::iovec, 16> iov{};
      std::size_t n = 0;
      for (std::uint32_t i = 0; i < pkt.iov_count && left > 0; ++i) {
        const std::size_t take = std::min(left, pkt.iov[i].iov_len);
        if (take == 0) continue;
        iov[n++] = {pkt.iov[i].iov_base, take};
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
        rc = fi_trecv(ep, bounce_.data(), bounce_.size(), nullptr, FI_ADDR_UNSPEC,
                      tag_of(TagKind::data, id_), data_ignore, &op->fctx);
        break;
      }
      rc = fi_trecvv(ep, pkt.iov, nullptr, pkt.iov_count, FI_ADDR_UNSPEC,
                     tag_of(TagKind::data, id_), data_ignore, &op->fctx);
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

// --- send ----------------------------------------------------------------

Status OfiInstance::send_post(driver::Packet& pkt) {
  std::lock_guard lock(ctx_.mutex());
  if (!ctx_.running()) return Status::not_initialized;
  if (Status s = check_post(pkt, true); s != Status::ok) return s;
  switch (state_) {
    case State::idle:
      return Status::invalid_argument;
    case State::closed:
    case State::broken:
      return end_status_;
    case State::connecting:
      ctx_.progress();
      return Status::no_resource;
    case State::connected:
      break;
  }
  if (peer_bye_) return Status::closed;
  if (!hello_sent_) {
    flush_control();
    if (!hello_sent_) return Status::no_resource;
  }
  const bool credit_blocked = [&] {
    return track_ == driver::Track::small && sent_ - peer_consumed_ >= ctx_.credits();
  }();
  const bool rdv_busy = rdv_op_ != nullptr && !rdv_op_->done;
  if (credit_blocked || rdv_busy || sends_in_flight_ >= ctx_.send_queue()) {
    ctx_.progress();
    return Status::no_resource;
  }
  Op* op = ctx_.get_op(Op::Kind::send, this);
  if (op == nullptr) {
    ctx_.progress();
    return Status::no_resource;
  }
  op->pkt = &pkt;
  op->length = pkt.size();
  op->peer = ctx_.peer_addr(peer_);
  if (track_ == driver::Track::large && ctx_.rma() && pkt.rdv_len > 0) {
    // rdv_data crossed the wire: anything that is not ours is ignored and
    // the data goes by message into the posted receive.
    if (Result<Rdv> rdv = decode_rdv(pkt); rdv) {
      op->kind = Op::Kind::rma_write;
      op->rdv = *rdv;
    }
  }
  const bool rma = op->kind == Op::Kind::rma_write;
  post_op(op);
  if (op->retry || !op->in_provider) {
    // Nothing reached libfabric: the caller retries.
    const bool refused = op->done;
    if (op->retry) {
      std::erase(ctx_.retry_list(), op);
      op->retry = false;
    }
    op->owner = nullptr;
    ctx_.maybe_free(op);
    ctx_.progress();
    return refused ? Status::system_error : Status::no_resource;
  }
  if (rma) rdv_op_ = op;
  ++sent_;
  ++sends_in_flight_;
  pkt.driver_data[0] = mark_sending;
  pkt.driver_data[1] = reinterpret_cast<std::uintptr_t>(op);
  return Status::in_progress;
}

Status OfiInstance::finish_send(driver::Packet& pkt) noexcept {
  Op* op = op_of(pkt);
  const Status s = op->status;
  pkt.length = s == Status::ok ? op->length : 0;
  op->reported = true;
  op->pkt = nullptr;
  if (rdv_op_ == op) rdv_op_ = nullptr;
  --sends_in_flight_;
  ctx_.maybe_free(op);
  pkt.driver_data[0] = mark_done;
  pkt.driver_data[1] = 0;
  pkt.driver_data[2] = static_cast<std::uintptr_t>(s);
  return s;
}

Status OfiInstance::send_poll(driver::Packet& pkt) {
  std::lock_guard lock(ctx_.mutex());
  if (pkt.driver_data[0] == mark_done) return static_cast<Status>(pkt.driver_data[2]);
  if (pkt.driver_data[0] != mark_sending) return Status::invalid_argument;
  if (!op_of(pkt)->done) ctx_.progress();
  if (!op_of(pkt)->done) return Status::in_progress;
  return finish_send(pkt);
}

Status OfiInstance::send_wait(driver::Packet& pkt, driver::Deadline deadline) {
  std::unique_lock lock(ctx_.mutex());
  if (pkt.driver_data[0] == mark_done) return static_cast<Status>(pkt.driver_data[2]);
  if (pkt.driver_data[0] != mark_sending) return Status::invalid_argument;
  Op* op = op_of(pkt);
  const Status s = ctx_.wait(
      lock, deadline, [](void* o) { return static_cast<Op*>(o)->done; }, op);
  if (s != Status::ok) return s;
  return finish_send(pkt);
}

// --- receive -------------------------------------------------------------

bool OfiInstance::recv_ended_by_peer() const noexcept {
  return peer_bye_ && consumed_ >= peer_sent_total_;
}

Status OfiInstance::register_recv(driver::Packet& pkt) noexcept {
  void* base = pkt.iov[0].iov_base;
  const std::size_t len = pkt.iov[0].iov_len;
  const std::uint64_t key = ctx_.mr_prov_key() ? 0 : ctx_.next_mr_key();
  int rc = fi_mr_reg(ctx_.domain(), base, len, FI_REMOTE_WRITE, 0, key, 0, &mr_, nullptr);
  if (rc == 0 && ctx_.mr_endpoint()) {
    rc = fi_mr_bind(mr_, &ctx_.ep()->fid, 0);
    if (rc == 0) rc = fi_mr_enable(mr_);
  }
  if (rc != 0) {
    PIER_LOG(debug, "ofi", "cannot register a receive: {}", fi_strerror(-rc));
    close_mr();
    return Status::system_error;
  }
  cookie_ = ctx_.next_cookie();
  Rdv rdv;
  rdv.cookie = cookie_;
  rdv.address = ctx_.mr_virt_addr() ? reinterpret_cast<std::uintptr_t>(base) : 0;
  rdv.key = fi_mr_key(mr_);
  rdv.length = len;
  encode_rdv(rdv, pkt);
  return Status::ok;
}

void OfiInstance::close_mr() noexcept {
  if (mr_ == nullptr) return;
  const int rc = fi_close(&mr_->fid);
  if (rc != 0) PIER_LOG(warn, "ofi", "cannot release a registration: {}", fi_strerror(-rc));
  mr_ = nullptr;
}

Status OfiInstance::recv_post(driver::Packet& pkt) {
  std::lock_guard lock(ctx_.mutex());
  if (!ctx_.running()) return Status::not_initialized;
  if (Status s = check_post(pkt, false); s != Status::ok) return s;
  if (recv_op_ != nullptr) return Status::invalid_argument;  // one posted receive (N7)
  switch (state_) {
    case State::idle:
      return Status::invalid_argument;
    case State::closed:
    case State::broken:
      return end_status_;
    case State::connecting:
    case State::connected:
      break;
  }
  if (recv_ended_by_peer()) return Status::closed;
  Op* op = ctx_.get_op(Op::Kind::recv, this);
  if (op == nullptr) {
    ctx_.progress();
    return Status::no_resource;
  }
  op->pkt = &pkt;
  recv_capacity_ = pkt.size();
  op->bounce = track_ == driver::Track::small && recv_capacity_ < bounce_.size();
  pkt.rdv_len = 0;
  if (track_ == driver::Track::large && ctx_.rma() && pkt.iov_count == 1 && recv_capacity_ > 0)
    (void)register_recv(pkt);  // unregistered, the receive still takes a message
  post_op(op);
  if (!op->in_provider) {
    if (op->retry) {
      std::erase(ctx_.retry_list(), op);
      op->retry = false;
    }
    const bool refused = op->done;
    op->owner = nullptr;
    ctx_.maybe_free(op);
    close_mr();
    pkt.rdv_len = 0;
    return refused ? Status::system_error : Status::no_resource;
  }
  recv_op_ = op;
  pkt.driver_data[0] = mark_receiving;
  pkt.driver_data[1] = reinterpret_cast<std::uintptr_t>(op);
  return Status::in_progress;
}

void OfiInstance::on_recv_done(Op* op) noexcept {
  if (op != recv_op_) return;
  if (op->status == Status::ok && kind_of(op->tag) == TagKind::rdv_done) {
    if (rdv_done_cookie(op->data) != (cookie_ & 0xffff) || mr_ == nullptr) {
      // A notice for a receive that is gone (canceled): not this packet.
      op->done = false;
      op->status = Status::in_progress;
      post_op(op);
      return;
    }
    const std::uint64_t size = rdv_done_size(op->data);
    op->length = std::min<std::uint64_t>(size, recv_capacity_);
    op->status = size > recv_capacity_ ? Status::truncated : Status::ok;
  }
  if (op->bounce && op->status == Status::ok) {
    const std::size_t n = std::min(op->length, recv_capacity_);
    (void)driver::copy_to_packet(*op->pkt, 0, {bounce_.data(), n});
    if (op->length > recv_capacity_) op->status = Status::truncated;
  }
  // A truncated receive is full, whatever length the provider reports.
  if (op->status == Status::truncated) op->length = recv_capacity_;
  if (op->status == Status::ok || op->status == Status::truncated) {
    op->length = std::min(op->length, recv_capacity_);
    ++consumed_;
    if (track_ == driver::Track::small && consumed_ - credit_reported_ >= ctx_.credits() / 2)
      owe_credit();
  }
  close_mr();
}

void OfiInstance::cancel_recv_op() noexcept {
  Op* op = recv_op_;
  if (op->in_provider && ctx_.ep() != nullptr) (void)fi_cancel(&ctx_.ep()->fid, &op->fctx);
}

Status OfiInstance::finish_recv(driver::Packet& pkt) noexcept {
  Op* op = recv_op_;
  const Status s = op->status;
  pkt.length = (s == Status::ok || s == Status::truncated) ? op->length : 0;
  op->reported = true;
  op->pkt = nullptr;
  recv_op_ = nullptr;
  ctx_.maybe_free(op);
  pkt.driver_data[0] = mark_done;
  pkt.driver_data[1] = 0;
  pkt.driver_data[2] = static_cast<std::uintptr_t>(s);
  return s;
}

Status OfiInstance::recv_poll(driver::Packet& pkt) {
  std::lock_guard lock(ctx_.mutex());
  if (pkt.driver_data[0] == mark_done) return static_cast<Status>(pkt.driver_data[2]);
  if (pkt.driver_data[0] != mark_receiving || recv_op_ == nullptr || op_of(pkt) != recv_op_)
    return Status::invalid_argument;
  if (!recv_op_->done) ctx_.progress();
  if (!recv_op_->done) return Status::in_progress;
  return finish_recv(pkt);
}

Status OfiInstance::recv_wait(driver::Packet& pkt, driver::Deadline deadline) {
  std::unique_lock lock(ctx_.mutex());
  if (pkt.driver_data[0] == mark_done) return static_cast<Status>(pkt.driver_data[2]);
  if (pkt.driver_data[0] != mark_receiving || recv_op_ == nullptr || op_of(pkt) != recv_op_)
    return Status::invalid_argument;
  Op* op = recv_op_;
  const Status s = ctx_.wait(
      lock, deadline, [](void* o) { return static_cast<Op*>(o)->done; }, op);
  if (s != Status::ok) return s;
  return finish_recv(pkt);
}

Status OfiInstance::recv_cancel(driver::Packet& pkt) {
  std::lock_guard lock(ctx_.mutex());
  if (pkt.driver_data[0] == mark_done) return static_cast<Status>(pkt.driver_data[2]);
  if (pkt.driver_data[0] != mark_receiving || recv_op_ == nullptr || op_of(pkt) != recv_op_)
    return Status::invalid_argument;
  Op* op = recv_op_;
  if (!op->done) ctx_.progress();
  if (!op->done) {
    cancel_recv_op();
    // The cancel (or the packet, if it won the race) comes back through the
    // completion queue.
    const auto limit = driver::Clock::now() + cancel_limit;
    while (op->in_provider && driver::Clock::now() < limit) ctx_.progress();
    if (!op->done) {
      // libfabric never answered: forget the receive rather than hang.
      PIER_LOG(warn, "ofi", "a canceled receive did not come back from libfabric");
      op->done = true;
      op->status = Status::canceled;
    }
  }
  if (op->status != Status::canceled) return finish_recv(pkt);
  (void)finish_recv(pkt);
  close_mr();
  return Status::ok;
}

}  // namespace pier::drivers::ofi
