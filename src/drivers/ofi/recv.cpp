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

Op* op_of(const driver::Packet& pkt) noexcept {
  return reinterpret_cast<Op*>(pkt.driver_data[1]);
}

}  // namespace

// --- receive (large track; small.cpp has the small one) --------------------

Status OfiInstance::register_recv(driver::Packet& pkt) noexcept {
  void* base = pkt.iov[0].iov_base;
  const std::size_t len = pkt.iov[0].iov_len;
  int rc = -FI_ENOKEY;
  for (int tries = 0; rc == -FI_ENOKEY && tries < 8; ++tries) {  // a random key already taken
    const std::uint64_t key = ctx_.mr_prov_key() ? 0 : ctx_.next_mr_key();
    rc = fi_mr_reg(ctx_.domain(), base, len, FI_REMOTE_WRITE, 0, key, 0, &mr_, nullptr);
  }
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
  if (track_ == driver::Track::small) return small_post(pkt);
  if (recv_op_ != nullptr) return Status::invalid_argument;  // one posted receive (N7)
  if (recv_ended_by_peer()) return Status::closed;
  Op* op = ctx_.get_op(Op::Kind::recv, this);
  if (op == nullptr) {
    ctx_.progress();
    return Status::no_resource;
  }
  op->pkt = &pkt;
  recv_capacity_ = pkt.size();
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
  canceling_ = false;
  pkt.driver_data[0] = mark_receiving;
  pkt.driver_data[1] = reinterpret_cast<std::uintptr_t>(op);
  return Status::in_progress;
}

void OfiInstance::count_received() noexcept {
  ++consumed_;
  if (track_ == driver::Track::small && consumed_ - credit_reported_ >= ctx_.credits() / 2)
    owe_credit();
}

void OfiInstance::on_recv_done(Op* op) noexcept {
  if (op == pre_op_) {
    on_prepost_done();
    return;
  }
  if (op != recv_op_) return;
  if (op->status == Status::ok && kind_of(op->tag) == TagKind::rdv_done) {
    if (rdv_done_cookie(op->data) != (cookie_ & 0xffff) || mr_ == nullptr) {
      // A notice for a receive canceled after the write landed: still a
      // packet the peer counts in its bye (uncounted, the next receive
      // would wait for it once the peer has closed, for ever).
      ++consumed_;
      if (canceling_) {
        // Being canceled (or destroyed): posting it again would leave a
        // receive into the caller's memory that nobody cancels.
        op->status = Status::canceled;
        close_mr();
        return;
      }
      if (recv_ended_by_peer()) {
        // It was the last packet the peer's bye counted (the bye came
        // first): nothing more will come for this receive.
        op->status = Status::closed;
        close_mr();
        return;
      }
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
  // A truncated receive is full, whatever length the provider reports.
  if (op->status == Status::truncated) op->length = recv_capacity_;
  if (op->status == Status::ok || op->status == Status::truncated) {
    op->length = std::min(op->length, recv_capacity_);
    count_received();
  }
  close_mr();
}

void OfiInstance::cancel_recv_op() noexcept {
  Op* op = recv_op_;
  canceling_ = true;
  if (op->in_provider && ctx_.ep() != nullptr) (void)fi_cancel(&ctx_.ep()->fid, &op->fctx);
}

bool OfiInstance::recv_lingers() noexcept {
  Op* op = recv_op_;
  if (!op->in_provider || ctx_.ep() == nullptr) return false;
  // Ended (closed, broken) while libfabric still holds it: a matched
  // receive cannot be canceled, and the caller may free its memory once
  // we report. Reported when it left, or at most cancel_limit later.
  const auto now = driver::Clock::now();
  if (linger_until_ == driver::Clock::time_point{}) {
    linger_until_ = now + cancel_limit;
    cancel_recv_op();
  }
  ctx_.progress();
  if (!op->in_provider) return false;
  if (now < linger_until_) return true;
  PIER_LOG(error, "ofi", "an ended receive did not leave libfabric in time");
  return false;
}

bool OfiInstance::cancel_and_wait_recv_op(std::unique_lock<ContextMutex>& lock) noexcept {
  Op* op = recv_op_;
  cancel_recv_op();
  // The cancel comes back through the completion queue; a receive already
  // matched (an rxm rendezvous, say) cannot be canceled and comes back when
  // its data has landed. The wait lets go of the context's lock between
  // rounds, so the other instances' calls go on meanwhile.
  if (op->in_provider && ctx_.ep() != nullptr)
    (void)ctx_.spin(
        lock, driver::Clock::now() + cancel_limit,
        [](void* o) { return !static_cast<Op*>(o)->in_provider; }, op);
  return !op->in_provider;
}

Status OfiInstance::finish_recv(driver::Packet& pkt) noexcept {
  Op* op = recv_op_;
  const Status s = op->status;
  pkt.length = (s == Status::ok || s == Status::truncated) ? op->length : 0;
  op->reported = true;
  op->pkt = nullptr;
  recv_op_ = nullptr;
  linger_until_ = {};
  ctx_.maybe_free(op);
  pkt.driver_data[0] = mark_done;
  pkt.driver_data[1] = 0;
  pkt.driver_data[2] = static_cast<std::uintptr_t>(s);
  return s;
}

Status OfiInstance::recv_poll(driver::Packet& pkt) {
  std::lock_guard lock(ctx_.mutex());
  if (pkt.driver_data[0] == mark_done) return static_cast<Status>(pkt.driver_data[2]);
  if (track_ == driver::Track::small)
    return is_user_recv(pkt) ? small_poll(pkt) : Status::invalid_argument;
  if (pkt.driver_data[0] != mark_receiving || recv_op_ == nullptr || op_of(pkt) != recv_op_)
    return Status::invalid_argument;
  if (!recv_op_->done) ctx_.progress();
  if (!recv_op_->done || recv_lingers()) return Status::in_progress;
  return finish_recv(pkt);
}

Status OfiInstance::recv_wait(driver::Packet& pkt, driver::Deadline deadline) {
  std::unique_lock lock(ctx_.mutex());
  if (pkt.driver_data[0] == mark_done) return static_cast<Status>(pkt.driver_data[2]);
  if (track_ == driver::Track::small)
    return is_user_recv(pkt) ? small_wait(pkt, lock, deadline) : Status::invalid_argument;
  if (pkt.driver_data[0] != mark_receiving || recv_op_ == nullptr || op_of(pkt) != recv_op_)
    return Status::invalid_argument;
  Op* op = recv_op_;
  const Status s = ctx_.wait(
      lock, deadline, [](void* o) { return static_cast<Op*>(o)->done; }, op);
  if (s != Status::ok) return s;
  while (recv_lingers()) {
    if (driver::Clock::now() >= deadline) return Status::timeout;
    const auto slice = std::min(deadline, driver::Clock::now() + std::chrono::milliseconds(10));
    (void)ctx_.wait(
        lock, slice, [](void* o) { return !static_cast<Op*>(o)->in_provider; }, op);
  }
  return finish_recv(pkt);
}

Status OfiInstance::recv_cancel(driver::Packet& pkt) {
  std::unique_lock lock(ctx_.mutex());
  if (pkt.driver_data[0] == mark_done) return static_cast<Status>(pkt.driver_data[2]);
  if (track_ == driver::Track::small)
    return is_user_recv(pkt) ? small_cancel(pkt) : Status::invalid_argument;
  if (pkt.driver_data[0] != mark_receiving || recv_op_ == nullptr || op_of(pkt) != recv_op_)
    return Status::invalid_argument;
  Op* op = recv_op_;
  if (!op->done) ctx_.progress();
  if (!op->done) {
    cancel_and_wait_recv_op(lock);
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
