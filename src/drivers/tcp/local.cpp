#include "drivers/tcp/local.hpp"

namespace pier::drivers::tcp {

LocalParser::LocalParser(Role role) : parser_(core_, &table_, 0, this) {
  if (role == Role::handshake) {
    (void)table_.register_handler(static_cast<std::uint16_t>(LocalType::hello),
                                  wire::Handler{&on_hello, this});
  } else {
    (void)table_.register_handler(static_cast<std::uint16_t>(LocalType::keepalive),
                                  wire::Handler{&on_keepalive, this});
  }
}

Status LocalParser::feed(std::span<const std::byte> payload) noexcept {
  return parser_.feed_packet(payload);
}

Status LocalParser::on_hello(void* self, const wire::Incoming& in,
                             wire::Continuation& rest) noexcept {
  // The head holds the whole body: hello_size is below the parser's minimum
  // head capacity.
  if (in.body_length != hello_size || in.head.size() != hello_size) return Status::malformed;
  auto* parser = static_cast<LocalParser*>(self);
  parser->hello_ = decode_hello(in.head);
  if (!parser->hello_) return parser->hello_.status();
  rest.consumed = in.head.size();
  return Status::ok;
}

Status LocalParser::on_keepalive(void*, const wire::Incoming& in,
                                 wire::Continuation& rest) noexcept {
  if (in.body_length != 0) return Status::malformed;
  rest.consumed = 0;
  return Status::ok;
}

}  // namespace pier::drivers::tcp
