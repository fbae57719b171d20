// The shared state of a sluice::pool and the thread caches in front of it.
//
//   core          one per pool: the lock-free stacks (one per size class), the slot table under
//                 them, the off-class shelves, the bound's counter, and the registry of thread
//                 caches. Freed in two steps: ~pool frees every buffer and the heavy parts; the
//                 control block itself goes when the last thread that refers to it lets go.
//   thread_cache  one per thread and pool: a magazine of cached buffers per class, spare slots,
//                 spare places of the bound, and the thread's statistics. Owned by the core,
//                 used by its thread alone, touched by others only under admin_mutex.
//
// Every buffer the pool holds sits in exactly one place: a class stack, a cache's magazine, or
// a shelf; and holds one place of the bound (`reserved`), which counts those plus every cache's
// spare places. So reserved <= bound bounds what is held at every instant.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "fork.hpp"
#include "memory.hpp"
#include "shelves.hpp"
#include "size_classes.hpp"
#include "slots.hpp"
#include "sluice/detail/atomic.hpp"
#include "sluice/pool.hpp"

namespace sluice::detail {

// One thread's counts for one pool. Each field is written by one writer at a time (the cache's
// thread, or whoever holds admin_mutex for `departed`); readers sum them with relaxed loads.
struct counters {
  detail::atomic<std::uint64_t> hits{0}, misses{0}, retired{0}, dropped{0}, bytes_in{0}, bytes_out{0};
};

// The state word: bit 0 is the enabled bit, bits 1-23 count the trims running, bits 24-63 are the
// generation, bumped by every trim as it starts (it wraps after 2^40 trims). A thread cache
// remembers the word it last saw; any difference sends it through sync() before the call, which
// frees the cache when the generation moved or the pool is off.
inline constexpr std::uint64_t enabled_bit = 1;
inline constexpr std::uint64_t one_trim = 2;
inline constexpr std::uint64_t trims_mask = (std::uint64_t{1} << 24) - one_trim;
inline constexpr std::uint64_t one_generation = std::uint64_t{1} << 24;

// One class's cached buffers in a thread cache, oldest first. It holds up to 2 * batch_size of
// its class; at that mark the oldest batch moves to the shared stack.
struct magazine {
  static constexpr std::uint32_t room = 32;  // 2 * the largest batch
  std::uint32_t count = 0;
  std::uint32_t limit = room;
  std::byte* items[room];
};

struct thread_cache {
  struct local_chain {
    slot_index first = no_slot;
    std::uint32_t count = 0;
  };

  explicit thread_cache(pool::core& c);
  // Frees the magazines (never their buffers, which are freed or given back before) and touches
  // nothing of the core, which may be gone by then.
  ~thread_cache() = default;

  pool::core& core;
  std::uint64_t seen_state = 0;                 // owner only
  std::unique_ptr<std::unique_ptr<magazine>[]>  // per class, each made at first use; null when
      magazines;                                // caching is off; owner only
  std::uint32_t cached = 0;                     // buffers in all magazines; owner only
  local_chain free_slots;                       // slots with no buffer; owner only
  // Reserved places not yet used; owner writes. Relaxed at every use: it publishes nothing and
  // synchronizes with nothing; stats() reads a momentary value and clamps what it derives.
  detail::atomic<std::uint32_t> spare{0};
  // Odd while the owner pushes a chain to a stack or pops a batch into its cache; trim waits for
  // an odd value to move on (see (P) and (R) in pool.cpp). Owner writes; trim reads it under
  // admin_mutex.
  detail::atomic<std::uint32_t> publishing{0};
  counters counts;                              // owner writes
  thread_cache* prev = nullptr;                 // the core's registry, under admin_mutex
  thread_cache* next = nullptr;
  thread_cache* next_of_thread = nullptr;       // the owning thread's list of its caches
};

}  // namespace sluice::detail

namespace sluice {

struct pool::core final : detail::fork_aware {
  explicit core(const pool_options& o);
  ~core() { leave(); }

  void lock_for_fork() noexcept override;
  void unlock_in_parent() noexcept override;
  void unlock_in_child() noexcept override;

  const detail::size_classes classes;
  const std::unique_ptr<std::size_t[]> class_size;  // classes.size(c), looked up on the fast path
  const std::size_t bound;
  const bool caching;
  // What one thread cache may hold (see THREAD CACHES in pool.hpp): at most cache_limit buffers
  // over all its classes, and places of the bound taken place_batch at a time, of which it keeps
  // at most 2 * place_batch spare. Both scale with the bound, so caches never hoard it.
  const std::uint32_t cache_limit;
  const std::uint32_t place_batch;

  // Read by every call, written by set_enabled and trim only: alone on its line.
  alignas(64) detail::atomic<std::uint64_t> state;
  // Places of the bound in use; see the file comment. Relaxed everywhere: it publishes nothing,
  // and a place is always given back after it was taken, since a buffer's trip from retire to
  // take runs through the stacks' release/acquire pairs.
  alignas(64) detail::atomic<std::size_t> reserved{0};

  std::unique_ptr<detail::tagged_stack[]> stacks;  // per class; freed by ~pool
  detail::tagged_stack free_slots;
  detail::slot_table slots;

  // Off-class buffers. off_class_nonempty[c] mirrors !off_class.empty(c), written under
  // shelf_mutex and read without it as a hint (relaxed: a racing retire may be missed).
  detail::mutex shelf_mutex;
  detail::shelves off_class;
  std::unique_ptr<detail::atomic<bool>[]> off_class_nonempty;

  // Guards what follows, every cache's fields for non-owners, and the publishing of threads
  // that have no cache. Lock order: admin_mutex, then shelf_mutex.
  detail::mutex admin_mutex;
  detail::thread_cache* registry = nullptr;
  std::size_t refs = 1;    // the pool, and each thread_cache
  // False once ~pool has run. Written under admin_mutex; read under it, or without it as a hint
  // (relaxed) by a thread choosing which of its caches to give up.
  detail::atomic<bool> alive{true};
  detail::counters departed;  // the counts of caches that are gone
  detail::counters orphans;   // calls from threads without a cache (fetch_add: any thread)
};

}  // namespace sluice

namespace sluice::detail {

// What a thread's exit does for sluice::pool: gives every cache of the calling thread back to
// its pool (or lets it go, if the pool is gone). Run by a thread_local destructor; the
// deterministic tests call it to drive a thread's exit under their scheduler.
void release_thread_caches() noexcept;

}  // namespace sluice::detail
