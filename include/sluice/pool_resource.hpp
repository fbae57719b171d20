// sluice/pool_resource.hpp: a sluice pool behind the standard std::pmr::memory_resource, so that
// any pmr container (vector, string, list, map, ...) recycles its memory through it.
//
// A block of at most the pool's ceiling, aligned to at most alignof(std::max_align_t), comes
// from the pool and goes back to it; anything else comes from upstream and goes back there.
// Blocks may be allocated on one thread and deallocated on another; the pool's rules hold.
//
//   allocate(n, a)       a block of n's size class, retained or fresh; else upstream's
//   deallocate(p, n, a)  a pooled block back to the pool (within its bound), else to upstream
//   trim()               frees what the pool retains, never a block still allocated
//   trim(share)          frees that share of the retained bytes (the pool's trim(share))
//   decay()              a step of the pool's decay (pool_options::decay), the pool's decay()
//   stats()              the pool's statistics (upstream's blocks are not in them)
//   class_stats()        the same per size class
//   is_equal(other)      identity: a block goes back to the resource that allocated it
//   upstream_resource()  where blocks the pool does not serve come from and go back to
//
// pool_resource runs on sluice::pool, mutex_pool_resource on sluice::mutex_pool. The whole
// contract (why a block comes only from its size's own class, threads, lifetime) is in
// docs/pool.md. It needs the standard library's <memory_resource>: libstdc++ has it, libc++
// from 16 on.
#pragma once

#if !__has_include(<memory_resource>)
#error "sluice/pool_resource.hpp needs <memory_resource>, which this standard library lacks (libc++ has it from 16 on); sluice's other headers work without it"
#else

#include <chrono>
#include <cstddef>
#include <memory_resource>

#include "sluice/pool.hpp"

namespace sluice {

template <class Pool>  // sluice::pool or sluice::mutex_pool
class basic_pool_resource final : public std::pmr::memory_resource {
 public:
  // A pool of its own, built with these options; upstream serves what the pool does not. With
  // no options the bound is 4096, not a pool's 1024: a resource serves every size its containers
  // ask for, a dozen classes at once where a frame pool serves one or two. Options passed carry
  // their own bound.
  explicit basic_pool_resource(pool_options options = {.bound = 4096},
                               std::pmr::memory_resource* upstream = std::pmr::get_default_resource());
  basic_pool_resource(const basic_pool_resource&) = delete;
  basic_pool_resource& operator=(const basic_pool_resource&) = delete;

  // Where the blocks that the pool does not serve come from and go back to.
  [[nodiscard]] std::pmr::memory_resource* upstream_resource() const noexcept { return upstream_; }
  [[nodiscard]] pool_stats stats() const noexcept { return pool_.stats(); }  // the pool's
  [[nodiscard]] std::vector<pool_class_stats> class_stats() const { return pool_.class_stats(); }  // per class
  void trim() noexcept { pool_.trim(); }  // frees what the pool retains
  void trim(double share) noexcept { pool_.trim(share); }  // a share of its bytes (docs/pool.md)
  bool decay(std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now()) noexcept {
    return pool_.decay(now);  // frees what sat unused (docs/pool.md, DECAY)
  }

 private:
  // memory_resource's allocate, deallocate and is_equal (above).
  void* do_allocate(std::size_t bytes, std::size_t alignment) override;
  void do_deallocate(void* p, std::size_t bytes, std::size_t alignment) override;
  bool do_is_equal(const std::pmr::memory_resource& other) const noexcept override { return this == &other; }

  Pool pool_;
  std::size_t ceiling_;
  std::pmr::memory_resource* upstream_;
};

extern template class basic_pool_resource<pool>;
extern template class basic_pool_resource<mutex_pool>;

using pool_resource = basic_pool_resource<pool>;              // on sluice::pool
using mutex_pool_resource = basic_pool_resource<mutex_pool>;  // on sluice::mutex_pool

}  // namespace sluice

#endif  // __has_include(<memory_resource>)
