// The shared state of a sluice::pool and the thread caches in front of it.
//
//   core          one per pool: the lock-free stacks (one per size class), the slot table under
//                 them, the off-class shelves, the bound's counter, and the registry of thread
//                 caches. Freed in two steps: ~pool frees every buffer and the heavy parts; the
//                 control block itself goes when the last thread that refers to it lets go.
//   thread_cache  one per thread and pool: a magazine per class (sluice/detail/pool_cache.hpp),
//                 the view the thread's front points at, spare slots, and the thread's
//                 statistics. Owned by the core, used by its thread alone, touched by others only
//                 under admin_mutex.
//
// Every buffer the pool holds sits in exactly one place: a class stack, a magazine, or a shelf;
// and holds one place of the bound (`reserved`), which counts those plus the places that
// magazines hold spare. So reserved <= bound bounds what is held at every instant.
//
// The state word, in the pool object (read by every call's inline path):
//   bit 0       enabled
//   bits 1-15   trims running
//   bits 16-63  a stamp, drawn from one process-wide counter at every change of the word but a
//               trim's end, so that no two pools and no two moments of one pool share a word
//               (while a stamp stands, the trims running only fall); it wraps after 2^48 draws.
// `generation` counts the trims begun; a cache that finds it moved frees what it holds.
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
#include "sluice/detail/pool_cache.hpp"
#include "sluice/pool.hpp"

namespace sluice::detail {

inline constexpr std::uint64_t enabled_bit = 1;
inline constexpr std::uint64_t one_trim = 2;
inline constexpr std::uint64_t trims_mask = (std::uint64_t{1} << 16) - one_trim;
inline constexpr std::uint64_t one_stamp = std::uint64_t{1} << 16;

// One thread's counts for one pool, beside what its magazines tell (thread_cache::tally). Each
// field is written by one writer at a time (the cache's thread, or whoever holds admin_mutex for
// `departed`); readers sum them with relaxed loads.
struct counters {
  detail::atomic<std::uint64_t> hits{0}, misses{0}, retired{0}, dropped{0}, bytes_in{0}, bytes_out{0};

  // Adds these counts to `into`, whose one writer is the caller.
  void fold_into(counters& into) const noexcept {
    for (auto field : {&counters::hits, &counters::misses, &counters::retired, &counters::dropped,
                       &counters::bytes_in, &counters::bytes_out}) {
      auto& a = into.*field;
      a.store(a.load(std::memory_order_relaxed) + (this->*field).load(std::memory_order_relaxed),
              std::memory_order_relaxed);
    }
  }
};

struct thread_cache {
  explicit thread_cache(pool::core& c);
  // Frees the magazines (never their buffers, which are freed or given back before) and touches
  // nothing of the core, which may be gone by then.
  ~thread_cache() = default;

  // Adds what this cache did to `into`: its counters, and what its magazines derive.
  void tally(counters& into) const noexcept;
  // Places its magazines hold without a buffer.
  std::size_t spare_places() const noexcept;

  pool::core& core;
  std::uint64_t synced_state = 0;       // the state word the cache was last brought up to; owner only
  std::uint64_t synced_generation = 0;  // the core's generation then; owner only
  // Per class, made at first use; null when caching is off. Owner only.
  std::unique_ptr<std::unique_ptr<magazine>[]> magazines;
  // The front's view: per class up to class_count_max, a magazine or `absent`. Owner only.
  std::unique_ptr<magazine*[]> view;
  magazine absent;                      // owns nothing, never written
  std::uint32_t places = 0;             // the places all magazines hold; owner only
  // Places of the bound it holds outside any magazine, for whichever class needs one next:
  // places + loose <= cache_places. Owner writes; stats() reads (spare places).
  detail::atomic<std::uint32_t> loose{0};
  slot_list free_slots;                 // slots with no buffer; owner only
  // Odd while the owner pushes a chain to a stack or pops a batch into its cache; trim waits for
  // an odd value to move on (see (P) and (R) in pool.cpp). Owner writes; trim reads it under
  // admin_mutex.
  detail::atomic<std::uint32_t> publishing{0};
  counters counts;                      // owner writes
  thread_cache* prev = nullptr;         // the core's registry, under admin_mutex
  thread_cache* next = nullptr;
  thread_cache* next_of_thread = nullptr;  // the owning thread's list of its caches
};

}  // namespace sluice::detail

namespace sluice {

struct pool::core final : detail::fork_aware {
  core(const pool_options& o, detail::atomic<std::uint64_t>& state_word);
  ~core() { leave(); }

  void lock_for_fork() noexcept override;
  void unlock_in_parent() noexcept override;
  void unlock_in_child() noexcept override;

  const detail::size_classes classes;
  const std::unique_ptr<std::size_t[]> class_size;  // classes.size(c)
  const std::size_t bound;
  const bool caching;
  // What one thread cache may hold (see THREAD CACHES in pool.hpp): at most cache_places places
  // of the bound, in its magazines (held or spare) or loose (2 * P <= L), reserved place_batch
  // (P) at a time. Both scale with the bound, so caches never hoard it.
  const std::uint32_t place_batch;
  const std::uint32_t cache_places;

  // The pool object's state word; used only while the pool lives (`alive`).
  detail::atomic<std::uint64_t>& state;
  // Trims begun. (G) Bumped, relaxed, before the trim's stamp (T1), whose release carries it to
  // whoever reads that word with acquire (enter() in pool.cpp), or with seq_cst (P2, R2).
  detail::atomic<std::uint64_t> generation{0};
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

// ---- between the pool's calls (pool.cpp) and a thread's caches (pool/thread_caches.cpp) -------

// This thread's cache for the pool: from the thread's directory or list, or else, when `make`,
// a new one (enrolled with make_cache). Null when there is none: the thread is past its
// thread_local destructors, no memory could be had, or `make` is false.
thread_cache* cache_of_this_thread(pool::core& c, bool make) noexcept;

// Points this thread's front at tc's view under the state word `state` (pool.cpp's leave()).
void point_front(std::uint64_t state, thread_cache& tc) noexcept;

// A new cache for this thread, entered in the core's registry. Throws std::bad_alloc.
thread_cache* make_cache(pool::core& c);

// Gives a cache back to its pool (its thread is exiting, or the pool is gone) and lets go of the
// pool's control block; deletes the cache. Runs on the cache's own thread, which has taken it
// off its list and its front.
void give_back(thread_cache* tc) noexcept;

// The forking thread's cache for the pool, in a forked child; null if it has none.
thread_cache* own_cache_after_fork(const pool::core& c) noexcept;

// What a thread's exit does for sluice::pool: gives every cache of the calling thread back to
// its pool (or lets it go, if the pool is gone). Run by a thread_local destructor; the
// deterministic tests call it to drive a thread's exit under their scheduler.
void release_thread_caches() noexcept;

}  // namespace sluice::detail
