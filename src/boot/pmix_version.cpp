// pier::boot: PMIx library and rank version checks (see pmix_version.hpp).
#include "boot/pmix_version.hpp"

#include "boot/boot.hpp"

#include <fmt/format.h>

#include <cctype>

namespace pier::boot {

Status check_pmix_library(std::string_view text, std::string* why) {
  // The first number followed by '.' is the major version.
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(text[i]))) continue;
    if (i > 0 && std::isalnum(static_cast<unsigned char>(text[i - 1])) && text[i - 1] != 'v')
      continue;  // a digit inside a word ("PMIx4"), not a version
    std::size_t end = i;
    int major = 0;
    while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end])) && major < 1000)
      major = major * 10 + (text[end++] - '0');
    if (end >= text.size() || text[end] != '.') {
      i = end;
      continue;
    }
    if (major >= pmix_min_major) return Status::ok;
    *why = fmt::format(
        "the PMIx library is too old: it says \"{}\", pier needs PMIx {} or newer; install a "
        "newer libpmix (Debian: libpmix2) or start the job with pier-run",
        text, pmix_min_major);
    return Status::unsupported;
  }
  *why = fmt::format("cannot read a version from the PMIx library's \"{}\"", text);
  return Status::malformed;
}

std::string pier_version_text() {
  return fmt::format("pier {}, pmix keys {}", library_version(), pmix_key_format);
}

Status compare_pier_versions(std::string_view mine, std::string_view theirs, std::uint32_t rank,
                             std::uint32_t my_rank, std::string* why) {
  if (mine == theirs) return Status::ok;
  *why = fmt::format(
      "rank {} runs {} but this process (rank {}) runs {}: every rank of a job must run the same "
      "pier build",
      rank, theirs.empty() ? "no pier version (not pier, or pier before 0.1)" : theirs, my_rank,
      mine);
  return Status::version_mismatch;
}

}  // namespace pier::boot
