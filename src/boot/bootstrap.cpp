// pier::boot: back-end selection and the parts every back end shares.
#include "boot/backends.hpp"
#include "boot/pmix.hpp"
#include "boot/proto.hpp"

#include "base/config.hpp"
#include "base/log.hpp"

namespace pier::boot {
namespace {

// The launcher's variables keep the names pier-run has always exported
// (PIER_RUN_*); they are registered here so the registry knows them.
inline const config::StringKey run_socket{
    "RUN_SOCKET", "", "Unix socket of the pier-run that started this process (set by pier-run)"};
inline const config::IntKey run_rank{"RUN_RANK", -1, -1, (1 << 24) - 1,
                                     "rank of this process in its pier-run job (set by pier-run)"};
inline const config::IntKey run_size{"RUN_SIZE", 0, 0, 1 << 24,
                                     "number of processes in the pier-run job (set by pier-run)"};
inline const config::StringKey boot_method{
    "BOOT_METHOD", "auto", "bootstrap back end: auto, pier-run, pmix, pmi or singleton"};
inline const config::IntKey boot_timeout{
    "BOOT_TIMEOUT", 30, 1, 3600,
    "seconds allowed to reach the launcher and complete the version handshake"};

}  // namespace

std::string_view library_version() noexcept {
  return PIER_BOOT_LIBRARY_VERSION;
}

Result<std::unique_ptr<Bootstrap>> Bootstrap::open(std::string_view session) {
  if (!proto::valid_session(session)) {
    PIER_LOG(error, "boot",
             "bootstrap session name '{}': at most {} bytes of a-z, 0-9, '_', '.', '-'", session,
             proto::max_session);
    return Status::invalid_argument;
  }
  auto opened = open_backend(session);
  if (opened) (*opened)->session_ = session;
  return opened;
}

std::string Bootstrap::scoped(std::string_view key) const {
  if (session_.empty()) return std::string(key);
  std::string k = session_;
  k += '/';
  k += key;
  return k;
}

Result<std::unique_ptr<Bootstrap>> Bootstrap::open_backend(std::string_view session) {
  const std::string method = boot_method.get();
  const std::string socket = run_socket.get();
  const bool launched = !socket.empty();
  // External launchers (boot/pmix.hpp); pier-run's own socket wins in auto.
  const std::string_view external =
      method == "auto" && !launched ? detect_external() : std::string_view(method);
  if (external == "pmix" || external == "pmi")
    return open_external(external, Clock::now() + std::chrono::seconds(boot_timeout.get()));
  if (method == "singleton" || (method == "auto" && !launched)) {
    PIER_LOG(debug, "boot", "singleton: rank 0 of 1");
    return open_singleton();
  }
  if (method != "pier-run" && method != "auto") {
    PIER_LOG(error, "boot",
             "unknown PIER_BOOT_METHOD '{}' (expected auto, pier-run, pmix, pmi or singleton)",
             method);
    return Status::invalid_argument;
  }
  const std::int64_t rank = run_rank.get();
  const std::int64_t size = run_size.get();
  if (!launched || rank < 0 || size < 1 || rank >= size) {
    PIER_LOG(error, "boot",
             "inconsistent pier-run environment: PIER_RUN_SOCKET='{}' PIER_RUN_RANK={} "
             "PIER_RUN_SIZE={}",
             socket, rank, size);
    return Status::invalid_argument;
  }
  const Deadline deadline = Clock::now() + std::chrono::seconds(boot_timeout.get());
  return open_pier_run(socket, static_cast<std::uint32_t>(rank), static_cast<std::uint32_t>(size),
                       session, deadline);
}

Status Bootstrap::put(std::string_view key, std::span<const std::byte> value) {
  if (broken_) return Status::broken;
  if (key.empty() || key.size() > proto::max_key || value.size() > proto::max_value)
    return Status::invalid_argument;
  auto [at, fresh] = staged_at_.try_emplace(std::string(key), staged_.size());
  if (!fresh) {
    staged_[at->second].second.assign(value.begin(), value.end());
    return Status::ok;
  }
  // The index must never name a slot that does not exist: undo it if the push fails.
  try {
    staged_.emplace_back(at->first, std::vector<std::byte>(value.begin(), value.end()));
  } catch (...) {
    staged_at_.erase(at);
    throw;
  }
  return Status::ok;
}

Bootstrap::Staged Bootstrap::take_staged() noexcept {
  staged_at_.clear();
  return std::exchange(staged_, {});
}

Result<std::vector<std::byte>> Bootstrap::get(std::uint32_t rank, std::string_view key) const {
  if (broken_) return Status::broken;
  if (rank >= size_) return Status::invalid_argument;
  auto it = visible_.find({rank, std::string(key)});
  if (it == visible_.end()) return Status::not_found;
  return it->second;
}

Status Bootstrap::fail(Status status, std::string text) {
  PIER_LOG(error, "boot", "rank {}: {}", rank_, text);
  last_error_ = std::move(text);
  return status;
}

}  // namespace pier::boot
