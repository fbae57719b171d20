// The one seam through which every sluice primitive names its atomic, mutex and condition
// variable types.
//
// Production code uses std::atomic, std::mutex and std::condition_variable. A test build may
// define SLUICE_ATOMIC_HEADER to a header that declares `sluice::detail::atomic` (a class
// template with std::atomic's interface), `sluice::detail::mutex` (std::mutex's lock, try_lock
// and unlock) and `sluice::detail::condition_variable` (wait, wait_until and notify_all over a
// std::unique_lock<detail::mutex>) of its own, for example ones that yield to a deterministic
// scheduler at every operation; the library's sources are then compiled again into that test's
// executable.
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
