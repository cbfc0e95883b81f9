// pier-perf over the GM-style ports (include/pier/port.hpp), the way a GM
// program streams: data at low priority into receive buffers of the
// message's size class, provided again as they fill; control values at
// high priority into buffers of size 4 (8 bytes). Sends take tokens and
// complete in their callback (a SENT event given to unknown()).
#include "api.hpp"

#include <pier/driver.hpp>
#include "base/config.hpp"
#include "core/core.hpp"

#include <pier/port.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <deque>

namespace pier::perf {
namespace {

constexpr unsigned port_id = 2;
constexpr unsigned ctrl_size_class = 4;  ///< 2^4 - 8 = 8 bytes
constexpr std::uint8_t data_tag = 0, ctrl_tag = 1;
constexpr unsigned ctrl_buffers = 8;
/// Receive buffers of one size class provided at a time: enough to keep a
/// stream going, no more than 64 MiB of them.
constexpr std::size_t arena_bytes = std::size_t{64} << 20;
constexpr unsigned max_data_buffers = 16;

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    const auto comma = text.find(',', start);
    const auto end = comma == std::string::npos ? text.size() : comma;
    if (end > start) out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

unsigned buffers_for(unsigned size_class) {
  const std::size_t each = std::size_t{1} << size_class;
  return static_cast<unsigned>(std::clamp<std::size_t>(arena_bytes / each, 2, max_data_buffers));
}

class PortTransport final : public Transport {
 public:
  ~PortTransport() override {
    port_.reset();  // before the node, as port.hpp asks; then the core
    node_.reset();
    core_.reset();
  }

  /// Brings up a core of our own over `core_drivers`; its address is then
  /// given to the peer.
  Failure create_core(const std::string& core_drivers, std::uint32_t rank) {
    rank_ = rank;
    for (const auto& spec : split_list(core_drivers)) {
      auto ctx = driver::make_context(spec);
      if (!ctx) return {ctx.status(), fmt::format("no such driver {}", spec)};
      if (auto reason = (*ctx)->unavailable_reason(); !reason.empty())
        return {Status::unsupported, std::string(reason)};
    }
    // Before the core comes up: it reads its driver list in create().
    if (!core_drivers.empty())
      if (Status s = config::set("CORE_DRIVERS", core_drivers); s != Status::ok)
        return {s, fmt::format("PIER_CORE_DRIVERS={} refused", core_drivers)};
    auto made = core::Core::create(rank, 2);
    if (!made) return {made.status(), "core::Core::create"};
    core_ = std::move(*made);
    return {};
  }
  const std::vector<std::byte>& address() const noexcept { return core_->address(); }

  Failure connect(std::vector<std::byte> peer, std::size_t largest, Deadline deadline) {
    std::vector<std::vector<std::byte>> all(2);
    all[rank_] = core_->address();
    all[1 - rank_] = std::move(peer);
    const auto left_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (Status s =
            core_->connect(all, base::Deadline::after_ms(std::max<std::int64_t>(left_ms, 1)));
        s != Status::ok)
      return {s, "core connect"};
    auto node = port::Node::attach(*core_);
    if (!node) return {node.status(), "port::Node::attach"};
    node_ = std::move(*node);
    auto opened = node_->open(port_id);
    if (!opened) return {opened.status(), "Node::open"};
    port_ = std::move(*opened);
    const unsigned top = port::min_size_for_length(std::max<std::size_t>(largest, 8));
    std::size_t arena = 0;
    for (unsigned s = port::min_size; s <= top; ++s)
      arena = std::max(arena, std::size_t{buffers_for(s)} << s);
    arena_.assign(arena, std::byte{0});
    send_buf_.assign(std::max<std::size_t>(largest, 8), std::byte{0x5a});
    ctrl_out_.assign(64, 0);
    ctrl_in_.assign(ctrl_buffers, 0);
    if (port_->receive_tokens() < ctrl_buffers + 2)
      return {Status::no_resource, "too few receive tokens (PIER_PORT_RECV_TOKENS)"};
    for (unsigned i = 0; i < ctrl_buffers; ++i)
      if (Status s = port_->provide_receive_buffer(&ctrl_in_[i], ctrl_size_class,
                                                   port::Priority::high, ctrl_tag);
          s != Status::ok)
        return {s, "provide_receive_buffer (control)"};
    return {};
  }

  std::span<std::byte> send_bytes(std::size_t size) noexcept override {
    return std::span(send_buf_).first(size);
  }

  Failure expect_data(std::size_t size, std::size_t count) noexcept override {
    if (provided_ != 0 || to_provide_ != 0)
      return {Status::internal, "receive buffers of an earlier phase are still provided"};
    class_ = port::min_size_for_length(size);
    slots_ = landing_buffers(size);
    to_provide_ = count;
    for (std::size_t i = 0; i < slots_ && to_provide_ > 0; ++i)
      if (Failure f = provide(arena_.data() + (i << class_))) return f;
    return {};
  }

  Failure post_data(std::size_t size, std::size_t max_in_flight,
                    Deadline deadline) noexcept override {
    const unsigned s = port::min_size_for_length(size);
    // No more in flight than the receiver has buffers for (it provides
    // buffers_for() of them, as we compute it): a send that finds no buffer
    // waits at the target and, on a loaded host, meets the port's send
    // timeout (PIER_PORT_SEND_TIMEOUT_MS).
    const std::size_t window = std::min<std::size_t>(max_in_flight, buffers_for(s));
    return send(send_buf_.data(), s, size, port::Priority::low, window, deadline);
  }

  Failure finish_sends(Deadline deadline) noexcept override {
    return poll_until([&] { return sends_done_ == sends_started_; }, deadline, "send completion");
  }

  Failure wait_data(std::size_t size, Deadline deadline,
                    std::span<std::byte>* landed) noexcept override {
    if (Failure f = poll_until([&] { return data_ready_; }, deadline, "data receive")) return f;
    data_ready_ = false;
    if (data_length_ != size)
      return {Status::truncated, fmt::format("received {} bytes, expected {}", data_length_, size)};
    *landed = {static_cast<std::byte*>(data_at_), data_length_};
    return {};
  }

  Failure release_data(std::span<std::byte> landed) noexcept override {
    // A FAST message's bytes were pier's; the buffer itself is data_buffer_.
    (void)landed;
    --provided_;
    if (to_provide_ == 0) return {};
    return provide(data_buffer_);
  }
  bool stream_lands_apart() const noexcept override { return true; }
  std::size_t landing_buffers(std::size_t size) const noexcept override {
    const unsigned room = port_->receive_tokens() - ctrl_buffers;
    return std::min<std::size_t>(buffers_for(port::min_size_for_length(size)), room);
  }

  Failure send_ctrl(std::uint64_t value, Deadline deadline) noexcept override {
    std::uint64_t& slot = ctrl_out_[ctrl_sent_++ % ctrl_out_.size()];
    slot = value;
    return send(&slot, ctrl_size_class, 8, port::Priority::high, ctrl_out_.size(), deadline);
  }

  Failure recv_ctrl(std::uint64_t* value, Deadline deadline) noexcept override {
    if (Failure f = poll_until([&] { return !ctrl_values_.empty(); }, deadline, "control receive"))
      return f;
    *value = ctrl_values_.front();
    ctrl_values_.pop_front();
    return {};
  }

  /// Lets the peer's last sends be answered: acknowledgements leave on our
  /// polls, so we keep polling a little after our own sends completed.
  void drain(Deadline deadline) noexcept override {
    (void)finish_sends(deadline);
    const auto until = std::min(deadline, Clock::now() + std::chrono::milliseconds(20));
    while (Clock::now() < until) (void)poll_once();
  }

 private:
  static void on_sent(port::Port&, void* context, Status status) {
    auto* self = static_cast<PortTransport*>(context);
    ++self->sends_done_;
    if (status != Status::ok && self->send_failure_ == Status::ok) self->send_failure_ = status;
  }

  Failure provide(void* buffer) noexcept {
    const Status s = port_->provide_receive_buffer(buffer, class_, port::Priority::low, data_tag);
    if (s != Status::ok) return {s, "provide_receive_buffer"};
    ++provided_;
    --to_provide_;
    return {};
  }

  Failure send(const void* bytes, unsigned size_class, std::size_t length, port::Priority prio,
               std::size_t max_in_flight, Deadline deadline) noexcept {
    if (Failure f = poll_until([&] { return sends_started_ - sends_done_ < max_in_flight; },
                               deadline, "send window"))
      return f;
    for (std::uint32_t spins = 0;; ++spins) {
      const Status s =
          port_->send(bytes, size_class, length, prio, 1 - rank_, port_id, on_sent, this);
      if (s == Status::ok) break;
      if (s != Status::no_resource) return {s, "Port::send"};
      if (Failure f = poll_once()) return f;  // a SENT event gives the token back
      relax(spins);
      if ((spins & 255) == 255 && Clock::now() >= deadline)
        return {Status::timeout, "Port::send: no send token"};
    }
    ++sends_started_;
    return {};
  }

  /// One receive call: runs callbacks, keeps control values, notes data.
  Failure poll_once() noexcept {
    if (send_failure_ != Status::ok) return {send_failure_, "a send completed with an error"};
    const port::Event& e = port_->receive();
    if (e.type == PIER_PORT_NO_RECV_EVENT) return {};
    if (!port::is_receive_event(e.type)) {
      port_->unknown(e);
      return {};
    }
    const void* bytes = e.message ? e.message : e.buffer;
    if (e.tag == ctrl_tag) {
      std::uint64_t v = 0;
      std::memcpy(&v, bytes, std::min<std::size_t>(8, e.length));
      if (ctrl_values_.size() >= ctrl_buffers)
        return {Status::malformed, "control values pile up: peers out of step"};
      ctrl_values_.push_back(v);
      const Status s =
          port_->provide_receive_buffer(e.buffer, e.size, port::Priority::high, ctrl_tag);
      return s == Status::ok ? Failure{} : Failure{s, "provide_receive_buffer (control)"};
    }
    if (data_ready_) return {Status::malformed, "a data message arrived before the last was used"};
    data_ready_ = true;
    data_at_ = const_cast<void*>(bytes);
    data_buffer_ = e.buffer;
    data_length_ = e.length;
    return {};
  }

  template <class Pred>
  Failure poll_until(Pred done, Deadline deadline, const char* what) noexcept {
    for (std::uint32_t spins = 0; !done(); ++spins) {
      if (Failure f = poll_once()) return f;
      relax(spins);
      if ((spins & 255) == 255 && Clock::now() >= deadline) return {Status::timeout, what};
    }
    return {};
  }

  std::uint32_t rank_ = 0;
  std::unique_ptr<core::Core> core_;
  std::unique_ptr<port::Node> node_;
  std::unique_ptr<port::Port> port_;
  std::vector<std::byte> arena_, send_buf_;
  std::vector<std::uint64_t> ctrl_out_, ctrl_in_;
  std::deque<std::uint64_t> ctrl_values_;
  std::size_t ctrl_sent_ = 0;
  std::size_t sends_started_ = 0, sends_done_ = 0;
  Status send_failure_ = Status::ok;
  unsigned class_ = port::min_size;
  std::size_t slots_ = 0, provided_ = 0, to_provide_ = 0;
  bool data_ready_ = false;
  void* data_at_ = nullptr;
  void* data_buffer_ = nullptr;
  std::size_t data_length_ = 0;
};

}  // namespace

Result<std::unique_ptr<Transport>> open_port(const std::string& core_drivers, std::uint32_t rank,
                                             std::size_t largest, const Exchange& exchange,
                                             Deadline deadline, std::string* why,
                                             bool* exchange_failed) {
  *exchange_failed = false;
  auto t = std::make_unique<PortTransport>();
  const Failure made = t->create_core(core_drivers, rank);
  // The peer hears whether we could come up, so both skip together.
  std::vector<std::byte> mine{made ? std::byte{'X'} : std::byte{'U'}};
  if (made) {
    const std::string text = fmt::format("{} ({})", made.what, describe(made.status));
    for (char c : text) mine.push_back(static_cast<std::byte>(c));
  } else {
    mine.insert(mine.end(), t->address().begin(), t->address().end());
  }
  auto peer = exchange(mine);
  if (!peer || peer->empty()) {
    *exchange_failed = true;
    *why = fmt::format("address exchange failed: {}",
                       describe(peer ? Status::malformed : peer.status()));
    return peer ? Status::malformed : peer.status();
  }
  if (made) {
    *why = fmt::format("unavailable: {}: {}", made.what, describe(made.status));
    return made.status;
  }
  if ((*peer)[0] != std::byte{'U'}) {
    *why = "unavailable at the peer: " +
           std::string(reinterpret_cast<const char*>(peer->data()) + 1, peer->size() - 1);
    return Status::unsupported;
  }
  if (Failure f = t->connect({peer->begin() + 1, peer->end()}, largest, deadline)) {
    *why = fmt::format("{}: {}", f.what, describe(f.status));
    return f.status;
  }
  return std::unique_ptr<Transport>(std::move(t));
}

}  // namespace pier::perf
