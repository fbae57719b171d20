// Raw memory for buffers.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <new>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "sluice/buffer.hpp"

namespace sluice::detail {

static_assert(__STDCPP_DEFAULT_NEW_ALIGNMENT__ >= 16, "buffers promise 16-byte alignment");

// Throws std::bad_alloc when the bytes cannot be had: at once for more than PTRDIFF_MAX bytes,
// which no allocator can give; otherwise when operator new, asked not to throw, answers null.
// Throwing here rather than in operator new keeps the answer the same under a sanitizer's
// allocator, whose throwing operator new aborts on an impossible size, while its nothrow one
// answers null when run with allocator_may_return_null=1 (as scripts/test.sh runs it).
//
// At least 16 bytes are asked for: operator new need only align a block for the objects that fit
// in it, so one of 8 bytes may be 8-aligned (jemalloc and mimalloc do that), while one of 16 or
// more is aligned to __STDCPP_DEFAULT_NEW_ALIGNMENT__, as a buffer promises.
inline std::byte* allocate_bytes(std::size_t n) {
  if (n > static_cast<std::size_t>(PTRDIFF_MAX)) throw std::bad_alloc();
  void* p = ::operator new(std::max<std::size_t>(n, 16), std::nothrow);
  if (p == nullptr) throw std::bad_alloc();
  return static_cast<std::byte*>(p);
}
inline void free_bytes(std::byte* p) noexcept { ::operator delete(p); }  // as ~buffer does

// Asks the allocator to give the pages of freed blocks back to the system: what a decay step
// does after it freed something. glibc keeps blocks below its mmap threshold (128 KiB at first)
// in its heaps until malloc_trim, which walks every arena (docs/pool.md, DECAY, has its cost);
// other allocators decay on their own.
inline void return_free_pages() noexcept {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

}  // namespace sluice::detail
