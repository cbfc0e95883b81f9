#include "drivers/ofi/ofi.hpp"

#include "base/config.hpp"
#include "drivers/ofi/context.hpp"

namespace pier::drivers::ofi {

inline const config::StringKey provider_key{
    "OFI_PROVIDER", "",
    "libfabric provider for the spec \"ofi\" (\"tcp\", \"shm\", \"tcp;ofi_rxm\"...); empty: the "
    "best ranked one (pier-info lists them)"};

namespace {

Result<std::unique_ptr<driver::Context>> make(std::string_view argument) {
  std::string wanted(argument);
  if (wanted.empty()) wanted = provider_key.get();
  return std::unique_ptr<driver::Context>(std::make_unique<OfiContext>(std::move(wanted)));
}

}  // namespace

const pier::driver::DriverEntry& entry() {
  static const pier::driver::DriverEntry e{
      "ofi", "libfabric reliable datagram endpoints: tagged messages, RMA rendezvous", &make};
  return e;
}

}  // namespace pier::drivers::ofi
