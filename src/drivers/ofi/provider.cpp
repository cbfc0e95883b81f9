#include "drivers/ofi/provider.hpp"

#include "drivers/ofi/ofi.hpp"

#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>

#include <algorithm>
#include <array>
#include <map>

namespace pier::drivers::ofi {

InfoList::~InfoList() {
  if (head != nullptr) fi_freeinfo(head);
}

InfoList& InfoList::operator=(InfoList&& o) noexcept {
  if (this != &o) {
    if (head != nullptr) fi_freeinfo(head);
    head = o.head;
    o.head = nullptr;
  }
  return *this;
}

bool provider_matches(std::string_view provider, std::string_view wanted) noexcept {
  if (provider == wanted) return true;
  // "tcp" names "tcp;ofi_rxm": the core provider under a utility layer.
  const std::size_t semi = provider.find(';');
  return semi != std::string_view::npos && provider.substr(0, semi) == wanted;
}

int provider_rank(std::string_view provider) noexcept {
  // Known software providers, best first; anything else is taken to be a
  // native fabric provider (verbs, efa, cxi, psm3, opx...) and wins.
  static constexpr std::array<std::string_view, 8> software{
      "tcp;ofi_rxm", "shm", "net", "net;ofi_rxm", "tcp", "sockets", "udp;ofi_rxd", "udp"};
  for (std::size_t i = 0; i < software.size(); ++i)
    if (provider == software[i]) return static_cast<int>(i) + 1;
  return 0;
}

fi_info* make_hints(bool with_rma, bool directed, bool msg) {
  fi_info* hints = fi_allocinfo();
  if (hints == nullptr) return nullptr;
  hints->ep_attr->type = FI_EP_RDM;
  hints->caps =
      FI_TAGGED | (with_rma ? FI_RMA : 0) | (directed ? FI_DIRECTED_RECV : 0) | (msg ? FI_MSG : 0);
  // Every operation pier posts carries a fi_context2 at the start of its
  // context, so both context modes are fine.
  hints->mode = FI_CONTEXT | FI_CONTEXT2;
  // Registrations pier can honour: virtual addresses or offsets, provider
  // keys, endpoint binding. Not FI_MR_LOCAL: sends go from user memory.
  hints->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;
  // The context serialises every call under its own mutex.
  hints->domain_attr->threading = FI_THREAD_DOMAIN;
  hints->tx_attr->msg_order = FI_ORDER_SAS;
  hints->rx_attr->msg_order = FI_ORDER_SAS;
  return hints;
}

namespace {

InfoList query(bool with_rma, bool directed = true, bool msg = false) {
  fi_info* hints = make_hints(with_rma, directed, msg);
  if (hints == nullptr) return {};
  fi_info* out = nullptr;
  const int rc = fi_getinfo(api_version, nullptr, nullptr, 0, hints, &out);
  fi_freeinfo(hints);
  return InfoList(rc == 0 ? out : nullptr);
}

/// IPv4 first (link-local IPv6 needs a scope id), then libfabric's order.
int address_rank(const fi_info* fi) noexcept {
  return fi->addr_format == FI_SOCKADDR_IN6 ? 1 : 0;
}

bool rma_usable(const fi_info* fi) noexcept {
  return (fi->caps & FI_RMA) != 0 && fi->domain_attr->cq_data_size >= 8 &&
         fi->domain_attr->mr_iov_limit >= 1;
}

const fi_info* best(const InfoList& list, std::string_view wanted) noexcept {
  const fi_info* pick = nullptr;
  for (const fi_info* fi = list.head; fi != nullptr; fi = fi->next) {
    const std::string_view name = fi->fabric_attr->prov_name;
    if (!wanted.empty() && !provider_matches(name, wanted)) continue;
    if (pick == nullptr) {
      pick = fi;
      continue;
    }
    const std::string_view have = pick->fabric_attr->prov_name;
    const auto key = [](const fi_info* f, std::string_view n) {
      return std::pair{provider_rank(n), address_rank(f)};
    };
    if (key(fi, name) < key(pick, have)) pick = fi;
  }
  return pick;
}

}  // namespace

Choice choose_provider(std::string_view wanted) {
  Choice c;
  // Most wanted first: RMA, then directed receives, then FI_MSG for the
  // control messages (without it they share the tagged queue with data).
  for (int variant = 0; variant < 8; ++variant) {
    const bool with_rma = (variant & 4) == 0;
    const bool directed = (variant & 2) == 0;
    const bool msg = (variant & 1) == 0;
    InfoList list = query(with_rma, directed, msg);
    const fi_info* fi = best(list, wanted);
    if (fi == nullptr) continue;
    if (with_rma && !rma_usable(fi)) continue;
    c.info = fi_dupinfo(fi);
    c.rma = with_rma;
    c.directed = directed;
    c.msg = msg;
    if (c.info == nullptr) c.why_not = "out of memory";
    return c;
  }
  c.why_not = wanted.empty()
                  ? std::string("libfabric offers no FI_EP_RDM endpoint with FI_TAGGED here")
                  : "libfabric offers no FI_EP_RDM endpoint with FI_TAGGED from provider '" +
                        std::string(wanted) + "'";
  return c;
}

std::vector<ProviderReport> survey() {
  std::vector<ProviderReport> out;
  try {
    std::map<std::string, ProviderReport> seen;
    std::vector<std::string> order;
    fi_info* all = nullptr;
    InfoList everything(fi_getinfo(api_version, nullptr, nullptr, 0, nullptr, &all) == 0 ? all
                                                                                         : nullptr);
    InfoList tagged = query(false);
    InfoList rma = query(true);
    auto note = [&](const fi_info* fi) -> ProviderReport& {
      const std::string name = fi->fabric_attr->prov_name;
      auto [it, fresh] = seen.try_emplace(name);
      if (fresh) {
        it->second.name = name;
        it->second.fabric = fi->fabric_attr->name != nullptr ? fi->fabric_attr->name : "";
        it->second.domain = fi->domain_attr->name != nullptr ? fi->domain_attr->name : "";
        order.push_back(name);
      }
      return it->second;
    };
    for (const fi_info* fi = everything.head; fi != nullptr; fi = fi->next) {
      ProviderReport& r = note(fi);
      if (fi->ep_attr->type == FI_EP_RDM) r.rdm = true;
    }
    for (const fi_info* fi = tagged.head; fi != nullptr; fi = fi->next) {
      ProviderReport& r = note(fi);
      r.rdm = r.tagged = true;
    }
    for (const fi_info* fi = rma.head; fi != nullptr; fi = fi->next)
      if (rma_usable(fi)) note(fi).rma = true;
    const Choice chosen = choose_provider("");
    const std::string taken = chosen.info != nullptr ? chosen.info->fabric_attr->prov_name : "";
    if (chosen.info != nullptr) fi_freeinfo(chosen.info);
    for (const std::string& name : order) {
      ProviderReport r = seen[name];
      r.taken = name == taken;
      if (!r.rdm)
        r.reason = "no reliable datagram endpoint (FI_EP_RDM)";
      else if (!r.tagged)
        r.reason = "no FI_TAGGED with ordered sends on FI_EP_RDM";
      else if (r.taken)
        r.reason = r.rma ? "taken: best ranked, rendezvous by RMA"
                         : "taken: best ranked, rendezvous by tagged messages";
      else
        r.reason = std::string("usable as ofi:") + name.substr(0, name.find(';')) +
                   "; ranked below " + (taken.empty() ? std::string("none") : taken);
      out.push_back(std::move(r));
    }
    std::stable_sort(out.begin(), out.end(), [](const ProviderReport& a, const ProviderReport& b) {
      return std::pair{!a.tagged, provider_rank(a.name)} <
             std::pair{!b.tagged, provider_rank(b.name)};
    });
  } catch (...) {
    out.clear();
  }
  return out;
}

}  // namespace pier::drivers::ofi
