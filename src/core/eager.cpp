// pier core: the eager protocol. The whole message travels in one small
// packet: FrameHeader, upper header, payload. On a driver with send_buf the
// packet is written straight into the driver's buffer (no bounce, no iovec);
// otherwise a two-entry iovec (prefix, payload) is posted. On arrival the
// LIB's recv() inside lib_parse copies from the driver's receive buffer
// straight to the destination; a deferred recv() finds the packet in a slot.
//
// Sender states: queued (credit or track busy) -> posted -> sent -> completed.
// Receiver: parsing -> (deferred) -> completed, in recv().
#include <algorithm>
#include <cstring>
#include <string_view>

#include "base/log.hpp"
#include "core/impl.hpp"

namespace pier::core {

namespace {

using Impl = Core::Impl;

struct EagerHandler {
  std::string_view name;
  SendState (*fn)(Impl& core, SendMsg& m) noexcept;
};

SendState eager_waiting(Impl&, SendMsg& m) noexcept {
  return m.state;
}
SendState eager_sent(Impl& core, SendMsg& m) noexcept {
  core.complete_send(m, Status::ok);  // releases m
  return SendState::completed;
}
SendState eager_done(Impl&, SendMsg&) noexcept {
  return SendState::completed;
}

/// Indexed by SendState; wait_rtr never happens to an eager message.
constexpr EagerHandler eager_table[] = {
    {"queued", eager_waiting},   {"posted", eager_waiting}, {"sent", eager_sent},
    {"wait_rtr", eager_waiting}, {"completed", eager_done},
};
static_assert(std::size(eager_table) == static_cast<std::size_t>(SendState::completed) + 1);

}  // namespace

void Core::Impl::eager_step(SendMsg& m) noexcept {
  for (;;) {
    const SendState now = m.state;
    const SendState next = eager_table[static_cast<std::size_t>(now)].fn(*this, m);
    PIER_LOG(data, "core", "eager {} -> {}", eager_table[static_cast<std::size_t>(now)].name,
             eager_table[static_cast<std::size_t>(next)].name);
    if (next == SendState::completed || next == now) return;
    m.state = next;
  }
}

void Core::Impl::fast_buffer_short(Gate& gate, Rail& rail, std::size_t got,
                                   std::size_t total) noexcept {
  // A driver bug (less than its max_packet): the buffer cannot be given
  // back without sending it, so the rail goes.
  PIER_LOG(error, "core", "rail {}: send buffer of {} bytes for a {}-byte packet", rail.spec, got,
           total);
  rail_failed(gate, rail, Status::internal);
}

bool Core::Impl::eager_handover(Gate& gate, Rail& rail, const SendArgs& a, std::byte* data,
                                RegionEntry* entry, const wire::FrameHeader& h,
                                std::uint16_t give) noexcept {
  // Still in flight: a message state takes it over, complete enough to be
  // sent again on another rail should this one fail.
  ++stats_.fast_handovers;
  SendMsg& m = *sends_.acquire();
  m.gate = &gate;
  m.cookie = a.cookie;
  m.upper = a.upper;
  m.data = data;
  m.length = a.length;
  if (entry != nullptr) ++entry->pins;
  m.region = entry;
  m.id = static_cast<std::uint32_t>(sends_.handle_of(&m));
  m.state = SendState::posted;
  SmallSend& s = m.small;
  s.kind = SmallSend::Kind::message;
  s.owner = &m;
  s.priority = a.priority;
  s.frame = h;
  s.credit_return = give;
  s.sequenced = true;
  (void)wire::encode_into(h, std::span(s.prefix).first<wire::FrameHeader::size>());
  if (!a.header.empty())
    std::memcpy(s.prefix.data() + wire::FrameHeader::size, a.header.data(), a.header.size());
  s.prefix_len = wire::FrameHeader::size + a.header.size();
  s.payload = data;
  s.payload_len = a.length;
  s.posted = &rail.fast_pkt;
  rail.fast_busy = true;
  link(gate, m);
  rail.inflight.push(&s);
  touch(gate);
  return true;
}

Status Core::Impl::eager_send(SendMsg& m) noexcept {
  Gate& gate = *m.gate;
  ++stats_.eager_sent;
  m.state = SendState::queued;
  Priority& p = gate.prio[m.small.priority];
  const bool first = p.pending.empty();
  p.pending.push(&m);
  if (gate.state == GateState::idle) start_connect(gate);
  // Straight to the driver when nothing of this priority waits ahead of it.
  if (first && gate.state == GateState::connected) flush(gate);
  return Status::ok;
}

Status Core::Impl::eager_arrival(Gate& gate, const wire::FrameHeader& h,
                                 std::span<const std::byte> payload, int slot) noexcept {
  // An upper layer's header is at most what it attached with; it may send
  // less (the port layer's compact send header). Packets for an upper with
  // no client attached are dropped further on, not failed here.
  const std::size_t header = h.upper_length;
  const auto u = static_cast<std::size_t>(h.upper);
  if (payload.size() < header || (clients_[u] != nullptr && header > header_size_[u])) {
    gate.give_slot(slot);
    return Status::malformed;
  }
  // A packet the client defers moves into a slot; a peer honouring its
  // credits always leaves one free (slots are twice the grant).
  if (slot < 0 && gate.free_slots.empty()) {
    PIER_LOG(error, "core", "rank {} overran its credits: no slot left", gate.peer);
    return Status::malformed;
  }
  Incoming* in = nullptr;
  if (Status s = acquire_incoming(gate, h.priority, in); s != Status::ok) {
    gate.give_slot(slot);
    return s;
  }
  ++stats_.eager_received;
  in->rendezvous = false;
  in->payload = payload.data() + header;
  in->slot = slot;
  return deliver(gate, h, payload.first(header), payload.size() - header, *in);
}

Status Core::Impl::eager_recv(Incoming& in, void* cookie, std::byte* dest,
                              std::size_t mlen) noexcept {
  in.cookie = cookie;
  if (in.payload == nullptr && in.length > 0) {  // lost when it was deferred
    complete_recv(in, in.status != Status::ok ? in.status : Status::malformed);
    return Status::ok;
  }
  copy_bytes(dest, in.payload, mlen);
  // The rest (rlen - mlen) is already off the wire: it came in this packet.
  complete_recv(in, Status::ok);
  return Status::ok;
}

}  // namespace pier::core
