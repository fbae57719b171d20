// The Relacy checks' sluice/detail/this_thread_front.hpp (beside their atomic.hpp in seam/):
// Relacy runs its threads as fibers of one OS thread, which would share the front's
// thread_local, so each modelled thread's front comes from per_thread (relacy_atomic.hpp, whose
// SLUICE_PER_THREAD_DECLARED has lib/pool/thread_caches.cpp keep the rest of a thread's state
// there too, and define no tls_front).
#pragma once

#include "sluice/detail/atomic.hpp"

namespace sluice::detail {
struct thread_front;
}  // namespace sluice::detail

#define SLUICE_DETAIL_FRONT (::sluice::detail::per_thread<::sluice::detail::thread_front>())
