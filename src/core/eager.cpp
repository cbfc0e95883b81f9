// pier core: the eager protocol. The whole message travels in one small
// packet: FrameHeader, upper header, payload. On a driver with send_buf the
// packet is written straight into the driver's buffer (no bounce, no iovec);
// otherwise a two-entry iovec (prefix, payload) is posted. On arrival the
// LIB's recv() inside lib_parse copies from the driver's receive buffer
// straight to the destination; a deferred recv() finds the packet in a slot.
//
// Sender states: queued (credit or track busy) -> posted -> sent -> completed.
// Receiver: parsing -> (deferred) -> completed, in recv().
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
  const std::size_t header = header_size_[static_cast<std::size_t>(h.upper)];
  if (payload.size() < header) {
    gate.give_slot(slot);
    return Status::malformed;
  }
  Incoming* in = recvs_.acquire();
  if (in == nullptr) {
    gate.give_slot(slot);
    PIER_LOG(error, "core", "no receive message state left (PIER_CORE_RECV_MSGS)");
    return Status::no_memory;
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
  if (mlen) std::memcpy(dest, in.payload, mlen);
  // The rest (rlen - mlen) is already off the wire: it came in this packet.
  complete_recv(in, Status::ok);
  return Status::ok;
}

}  // namespace pier::core
