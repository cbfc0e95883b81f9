// pier tcp: one instance per (gate, track), one TCP connection each.
// Frames are a 16-byte header and the payload, written with one sendmsg
// straight from the packet's memory; received bytes go through a buffer
// sized at open for small packets and straight into the posted packet for
// the rest of a large one.
#pragma once

#include "drivers/tcp/codec.hpp"
#include "drivers/tcp/local.hpp"

#include <pier/driver.hpp>

#include <chrono>
#include <memory>
#include <vector>

namespace pier::drivers::tcp {

class TcpContext;

class TcpInstance final : public driver::Instance {
 public:
  /// Elements of an iovec post (the caps say so; gather() takes that many).
  static constexpr std::uint32_t max_iov = 64;
  TcpInstance(TcpContext& ctx, driver::Track track);
  ~TcpInstance() override;

  Status connect_async(std::span<const std::byte> remote_url) override;
  Status connect_wait(driver::Deadline deadline) override;
  Status disconnect() override;

  Status send_buf_get(driver::Packet& pkt) override;
  Status send_buf_post(driver::Packet& pkt, std::size_t len) override;
  Status send_post(driver::Packet& pkt) override;
  Status send_poll(driver::Packet& pkt) override;
  Status send_wait(driver::Packet& pkt, driver::Deadline deadline) override;

  Status recv_post(driver::Packet& pkt) override;
  Status recv_poll(driver::Packet& pkt) override;
  Status recv_buf_release(driver::Packet& pkt) override;
  Status recv_wait(driver::Packet& pkt, driver::Deadline deadline) override;
  Status recv_cancel(driver::Packet& pkt) override;

  // --- for the context ------------------------------------------------
  driver::Track track() const noexcept { return track_; }
  const UrlBytes& remote() const noexcept { return remote_; }
  bool attached() const noexcept { return state_ != State::idle; }
  bool awaiting_accept() const noexcept { return state_ == State::accepting; }
  /// Its receive buffer is out with the caller: bytes wait in the socket.
  bool lent() const noexcept { return buf_out_; }
  /// Writes what the socket takes of the queued sends.
  void push_sends() noexcept {
    if (send_count_ != 0 && state_ == State::connected) progress_send();
  }
  /// Takes an accepted connection whose hello named this instance.
  void adopt(int fd) noexcept;
  /// For receive-any: reads what the socket holds (when `read`) and tells
  /// whether a receive posted now would complete at once, or whether the
  /// receive already posted has just completed.
  bool ready(bool read) noexcept;

 private:
  enum class State : std::uint8_t { idle, connecting, accepting, connected, broken, closed };
  // Packet::driver_data[0]: where a packet is; [1]: its final status.
  static constexpr std::uintptr_t mark_sending = 0x5e4d;
  static constexpr std::uintptr_t mark_receiving = 0x4ecf;
  static constexpr std::uintptr_t mark_done = 0x7c9d;
  struct SendSlot {
    driver::Packet* pkt;     ///< nullptr for a frame in driver memory: `frame`
    const std::byte* frame;  ///< a keep-alive or the staging frame, header included
    std::size_t total;       ///< header plus payload
    std::size_t sent;
    std::array<std::byte, frame_header_size> header;
  };

  // connection (instance.cpp)
  void progress_connect() noexcept;
  /// An acceptor of an on-demand context asks the peer to connect: a short
  /// connection carrying a call-back hello (sent from progress_connect()).
  void start_call_back(const Url& url) noexcept;
  void start_probe(const Url& url) noexcept;
  void progress_call_back() noexcept;
  void become_connected() noexcept;
  void fail(Status why, int err) noexcept;
  void release_fd() noexcept;
  /// A send's error: EPIPE or ECONNRESET end the sends only (see
  /// sends_ended_); anything else breaks the instance.
  void send_failed(int err) noexcept;
  /// Before our FIN: a buffer send answered ok at once must leave whole
  /// (with what is queued ahead of it), bounded by `deadline`.
  void flush_staged(driver::Deadline deadline) noexcept;
  Status wait_io(short events, driver::Deadline deadline) noexcept;
  void tick() noexcept;
  // send (send.cpp)
  void progress_send() noexcept;
  /// A lone small frame written in one piece; false when it is not one
  /// (the general path writes it).
  bool send_flat() noexcept;
  void complete_send(SendSlot& slot, Status s) noexcept;
  bool push_keepalive() noexcept;
  /// Why no packet may be posted now (ok when one may).
  Status post_state() const noexcept;
  // receive (recv.cpp)
  void progress_recv() noexcept;
  /// Buffer-based receive: a whole frame buffered and handed out in place.
  Status recv_buffer(driver::Packet& pkt) noexcept;
  /// Reads at most `limit` more bytes into the buffer; false when nothing came.
  bool fill(std::size_t limit = ~std::size_t{0}) noexcept;
  void complete_recv(Status s) noexcept;

  TcpContext& ctx_;
  const driver::Track track_;
  State state_ = State::idle;
  bool death_reported_ = false;
  /// A send failed because the peer closed: sends answer broken, receives
  /// go on until the input ends (send_failed()).
  bool sends_ended_ = false;
  int fd_ = -1;
  UrlBytes remote_{};

  // connector side of the hello
  std::array<std::byte, hello_frame_size> hello_{};
  std::size_t hello_sent_ = hello_frame_size;
  int call_back_fd_ = -1;  ///< acceptor side: the call-back hello's connection
  bool probing_ = false;   ///< ...or, set up eagerly, a bare probe of the peer's listener
  /// When the last call back started: repeated while accepting, since the
  /// peer may have dropped it (its backlog full, its context busy).
  std::chrono::steady_clock::time_point call_back_at_{};
  void close_call_back() noexcept;

  // the driver's own packets: keep-alives out, and the parser of those in
  LocalParser local_{LocalParser::Role::connected};
  std::array<std::byte, keepalive_frame_size> keepalive_ = encode_keepalive_frame();

  // send queue: a fixed ring; packets complete in order
  std::vector<SendSlot> slots_;
  std::size_t send_head_ = 0;
  std::size_t send_count_ = 0;
  std::uint64_t frames_sent_ = 0;

  // buffer-based send: one staging frame (header, then up to max packet
  // bytes) lent by send_buf_get() and queued by send_buf_post(). Allocated
  // at open without touching its pages, so an unused one costs no memory.
  enum class Stage : std::uint8_t { free, lent, queued };
  std::unique_ptr<std::byte[]> stage_;
  std::size_t stage_len_ = 0;  ///< payload bytes it holds
  Stage stage_state_ = Stage::free;

  // receive: buffered bytes are rbuf_[rhead_, rtail_)
  std::vector<std::byte> rbuf_;
  std::size_t rhead_ = 0;
  std::size_t rtail_ = 0;
  bool drained_ = false;     ///< the last read came back short: the socket is empty
  bool read_short_ = false;  ///< a read of this buffer poll came back short
  /// The last buffer poll handed out a packet after a short read: the next
  /// one parses only what is buffered (see recv_buffer()).
  bool skip_read_ = false;
  /// The last packet was large: read the next header alone, so that its
  /// payload goes straight into the posted packet instead of via the buffer.
  bool header_first_ = false;
  bool in_frame_ = false;
  std::uint64_t frame_len_ = 0;
  std::uint64_t frame_left_ = 0;
  std::uint64_t discard_left_ = 0;
  std::size_t recv_max_ = 0;  ///< the largest packet our receive buffer takes
  std::size_t send_max_ = 0;  ///< the largest the peer's takes (from its url)
  driver::Packet* rpkt_ = nullptr;
  /// A frame handed out by recv_poll() in rbuf_, until recv_buf_release():
  /// nothing may move the buffer meanwhile.
  bool buf_out_ = false;
  std::size_t rcap_ = 0;
  std::size_t rfilled_ = 0;

  // keep-alive: checked every few hundred polls, not per packet
  std::uint32_t ticks_ = 0;
  std::uint64_t frames_at_check_ = 0;
  std::chrono::steady_clock::time_point last_check_{};
};

}  // namespace pier::drivers::tcp
