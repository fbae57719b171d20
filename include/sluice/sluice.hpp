// sluice: lock-free concurrency primitives. This header includes every public one.
#pragma once

#include "sluice/buffer.hpp"
#include "sluice/gate.hpp"
#include "sluice/limit.hpp"
#include "sluice/pool.hpp"
#include "sluice/pressure.hpp"
// pool_resource only where the standard library has <memory_resource> (not libc++ before 16).
#if __has_include(<memory_resource>)
#include "sluice/pool_resource.hpp"
#endif
