// The one seam through which every sluice primitive names its atomic and mutex types.
//
// Production code uses std::atomic and std::mutex. A test build may define SLUICE_ATOMIC_HEADER
// to a header that declares `sluice::detail::atomic` (a class template with std::atomic's
// interface) and `sluice::detail::mutex` (a class with std::mutex's lock/try_lock/unlock) of its
// own, for example ones that yield to a deterministic scheduler at every operation; the
// library's sources are then compiled again into that test's executable.
#pragma once

#ifdef SLUICE_ATOMIC_HEADER
#include SLUICE_ATOMIC_HEADER
#else
#include <atomic>
#include <mutex>

namespace sluice::detail {
template <class T>
using atomic = std::atomic<T>;
using mutex = std::mutex;
}  // namespace sluice::detail
#endif
