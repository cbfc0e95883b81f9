// pier ofi: choosing a libfabric provider. pier needs reliable datagram
// endpoints (FI_EP_RDM) with tagged messages; RMA with remote CQ data makes
// the large-track rendezvous single-copy. Native providers rank first, then
// tcp;ofi_rxm, shm, and the slow or deprecated ones last.
#pragma once

#include <rdma/fabric.h>

#include <pier/result.hpp>

#include <string>
#include <string_view>

namespace pier::drivers::ofi {

/// Owns an fi_info list.
struct InfoList {
  fi_info* head = nullptr;
  InfoList() = default;
  explicit InfoList(fi_info* h) noexcept : head(h) {}
  ~InfoList();
  InfoList(InfoList&& o) noexcept : head(o.head) { o.head = nullptr; }
  InfoList& operator=(InfoList&& o) noexcept;
  InfoList(const InfoList&) = delete;
  InfoList& operator=(const InfoList&) = delete;
};

/// The API version pier asks libfabric for.
inline constexpr std::uint32_t api_version = FI_VERSION(1, 9);

/// Whether a provider name ("tcp;ofi_rxm") answers to what a user wrote
/// ("tcp", or the full name).
bool provider_matches(std::string_view provider, std::string_view wanted) noexcept;
/// Lower is better; used when no provider is named.
int provider_rank(std::string_view provider) noexcept;

/// The chosen endpoint description: a copy owned by the caller (fi_freeinfo).
struct Choice {
  fi_info* info = nullptr;  ///< one entry, duplicated with fi_dupinfo
  bool rma = false;         ///< RMA with remote CQ data usable
  bool directed = false;    ///< FI_DIRECTED_RECV: receives name their peer
  bool msg = false;         ///< FI_MSG: control messages go untagged
  std::string why_not;      ///< when info is null: the reason, for skips and logs
};

/// Picks an endpoint for `wanted` (empty: the best ranked provider).
Choice choose_provider(std::string_view wanted);

/// The hints pier uses: RDM, tagged; `with_rma` adds FI_RMA, `directed`
/// FI_DIRECTED_RECV, `msg` FI_MSG.
fi_info* make_hints(bool with_rma, bool directed, bool msg = false);

}  // namespace pier::drivers::ofi
