// tests/launch: the PMIx back end's version checks (src/boot/pmix_version.hpp):
// the library's version text, and two ranks' pier versions.
#include "boot/pmix_version.hpp"

#include "boot/boot.hpp"

#include <gtest/gtest.h>

namespace pier::boot {
namespace {

TEST(PmixVersion, RecentLibrariesPass) {
  std::string why;
  EXPECT_EQ(check_pmix_library("OpenPMIx 4.2.2rc2, repo rev: v4.2.2rc2, Oct 28, 2022", &why),
            Status::ok);
  EXPECT_EQ(check_pmix_library("OpenPMIx v5.0.1", &why), Status::ok);
  EXPECT_EQ(check_pmix_library("PMIx 3.1.5", &why), Status::ok);
}

TEST(PmixVersion, OldLibraryIsRefusedWithASentence) {
  std::string why;
  EXPECT_EQ(check_pmix_library("PMIx v2.2.3 (dummy)", &why), Status::unsupported);
  EXPECT_NE(why.find("too old"), std::string::npos) << why;
  EXPECT_NE(why.find("PMIx 3 or newer"), std::string::npos) << why;
  EXPECT_NE(why.find("v2.2.3"), std::string::npos) << why;
}

TEST(PmixVersion, TextWithoutAVersionIsMalformed) {
  std::string why;
  EXPECT_EQ(check_pmix_library("", &why), Status::malformed);
  EXPECT_EQ(check_pmix_library("PMIx4 build 7", &why), Status::malformed) << why;
}

TEST(PmixVersion, RanksCompareTheirPierVersions) {
  const std::string mine = pier_version_text();
  EXPECT_NE(mine.find(std::string(library_version())), std::string::npos) << mine;
  std::string why;
  EXPECT_EQ(compare_pier_versions(mine, mine, 0, 1, &why), Status::ok);
  EXPECT_EQ(compare_pier_versions(mine, "pier 9.9.9, pmix keys 1", 0, 3, &why),
            Status::version_mismatch);
  EXPECT_EQ(
      why.rfind("rank 0 runs pier 9.9.9, pmix keys 1 but this process (rank 3) runs " + mine, 0),
      0u)
      << why;
  EXPECT_EQ(compare_pier_versions(mine, "", 0, 1, &why), Status::version_mismatch);
  EXPECT_NE(why.find("no pier version"), std::string::npos) << why;
}

}  // namespace
}  // namespace pier::boot
