// pier: the driver interface (seed 002, the NewMadeleine minidriver), for
// anyone writing a driver. A driver moves packets between two processes; it
// never parses core headers and never matches. The core builds one Context per
// driver and NI, and one Instance per (gate, track): a track is an ordered,
// reliable packet channel to one peer.
//
// Call order (checked by tests/conformance):
//   properties() once, then init() once, then open_instance() for each gate
//   and track, connect_async() then (unless fully asynchronous) connect_wait(),
//   traffic, disconnect(), destroy the instances, close() last. Any call after
//   close() answers not_initialized.
//
// Every function returns a Status. Common answers:
//   ok           done;
//   in_progress  posted; poll (or wait) until it answers ok or an error;
//   no_resource  nothing was done, the driver has no room now: call
//                progress (poll) and retry later; never a failure;
//   unsupported  the driver does not implement this function (the default of
//                every optional function below); consistent with Caps;
//   invalid_argument, broken (peer unreachable: every pending packet of the
//                instance completes broken), closed, not_initialized.
//
// Threads: any function may be called from any thread, but never concurrently
// for one packet or one instance; Context functions are serialised by the
// caller except cancel_any(), which may run while wait_any() blocks.
// probe_any() and wait_any() may progress the receives of every instance of
// their context: while one runs, another thread may open and destroy
// instances of that context (every driver copes) but make no other call on
// them (shm allows any: its receive-any only reads).
#pragma once

#include <pier/result.hpp>
#include <pier/status.hpp>

#include <poll.h>
#include <sys/uio.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace pier::driver {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

/// What a driver can do. Filled by the driver, read once by the core when it
/// builds a rail; nothing is tested per message.
struct Caps {
  bool supports_data = false;  ///< post() accepts Form::data packets
  bool send_buf = false;       ///< send_buf_get() / send_buf_post()
  bool recv_buf = false;       ///< receive by recv_poll() + recv_buf_release() without a post
  bool recv_post = true;       ///< recv_post() with Form::iovec
  std::uint32_t max_iov = 1;   ///< iovec entries accepted by post(); 1 means no iovec
  bool blocking_wait = false;  ///< send_wait() / recv_wait() sleep instead of spinning
  bool recv_any = false;       ///< Context::probe_any() / wait_any() / cancel_any()
  /// Context::wait_arm() / wait_disarm(): the context's readiness as file
  /// descriptors, so a caller sleeps on several contexts at once. Known
  /// only after init() for some drivers (ofi: whether the provider's queue
  /// has a descriptor): wait_arm() answers unsupported then.
  bool wait_fds = false;
  bool prefetch = false;  ///< *_prefetch() / *_unfetch() do real work
  bool rdv_data = false;  ///< a large-track recv_post() fills Packet::rdv_data
  /// Largest packet on a small track; 0 means unlimited. A peer may take
  /// less (tcp, shm and ofi name their limit in the url): the core sends no
  /// more than the peer's receive capacity.
  std::size_t max_packet = 0;
  /// Context::incoming() reports peers that connect before this side opened
  /// an instance for them, so both sides may open instances on first use.
  bool incoming = false;
  /// Large tracks need the receive posted before the data is sent (the core
  /// runs a rendezvous); small tracks always preserve packet boundaries.
  bool needs_rdv = false;
};

/// Nominal performance, used to pick rails and split large messages.
struct Profile {
  std::uint32_t latency_ns = 0;
  std::uint32_t bandwidth_mbps = 0;  ///< MB/s
  int numa_node = -1;                ///< -1 when unknown
  std::string cpuset;                ///< "0-1" style list, empty when unknown
};

/// Hints from the layers above, given before init().
struct Hints {
  std::uint32_t session_size = 1;
  std::uint32_t rank = 0;
  bool wide_url = false;  ///< the launcher can carry a url per instance
  /// Peers open instances on first use (with Caps::incoming): an instance
  /// whose peer is the one that completes the connection asks that peer to
  /// open its side, which learns of it through Context::incoming().
  bool on_demand = false;
  /// The caller spins on its own before it calls Context::wait_any (the
  /// core does): wait_any then sleeps at once instead of spinning first.
  bool caller_spins = false;
};

struct Properties {
  Caps caps;
  Profile profile;
};

/// A small track carries headers and eager data; a large track carries the
/// payload of a rendezvous (receive posted first, Packet::rdv_data honoured).
enum class Track : std::uint8_t { small = 0, large = 1 };

/// The seed's nm_data_s: a possibly non-contiguous layout walked in pieces.
class DataIterator {
 public:
  virtual ~DataIterator() = default;
  virtual std::size_t size() const noexcept = 0;
  /// Calls visit(ctx, ptr, len) for each contiguous piece covering
  /// [offset, offset + len) of the layout, in order.
  virtual void traverse(std::size_t offset, std::size_t len,
                        void (*visit)(void* ctx, std::byte* ptr, std::size_t len),
                        void* ctx) const noexcept = 0;
};

/// The seed's nm_pkt_s. Owned by the caller, who keeps it alive and unmoved
/// from post until completion. One representation of the bytes at a time.
struct Packet {
  enum class Form : std::uint8_t { none, buffer, iovec, data };
  static constexpr std::size_t rdv_capacity = 48;

  Form form = Form::none;
  // Form::buffer: a driver-owned buffer, from send_buf_get() or recv_poll().
  std::byte* buf = nullptr;
  std::size_t buf_len = 0;
  // Form::iovec
  const ::iovec* iov = nullptr;
  std::uint32_t iov_count = 0;
  // Form::data: bytes [chunk_offset, chunk_offset + chunk_len) of *data.
  const DataIterator* data = nullptr;
  std::size_t chunk_offset = 0;
  std::size_t chunk_len = 0;
  /// Filled by the receiving driver in a large-track recv_post() (for example
  /// a process id and address for single copy); the core carries it in the
  /// ready-to-receive and hands it to the sender's post() unchanged.
  std::array<std::byte, rdv_capacity> rdv_data{};
  std::uint8_t rdv_len = 0;
  /// On completion: bytes sent or received.
  std::size_t length = 0;
  /// The driver's own per-packet state; the caller never reads it.
  std::array<std::uintptr_t, 4> driver_data{};

  /// Total bytes the packet describes (iovec sum, chunk_len or buf_len).
  std::size_t size() const noexcept;
  void set_iovec(const ::iovec* v, std::uint32_t n) noexcept {
    form = Form::iovec;
    iov = v;
    iov_count = n;
  }
};

class Instance;

/// One driver on one NI (the seed's context): a NIC, or a shared-memory
/// domain. Instances it opens must be destroyed before close().
class Context {
 public:
  virtual ~Context() = default;
  Context() = default;
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  /// The driver's name in the registry ("shm").
  virtual std::string_view name() const noexcept = 0;
  /// Mandatory, called exactly once before init().
  virtual Result<Properties> properties(const Hints& hints) = 0;
  /// Brings the driver up; returns this context's url, opaque bytes that the
  /// launcher gives the peers. A wide url packs one url per instance.
  virtual Result<std::vector<std::byte>> init() = 0;
  /// Called last; every call after it answers not_initialized.
  virtual Status close() = 0;
  /// A new, unconnected instance for one (gate, track).
  virtual Result<std::unique_ptr<Instance>> open_instance(Track track) = 0;

  /// With Caps::incoming: the url of a peer that connected, or asked to be
  /// connected, while no instance here was connecting to it. The caller opens
  /// instances for that url (both tracks) and calls connect_async(). ok with
  /// `remote_url` filled, in_progress when there is none. Each attempt is
  /// reported once; a url the caller does not know is simply not answered.
  virtual Status incoming(std::vector<std::byte>& remote_url) {
    return (void)remote_url, Status::unsupported;
  }

  /// Which instance has a small-track packet ready. After ok, a receive on
  /// that instance completes at once. in_progress when none has.
  virtual Status probe_any(Instance** ready) { return (*ready = nullptr, Status::unsupported); }
  /// As probe_any(), but sleeps until a packet arrives, the deadline passes
  /// (timeout) or cancel_any() is called (canceled).
  virtual Status wait_any(Instance** ready, Deadline) {
    return (*ready = nullptr, Status::unsupported);
  }
  /// Ends a wait_any() running in another thread.
  virtual Status cancel_any() { return Status::unsupported; }
  /// wait_any() split in two, for a caller that sleeps on several contexts
  /// with one poll(): wait_arm() appends the descriptors to watch for
  /// POLLIN and prepares the context so that a small-track packet arriving
  /// after it, or a cancel_any(), makes one of them readable; with
  /// `incoming`, so does a peer's new connection (the core sleeps long on
  /// these when it has nothing under way). ok: armed,
  /// nothing is ready, the caller may sleep. in_progress: a packet is (or
  /// may be) ready already, or cancel_any() came: do not sleep. Either way
  /// wait_disarm() follows, once the caller's sleep ended or was skipped;
  /// it undoes the arming and takes back a cancel_any() the sleep consumed.
  /// Serialised like wait_any(), which it never overlaps.
  virtual Status wait_arm(std::vector<::pollfd>& fds) {
    (void)fds;
    return Status::unsupported;
  }
  virtual Status wait_disarm() { return Status::unsupported; }
  /// Why the driver cannot run here, or "" (for pier-info).
  virtual std::string unavailable_reason() const { return {}; }
  /// What the driver runs without here although it works, or "" (for
  /// pier-info): for example single copy refused by the kernel for a peer,
  /// so large packets take a slower path.
  virtual std::string degraded_reason() const { return {}; }
};

/// One (gate, track): an ordered, reliable packet channel to one peer.
class Instance {
 public:
  virtual ~Instance() = default;
  Instance() = default;
  Instance(const Instance&) = delete;
  Instance& operator=(const Instance&) = delete;

  /// Starts connecting to the peer whose context url is `remote_url`. Never
  /// blocks; many instances may be connecting at once. Both peers call it.
  virtual Status connect_async(std::span<const std::byte> remote_url) = 0;
  /// Completes a connection: ok, in_progress (call again), timeout, broken.
  /// Fully asynchronous drivers answer unsupported: packets may be posted
  /// right after connect_async().
  virtual Status connect_wait(Deadline) { return Status::unsupported; }
  /// No packet moves on this instance after it returns.
  virtual Status disconnect() { return Status::unsupported; }

  // --- send -----------------------------------------------------------
  /// Buffer-based send: points pkt.buf at driver memory of pkt.buf_len bytes
  /// (the most that may be sent), or no_resource.
  virtual Status send_buf_get(Packet& pkt) { return (void)pkt, Status::unsupported; }
  /// Sends the first `len` bytes of the buffer from send_buf_get().
  virtual Status send_buf_post(Packet& pkt, std::size_t len) {
    return (void)pkt, (void)len, Status::unsupported;
  }
  /// Sends an iovec or data packet. On a large track, pkt.rdv_data holds what
  /// the receiving driver put there.
  virtual Status send_post(Packet& pkt) = 0;
  /// Mandatory; ok once the packet's memory may be reused.
  virtual Status send_poll(Packet& pkt) = 0;
  /// Blocks until completion or the deadline (timeout). send_poll() has been
  /// called at least once before.
  virtual Status send_wait(Packet& pkt, Deadline) { return (void)pkt, Status::unsupported; }
  virtual Status send_prefetch(Packet& pkt) { return (void)pkt, Status::unsupported; }
  virtual Status send_unfetch(Packet& pkt) { return (void)pkt, Status::unsupported; }

  // --- receive --------------------------------------------------------
  /// Posts a receive into an iovec or data packet; completes with ok, or
  /// truncated when the arriving packet was longer (the rest is discarded).
  virtual Status recv_post(Packet& pkt) { return (void)pkt, Status::unsupported; }
  /// Mandatory. After recv_post(): ok when the packet is complete. Without a
  /// post on a recv_buf driver: ok with pkt.buf/buf_len pointing at the
  /// packet in driver memory, to be handed back by recv_buf_release().
  virtual Status recv_poll(Packet& pkt) = 0;
  /// Returns a buffer from recv_poll(), exactly once per packet.
  virtual Status recv_buf_release(Packet& pkt) { return (void)pkt, Status::unsupported; }
  virtual Status recv_wait(Packet& pkt, Deadline) { return (void)pkt, Status::unsupported; }
  /// Cancels a posted receive: ok (it will not complete), or the packet's
  /// final status if it completed first.
  virtual Status recv_cancel(Packet& pkt) { return (void)pkt, Status::unsupported; }
  virtual Status recv_prefetch(Packet& pkt) { return (void)pkt, Status::unsupported; }
  virtual Status recv_unfetch(Packet& pkt) { return (void)pkt, Status::unsupported; }
};

/// A driver in the registry.
struct DriverEntry {
  std::string_view name;
  std::string_view summary;
  /// Makes a fresh context; `argument` is what follows "name:" in a driver
  /// spec ("fault:shm" gives "shm"), else empty.
  Result<std::unique_ptr<Context>> (*make)(std::string_view argument);
};

/// Every built-in driver (self, shm, tcp, fault, ofi where built).
std::span<const DriverEntry> builtin_drivers() noexcept;
/// A context for a driver spec such as "shm", "tcp" or "fault:tcp".
Result<std::unique_ptr<Context>> make_context(std::string_view spec);

}  // namespace pier::driver
