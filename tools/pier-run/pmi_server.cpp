// pier-run: the PMI server thread (see pmi_server.hpp).
#include "pmi_server.hpp"

#include "output.hpp"

#include <fmt/format.h>

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>

namespace pier::run {

struct PmiServer::Conn {
  int fd = -1;
  boot::pmi::Reader reader;
  std::string pending;  ///< not yet written
  bool close_after = false;
};

PmiServer::PmiServer(std::uint32_t ranks)
    : ranks_(ranks),
      child_fds_(ranks, -1),
      service_(ranks, fmt::format("pier-run.{}", ::getpid())) {
  conns_.resize(ranks);
}

PmiServer::~PmiServer() {
  if (thread_.joinable()) {
    const std::uint64_t one = 1;
    (void)!::write(stop_fd_, &one, sizeof one);
    thread_.join();
  }
  for (int fd : child_fds_)
    if (fd >= 0) ::close(fd);
  for (auto& c : conns_)
    if (c && c->fd >= 0) ::close(c->fd);
  if (stop_fd_ >= 0) ::close(stop_fd_);
  if (abort_fd_ >= 0) ::close(abort_fd_);
}

bool PmiServer::start() {
  stop_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  abort_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (stop_fd_ < 0 || abort_fd_ < 0) {
    say(fmt::format("cannot serve PMI: eventfd: {}", std::strerror(errno)));
    return false;
  }
  for (std::uint32_t r = 0; r < ranks_; ++r) {
    std::array<int, 2> pair{-1, -1};
    // Both ends close on exec; keep_in_child() clears the flag on the
    // rank's own end only, so no rank inherits another's.
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair.data()) != 0) {
      say(fmt::format("cannot serve PMI: socketpair: {}", std::strerror(errno)));
      return false;
    }
    (void)::fcntl(pair[0], F_SETFL, O_NONBLOCK);
    conns_[r] = std::make_unique<Conn>();
    conns_[r]->fd = pair[0];
    child_fds_[r] = pair[1];
  }
  thread_ = std::thread([this] { serve(); });
  return true;
}

std::vector<std::string> PmiServer::environment(std::uint32_t rank) const {
  // hydra also tells each process its place on the node, which MPICH reads
  // instead of parsing PMI_process_mapping: every rank is on this host.
  return {fmt::format("PMI_FD={}", child_fds_[rank]), fmt::format("PMI_RANK={}", rank),
          fmt::format("PMI_SIZE={}", ranks_), fmt::format("MPI_LOCALNRANKS={}", ranks_),
          fmt::format("MPI_LOCALRANKID={}", rank)};
}

bool PmiServer::overrides(std::string_view entry) noexcept {
  return entry.starts_with("PMI_FD=") || entry.starts_with("PMI_RANK=") ||
         entry.starts_with("PMI_SIZE=") || entry.starts_with("MPI_LOCALNRANKS=") ||
         entry.starts_with("MPI_LOCALRANKID=");
}

void PmiServer::keep_in_child(std::uint32_t rank) const noexcept {
  if (rank < child_fds_.size() && child_fds_[rank] >= 0)
    (void)::fcntl(child_fds_[rank], F_SETFD, 0);
}

void PmiServer::forked(std::uint32_t rank) noexcept {
  if (rank < child_fds_.size() && child_fds_[rank] >= 0) {
    ::close(child_fds_[rank]);
    child_fds_[rank] = -1;
  }
}

std::optional<int> PmiServer::take_abort() noexcept {
  std::uint64_t n = 0;
  (void)!::read(abort_fd_, &n, sizeof n);
  const int code = abort_code_.load(std::memory_order_acquire);
  if (code < 0) return std::nullopt;
  return code;
}

void PmiServer::dispatch(std::vector<PmiOutgoing>& out) {
  for (auto& note : service_.take_notes()) say(note);
  for (int code : service_.take_aborts()) {
    int none = -1;
    if (abort_code_.compare_exchange_strong(none, code, std::memory_order_acq_rel)) {
      const std::uint64_t one = 1;
      (void)!::write(abort_fd_, &one, sizeof one);
    }
  }
  for (auto& o : out) {
    Conn* c = o.rank < conns_.size() ? conns_[o.rank].get() : nullptr;
    if (!c || c->fd < 0) continue;
    c->pending += o.bytes;
    c->close_after |= o.close_after;
    flush_conn(o.rank);
  }
  out.clear();
}

void PmiServer::close_conn(std::uint32_t rank) {
  Conn& c = *conns_[rank];
  if (c.fd < 0) return;
  ::close(c.fd);
  c.fd = -1;
  c.pending.clear();
  std::vector<PmiOutgoing> out;
  service_.on_disconnect(rank, PmiService::Clock::now(), out);
  dispatch(out);
}

void PmiServer::flush_conn(std::uint32_t rank) {
  Conn& c = *conns_[rank];
  while (c.fd >= 0 && !c.pending.empty()) {
    const ::ssize_t n = ::send(c.fd, c.pending.data(), c.pending.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) {
      close_conn(rank);
      return;
    }
    c.pending.erase(0, static_cast<std::size_t>(n));
  }
  if (c.fd >= 0 && c.close_after) close_conn(rank);
}

void PmiServer::read_conn(std::uint32_t rank) {
  std::array<char, 16384> buf;
  for (;;) {
    Conn& c = *conns_[rank];
    if (c.fd < 0 || c.close_after || c.pending.size() > max_unsent) return;
    const ::ssize_t n = ::recv(c.fd, buf.data(), buf.size(), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) {
      close_conn(rank);
      return;
    }
    c.reader.append(std::string_view(buf.data(), static_cast<std::size_t>(n)));
    parse_conn(rank);
  }
}

void PmiServer::parse_conn(std::uint32_t rank) {
  for (;;) {
    Conn& c = *conns_[rank];
    if (c.fd < 0 || c.close_after || c.pending.size() > max_unsent) return;
    auto message = c.reader.next();
    if (!message) {
      say(fmt::format(
          "rank {} sent bytes that are neither PMI-1 nor PMI-2; closing its PMI connection", rank));
      close_conn(rank);
      return;
    }
    if (!*message) return;
    std::vector<PmiOutgoing> out;
    service_.on_message(rank, **message, PmiService::Clock::now(), out);
    dispatch(out);
  }
}

void PmiServer::serve() {
  std::vector<::pollfd> fds;
  std::vector<std::uint32_t> owners;
  for (;;) {
    fds.clear();
    owners.clear();
    fds.push_back({stop_fd_, POLLIN, 0});
    owners.push_back(0);
    for (std::uint32_t r = 0; r < ranks_; ++r) {
      const Conn& c = *conns_[r];
      if (c.fd < 0) continue;
      // Once closing, only the unsent answer matters: no POLLIN spin.
      // Nor while its answers pile up unread: it stalls until it reads.
      const bool take = !c.close_after && c.pending.size() <= max_unsent;
      const short events =
          static_cast<short>((take ? POLLIN : 0) | (c.pending.empty() ? 0 : POLLOUT));
      fds.push_back({c.fd, events, 0});
      owners.push_back(r);
    }
    int timeout_ms = -1;
    if (const auto tick = service_.next_tick()) {
      const auto left =
          std::chrono::ceil<std::chrono::milliseconds>(*tick - PmiService::Clock::now());
      timeout_ms = static_cast<int>(std::clamp<std::int64_t>(left.count(), 0, 60'000));
    }
    const int n = ::poll(fds.data(), fds.size(), timeout_ms);
    if (n < 0 && errno != EINTR) {
      say(fmt::format("PMI server stops: poll: {}", std::strerror(errno)));
      return;
    }
    {
      std::vector<PmiOutgoing> out;
      service_.on_tick(PmiService::Clock::now(), out);
      dispatch(out);
    }
    if (n <= 0) {
      for (std::uint32_t r = 0; r < ranks_; ++r) parse_conn(r);  // see below
      continue;
    }
    if (fds[0].revents != 0) return;
    for (std::size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      if (fds[i].revents & POLLOUT) flush_conn(owners[i]);
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) read_conn(owners[i]);
    }
    // Requests read while a rank's answers were backed up: the backlog may
    // have drained by now (written here, or by an answer another rank's
    // message sent on its way), and that rank may send nothing more until
    // they are answered.
    for (std::uint32_t r = 0; r < ranks_; ++r) parse_conn(r);
  }
}

}  // namespace pier::run
