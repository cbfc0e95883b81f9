// pier::boot: the pier-run back end, a client of the launcher's Unix socket.
// The launcher gathers every rank's committed entries and, once all ranks
// joined a fence, sends the whole epoch's entries to each of them, so get()
// is a local lookup.
#include "boot/backends.hpp"
#include "boot/proto.hpp"
#include "boot/socket.hpp"

#include "base/log.hpp"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>

namespace pier::boot {
namespace {

/// How long a timed-out fence waits for the launcher to say who is missing.
constexpr auto query_grace = std::chrono::seconds(2);

class PierRunClient final : public Bootstrap {
 public:
  PierRunClient(int fd, std::uint32_t rank, std::uint32_t size) : Bootstrap(rank, size), fd_(fd) {}
  ~PierRunClient() override { ::close(fd_); }

  std::string_view method() const noexcept override { return "pier-run"; }

  Status handshake(std::string_view session, Deadline deadline) {
    proto::Hello hello{rank_, size_, static_cast<std::uint32_t>(::getpid()),
                       std::string(library_version()), std::string(session)};
    if (Status s = send(proto::encode_hello(hello), deadline); s != Status::ok) return s;
    auto frame = receive(deadline);
    if (!frame) {
      return frame.status() == Status::version_mismatch
                 ? frame.status()
                 : fail(frame.status(), fmt::format("no answer from pier-run to the handshake: {}",
                                                    describe(frame.status())));
    }
    if (frame->header.type == proto::Type::welcome && frame->body.empty()) return Status::ok;
    return unexpected(*frame);
  }

  Status commit() override {
    if (broken_) return Status::broken;
    if (nothing_staged()) return Status::ok;
    Staged staged = take_staged();
    std::vector<proto::Entry> entries;
    entries.reserve(staged.size());
    for (auto& [key, value] : staged) entries.push_back({rank_, key, std::move(value)});
    // A commit carries at most max_commit_entries: more go as several.
    const std::span<const proto::Entry> all(entries);
    for (std::size_t at = 0; at < all.size(); at += proto::max_commit_entries) {
      const std::size_t n = std::min<std::size_t>(proto::max_commit_entries, all.size() - at);
      if (Status s = send(proto::encode_commit(all.subspan(at, n)),
                          Clock::now() + std::chrono::seconds(10));
          s != Status::ok)
        return s;
    }
    return Status::ok;
  }

  Status fence(Deadline deadline) override {
    if (broken_) return Status::broken;
    const auto start = Clock::now();
    ++epoch_;
    if (Status s = send(proto::encode_fence(epoch_), deadline); s != Status::ok) return s;
    auto frame = receive(deadline);
    if (!frame && frame.status() == Status::timeout) return fence_timed_out(start);
    if (!frame) return frame.status();
    if (frame->header.type == proto::Type::fence_done) return apply(*frame);
    return unexpected(*frame);
  }

 private:
  /// Asks the launcher who is missing, so that the error names the ranks.
  /// The fence may still complete meanwhile: then it is a success.
  Status fence_timed_out(Clock::time_point start) {
    const double waited = std::chrono::duration<double>(Clock::now() - start).count();
    const Deadline grace = Clock::now() + query_grace;
    std::string why = "pier-run did not say which ranks are missing";
    if (send(proto::encode_query(epoch_), grace) == Status::ok) {
      for (;;) {
        auto frame = receive(grace);
        if (!frame) break;
        if (frame->header.type == proto::Type::fence_done) return apply(*frame);
        if (frame->header.type != proto::Type::query_reply) return unexpected(*frame);
        auto reply = proto::decode_query_reply(frame->body);
        if (!reply) return broken(Status::malformed, "malformed query reply from pier-run");
        if (reply->epoch != epoch_) continue;
        why = reply->text;
        break;
      }
    }
    return broken(Status::timeout,
                  fmt::format("fence {} timed out after {:.1f} s: {}", epoch_, waited, why));
  }

  Status apply(const proto::Frame& frame) {
    auto done = proto::decode_fence_done(frame.body);
    if (!done || done->epoch != epoch_)
      return broken(Status::malformed, "malformed fence answer from pier-run");
    for (auto& e : done->entries) {
      if (e.rank >= size_)
        return broken(Status::malformed, "fence answer names a rank beyond size");
      visible_[{e.rank, std::move(e.key)}] = std::move(e.value);
    }
    return Status::ok;
  }

  /// Any frame the protocol does not allow here; error and fence_failed
  /// frames carry the launcher's own explanation.
  Status unexpected(const proto::Frame& frame) {
    if (frame.header.type == proto::Type::error) {
      auto err = proto::decode_error(frame.body);
      if (!err) return broken(Status::malformed, "malformed error frame from pier-run");
      const Status s = err->why == proto::Refusal::version_mismatch ? Status::version_mismatch
                                                                    : Status::rejected;
      return broken(s, "pier-run refused this rank: " + err->text);
    }
    if (frame.header.type == proto::Type::fence_failed) {
      auto report = proto::decode_fence_failed(frame.body);
      if (!report) return broken(Status::malformed, "malformed fence failure from pier-run");
      return broken(Status::broken, fmt::format("fence {} failed: {}", epoch_, report->text));
    }
    return broken(Status::malformed, fmt::format("unexpected frame type {} from pier-run",
                                                 static_cast<int>(frame.header.type)));
  }

  Status broken(Status status, std::string text) {
    broken_ = true;
    return fail(status, std::move(text));
  }

  Status send(const std::vector<std::byte>& frame, Deadline deadline) {
    const Status s = write_all(fd_, frame, deadline);
    if (s == Status::ok) return s;
    return broken(s == Status::timeout ? Status::timeout : Status::broken,
                  s == Status::timeout ? "pier-run does not read its socket"
                                       : "lost the connection to pier-run");
  }

  /// The next frame, timeout at the deadline, broken when pier-run is gone,
  /// version_mismatch when it speaks another protocol version.
  Result<proto::Frame> receive(Deadline deadline) {
    std::array<std::byte, 4096> chunk;
    for (;;) {
      auto next = reader_.next();
      if (!next) return broken(Status::malformed, "undecodable bytes from pier-run");
      if (*next) {
        proto::Frame f = std::move(**next);
        if (f.header.version != proto::version) {
          return broken(Status::version_mismatch,
                        fmt::format("pier-run speaks boot protocol version {}, this process "
                                    "version {} (pier {}): use the pier-run of the same build",
                                    f.header.version, proto::version, library_version()));
        }
        return f;
      }
      ::pollfd p{fd_, POLLIN, 0};
      const int ready = ::poll(&p, 1, poll_timeout_ms(deadline));
      if (ready < 0 && errno != EINTR) return broken(Status::system_error, "poll failed");
      if (ready <= 0) {
        if (Clock::now() >= deadline) return Status::timeout;
        continue;
      }
      const ::ssize_t n = ::recv(fd_, chunk.data(), chunk.size(), 0);
      if (n > 0) {
        reader_.append(std::span(chunk.data(), static_cast<std::size_t>(n)));
      } else if (n == 0) {
        return broken(Status::broken, "pier-run closed the connection");
      } else if (errno != EINTR && errno != EAGAIN) {
        return broken(Status::broken,
                      fmt::format("cannot read from pier-run: {}", std::strerror(errno)));
      }
    }
  }

  int fd_;
  proto::FrameReader reader_;
  std::uint32_t epoch_ = 0;
};

}  // namespace

Result<std::unique_ptr<Bootstrap>> open_pier_run(std::string_view socket, std::uint32_t rank,
                                                 std::uint32_t size, std::string_view session,
                                                 Deadline deadline) {
  auto address = parse_unix_address(socket);
  if (!address) {
    PIER_LOG(error, "boot", "PIER_RUN_SOCKET '{}' is not a usable socket name", socket);
    return Status::invalid_argument;
  }
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    PIER_LOG(error, "boot", "cannot create a Unix socket: {}", std::strerror(errno));
    return Status::system_error;
  }
  // Non-blocking from the start: every wait is bounded by the deadline,
  // the connection's too. A blocking connect() waits without end while the
  // launcher's listen backlog is full and it accepts nothing (stopped, or
  // busy with many ranks); a non-blocking one says EAGAIN and is retried.
  (void)::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  for (int pause_ms = 1;; pause_ms = std::min(pause_ms * 2, 50)) {
    if (::connect(fd, reinterpret_cast<const ::sockaddr*>(&address->addr), address->len) == 0)
      break;
    if (errno == EINTR) continue;
    if (errno != EAGAIN) {
      PIER_LOG(error, "boot", "rank {}: cannot reach pier-run at {}: {}", rank, socket,
               std::strerror(errno));
      ::close(fd);
      return Status::broken;
    }
    if (Clock::now() >= deadline) {
      PIER_LOG(error, "boot", "rank {}: pier-run at {} accepted no connection in time", rank,
               socket);
      ::close(fd);
      return Status::timeout;
    }
    ::poll(nullptr, 0, std::min(pause_ms, poll_timeout_ms(deadline) + 1));
  }
  auto client = std::make_unique<PierRunClient>(fd, rank, size);
  if (Status s = client->handshake(session, deadline); s != Status::ok) return s;
  PIER_LOG(debug, "boot", "pier-run: rank {} of {}", rank, size);
  return std::unique_ptr<Bootstrap>(std::move(client));
}

}  // namespace pier::boot
