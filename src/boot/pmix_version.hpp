// pier::boot: the version checks of the PMIx back end, apart from libpmix so
// that they build and are tested everywhere.
//   - the PMIx library: pier needs PMIx 3 or newer (PMIX_JOB_SIZE on the
//     wildcard rank, PMIX_TIMEOUT and PMIX_COLLECT_DATA on fences); an older
//     libpmix found at run time is refused with a sentence saying so;
//   - the ranks: each publishes its pier version under a key outside the
//     user's "pier." key space, and after the first fence compares rank 0's
//     with its own, as pier-run compares the hellos (docs/pmi.md).
#pragma once

#include <pier/status.hpp>

#include <cstdint>
#include <string>
#include <string_view>

namespace pier::boot {

inline constexpr int pmix_min_major = 3;
/// The PMIx key holding a rank's pier_version_text().
inline constexpr const char* pmix_version_key = "pier-boot-version";
/// Bumped when the PMIx keys pier writes change meaning.
inline constexpr int pmix_key_format = 1;

/// ok, or unsupported with *why, for PMIx_Get_version()'s text ("OpenPMIx
/// 4.2.2rc2, repo rev: ..." or "PMIx v3.1.5 ..."); malformed when no version
/// can be read from it.
Status check_pmix_library(std::string_view version_text, std::string* why);

/// What a rank publishes: "pier 0.1.0, pmix keys 1".
std::string pier_version_text();

/// ok when `theirs` (rank `rank`'s published text) equals `mine`; else
/// version_mismatch and *why names both.
Status compare_pier_versions(std::string_view mine, std::string_view theirs, std::uint32_t rank,
                             std::uint32_t my_rank, std::string* why);

}  // namespace pier::boot
