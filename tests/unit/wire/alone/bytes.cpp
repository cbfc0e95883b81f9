// Compiles bytes.hpp on its own: a header that needs an include it lacks fails here.
#include "wire/bytes.hpp"
