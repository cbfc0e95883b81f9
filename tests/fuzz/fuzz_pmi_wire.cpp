// libFuzzer target: pier-run's PMI-1 and PMI-2 command parsers on hostile
// text (a PMI client is any program pier-run starts). A command that parses
// and formats again must parse to the same command.
#include "boot/pmi_wire.hpp"

#include <cstdlib>
#include <string_view>

namespace pmi = pier::boot::pmi;

namespace {
bool same(const pmi::Command& a, const pmi::Command& b) {
  return a.name == b.name && a.pairs == b.pairs;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view text{reinterpret_cast<const char*>(data) + 1, size - 1};
  if (data[0] % 2 == 0) {
    auto command = pmi::parse_v1(text);
    if (!command) return 0;
    auto line = pmi::format_v1(*command);
    if (!line) return 0;
    std::string_view body{*line};
    if (!body.empty() && body.back() == '\n') body.remove_suffix(1);
    auto again = pmi::parse_v1(body);
    if (!again || !same(*again, *command)) std::abort();
  } else {
    auto command = pmi::parse_v2(text);
    if (!command) return 0;
    auto framed = pmi::format_v2(*command);
    if (!framed || framed->size() < pmi::v2_prefix) return 0;
    auto again = pmi::parse_v2(std::string_view{*framed}.substr(pmi::v2_prefix));
    if (!again || !same(*again, *command)) std::abort();
  }
  return 0;
}
