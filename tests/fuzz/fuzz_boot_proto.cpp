// libFuzzer target: the decoders of pier-run's exchange protocol on hostile
// bytes (any local process can connect to pier-run's socket). The first
// byte picks the decoder.
#include "boot/proto.hpp"

#include <span>

namespace proto = pier::boot::proto;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::span<const std::byte> in{reinterpret_cast<const std::byte*>(data) + 1, size - 1};
  switch (data[0] % 9) {
    case 0:
      (void)proto::decode_header(in);
      break;
    case 1:
      (void)proto::decode_hello(in);
      break;
    case 2:
      (void)proto::decode_error(in);
      break;
    case 3:
      (void)proto::decode_commit(in);
      break;
    case 4:
      (void)proto::decode_fence(in);
      break;
    case 5:
      (void)proto::decode_fence_done(in);
      break;
    case 6:
      (void)proto::decode_fence_failed(in);
      break;
    case 7:
      (void)proto::decode_query(in);
      break;
    default:
      (void)proto::decode_query_reply(in);
      break;
  }
  return 0;
}
