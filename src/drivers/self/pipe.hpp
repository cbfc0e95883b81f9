// pier self driver: the pipe shared by the two instances of one connection.
//
// A pipe has two directions; direction s carries packets sent by side s.
// Everything in a pipe is guarded by its one mutex, so the two instances may
// be driven from two threads. Small tracks copy each packet into a cell (the
// send completes at once, like a real driver's eager buffer); large tracks
// queue a reference to the sender's packet and the receiver copies straight
// from it (single copy; the send completes when the data has moved). Cells and
// rings are sized when the instance connects; nothing is allocated per packet.
#pragma once

#include <pier/driver.hpp>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>

namespace pier::drivers::self {

using pier::driver::Packet;
using pier::driver::Track;

/// Where a packet stands, kept in Packet::driver_data[0]; [1] holds the final
/// status, [2] the cell a buffer form packet holds, [3] the prefetch mark.
enum class Stage : std::uintptr_t {
  idle = 0,
  send_queued,    ///< by reference in a ring, waiting for the receiver
  send_done,      ///< final status in driver_data[1]
  send_buf_held,  ///< owns a cell from send_buf_get()
  recv_posted,    ///< the direction's posted receive
  recv_done,      ///< final status in driver_data[1]
  recv_buf_held,  ///< owns a cell from a buffer receive
};

Stage stage_of(const Packet& pkt) noexcept;
void set_stage(Packet& pkt, Stage stage) noexcept;
/// Records a final status and length; the stage becomes send_done/recv_done.
void complete(Packet& pkt, Stage done, Status status, std::size_t length) noexcept;
Status final_status(const Packet& pkt) noexcept;

/// How one side of a pipe ended: a disconnect lets the peer drain what was
/// already sent, then answers closed; a destroyed instance is dead (broken).
enum class End : std::uint8_t { open, disconnected, dead };

/// A context's receive-any wake-up, shared with the pipes that feed it.
struct AnyWaiter {
  std::mutex mu;
  std::condition_variable cv;
  /// Bumped by every packet; a waiter sleeps only while it is unchanged.
  std::atomic<std::uint64_t> seq{0};
  /// Threads inside wait_any's sleep: a sender takes the lock and wakes
  /// only when there is one, so a send costs no lock and no futex call.
  std::atomic<int> sleepers{0};
  bool cancel_pending = false;  ///< guarded by mu
  void notify() noexcept;
};

/// One queued packet: in a cell (ref == nullptr) or by reference.
struct Entry {
  Packet* ref = nullptr;
  std::uint32_t cell = 0;
  std::size_t len = 0;
};

/// The packets one side has sent and not yet handed to the other, plus the
/// other side's posted receive.
class Direction {
 public:
  /// Sizes the ring, and the cells when `cell_bytes` > 0. Setup only.
  void init(std::uint32_t depth, std::size_t cell_bytes);

  bool empty() const noexcept { return count_ == 0; }
  bool full() const noexcept { return count_ == depth_; }
  const Entry& front() const noexcept { return ring_[head_]; }
  void push(const Entry& e) noexcept;
  void pop() noexcept;

  /// A free cell index, or false when all are held or queued.
  bool take_cell(std::uint32_t* cell) noexcept;
  void give_cell(std::uint32_t cell) noexcept;
  std::byte* cell(std::uint32_t index) noexcept { return cells_.get() + index * cell_bytes_; }
  std::size_t cell_bytes() const noexcept { return cell_bytes_; }
  /// Whether `ptr` is the start of cell `index` of this direction: a buffer
  /// handed back must be one this direction handed out.
  bool owns(std::uintptr_t index, const std::byte* ptr) const noexcept {
    return cells_ && index < depth_ && ptr == cells_.get() + index * cell_bytes_;
  }

  /// Moves the front packet into `dst` (completing a by-reference sender)
  /// and pops it; ok or truncated.
  Status deliver_front(Packet& dst) noexcept;
  /// Completes every by-reference sender with `status` and drops every
  /// queued packet (their cells return to the pool).
  void drop_all(Status status) noexcept;
  /// Drops every queued packet without touching by-reference senders (their
  /// owner is going away and may have freed them).
  void discard_all() noexcept;
  /// Completes the posted receive, if any, with `status`.
  void fail_posted(Status status) noexcept;

  Packet* posted = nullptr;      ///< the receiver's pending receive
  std::uint64_t last_token = 0;  ///< names the latest posted receive (rdv_data)

 private:
  std::unique_ptr<Entry[]> ring_;
  std::uint32_t depth_ = 0;
  std::uint32_t head_ = 0;
  std::uint32_t count_ = 0;
  std::unique_ptr<std::byte[]> cells_;
  std::size_t cell_bytes_ = 0;
  std::unique_ptr<std::uint32_t[]> free_;
  std::uint32_t free_count_ = 0;
};

/// Copies a sender's packet into a receiver's: ok or truncated; sets
/// dst.length.
Status move_packet(const Packet& src, Packet& dst) noexcept;

struct Pipe {
  explicit Pipe(Track t) : track(t) {}
  std::mutex mu;
  /// Wakes send_wait(), recv_wait() and connect_wait() on any change.
  std::condition_variable cv;
  const Track track;
  bool loop = false;  ///< one instance connected to its own context
  bool attached[2] = {false, false};
  End end[2] = {End::open, End::open};
  Direction dir[2];
  std::shared_ptr<AnyWaiter> waiter[2];  ///< receive-any of the side's context
};

}  // namespace pier::drivers::self
