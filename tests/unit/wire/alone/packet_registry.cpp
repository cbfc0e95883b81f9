// Compiles packet_registry.hpp on its own: a header that needs an include it lacks fails here.
#include "wire/packet_registry.hpp"
