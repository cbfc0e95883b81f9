// pier ofi: the libfabric driver, the path to real fabrics (verbs, EFA, CXI,
// PSM), tested here on libfabric's tcp and shm providers. See docs/ofi.md for
// provider selection, the tags, the rendezvous and the numbers.
//
// Driver specs: "ofi" takes PIER_OFI_PROVIDER, else the best provider found;
// "ofi:<provider>" names one ("ofi:tcp" is tcp;ofi_rxm, "ofi:shm").
#pragma once

#include <pier/driver.hpp>

#include <string>
#include <vector>

namespace pier::drivers::ofi {

/// The driver's registry entry ("ofi").
const pier::driver::DriverEntry& entry();

/// One libfabric provider as pier sees it on this machine (for pier-info).
struct ProviderReport {
  std::string name;     ///< libfabric's provider name, e.g. "tcp;ofi_rxm"
  std::string fabric;   ///< first fabric it offers, e.g. "127.0.0.1/32"
  std::string domain;   ///< first domain, e.g. "lo"
  bool rdm = false;     ///< offers reliable datagram endpoints (FI_EP_RDM)
  bool tagged = false;  ///< ...with FI_TAGGED
  bool rma = false;     ///< ...and FI_RMA with remote CQ data (rendezvous by RMA)
  bool taken = false;   ///< what "ofi" with no provider named would use
  std::string reason;   ///< why it was taken or not, in a few words
};

/// Every provider libfabric offers here, best first. Never throws; an empty
/// list when libfabric finds nothing.
std::vector<ProviderReport> survey();

}  // namespace pier::drivers::ofi
