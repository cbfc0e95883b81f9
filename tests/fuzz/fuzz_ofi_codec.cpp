// libFuzzer target: the ofi driver's codecs (url, url header view, control
// messages through its packet-registry parser, rendezvous data) on hostile
// bytes. The first byte picks the decoder; a url that decodes must encode
// back to the same bytes.
#include <cstdlib>
#include <cstring>
#include <span>

#include "drivers/ofi/codec.hpp"

namespace ofi = pier::drivers::ofi;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::span<const std::byte> in{reinterpret_cast<const std::byte*>(data) + 1, size - 1};
  switch (data[0] % 4) {
    case 0: {
      auto url = ofi::decode_url(in);
      if (!url) break;
      auto again = ofi::encode_url(*url);
      // Every field of a url is checked, reserved ones zero: it is canonical.
      if (!again || again->size() != in.size() ||
          std::memcmp(again->data(), in.data(), in.size()) != 0)
        std::abort();
      break;
    }
    case 1:
      (void)ofi::peek_url(in);
      break;
    case 2: {
      static ofi::ControlParser parser;  // built once, as a context does
      (void)parser.decode(in);
      break;
    }
    default: {
      pier::driver::Packet pkt;
      pkt.rdv_len = static_cast<std::uint8_t>(std::min(in.size(), pkt.rdv_data.size()));
      if (pkt.rdv_len) std::memcpy(pkt.rdv_data.data(), in.data(), pkt.rdv_len);
      (void)ofi::decode_rdv(pkt);
      break;
    }
  }
  return 0;
}
