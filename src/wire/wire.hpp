// pier wire: the door of src/wire. Everything that crosses a process
// boundary is encoded and decoded here, and only here:
//   frame.hpp            the frame of every core packet and its sub-headers
//   portals.hpp          the Portals 4 LIB header (ptl_hdr_t)
//   port.hpp             the GM-style port header
//   packet_registry.hpp  handler tables (core types, driver-local subtypes)
//                        and the stream parser
// Byte layouts and versioning rules: docs/wire.md.
#pragma once

#include "wire/frame.hpp"
#include "wire/packet_registry.hpp"
#include "wire/port.hpp"
#include "wire/portals.hpp"
