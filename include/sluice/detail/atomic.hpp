// The atomic, mutex and condition variable types that sluice's primitives name: std::atomic,
// std::mutex and std::condition_variable. Not part of sluice's API.
//
// The library names them only through this header, so that sluice's own test builds can compile
// its sources again over types of their own (a deterministic scheduler's, a model checker's):
// those builds find a header of this name of their own ahead of this one on their include path.
// Nothing here, no macro included, changes what a program built against these headers gets.
#pragma once

#include <atomic>
#include <condition_variable>
#include <mutex>

namespace sluice::detail {

template <class T>
using atomic = std::atomic<T>;
using mutex = std::mutex;
using condition_variable = std::condition_variable;

// Plain, non-atomic data that one thread writes and another reads only after the atomics'
// release/acquire pairs order the two (a slot's buffer pointer). T itself; a model checker's
// header declares it as a variable it watches.
template <class T>
using plain = T;

// Whether a call that lost a CAS to another call waits a while before it tries again (the gate's
// back-off, lib/gate.cpp). The model checkers' builds say no: their schedules, not the clock,
// decide who runs next.
inline constexpr bool contention_backs_off = true;

}  // namespace sluice::detail
