// pier::boot: the PMI-1 "simple" back end (see pmix.hpp), for processes
// started by MPICH's hydra or by pier-run's PMI server. The server keeps the
// data: commit() sends the puts, fence() is a barrier, get() asks the server.
//
// PMI-1 values are text without spaces and at most vallen_max long, and its
// key space is shared by the whole job, so a pier value is stored as
//   <base>      "<chunks>/<FNV-1a 64 of the value, hex>/<hex of chunk 0>"
//   <base>.<i>  "<hex of chunk i>"        for i in 1..chunks-1
// where <base> is "pier-<rank>-<key>" (or, for keys too long or with
// characters PMI-1 cannot carry, "pier-<rank>-h<64-bit FNV-1a of the key>").
#include "boot/pmi_wire.hpp"
#include "boot/pmix.hpp"
#include "boot/socket.hpp"

#include "base/log.hpp"

#include <fmt/format.h>

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>

namespace pier::boot {
namespace {

constexpr auto call_limit = std::chrono::seconds(30);

std::string to_hex(std::span<const std::byte> bytes) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (std::byte b : bytes) {
    out.push_back(digits[std::to_integer<unsigned>(b) >> 4]);
    out.push_back(digits[std::to_integer<unsigned>(b) & 15]);
  }
  return out;
}

bool from_hex(std::string_view text, std::vector<std::byte>& out) {
  if (text.size() % 2 != 0) return false;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  for (std::size_t i = 0; i < text.size(); i += 2) {
    const int hi = nibble(text[i]), lo = nibble(text[i + 1]);
    if (hi < 0 || lo < 0) return false;
    out.push_back(static_cast<std::byte>(hi * 16 + lo));
  }
  return true;
}

std::uint64_t fnv1a(std::span<const std::byte> bytes) {
  std::uint64_t h = 14695981039346656037ull;
  for (std::byte b : bytes) h = (h ^ std::to_integer<std::uint64_t>(b)) * 1099511628211ull;
  return h;
}

bool env_number(const char* name, long long& out) {
  const char* v = std::getenv(name);
  if (!v || !*v) return false;
  const std::string_view text(v);
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size();
}

/// "<pid>" while a PmiClient of this process holds PMI_FD, "<pid>:closed"
/// once one closed it (PMI-1 gives a process one connection, and finalize
/// ends the rank at the server). In the environment, not in a static: the
/// Portals library and the port layer each carry their own copy of this
/// code. Like every Bootstrap, opened from one thread at a time.
constexpr const char* pmi_in_use = "PIER_PMI_CLIENT_PID";

class PmiClient final : public Bootstrap {
 public:
  PmiClient(int fd, std::uint32_t rank, std::uint32_t size) : Bootstrap(rank, size), fd_(fd) {
    (void)::setenv(pmi_in_use, std::to_string(::getpid()).c_str(), 1);
  }
  ~PmiClient() override {
    // finalize tells the server this rank left on purpose; its answer is
    // awaited briefly so the server reads it before the socket closes.
    if (!broken_ && initialised_)
      (void)call("finalize", {}, "finalize_ack", Clock::now() + std::chrono::seconds(2));
    ::close(fd_);
    (void)::setenv(pmi_in_use, (std::to_string(::getpid()) + ":closed").c_str(), 1);
  }

  std::string_view method() const noexcept override { return "pmi"; }

  Status init(Deadline deadline) {
    auto answer =
        call("init", {{"pmi_version", "1"}, {"pmi_subversion", "1"}}, "response_to_init", deadline);
    if (!answer) return answer.status();
    if (const std::string* v = answer->find("pmi_version"); !v || *v != "1")
      return fail(Status::version_mismatch, "the PMI server does not speak PMI-1");
    answer = call("get_maxes", {}, "maxes", deadline);
    if (!answer) return answer.status();
    auto number = [&](const char* key, std::size_t fallback) {
      const std::string* v = answer->find(key);
      std::size_t n = 0;
      if (!v || std::from_chars(v->data(), v->data() + v->size(), n).ec != std::errc())
        return fallback;
      return n;
    };
    key_max_ = number("keylen_max", 64);
    // Hydra's clients read lines of at most 1024 bytes; keep puts within it.
    value_max_ = std::min<std::size_t>(number("vallen_max", 1024), 1024);
    if (key_max_ < 32 || value_max_ < 64)
      return fail(Status::unsupported, fmt::format("PMI limits too small: keylen_max {}, "
                                                   "vallen_max {}",
                                                   key_max_, value_max_));
    answer = call("get_my_kvsname", {}, "my_kvsname", deadline);
    if (!answer) return answer.status();
    const std::string* kvs = answer->find("kvsname");
    if (!kvs || kvs->empty()) return fail(Status::malformed, "the PMI server named no kvsname");
    kvsname_ = *kvs;
    initialised_ = true;
    return Status::ok;
  }

  Status commit() override {
    if (broken_) return Status::broken;
    const Deadline deadline = Clock::now() + call_limit;
    for (auto& [key, value] : take_staged()) {
      const std::string base = base_key(rank_, scoped(key));
      const std::string hex = to_hex(value);
      // Room for "<chunks>/<checksum>/" in the first value.
      const std::size_t chunk = (value_max_ - 32) & ~std::size_t{1};
      const std::size_t chunks = hex.empty() ? 1 : (hex.size() + chunk - 1) / chunk;
      for (std::size_t i = 0; i < chunks; ++i) {
        std::string v = hex.substr(std::min(hex.size(), i * chunk), chunk);
        if (i == 0) v = fmt::format("{}/{:x}/{}", chunks, fnv1a(value), v);
        const std::string k = i == 0 ? base : fmt::format("{}.{}", base, i);
        auto answer =
            call("put", {{"kvsname", kvsname_}, {"key", k}, {"value", v}}, "put_result", deadline);
        if (!answer) return answer.status();
      }
    }
    return Status::ok;
  }

  Status fence(Deadline deadline) override {
    if (broken_) return Status::broken;
    ++epoch_;
    const auto start = Clock::now();
    auto answer = call("barrier_in", {}, "barrier_out", deadline);
    if (answer) {
      visible_.clear();
      return Status::ok;
    }
    // A barrier cannot be withdrawn: whatever happened, the exchange is done.
    broken_ = true;
    if (answer.status() == Status::timeout)
      last_error_ = fmt::format("PMI barrier {} timed out after {:.1f} s", epoch_,
                                std::chrono::duration<double>(Clock::now() - start).count());
    return answer.status();
  }

  Result<std::vector<std::byte>> get(std::uint32_t rank, std::string_view key) const override {
    if (broken_) return Status::broken;
    if (rank >= size_ || key.empty() || key.size() > 255) return Status::invalid_argument;
    if (auto it = visible_.find({rank, std::string(key)}); it != visible_.end()) return it->second;
    const Deadline deadline = Clock::now() + call_limit;
    // A rank one fence ahead may be rewriting the value while it is read in
    // chunks; the checksum catches the mix, and a second read gets the
    // whole of one version.
    Result<std::vector<std::byte>> out = Status::malformed;
    for (int attempt = 0; attempt < 3; ++attempt) {
      out = read_value(rank, scoped(key), deadline);
      if (out.status() != Status::malformed) break;
    }
    if (!out) return out;
    // Cached until the next fence (a later epoch may put the key again).
    // get() is const in the interface; the cache, like the stream, is this
    // object's own.
    const_cast<PmiClient*>(this)->visible_[{rank, std::string(key)}] = *out;
    return out;
  }

 private:
  using Pairs = std::vector<std::pair<std::string, std::string>>;

  std::string base_key(std::uint32_t rank, std::string_view key) const {
    std::string base = fmt::format("pier-{}-{}", rank, key);
    const bool plain = key.find_first_not_of(
                           "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                           "0123456789._:-") == std::string_view::npos;
    // 8 characters stay free for the chunk suffix.
    if (plain && base.size() + 8 < key_max_) return base;
    return fmt::format("pier-{}-h{:016x}", rank, fnv1a(std::as_bytes(std::span(key))));
  }

  /// One read of the chunks of a value; malformed when they do not add up.
  Result<std::vector<std::byte>> read_value(std::uint32_t rank, std::string_view key,
                                            Deadline deadline) const {
    const std::string base = base_key(rank, key);
    auto first = get_value(base, deadline);
    if (!first) return first.status();
    // "<chunks>/<fnv64 hex>/<hex of chunk 0>"
    const std::size_t slash = first->find('/');
    const std::size_t slash2 = slash == std::string::npos ? slash : first->find('/', slash + 1);
    std::size_t chunks = 0;
    std::uint64_t sum = 0;
    if (slash2 == std::string::npos ||
        std::from_chars(first->data(), first->data() + slash, chunks).ec != std::errc() ||
        chunks == 0 || chunks > (std::size_t{1} << 20) ||
        std::from_chars(first->data() + slash + 1, first->data() + slash2, sum, 16).ec !=
            std::errc())
      return Status::malformed;
    std::vector<std::byte> out;
    if (!from_hex(std::string_view(*first).substr(slash2 + 1), out)) return Status::malformed;
    for (std::size_t i = 1; i < chunks; ++i) {
      auto more = get_value(fmt::format("{}.{}", base, i), deadline);
      if (!more) return more.status() == Status::not_found ? Status::malformed : more.status();
      if (!from_hex(*more, out)) return Status::malformed;
    }
    if (fnv1a(out) != sum) return Status::malformed;
    return out;
  }

  Result<std::string> get_value(const std::string& key, Deadline deadline) const {
    auto answer = call("get", {{"kvsname", kvsname_}, {"key", key}}, "get_result", deadline,
                       /*rc_may_fail=*/true);
    if (!answer) return answer.status();
    const std::string* rc = answer->find("rc");
    const std::string* value = answer->find("value");
    if (rc && *rc != "0") return Status::not_found;
    if (!value) return Status::malformed;
    return *value;
  }

  /// One request and its answer, which must be `expect` with rc=0 (unless
  /// rc_may_fail). Failures are recorded and mark the exchange broken when
  /// the connection can no longer be trusted.
  Result<pmi::Command> call(std::string_view name, Pairs pairs, std::string_view expect,
                            Deadline deadline, bool rc_may_fail = false) const {
    pmi::Command request;
    request.name = std::string(name);
    request.pairs = std::move(pairs);
    auto line = pmi::format_v1(request);
    if (!line) return line.status();
    auto* self = const_cast<PmiClient*>(this);  // get() is const; the stream is not
    if (Status s = write_all(fd_, std::as_bytes(std::span(line->data(), line->size())), deadline);
        s != Status::ok)
      return self->lost(s, name);
    for (;;) {
      auto message = reader_.next();
      if (!message) return self->lost(Status::malformed, name);
      if (*message) {
        if ((*message)->framing != pmi::Framing::v1) return self->lost(Status::malformed, name);
        auto answer = pmi::parse_v1((*message)->text);
        if (!answer || answer->name != expect) return self->lost(Status::malformed, name);
        const std::string* rc = answer->find("rc");
        if (!rc_may_fail && rc && *rc != "0") {
          const std::string* msg = answer->find("msg");
          return self->fail(Status::rejected,
                            fmt::format("PMI {} refused: {}", name, msg ? *msg : "rc=" + *rc));
        }
        return answer;
      }
      ::pollfd p{fd_, POLLIN, 0};
      const int n = ::poll(&p, 1, poll_timeout_ms(deadline));
      if (n < 0 && errno == EINTR) continue;
      if (n == 0 && Clock::now() >= deadline) return self->lost(Status::timeout, name);
      std::array<char, 4096> buf;
      const ::ssize_t got = ::read(fd_, buf.data(), buf.size());
      if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (got <= 0) return self->lost(Status::broken, name);
      reader_.append(std::string_view(buf.data(), static_cast<std::size_t>(got)));
    }
  }

  Status lost(Status why, std::string_view during) {
    broken_ = true;
    const char* text = why == Status::timeout  ? "no answer before the deadline"
                       : why == Status::broken ? "the PMI server closed the connection (a rank "
                                                 "left, aborted, or the launcher ended)"
                       : why == Status::closed ? "the PMI server closed the connection"
                                               : "the PMI server's answer is malformed";
    return fail(why == Status::closed ? Status::broken : why,
                fmt::format("PMI {}: {}", during, text));
  }

  int fd_;
  bool initialised_ = false;
  std::string kvsname_;
  std::size_t key_max_ = 64;
  std::size_t value_max_ = 1024;
  std::uint32_t epoch_ = 0;
  mutable pmi::Reader reader_;
};

}  // namespace

Result<std::unique_ptr<Bootstrap>> open_pmi(Deadline deadline) {
  long long fd = -1, rank = -1, size = -1;
  if (!env_number("PMI_FD", fd) || !env_number("PMI_RANK", rank) || !env_number("PMI_SIZE", size) ||
      fd < 0 || fd > 1 << 20 || size < 1 || size > 1 << 24 || rank < 0 || rank >= size) {
    PIER_LOG(error, "boot", "inconsistent PMI environment: PMI_FD='{}' PMI_RANK='{}' PMI_SIZE='{}'",
             std::getenv("PMI_FD") ? std::getenv("PMI_FD") : "",
             std::getenv("PMI_RANK") ? std::getenv("PMI_RANK") : "",
             std::getenv("PMI_SIZE") ? std::getenv("PMI_SIZE") : "");
    return Status::invalid_argument;
  }
  // One PMI-1 connection per process, and one client on it: a second
  // (Portals and the ports side by side) would read the first one's answers
  // and finalize the rank for both.
  if (const char* holder = std::getenv(pmi_in_use); holder != nullptr) {
    const std::string me = std::to_string(::getpid());
    if (me == holder) {
      PIER_LOG(error, "boot",
               "PMI-1 serves one pier API per process, and one already holds PMI_FD: use "
               "pier-run or a PMIx launcher to run Portals and the ports in one process");
      return Status::unsupported;
    }
    if (me + ":closed" == holder) {
      PIER_LOG(error, "boot",
               "PMI-1 was finalized in this process already (PMI_FD is closed): one bootstrap "
               "per process under PMI-1; use pier-run or a PMIx launcher for more");
      return Status::unsupported;
    }
  }
  const int sock = static_cast<int>(fd);
  if (::fcntl(sock, F_GETFD) < 0) {
    PIER_LOG(error, "boot", "PMI_FD={} is not an open descriptor: {}", sock, std::strerror(errno));
    return Status::broken;
  }
  // Not inherited by programs this rank starts; poll() guards every read.
  (void)::fcntl(sock, F_SETFD, FD_CLOEXEC);
  (void)::fcntl(sock, F_SETFL, ::fcntl(sock, F_GETFL) | O_NONBLOCK);
  auto client = std::make_unique<PmiClient>(sock, static_cast<std::uint32_t>(rank),
                                            static_cast<std::uint32_t>(size));
  if (Status s = client->init(deadline); s != Status::ok) return s;
  PIER_LOG(debug, "boot", "pmi: rank {} of {}", rank, size);
  return std::unique_ptr<Bootstrap>(std::move(client));
}

}  // namespace pier::boot
