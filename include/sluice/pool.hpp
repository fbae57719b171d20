// sluice/pool.hpp: a bounded pool of byte buffers, for network frames and similar payloads.
//
// CONTRACT
//
// A pool keeps buffers that were given back (retire) and answers them again (take), so that the
// same memory carries frame after frame and the memory a program holds stays flat however long
// it runs. Buffers are sorted into size classes, four per power of two (16, 20, 24, 28, 32, 40,
// ...), so a buffer the pool allocates (acquire) wastes at most a fifth of its capacity; the
// top class is cut at the ceiling, so a buffer of exactly the ceiling is kept and answered.
//
//   take(n)     a retained buffer with size() == n and capacity() >= n, from the smallest class
//               that serves; an empty buffer when none is retained, n > ceiling, or disabled.
//   acquire(n)  take(n), or else fresh memory of n bytes whose capacity fills n's class (exactly
//               n above the ceiling). Throws std::bad_alloc when the memory cannot be had.
//   retire(b)   keeps b when enabled, b.capacity() <= ceiling and fewer than bound are retained;
//               frees it otherwise. An empty buffer is ignored. Never throws: if the pool cannot
//               record the buffer it frees it and counts it dropped.
//   trim()      frees what the shared stacks hold and what the calling thread caches.
//   set_enabled(false)  take answers nothing, retire frees, and trim() runs.
//
// Buffers made elsewhere whose capacity is not a class size (buffer(1000), say) are kept too and
// answer every request up to their real capacity, smallest first; they live on a short locked
// list beside the lock-free stacks, so the common path (buffers the pool allocated) never locks.
//
// BOUND. retained() never exceeds bound at any instant: a retire first reserves a place in one
// shared counter and is dropped when none is left. Buffers in thread caches count.
//
// LINEARIZABILITY. mutex_pool is linearizable to the sequential pool these rules describe.
// sluice::pool relaxes it in two ways, even with its caches off (test/lincheck checks both):
//   - SCAN: take looks at one class after another, smallest first, not at all of them at once;
//     while it runs, a smaller buffer retired into a class it has passed may be missed, and a
//     larger one (or none) answered.
//   - IN FLIGHT: a retire holds its place of the bound from its start, and a take keeps the place
//     it frees until it returns; while such calls run, another retire may be dropped, or
//     retained() may count, a buffer that no take can see yet.
// Both vanish when the calls do not overlap: a single thread sees exactly the sequential pool.
//
// THREAD CACHES (pool_options::thread_cache, on by default). Each thread that uses a pool keeps
// buffers per class in front of the shared stacks and moves them in batches (the magazine and
// depot design of Bonwick and Adams, USENIX 2001), so a take or retire that hits the cache costs
// no atomic read-modify-write at all. A cache holds at most L = clamp(bound / 32, 1, 32) buffers
// over all its classes; what it relaxes, exactly:
//   - take on one thread may miss buffers that another live thread caches: at most L per thread.
//     A batch crosses between threads when a magazine or the cache is full (retire) or empty
//     (take), so frames that one thread takes and another retires do recycle.
//   - a caching thread takes places of the bound P = clamp(L / 2, 1, 16) at a time and keeps at
//     most 2 * P of them unused, so a retire on another thread can be dropped while retained()
//     is up to 2 * P per live thread below bound (retained() counts only buffers held).
//   - trim() and set_enabled(false) free what other live threads cache when each of them next
//     calls the pool (any call) or exits. A thread that exits gives its cache back to the
//     shared stacks (or frees it, if the pool is gone or disabled); nothing is stranded.
// With thread_cache off, or a bound below 64 (where L would be 1), every call goes to the shared
// stacks and none of this applies.
//
// LIFETIME. Destroying a pool frees everything it retains, cached buffers included. The caller
// must not use a pool while destroying it; threads that used it may live on, exit later, and
// use other pools, even one built at the same address: each pool has an identity that is never
// reused, and a thread's cache for a destroyed pool is discarded, never used.
//
// PROGRESS. take and retire of the pool's own classes are lock-free (Treiber stacks with tagged
// 64-bit heads); with the caches on, a hit touches only the calling thread's cache and performs
// no atomic read-modify-write. Blocking, on a mutex: a thread's first call to a pool, its exit,
// buffers whose capacity is not a class size, stats() and retained(), trim(), and ~pool.
//
// MEMORY ORDERING. A retired buffer's bytes, written before retire(), are visible to the thread
// whose take() answers that buffer (release at the push, acquire at the pop). stats() and
// retained() are exact when no call is in flight; during traffic each is a sum of per-thread
// counters read one after another, clamped into its true range (retained() into [0, bound]).
//
// mutex_pool has the identical interface and semantics over one std::mutex (no thread caches):
// the baseline for benchmarks and the reference model for tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "sluice/buffer.hpp"

namespace sluice {

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

  [[nodiscard]] buffer take(std::size_t size);
  [[nodiscard]] buffer acquire(std::size_t size);
  void retire(buffer&& b) noexcept;
  void set_enabled(bool on) noexcept;
  [[nodiscard]] bool enabled() const noexcept;
  [[nodiscard]] std::size_t retained() const noexcept;
  [[nodiscard]] pool_stats stats() const noexcept;
  void trim() noexcept;

  struct core;  // the shared state; defined in lib/pool/core.hpp

 private:
  core* core_;  // owned: freed by ~pool, its control block outlives it while threads refer to it
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
  struct state;
  std::unique_ptr<state> state_;
};

}  // namespace sluice
