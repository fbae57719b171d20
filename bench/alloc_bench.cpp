// The pool workloads (pool_workloads.hpp) over one general-purpose allocator, chosen when this
// file is compiled: -DSLUICE_ALLOC_MIMALLOC, -DSLUICE_ALLOC_JEMALLOC or -DSLUICE_ALLOC_TBB.
// Each becomes its own executable, because linking mimalloc or jemalloc replaces malloc for the
// whole process and would spoil pool_bench's glibc "malloc" variant and its pools.
//
//   mimalloc      mi_malloc / mi_free (libmimalloc; malloc itself is mimalloc's here too)
//   jemalloc      malloc / free, which Debian's unprefixed libjemalloc replaces
//   tbb_scalable  scalable_malloc / scalable_free (libtbbmalloc, no interposition)
#include <cstdio>
#include <cstdlib>
#include <string>

#include "pool_workloads.hpp"

#if defined(SLUICE_ALLOC_MIMALLOC)
#include <mimalloc.h>
#define SLUICE_ALLOC_NAME "mimalloc"
#define SLUICE_ALLOC_LIB "libmimalloc"
struct api {
  static void* allocate(std::size_t n) { return mi_malloc(n); }
  static void release(void* p, std::size_t) noexcept { mi_free(p); }
};
#elif defined(SLUICE_ALLOC_JEMALLOC)
#define SLUICE_ALLOC_NAME "jemalloc"
#define SLUICE_ALLOC_LIB "libjemalloc"
struct api {
  static void* allocate(std::size_t n) { return std::malloc(n); }
  static void release(void* p, std::size_t) noexcept { std::free(p); }
};
#elif defined(SLUICE_ALLOC_TBB)
#include <tbb/scalable_allocator.h>
#define SLUICE_ALLOC_NAME "tbb_scalable"
#define SLUICE_ALLOC_LIB nullptr
struct api {
  static void* allocate(std::size_t n) { return scalable_malloc(n); }
  static void release(void* p, std::size_t) noexcept { scalable_free(p); }
};
#else
#error "compile with one of SLUICE_ALLOC_MIMALLOC, SLUICE_ALLOC_JEMALLOC, SLUICE_ALLOC_TBB"
#endif

namespace {

void register_all() {
  // Where the process's malloc comes from: mimalloc and jemalloc must have replaced it (else
  // the jemalloc variant would be timing glibc); TBB's scalable_malloc leaves it alone.
  const std::string provider = sluice_bench::malloc_provider();
  benchmark::AddCustomContext("malloc_from", provider);
  const char* expected = SLUICE_ALLOC_LIB;
  if (expected != nullptr && provider.find(expected) == std::string::npos) {
    std::fprintf(stderr, "alloc_bench (%s): malloc comes from %s, not %s\n", SLUICE_ALLOC_NAME,
                 provider.c_str(), expected);
    std::exit(1);
  }
  sluice_bench::add_all<sluice_bench::raw_source<api>>(SLUICE_ALLOC_NAME);
}

}  // namespace

SLUICE_BENCH_MAIN(register_all)
