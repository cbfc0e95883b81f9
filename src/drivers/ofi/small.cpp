// pier ofi: receives on a small track. The driver keeps its own receive
// posted into the instance's bounce buffer; a user receive takes the packet
// found there or waits for the next one. One copy per small packet buys
// receive-any, receives that complete at once, and cancels that never race
// libfabric.
#include "base/log.hpp"
#include "driver/driver.hpp"
#include "drivers/ofi/context.hpp"
#include "drivers/ofi/instance.hpp"

#include <rdma/fi_endpoint.h>

#include <algorithm>
#include <cstring>

namespace pier::drivers::ofi {

namespace {

bool carries_data(const Op* op) noexcept {
  return op->done && (op->status == Status::ok || op->status == Status::truncated);
}

void mark_final(driver::Packet& pkt, Status s, std::uintptr_t done_mark) noexcept {
  pkt.driver_data[0] = done_mark;
  pkt.driver_data[1] = 0;
  pkt.driver_data[2] = static_cast<std::uintptr_t>(s);
}

}  // namespace

bool OfiInstance::has_packet() const noexcept {
  return track_ == driver::Track::small && pre_op_ != nullptr && carries_data(pre_op_) &&
         user_ == nullptr;
}

void OfiInstance::post_prepost() noexcept {
  if (pre_op_ != nullptr || bounce_.empty()) return;
  if (state_ != State::connecting && state_ != State::connected) return;
  Op* op = ctx_.get_op(Op::Kind::recv, this);
  if (op == nullptr) {
    prepost_due_ = true;
    ctx_.owe_control();
    return;
  }
  prepost_due_ = false;
  op->bounce = true;
  pre_op_ = op;
  post_op(op);  // -FI_EAGAIN: the context posts it again from progress
}

void OfiInstance::on_prepost_done() noexcept {
  Op* op = pre_op_;
  if (carries_data(op)) {
    count_received();
    if (user_ != nullptr) (void)deliver(*user_);
    return;
  }
  // canceled at close, or broken: a waiting user receive ends with it.
  if (user_ != nullptr) end_user(op->status);
}

Status OfiInstance::deliver(driver::Packet& pkt) noexcept {
  Op* op = pre_op_;
  const std::size_t capacity = pkt.size();
  // A truncated completion reports what the peer sent, which may be more
  // than the bounce buffer took (a peer with a larger max packet, or a
  // hostile one): only what landed is copied.
  const std::size_t landed = std::min(op->length, bounce_.size());
  const std::size_t n = std::min(landed, capacity);
  // One iovec (a ping-pong's every receive): a plain copy. The generic walk
  // cost about 120 instructions for 8 bytes (callgrind), on the critical
  // path of every small packet.
  if (pkt.iov_count == 1) {
    if (n > 0) std::memcpy(pkt.iov[0].iov_base, bounce_.data(), n);
  } else {
    (void)driver::copy_to_packet(pkt, 0, {bounce_.data(), n});
  }
  const Status s =
      op->status == Status::ok && op->length <= capacity ? Status::ok : Status::truncated;
  pkt.length = n;
  mark_final(pkt, s, mark_done);
  if (user_ == &pkt) user_ = nullptr;
  op->reported = true;
  ctx_.maybe_free(op);
  pre_op_ = nullptr;
  post_prepost();
  delivered_epoch_ = ctx_.progress_epoch();
  return s;
}

void OfiInstance::end_user(Status s) noexcept {
  if (user_ == nullptr) return;
  user_->length = 0;
  mark_final(*user_, s, mark_done);
  user_ = nullptr;
}

void OfiInstance::end_small(Status why) noexcept {
  end_user(why);
  if (pre_op_ != nullptr && !pre_op_->done) {
    if (pre_op_->in_provider && ctx_.ep() != nullptr)
      (void)fi_cancel(&ctx_.ep()->fid, &pre_op_->fctx);
    pre_op_->done = true;
    pre_op_->status = why;
  }
}

Status OfiInstance::small_post(driver::Packet& pkt) noexcept {
  if (user_ != nullptr) return Status::invalid_argument;  // one posted receive (N7)
  // A packet already here completes the post at once: a caller that polls
  // once per round (tests under load) then takes one packet per round, not
  // one per two.
  // Not right after a packet was handed out with no progress since: the
  // queue was just read, and reading it again on a ping-pong's critical
  // path cost the tcp provider a system call (ofi_pingpong 8 B one-way,
  // same run: 10.5-11.0 us with the read, 8.5 without).
  if ((pre_op_ == nullptr || !pre_op_->done) && delivered_epoch_ != ctx_.progress_epoch())
    ctx_.progress();
  if (pre_op_ != nullptr && carries_data(pre_op_)) return deliver(pkt);
  if (pre_op_ != nullptr && pre_op_->done) return pre_op_->status;  // the bounce receive failed
  if (recv_ended_by_peer()) return Status::closed;
  if (pre_op_ == nullptr) post_prepost();
  user_ = &pkt;
  pkt.driver_data[0] = mark_receiving;
  pkt.driver_data[1] = reinterpret_cast<std::uintptr_t>(this);
  return Status::in_progress;
}

Status OfiInstance::small_poll(driver::Packet& pkt) noexcept {
  if (user_ == &pkt) ctx_.progress();
  if (user_ == &pkt && recv_ended_by_peer() && !(pre_op_ != nullptr && carries_data(pre_op_)))
    end_user(Status::closed);
  if (user_ == &pkt) return Status::in_progress;
  return static_cast<Status>(pkt.driver_data[2]);
}

Status OfiInstance::small_wait(driver::Packet& pkt, std::unique_lock<ContextMutex>& lock,
                               driver::Deadline deadline) noexcept {
  struct Waiting {
    OfiInstance* self;
    driver::Packet* pkt;
  } w{this, &pkt};
  const Status s = ctx_.wait(
      lock, deadline,
      [](void* arg) {
        auto* x = static_cast<Waiting*>(arg);
        return x->self->user_ != x->pkt;
      },
      &w);
  if (s != Status::ok) return s;
  return static_cast<Status>(pkt.driver_data[2]);
}

Status OfiInstance::small_cancel(driver::Packet& pkt) noexcept {
  ctx_.progress();
  if (user_ != &pkt) return static_cast<Status>(pkt.driver_data[2]);  // completed first
  user_ = nullptr;
  pkt.length = 0;
  mark_final(pkt, Status::canceled, mark_done);
  return Status::ok;
}

}  // namespace pier::drivers::ofi
