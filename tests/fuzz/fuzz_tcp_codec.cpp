// libFuzzer target: the tcp driver's own codecs (frame header, url, hello)
// on hostile bytes. The first byte picks the decoder. A url that decodes must
// encode back to bytes that decode to the same url.
#include "drivers/tcp/codec.hpp"

#include <cstdlib>
#include <cstring>
#include <span>

namespace tcp = pier::drivers::tcp;

namespace {
void check_url(std::span<const std::byte> in) {
  auto url = tcp::decode_url(in);
  if (!url) return;
  const auto bytes = tcp::encode_url(*url);
  auto again = tcp::decode_url(bytes);
  if (!again || again->family != url->family || again->port != url->port ||
      again->context_id != url->context_id || again->address != url->address ||
      again->small_limit != url->small_limit) {
    std::abort();
  }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::span<const std::byte> in{reinterpret_cast<const std::byte*>(data) + 1, size - 1};
  switch (data[0] % 3) {
    case 0:
      (void)tcp::decode_frame_header(in);
      break;
    case 1:
      check_url(in);
      break;
    default:
      (void)tcp::decode_hello(in);
      break;
  }
  return 0;
}
