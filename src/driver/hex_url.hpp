// pier driver helpers: the text form of a url. Urls are opaque bytes; the
// launcher and tools carry them as lower-case hex (seed 002 via nmad: the
// core hex-encodes the url for exchange and decodes it before connect).
#pragma once

#include <pier/result.hpp>

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace pier::driver {

/// Two lower-case hex digits per byte.
std::string hex_encode(std::span<const std::byte> bytes);
/// The bytes of a hex text (either case); invalid_argument for an odd length
/// or a character that is not a hex digit.
Result<std::vector<std::byte>> hex_decode(std::string_view text);

}  // namespace pier::driver
