#include "drivers/ofi/instance.hpp"

#include "base/log.hpp"
#include "driver/driver.hpp"
#include "drivers/ofi/context.hpp"

#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

#include <algorithm>
#include <array>

namespace pier::drivers::ofi {

namespace {

Op* op_of(const driver::Packet& pkt) noexcept {
  return reinterpret_cast<Op*>(pkt.driver_data[1]);
}

}  // namespace

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
  // Its bye may still be unread: what it sent before it closed stays
  // readable (the peer is declared dead only after it was read).
  if (ctx_.peer_unreachable(peer_)) return Status::broken;
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
  const std::size_t size = pkt.size();
  if (track_ == driver::Track::small && sends_in_flight_ == 0 && size <= ctx_.inject_size())
    return inject(pkt, size);
  Op* op = ctx_.get_op(Op::Kind::send, this);
  if (op == nullptr) {
    ctx_.progress();
    return Status::no_resource;
  }
  op->pkt = &pkt;
  op->length = size;
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
  post_op(op, true);  // the peer was looked at above
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
    if (!refused) return Status::no_resource;
    // libfabric refused the post: broken if the peer's context closed
    // meanwhile (another thread), else our failure.
    return ctx_.peer_unreachable(peer_) ? Status::broken : Status::system_error;
  }
  if (rma) rdv_op_ = op;
  ++sent_;
  ++sends_in_flight_;
  pkt.driver_data[0] = mark_sending;
  pkt.driver_data[1] = reinterpret_cast<std::uintptr_t>(op);
  return Status::in_progress;
}

Status OfiInstance::inject(driver::Packet& pkt, std::size_t size) noexcept {
  // libfabric copies an injected message at once and reports no completion,
  // so the packet is done now: no completion queue entry to wait for. Only
  // with nothing else in flight, so completions stay in post order.
  std::array<std::byte, max_inject> gathered;
  const void* from = nullptr;
  if (pkt.iov_count == 1) {
    from = pkt.iov[0].iov_base;
  } else {
    (void)driver::copy_from_packet(pkt, 0, {gathered.data(), size});
    from = gathered.data();
  }
  const ssize_t rc =
      fi_tinject(ctx_.ep(), from, size, ctx_.peer_addr(peer_), tag_of(TagKind::data, remote_id_));
  if (rc == -FI_EAGAIN) {
    ctx_.progress();
    return Status::no_resource;
  }
  if (rc != 0) {
    PIER_LOG(warn, "ofi", "cannot inject: {}", fi_strerror(static_cast<int>(-rc)));
    return Status::system_error;
  }
  ++sent_;
  pkt.length = size;
  pkt.driver_data[0] = mark_done;
  pkt.driver_data[1] = 0;
  pkt.driver_data[2] = static_cast<std::uintptr_t>(Status::ok);
  return Status::ok;
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

bool OfiInstance::send_lingers(Op* op) noexcept {
  // Only what reads the caller's memory (a notice carries its own bytes).
  if (!op->in_provider || ctx_.ep() == nullptr ||
      (op->kind != Op::Kind::send && op->kind != Op::Kind::rma_write))
    return false;
  // Ended (disconnect, failure) while libfabric still holds it: a send not
  // yet taken by the peer (a large message, a rendezvous) is read from the
  // caller's memory when the peer takes it, and the caller may reuse that
  // memory once we report. Reported when it left, or cancel_limit later.
  const auto now = driver::Clock::now();
  if (op->linger_until == driver::Clock::time_point{}) {
    op->linger_until = now + cancel_limit;
    // After an orderly bye the send is only waited for: the bye counted
    // it, and the peer waits for every packet its bye counts.
    if (state_ != State::closed) (void)fi_cancel(&ctx_.ep()->fid, &op->fctx);
  }
  ctx_.progress();
  if (!op->in_provider) return false;
  if (now < op->linger_until) return true;
  PIER_LOG(error, "ofi", "an ended send did not leave libfabric in time");
  return false;
}

bool OfiInstance::cancel_and_wait_sends(std::unique_lock<ContextMutex>& lock) noexcept {
  if (ctx_.ep() == nullptr || !ctx_.sends_in_provider(this)) return true;
  // After an orderly bye, waited for only (the bye counted them).
  if (state_ != State::closed) ctx_.cancel_sends(this);
  (void)ctx_.spin(
      lock, driver::Clock::now() + cancel_limit,
      [](void* self) {
        auto* inst = static_cast<OfiInstance*>(self);
        return !inst->ctx_.sends_in_provider(inst);
      },
      this);
  return !ctx_.sends_in_provider(this);
}

Status OfiInstance::send_poll(driver::Packet& pkt) {
  std::lock_guard lock(ctx_.mutex());
  if (pkt.driver_data[0] == mark_done) return static_cast<Status>(pkt.driver_data[2]);
  if (pkt.driver_data[0] != mark_sending) return Status::invalid_argument;
  Op* op = op_of(pkt);
  if (!op->done) ctx_.progress();
  if (!op->done || send_lingers(op)) return Status::in_progress;
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
  while (send_lingers(op)) {
    if (driver::Clock::now() >= deadline) return Status::timeout;
    const auto slice = std::min(deadline, driver::Clock::now() + std::chrono::milliseconds(10));
    (void)ctx_.wait(
        lock, slice, [](void* o) { return !static_cast<Op*>(o)->in_provider; }, op);
  }
  return finish_send(pkt);
}

}  // namespace pier::drivers::ofi
