// The one seam through which every sluice primitive names its atomic, mutex and condition
// variable types.
//
// Production code uses std::atomic, std::mutex and std::condition_variable. A test build may
// define SLUICE_ATOMIC_HEADER to a header that declares `sluice::detail::atomic` (a class
// template with std::atomic's interface), `sluice::detail::mutex` (std::mutex's lock, try_lock
// and unlock) and `sluice::detail::condition_variable` (wait, wait_until and notify_all over a
// std::unique_lock<detail::mutex>) of its own, for example ones that yield to a deterministic
// scheduler at every operation; the library's sources are then compiled again into that test's
// executable. Such a header may also declare `sluice::detail::plain` (below) to watch the plain
// data that passes between threads, as a model checker does to find a missing release/acquire,
// and, for a checker whose threads share one OS thread, `sluice::detail::per_thread<T>()` (each
// modelled thread's own T) with SLUICE_PER_THREAD_DECLARED, which then stands in for the pool's
// thread_local state.
#pragma once

#ifdef SLUICE_ATOMIC_HEADER
#include SLUICE_ATOMIC_HEADER
#else
#include <atomic>
#include <condition_variable>
#include <mutex>

namespace sluice::detail {
template <class T>
using atomic = std::atomic<T>;
using mutex = std::mutex;
using condition_variable = std::condition_variable;
}  // namespace sluice::detail
#endif

#ifndef SLUICE_PLAIN_DECLARED
namespace sluice::detail {
// Plain, non-atomic data that one thread writes and another reads only after the atomics'
// release/acquire pairs order the two (a slot's buffer pointer). T itself here; a model checker's
// seam may declare it (and SLUICE_PLAIN_DECLARED) as a watched variable.
template <class T>
using plain = T;
}  // namespace sluice::detail
#endif
