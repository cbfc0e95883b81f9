// pier ofi: one context per NI: a libfabric fabric, domain, reliable
// datagram endpoint, address vector and completion queue, shared by every
// instance of the context. Instances are told apart by the tag of each
// message (kind << 56 | the receiving instance's id, learned in a hello).
//
// Every libfabric call and every state change runs under the context's
// mutex (lock.hpp): the domain is opened FI_THREAD_DOMAIN, and instances of
// one context may be driven from several threads at once.
#pragma once

#include "drivers/ofi/codec.hpp"
#include "drivers/ofi/lock.hpp"
#include "drivers/ofi/provider.hpp"

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_eq.h>

#include <pier/driver.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <vector>

namespace pier::drivers::ofi {

class OfiInstance;

/// Hellos parked at once: at least min_parked, else four per peer of the
/// session (both tracks, and a newer instance of each), at most max_parked.
inline constexpr std::size_t min_parked = 256;
inline constexpr std::size_t max_parked = 16384;
/// Peers known only from a hello's url (to refuse it), at most: the url
/// came off the wire, so each costs an address-vector entry and nothing more.
inline constexpr std::size_t max_wire_peers = 64;

/// The largest small packet sent with fi_tinject (gathered on the stack).
inline constexpr std::size_t max_inject = 1024;

/// One operation handed to libfabric. The fi_context2 comes first: libfabric
/// gives back its address as the completion's op_context. Ops live in the
/// context's pool, not in instances, so a completion that arrives after its
/// instance is gone finds a valid op with no owner.
/// How long an operation ended by us (closed, broken) may stay with
/// libfabric before it is reported anyway (logged): until it leaves, the
/// provider may still read or write the caller's memory.
inline constexpr auto cancel_limit = std::chrono::seconds(2);

struct Op {
  enum class Kind : std::uint8_t {
    free,
    send,
    rma_write,
    rdv_notice,
    recv,
    control_send,
    control_recv
  };
  fi_context2 fctx{};
  Kind kind = Kind::free;
  bool in_provider = false;  ///< libfabric holds it: a completion will come
  bool done = false;         ///< final status known
  bool reported = false;     ///< the owner has read the final status
  bool retry = false;        ///< waits in the context's retry list
  bool bounce = false;       ///< a receive into the instance's bounce buffer
  Status status = Status::in_progress;
  OfiInstance* owner = nullptr;
  driver::Packet* pkt = nullptr;  ///< the owner's packet, while not done
  std::size_t length = 0;
  std::uint64_t tag = 0;   ///< completion tag (receives)
  std::uint64_t data = 0;  ///< completion remote CQ data (receives)
  Rdv rdv{};               ///< a send's rendezvous target
  std::uint64_t peer = 0;  ///< fi_addr_t of the target (sends)
  /// A control send's peer (its index in the context's list): a failure
  /// is charged to it, not to whichever peer shares its address.
  std::size_t control_peer = 0;
  Op* next_free = nullptr;
  ControlBytes ctl{};        ///< a control message's bytes (a hello's url follows from the context)
  std::byte* buf = nullptr;  ///< a control receive's buffer (control_max_size bytes)
  /// A send ended while libfabric held it: reported once it left, or at
  /// this time (instance.cpp, send_lingers()).
  driver::Clock::time_point linger_until{};
};

class OfiContext final : public driver::Context {
 public:
  explicit OfiContext(std::string provider);
  ~OfiContext() override;

  std::string_view name() const noexcept override { return "ofi"; }
  Result<driver::Properties> properties(const driver::Hints& hints) override;
  Result<std::vector<std::byte>> init() override;
  Status close() override;
  Result<std::unique_ptr<driver::Instance>> open_instance(driver::Track track) override;
  std::string unavailable_reason() const override;
  Status probe_any(driver::Instance** ready) override;
  Status wait_any(driver::Instance** ready, driver::Deadline deadline) override;
  Status cancel_any() override;
  Status wait_arm(std::vector<::pollfd>& fds) override;
  Status wait_disarm() override;
  Status incoming(std::vector<std::byte>& remote_url) override;

  // --- for instances (called with mutex() held) -------------------------
  ContextMutex& mutex() noexcept { return mutex_; }
  bool running() const noexcept { return state_ == State::running; }
  std::uint64_t id() const noexcept { return id_; }
  fid_ep* ep() noexcept { return ep_; }
  fid_domain* domain() noexcept { return domain_; }
  bool rma() const noexcept { return rma_; }
  bool directed() const noexcept { return choice_.directed; }
  bool mr_virt_addr() const noexcept;
  bool mr_endpoint() const noexcept;
  bool mr_prov_key() const noexcept;
  /// A registration key no peer can guess from the keys it was given: they
  /// ran 1, 2, 3..., and a peer could aim an RMA write at a receive offered
  /// to another peer.
  std::uint64_t next_mr_key() noexcept;
  std::size_t send_queue() const noexcept { return send_queue_; }
  std::uint64_t credits() const noexcept { return credits_; }
  std::size_t max_packet() const noexcept { return max_packet_; }
  std::uint32_t max_iov() const noexcept { return max_iov_; }
  std::size_t inject_size() const noexcept { return inject_size_; }
  std::uint32_t next_cookie() noexcept { return ++cookie_; }
  bool on_demand() const noexcept { return on_demand_; }
  /// Whether the urls make this context the acceptor of a connection to
  /// `remote` (the smaller url accepts, as over tcp and shm): on demand, an
  /// acceptor's hellos ask a peer without an instance to call back.
  bool acceptor_for(std::span<const std::byte> remote) const noexcept;
  /// Decodes and handles one control message as a control receive got it;
  /// anything malformed is dropped (logged).
  void on_control_bytes(std::span<const std::byte> bytes) noexcept;

  /// Claims (remote context, track) for `inst`: in_use when another instance
  /// holds it. Inserts the peer into the address vector. A hello that came
  /// first is handed over at once.
  Status attach(OfiInstance* inst, const Url& remote, driver::Track track, std::size_t* peer);
  void detach(OfiInstance* inst) noexcept;
  /// Completes every unfinished send-side op of `inst` with `why`.
  void fail_ops(OfiInstance* inst, Status why) noexcept;
  /// Whether a rendezvous write of `inst` or its notice is still on its way.
  bool rdv_in_flight(const OfiInstance* inst) const noexcept;
  /// Keeps `buffer` alive until `op` leaves the provider: a receive it had
  /// matched cannot be canceled and lands after its instance is gone.
  void keep_until_done(Op* op, std::vector<std::byte>&& buffer) noexcept;
  /// An instance owes a control message it could not send yet.
  void owe_control() noexcept { control_owed_ = true; }
  /// A bye (or any last control message of an instance going away) that met
  /// back-pressure: kept and sent from progress once there is room, so the
  /// peer is not left waiting for a close it never hears of.
  void owe_bye(std::size_t peer, const Control& c) noexcept;
  std::uint64_t peer_addr(std::size_t peer) const noexcept { return peers_[peer].addr; }
  bool peer_dead(std::size_t peer) const noexcept { return peers_[peer].dead; }
  /// Dead, or a context of this process that closed: nothing may be sent to
  /// it (a send to a closed context's endpoint crashes libfabric 1.17's shm).
  /// Looks at the record of closed contexts first (one atomic load when
  /// nothing closed).
  bool peer_unreachable(std::size_t peer) noexcept {
    notice_closed_peers();
    return peers_[peer].dead || peers_[peer].closed;
  }
  /// Sends of `inst` that read caller memory (send, rma_write) and that
  /// libfabric still holds.
  bool sends_in_provider(const OfiInstance* inst) const noexcept;
  void cancel_sends(const OfiInstance* inst) noexcept;

  Op* get_op(Op::Kind kind, OfiInstance* owner) noexcept;
  /// Gives an op back once libfabric and its owner are both done with it.
  void maybe_free(Op* op) noexcept;
  /// Queues an op whose next libfabric call answered -FI_EAGAIN.
  void retry_later(Op* op) noexcept;
  std::vector<Op*>& retry_list() noexcept { return retry_; }
  /// Sends a control message to a peer; no_resource when it cannot now.
  Status send_control(std::size_t peer, const Control& c) noexcept;
  /// Sends `head` then `tail` (a hello's url), which the caller keeps in
  /// place until the send completes (tests forge hellos with it).
  Status send_control_bytes(std::size_t peer, const ControlBytes& head,
                            std::span<const std::byte> tail,
                            std::uint32_t target_instance) noexcept;

  /// Reads completions, retries what waited, checks peers. Never blocks.
  void progress() noexcept;
  /// Counts progress() calls: tells whether one ran since a given moment.
  std::uint64_t progress_epoch() const noexcept { return progress_epoch_; }
  /// Progresses until `ready()` or the deadline without sleeping (a manual
  /// progress provider moves a transfer's bytes only inside progress()), but
  /// releases the caller's `lock` between rounds so other threads' calls
  /// on the context go on meanwhile.
  Status spin(std::unique_lock<ContextMutex>& lock, driver::Deadline deadline, bool (*ready)(void*),
              void* arg) noexcept;
  /// Sleeps on the completion queue until `ready()` or the deadline; the
  /// caller holds `lock`, which is released while sleeping.
  Status wait(std::unique_lock<ContextMutex>& lock, driver::Deadline deadline, bool (*ready)(void*),
              void* arg) noexcept;

 private:
  enum class State : std::uint8_t { fresh, described, running, closed };
  struct Peer {
    std::uint64_t context_id = 0;
    std::uint64_t addr = 0;   ///< fi_addr_t
    int pidfd = -1;           ///< same host and pid space: readable once it exits
    bool in_process = false;  ///< a context of this process: alive while registered
    std::string shm_region;   ///< its libfabric shm file, removed once it exits
    bool dead = false;
    /// An in-process peer whose context closed: nothing more is sent to it
    /// (a send crashed libfabric 1.17's shm); it is marked dead once what
    /// it sent before has been read (check_in_process_peers).
    bool closed = false;
    /// Known from a hello's url only (refuse()): no pidfd, no liveness; a
    /// caller's url for the same context replaces what the wire said.
    bool wire_only = false;
    bool this_process = false;  ///< its url names this process (its context may not be ours)
    std::uint32_t pid = 0;
    std::array<std::byte, max_name> name{};
    std::size_t name_len = 0;
    std::chrono::steady_clock::time_point last_keepalive{};
  };

  bool ensure_choice() const;
  std::size_t read_cq() noexcept;
  bool sends_in_provider() const noexcept;
  static void progress_neighbours(OfiContext* self) noexcept;
  Status open_fabric() noexcept;
  void close_fabric() noexcept;
  Status post_control_recv(Op* op) noexcept;
  void on_completion(Op* op, const fi_cq_tagged_entry& e) noexcept;
  void on_error(Op* op, const fi_cq_err_entry& e) noexcept;
  void on_control(const Control& c) noexcept;
  void on_hello(const Control& c) noexcept;
  /// Keeps a hello no instance awaits, for incoming() and connect_async().
  void park(const Control& c) noexcept;
  /// Tells the sender of a hello nobody took that its instance failed.
  void refuse(const Control& hello, std::span<const std::byte> url) noexcept;
  /// Drops the parked hellos that waited longer than park_ms_, refusing
  /// those of connectors (an acceptor's call back is not waited on).
  void expire_parked(std::chrono::steady_clock::time_point now) noexcept;
  /// The peer of `remote`, inserted into the address vector if new.
  /// `from_wire`: the url came in a hello (to refuse it), not from our
  /// caller; such a peer gets no liveness checks and is replaced by the
  /// caller's url of the same context, and at most max_wire_peers exist
  /// (no_resource beyond).
  Result<std::size_t> peer_of(const UrlView& remote, bool from_wire = false) noexcept;
  /// Fills `p`'s address (and, for a caller's url, its liveness checks)
  /// from `remote`.
  /// `insert`: also into the address vector (not when `p` already has the
  /// address: a provider may hand out a second one for the same name).
  Status describe_peer(Peer& p, const UrlView& remote, bool from_wire, bool insert = true) noexcept;
  void retry_ops() noexcept;
  void check_peers() noexcept;
  /// Marks dead the peers that are contexts of this process no longer open.
  void check_in_process_peers() noexcept;
  /// The same from the record of closed contexts, when it changed.
  void notice_closed_peers() noexcept;
  /// Whether an in-process peer's context is still in the list; nothing
  /// when the list is busy (try_lock).
  std::optional<bool> in_process_peer_open(std::size_t peer) noexcept;
  /// Whether a context of that id is open in this process (this copy).
  static bool registered_here(std::uint64_t context_id) noexcept;
  void mark_dead(std::size_t peer) noexcept;
  OfiInstance* find_ready() noexcept;
  void start_progress_thread();
  void stop_progress_thread() noexcept;

  std::string wanted_;
  mutable bool chosen_ = false;
  mutable Choice choice_;
  State state_ = State::fresh;
  bool rma_ = false;

  fid_fabric* fabric_ = nullptr;
  fid_domain* domain_ = nullptr;
  fid_av* av_ = nullptr;
  fid_cq* cq_ = nullptr;
  fid_ep* ep_ = nullptr;
  int wait_fd_ = -1;
  int wake_fd_ = -1;  ///< eventfd: cancel_any() wakes a sleeping wait_any()
  std::atomic<bool> cancel_any_{false};
  std::size_t next_probe_ = 0;
  std::thread progress_thread_;
  std::atomic<bool> stop_progress_{false};

  std::uint64_t id_ = 0;
  std::uint32_t provider_hash_ = 0;
  /// Our endpoint's name (fi_getname), as in our url: set before the
  /// context joins the neighbours' list, read by others under that list.
  std::array<std::byte, max_name> name_{};
  std::size_t name_len_ = 0;
  std::uint64_t closes_seen_ = 0;  ///< see notice_closed_peers()
  std::size_t wire_peers_ = 0;     ///< peers_ that are wire_only
  std::uint32_t next_instance_ = 1;
  std::uint32_t cookie_ = 0;
  std::size_t send_queue_ = 256;
  std::uint64_t credits_ = 128;
  std::size_t max_packet_ = 65536;
  std::uint32_t max_iov_ = 1;
  std::size_t inject_size_ = 0;
  std::int64_t keepalive_ms_ = 1000;
  std::size_t control_recvs_ = 64;

  ContextMutex mutex_;
  std::vector<Op> ops_;
  Op* free_ops_ = nullptr;
  std::vector<Op*> retry_;
  std::vector<Op*> retrying_;  ///< retry_ops()'s pass over what retry_ held
  /// Bounce buffers of destroyed instances, until their receive ends.
  std::vector<std::pair<Op*, std::vector<std::byte>>> kept_buffers_;
  std::vector<Peer> peers_;
  std::vector<OfiInstance*> instances_;
  /// A hello no instance awaited (its instance may not exist yet).
  struct Parked {
    Control hello;  ///< its url is in `url`
    std::array<std::byte, max_url_size> url{};
    std::size_t url_len = 0;
    bool reported = false;                          ///< by incoming(), since it last came
    std::chrono::steady_clock::time_point since{};  ///< parked at, or reported at (on demand)
  };
  std::vector<Parked> parked_;  ///< capacity reserved at init: max_parked_
  std::size_t max_parked_ = 1024;
  std::int64_t park_ms_ = 60000;
  bool on_demand_ = false;
  /// Hellos carry our url (a second iovec): not where the provider takes
  /// one iovec only, and then no incoming connection can be reported.
  bool hello_url_ = false;
  std::vector<std::byte> url_;  ///< ours, as init() returned it
  /// The control receives' buffers: a hello with its url is larger than
  /// an op's own bytes.
  std::vector<std::array<std::byte, control_max_size>> control_bufs_;
  ControlParser parser_;
  std::chrono::steady_clock::time_point last_check_{};
  bool control_owed_ = false;
  struct OwedBye {
    std::size_t peer;
    Control control;
  };
  std::vector<OwedBye> owed_byes_;  ///< capacity reserved at init
  /// Sends what owe_bye() kept, while there is room.
  void send_owed_byes() noexcept;
  std::uint32_t idle_polls_ = 0;
  std::uint32_t polls_since_check_ = 0;
  std::uint64_t progress_epoch_ = 0;
  driver::Clock::duration wait_slice_ = std::chrono::milliseconds(10);
};

}  // namespace pier::drivers::ofi
