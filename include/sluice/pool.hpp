// sluice/pool.hpp: a bounded pool of byte buffers, for network frames and similar payloads.
//
// A pool keeps buffers given back to it (retire) and answers them again (take), so that the same
// memory carries frame after frame and the memory a program holds stays flat. Buffers are sorted
// into size classes, four per power of two (16, 20, 24, 28, 32, 40, ...); a pool retains at most
// `bound` of them, none larger than its `ceiling`. Any thread may call it; a take or retire that
// the calling thread's cache answers runs inline, with no atomic read-modify-write. A buffer's
// bytes, written before its retire, are visible to the thread whose take answers it.
//
//   take(n)         a retained buffer with size() == n and capacity() >= n, else an empty one
//   acquire(n)      take(n), else fresh memory of n bytes that fills n's class (exactly n above
//                   the ceiling); throws std::bad_alloc without memory
//   retire(b)       keeps b while enabled, within the bound and the ceiling; frees it otherwise
//   trim()          frees what the pool retains (what other threads cache: at their next call)
//   trim(share)     frees share (0 to 1) of the bytes it retains, or less if the caches hold the
//                   rest: the largest classes first, from what no cache holds
//   set_enabled(b)  off: take answers nothing, retire frees, and trim() runs
//   decay()         with pool_options::decay set, a step of it, for a timer of the program to
//                   call: frees what has sat unused for about that long (docs/pool.md, DECAY)
//   set_decay_signal(s)  lets the steps reach sleeping threads' caches, by signal s (Linux)
//   enabled(), retained(), stats()  the switch, the buffers held now, the statistics
//   class_stats()   the statistics per size class, with each dropped retire's reason
//
// mutex_pool: the same calls over one std::mutex. The whole contract (the bound, what the caches
// and concurrent calls relax, progress, memory ordering, lifetime, fork) is in docs/pool.md.
#pragma once

#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "sluice/buffer.hpp"
#include "sluice/detail/pool_cache.hpp"

namespace sluice {

struct pool_options {                         // an aggregate: pool{{.bound = 64}} works
  std::size_t bound = 1024;                   // most buffers retained at once (0: keep none)
  std::size_t ceiling = std::size_t{4} << 20; // largest capacity kept or answered
  bool enabled = true;                        // false: as after set_enabled(false)
  bool thread_cache = true;                   // per-thread caches in front of the shared stacks
  // Buffers retained unused for about this long are freed by decay() (docs/pool.md, DECAY);
  // zero or less: never. At most 2^40 ms (about 35 years): longer is that.
  std::chrono::milliseconds decay{0};
};

struct pool_stats {
  std::uint64_t hits = 0;          // take/acquire answered from what was retained
  std::uint64_t misses = 0;        // take/acquire that found nothing to answer with
  std::uint64_t retired = 0;       // retire calls that kept the buffer
  std::uint64_t dropped = 0;       // retire calls that freed it (disabled, over the ceiling, at the bound)
  std::size_t retained = 0;        // buffers held now
  std::size_t retained_bytes = 0;  // their capacities, summed
};

// One size class's statistics (class_stats(): a row per class, smallest first, and always a last
// row for what lies above the ceiling). Counts since the pool was made; docs/pool.md, STATISTICS.
struct pool_class_stats {
  std::size_t capacity = 0;              // the class's size; SIZE_MAX in the last row
  std::size_t retained = 0;              // buffers it holds now (own size, and shelved smaller ones)
  std::uint64_t hits = 0;                // takes it answered (a take looks past its own class)
  std::uint64_t misses = 0;              // takes of its sizes that found nothing
  std::uint64_t fresh = 0;               // of those, acquires that allocated
  std::uint64_t retired = 0;             // retires it kept
  std::uint64_t dropped_at_bound = 0;    // retires freed for want of room (the bound, or memory)
  std::uint64_t dropped_over_ceiling = 0;  // retires freed as too large (the last row's)
  std::uint64_t dropped_off = 0;         // retires freed while switched off
  std::uint64_t trimmed = 0;             // retained buffers freed: trim, the switch, an exit
  std::uint64_t decayed = 0;             // retained buffers freed for sitting unused (decay)
};

namespace detail {
struct pool_core;    // a pool's shared state: the library's own
struct exact_class;  // the exact-class calls that pool_resource makes: the library's own
}  // namespace detail

// The lock-free pool, with thread caches in front of its shared stacks.
class pool {
 public:
  explicit pool(pool_options options = {});
  ~pool();  // frees every buffer it retains; threads that used it may outlive it
  pool(const pool&) = delete;
  pool& operator=(const pool&) = delete;

  // take, acquire and retire are inline (below): a call that hits this thread's cache runs in
  // the caller's code; anything else goes to the general path in the library.
  [[nodiscard]] buffer take(std::size_t size);     // from the smallest class that serves, or empty
  [[nodiscard]] buffer acquire(std::size_t size);  // take, else fresh memory (summary above)
  void retire(buffer&& b) noexcept;                // kept, or else freed; never throws
  void set_enabled(bool on) noexcept;              // off: keeps nothing and frees what it retains
  [[nodiscard]] bool enabled() const noexcept;     // the switch set_enabled sets
  [[nodiscard]] std::size_t retained() const noexcept;  // buffers held now, caches included
  [[nodiscard]] pool_stats stats() const noexcept;      // exact when no call is in flight
  [[nodiscard]] std::vector<pool_class_stats> class_stats() const;  // per class, as stats()
  void trim() noexcept;                            // frees what is retained (see docs/pool.md)
  void trim(double share) noexcept;                // share of the bytes, from outside the caches
  // A step of decay when one is due (half the decay after the last): frees what has sat unused
  // since before the step before; false when none was due, or decay is off. docs/pool.md, DECAY.
  bool decay(std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now()) noexcept;
  // With a decay signal set (set_decay_signal, below): the bytes whose pages sleeping threads
  // gave back from what their caches hold, since the pool was made.
  [[nodiscard]] std::uint64_t released_idle_bytes() const noexcept;

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

  // The state word: read by every call, written by trim, set_enabled and the first off-class
  // buffer of a class. Alone on its cache line, so that what a user keeps beside the pool cannot
  // slow every call down.
  alignas(64) detail::atomic<std::uint64_t> state_;
  detail::pool_core* core_;  // owned; its control block outlives ~pool while threads refer to it
};

// Lets decay reach the caches of threads that have stopped calling their pools: each decay step
// signals, with signal `signo`, every other thread whose cache of that pool holds buffers of two
// pages or more, unused since before the step before, and the handler, on that thread, gives back
// the whole pages of all but each magazine's newest buffer (the buffers themselves are freed at
// the thread's next call, or its exit). A real-time signal the program leaves to sluice for good
// (SIGRTMIN to SIGRTMAX, with the default disposition or sluice's handler, which then stays):
// anything else throws std::invalid_argument, as does any signal off Linux or under arm64's
// memory tagging. 0, the default: no more requests. Process-wide. docs/pool.md, DECAY, has the
// rule and what a program accepts with it (EINTR from system calls not restarted, among others).
void set_decay_signal(int signo);

// pool's twin over one std::mutex, call for call: the baseline and the tests' reference model.
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
  [[nodiscard]] std::vector<pool_class_stats> class_stats() const;
  void trim() noexcept;
  void trim(double share) noexcept;
  bool decay(std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now()) noexcept;

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
      { cp.class_stats() } -> std::same_as<std::vector<pool_class_stats>>;
      { p.trim() } noexcept -> std::same_as<void>;
      { p.trim(0.5) } noexcept -> std::same_as<void>;
      { p.decay() } noexcept -> std::same_as<bool>;
      { p.decay(std::chrono::steady_clock::now()) } noexcept -> std::same_as<bool>;
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
