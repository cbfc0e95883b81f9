// pier core: the Core facade, set-up, regions and the message life common
// to every protocol.
#include "core/core.hpp"

#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <utility>

#include "base/config.hpp"
#include "base/log.hpp"
#include "boot/boot.hpp"
#include "core/impl.hpp"

namespace pier::core {

inline const config::StringKey drivers_key{
    "CORE_DRIVERS", "self,shm,tcp",
    "drivers in order of preference, comma separated; a peer gets the first one that can "
    "reach it; several rails as a+b (tcp+tcp, shm+tcp). PIER_DRIVERS overrides it"};
/// The name the issue and users know; empty defers to CORE_DRIVERS.
inline const config::StringKey drivers_alias_key{
    "DRIVERS", "",
    "drivers in order of preference (as PIER_CORE_DRIVERS, which it overrides when set): "
    "shm,tcp; several rails of one peer as tcp+tcp"};
inline const config::StringKey connect_key{
    "CORE_CONNECT", "lazy",
    "lazy: a gate opens on its first message (either side); eager: connect() waits for every peer"};
inline const config::IntKey eager_limit_key{
    "CORE_EAGER_LIMIT",
    0,
    0,
    std::int64_t{16} << 20,
    "largest eager payload; bigger messages use the rendezvous. 0: per driver, four "
    "latency-bandwidth products of its profile (32k to 256k), capped by its max_packet",
    config::Type::size};
inline const config::IntKey split_min_key{
    "CORE_SPLIT_MIN",
    std::int64_t{256} * 1024,
    0,
    std::int64_t{1} << 40,
    "smallest rendezvous split across several rails in proportion to their bandwidth",
    config::Type::size};
inline const config::IntKey credits_key{
    "CORE_CREDITS", 32, 1, 4096,
    "small packets per peer and priority a sender may have unconsumed at the receiver"};
inline const config::IntKey send_msgs_key{"CORE_SEND_MSGS", 1024, 1, 1 << 20,
                                          "send message states (outstanding sends)"};
inline const config::IntKey recv_msgs_key{
    "CORE_RECV_MSGS", 1024, 1, 1 << 20,
    "receive message states (messages not yet finalized); each peer holds at most 2 x "
    "CORE_CREDITS of them"};
inline const config::IntKey spin_key{"CORE_SPIN_US", 50, 0, 10'000'000,
                                     "microseconds wait() polls before it sleeps in a driver"};
inline const config::IntKey gap_key{
    "CORE_GAP_LIMIT_MS", 5000, 1, 3'600'000,
    "a hole in a peer's packet sequence older than this fails the peer (lost packet)"};

inline const config::IntKey idle_sleep_key{
    "CORE_IDLE_SLEEP_MS", 50, 1, 60'000,
    "longest sleep of a wait while nothing is under way, when the drivers' descriptors announce "
    "every arrival and connection (else 1 ms)"};

namespace {
constexpr std::size_t default_eager = std::size_t{32} * 1024;
constexpr std::size_t max_auto_eager = std::size_t{256} * 1024;
/// A context with at most this many remote peers has them polled directly.
constexpr std::size_t direct_poll_max = 4;
}  // namespace

Settings Settings::from_config() {
  Settings s;
  s.drivers = drivers_alias_key.get();
  if (s.drivers.empty()) s.drivers = drivers_key.get();
  s.eager_connect = connect_key.get() == "eager";
  s.eager_limit = static_cast<std::size_t>(eager_limit_key.get());
  s.split_min = static_cast<std::size_t>(split_min_key.get());
  s.credits = static_cast<std::uint32_t>(credits_key.get());
  s.send_msgs = static_cast<std::uint32_t>(send_msgs_key.get());
  s.recv_msgs = static_cast<std::uint32_t>(recv_msgs_key.get());
  s.spin_us = static_cast<std::uint32_t>(spin_key.get());
  s.gap_limit_ms = static_cast<std::uint32_t>(gap_key.get());
  s.idle_sleep_ms = static_cast<std::uint32_t>(idle_sleep_key.get());
  return s;
}

// --- Impl set-up -----------------------------------------------------------

Core::Impl::Impl(Rank rank, Rank size, const Settings& settings)
    : rank_(rank),
      size_(size),
      settings_(settings),
      sends_(settings_.send_msgs),
      recvs_(settings_.recv_msgs),
      ctrls_(std::min<std::size_t>(65536, 64 * std::max<std::size_t>(size, 1) + 256)),
      chunks_((std::size_t{settings_.send_msgs} + settings_.recv_msgs) * max_chunks),
      regions_(4096),
      completions_(std::bit_ceil(std::size_t{settings_.send_msgs} + settings_.recv_msgs + 8)),
      completion_mask_(completions_.size() - 1) {
  // Each live state yields at most one completion and a send may finish at
  // once (the fast path holds no state): keeping live sends plus queued
  // completions under send_msgs + 8 bounds the sends. Receives are not
  // bounded by their states (an eager message answered in lib_parse frees
  // its state at once): poll_small_recv takes a packet only while live
  // states plus queued completions leave a slot (completion_room()).
  send_budget_ = std::size_t{settings.send_msgs} + 8;
  // Each peer holds at most its grant of receive states (acquire_incoming);
  // a pool smaller than every grant together is shared at peak, and a
  // message that finds it empty waits in a slot of its gate (hold()) until
  // a state frees. Not raised here: the pools sized from it grow with it
  // (about 160 MiB at 1024 ranks).
  const std::uint64_t all_grants =
      std::uint64_t{std::max<Rank>(size, 1)} * wire::priority_count * settings.credits;
  if (all_grants > settings.recv_msgs)
    PIER_LOG(info, "core",
             "PIER_CORE_RECV_MSGS={} holds fewer messages than {} ranks may leave unfinished "
             "together ({}): messages wait for a state when they are all taken",
             settings.recv_msgs, size, all_grants);
}

Core::Impl::~Impl() {
  // Instances go before their contexts (the driver contract: close() last).
  for (auto& g : gates_) {
    if (!g) continue;
    for (Rail& r : g->rails) {
      if (r.small) (void)r.small->disconnect();
      if (r.large) (void)r.large->disconnect();
      r.small.reset();
      r.large.reset();
    }
  }
  gates_.clear();
  for (DriverSlot& d : drivers_)
    if (d.context) {
      if (Status s = d.context->close(); s != Status::ok)
        PIER_LOG(warn, "core", "closing driver {}: {}", d.spec, to_string(s));
    }
}

Status Core::Impl::bring_up_drivers() {
  auto choices = parse_drivers(settings_.drivers);
  if (!choices) {
    PIER_LOG(error, "core", "PIER_CORE_DRIVERS=\"{}\" does not parse", settings_.drivers);
    return Status::invalid_argument;
  }
  // As many contexts of a driver as the most demanding choice has rails of it.
  std::vector<std::pair<std::string, std::uint8_t>> wanted;
  for (const auto& choice : *choices) {
    std::vector<std::pair<std::string, std::uint8_t>> counts;
    for (const std::string& spec : choice) {
      auto it = std::find_if(counts.begin(), counts.end(),
                             [&](const auto& c) { return c.first == spec; });
      if (it == counts.end())
        counts.emplace_back(spec, 1);
      else
        ++it->second;
    }
    for (const auto& count : counts) {
      // Named copies, not a structured binding: clang 14 cannot capture one.
      const std::string& spec = count.first;
      const std::uint8_t n = count.second;
      auto it = std::find_if(wanted.begin(), wanted.end(),
                             [&](const auto& w) { return w.first == spec; });
      if (it == wanted.end())
        wanted.emplace_back(spec, n);
      else
        it->second = std::max(it->second, n);
    }
  }
  driver::Hints hints;
  hints.session_size = size_;
  hints.rank = rank_;
  hints.on_demand = !settings_.eager_connect;
  hints.caller_spins = true;  // wait() spins CORE_SPIN_US before it sleeps
  for (const auto& [spec, n] : wanted) {
    for (std::uint8_t i = 0; i < n; ++i) {
      auto ctx = driver::make_context(spec);
      if (!ctx) {
        PIER_LOG(info, "core", "driver {} unavailable: {}", spec, to_string(ctx.status()));
        break;
      }
      auto props = (*ctx)->properties(hints);
      if (!props) {
        PIER_LOG(info, "core", "driver {} has no properties: {}", spec, to_string(props.status()));
        break;
      }
      if (!props->caps.send_buf && props->caps.max_iov < 2) {
        PIER_LOG(info, "core", "driver {} skipped: neither send_buf nor a 2-entry iovec", spec);
        break;
      }
      auto url = (*ctx)->init();
      if (!url) {
        PIER_LOG(info, "core", "driver {} failed to start: {}", spec, to_string(url.status()));
        (void)(*ctx)->close();
        break;
      }
      DriverSlot d;
      d.spec = spec;
      d.index = i;
      d.props = *props;
      d.url = std::move(*url);
      d.context = std::move(*ctx);
      local_.urls.push_back({d.spec, d.index, d.url});
      drivers_.push_back(std::move(d));
    }
  }
  by_instance_.reserve(std::size_t{size_} * 2 * max_rails);
  if (drivers_.empty()) {
    PIER_LOG(error, "core", "no driver of \"{}\" could start", settings_.drivers);
    return Status::unsupported;
  }
  // A rank always reaches itself through self, listed or not.
  if (std::none_of(drivers_.begin(), drivers_.end(),
                   [](const DriverSlot& d) { return d.spec == "self"; })) {
    auto ctx = driver::make_context("self");
    auto props = ctx ? (*ctx)->properties(hints) : Result<driver::Properties>(ctx.status());
    auto url = props ? (*ctx)->init() : Result<std::vector<std::byte>>(props.status());
    if (url) {
      DriverSlot d;
      d.spec = "self";
      d.props = *props;
      d.url = std::move(*url);
      d.context = std::move(*ctx);
      local_.urls.push_back({d.spec, d.index, d.url});
      drivers_.push_back(std::move(d));
    }
  }
  // Each driver's own eager limit: a rendezvous costs a round trip more,
  // which tcp's latency makes worth it only for larger messages than shm's.
  recv_capacity_ = 0;
  for (std::size_t i = 0; i < drivers_.size(); ++i) {
    DriverSlot& d = drivers_[i];
    std::size_t cap = eager_limit_for(d.props, settings_.eager_limit) + max_prefix;
    if (d.props.caps.max_packet != 0) cap = std::min(cap, d.props.caps.max_packet);
    if (cap < max_prefix + 64) {
      PIER_LOG(error, "core", "driver {}'s max_packet {} is too small for the core's headers",
               d.spec, d.props.caps.max_packet);
      return Status::unsupported;
    }
    d.recv_capacity = cap;
    local_.urls[i].recv_capacity = static_cast<std::uint32_t>(cap);
    recv_capacity_ = std::max(recv_capacity_, cap);
  }
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "localhost");
  local_.node = host;
  local_.pid = static_cast<std::uint32_t>(::getpid());
  local_.credits = settings_.credits;
  local_.recv_capacity = static_cast<std::uint32_t>(recv_capacity_);
  settings_.eager_max = recv_capacity_ - wire::FrameHeader::size;
  address_ = encode_address(local_);
  return Status::ok;
}

Status Core::Impl::connect(std::span<const std::vector<std::byte>> addresses,
                           base::Deadline deadline) {
  if (connected_) return Status::in_use;
  if (addresses.size() != size_) return Status::invalid_argument;
  auto choices = parse_drivers(settings_.drivers);
  if (!choices) return Status::invalid_argument;
  for (Rank r = 0; r < size_; ++r) {
    auto peer = decode_address(addresses[r]);
    if (!peer) {
      PIER_LOG(error, "core", "address of rank {} is malformed", r);
      return peer.status();
    }
    peers_.push_back(std::move(*peer));
  }
  gates_.resize(size_);
  polled_.reserve(std::size_t{size_} * max_rails);
  dirty_.reserve(size_);
  sleep_set_.reserve(drivers_.size());
  idle_set_.reserve(drivers_.size());
  // shm lists a descriptor per small instance, the others one or two.
  // Per context a cancel descriptor, a listener and a few connections
  // still in their handshake, besides one per rail.
  sleep_fds_.reserve(std::size_t{size_} * max_rails + 8 * drivers_.size() + 1);
  failed_peers_.reserve(size_);
  credit_threshold_ = std::max<std::uint32_t>(1, settings_.credits / 2);
  for (Rank r = 0; r < size_; ++r) {
    auto gate = std::make_unique<Gate>();
    gate->peer = r;
    if (Status s = build_gate(*gate, peers_[r]); s != Status::ok) {
      gate->state = GateState::failed;
      gate->failure = Status::broken;
      PIER_LOG(warn, "core", "no rail reaches rank {}: {}", r, to_string(s));
    }
    gates_[r] = std::move(gate);
  }
  connected_ = true;
  // Receive-any on the contexts that carry many remote peers' buffer-receive
  // rails: one probe instead of a poll per peer. With a few peers, polling
  // each instance directly is cheaper than a probe (a lock and a scan in
  // the driver), so those rails are polled; the loopback gate is polled only
  // once this rank sends to itself.
  for (const DriverSlot& d : drivers_) {
    if (!d.props.caps.recv_any || !d.props.caps.recv_buf) continue;
    std::size_t n = 0;
    for (auto& g : gates_)
      if (g->state != GateState::failed && g->peer != rank_)
        for (const Rail& r : g->rails) n += r.context == d.context.get();
    if (n > direct_poll_max) any_contexts_.push_back(d.context.get());
  }
  // Lazy: a gate whose every driver reports incoming connections opens its
  // instances on first use, by either side (the other learns of it through
  // Context::incoming()). The rest are opened now, their connect_wait
  // driven on first use.
  for (const DriverSlot& d : drivers_)
    if (d.props.caps.incoming && !settings_.eager_connect)
      incoming_contexts_.push_back(d.context.get());
  rebuild_idle_set();
  for (auto& g : gates_) {
    if (g->state != GateState::idle) continue;
    const bool on_demand = !settings_.eager_connect && g->peer != rank_ &&
                           std::all_of(g->rails.begin(), g->rails.end(),
                                       [](const Rail& r) { return r.props.caps.incoming; });
    if (!on_demand) start_connect(*g);
  }
  if (!settings_.eager_connect) return Status::ok;
  for (;;) {
    bool all = true;
    for (auto& g : gates_)
      if (!step_connect(*g)) all = false;
    if (all) {
      rebuild_polled();
      return Status::ok;
    }
    if (deadline.expired()) return Status::timeout;
    (void)progress();
  }
}

// --- regions ---------------------------------------------------------------

Status Core::Impl::pin(const Region* region, std::size_t offset, std::size_t length,
                       std::byte** at) noexcept {
  RegionEntry* e = nullptr;
  Status s = resolve(region, offset, length, &e, at);
  if (e != nullptr) ++e->pins;
  return s;
}

// --- message life ------------------------------------------------------------

void Core::Impl::complete_send(SendMsg& m, Status status) noexcept {
  m.state = SendState::completed;
  if (m.cookie) {
    Completion& c = completions_[(completion_head_ + completion_count_) & completion_mask_];
    c = {clients_[static_cast<std::size_t>(m.upper)], m.cookie, status};
    ++completion_count_;
  }
  unpin(m.region);
  unlink(*m.gate, m);
  if (m.rendezvous)
    for (Chunk* c : m.chunks)
      if (c) chunks_.release(c);
  sends_.release(&m);
}

void Core::Impl::complete_recv(Incoming& in, Status status) noexcept {
  in.state = RecvState::completed;
  if (in.cookie) {
    Completion& c = completions_[(completion_head_ + completion_count_) & completion_mask_];
    c = {clients_[static_cast<std::size_t>(in.upper)], in.cookie, status};
    ++completion_count_;
  }
  unpin(in.region);
  if (in.slot >= 0) in.gate->give_slot(in.slot);
  if (in.credit_pending) owe_credit(*in.gate, in.priority);
  --in.gate->prio[in.priority].live_recvs;
  unlink(*in.gate, in);
  if (in.rendezvous)
    for (Chunk* c : in.chunks)
      if (c) chunks_.release(c);
  recvs_.release(&in);
}

Status Core::Impl::deliver(Gate& gate, const wire::FrameHeader& h,
                           std::span<const std::byte> header, std::uint64_t length,
                           Incoming& in) noexcept {
  in.gate = &gate;
  in.priority = h.priority;
  in.upper = h.upper;
  in.length = length;
  in.credit_pending = true;
  in.state = RecvState::parsing;
  // An eager message answered inside lib_parse is never on the gate's list;
  // one that outlives it (deferred, or a rendezvous) is.
  if (in.rendezvous) link(gate, in);
  Client* client = clients_[static_cast<std::size_t>(h.upper)];
  if (client == nullptr) {
    // Nobody to parse it: clean it from the wire so the sender completes.
    PIER_LOG(warn, "core", "message for unattached upper layer {} from rank {} dropped",
             static_cast<int>(h.upper), gate.peer);
    Status s =
        in.rendezvous ? rdv_recv(in, nullptr, nullptr, 0) : eager_recv(in, nullptr, nullptr, 0);
    return s;
  }
  if (parse(*client, gate, h, header, length, in)) return Status::ok;
  return defer(gate, in);
}

Status Core::Impl::defer(Gate& gate, Incoming& in) noexcept {
  // Deferred: keep the eager payload (the driver's buffer goes back now).
  in.state = RecvState::deferred;
  if (!in.rendezvous) link(gate, in);
  ++stats_.deferred_recvs;
  if (!in.rendezvous && in.slot < 0 && in.length > 0) {
    int s = gate.take_slot();
    if (s < 0) {
      // The driver's buffer goes back now: the payload is lost, and the
      // later recv() copies nothing and ends the message as failed.
      PIER_LOG(error, "core", "rank {} overran its credits: no slot for a deferred packet",
               gate.peer);
      in.payload = nullptr;
      in.status = Status::malformed;
      return Status::malformed;
    }
    std::memcpy(gate.slot(s), in.payload, in.length);
    in.slot = s;
    in.payload = gate.slot(s);
  }
  return Status::ok;
}

// --- Core facade --------------------------------------------------------------

Core::Core(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Core::~Core() = default;

Result<std::unique_ptr<Core>> Core::create(Rank rank, Rank size) {
  if (size == 0 || rank >= size) return Status::invalid_argument;
  auto impl = std::make_unique<Impl>(rank, size, Settings::from_config());
  if (Status s = impl->bring_up_drivers(); s != Status::ok) return s;
  return std::unique_ptr<Core>(new Core(std::move(impl)));
}

Result<std::unique_ptr<Core>> Core::from_bootstrap(boot::Bootstrap& boot) {
  auto core = create(boot.rank(), boot.size());
  if (!core) return core.status();
  if (Status s = boot.put("core.address", (*core)->address()); s != Status::ok) return s;
  if (Status s = boot.commit(); s != Status::ok) return s;
  const auto deadline = base::Deadline::after_ms(60000);
  if (Status s = boot.fence(deadline.time_point()); s != Status::ok) return s;
  std::vector<std::vector<std::byte>> all;
  for (Rank r = 0; r < boot.size(); ++r) {
    auto a = boot.get(r, "core.address");
    if (!a) return a.status();
    all.push_back(std::move(*a));
  }
  if (Status s = (*core)->connect(all, deadline); s != Status::ok) return s;
  return core;
}

const std::vector<std::byte>& Core::address() const noexcept {
  return impl_->address_;
}
Status Core::connect(std::span<const std::vector<std::byte>> addresses, base::Deadline deadline) {
  return impl_->connect(addresses, deadline);
}
Rank Core::rank() const noexcept {
  return impl_->rank_;
}
Rank Core::size() const noexcept {
  return impl_->size_;
}
const Settings& Core::settings() const noexcept {
  return impl_->settings_;
}

Status Core::attach(wire::Upper upper, Client* client, std::size_t header_size) {
  auto u = static_cast<std::size_t>(upper);
  if (u >= wire::upper_limit || client == nullptr || header_size > max_upper_header)
    return Status::invalid_argument;
  if (impl_->clients_[u] != nullptr) return Status::in_use;
  impl_->clients_[u] = client;
  impl_->header_size_[u] = header_size;
  return Status::ok;
}

Status Core::detach(wire::Upper upper, Client* client) noexcept {
  Impl& impl = *impl_;
  auto u = static_cast<std::size_t>(upper);
  if (u >= wire::upper_limit || client == nullptr || impl.clients_[u] != client)
    return Status::invalid_argument;
  // Arrivals it never answered: clean them from the wire (R1 on its behalf).
  for (auto& g : impl.gates_) {
    if (!g) continue;
    for (Incoming* in = g->recvs; in;) {
      Incoming* next = in->live_next;
      if (in->upper == upper && in->state == RecvState::deferred)
        (void)(in->rendezvous ? impl.rdv_recv(*in, nullptr, nullptr, 0)
                              : impl.eager_recv(*in, nullptr, nullptr, 0));
      else if (in->upper == upper)
        in->cookie = nullptr;  // still landing: it ends without a finalize
      in = next;
    }
    // Its sends in flight end without a finalize too: a client attached
    // next would otherwise get cookies naming this one's objects.
    for (SendMsg* m = g->sends; m; m = m->live_next)
      if (m->upper == upper) m->cookie = nullptr;
    impl.touch(*g);
  }
  for (std::size_t i = 0; i < impl.completion_count_; ++i) {
    Completion& c = impl.completions_[(impl.completion_head_ + i) & impl.completion_mask_];
    if (c.client == client) c.client = nullptr;
  }
  impl.clients_[u] = nullptr;
  impl.header_size_[u] = 0;
  return Status::ok;
}

Result<Region> Core::validate(void* base, std::size_t extent) noexcept {
  if (base == nullptr && extent != 0) return Status::invalid_argument;
  RegionEntry* e = impl_->regions_.acquire();
  if (e == nullptr) return Status::no_resource;
  e->base = static_cast<std::byte*>(base);
  e->extent = extent;
  Region r;
  r.handle = static_cast<std::uint32_t>(impl_->regions_.handle_of(e));
  r.base = e->base;
  r.extent = extent;
  return r;
}

Status Core::invalidate(const Region& region) noexcept {
  auto h = static_cast<base::Pool<RegionEntry>::Handle>(region.handle);
  RegionEntry* e = impl_->regions_.lookup(h);
  if (e == nullptr) return Status::not_found;
  if (e->pins != 0) return Status::in_use;
  return impl_->regions_.release(h);
}

Status Core::write(const Region& region, std::size_t offset,
                   std::span<const std::byte> src) noexcept {
  RegionEntry* e =
      impl_->regions_.lookup(static_cast<base::Pool<RegionEntry>::Handle>(region.handle));
  if (e == nullptr || offset > e->extent || src.size() > e->extent - offset)
    return Status::invalid_argument;
  if (!src.empty()) std::memcpy(e->base + offset, src.data(), src.size());
  return Status::ok;
}

// The frame's upper_length holds any header send() takes.
static_assert(Core::max_upper_header <= 0xff);

Status Core::send(const SendArgs& a) noexcept {
  Impl& impl = *impl_;
  if (!impl.connected_) return Status::not_initialized;
  if (a.peer >= impl.size_ || a.priority >= wire::priority_count ||
      static_cast<std::size_t>(a.upper) >= wire::upper_limit ||
      a.header.size() > max_upper_header || (a.upper == wire::Upper::none && !a.header.empty()))
    return Status::invalid_argument;
  Gate& gate = *impl.gates_[a.peer];
  if (gate.state == GateState::failed) return gate.failure;
  // A peer the client rejected is failed at the gate's next visit; nothing
  // more goes to it meanwhile.
  if (gate.fail_due != Status::ok) return failure_of(gate.fail_due);
  if (impl.completion_count_ + impl.sends_.outstanding() >= impl.send_budget_) {
    impl.room_owed_ = true;
    return Status::no_resource;
  }
  if (!gate.active) {
    // The loopback gate connects from the next pass; when it is connected
    // already, only the list of directly polled rails must learn of it.
    gate.active = true;
    impl.polled_stale_ = true;
    impl.touch(gate);
  }
  RegionEntry* entry = nullptr;
  std::byte* data = nullptr;
  if (Status s = impl.resolve(a.region, a.offset, a.length, &entry, &data); s != Status::ok)
    return s;
  if (wire::FrameHeader::size + a.header.size() + a.length <= gate.send_limit &&
      impl.eager_fast(gate, a, data, entry))
    return Status::ok;
  if (a.copy_now_only) return Status::no_resource;
  SendMsg* m = impl.sends_.acquire();
  if (m == nullptr) {
    impl.room_owed_ = true;
    return Status::no_resource;
  }
  if (entry != nullptr) ++entry->pins;
  m->gate = &gate;
  m->cookie = a.cookie;
  m->upper = a.upper;
  m->region = entry;
  m->data = data;
  m->length = a.length;
  m->id = static_cast<std::uint32_t>(impl.sends_.handle_of(m));
  m->small.kind = SmallSend::Kind::message;
  m->small.owner = m;
  m->small.priority = a.priority;
  impl.link(gate, *m);
  // What follows the frame (rts sub-header, then the upper header).
  wire::FrameHeader h;
  h.priority = a.priority;
  h.upper = a.upper;
  h.source_endpoint = impl.rank_;
  h.source_port = a.source_port;
  h.destination_port = a.destination_port;
  const std::size_t eager_size = wire::FrameHeader::size + a.header.size() + a.length;
  m->rendezvous = eager_size > gate.send_limit;
  h.type = m->rendezvous ? wire::PacketType::rts : wire::PacketType::eager;
  // An rts carries its upper header after the RtsHeader, to the end of the payload.
  h.upper_length = m->rendezvous ? 0 : static_cast<std::uint8_t>(a.header.size());
  std::size_t at = wire::FrameHeader::size;
  if (m->rendezvous) {
    wire::RtsHeader rts;
    rts.message_id = m->id;
    rts.total_length = a.length;
    (void)wire::encode(rts, std::span(m->small.prefix).subspan(at));
    at += wire::RtsHeader::size;
  }
  if (!a.header.empty()) std::memcpy(m->small.prefix.data() + at, a.header.data(), a.header.size());
  at += a.header.size();
  m->small.prefix_len = at;
  h.payload_length =
      static_cast<std::uint32_t>(at - wire::FrameHeader::size + (m->rendezvous ? 0 : a.length));
  // The frame itself is written when posted (sequence and credits then).
  m->small.frame = h;
  m->small.payload = m->rendezvous ? nullptr : data;
  m->small.payload_len = m->rendezvous ? 0 : a.length;
  Status s = m->rendezvous ? impl.rdv_send(*m) : impl.eager_send(*m);
  impl.touch(gate);
  return s;
}

Status Core::recv(Incoming* in, void* cookie, const Region* region, std::size_t offset,
                  std::size_t mlen, std::size_t rlen) noexcept {
  (void)rlen;  // the sender's length rules; the LIB's rlen is what it read in its header
  Impl& impl = *impl_;
  // The common answer: an eager message, inside its lib_parse. Its payload
  // is at hand (the driver's buffer or a slot) and nothing of it is linked
  // or pinned: copied, finalize queued, state released, in one go.
  if (in != nullptr && in == impl.parsing_ && !in->rendezvous) {
    mlen = static_cast<std::size_t>(std::min<std::uint64_t>(mlen, in->length));
    std::byte* dest = nullptr;
    RegionEntry* entry = nullptr;
    if (Status s = impl.resolve(region, offset, mlen, &entry, &dest); s != Status::ok) return s;
    impl.parse_answered_ = true;
    impl.parsing_ = nullptr;  // a second recv() on it meets the pool's check
    copy_bytes(dest, in->payload, mlen);
    if (cookie) {
      Completion& c = impl.completions_[(impl.completion_head_ + impl.completion_count_) &
                                        impl.completion_mask_];
      c = {impl.clients_[static_cast<std::size_t>(in->upper)], cookie, Status::ok};
      ++impl.completion_count_;
    }
    Gate& gate = *in->gate;
    Priority& p = gate.prio[in->priority];
    gate.give_slot(in->slot);
    ++p.owed;  // its credit (an eager message always holds one)
    --p.live_recvs;
    impl.recvs_.release(in);
    // Only its credit is left to give back: worth a pass once enough are
    // owed (else the next packet to the peer carries it).
    if (p.owed >= impl.credit_threshold_) impl.touch(gate);
    return Status::ok;
  }
  // The message inside lib_parse now is live for sure: the pool's check
  // (a division) is for handles kept from earlier.
  if (in == nullptr || (in != impl.parsing_ && !impl.recvs_.owns(in)))
    return Status::invalid_argument;
  if (in->state != RecvState::parsing && in->state != RecvState::deferred)
    return Status::invalid_argument;
  mlen = static_cast<std::size_t>(std::min<std::uint64_t>(mlen, in->length));
  std::byte* dest = nullptr;
  RegionEntry* entry = nullptr;
  if (Status s = impl.resolve(region, offset, mlen, &entry, &dest); s != Status::ok) return s;
  // An eager payload is copied during this call: only a rendezvous keeps
  // the region in use.
  if (in->rendezvous && entry != nullptr) {
    ++entry->pins;
    in->region = entry;
  }
  if (in == impl.parsing_) {
    impl.parse_answered_ = true;
    impl.parsing_ = nullptr;  // a second recv() on it meets the pool's check
  }
  Gate& gate = *in->gate;
  const std::uint8_t priority = in->priority;
  if (in->rendezvous) {
    Status s = impl.rdv_recv(*in, cookie, dest, mlen);
    impl.touch(gate);
    return s;
  }
  Status s = impl.eager_recv(*in, cookie, dest, mlen);
  // An eager message leaves only its credit to give back: worth a pass
  // once enough are owed (else the next packet to the peer carries it).
  if (gate.prio[priority].owed >= impl.credit_threshold_) impl.touch(gate);
  return s;
}

Status Core::progress() noexcept {
  return impl_->progress();
}
void Core::wake() noexcept {
  impl_->wake();
}
void Core::owe_send_room() noexcept {
  impl_->room_owed_ = true;
}
std::uint64_t Core::spin_ns() const noexcept {
  return std::uint64_t{impl_->settings_.spin_us} * 1000;
}
void Core::sleep_briefly(base::Deadline deadline) noexcept {
  impl_->sleep_briefly(deadline);
}
namespace {
thread_local bool patient_thread = false;
}  // namespace

bool Core::set_patient(bool patient) noexcept {
  return std::exchange(patient_thread, patient);
}

void Core::enter_critical() noexcept {
  if (impl_->critical_.try_lock()) return;
  // A thread waiting in its turn holds the lock for up to a turn, then
  // could take it again before we are even scheduled: say we wait.
  const bool urgent = !patient_thread;
  impl_->contenders_.fetch_add(1, std::memory_order_seq_cst);
  if (urgent) {
    impl_->urgent_contenders_.fetch_add(1, std::memory_order_seq_cst);
    impl_->wake();
  }
  impl_->critical_.lock();
  if (urgent) impl_->urgent_contenders_.fetch_sub(1, std::memory_order_seq_cst);
  impl_->contenders_.fetch_sub(1, std::memory_order_seq_cst);
}
bool Core::contended() const noexcept {
  return impl_->contenders_.load(std::memory_order_relaxed) != 0;
}
bool Core::contended_urgently() const noexcept {
  return impl_->urgent_contenders_.load(std::memory_order_relaxed) != 0;
}
void Core::leave_critical() noexcept {
  impl_->critical_.unlock();
}

Result<NodePid> Core::node_of(Rank rank) const {
  if (rank >= impl_->peers_.size()) return Status::not_found;
  return NodePid{impl_->peers_[rank].node, impl_->peers_[rank].pid};
}

Result<Rank> Core::rank_of(const NodePid& id) const {
  for (Rank r = 0; r < impl_->peers_.size(); ++r)
    if (impl_->peers_[r].node == id.node && impl_->peers_[r].pid == id.pid) return r;
  return Status::not_found;
}

Stats Core::stats() const noexcept {
  Stats s = impl_->stats_;
  s.send_msgs_live = impl_->sends_.outstanding();
  s.recv_msgs_live = impl_->recvs_.outstanding();
  return s;
}

Result<GateInfo> Core::gate_info(Rank peer) const {
  if (!impl_->connected_ || peer >= impl_->size_) return Status::not_found;
  const Gate& g = *impl_->gates_[peer];
  GateInfo info;
  info.connected = g.state == GateState::connected;
  info.failure = g.failure;
  for (std::size_t i = 0; i < g.rails.size(); ++i) {
    std::size_t at = (g.primary + i) % g.rails.size();
    if (g.rails[at].state != RailState::dead) info.rails.push_back(g.rails[at].spec);
  }
  info.eager_limit =
      g.send_limit > wire::FrameHeader::size ? g.send_limit - wire::FrameHeader::size : 0;
  info.split_min = g.split_min;
  for (std::size_t p = 0; p < wire::priority_count; ++p) info.credits[p] = g.prio[p].credits;
  return info;
}

std::uint32_t Core::credit_limit(Rank peer) const noexcept {
  if (!impl_->connected_ || peer >= impl_->size_ || impl_->gates_[peer]->peer_credits == 0)
    return impl_->settings_.credits;
  return impl_->gates_[peer]->peer_credits;
}

void Core::reject_peer(Rank peer, Status why) noexcept {
  if (!impl_->connected_ || peer >= impl_->size_) return;
  Gate& g = *impl_->gates_[peer];
  if (g.state == GateState::failed || g.fail_due != Status::ok) return;
  g.fail_due = is_success(why) ? Status::malformed : why;
  if (g.state == GateState::idle || !g.active) {
    // Nothing under way and no pass visits it: fail it now, so its peer
    // is not taken for a live one until something opens the gate.
    PIER_LOG(warn, "core", "rank {} rejected: {}", peer, to_string(g.fail_due));
    impl_->fail_gate(g, g.fail_due);
    return;
  }
  impl_->touch(g);
}

Status Core::gate_status(Rank peer) const noexcept {
  if (!impl_->connected_ || peer >= impl_->size_) return Status::invalid_argument;
  const Gate& g = *impl_->gates_[peer];
  if (g.state == GateState::failed) return g.failure;
  return g.fail_due != Status::ok ? failure_of(g.fail_due) : Status::ok;
}

std::size_t eager_limit_for(const driver::Properties& props, std::size_t configured) noexcept {
  std::size_t eager = configured;
  if (eager == 0) {
    // Four latency-bandwidth products (MB/s are bytes per microsecond): a
    // message that size spends as long on the wire as the rendezvous' extra
    // round trips would add, so below it eager is faster.
    const std::uint64_t product =
        std::uint64_t{props.profile.latency_ns} * props.profile.bandwidth_mbps / 1000;
    eager = std::bit_ceil(std::clamp<std::uint64_t>(4 * product, default_eager, max_auto_eager));
  }
  if (props.caps.max_packet != 0 && props.caps.max_packet > max_prefix)
    eager = std::min(eager, props.caps.max_packet - max_prefix);
  return eager;
}

std::size_t Core::pending() const noexcept {
  return impl_->sends_.outstanding() + impl_->recvs_.outstanding() + impl_->completion_count_;
}

}  // namespace pier::core
