// pier self driver: pipe directions and packet bookkeeping.
#include "drivers/self/pipe.hpp"

#include "driver/packet.hpp"

namespace pier::drivers::self {

Stage stage_of(const Packet& pkt) noexcept {
  const auto raw = pkt.driver_data[0];
  // A packet never seen by this driver may carry anything: treat unknown
  // values as idle rather than trusting them.
  if (raw > static_cast<std::uintptr_t>(Stage::recv_buf_held)) return Stage::idle;
  return static_cast<Stage>(raw);
}

void set_stage(Packet& pkt, Stage stage) noexcept {
  pkt.driver_data[0] = static_cast<std::uintptr_t>(stage);
}

void complete(Packet& pkt, Stage done, Status status, std::size_t length) noexcept {
  set_stage(pkt, done);
  pkt.driver_data[1] = static_cast<std::uintptr_t>(status);
  pkt.length = length;
}

Status final_status(const Packet& pkt) noexcept {
  return static_cast<Status>(pkt.driver_data[1]);
}

void AnyWaiter::notify() noexcept {
  // Dekker with wait_any(): it raises sleepers, then reads seq; we bump seq,
  // then read sleepers (both sequentially consistent), so one of the two
  // sees the other and no wake-up is lost.
  seq.fetch_add(1, std::memory_order_seq_cst);
  if (sleepers.load(std::memory_order_seq_cst) == 0) return;
  // Through the lock: a waiter between its check and its sleep holds it.
  { std::lock_guard lock(mu); }
  cv.notify_all();
}

void Direction::init(std::uint32_t depth, std::size_t cell_bytes) {
  depth_ = depth;
  ring_ = std::make_unique<Entry[]>(depth);
  if (cell_bytes == 0) return;
  cell_bytes_ = cell_bytes;
  // for_overwrite: untouched cells cost address space, not memory.
  cells_ = std::make_unique_for_overwrite<std::byte[]>(std::size_t{depth} * cell_bytes);
  free_ = std::make_unique<std::uint32_t[]>(depth);
  for (std::uint32_t i = 0; i < depth; ++i) free_[i] = depth - 1 - i;
  free_count_ = depth;
}

void Direction::push(const Entry& e) noexcept {
  ring_[(head_ + count_) % depth_] = e;
  ++count_;
}

void Direction::pop() noexcept {
  head_ = (head_ + 1) % depth_;
  --count_;
}

bool Direction::take_cell(std::uint32_t* cell) noexcept {
  if (free_count_ == 0) return false;
  *cell = free_[--free_count_];
  return true;
}

void Direction::give_cell(std::uint32_t cell) noexcept {
  free_[free_count_++] = cell;
}

Status move_packet(const Packet& src, Packet& dst) noexcept {
  const driver::CopyResult r = driver::copy_packet(src, dst);
  dst.length = r.copied;
  return r.truncated ? Status::truncated : Status::ok;
}

Status Direction::deliver_front(Packet& dst) noexcept {
  const Entry e = front();
  pop();
  if (e.ref != nullptr) {
    const Status s = move_packet(*e.ref, dst);
    complete(*e.ref, Stage::send_done, Status::ok, e.ref->size());
    return s;
  }
  const driver::CopyResult r = driver::copy_into_packet({cell(e.cell), e.len}, dst);
  give_cell(e.cell);
  dst.length = r.copied;
  return r.truncated ? Status::truncated : Status::ok;
}

void Direction::drop_all(Status status) noexcept {
  while (!empty()) {
    const Entry e = front();
    pop();
    if (e.ref != nullptr)
      complete(*e.ref, Stage::send_done, status, 0);
    else
      give_cell(e.cell);
  }
}

void Direction::discard_all() noexcept {
  while (!empty()) {
    const Entry e = front();
    pop();
    if (e.ref == nullptr) give_cell(e.cell);
  }
}

void Direction::fail_posted(Status status) noexcept {
  if (posted == nullptr) return;
  complete(*posted, Stage::recv_done, status, 0);
  posted = nullptr;
}

}  // namespace pier::drivers::self
