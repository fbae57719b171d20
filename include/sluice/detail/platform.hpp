// What sluice is built for, checked once: C++20 on Linux, with GCC or Clang (README, "Use it"). The
// headers use those compilers' attributes and initial-exec thread-local storage, and the library
// pthread_atfork and sched_getcpu; elsewhere this stops the build with a reason rather than
// letting it fail later, or worse, build.
#pragma once

#if !defined(__linux__)
#error "sluice supports Linux only (it uses pthread_atfork, sched_getcpu and initial-exec thread-local storage)"
#endif
#if !defined(__GNUC__) && !defined(__clang__)
#error "sluice supports GCC and Clang only (its headers use their attributes)"
#endif
#if __cplusplus < 202002L
#error "sluice needs C++20 (-std=c++20, or cpp_std=c++20 in Meson, or cxx_std_20 in CMake)"
#endif
