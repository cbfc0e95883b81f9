// pier self driver: instances. Every data-path function takes the pipe lock
// once, moves bytes with memcpy and allocates nothing.
#include "drivers/self/instance.hpp"

#include <unistd.h>

#include <new>

#include "base/log.hpp"
#include "driver/packet.hpp"
#include "drivers/self/url.hpp"

namespace pier::drivers::self {

namespace {

/// driver_data[3] of a packet prefetched and not yet posted or unfetched.
constexpr std::uintptr_t prefetch_mark = 0x5e1f'fe7c;

// rdv_data of a large-track receive: "SRDV", u64 token naming the receive.
constexpr std::uint8_t rdv_size = 12;
constexpr std::uint32_t rdv_magic = 0x56445253;

void encode_rdv(Packet& pkt, std::uint64_t token) noexcept {
  for (int i = 0; i < 4; ++i) pkt.rdv_data[i] = static_cast<std::byte>(rdv_magic >> (8 * i));
  for (int i = 0; i < 8; ++i) pkt.rdv_data[4 + i] = static_cast<std::byte>(token >> (8 * i));
  pkt.rdv_len = rdv_size;
}

/// The token in a sender's rdv_data, or 0 when it is not a self rdv.
std::uint64_t decode_rdv(const Packet& pkt) noexcept {
  if (pkt.rdv_len != rdv_size) return 0;
  std::uint32_t magic = 0;
  for (int i = 0; i < 4; ++i) magic |= static_cast<std::uint32_t>(pkt.rdv_data[i]) << (8 * i);
  if (magic != rdv_magic) return 0;
  std::uint64_t token = 0;
  for (int i = 0; i < 8; ++i) token |= static_cast<std::uint64_t>(pkt.rdv_data[4 + i]) << (8 * i);
  return token;
}

/// A packet still owned by the driver cannot be posted again.
bool busy(const Packet& pkt) noexcept {
  switch (stage_of(pkt)) {
    case Stage::send_queued:
    case Stage::send_buf_held:
    case Stage::recv_posted:
    case Stage::recv_buf_held:
      return true;
    case Stage::idle:
    case Stage::send_done:
    case Stage::recv_done:
      return false;
  }
  return true;
}

}  // namespace

SelfInstance::SelfInstance(std::shared_ptr<ContextCore> ctx, Track track)
    : ctx_(std::move(ctx)), track_(track) {
  std::lock_guard lock(ctx_->mu);
  ctx_->instances.push_back(this);
}

SelfInstance::~SelfInstance() {
  if (pipe_) {
    {
      std::lock_guard lock(pipe_->mu);
      End& me = pipe_->end[side_];
      if (me == End::open) me = End::dead;
      const Status why = me == End::dead ? Status::broken : Status::closed;
      // This side's packets die with it: forget them without touching them
      // (the caller may already have freed them).
      in().posted = nullptr;
      if (pipe_->loop || me == End::dead || track_ == Track::large) out().discard_all();
      if (!pipe_->loop) {
        in().drop_all(why);
        if (out().empty()) out().fail_posted(why);
      }
    }
    pipe_->cv.notify_all();
    if (!pipe_->loop && pipe_->waiter[peer_]) pipe_->waiter[peer_]->notify();
    detach(*ctx_, remote_id_, track_, pipe_.get());
  }
  std::lock_guard lock(ctx_->mu);
  std::erase(ctx_->instances, this);
}

Status SelfInstance::unconnected() const noexcept {
  return disconnected_ ? Status::closed : Status::invalid_argument;
}

Status SelfInstance::link_status() const noexcept {
  if (pipe_->end[side_] != End::open) return Status::closed;
  switch (pipe_->end[peer_]) {
    case End::open:
      return Status::ok;
    case End::disconnected:
      return Status::closed;
    case End::dead:
      return Status::broken;
  }
  return Status::broken;
}

Status SelfInstance::connect_async(std::span<const std::byte> remote_url) {
  if (pipe_ || disconnected_) return Status::in_use;
  const Result<Url> url = decode_url(remote_url);
  if (!url) {
    PIER_LOG(debug, "self", "not a self url ({} bytes)", remote_url.size());
    return url.status();
  }
  if (url->pid != static_cast<std::uint32_t>(::getpid())) {
    PIER_LOG(debug, "self", "url of process {} is out of reach from process {}", url->pid,
             ::getpid());
    return Status::not_found;
  }
  Direction mine;
  try {
    mine.init(ctx_->settings.cells, track_ == Track::small ? ctx_->settings.cell_bytes : 0);
  } catch (const std::bad_alloc&) {
    PIER_LOG(error, "self", "cannot allocate {} cells of {} bytes", ctx_->settings.cells,
             ctx_->settings.cell_bytes);
    return Status::no_memory;
  }
  Result<Attachment> a = attach(*ctx_, url->context_id, track_, std::move(mine));
  if (!a) return a.status();
  pipe_ = std::move(a->pipe);
  side_ = a->side;
  peer_ = pipe_->loop ? side_ : 1 - side_;
  remote_id_ = url->context_id;
  return Status::ok;
}

Status SelfInstance::connect_wait(pier::driver::Deadline deadline) {
  if (!pipe_) return unconnected();
  std::unique_lock lock(pipe_->mu);
  if (!pipe_->cv.wait_until(lock, deadline, [&] { return pipe_->attached[peer_]; }))
    return Status::timeout;
  return pipe_->end[peer_] == End::dead ? Status::broken : Status::ok;
}

Status SelfInstance::disconnect() {
  if (!pipe_) {
    disconnected_ = true;
    return Status::ok;
  }
  {
    std::lock_guard lock(pipe_->mu);
    if (pipe_->end[side_] != End::open) return Status::ok;
    pipe_->end[side_] = End::disconnected;
    // Sends waiting by reference will never move; small-track cells were
    // already sent and stay for the peer to drain.
    if (track_ == Track::large || pipe_->loop) out().drop_all(Status::closed);
    in().fail_posted(Status::closed);
    in().drop_all(Status::closed);
    if (out().empty()) out().fail_posted(Status::closed);
  }
  pipe_->cv.notify_all();
  return Status::ok;
}

// --- send -------------------------------------------------------------

Status SelfInstance::send_buf_get(Packet& pkt) {
  if (!pipe_) return unconnected();
  if (track_ != Track::small || busy(pkt)) return Status::invalid_argument;
  std::lock_guard lock(pipe_->mu);
  if (const Status link = link_status(); link != Status::ok) return link;
  std::uint32_t cell = 0;
  if (!out().take_cell(&cell)) return Status::no_resource;
  pkt.form = Packet::Form::buffer;
  pkt.buf = out().cell(cell);
  pkt.buf_len = out().cell_bytes();
  pkt.driver_data[2] = cell;
  set_stage(pkt, Stage::send_buf_held);
  return Status::ok;
}

Status SelfInstance::send_buf_post(Packet& pkt, std::size_t len) {
  if (!pipe_) return unconnected();
  if (stage_of(pkt) != Stage::send_buf_held || pkt.form != Packet::Form::buffer ||
      len > pkt.buf_len)
    return Status::invalid_argument;
  std::lock_guard lock(pipe_->mu);
  Direction& d = out();
  if (!d.owns(pkt.driver_data[2], pkt.buf)) return Status::invalid_argument;
  const auto cell = static_cast<std::uint32_t>(pkt.driver_data[2]);
  pkt.buf = nullptr;
  pkt.buf_len = 0;
  if (const Status link = link_status(); link != Status::ok) {
    d.give_cell(cell);
    complete(pkt, Stage::send_done, link, 0);
    return link;
  }
  if (d.posted != nullptr && d.empty()) {
    Packet& dst = *d.posted;
    d.posted = nullptr;
    const driver::CopyResult r = driver::copy_into_packet({d.cell(cell), len}, dst);
    complete(dst, Stage::recv_done, r.truncated ? Status::truncated : Status::ok, r.copied);
    d.give_cell(cell);
    pipe_->cv.notify_all();
  } else {
    // The held cell reserved its ring slot: a small-track ring never holds
    // more entries than there are cells out of the pool.
    d.push({nullptr, cell, len});
    if (pipe_->waiter[peer_]) pipe_->waiter[peer_]->notify();
    pipe_->cv.notify_all();
  }
  complete(pkt, Stage::send_done, Status::ok, len);
  return Status::ok;
}

Status SelfInstance::send_post(Packet& pkt) {
  if (!pipe_) return unconnected();
  if (busy(pkt)) return Status::invalid_argument;
  if (const Status v = driver::validate_post(pkt, Settings::max_iov, true); v != Status::ok)
    return v;
  const std::size_t len = pkt.size();
  if (track_ == Track::small && len > ctx_->settings.cell_bytes) return Status::invalid_argument;
  const std::uint64_t token = track_ == Track::large && pkt.rdv_len != 0 ? decode_rdv(pkt) : 0;
  if (track_ == Track::large && pkt.rdv_len != 0 && token == 0) return Status::invalid_argument;

  std::lock_guard lock(pipe_->mu);
  if (const Status link = link_status(); link != Status::ok) return link;
  Direction& d = out();
  // rdv_data names a receive of this pipe; a token it never issued is forged
  // or from another connection. A receive completed or canceled since is
  // fine: the data then queues like any other.
  if (token > d.last_token) return Status::invalid_argument;
  pkt.driver_data[3] = 0;
  if (d.posted != nullptr && d.empty()) {
    Packet& dst = *d.posted;
    d.posted = nullptr;
    const Status moved = move_packet(pkt, dst);
    complete(dst, Stage::recv_done, moved, dst.length);
    complete(pkt, Stage::send_done, Status::ok, len);
    pipe_->cv.notify_all();
    return Status::ok;
  }
  if (d.full()) return Status::no_resource;
  if (track_ == Track::small) {
    std::uint32_t cell = 0;
    if (!d.take_cell(&cell)) return Status::no_resource;
    driver::copy_from_packet(pkt, 0, {d.cell(cell), len});
    d.push({nullptr, cell, len});
    complete(pkt, Stage::send_done, Status::ok, len);
    if (pipe_->waiter[peer_]) pipe_->waiter[peer_]->notify();
    pipe_->cv.notify_all();
    return Status::ok;
  }
  d.push({&pkt, 0, len});
  set_stage(pkt, Stage::send_queued);
  pkt.length = 0;
  pipe_->cv.notify_all();
  return Status::in_progress;
}

Status SelfInstance::send_poll_locked(Packet& pkt) noexcept {
  switch (stage_of(pkt)) {
    case Stage::send_queued:
      return Status::in_progress;
    case Stage::send_done:
      return final_status(pkt);
    default:
      return Status::invalid_argument;
  }
}

Status SelfInstance::send_poll(Packet& pkt) {
  if (!pipe_) return unconnected();
  std::lock_guard lock(pipe_->mu);
  return send_poll_locked(pkt);
}

Status SelfInstance::send_wait(Packet& pkt, pier::driver::Deadline deadline) {
  if (!pipe_) return unconnected();
  std::unique_lock lock(pipe_->mu);
  Status s = Status::in_progress;
  const bool done = pipe_->cv.wait_until(lock, deadline, [&] {
    s = send_poll_locked(pkt);
    return s != Status::in_progress;
  });
  return done ? s : Status::timeout;
}

Status SelfInstance::send_prefetch(Packet& pkt) {
  if (busy(pkt)) return Status::invalid_argument;
  if (const Status v = driver::validate_post(pkt, Settings::max_iov, true); v != Status::ok)
    return v;
  pkt.driver_data[3] = prefetch_mark;
  return Status::ok;
}

Status SelfInstance::send_unfetch(Packet& pkt) {
  if (pkt.driver_data[3] != prefetch_mark) return Status::invalid_argument;
  pkt.driver_data[3] = 0;
  return Status::ok;
}

// --- receive ----------------------------------------------------------

Status SelfInstance::recv_post(Packet& pkt) {
  if (!pipe_) return unconnected();
  if (busy(pkt)) return Status::invalid_argument;
  if (const Status v = driver::validate_post(pkt, Settings::max_iov, true); v != Status::ok)
    return v;
  std::lock_guard lock(pipe_->mu);
  Direction& d = in();
  if (pipe_->end[side_] != End::open) return Status::closed;
  if (d.posted != nullptr) return Status::invalid_argument;
  pkt.driver_data[3] = 0;
  if (!d.empty()) {
    const Status s = d.deliver_front(pkt);
    complete(pkt, Stage::recv_done, s, pkt.length);
    pipe_->cv.notify_all();
    return s;
  }
  if (const Status link = link_status(); link != Status::ok) return link;
  d.posted = &pkt;
  set_stage(pkt, Stage::recv_posted);
  pkt.length = 0;
  if (track_ == Track::large) encode_rdv(pkt, ++d.last_token);
  return Status::in_progress;
}

Status SelfInstance::recv_poll_locked(Packet& pkt) noexcept {
  switch (stage_of(pkt)) {
    case Stage::recv_posted:
      return Status::in_progress;
    case Stage::recv_done:
      return final_status(pkt);
    case Stage::idle:
    case Stage::send_done:
      break;  // no receive posted: a buffer receive
    case Stage::send_queued:
    case Stage::send_buf_held:
    case Stage::recv_buf_held:
      return Status::invalid_argument;
  }
  if (track_ != Track::small) return Status::invalid_argument;
  Direction& d = in();
  if (d.empty()) {
    const Status link = link_status();
    return link == Status::ok ? Status::in_progress : link;
  }
  const Entry e = d.front();
  d.pop();
  pkt.form = Packet::Form::buffer;
  pkt.buf = d.cell(e.cell);
  pkt.buf_len = e.len;
  pkt.length = e.len;
  pkt.driver_data[2] = e.cell;
  set_stage(pkt, Stage::recv_buf_held);
  return Status::ok;
}

Status SelfInstance::recv_poll(Packet& pkt) {
  if (!pipe_) return unconnected();
  std::lock_guard lock(pipe_->mu);
  return recv_poll_locked(pkt);
}

Status SelfInstance::recv_buf_release(Packet& pkt) {
  if (!pipe_) return unconnected();
  if (stage_of(pkt) != Stage::recv_buf_held) return Status::invalid_argument;
  std::lock_guard lock(pipe_->mu);
  if (!in().owns(pkt.driver_data[2], pkt.buf)) return Status::invalid_argument;
  in().give_cell(static_cast<std::uint32_t>(pkt.driver_data[2]));
  set_stage(pkt, Stage::idle);
  pkt.buf = nullptr;
  pkt.buf_len = 0;
  return Status::ok;
}

Status SelfInstance::recv_wait(Packet& pkt, pier::driver::Deadline deadline) {
  if (!pipe_) return unconnected();
  std::unique_lock lock(pipe_->mu);
  Status s = Status::in_progress;
  const bool done = pipe_->cv.wait_until(lock, deadline, [&] {
    s = recv_poll_locked(pkt);
    return s != Status::in_progress;
  });
  return done ? s : Status::timeout;
}

Status SelfInstance::recv_cancel(Packet& pkt) {
  if (!pipe_) return unconnected();
  std::lock_guard lock(pipe_->mu);
  switch (stage_of(pkt)) {
    case Stage::recv_posted:
      if (in().posted == &pkt) in().posted = nullptr;
      complete(pkt, Stage::recv_done, Status::canceled, 0);
      return Status::ok;
    case Stage::recv_done:
      return final_status(pkt);
    default:
      return Status::invalid_argument;
  }
}

Status SelfInstance::recv_prefetch(Packet& pkt) {
  if (busy(pkt)) return Status::invalid_argument;
  if (const Status v = driver::validate_post(pkt, Settings::max_iov, true); v != Status::ok)
    return v;
  pkt.driver_data[3] = prefetch_mark;
  return Status::ok;
}

Status SelfInstance::recv_unfetch(Packet& pkt) {
  if (pkt.driver_data[3] != prefetch_mark) return Status::invalid_argument;
  pkt.driver_data[3] = 0;
  return Status::ok;
}

bool SelfInstance::has_ready() noexcept {
  if (!pipe_ || track_ != Track::small) return false;
  std::lock_guard lock(pipe_->mu);
  return pipe_->end[side_] == End::open && !in().empty();
}

}  // namespace pier::drivers::self
