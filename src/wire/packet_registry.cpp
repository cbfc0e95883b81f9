#include "wire/packet_registry.hpp"

#include "wire/port.hpp"
#include "wire/portals.hpp"

#include <algorithm>
#include <cstring>

namespace pier::wire {

static_assert(StreamParser::min_head_capacity >= RtrHeader::size);
static_assert(StreamParser::min_head_capacity >= FrameHeader::size);
static_assert(StreamParser::min_head_capacity >= RtsHeader::size + PortalsHeader::size);
static_assert(StreamParser::min_head_capacity >= RtsHeader::size + PortHeader::size);

// ---- CoreHandlers ----------------------------------------------------------

Status CoreHandlers::register_handler(PacketType type, Handler handler) noexcept {
  const auto raw = static_cast<std::uint8_t>(type);
  if (!is_packet_type(raw) || type == PacketType::driver_local || !handler)
    return Status::invalid_argument;
  if (handlers_[raw]) return Status::in_use;
  handlers_[raw] = handler;
  return Status::ok;
}

const Handler* CoreHandlers::find(PacketType type) const noexcept {
  const auto raw = static_cast<std::uint8_t>(type);
  if (raw >= handlers_.size() || !handlers_[raw]) return nullptr;
  return &handlers_[raw];
}

// ---- HandlerTable ----------------------------------------------------------

HandlerTable::HandlerTable(std::uint16_t slots)
    : handlers_(std::make_unique<Handler[]>(slots)), slots_(slots) {}

Status HandlerTable::register_handler(std::uint16_t subtype, Handler handler) noexcept {
  if (subtype >= slots_ || !handler) return Status::invalid_argument;
  if (handlers_[subtype]) return Status::in_use;
  handlers_[subtype] = handler;
  return Status::ok;
}

const Handler* HandlerTable::find(std::uint16_t subtype) const noexcept {
  if (subtype >= slots_ || !handlers_[subtype]) return nullptr;
  return &handlers_[subtype];
}

// ---- StreamParser ----------------------------------------------------------

StreamParser::StreamParser(const CoreHandlers& core, const HandlerTable* local,
                           std::size_t head_capacity, void* source)
    : core_(core),
      local_(local),
      source_(source),
      head_capacity_(std::max(head_capacity, min_head_capacity)),
      staging_(std::make_unique<std::byte[]>(head_capacity_)) {}

Status StreamParser::stop(Status why) noexcept {
  state_ = State::stopped;
  status_ = why;
  return why;
}

/// Makes `need` contiguous bytes available in `out`: straight from the input
/// when they are all there and nothing is staged (no copy), else through the
/// staging buffer across as many fragments as it takes.
bool StreamParser::gather(std::span<const std::byte>& in, std::size_t need,
                          std::span<const std::byte>& out) noexcept {
  if (staged_ == 0 && in.size() >= need) {
    out = in.first(need);
    in = in.subspan(need);
    return true;
  }
  const std::size_t take = std::min(need - staged_, in.size());
  if (take > 0) std::memcpy(staging_.get() + staged_, in.data(), take);
  staged_ += take;
  in = in.subspan(take);
  if (staged_ < need) return false;
  out = {staging_.get(), need};
  staged_ = 0;
  return true;
}

Status StreamParser::on_frame(std::span<const std::byte> bytes) noexcept {
  Result<FrameHeader> frame = FrameHeader::decode(bytes);
  if (!frame) return frame.status();
  packet_ = Incoming{};
  packet_.frame = *frame;
  packet_.source = source_;
  if (frame->type == PacketType::driver_local) {
    state_ = State::wrapper;
    return Status::ok;
  }
  handler_ = core_.find(frame->type);
  // A core type nobody handles is the peer's error as much as an unknown one.
  if (handler_ == nullptr) return Status::malformed;
  packet_.body_length = frame->payload_length;
  state_ = State::head;
  return Status::ok;
}

Status StreamParser::on_wrapper(std::span<const std::byte> bytes) noexcept {
  Result<DriverLocalHeader> wrapper = DriverLocalHeader::decode(bytes);
  if (!wrapper) return wrapper.status();
  // The frame decoder guaranteed payload_length >= the wrapper's size.
  if (wrapper->length != packet_.frame.payload_length - DriverLocalHeader::size)
    return Status::malformed;
  handler_ = local_ != nullptr ? local_->find(wrapper->subtype) : nullptr;
  if (handler_ == nullptr) return Status::malformed;
  packet_.subtype = wrapper->subtype;
  packet_.body_length = wrapper->length;
  state_ = State::head;
  return Status::ok;
}

/// Checks a continuation against the bytes still to come and makes it current.
Status StreamParser::accept(const Continuation& c, bool first) noexcept {
  if (!first && c.consumed != 0) return Status::internal;
  if (c.discard) {
    if (!c.dest.empty()) return Status::internal;
  } else if (c.dest.size() > remaining_) {
    // The handler sized dest from the packet's own fields, which promise
    // more than its frame holds.
    return Status::malformed;
  } else if (c.dest.empty() && remaining_ > 0) {
    return Status::internal;
  }
  cont_ = c;
  filled_ = 0;
  return Status::ok;
}

Status StreamParser::on_head(std::span<const std::byte> head) noexcept {
  packet_.head = head;
  Continuation c{};
  const Status handled = handler_->fn(handler_->ctx, packet_, c);
  packet_.head = {};
  if (handled != Status::ok) return handled;
  if (c.consumed > head.size()) return Status::internal;
  remaining_ = packet_.body_length - c.consumed;
  if (const Status st = accept(c, true); st != Status::ok) return st;
  std::span<const std::byte> left = head.subspan(c.consumed);
  if (const Status st = deliver(left); st != Status::ok) return st;
  state_ = remaining_ > 0 ? State::rest : State::frame;
  return Status::ok;
}

Status StreamParser::deliver(std::span<const std::byte>& in) noexcept {
  while (remaining_ > 0 && !in.empty()) {
    if (cont_.discard) {
      const std::size_t n =
          static_cast<std::size_t>(std::min<std::uint64_t>(remaining_, in.size()));
      in = in.subspan(n);
      remaining_ -= n;
      continue;
    }
    const std::size_t n = std::min(cont_.dest.size() - filled_, in.size());
    std::memcpy(cont_.dest.data() + filled_, in.data(), n);
    filled_ += n;
    remaining_ -= n;
    in = in.subspan(n);
    if (filled_ < cont_.dest.size()) continue;
    if (cont_.on_done == nullptr) {
      if (remaining_ > 0) return Status::internal;
      cont_ = Continuation{};
      break;
    }
    Continuation next{};
    if (const Status st = cont_.on_done(cont_.ctx, next); st != Status::ok) return st;
    if (const Status st = accept(next, false); st != Status::ok) return st;
  }
  return Status::ok;
}

Status StreamParser::feed(std::span<const std::byte> bytes) noexcept {
  std::span<const std::byte> in = bytes;
  std::span<const std::byte> chunk;
  for (;;) {
    switch (state_) {
      case State::frame:
        // Naming a peer of another version needs only its first byte; waiting
        // for a whole frame could wait forever on a shorter foreign header.
        if (staged_ == 0 && !in.empty() && static_cast<std::uint8_t>(in[0]) != version)
          return stop(Status::version_mismatch);
        if (!gather(in, FrameHeader::size, chunk)) return Status::ok;
        if (const Status st = on_frame(chunk); st != Status::ok) return stop(st);
        break;
      case State::wrapper:
        if (!gather(in, DriverLocalHeader::size, chunk)) return Status::ok;
        if (const Status st = on_wrapper(chunk); st != Status::ok) return stop(st);
        break;
      case State::head: {
        const std::size_t need =
            static_cast<std::size_t>(std::min<std::uint64_t>(packet_.body_length, head_capacity_));
        if (!gather(in, need, chunk)) return Status::ok;
        if (const Status st = on_head(chunk); st != Status::ok) return stop(st);
        break;
      }
      case State::rest:
        if (const Status st = deliver(in); st != Status::ok) return stop(st);
        if (remaining_ > 0) return Status::ok;
        state_ = State::frame;
        break;
      case State::stopped:
        return status_;
    }
  }
}

Status StreamParser::feed_packet(std::span<const std::byte> packet) noexcept {
  if (state_ == State::stopped) return status_;
  if (!at_boundary()) return stop(Status::malformed);
  if (const Status st = feed(packet); st != Status::ok) return st;
  if (!at_boundary()) return stop(Status::malformed);
  return Status::ok;
}

}  // namespace pier::wire
