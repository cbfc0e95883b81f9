// pier ofi: provider names, ranking, the survey for pier-info, and specs
// naming a provider that is not there.
#include <gtest/gtest.h>

#include <algorithm>

#include "drivers/ofi/ofi.hpp"
#include "drivers/ofi/provider.hpp"

namespace pier::drivers::ofi {
namespace {

TEST(OfiProvider, NamesMatchTheCoreProvider) {
  EXPECT_TRUE(provider_matches("tcp;ofi_rxm", "tcp"));
  EXPECT_TRUE(provider_matches("tcp;ofi_rxm", "tcp;ofi_rxm"));
  EXPECT_TRUE(provider_matches("shm", "shm"));
  EXPECT_FALSE(provider_matches("tcp;ofi_rxm", "shm"));
  EXPECT_FALSE(provider_matches("tcp;ofi_rxm", "ofi_rxm"));
  EXPECT_FALSE(provider_matches("tcp", "tcp;ofi_rxm"));
  EXPECT_FALSE(provider_matches("udp;ofi_rxd", "ud"));
}

TEST(OfiProvider, NativeFirstThenTcpThenTheRest) {
  EXPECT_LT(provider_rank("verbs;ofi_rxm"), provider_rank("tcp;ofi_rxm"));
  EXPECT_LT(provider_rank("cxi"), provider_rank("tcp;ofi_rxm"));
  EXPECT_LT(provider_rank("tcp;ofi_rxm"), provider_rank("shm"));
  EXPECT_LT(provider_rank("shm"), provider_rank("sockets"));
  EXPECT_LT(provider_rank("sockets"), provider_rank("udp;ofi_rxd"));
  EXPECT_LT(provider_rank("tcp;ofi_rxm"), provider_rank("net"));
}

TEST(OfiProvider, SurveyExplainsEveryProvider) {
  const std::vector<ProviderReport> all = survey();
  if (all.empty()) GTEST_SKIP() << "libfabric finds no provider here";
  const auto taken = std::count_if(all.begin(), all.end(), [](auto& r) { return r.taken; });
  const bool any_tagged = std::any_of(all.begin(), all.end(), [](auto& r) { return r.tagged; });
  EXPECT_EQ(taken, any_tagged ? 1 : 0);
  for (const ProviderReport& r : all) {
    EXPECT_FALSE(r.name.empty());
    EXPECT_FALSE(r.reason.empty()) << r.name;
    if (r.taken) {
      EXPECT_TRUE(r.tagged) << r.name;
    }
    if (r.rma) {
      EXPECT_TRUE(r.tagged) << r.name;
    }
  }
  // Usable providers come first.
  EXPECT_TRUE(std::is_partitioned(all.begin(), all.end(), [](auto& r) { return r.tagged; }));
}

TEST(OfiProvider, AMissingProviderIsUnavailableNotBroken) {
  auto ctx = driver::make_context("ofi:no-such-provider");
  ASSERT_TRUE(ctx.has_value());
  const std::string why = (*ctx)->unavailable_reason();
  EXPECT_NE(why.find("no-such-provider"), std::string::npos) << why;
  EXPECT_EQ((*ctx)->properties({}).status(), Status::unsupported);
  EXPECT_EQ(entry().name, "ofi");
}

TEST(OfiProvider, ChoiceHonoursTheNamedProvider) {
  for (const char* name : {"tcp", "shm"}) {
    Choice c = choose_provider(name);
    if (c.info == nullptr) continue;  // not offered here
    EXPECT_TRUE(provider_matches(c.info->fabric_attr->prov_name, name));
    EXPECT_EQ(c.info->ep_attr->type, FI_EP_RDM);
    EXPECT_NE(c.info->caps & FI_TAGGED, 0u);
    fi_freeinfo(c.info);
  }
}

TEST(OfiProvider, ControlMessagesLeaveTheTaggedQueueWhereMsgIsOffered) {
  // tcp;ofi_rxm and shm both offer FI_MSG: the choice must take it, or every
  // data packet is matched against the context's control receives first.
  int seen = 0;
  for (const char* name : {"tcp", "shm"}) {
    Choice c = choose_provider(name);
    if (c.info == nullptr) continue;
    ++seen;
    EXPECT_TRUE(c.msg) << name;
    EXPECT_NE(c.info->caps & FI_MSG, 0u) << name;
    EXPECT_TRUE(c.directed) << name;
    fi_freeinfo(c.info);
  }
  if (seen == 0) GTEST_SKIP() << "neither tcp nor shm is offered here";
}

}  // namespace
}  // namespace pier::drivers::ofi
