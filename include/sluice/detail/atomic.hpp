// The one seam through which every sluice primitive names its atomic type.
//
// Production code uses std::atomic. A test build may define SLUICE_ATOMIC_HEADER to a header
// that declares `sluice::detail::atomic` as its own class template with std::atomic's interface
// (for example one that yields to a deterministic scheduler at every operation); the library's
// sources are then compiled again into that test's executable.
#pragma once

#ifdef SLUICE_ATOMIC_HEADER
#include SLUICE_ATOMIC_HEADER
#else
#include <atomic>

namespace sluice::detail {
template <class T>
using atomic = std::atomic<T>;
}  // namespace sluice::detail
#endif
