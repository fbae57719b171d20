// sluice/pool_resource.hpp: a sluice pool behind the standard std::pmr::memory_resource, so that
// any pmr container (vector, string, list, map, ...) recycles its memory through it.
//
// CONTRACT
//
//   allocate(n, a)    a <= alignof(std::max_align_t) and n <= the pool's ceiling: a block from
//                     the pool, a retained one of n's size class or else fresh memory of that
//                     class's size (operator new, as the pool's own acquire gets it; not
//                     upstream). Anything else, larger or aligned more strictly, comes from
//                     upstream. allocate(0, a) answers a block too (of the smallest class),
//                     which deallocate(p, 0, a) takes back. Throws std::bad_alloc when the
//                     memory cannot be had (or whatever upstream throws).
//   deallocate(p, n, a)  with the n and a that allocate was given, as std::pmr requires: a
//                     pooled block goes back to the pool (kept within its bound, freed past it,
//                     exactly as pool::retire), anything else back to upstream with that n and a.
//   trim()            frees what the pool retains. Unlike synchronized_pool_resource::release(),
//                     nothing frees a block still allocated: those stay the caller's until
//                     deallocate, and only retained ones are ever freed.
//   stats()           the pool's statistics (blocks from upstream are not in them).
//   is_equal(other)   identity: a block may be deallocated only through the resource that
//                     allocated it.
//
// EXACT CLASSES, AT NO COST. deallocate knows only n, and a block must go back into the class
// whose size it has, although a pool's take(n) may answer a larger buffer than asked. So the
// resource never asks for one: it takes only from n's own class (never a larger class, never a
// buffer of a size that is not a class size), and every block it allocates fresh has exactly
// that class's size. A pooled block's capacity is therefore always the size of n's class, which
// deallocate computes from n alone: no header before the block, no lookup. The class computed
// from n is the one retire would compute from the capacity, so deallocate costs what a retire
// costs. Unlike the pool's own calls, the resource's do not run inline in the caller: they come
// through memory_resource's virtual functions into the library (98 instructions a pair against
// the pool's 38, as scripts/instructions.sh counts them).
//
// THREADS, PROGRESS, MEMORY ORDERING, LIFETIME: those of the pool (sluice/pool.hpp). A block may
// be allocated on one thread and deallocated on another, as with synchronized_pool_resource;
// with sluice::pool a pooled allocate or deallocate that hits the calling thread's cache
// performs no atomic read-modify-write. The bytes written into a block before its deallocate are
// visible to the thread whose allocate answers it. The resource may be destroyed while threads
// that used it live on; they may go on to use other resources and exit in any order.
// Destroying the resource frees what its pool retains; blocks still allocated must not be
// deallocated after that (as with any resource).
//
// pool_resource runs on sluice::pool; mutex_pool_resource, the same on sluice::mutex_pool.
//
// It needs the standard library's <memory_resource>: libstdc++ has it, libc++ from 16 on.
#pragma once

#if !__has_include(<memory_resource>)
#error "sluice/pool_resource.hpp needs <memory_resource>, which this standard library lacks (libc++ has it from 16 on); sluice's other headers work without it"
#else

#include <cstddef>
#include <memory_resource>

#include "sluice/pool.hpp"

namespace sluice {

template <class Pool>  // sluice::pool or sluice::mutex_pool
class basic_pool_resource final : public std::pmr::memory_resource {
 public:
  explicit basic_pool_resource(pool_options options = {},
                               std::pmr::memory_resource* upstream = std::pmr::get_default_resource());
  basic_pool_resource(const basic_pool_resource&) = delete;
  basic_pool_resource& operator=(const basic_pool_resource&) = delete;

  [[nodiscard]] std::pmr::memory_resource* upstream_resource() const noexcept { return upstream_; }
  [[nodiscard]] pool_stats stats() const noexcept { return pool_.stats(); }
  void trim() noexcept { pool_.trim(); }

 private:
  void* do_allocate(std::size_t bytes, std::size_t alignment) override;
  void do_deallocate(void* p, std::size_t bytes, std::size_t alignment) override;
  bool do_is_equal(const std::pmr::memory_resource& other) const noexcept override { return this == &other; }

  Pool pool_;
  std::size_t ceiling_;
  std::pmr::memory_resource* upstream_;
};

extern template class basic_pool_resource<pool>;
extern template class basic_pool_resource<mutex_pool>;

using pool_resource = basic_pool_resource<pool>;
using mutex_pool_resource = basic_pool_resource<mutex_pool>;

}  // namespace sluice

#endif  // __has_include(<memory_resource>)
