// libFuzzer target: the shm driver's control-socket codecs (control frame,
// url, hello, reply, done, split) on hostile bytes. The first byte picks the
// decoder; a control message that decodes has its body decoded by subtype.
#include "drivers/shm/codec.hpp"

#include <span>

namespace shm = pier::drivers::shm;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::span<const std::byte> in{reinterpret_cast<const std::byte*>(data) + 1, size - 1};
  switch (data[0] % 5) {
    case 0: {
      auto control = shm::decode_control(in);
      if (control && control->type == shm::LocalType::hello) (void)shm::decode_hello(in);
      if (control && control->type == shm::LocalType::reply) (void)shm::decode_reply(in);
      break;
    }
    case 1:
      (void)shm::decode_url(in);
      break;
    case 2:
      (void)shm::decode_hello(in);
      break;
    case 3:
      (void)shm::decode_done(in);
      break;
    default:
      (void)shm::decode_split(in);
      break;
  }
  return 0;
}
