// Compiles portals.hpp on its own: a header that needs an include it lacks fails here.
#include "wire/portals.hpp"
