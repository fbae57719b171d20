// The deterministic tests' sluice/detail/atomic.hpp: their build puts this folder (seam/) ahead
// of include/ on the include path, so that the library's sources, compiled again into their
// executable, name the scheduler's atomic, mutex and condition variable (deterministic_atomic.hpp)
// where the installed header names std's. Plain data stays plain: there is no model to watch it.
#pragma once

#include "../../../deterministic_atomic.hpp"

namespace sluice::detail {
template <class T>
using plain = T;
inline constexpr bool contention_backs_off = false;  // the scheduler decides who runs next
}  // namespace sluice::detail
