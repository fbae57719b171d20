// sluice: lock-free concurrency primitives. This header includes every public one.
#pragma once

#include "sluice/buffer.hpp"
#include "sluice/gate.hpp"
#include "sluice/pool.hpp"
#include "sluice/pool_resource.hpp"
