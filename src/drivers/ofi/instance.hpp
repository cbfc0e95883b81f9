// pier ofi: one instance per (gate, track). It owns no libfabric object: its
// messages go through the context's endpoint, tagged with the receiving
// instance's id. Connect is an address-vector insert plus a hello each way;
// small tracks run credit flow control so the peer's unexpected-message queue
// stays bounded; large tracks receive by RMA when the receiver's rdv_data
// reaches the sender, and by tagged messages otherwise.
#pragma once

#include "drivers/ofi/codec.hpp"
#include "drivers/ofi/lock.hpp"

#include <rdma/fi_domain.h>

#include <pier/driver.hpp>

#include <chrono>
#include <mutex>
#include <vector>

namespace pier::drivers::ofi {

class OfiContext;
struct Op;

class OfiInstance final : public driver::Instance {
 public:
  OfiInstance(OfiContext& ctx, driver::Track track, std::uint32_t id);
  ~OfiInstance() override;

  Status connect_async(std::span<const std::byte> remote_url) override;
  Status connect_wait(driver::Deadline deadline) override;
  Status disconnect() override;

  Status send_post(driver::Packet& pkt) override;
  Status send_poll(driver::Packet& pkt) override;
  Status send_wait(driver::Packet& pkt, driver::Deadline deadline) override;

  Status recv_post(driver::Packet& pkt) override;
  Status recv_poll(driver::Packet& pkt) override;
  Status recv_wait(driver::Packet& pkt, driver::Deadline deadline) override;
  Status recv_cancel(driver::Packet& pkt) override;

  // --- for the context (mutex held) ------------------------------------
  std::uint32_t id() const noexcept { return id_; }
  driver::Track track() const noexcept { return track_; }
  std::uint64_t remote_context() const noexcept { return remote_ctx_; }
  std::uint32_t remote_instance() const noexcept { return remote_id_; }
  std::size_t peer() const noexcept { return peer_; }
  bool awaiting_hello() const noexcept { return state_ == State::connecting && remote_id_ == 0; }
  bool attached() const noexcept { return state_ != State::idle; }
  void on_hello(const Control& c) noexcept;
  void on_bye(const Control& c) noexcept;
  void on_credit(const Control& c) noexcept;
  /// On demand, an acceptor still without its peer's hello asks again
  /// once `period` passed since it last asked.
  void repeat_call_back(std::chrono::steady_clock::time_point now,
                        std::chrono::steady_clock::duration period) noexcept;
  /// The peer is gone: every pending packet completes broken.
  void fail(Status why) noexcept;
  /// The peer's process or endpoint is gone. After an orderly bye what it
  /// sent is still received (then closed); without one, fail(broken).
  void on_peer_gone() noexcept;
  /// A completion of one of this instance's ops (already marked done).
  void on_recv_done(Op* op) noexcept;
  /// Posts (or re-posts) libfabric work for an op; -FI_EAGAIN leaves it
  /// for the context's retry list. A send-side op to a peer that became
  /// unreachable is ended broken instead, unless `peer_checked`: send_post()
  /// looked just before, under the same lock.
  void post_op(Op* op, bool peer_checked = false) noexcept;
  /// Sends owed control messages (hello, credit) and posts an owed
  /// small-track receive, when they could not go before.
  void flush_control() noexcept;
  /// Small track: a packet waits in the bounce buffer (receive-any).
  bool has_packet() const noexcept;

 private:
  enum class State : std::uint8_t { idle, connecting, connected, closed, broken };
  // Packet::driver_data[0]: where a packet is; [1]: its op; [2]: final status.
  static constexpr std::uintptr_t mark_sending = 0x0f15;
  static constexpr std::uintptr_t mark_receiving = 0x0f1e;
  static constexpr std::uintptr_t mark_done = 0x0f1d;

  Status check_post(const driver::Packet& pkt, bool send) const noexcept;
  // Inline: both run on every poll of a small-track receive.
  bool recv_ended_by_peer() const noexcept { return peer_bye_ && consumed_ >= peer_sent_total_; }
  Status finish_recv(driver::Packet& pkt) noexcept;
  Status finish_send(driver::Packet& pkt) noexcept;
  Status inject(driver::Packet& pkt, std::size_t size) noexcept;
  void close_mr() noexcept;
  Status register_recv(driver::Packet& pkt) noexcept;
  void cancel_recv_op() noexcept;
  /// Cancels the receive and progresses until it left the provider (at most
  /// 2 s), letting go of the context's lock (`lock`) between rounds;
  /// false when it is still there.
  bool cancel_and_wait_recv_op(std::unique_lock<ContextMutex>& lock) noexcept;
  /// The receive ended but libfabric still holds it: true while it should
  /// not be reported yet (see recv.cpp).
  bool recv_lingers() noexcept;
  /// The same for a send (it reads the caller's memory): true while `op`
  /// ended but libfabric still holds it, up to cancel_limit (send.cpp).
  bool send_lingers(Op* op) noexcept;
  /// Cancels this instance's sends libfabric still holds and progresses
  /// until they left (at most cancel_limit), letting go of `lock` between
  /// rounds; false when some are still there.
  bool cancel_and_wait_sends(std::unique_lock<ContextMutex>& lock) noexcept;
  void owe_credit() noexcept;
  void count_received() noexcept;
  bool is_user_recv(const driver::Packet& pkt) const noexcept {
    return pkt.driver_data[0] == mark_receiving && user_ == &pkt;
  }
  // small track (small.cpp)
  void post_prepost() noexcept;
  void on_prepost_done() noexcept;
  Status small_post(driver::Packet& pkt) noexcept;
  Status small_poll(driver::Packet& pkt) noexcept;
  Status small_wait(driver::Packet& pkt, std::unique_lock<ContextMutex>& lock,
                    driver::Deadline deadline) noexcept;
  Status small_cancel(driver::Packet& pkt) noexcept;
  Status deliver(driver::Packet& pkt) noexcept;
  void end_user(Status s) noexcept;
  void end_small(Status why) noexcept;

  OfiContext& ctx_;
  const driver::Track track_;
  const std::uint32_t id_;
  State state_ = State::idle;
  Status end_status_ = Status::broken;  ///< what posts answer once closed or broken
  std::size_t peer_ = 0;
  std::uint64_t remote_ctx_ = 0;
  std::uint32_t remote_id_ = 0;
  bool hello_due_ = false;
  bool hello_sent_ = false;
  /// On demand and the urls' acceptor: our hellos ask a peer that has no
  /// instance for us to open one (flag_call_back), until its hello comes.
  bool acceptor_ = false;
  bool called_back_ = false;  ///< a call back went: the peer's hello is answered
  std::chrono::steady_clock::time_point call_back_at_{};

  // send side
  /// Small track: the largest packet sent, the smaller of our max packet
  /// and the one the peer's url names (its bounce buffers' size).
  std::size_t send_max_ = 0;
  std::size_t sends_in_flight_ = 0;
  Op* rdv_op_ = nullptr;             ///< the RMA send in flight: later sends wait behind its notice
  std::uint64_t sent_ = 0;           ///< packets posted
  std::uint64_t peer_consumed_ = 0;  ///< packets the peer reported received (credits)

  // receive side
  Op* recv_op_ = nullptr;
  bool canceling_ = false;                    ///< recv_op_ is being canceled: never posted again
  driver::Clock::time_point linger_until_{};  ///< see recv_lingers()
  std::uint64_t consumed_ = 0;                ///< packets received
  std::uint64_t credit_reported_ = 0;
  bool credit_due_ = false;
  bool peer_bye_ = false;
  std::uint64_t peer_sent_total_ = 0;
  /// Small track: the driver keeps one receive of max_packet bytes posted
  /// here (pre_op_), so packets wait in the driver for receive-any, a user
  /// receive completes at once when one is here, a cancel never races the
  /// provider, and the provider never truncates (tcp;ofi_rxm loses the
  /// stream after truncating an unexpected message): pier copies out.
  std::vector<std::byte> bounce_;
  Op* pre_op_ = nullptr;
  driver::Packet* user_ = nullptr;  ///< the user receive waiting for pre_op_
  bool prepost_due_ = false;
  /// progress_epoch() when the last packet was handed out: a post before
  /// the next progress need not read the queue again.
  std::uint64_t delivered_epoch_ = ~std::uint64_t{0};
  fid_mr* mr_ = nullptr;  ///< the posted large receive's registration
  std::uint32_t cookie_ = 0;
  std::size_t recv_capacity_ = 0;
};

}  // namespace pier::drivers::ofi
