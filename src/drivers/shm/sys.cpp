// shm: operating-system calls, errno turned into Status once.
#include "drivers/shm/sys.hpp"

#include "base/log.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace pier::drivers::shm {

void Fd::reset(int fd) noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

Mapping& Mapping::operator=(Mapping&& other) noexcept {
  if (this != &other) {
    reset();
    addr_ = std::exchange(other.addr_, nullptr);
    len_ = std::exchange(other.len_, 0);
  }
  return *this;
}

void Mapping::reset() noexcept {
  if (addr_ != nullptr) ::munmap(addr_, len_);
  addr_ = nullptr;
  len_ = 0;
}

namespace {

int hex_value(char c) noexcept {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool make_address(const std::string& name, ::sockaddr_un& addr, ::socklen_t& len) noexcept {
  std::memset(&addr, 0, sizeof addr);
  addr.sun_family = AF_UNIX;
  // Abstract namespace: a leading NUL, no file, gone when the socket closes.
  if (name.size() + 1 > sizeof addr.sun_path) return false;
  std::memcpy(addr.sun_path + 1, name.data(), name.size());
  len = static_cast<::socklen_t>(offsetof(::sockaddr_un, sun_path) + 1 + name.size());
  return true;
}

}  // namespace

Result<std::array<std::byte, 16>> boot_id() {
  std::FILE* f = std::fopen("/proc/sys/kernel/random/boot_id", "r");
  if (f == nullptr) {
    PIER_LOG(warn, "shm", "cannot read boot id: {}", std::strerror(errno));
    return Status::system_error;
  }
  char text[64] = {};
  const bool got = std::fgets(text, sizeof text, f) != nullptr;
  std::fclose(f);
  std::array<std::byte, 16> id{};
  std::size_t nibbles = 0;
  for (const char* p = text; got && *p != '\0' && nibbles < 32; ++p) {
    const int v = hex_value(*p);
    if (v < 0) continue;  // dashes and the newline
    id[nibbles / 2] |= static_cast<std::byte>(nibbles % 2 == 0 ? v << 4 : v);
    ++nibbles;
  }
  if (nibbles != 32) {
    PIER_LOG(warn, "shm", "boot id is not a uuid: '{}'", text);
    return Status::system_error;
  }
  return id;
}

std::uint64_t random_u64() noexcept {
  std::uint64_t v = 0;
  if (::getrandom(&v, sizeof v, 0) != static_cast<ssize_t>(sizeof v)) {
    // Uniqueness, not secrecy, is what callers need; time and pid give it.
    v = static_cast<std::uint64_t>(::getpid()) * 0x9e3779b97f4a7c15ULL ^
        static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(&v));
  }
  return v;
}

Result<Segment> create_segment(std::size_t len) {
  Fd fd(::memfd_create("pier-shm", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd.valid()) {
    PIER_LOG(warn, "shm", "cannot create segment: {}", std::strerror(errno));
    return Status::system_error;
  }
  if (::ftruncate(fd.get(), static_cast<off_t>(len)) != 0) {
    PIER_LOG(warn, "shm", "cannot size segment to {} bytes: {}", len, std::strerror(errno));
    return Status::no_memory;
  }
  if (::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    PIER_LOG(warn, "shm", "cannot seal segment: {}", std::strerror(errno));
    return Status::system_error;
  }
  void* addr = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd.get(), 0);
  if (addr == MAP_FAILED) {
    PIER_LOG(warn, "shm", "cannot map segment of {} bytes: {}", len, std::strerror(errno));
    return Status::no_memory;
  }
  return Segment{std::move(fd), Mapping(addr, len)};
}

Result<Mapping> map_segment(int fd, std::size_t expected_len) {
  struct ::stat st {};
  if (::fstat(fd, &st) != 0 || static_cast<std::size_t>(st.st_size) != expected_len) {
    PIER_LOG(warn, "shm", "peer segment has the wrong size");
    return Status::malformed;
  }
  const int seals = ::fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & F_SEAL_SHRINK) == 0) {
    PIER_LOG(warn, "shm", "peer segment is not sealed against shrinking");
    return Status::malformed;
  }
  void* addr =
      ::mmap(nullptr, expected_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (addr == MAP_FAILED) {
    PIER_LOG(warn, "shm", "cannot map peer segment: {}", std::strerror(errno));
    return Status::no_memory;
  }
  return Mapping(addr, expected_len);
}

Result<Fd> seqpacket_socket() {
  Fd fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) {
    PIER_LOG(warn, "shm", "cannot create unix socket: {}", std::strerror(errno));
    return Status::system_error;
  }
  return fd;
}

Result<Fd> listen_abstract(const std::string& name) {
  Result<Fd> fd = seqpacket_socket();
  if (!fd) return fd.status();
  ::sockaddr_un addr;
  ::socklen_t len = 0;
  if (!make_address(name, addr, len)) return Status::invalid_argument;
  if (::bind(fd->get(), reinterpret_cast<::sockaddr*>(&addr), len) != 0 ||
      ::listen(fd->get(), 128) != 0) {
    PIER_LOG(warn, "shm", "cannot listen on @{}: {}", name, std::strerror(errno));
    return Status::system_error;
  }
  return fd;
}

Status connect_abstract(int fd, const std::string& name) {
  ::sockaddr_un addr;
  ::socklen_t len = 0;
  if (!make_address(name, addr, len)) return Status::invalid_argument;
  if (::connect(fd, reinterpret_cast<::sockaddr*>(&addr), len) == 0) return Status::ok;
  const int err = errno;
  if (err == EAGAIN || err == EINPROGRESS) return Status::no_resource;
  if (err == EISCONN) return Status::ok;
  PIER_LOG(debug, "shm", "cannot connect to @{}: {}", name, std::strerror(err));
  return Status::broken;
}

Result<pid_t> peer_pid(int fd) {
  ::ucred cred{};
  ::socklen_t len = sizeof cred;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    PIER_LOG(warn, "shm", "cannot read peer credentials: {}", std::strerror(errno));
    return Status::system_error;
  }
  return cred.pid;
}

bool same_user(int fd) noexcept {
  ::ucred cred{};
  ::socklen_t len = sizeof cred;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return false;
  if (cred.uid == ::geteuid()) return true;
  PIER_LOG(warn, "shm", "refusing pid {} of uid {}: only uid {} may connect", cred.pid, cred.uid,
           ::geteuid());
  return false;
}

Status send_message(int fd, std::span<const std::byte> msg, int pass_fd) noexcept {
  ::iovec iov{const_cast<std::byte*>(msg.data()), msg.size()};
  ::msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  alignas(::cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (pass_fd >= 0) {
    mh.msg_control = control;
    mh.msg_controllen = sizeof control;
    ::cmsghdr* cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(cm), &pass_fd, sizeof(int));
  }
  const ssize_t n = ::sendmsg(fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
  if (n == static_cast<ssize_t>(msg.size())) return Status::ok;
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return Status::no_resource;
  return Status::broken;
}

Result<Received> recv_message(int fd, std::span<std::byte> buf) noexcept {
  ::iovec iov{buf.data(), buf.size()};
  ::msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  alignas(::cmsghdr) char control[CMSG_SPACE(4 * sizeof(int))] = {};
  mh.msg_control = control;
  mh.msg_controllen = sizeof control;
  Received out;
  const ssize_t n = ::recvmsg(fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      out.none = true;
      return out;
    }
    if (errno == ECONNRESET || errno == EPIPE || errno == ENOTCONN) {
      out.eof = true;
      return out;
    }
    return Status::broken;
  }
  for (::cmsghdr* cm = CMSG_FIRSTHDR(&mh); cm != nullptr; cm = CMSG_NXTHDR(&mh, cm)) {
    if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS) continue;
    const std::size_t count = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (std::size_t i = 0; i < count; ++i) {
      int got = -1;
      std::memcpy(&got, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
      if (!out.fd.valid())
        out.fd.reset(got);
      else
        ::close(got);  // a peer sending more than we asked for gets nothing kept
    }
  }
  if (n == 0 && !out.fd.valid()) {
    out.eof = true;  // SOCK_SEQPACKET never carries empty messages of ours
    return out;
  }
  if ((mh.msg_flags & MSG_TRUNC) != 0) return Status::malformed;
  out.len = static_cast<std::size_t>(n);
  return out;
}

std::string probe_cma(pid_t pid, std::uint64_t addr, std::uint64_t expect) {
  if (pid == ::getpid()) return {};  // within a process single copy is memcpy
  std::uint64_t got = 0;
  ::iovec local{&got, sizeof got};
  ::iovec remote{reinterpret_cast<void*>(addr), sizeof got};
  const ssize_t n = ::process_vm_readv(pid, &local, 1, &remote, 1, 0);
  std::string why;
  if (n < 0) {
    why = std::string("process_vm_readv: ") + std::strerror(errno);
  } else if (n != static_cast<ssize_t>(sizeof got)) {
    why = "process_vm_readv: short read";
  } else if (got != expect) {
    why = "the probe word differs (another process behind the pid?)";
  }
  if (!why.empty())
    PIER_LOG(info, "shm", "single copy with pid {} unavailable ({}); using copies through cells",
             pid, why);
  return why;
}

namespace {

/// A position in an iovec list.
struct IovCursor {
  std::span<const ::iovec> v;
  std::size_t index = 0;
  std::size_t offset = 0;

  bool done() const noexcept { return index >= v.size(); }
  void skip_empty() noexcept {
    while (index < v.size() && offset >= v[index].iov_len) {
      ++index;
      offset = 0;
    }
  }
  void advance(std::size_t n) noexcept {
    while (n > 0 && index < v.size()) {
      const std::size_t step = std::min(n, v[index].iov_len - offset);
      offset += step;
      n -= step;
      if (offset == v[index].iov_len) {
        ++index;
        offset = 0;
      }
    }
    skip_empty();
  }
  /// Up to `out.size()` entries from here, covering at most `limit` bytes.
  std::size_t window(std::span<::iovec> out, std::size_t limit) const noexcept {
    std::size_t n = 0;
    for (std::size_t i = index; i < v.size() && n < out.size() && limit > 0; ++i) {
      const std::size_t skip = i == index ? offset : 0;
      const std::size_t len = std::min(v[i].iov_len - skip, limit);
      if (len == 0) continue;
      out[n++] = {static_cast<std::byte*>(v[i].iov_base) + skip, len};
      limit -= len;
    }
    return n;
  }
};

std::size_t total(std::span<const ::iovec> v) noexcept {
  std::size_t t = 0;
  for (const ::iovec& e : v) t += e.iov_len;
  return t;
}

}  // namespace

Result<std::size_t> cma_write(pid_t pid, std::span<const ::iovec> local,
                              std::span<const ::iovec> remote) noexcept {
  return cma_write_at(pid, local, remote, 0);
}

Result<std::size_t> cma_write_at(pid_t pid, std::span<const ::iovec> local,
                                 std::span<const ::iovec> remote,
                                 std::size_t remote_offset) noexcept {
  const std::size_t remote_total = total(remote);
  if (remote_offset > remote_total) return std::size_t{0};
  const std::size_t want = std::min(total(local), remote_total - remote_offset);
  IovCursor src{local};
  IovCursor dst{remote};
  src.skip_empty();
  dst.skip_empty();
  dst.advance(remote_offset);
  std::size_t written = 0;
  const bool same = pid == ::getpid();
  while (written < want) {
    std::array<::iovec, 64> lw;
    std::array<::iovec, 64> rw;
    const std::size_t ln = src.window(lw, want - written);
    const std::size_t rn = dst.window(rw, want - written);
    std::size_t n = 0;
    if (same) {
      const std::size_t len = std::min(lw[0].iov_len, rw[0].iov_len);
      std::memcpy(rw[0].iov_base, lw[0].iov_base, len);
      n = len;
    } else {
      const ssize_t got = ::process_vm_writev(pid, lw.data(), ln, rw.data(), rn, 0);
      if (got <= 0) {
        const int err = got < 0 ? errno : EFAULT;
        if (err == ESRCH) return Status::broken;
        PIER_LOG(warn, "shm", "single copy to pid {} failed: {}", pid, std::strerror(err));
        return Status::system_error;
      }
      n = static_cast<std::size_t>(got);
    }
    src.advance(n);
    dst.advance(n);
    written += n;
  }
  return written;
}

Status cma_read_iov(pid_t pid, std::uint64_t addr, std::span<const ::iovec> local) noexcept {
  const std::size_t want = total(local);
  IovCursor dst{local};
  dst.skip_empty();
  std::size_t done = 0;
  const bool same = pid == ::getpid();
  while (done < want) {
    std::array<::iovec, 64> lw;
    const std::size_t ln = dst.window(lw, want - done);
    std::size_t n = 0;
    if (same) {
      std::memcpy(lw[0].iov_base, reinterpret_cast<const void*>(addr + done), lw[0].iov_len);
      n = lw[0].iov_len;
    } else {
      ::iovec remote{reinterpret_cast<void*>(addr + done), want - done};
      const ssize_t got = ::process_vm_readv(pid, lw.data(), ln, &remote, 1, 0);
      if (got <= 0) {
        const int err = got < 0 ? errno : EFAULT;
        if (err == ESRCH) return Status::broken;
        PIER_LOG(warn, "shm", "single copy from pid {} failed: {}", pid, std::strerror(err));
        return Status::system_error;
      }
      n = static_cast<std::size_t>(got);
    }
    dst.advance(n);
    done += n;
  }
  return Status::ok;
}

Status cma_read(pid_t pid, std::uint64_t addr, void* dst, std::size_t len) noexcept {
  if (pid == ::getpid()) {
    std::memcpy(dst, reinterpret_cast<const void*>(addr), len);
    return Status::ok;
  }
  ::iovec local{dst, len};
  ::iovec remote{reinterpret_cast<void*>(addr), len};
  const ssize_t n = ::process_vm_readv(pid, &local, 1, &remote, 1, 0);
  if (n == static_cast<ssize_t>(len)) return Status::ok;
  if (n < 0 && errno == ESRCH) return Status::broken;
  return Status::system_error;
}

}  // namespace pier::drivers::shm
