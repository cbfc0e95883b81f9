// shm: one (gate, track) instance, i.e. one end of a connected pair: a
// segment with a ring per direction, and the Unix socket that set it up and
// now carries wake-ups and tells us when the peer is gone.
#pragma once

#include "drivers/shm/codec.hpp"
#include "drivers/shm/ring.hpp"
#include "drivers/shm/sys.hpp"

#include <pier/driver.hpp>

#include <sys/types.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <vector>

namespace pier::drivers::shm {

class ShmContext;

/// The longest a blocking wait sleeps before it looks for the peer's death.
inline constexpr std::chrono::milliseconds liveness_period{10};

class ShmInstance final : public driver::Instance {
 public:
  ShmInstance(ShmContext& ctx, driver::Track track) noexcept;
  ~ShmInstance() override;

  Status connect_async(std::span<const std::byte> remote_url) override;
  Status connect_wait(driver::Deadline deadline) override;
  Status disconnect() override;

  Status send_buf_get(driver::Packet& pkt) override;
  Status send_buf_post(driver::Packet& pkt, std::size_t len) override;
  Status send_post(driver::Packet& pkt) override;
  Status send_poll(driver::Packet& pkt) override;
  Status send_wait(driver::Packet& pkt, driver::Deadline deadline) override;

  Status recv_post(driver::Packet& pkt) override;
  Status recv_poll(driver::Packet& pkt) override;
  Status recv_buf_release(driver::Packet& pkt) override;
  Status recv_wait(driver::Packet& pkt, driver::Deadline deadline) override;
  Status recv_cancel(driver::Packet& pkt) override;

  // --- for the context ------------------------------------------------
  driver::Track track() const noexcept { return track_; }
  bool accepting() const noexcept { return phase_ == Phase::accepting; }
  /// The context goes away first: every later call answers not_initialized.
  void orphan() noexcept;
  bool peer_gone() const noexcept { return peer_gone_.load(std::memory_order_relaxed); }
  bool connected_to(std::span<const std::byte> url, driver::Track track) const noexcept;
  /// Takes over an accepted connection whose hello names this instance.
  void adopt(Fd sock, const Hello& hello, Fd segment) noexcept;
  /// For receive-any: a small-track packet (or news of the peer's death,
  /// once) is ready. Runs on the context's thread, so it only reads the ring
  /// and the socket; the instance's own calls act on what it finds.
  bool has_news() noexcept;
  /// Raises the receive ring's sleepers word for a sleeping wait_any();
  /// false when not connected (nothing raised).
  bool watch() noexcept;
  /// Lowers what watch() raised.
  void unwatch() noexcept;
  int socket_fd() const noexcept { return sock_.get(); }
  /// Reads what the peer sent on the socket: wake-ups, the reply, EOF. Only
  /// sets flags, so the context's thread may call it too.
  void drain_socket() noexcept;
  /// Before a single copy: the peer is still the process behind its pid.
  bool peer_present() noexcept;

 private:
  enum class Phase : std::uint8_t { unconnected, connecting, accepting, connected, failed, closed };

  // connection (instance.cpp)
  Status start_connector() noexcept;
  Status send_hello() noexcept;
  /// An acceptor of an on-demand context asks the peer to connect (a
  /// call-back hello on a connection of its own); retried while the peer's
  /// backlog is full.
  void call_back() noexcept;
  void probe_peer() noexcept;
  bool call_back_due_ = false;
  /// When the last call back left: repeated while accepting, since the peer
  /// may have dropped it.
  driver::Clock::time_point call_back_at_{};
  /// Decides cma_ok_ by a real process_vm_readv of the peer's probe word.
  void probe_single_copy() noexcept;
  void attach_rings(bool connector, const SegmentHeader& h) noexcept;
  void fail(Status why) noexcept;
  /// Turns a peer death seen by drain_socket() into the instance's failure.
  void absorb_gone() noexcept {
    if (peer_gone_.load(std::memory_order_relaxed) && phase_ == Phase::connected)
      fail(Status::broken);
  }
  /// ok when packets may move; otherwise the reason they cannot.
  Status usable() noexcept;
  void maybe_check_peer() noexcept {
    if ((++idle_polls_ & 1023u) == 0) check_peer();
  }
  /// Every 1024th idle poll: drains the control socket (EOF: the peer
  /// died) when a connection reply is due or SHM_PEER_CHECK_US passed.
  /// A recvmsg costs a microsecond or more in a VM, ten times what the
  /// 1024 polls before it cost together with an 8-byte ping-pong's waits
  /// (one wait in thirty paid it); a clock read costs 25 ns.
  [[gnu::noinline]] void check_peer() noexcept;
  /// Wakes the peer sleeping on a ring, as its sleepers word says: the
  /// futex word `futex` for a blocking wait, the socket for receive-any.
  /// Out of line: the fast path only tests the word.
  [[gnu::noinline, gnu::cold]] void wake(std::uint32_t* futex, std::uint64_t sleepers) noexcept;
  /// The peer reading our sending ring.
  void wake_reader(std::uint64_t sleepers) noexcept {
    wake(tx_.futex_word(ctl_reader_sleepers), sleepers);
  }
  /// The peer writing our receiving ring, waiting for room.
  void wake_writer(std::uint64_t sleepers) noexcept {
    wake(rx_.futex_word(ctl_writer_sleepers), sleepers);
  }
  /// Sleeps on the futex word until the ring has news, the deadline, or the
  /// liveness period passes (then looks at the socket for the peer's
  /// death); `writer` says which sleepers word to raise.
  void sleep(bool writer, driver::Deadline deadline) noexcept;
  bool spin_expired(std::int64_t& start_ns) const noexcept;
  /// A sleeping sender has something new to look at.
  bool send_news() noexcept;

  // send (send.cpp)
  void enqueue(driver::Packet& pkt) noexcept;
  void pump() noexcept;
  /// False when the ring is full (try again later).
  bool pump_frags(driver::Packet& pkt) noexcept;
  void pump_cma(driver::Packet& pkt) noexcept;
  bool pump_done(driver::Packet& pkt) noexcept;
  /// Waits for the receiver's half of a split copy (false: not yet).
  bool pump_split(driver::Packet& pkt) noexcept;
  /// The receiver's buffer as iovecs (its rdv data), in `out`; the count, or
  /// more than out.size() when it cannot be described.
  std::size_t remote_iovs(const Rdv& rdv, std::span<::iovec> out) noexcept;
  /// The receiver's half of a split copy.
  bool pull_split(const Split& sp) noexcept;
  void complete_send(driver::Packet& pkt, Status st) noexcept;

  // receive (recv.cpp)
  Status progress_recv() noexcept;
  /// Before a posted receive is ended by disconnect() or the destructor:
  /// the peer may be inside its single copy into it. Takes the receive's
  /// token back; when the peer claimed it first, progresses the receive
  /// until the copy's end (its done record, or the peer's end) or
  /// `deadline` (then logged): the caller's memory must be its own again.
  void settle_posted(driver::Deadline deadline) noexcept;
  Status complete_recv(Status st) noexcept;
  void consume(std::uint64_t lines) noexcept;

  ShmContext* ctx_;
  driver::Track track_;
  // Atomic because receive-any reads it from the context's thread.
  std::atomic<Phase> phase_{Phase::unconnected};
  std::atomic<bool> peer_gone_{false};
  std::int64_t spin_ns_ = 0;
  std::int64_t peer_check_ns_ = 0;
  Status fail_ = Status::ok;
  bool connector_ = false;
  std::vector<std::byte> remote_url_;
  Url remote_;
  Fd sock_;
  Fd segment_fd_;  ///< the connector's memfd until the hello carried it
  Mapping seg_;
  bool hello_sent_ = false;
  std::atomic<bool> reply_pending_{false};
  pid_t peer_pid_ = 0;
  bool cma_ok_ = false;
  std::uint32_t max_packet_ = 0;
  RingWriter tx_;
  RingReader rx_;
  std::uint32_t idle_polls_ = 0;
  std::int64_t checked_ns_ = 0;  ///< when check_peer() last drained the socket
  std::uint32_t any_polls_ = 0;  ///< has_news()'s own count (context thread)
  std::uint32_t watching_ = 0;   ///< watch() calls not yet undone (context thread)
  bool death_reported_ = false;

  // send state: an intrusive FIFO of posted large-track packets
  driver::Packet* send_head_ = nullptr;
  driver::Packet* send_tail_ = nullptr;
  bool buf_reserved_ = false;

  // receive state
  driver::Packet* posted_ = nullptr;
  std::size_t recv_off_ = 0;
  bool recv_trunc_ = false;
  bool in_frag_ = false;       ///< a fragmented packet is half consumed
  bool discard_frag_ = false;  ///< ...and belongs to a canceled receive
  std::uint64_t token_ = 0;    ///< rdv token of the posted receive, 0 if none
  bool split_seen_ = false;    ///< the posted receive took its one rdv_split
  bool can_pull_ = false;      ///< the posted receive offered to pull (rdv can_pull)
  SegmentHeader layout_{};     ///< the segment header we wrote (connector)
  std::uint64_t next_token_ = 1;
  bool buf_out_ = false;  ///< a recv_poll() buffer not yet released
  std::byte* buf_ptr_ = nullptr;
  std::uint64_t buf_lines_ = 0;
  /// A data-form receive flattened for the sender's single copy.
  std::array<::iovec, 64> recv_iov_{};
};

}  // namespace pier::drivers::shm
