// Compiles frame.hpp on its own: a header that needs an include it lacks fails here.
#include "wire/frame.hpp"
