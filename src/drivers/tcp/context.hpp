// pier tcp: one context per NI. It owns the listening socket, the epoll set
// that serves receive-any, and the accepted connections whose instance does
// not exist yet (an accept may arrive before the local connect_async()).
#pragma once

#include "drivers/tcp/codec.hpp"

#include <pier/driver.hpp>

#include <atomic>
#include <mutex>
#include <vector>

namespace pier::drivers::tcp {

class TcpInstance;

class TcpContext final : public driver::Context {
 public:
  TcpContext() = default;
  ~TcpContext() override;

  std::string_view name() const noexcept override { return "tcp"; }
  Result<driver::Properties> properties(const driver::Hints& hints) override;
  Result<std::vector<std::byte>> init() override;
  Status close() override;
  Result<std::unique_ptr<driver::Instance>> open_instance(driver::Track track) override;
  Status probe_any(driver::Instance** ready) override;
  Status wait_any(driver::Instance** ready, driver::Deadline deadline) override;
  Status cancel_any() override;
  Status wait_arm(std::vector<::pollfd>& fds) override;
  Status wait_disarm() override;
  Status incoming(std::vector<std::byte>& remote_url) override;

  // --- for instances --------------------------------------------------
  const UrlBytes& url() const noexcept { return url_; }
  bool running() const noexcept { return state_ == State::running; }
  std::size_t send_queue_size() const noexcept { return send_queue_; }
  std::size_t recv_buffer_size(driver::Track track) const noexcept;
  std::int64_t keepalive_ms() const noexcept { return keepalive_ms_; }
  bool on_demand() const noexcept { return on_demand_; }
  /// Claims (remote url, track) for `inst`: in_use when another instance of
  /// this context holds it. An acceptor adopts a parked connection at once.
  Status attach(TcpInstance* inst, const UrlBytes& remote, driver::Track track, bool acceptor);
  /// Forgets `inst` (its destructor).
  void detach(TcpInstance* inst) noexcept;
  /// Accepts connections and reads their hellos, handing each to its
  /// instance or parking it; never blocks.
  void progress_accepts() noexcept;
  /// Sleeps until a connection or hello may have arrived, or the deadline.
  void wait_accepts(driver::Deadline deadline) noexcept;
  /// Adds or removes a connected small-track socket in the receive-any set.
  void watch(int fd, TcpInstance* inst) noexcept;
  void unwatch(int fd) noexcept;
  /// Takes a socket disconnect() shut for writing and keeps it open, its
  /// input read and dropped, until the peer acknowledged all we sent (or
  /// its end of file, or linger_limit): closed at once, a packet the peer
  /// sends after it (a credit, a probe) makes the kernel reset the
  /// connection and throw away what it still held of ours, packets
  /// send_post() answered ok. Safe from any thread, the context's lock
  /// held or not.
  void linger(int fd) noexcept;
  /// Sockets lingering now (any thread).
  bool lingering() const noexcept { return lingering_count_.load(std::memory_order_relaxed) != 0; }

 private:
  enum class State : std::uint8_t { fresh, described, running, closed };
  struct Handshake {  ///< accepted, hello not complete yet
    int fd;
    std::size_t got;
    std::array<std::byte, hello_frame_size> buf;
    driver::Clock::time_point since;  ///< accepted at
  };
  struct Parked {  ///< hello read, waiting for the local connect_async()
    int fd;
    UrlBytes url;
    driver::Track track;
    bool reported = false;            ///< by incoming()
    driver::Clock::time_point since;  ///< parked at, or reported at (on demand)
  };

  void accept_new() noexcept;
  /// Reads what has arrived of one hello; false when the entry is finished
  /// (handed over, parked or dropped) and must leave the list.
  bool read_hello(Handshake& h) noexcept;
  void hand_over(int fd, const UrlBytes& url, driver::Track track) noexcept;
  /// Closes what waited longer than park_ms_ for its hello or its instance.
  void drop_stale() noexcept;
  TcpInstance* find_acceptor(const UrlBytes& url, driver::Track track) noexcept;
  /// `lent_only` (if given) tells a wake-up by sockets whose instances
  /// have lent out their buffer and so cannot be ready yet.
  Status probe_once(driver::Instance** ready, bool block, driver::Deadline deadline,
                    bool* lent_only = nullptr) noexcept;
  void close_fds() noexcept;

  State state_ = State::fresh;
  int listen_fd_ = -1;
  /// Held open to be given up when accept() finds no descriptor left: the
  /// waiting connection is then taken and closed, or the listener stays
  /// readable and every wait on it spins.
  int spare_fd_ = -1;
  std::int64_t accept_warned_ns_ = 0;
  /// accept() failed for want of descriptors or memory: make room or shed.
  void accept_starved(int err) noexcept;
  /// A connection accepted: its hello is awaited (epoll, the handshake list).
  void watch_handshake(int fd) noexcept;
  int epoll_fd_ = -1;
  int cancel_fd_ = -1;
  std::uint64_t id_ = 0;
  UrlBytes url_{};
  std::size_t send_queue_ = 64;
  std::size_t recv_buffer_ = std::size_t{256} * 1024;
  std::size_t max_handshakes_ = 64;
  std::int64_t keepalive_ms_ = 0;
  std::int64_t park_ms_ = 60000;

  // Connection set-up may run from several instances' threads at once; the
  // packet paths never take this lock.
  std::mutex mutex_;
  std::vector<TcpInstance*> instances_;
  std::vector<Handshake> handshakes_;
  std::vector<Parked> parked_;
  struct Lingering {
    int fd;
    driver::Clock::time_point since;
  };
  /// Its own lock, taken after mutex_ where both are: linger() runs from
  /// disconnect(), which another thread's receive-any may meet under mutex_.
  std::mutex linger_mutex_;
  std::vector<Lingering> lingering_;  ///< oldest first
  std::atomic<std::size_t> lingering_count_{0};
  driver::Clock::time_point lingering_checked_{};
  /// Reads what lingering sockets hold; closes those whose output the peer
  /// acknowledged, at end of file, in error, past linger_limit, beyond
  /// max_lingering (oldest first), and (`force`) all.
  void drain_lingering(bool force = false) noexcept;
  /// At most every few milliseconds, from the receive paths: a socket's
  /// output being acknowledged wakes nobody.
  void drain_lingering_now_and_then() noexcept;
  /// Peers that asked to be connected (a call-back hello), for incoming().
  std::vector<UrlBytes> asked_;
  bool on_demand_ = false;
  std::size_t next_probe_ = 0;
};

}  // namespace pier::drivers::tcp
