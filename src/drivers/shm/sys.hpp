// shm: the operating-system calls the driver needs, each turning errno into a
// Status once and logging it where the failure is decided. Nothing here runs
// on the fast path of a small message.
#pragma once

#include <pier/result.hpp>
#include <pier/status.hpp>

#include <sys/types.h>
#include <sys/uio.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>

namespace pier::drivers::shm {

/// An owned file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) noexcept : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) reset(std::exchange(other.fd_, -1));
    return *this;
  }
  ~Fd() { reset(); }
  int get() const noexcept { return fd_; }
  bool valid() const noexcept { return fd_ >= 0; }
  void reset(int fd = -1) noexcept;

 private:
  int fd_ = -1;
};

/// An owned shared mapping.
class Mapping {
 public:
  Mapping() = default;
  Mapping(void* addr, std::size_t len) noexcept : addr_(addr), len_(len) {}
  Mapping(Mapping&& other) noexcept
      : addr_(std::exchange(other.addr_, nullptr)), len_(std::exchange(other.len_, 0)) {}
  Mapping& operator=(Mapping&& other) noexcept;
  ~Mapping() { reset(); }
  std::byte* data() const noexcept { return static_cast<std::byte*>(addr_); }
  std::size_t size() const noexcept { return len_; }
  void reset() noexcept;

 private:
  void* addr_ = nullptr;
  std::size_t len_ = 0;
};

/// This boot's identity (/proc/sys/kernel/random/boot_id as 16 bytes), so a
/// url made on another host, or before a reboot, is told apart.
Result<std::array<std::byte, 16>> boot_id();
/// 64 random bits from the kernel.
std::uint64_t random_u64() noexcept;

/// A sealed memfd of `len` bytes, mapped shared and populated. memfd has no
/// name in /dev/shm, so a killed job leaves nothing behind.
struct Segment {
  Fd fd;
  Mapping map;
};
Result<Segment> create_segment(std::size_t len);
/// Maps a segment received from a peer after checking its size and seals
/// (a peer that could shrink it could make us fault).
Result<Mapping> map_segment(int fd, std::size_t expected_len);

/// A listening SOCK_SEQPACKET socket on the abstract name `name`.
Result<Fd> listen_abstract(const std::string& name);
/// Starts a non-blocking connection to the abstract name: ok when connected,
/// no_resource when the listener's backlog is full (retry later), broken when
/// nobody listens.
Status connect_abstract(int fd, const std::string& name);
Result<Fd> seqpacket_socket();
/// The pid at the other end of a connected Unix socket (SO_PEERCRED).
Result<pid_t> peer_pid(int fd);
/// Whether the process at the other end of a unix socket runs as our
/// effective user (SO_PEERCRED); false when that cannot be read. The
/// sockets are abstract, so any local user could reach them otherwise.
bool same_user(int fd) noexcept;

/// Sends one message with up to one descriptor attached. no_resource when
/// the socket is full, broken when the peer is gone.
Status send_message(int fd, std::span<const std::byte> msg, int pass_fd = -1) noexcept;
/// What recv_message() got.
struct Received {
  std::size_t len = 0;
  Fd fd;              ///< the first descriptor attached, if any
  bool eof = false;   ///< the peer closed its end
  bool none = false;  ///< nothing to read now
};
/// Reads one message without blocking; extra descriptors are closed.
Result<Received> recv_message(int fd, std::span<std::byte> buf) noexcept;

/// Reads `expect` at `addr` in process `pid` with process_vm_readv: the real
/// test that single copy works between this pair (ptrace rules, seccomp,
/// containers all decide it). "" when it works, else why not.
std::string probe_cma(pid_t pid, std::uint64_t addr, std::uint64_t expect);

/// Copies local -> remote iovecs in process `pid` (process_vm_writev, or
/// memcpy when pid is this process), resuming after partial transfers.
/// Copies min(local total, remote total) bytes; returns the bytes written.
Result<std::size_t> cma_write(pid_t pid, std::span<const ::iovec> local,
                              std::span<const ::iovec> remote) noexcept;
/// As cma_write(), skipping the first `remote_offset` bytes of `remote`.
Result<std::size_t> cma_write_at(pid_t pid, std::span<const ::iovec> local,
                                 std::span<const ::iovec> remote,
                                 std::size_t remote_offset) noexcept;
/// Reads process `pid`'s bytes at `addr` into the local iovecs (their total
/// length), resuming after partial transfers.
Status cma_read_iov(pid_t pid, std::uint64_t addr, std::span<const ::iovec> local) noexcept;
/// Reads `len` bytes at `addr` in process `pid` into `dst`.
Status cma_read(pid_t pid, std::uint64_t addr, void* dst, std::size_t len) noexcept;

}  // namespace pier::drivers::shm
