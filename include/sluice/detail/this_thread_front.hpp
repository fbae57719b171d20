// Where sluice::pool's inline paths find the calling thread's front (sluice/detail/pool_cache.hpp,
// which includes this header and defines thread_front): SLUICE_DETAIL_FRONT names it. Not part
// of sluice's API.
//
// Initial-exec TLS: one instruction to reach, no call. A libsluice.so that a program loads with
// dlopen takes its initial-exec TLS (this and the thread's directory of caches, under 200 bytes)
// from the static TLS that glibc keeps spare for such libraries (512 bytes by default, the
// tunable glibc.rtld.optional_static_tls).
//
// A header of its own so that a model checker whose threads share one OS thread can give each of
// them a front of its own: its test build finds a header of this name ahead of this one on its
// include path. Nothing here changes what a program built against these headers gets.
#pragma once

namespace sluice::detail {
struct thread_front;
extern constinit thread_local thread_front tls_front __attribute__((tls_model("initial-exec")));
}  // namespace sluice::detail

// The inline paths name the variable itself, never a reference to it: GCC's UBSan checks a
// reference's address against null with the flags of an `add` that the linker may relax into
// a `lea`, which sets none, and then reports a null that is not there (a static link, x86-64).
#define SLUICE_DETAIL_FRONT ::sluice::detail::tls_front
