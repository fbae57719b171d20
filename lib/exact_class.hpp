// The pools' exact-class calls: what sluice::basic_pool_resource needs of a pool beyond its
// interface, and the exact take that the tests check. Not installed: a friend of both pools
// (sluice/pool.hpp declares it), the library's own.
//
// allocate(size) takes from size's own class only, a buffer whose capacity is exactly that
// class's size, never one of a larger class or of an off-class capacity, or else answers fresh
// memory of that class's size; deallocate(p, size), with size <= ceiling, retires what
// allocate(size) answered, its capacity known from size (docs/pool.md, EXACT CLASSES).
#pragma once

#include <cstddef>

#include "mutex_pool.hpp"
#include "sluice/buffer.hpp"
#include "sluice/pool.hpp"

namespace sluice::detail {

struct exact_class {
  static void* allocate(pool& p, std::size_t size);        // lib/pool/pool.cpp
  static void* allocate(mutex_pool& p, std::size_t size);  // lib/mutex_pool.cpp
  static void deallocate(pool& p, void* block, std::size_t size) noexcept;
  static void deallocate(mutex_pool& p, void* block, std::size_t size) noexcept;

  // take(size) from size's own class only, as allocate takes, answering an empty buffer when
  // that class holds none: the tests (test/lincheck) check the exact takes apart from the fresh
  // memory. Inline, built from paths the library has anyway (pool.hpp's inline ones and the
  // general path; mutex_pool.hpp's take_from), so the library compiles nothing for the tests.
  static buffer take(pool& p, std::size_t size) {
    held h = p.take_cached(size);
    if (h.data == nullptr) h = p.take_general(size, /*exact=*/true);
    return buffer_access::make_or_empty(h, size);
  }
  static buffer take(mutex_pool& p, std::size_t size) { return p.take_from(size, /*exact=*/true); }
};

}  // namespace sluice::detail
