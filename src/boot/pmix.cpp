// pier::boot: the PMIx back end (see pmix.hpp). PMIx keeps the data: put
// and commit hand it to the local PMIx server, a fence with PMIX_COLLECT_DATA
// brings every rank's committed data into this process, so get() after the
// fence is answered from the local store (PMIX_OPTIONAL: never a round trip
// to the server, and a missing key is not_found at once instead of a wait).
#include "boot/pmix.hpp"

#include "base/log.hpp"
#include "boot/pmix_version.hpp"

#include <fmt/format.h>
#include <pmix.h>

#if defined(PMIX_VERSION_MAJOR) && PMIX_VERSION_MAJOR < 3
#error \
    "pier's PMIx back end needs PMIx 3 or newer (PMIX_JOB_SIZE, fence timeouts); install a newer libpmix-dev or build without it"
#endif

#include <algorithm>
#include <cstring>

namespace pier::boot {
namespace {

/// pier's keys live under their own prefix in the job's PMIx space, beside
/// the launcher's and any MPI library's.
std::string pmix_key(std::string_view key) {
  return fmt::format("pier.{}", key);
}

std::string pmix_text(pmix_status_t rc) {
  return fmt::format("{} ({})", PMIx_Error_string(rc), rc);
}

class PmixClient final : public Bootstrap {
 public:
  PmixClient(const pmix_proc_t& me, std::uint32_t size) : Bootstrap(me.rank, size), me_(me) {}
  ~PmixClient() override {
    const pmix_status_t rc = PMIx_Finalize(nullptr, 0);
    if (rc != PMIX_SUCCESS) PIER_LOG(warn, "boot", "PMIx_Finalize: {}", pmix_text(rc));
  }

  std::string_view method() const noexcept override { return "pmix"; }

  Status commit() override {
    if (broken_) return Status::broken;
    for (auto& [key, value] : take_staged()) {
      pmix_value_t v;
      PMIX_VALUE_CONSTRUCT(&v);
      v.type = PMIX_BYTE_OBJECT;
      // PMIx_Put copies the bytes; the value is only borrowed here.
      v.data.bo.bytes = reinterpret_cast<char*>(value.data());
      v.data.bo.size = value.size();
      const std::string k = pmix_key(scoped(key));
      const pmix_status_t rc = PMIx_Put(PMIX_GLOBAL, k.c_str(), &v);
      if (rc != PMIX_SUCCESS) {
        return fail(Status::broken, fmt::format("PMIx_Put of '{}': {}", key, pmix_text(rc)));
      }
    }
    const pmix_status_t rc = PMIx_Commit();
    if (rc != PMIX_SUCCESS) return fail(Status::broken, "PMIx_Commit: " + pmix_text(rc));
    return Status::ok;
  }

  /// Publishes this rank's pier version; compared after the first fence.
  Status publish_version() {
    const std::string text = pier_version_text();
    pmix_value_t v;
    PMIX_VALUE_CONSTRUCT(&v);
    v.type = PMIX_STRING;
    v.data.string = const_cast<char*>(text.c_str());  // PMIx_Put copies it
    pmix_status_t rc = PMIx_Put(PMIX_GLOBAL, pmix_version_key, &v);
    if (rc == PMIX_SUCCESS) rc = PMIx_Commit();
    if (rc != PMIX_SUCCESS)
      return fail(Status::broken, "PMIx_Put of pier's version: " + pmix_text(rc));
    return Status::ok;
  }

  Status fence(Deadline deadline) override {
    if (broken_) return Status::broken;
    Status s = fence_once(deadline);
    if (s == Status::ok && epoch_ == 1) s = check_versions();
    return s;
  }

  Result<std::vector<std::byte>> get(std::uint32_t rank, std::string_view key) const override {
    if (broken_) return Status::broken;
    if (rank >= size_ || key.empty() || key.size() > 255) return Status::invalid_argument;
    pmix_proc_t peer;
    PMIX_PROC_CONSTRUCT(&peer);
    PMIX_LOAD_PROCID(&peer, me_.nspace, rank);
    bool optional = true;
    pmix_info_t info;
    PMIX_INFO_CONSTRUCT(&info);
    PMIX_INFO_LOAD(&info, PMIX_OPTIONAL, &optional, PMIX_BOOL);
    pmix_value_t* value = nullptr;
    const std::string k = pmix_key(scoped(key));
    const pmix_status_t rc = PMIx_Get(&peer, k.c_str(), &info, 1, &value);
    PMIX_INFO_DESTRUCT(&info);
    if (rc == PMIX_ERR_NOT_FOUND) return Status::not_found;
    if (rc != PMIX_SUCCESS || value == nullptr) {
      PIER_LOG(error, "boot", "rank {}: PMIx_Get of '{}' from rank {}: {}", rank_, key, rank,
               pmix_text(rc));
      return Status::broken;
    }
    Result<std::vector<std::byte>> out = Status::malformed;
    if (value->type == PMIX_BYTE_OBJECT) {
      const auto* bytes = reinterpret_cast<const std::byte*>(value->data.bo.bytes);
      out = std::vector<std::byte>(bytes, bytes + value->data.bo.size);
    } else {
      PIER_LOG(error, "boot", "rank {}: PMIx key '{}' of rank {} holds type {}, not bytes", rank_,
               key, rank, static_cast<int>(value->type));
    }
    PMIX_VALUE_RELEASE(value);
    return out;
  }

 private:
  /// Rank 0's pier version against ours: every rank checks, so each rank of
  /// another build fails its first fence with both versions named, and the
  /// launcher ends the job.
  Status check_versions() {
    pmix_proc_t first;
    PMIX_PROC_CONSTRUCT(&first);
    PMIX_LOAD_PROCID(&first, me_.nspace, 0);
    bool optional = true;
    pmix_info_t info;
    PMIX_INFO_CONSTRUCT(&info);
    PMIX_INFO_LOAD(&info, PMIX_OPTIONAL, &optional, PMIX_BOOL);
    pmix_value_t* value = nullptr;
    const pmix_status_t rc = PMIx_Get(&first, pmix_version_key, &info, 1, &value);
    PMIX_INFO_DESTRUCT(&info);
    std::string theirs;
    if (rc == PMIX_SUCCESS && value != nullptr && value->type == PMIX_STRING &&
        value->data.string != nullptr)
      theirs = value->data.string;
    if (value != nullptr) PMIX_VALUE_RELEASE(value);
    std::string why;
    if (compare_pier_versions(pier_version_text(), theirs, 0, rank_, &why) == Status::ok)
      return Status::ok;
    broken_ = true;
    return fail(Status::version_mismatch, why);
  }

  Status fence_once(Deadline deadline) {
    // PMIx counts its timeout in whole seconds, 0 meaning none: round up.
    const auto left = std::chrono::ceil<std::chrono::seconds>(deadline - Clock::now()).count();
    int seconds = static_cast<int>(std::clamp<long long>(left, 1, 1 << 30));
    bool collect = true;
    pmix_info_t info[2];
    PMIX_INFO_CONSTRUCT(&info[0]);
    PMIX_INFO_CONSTRUCT(&info[1]);
    PMIX_INFO_LOAD(&info[0], PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
    PMIX_INFO_LOAD(&info[1], PMIX_TIMEOUT, &seconds, PMIX_INT);
    const auto start = Clock::now();
    const pmix_status_t rc = PMIx_Fence(nullptr, 0, info, 2);
    PMIX_INFO_DESTRUCT(&info[0]);
    PMIX_INFO_DESTRUCT(&info[1]);
    ++epoch_;
    if (rc == PMIX_SUCCESS) return Status::ok;
    broken_ = true;
    const double waited = std::chrono::duration<double>(Clock::now() - start).count();
    if (rc == PMIX_ERR_TIMEOUT)
      return fail(Status::timeout,
                  fmt::format("PMIx fence {} timed out after {:.1f} s", epoch_, waited));
    return fail(Status::broken, fmt::format("PMIx fence {} failed: {}", epoch_, pmix_text(rc)));
  }

  pmix_proc_t me_;
  std::uint32_t epoch_ = 0;
};

}  // namespace

bool have_pmix() noexcept {
  return true;
}

Result<std::unique_ptr<Bootstrap>> open_pmix(Deadline) {
  // PMIx_Init bounds its own connection attempt; it has no deadline input.
  pmix_proc_t me;
  PMIX_PROC_CONSTRUCT(&me);
  std::string why;
  if (check_pmix_library(PMIx_Get_version(), &why) != Status::ok) {
    // Before PMIx_Init: an old library may not even speak to this server.
    PIER_LOG(error, "boot", "{}", why);
    return Status::unsupported;
  }
  pmix_status_t rc = PMIx_Init(&me, nullptr, 0);
  if (rc != PMIX_SUCCESS) {
    PIER_LOG(error, "boot", "cannot reach the PMIx server of this job: PMIx_Init: {}",
             pmix_text(rc));
    return Status::broken;
  }
  pmix_proc_t job;
  PMIX_PROC_CONSTRUCT(&job);
  PMIX_LOAD_PROCID(&job, me.nspace, PMIX_RANK_WILDCARD);
  pmix_value_t* value = nullptr;
  rc = PMIx_Get(&job, PMIX_JOB_SIZE, nullptr, 0, &value);
  std::uint32_t size = 0;
  if (rc == PMIX_SUCCESS && value != nullptr && value->type == PMIX_UINT32)
    size = value->data.uint32;
  if (value != nullptr) PMIX_VALUE_RELEASE(value);
  if (size == 0 || me.rank >= size) {
    PIER_LOG(error, "boot", "PMIx gives no usable job size (rank {}, size {}): {}", me.rank, size,
             pmix_text(rc));
    (void)PMIx_Finalize(nullptr, 0);
    return Status::broken;
  }
  PIER_LOG(debug, "boot", "pmix: rank {} of {} in namespace {}", me.rank, size, me.nspace);
  auto client = std::make_unique<PmixClient>(me, size);
  if (client->publish_version() != Status::ok) {
    PIER_LOG(error, "boot", "{}", client->last_error());
    return Status::broken;
  }
  return std::unique_ptr<Bootstrap>(std::move(client));
}

}  // namespace pier::boot
