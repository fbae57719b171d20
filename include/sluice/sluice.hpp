// sluice: lock-free concurrency primitives. This header includes every public one.
#pragma once

#include "sluice/gate.hpp"
