// sluice/pool.hpp: a bounded pool of byte buffers, for network frames and similar payloads.
//
// CONTRACT
//
// A pool keeps buffers that were given back (retire) and answers them again (take), so that the
// same memory carries frame after frame and the memory a program holds stays flat however long
// it runs. Buffers are sorted into size classes, four per power of two (16, 20, 24, 28, 32, 40,
// ...): requests of 0 to 16 bytes get the 16-byte class, and a buffer the pool allocates
// (acquire) for a larger request wastes less than a fifth of its capacity (from 13 bytes up, in
// fact). The top class is cut at the ceiling, so a buffer of exactly the ceiling is kept.
//
//   take(n)     a retained buffer with size() == n and capacity() >= n, from the smallest class
//               that serves; an empty buffer when none is retained, n > ceiling, or disabled.
//   acquire(n)  take(n), or else fresh memory of n bytes whose capacity fills n's class (exactly
//               n above the ceiling). Throws std::bad_alloc when the memory cannot be had.
//   retire(b)   keeps b when enabled, b.capacity() <= ceiling and fewer than bound are retained;
//               frees it otherwise. An empty buffer is not kept, nor counted, but it is a call
//               all the same (THREAD CACHES: it brings the thread's cache up to date). Never
//               throws: if the pool cannot record the buffer (no memory for its bookkeeping) it
//               frees it and counts it dropped. A buffer once kept is never freed for want of
//               memory.
//   trim()      frees what the shared stacks, the off-class shelves and the CPU caches hold, and
//               what the calling thread caches (other threads' caches: THREAD CACHES below).
//   set_enabled(false)  take answers nothing, retire frees, and trim() runs.
//
// Buffers made elsewhere whose capacity is not a class size (buffer(1000), say) are kept too and
// answer every request up to their real capacity, smallest first; they live on a short locked
// list beside the lock-free stacks, so the common path (buffers the pool allocated) never locks.
//
// BOUND. retained() never exceeds bound at any instant: a retire first reserves a place in one
// shared counter and is dropped when none is left. Buffers in caches count.
//
// LINEARIZABILITY. mutex_pool is linearizable to the sequential pool these rules describe.
// sluice::pool relaxes it in two ways, even with its caches off (test/lincheck checks both):
//   - SCAN: take looks at one class after another, smallest first, not at all of them at once;
//     while it runs, a smaller buffer retired into a class it has passed may be missed, and a
//     larger one (or none) answered. trim() empties the classes one after another too, so
//     calls that overlap it may find some classes emptied and others not yet: a take may answer
//     a buffer of a class the trim has not reached though a smaller one it has emptied is gone,
//     and of two retires that overlap it, the earlier may be kept and the later freed.
//   - IN FLIGHT: a retire holds its place of the bound from its start, and a take keeps the place
//     it frees until it returns; while such calls run, another retire may be dropped, or
//     retained() may count, a buffer that no take can see yet.
// Both vanish when the calls do not overlap: a single thread sees exactly the sequential pool.
// A trim() never frees a buffer whose retire began after the trim returned ("after" in the
// sense that THREAD CACHES gives "next"), whatever calls overlapped it; and a retire that
// overlaps set_enabled(false) leaves nothing retained once both have returned (with the caches
// on, its buffer may wait in its thread's cache until that thread's next call, as below).
//
// THREAD CACHES (pool_options::thread_cache, on by default). In front of the shared stacks, caches
// keep buffers per class and move them in batches (the magazine and depot design of Bonwick and
// Adams, USENIX 2001), so that most calls touch nothing shared. A cache holds at most
// C = 2 * P places of the bound, each a buffer or spare (kept for the next retire), and takes
// them P at a time: P = clamp(L / 2, 1, 16) with L = clamp(bound / 16, 1, 64) (C is 32 from
// bound 512 on). A pool has two kinds, each a quarter of the bound's worth of C, however many
// threads use it:
//   - thread caches: up to bound / (4 * C) threads at once hold a seat (8 at bound 1024, 32 at
//     4096) and cache for themselves; a call that hits runs inline in the caller, with no atomic
//     read-modify-write at all (FAST PATH below). A thread takes a seat at its first take or
//     retire of a buffer while one is free, or at a later one once another thread's exit has
//     freed one.
//   - CPU caches: the other threads share min(CPUs, bound / (4 * C)) caches, one per CPU; a call
//     holds the one of the CPU it runs on for its length (one atomic exchange), and goes to the
//     shared stacks if another call holds it, or a trim runs.
// What they relax, exactly, at every instant and for any number of threads:
//   - take on one thread may miss buffers that other live threads' caches hold: at most
//     bound / 4 of them in all. A take looks into the CPU caches at each class it tries, after
//     its own cache and the shared stack, so what they hold escapes it only while another call
//     holds them, or a trim runs (which empties them: calls that overlap it leave them to it). A batch crosses
//     between threads when a magazine or the cache is full (retire) or empty (take), so frames
//     that one thread takes and another retires do recycle.
//   - a retire may be dropped while retained() is below the bound by the places that caches hold
//     spare (retained() counts only buffers held): at most bound / 4 in other threads' caches,
//     and what CPU caches held by other calls hold (all of theirs while a trim runs). A retire at
//     the bound takes the spare places of its own thread's cache and of the CPU caches no call
//     holds.
//   - trim() and set_enabled(false) free what CPU caches hold before they return, and what
//     another live thread's cache holds at that thread's next call to the pool (any call), or at
//     its exit. "Next" means a call that the trim() or set_enabled() happens-before, in the C++
//     memory model's sense: the thread learned of it through a join, a lock, or an atomic
//     release and acquire. A call that is merely later in time on another core sees it at some
//     later call (on real hardware, as soon as the store reaches that core). A thread that exits
//     gives its cache back to the shared stacks (or frees it, if the pool is gone or disabled,
//     or no memory can be had to move it), and its seat with it; nothing is stranded.
// With thread_cache off, or a bound below 64 (where L would be 3 or less), every call goes to the
// shared stacks and none of this applies. A thread may use any number of pools: it keeps a cache
// for each (and a seat in each that has one free), and only its first call to each pool makes
// one. docs/many_threads.md tells why caches are bounded so, and what it costs.
//
// FAST PATH. take, acquire and retire are inline: a call that its thread's own cache can answer
// (the thread holds a seat, and a take's class holds a buffer there, or a retire's buffer has a
// class's own size and a spare place there) runs in the caller's code, without a call or an
// atomic read-modify-write;
// callgrind counts 38 instructions for a take and a retire together, 45 when the compiler cannot
// see the size (scripts/instructions.sh).
// The inline path serves the pool its thread called last; a thread that alternates between
// pools goes through the library's general path at each switch, and finds its cache there. The
// inline code reads the library's layout of a cache: a program must be built against the
// headers of the libsluice it runs with (its soname carries the minor version for that). A
// thread finds its cache through initial-exec TLS, under 200 bytes, which glibc also grants a
// libsluice loaded with dlopen (sluice/detail/pool_cache.hpp says how).
//
// LIFETIME. Destroying a pool frees everything it retains, cached buffers included. The caller
// must not use a pool while destroying it; threads that used it may live on, exit later (even
// while it is destroyed), and use other pools, even one built at the same address: a thread's
// cache holds on to the dead pool's small control block, so it is never taken for another
// pool's, and lets go of it at the thread's exit or at its first call to a pool it has not
// used before.
//
// FORK. A process may fork() at any moment: every pool (and mutex_pool) registers, through
// pthread_atfork, to hold its mutexes and its CPU caches across the fork, so the child can use
// every pool it inherits, the CPU caches whole, and its own threads take every seat. The parent's
// other threads do not exist in the child: what their caches held, and the buffers their calls
// in flight at the fork held, stay allocated but are lost to the pool (not freed, as jemalloc's
// and mimalloc's thread caches are not), and the bound's count and the statistics are made exact
// again, in the child, from what it can reach. As with malloc,
// a fork from a signal handler that interrupted a call to the same pool is not supported.
//
// PROGRESS. take and retire of the pool's own classes are lock-free: a thread stopped anywhere
// inside one cannot keep another's from completing (test/deterministic stops it at every switch
// point, holding a mutex or a CPU cache included): a call never waits for a lock that a take or
// retire holds, and finds a CPU cache in use as it finds it busy, going to the shared stacks
// instead. The memory they may need, a chunk of bookkeeping slots, a cache's magazine or its
// view, comes from operator new, whose own locks are the allocator's. With the caches on, a hit
// on a thread's own cache touches only that cache and performs no atomic read-modify-write.
// Blocking, on a mutex: a thread's first call to a pool, its exit, buffers whose capacity is not
// a class size, stats(), retained(), trim() (which also waits for the calls it finds holding a
// CPU cache or moving a batch between a cache and the shared stacks as it starts, and for a
// later call only while it takes a CPU cache and reads the trim's stamp, freeing what that
// cache held from before the trim if the trim has not reached it yet),
// set_enabled(false), ~pool, and the calls of a thread that has no cache (it is past its
// thread_local destructors, or no memory was left for one) and finds its CPU cache in use.
// The stacks' heads carry a 32-bit tag against ABA; like every tagged Treiber stack, they rely
// on no thread being stopped between reading a head and its CAS for an exact multiple of 2^32
// changes of that head.
//
// MEMORY ORDERING. A retired buffer's bytes, written before retire(), are visible to the thread
// whose take() answers that buffer (release at the push, acquire at the pop). stats() and
// retained() are exact when no call is in flight; during traffic each is a sum of per-thread
// counters read one after another, clamped into its true range (retained() into [0, bound]),
// and hits, misses, retired and dropped never fall from one answer to the next.
//
// mutex_pool has the identical interface and semantics over one std::mutex (no thread caches):
// the baseline for benchmarks and the reference model for tests.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "sluice/buffer.hpp"
#include "sluice/detail/pool_cache.hpp"

namespace sluice {

namespace detail {
struct pool_core;    // a pool's shared state: the library's own
struct exact_class;  // the exact-class calls that pool_resource makes: the library's own
}  // namespace detail

struct pool_options {                         // an aggregate: pool{{.bound = 64}} works
  std::size_t bound = 1024;                   // most buffers retained at once (0: keep none)
  std::size_t ceiling = std::size_t{4} << 20; // largest capacity kept or answered
  bool enabled = true;
  bool thread_cache = true;                   // per-thread caches in front of the shared stacks
};

struct pool_stats {
  std::uint64_t hits = 0;          // take/acquire answered from what was retained
  std::uint64_t misses = 0;        // take/acquire that found nothing to answer with
  std::uint64_t retired = 0;       // retire calls that kept the buffer
  std::uint64_t dropped = 0;       // retire calls that freed it (disabled, over the ceiling, at the bound)
  std::size_t retained = 0;        // buffers held now
  std::size_t retained_bytes = 0;  // their capacities, summed
};

class pool {
 public:
  explicit pool(pool_options options = {});
  ~pool();
  pool(const pool&) = delete;
  pool& operator=(const pool&) = delete;

  // Inline below: a call that hits this thread's cache runs in the caller's code, about fifteen
  // instructions; anything else goes to the general path in the library.
  [[nodiscard]] buffer take(std::size_t size);
  [[nodiscard]] buffer acquire(std::size_t size);
  void retire(buffer&& b) noexcept;
  void set_enabled(bool on) noexcept;
  [[nodiscard]] bool enabled() const noexcept;
  [[nodiscard]] std::size_t retained() const noexcept;
  [[nodiscard]] pool_stats stats() const noexcept;
  void trim() noexcept;

 private:
  friend struct detail::exact_class;
  // The general paths: every rule, every kind of buffer and thread. They hand a buffer's parts
  // back in registers, so that the inline paths build the one buffer object the caller sees.
  [[nodiscard]] detail::held take_general(std::size_t size, bool exact);
  [[nodiscard]] detail::held acquire_general(std::size_t size);
  void retire_general(detail::held h) noexcept;
  // The hits: a buffer from this thread's cache (null data when it has none to give), and a
  // buffer kept in it (false when it cannot be).
  [[nodiscard]] detail::held take_cached(std::size_t size) noexcept;
  [[nodiscard]] bool retire_cached(detail::held h) noexcept;

  // The state word (lib/pool/core.hpp): read by every call, written by trim, set_enabled and the
  // first off-class buffer of a class. Alone on its cache line, so that what a user keeps beside
  // the pool cannot slow every call down.
  alignas(64) detail::atomic<std::uint64_t> state_;
  detail::pool_core* core_;  // owned; its control block outlives ~pool while threads refer to it
};

class mutex_pool {
 public:
  explicit mutex_pool(pool_options options = {});
  ~mutex_pool();
  mutex_pool(const mutex_pool&) = delete;
  mutex_pool& operator=(const mutex_pool&) = delete;

  [[nodiscard]] buffer take(std::size_t size);
  [[nodiscard]] buffer acquire(std::size_t size);
  void retire(buffer&& b) noexcept;
  void set_enabled(bool on) noexcept;
  [[nodiscard]] bool enabled() const noexcept;
  [[nodiscard]] std::size_t retained() const noexcept;
  [[nodiscard]] pool_stats stats() const noexcept;
  void trim() noexcept;

 private:
  friend struct detail::exact_class;
  [[nodiscard]] buffer take_from(std::size_t size, bool exact);  // exact: from size's class only

  struct state;
  std::unique_ptr<state> state_;
};

// What the twins share, stated so that generic code can take either and the promise that their
// interfaces are identical cannot drift.
template <class P>
concept buffer_pool =
    std::constructible_from<P, pool_options> && !std::copyable<P> && !std::movable<P> &&
    requires(P& p, const P& cp, std::size_t n, buffer&& b, bool on) {
      { p.take(n) } -> std::same_as<buffer>;
      { p.acquire(n) } -> std::same_as<buffer>;
      { p.retire(std::move(b)) } noexcept -> std::same_as<void>;
      { p.set_enabled(on) } noexcept -> std::same_as<void>;
      { cp.enabled() } noexcept -> std::same_as<bool>;
      { cp.retained() } noexcept -> std::same_as<std::size_t>;
      { cp.stats() } noexcept -> std::same_as<pool_stats>;
      { p.trim() } noexcept -> std::same_as<void>;
    };
static_assert(buffer_pool<pool> && buffer_pool<mutex_pool>);

// ---- sluice::pool's fast paths: a hit on this thread's cache, else the general path ------------
//
// Relaxed loads and stores of the magazine, plain moves: only this thread writes its magazines,
// and stats() reads them (sluice/detail/pool_cache.hpp).

[[gnu::always_inline]] inline detail::held pool::take_cached(std::size_t size) noexcept {
  if (detail::front_is_current(state_)) {
    detail::magazine& m = *detail::front_view(detail::class_of(size));
    if (const std::uint64_t n = m.count.load(std::memory_order_relaxed); n != 0) return {detail::pop_from(m, n), m.capacity};
  }
  return {};
}

[[gnu::always_inline]] inline bool pool::retire_cached(detail::held h) noexcept {
  if (detail::front_is_current(state_)) {
    detail::magazine* m = nullptr;
    if (detail::front_recent_capacity() == h.capacity) [[likely]] {
      m = detail::front_recent();
    } else {
      m = detail::front_view(detail::class_of(h.capacity));
      if (m->capacity != h.capacity) return false;  // not one of the class's own buffers
      detail::front_remember(h.capacity, m);
    }
    // A spare place for it.
    if (const std::uint64_t n = m->count.load(std::memory_order_relaxed); n < m->owned.load(std::memory_order_relaxed)) {
      detail::push_onto(*m, n, h.data);
      return true;
    }
  }
  return false;
}

[[gnu::always_inline]] inline buffer pool::take(std::size_t size) {
  detail::held h = take_cached(size);
  if (h.data == nullptr) h = take_general(size, /*exact=*/false);
  return detail::buffer_access::make_or_empty(h, size);
}

[[gnu::always_inline]] inline buffer pool::acquire(std::size_t size) {
  detail::held h = take_cached(size);
  if (h.data == nullptr) h = acquire_general(size);  // never empty
  return detail::buffer_access::make(h, size);
}

[[gnu::always_inline]] inline void pool::retire(buffer&& b) noexcept {
  const detail::held h = detail::buffer_access::release(b);
  if (h.data == nullptr || !retire_cached(h)) retire_general(h);  // an empty one: a call all the same
}

}  // namespace sluice
