// The Relacy checks' sluice/detail/atomic.hpp: their build puts this folder (seam/) ahead of
// include/ on the include path, so that the library's sources, compiled again into their
// executable, name Relacy's atomic, mutex, condition variable and watched plain data
// (relacy_atomic.hpp) where the installed header names std's.
#pragma once

#include "../../../relacy_atomic.hpp"
