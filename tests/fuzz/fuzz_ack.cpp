// libFuzzer target: AckHeader::decode on hostile bytes (see roundtrip.hpp).
#include "roundtrip.hpp"
#include "wire/wire.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return pier::wire::fuzz::roundtrip<pier::wire::AckHeader>(data, size);
}
