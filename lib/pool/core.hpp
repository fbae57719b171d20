// The shared state of a sluice::pool and the caches in front of it.
//
//   core   one per pool: the lock-free stacks (one per size class), the slot table under them,
//          the off-class shelves, the bound's counter, the CPU caches and the registry of every
//          cache. Freed in two steps: ~pool frees every buffer and the heavy parts; the control
//          block itself goes when the last thread cache that refers to it lets go.
//   cache  a magazine per class (sluice/detail/pool_cache.hpp), places of the bound, spare
//          slots and statistics. Of two kinds (docs/pool.md, THREAD CACHES):
//            a thread's  used by its thread alone, with no lock; the thread's front points at
//                        its view, so that a call that hits it runs inline. At most
//                        pool_core::thread_caches_max of them cache at once (hold a "seat"); a
//                        thread whose cache has none uses a CPU cache.
//            a CPU's     one per CPU the process may run on (pool_core::cpus), shared by the
//                        seatless threads running there, each call holding its `in_use` try-lock.
//          Touched by others (stats(), trim, thread exit, ~pool, fork) only under admin_mutex,
//          through atomics; but for the flag that trim waits on, which it reads without the mutex,
//          the cache pinned meanwhile (pool.cpp, await_publishers), and for a CPU cache's
//          magazines, which other callers look into before they try its lock (cpu_caches.cpp).
//
// Every buffer the pool holds sits in exactly one place: a class stack, a magazine, or a shelf;
// and holds one place of the bound (`reserved`), which counts those plus the places that
// caches hold spare. So reserved <= bound bounds what is held at every instant, and what the
// caches hold, buffers and spare places, is at most (thread_caches_max + cpus.count) *
// cache_places, a quarter of the bound for each kind, whatever the number of threads.
//
// The state word, in the pool object (read by every call's inline path):
//   bit 0       enabled
//   bits 1-15   trims running
//   bits 16-63  a stamp, drawn from one process-wide counter at every change of the word but a
//               trim's end, so that no two pools and no two moments of one pool share a word
//               (while a stamp stands, the trims running only fall); it wraps after 2^48 draws.
// `generation` counts the trims begun; a cache that finds it moved frees what it holds.
#pragma once

#include <pthread.h>
#include <sched.h>

#include <array>
#include <csignal>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "decay.hpp"
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

inline bool enabled_in(std::uint64_t state) noexcept { return (state & enabled_bit) != 0; }
inline bool trimming_in(std::uint64_t state) noexcept { return (state & trims_mask) != 0; }

// One cache's byte counts (or the orphans'), beside what its magazines tell (cache::tally): what
// stats().retained_bytes follows. A cache's fields have one writer at a time (its thread,
// whoever holds a CPU cache's lock, or whoever holds admin_mutex for `departed`); the orphans' any
// thread (fetch_add). Readers sum them with relaxed loads.
struct counters {
  detail::atomic<std::uint64_t> bytes_in{0}, bytes_out{0};

  static constexpr auto fields() noexcept { return std::array{&counters::bytes_in, &counters::bytes_out}; }

  // Adds these counts to `into`, whose one writer is the caller.
  void fold_into(counters& into) const noexcept {
    for (auto field : fields()) {
      auto& a = into.*field;
      a.store(a.load(std::memory_order_relaxed) + (this->*field).load(std::memory_order_relaxed),
              std::memory_order_relaxed);
    }
  }
  // Zero, by their one writer.
  void clear() noexcept {
    for (auto field : fields()) (this->*field).store(0, std::memory_order_relaxed);
  }
};

// One size class's counts (pool_class_stats), or the last row's, for what lies above the
// ceiling: what a cache's general paths did (one writer at a time, as `counters`), or, in the
// core's rows, what departed caches and threads without a cache did (any thread: fetch_add).
// Relaxed: counts that publish nothing. The magazines count their own hits and kept retires
// (pool_cache.hpp). A line each, so that a core's classes busy on different threads share none.
struct alignas(64) class_counts {
  detail::atomic<std::uint64_t> hits{0}, misses{0}, fresh{0}, retired{0}, dropped_at_bound{0},
      dropped_over_ceiling{0}, dropped_off{0}, trimmed{0}, decayed{0};

  // The counts, in the order of row_fields(): the fields of pool_class_stats they make.
  static constexpr auto fields() noexcept {
    return std::array{&class_counts::hits, &class_counts::misses, &class_counts::fresh, &class_counts::retired,
                      &class_counts::dropped_at_bound, &class_counts::dropped_over_ceiling,
                      &class_counts::dropped_off, &class_counts::trimmed, &class_counts::decayed};
  }
  static constexpr auto row_fields() noexcept {
    return std::array{&pool_class_stats::hits, &pool_class_stats::misses, &pool_class_stats::fresh,
                      &pool_class_stats::retired, &pool_class_stats::dropped_at_bound,
                      &pool_class_stats::dropped_over_ceiling, &pool_class_stats::dropped_off,
                      &pool_class_stats::trimmed, &pool_class_stats::decayed};
  }
  // Any thread's add (the core's rows).
  void add(detail::atomic<std::uint64_t> class_counts::*field, std::uint64_t n = 1) noexcept {
    (this->*field).fetch_add(n, std::memory_order_relaxed);
  }
  // The one writer's add (a cache's).
  void add_own(detail::atomic<std::uint64_t> class_counts::*field, std::uint64_t n = 1) noexcept {
    auto& a = this->*field;
    a.store(a.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  // Adds these counts to s's.
  void add_to(pool_class_stats& s) const noexcept {
    for (std::size_t i = 0; i < fields().size(); ++i) s.*row_fields()[i] += (this->*fields()[i]).load(std::memory_order_relaxed);
  }
};
static_assert(class_counts::fields().size() == class_counts::row_fields().size());

// Which CPU cache the calls on each CPU use (docs/pool.md, THREAD CACHES): `count` caches, one
// for each CPU the process may run on, at most `most` of them; the allowed CPUs take the caches in
// turn, so that each has one of its own while there are as many caches as allowed CPUs, and any
// other CPU (the affinity changed since the pool was made) maps to a valid one.
struct cpu_map {
  std::uint32_t count = 0;
  std::vector<std::uint32_t> cache_of;  // per CPU, up to the highest allowed one

  // The cache for `cpu`, as sched_getcpu() answers it (count > 0).
  std::uint32_t operator()(int cpu) const noexcept {
    const auto n = static_cast<std::size_t>(cpu < 0 ? 0 : cpu);
    return n < cache_of.size() ? cache_of[n] : static_cast<std::uint32_t>(n % count);
  }
};
// The map for the CPUs in `allowed` (a CPU set of `bytes` bytes, as CPU_ALLOC_SIZE gives).
cpu_map map_cpus(const cpu_set_t* allowed, std::size_t bytes, std::uint32_t most);
// The map for the CPUs this process may run on: its main thread's affinity, which taskset and
// cpusets set and its threads inherit (sched_getaffinity); every CPU the system has if that
// cannot be read.
cpu_map map_this_process(std::uint32_t most);

// A bit per class, bit cls % 64 of word cls / 64: a cache's classes with a magazine, the core's
// classes held outside the thread caches. Every class's bit on one line.
using class_bits = std::array<detail::atomic<std::uint64_t>, (class_count_max + 63) / 64>;
// Whether class cls's bit is set. Relaxed: each set of bits says what orders it.
inline bool bit_of(const class_bits& bits, std::size_t cls) noexcept {
  return (bits[cls / 64].load(std::memory_order_relaxed) >> cls % 64 & 1) != 0;
}

struct cache {
  enum class kind : std::uint8_t { thread, cpu };

  cache(pool_core& c, kind k);
  // Frees the magazines (never their buffers, which are freed or given back before) and touches
  // nothing of the core, which may be gone by then.
  ~cache();
  cache(const cache&) = delete;
  cache& operator=(const cache&) = delete;

  // The magazine of class cls, or null while it has none. Relaxed for its user (its own
  // writes, or the previous holder's, ordered by a CPU cache's lock); acquire for the others
  // (stats() under admin_mutex, and the lock-free looks into CPU caches, holds_one and
  // spare_places()): pairs with the release that installs it (install()).
  magazine* find(std::size_t cls, std::memory_order order = std::memory_order_relaxed) const noexcept {
    return magazines[cls].load(order);
  }
  // Whether install() has made class cls's magazine: its bit, on one line with every other
  // class's, where the magazine table takes a line for every eight. Exact for the cache's user
  // (its own writes, or the previous holder's under a CPU cache's lock).
  bool has_made(std::size_t cls) const noexcept { return bit_of(made, cls); }
  void install(std::size_t cls, magazine* m) noexcept {
    // The class's bit first. A reader that comes after this install (its thread, the CPU
    // cache's next holder, admin_mutex) sees both; one that races may miss either, as it could
    // miss the pointer alone. The release below, which publishes the magazine's fields to
    // find()'s acquire, also keeps the bit ahead of the pointer, so that a fork never leaves a
    // magazine without its bit (trim, forget() and ~cache would miss it); a child whose parent
    // stopped between the two finds the bit and no magazine, skips it, and installs one at the
    // class's next use.
    auto& word = made[cls / 64];
    word.store(word.load(std::memory_order_relaxed) | std::uint64_t{1} << cls % 64, std::memory_order_relaxed);
    magazines[cls].store(m, std::memory_order_release);
  }

  // Calls f(cls, magazine) for each magazine it has, in class order: the one loop over a
  // cache's magazines. It visits only the classes whose bit install() set, so that a cache of a
  // pool with seventy classes, a dozen in use, takes a dozen steps. `order` is find()'s.
  template <class F>
  void for_each_magazine(F f, std::memory_order order = std::memory_order_relaxed) const {
    for (std::size_t w = 0; w < made.size(); ++w) {
      for (std::uint64_t bits = made[w].load(std::memory_order_relaxed); bits != 0; bits &= bits - 1) {
        const std::size_t cls = w * 64 + static_cast<std::size_t>(std::countr_zero(bits));
        if (magazine* m = find(cls, order)) f(cls, *m);
      }
    }
  }

  // Adds what this cache did to `into`: its byte counts, and those its magazines derive.
  void tally(counters& into) const noexcept;
  // Passes f(cls, hits, kept retires) what each of its magazines counted itself. acquire, as
  // tally's: pairs with install()'s release.
  template <class F>
  void magazine_counts(F f) const {
    for_each_magazine(
        [&](std::size_t cls, const magazine& m) {
          f(cls, m.takes.load(std::memory_order_relaxed), m.retires.load(std::memory_order_relaxed));
        },
        std::memory_order_acquire);
  }
  // Its counts for class row `row` (the core's last row: above the ceiling), made at first use;
  // null when no memory can be had. Its user only.
  class_counts* own_counts(std::size_t row) noexcept;
  // Passes f(row, counts) each row it has counted in. acquire: pairs with own_counts' release.
  template <class F>
  void class_counts_each(F f) const {
    for (std::size_t row = 0; row < class_rows_count; ++row) {
      if (const class_counts* t = rows[row].load(std::memory_order_acquire)) f(row, *t);
    }
  }
  // Its thread is gone, or its holder's call (a fork's child): what it counted goes to the
  // core's departed and class counts, for good. Under admin_mutex, or alone in a child.
  void depart() const noexcept;
  // Departs and forgets what it holds, buffers, places, slots and counts, without freeing any: a
  // forked child's CPU cache that a call of the parent held at the fork, which may have left it
  // half changed (adopt_after_fork).
  void forget() noexcept;
  // Places its magazines hold without a buffer, and its loose ones.
  std::size_t spare_places() const noexcept;

  pool_core& core;
  const kind owner;
  const std::size_t class_count;
  // Whether it caches (has magazines in use): a CPU cache always, a thread's while it holds a
  // seat. Written by its thread; read by others only where its thread cannot run (exit, ~pool,
  // a forked child).
  bool caching = false;
  std::uint64_t synced_state = 0;       // the state word the cache was last brought up to
  std::uint64_t synced_generation = 0;  // the core's generation then
  // The front's view (thread caches that cache): per class up to class_count_max, a magazine
  // or `absent`. Its thread only.
  std::unique_ptr<magazine*[]> view;
  magazine absent;                      // owns nothing, never written
  std::uint32_t places = 0;             // the places all magazines hold
  // The most places it may hold: cache_places, or more for a seated thread cache that grew (its
  // claim on seat_places). Its user writes; its thread's exit and a forked child read it.
  std::uint32_t places_max;
  // Places of the bound it holds outside any magazine, for whichever class needs one next:
  // places + loose <= places_max. Its user writes; stats() reads (spare places).
  detail::atomic<std::uint32_t> loose{0};
  slot_list free_slots;                 // slots with no buffer
  // Odd while its user pushes a chain to a stack or pops a batch into it; trim waits for an odd
  // value to move on (see (P) and (R) in pool.cpp). Its user writes; trim reads it, first under
  // admin_mutex, then, while it waits, without it but holding a pin.
  detail::atomic<std::uint32_t> publishing{0};
  // A CPU cache's lock, taken with try_lock() by each call that uses it; trim waits for it, and
  // a fork's prepare spins for it a moment (hold_cpu_caches).
  detail::atomic<bool> in_use{false};
  // Whether the fork in progress holds the lock: the forking thread's alone, from its prepare to
  // its parent's or child's handler.
  bool fork_holds = false;
  // Decay (decay.hpp): per class, the magazine's takes and retires as last seen, and the step
  // from which they have not moved; the step of the last catch-up. Its user only; null when the
  // pool has no decay. A catch-up that finds a later step frees a magazine that has sat unused
  // since before the step before (pool.cpp, decay_magazines).
  struct use_seen {
    std::uint64_t uses = 0;
    std::uint32_t step = 0;
  };
  std::unique_ptr<use_seen[]> seen;
  std::uint32_t synced_step = 0;
  // A sleeping thread's pages (sleepers.cpp): the thread a thread cache belongs to (set before
  // the cache enters the registry); the magazines' uses as the decay steps last saw them, the
  // step before the one that saw them move, and whether this step asks (the steps', under
  // decay_mutex and admin_mutex); the uses and the step of the request (the step writes before it
  // asks, the handler reads); the uses when its thread's handler last gave back the pages (the
  // handler writes, the steps read); and the request, release_idle/asked/running/closed: a plain
  // std::atomic, outside the model checkers' seam, for close_release's futex (they model no
  // signal).
  pthread_t thread{};
  std::uint64_t quiet_uses = 0;
  std::uint32_t quiet_since = 0;
  bool ask_now = false;
  detail::atomic<std::uint64_t> asked_uses{0};
  detail::atomic<std::uint32_t> asked_step{0};
  detail::atomic<std::uint64_t> released_uses{~std::uint64_t{0}};
  std::atomic<std::uint32_t> release{0};
  // Set by its thread's handler when it gave back pages here, cleared by the thread's next
  // catch-up, which then frees all its magazines hold (catch_up in pool.cpp): volatile
  // sig_atomic_t, written in a handler and read by the thread it interrupted.
  volatile std::sig_atomic_t pages_given = 0;
  counters counts;
  const std::size_t class_rows_count;   // the core's classes, and the row above the ceiling
  cache* prev = nullptr;                // the core's registry, under admin_mutex
  cache* next = nullptr;
  // Under admin_mutex: the trims waiting for its flag, which keep it from being deleted; and
  // whether its thread gave it back meanwhile (it is then empty, its counts are with the departed,
  // and it stays in the registry, skipped by all, until the last of those trims deletes it).
  std::uint32_t pins = 0;
  bool given_back = false;
  cache* next_of_thread = nullptr;      // the owning thread's list of its caches

 private:
  // Per class, made at first use, never freed while the cache lives.
  std::unique_ptr<detail::atomic<magazine*>[]> magazines;
  // Per class row, its counts (own_counts), made at first use, never freed while the cache lives.
  std::unique_ptr<detail::atomic<class_counts*>[]> rows;
  // The classes that have a magazine: bit cls % 64 of word cls / 64, set by install() just
  // before the pointer, never cleared (a bit without a magazine, which a fork can leave, is
  // skipped). One writer at a time, the cache's user; relaxed, since a reader that must see a
  // magazine comes after its install, and so sees its bit.
  class_bits made{};
};

struct pool_core final : fork_aware {
  pool_core(const pool_options& o, detail::atomic<std::uint64_t>& state_word);
  ~pool_core();

  void lock_for_fork() noexcept override;
  void unlock_in_parent() noexcept override;
  void unlock_in_child() noexcept override;

  const detail::size_classes classes;
  const std::unique_ptr<std::size_t[]> class_size;  // classes.size(c)
  const std::size_t bound;
  const bool caching;
  // What one cache may hold (see THREAD CACHES in docs/pool.md): at most cache_places (C = 2 * P)
  // places of the bound, in its magazines (held or spare) or loose, reserved place_batch (P) at a
  // time.
  const std::uint32_t place_batch;
  const std::uint32_t cache_places;
  // What a seated thread cache may grow to when its classes do not fit (2 * C), from places of
  // the thread caches' quarter that no seat holds.
  const std::uint32_t cache_places_max;
  // How many thread caches may cache at once (hold a seat), and how many CPU caches there are
  // (cpus.count, one per CPU the process may run on): each kind at most a quarter of the bound's
  // worth of cache_places, so that what caches hold never grows with the number of threads. Zero
  // when the pool does not cache.
  const std::uint32_t thread_caches_max;
  // The thread caches' quarter in places (thread_caches_max * cache_places): what seat_places may
  // reach.
  const std::size_t seat_places_max;
  const cpu_map cpus;

  // The pool object's state word; used only while the pool lives (`alive`).
  detail::atomic<std::uint64_t>& state;
  // Trims begun. (G) Bumped with release just after the trim's stamp (T1), and carried by its end
  // (T3, a release) to whoever reads a later word with acquire (read_view in pool.cpp) or seq_cst
  // (P2, R2); while the trim runs, the word itself shows it.
  detail::atomic<std::uint64_t> generation{0};
  // Places of the bound in use; see the file comment. Relaxed everywhere: it publishes nothing,
  // and a place is always given back after it was taken, since a buffer's trip from retire to
  // take runs through the stacks' release/acquire pairs.
  alignas(64) detail::atomic<std::size_t> reserved{0};
  // The thread caches' quarter, in places: thread_caches_max * cache_places. A seat claims
  // cache_places of it; a seated cache whose working set outgrows its places claims place_batch
  // more at a time, up to cache_places_max (grow() in pool/places.cpp). Relaxed: a count that
  // publishes nothing (a cache's magazines are its thread's own).
  alignas(64) detail::atomic<std::size_t> seat_places{0};

  std::unique_ptr<detail::tagged_stack[]> stacks;  // per class; freed by ~pool
  // The classes that a shared stack, a CPU cache or an off-class shelf has ever held: bit
  // cls % 64 of word cls / 64, set before a publish pushes, before a CPU cache's magazine is made
  // and before a buffer is shelved, never cleared (see stocked_ever). Relaxed: a hint, as a
  // stack's looks_empty is. A line of its own, read by every look and written about once a class.
  alignas(64) class_bits stocked{};
  // Per class, the tag that the latest drain of its stack left on the head (chain::tag), written
  // under drain_mutex, so that overlapping trims' drains come one at a time: a take that popped a
  // slot while a trim ran, and finds it ended, learns from it whether the drain came after its pop
  // (pool.cpp, take_from_stack). Relaxed: a trim marks before its end (T3, a release), and the
  // take reads after an acquire of a word that shows no trim running.
  std::unique_ptr<detail::atomic<std::uint32_t>[]> drain_marks;
  detail::tagged_stack free_slots;
  detail::slot_table slots;

  // Off-class buffers. off_class_nonempty[c] mirrors !off_class.empty(c), written under
  // shelf_mutex and read without it as a hint (relaxed: a racing retire may be missed).
  detail::mutex shelf_mutex;
  detail::shelves off_class;
  std::unique_ptr<detail::atomic<bool>[]> off_class_nonempty;

  // The CPU caches, cpus.count of them; each is also in the registry. ~pool empties them, and
  // they go with the control block (a fork may still lock them until then).
  std::unique_ptr<std::unique_ptr<detail::cache>[]> cpu_caches;
  // (L3) 1 from a fork's prepare to its parent's or child's handler. A call that sees it leaves
  // the CPU caches alone, as one that sees a trim does, so that only a call already in flight
  // holds one (cpu_caches.cpp); and one that sees it as it begins sleeps on it (a futex) until the
  // handler lowers it and wakes the sleepers, for at most fork_wait_bound (wait_out_fork), as
  // mutex_pool's calls wait for a fork: else, on a loaded machine, the forking
  // thread waits for a CPU behind every caller (FORK in docs/pool.md). Relaxed: it orders
  // nothing (the caches' locks do); a call that misses it finds a cache held by the fork, or
  // holds one that the fork leaves to it, and goes on. A plain std::atomic, outside the model
  // checkers' seam, for the futex; they model no fork.
  std::atomic<std::uint32_t> forking{0};

  // Guards what follows, and every cache's fields for others than its user. Lock order:
  // decay_mutex, then a CPU cache's lock (trim waits for it; calls and decay steps only try it),
  // then admin_mutex, then drain_mutex, then shelf_mutex, then orphan_mutex. No take or retire
  // holds admin_mutex but a thread's first (its cache's enrolment), and nobody waits for a take
  // or retire while holding it.
  detail::mutex admin_mutex;
  // Held by trim and ~pool while they drain the stacks (drain_marks). Nothing is taken under it
  // but shelf_mutex and orphan_mutex, by a fork.
  detail::mutex drain_mutex;
  // Held by a thread that has no cache while it pushes to or pops from a stack (it has no flag to
  // raise), and taken once by each trim after its stamp (O in pool.cpp). Nothing is taken under it.
  detail::mutex orphan_mutex;
  detail::cache* registry = nullptr;
  std::size_t refs = 1;    // the pool, and each thread cache
  // False once ~pool has run. Written under admin_mutex; read under it, or without it as a hint
  // (relaxed) by a thread choosing which of its caches to give up.
  detail::atomic<bool> alive{true};
  detail::counters departed;  // the counts of caches that are gone
  detail::counters orphans;   // calls from threads without a cache (fetch_add: any thread)
  // Per class, and one more for what lies above the ceiling (class_counts): what departed caches
  // and threads without a cache counted.
  const std::unique_ptr<class_counts[]> class_rows;

  // Decay (docs/pool.md, DECAY): the steps' schedule and number, under decay_mutex (which comes
  // first in the lock order: a step takes drain_mutex, shelf_mutex and, with try_lock only, the CPU
  // caches); the bytes decay has freed (any thread, fetch_add), and how many of them the steps
  // have asked the allocator to return to the system (decay_mutex). On a line of its own: every
  // push of a batch reads the step, and the orphans' counts above change at every call of a
  // thread without a cache.
  alignas(64) detail::decay_schedule decay;
  detail::mutex decay_mutex;
  detail::atomic<std::uint64_t> decayed_bytes{0};
  std::uint64_t decayed_bytes_returned = 0;
  // The bytes whose pages sleeping threads' handlers gave back (sleepers.cpp; fetch_add).
  detail::atomic<std::uint64_t> released_idle_bytes{0};
  // The row that counts a request or a capacity of n.
  std::size_t row_of(std::size_t n) const noexcept { return n <= classes.ceiling() ? classes.of(n) : classes.count(); }
};

// A counter update. A cache's counters have one writer at a time, so a plain load and store
// suffice (no read-modify-write); the orphans' are shared and use fetch_add.
struct recorder {
  counters* c;
  bool owned;
  void add(detail::atomic<std::uint64_t> counters::*field, std::uint64_t v) const noexcept {
    auto& a = c->*field;
    if (owned) {
      a.store(a.load(std::memory_order_relaxed) + v, std::memory_order_relaxed);
    } else {
      a.fetch_add(v, std::memory_order_relaxed);
    }
  }
};

// Whether a shared stack, a CPU cache or an off-class shelf has ever held class cls
// (pool_core::stocked). A take that looks past its class asks it at each class before the
// class's stack, shelf and the CPU caches: where traffic uses a dozen of the pool's classes, a
// look across those between them reads this one line instead of a stack's line, a shelf flag's
// and each CPU cache's for every class (after a large frame was written, each a miss). A take
// that comes after a publish, a shelving or a CPU cache's first retire of the class sees its
// bit, since the bit comes before them; one that races it may miss the buffer, as SCAN allows.
inline bool stocked_ever(const pool_core& c, std::size_t cls) noexcept { return bit_of(c.stocked, cls); }
// Sets class cls's bit: read first, so that a class marked once costs no write to the line.
// Relaxed: it synchronizes with nothing itself. The push (a release), the shelf's mutex or the
// magazine's install (a release) that comes after it in its thread carries it to whoever finds
// what they publish; a take that happens-after them reads it by coherence.
inline void mark_stocked(pool_core& c, std::size_t cls) noexcept {
  if (!stocked_ever(c, cls)) c.stocked[cls / 64].fetch_or(std::uint64_t{1} << cls % 64, std::memory_order_relaxed);
}

// The call in progress and what it acts under: the pool's core, the cache it uses (the calling
// thread's, a CPU cache it holds, or null: the thread has none, because it is exiting or none
// could be made), and the state word it read.
struct caller {
  pool_core& c;
  cache* tc;
  std::uint64_t state;

  bool caches() const noexcept { return tc != nullptr && tc->caching; }
  // Where this call counts what it did: its cache's counters, or the shared orphans'.
  recorder rec() const noexcept { return tc != nullptr ? recorder{&tc->counts, true} : recorder{&c.orphans, false}; }
  // Counts n in class row `row`: on its cache, or on the core's rows (a thread without a cache,
  // or no memory for the cache's row).
  void count(std::size_t row, detail::atomic<std::uint64_t> class_counts::*field, std::uint64_t n = 1) const noexcept {
    if (tc != nullptr) {
      if (class_counts* own = tc->own_counts(row)) return own->add_own(field, n);
    }
    c.class_rows[row].add(field, n);
  }
};

// ---- the bound and a cache's places (pool/places.cpp) ------------------------------------------

// Claims n places of the thread caches' quarter (seat_places) if all n fit with at most up_to
// claimed; answers n or 0.
std::uint32_t claim_seat_places(pool_core& c, std::uint32_t n, std::size_t up_to) noexcept;
// Gives back what an empty thread cache grew beyond cache_places (grow(), places.cpp).
void shrink(cache& tc) noexcept;
// Takes up to n places of the bound; answers how many.
std::size_t reserve(pool_core& c, std::size_t n) noexcept;
void unreserve(pool_core& c, std::size_t n) noexcept;
// A magazine's places: it holds `owned`, the cache all its magazines' `places`.
void set_owned(cache& tc, magazine& m, std::uint32_t owned) noexcept;
void set_loose(cache& tc, std::uint32_t loose) noexcept;
// A place this call no longer needs (its buffer left the pool): kept loose by a cache with
// room, else given back to the shared counter.
void give_place(caller& k) noexcept;
// Moves a magazine's spare places to the cache's loose ones.
void drop_spare(caller& k, magazine& m) noexcept;
// One place of the bound for a buffer about to be kept outside a magazine, or false.
bool take_place(caller& k) noexcept;
// Spare places for a magazine that has none (count == owned), or false.
bool add_places(caller& k, std::size_t cls, magazine& m) noexcept;
// Gives back to the shared counter up to n places that k's cache holds without a buffer (loose,
// or spare in its magazines); answers how many.
std::uint32_t shed_places(caller& k, std::uint32_t n) noexcept;

// ---- moving buffers between a cache and the shared stacks (pool/pool.cpp) --------------------

// Moves the oldest n (<= count) buffers of a magazine to the shared stack; answers how many left.
std::uint32_t flush(caller& k, std::size_t cls, magazine& m, std::uint32_t n) noexcept;
// The batch a magazine moves at once: half of what it holds at most.
inline std::uint32_t batch_of(const magazine& m) noexcept { return m.limit / 2 > 0 ? m.limit / 2 : 1; }

// ---- CPU caches (pool/cpu_caches.cpp) ----------------------------------------------------------

// For one call of a thread whose cache has no seat: holds the cache of the CPU the thread runs
// on, if it is free, and makes it the call's cache (k.tc, and k.state as that cache is brought
// up to) until the hold ends. Holds nothing, and leaves k as it is, when the thread's cache has a
// seat, the pool has no CPU caches, or that one is in use (the call then uses the shared stacks).
class cpu_cache_hold {
 public:
  explicit cpu_cache_hold(caller& k) noexcept;
  ~cpu_cache_hold();
  cpu_cache_hold(const cpu_cache_hold&) = delete;
  cpu_cache_hold& operator=(const cpu_cache_hold&) = delete;

 private:
  caller& k_;
  cache* own_;   // what k.tc was
  cache* held_ = nullptr;
};

// A take's look, after its own cache and the shared stack of class cls: a buffer of class cls
// from a CPU cache that is not in use (nor k's own), or null.
std::byte* take_from_cpu_caches(caller& k, std::size_t cls) noexcept;
// Up to n places that CPU caches not in use (nor k's own) hold without a buffer, given back to the
// shared counter for the caller to take; answers how many.
std::uint32_t borrow_from_cpu_caches(caller& k, std::uint32_t n) noexcept;
// Brings every CPU cache up to the state word, each under its lock (taken here, after a fork in
// progress has let it go, or already held: a forked child's): trim, after its stamp, so that what
// they hold from before it is freed now (no thread of theirs has a next call to wait for).
void catch_up_cpu_caches(pool_core& c, bool held = false) noexcept;
// Brings up to the state word the CPU caches that no call holds: a decay step's, after its
// restamp (the others catch up at their next hold).
void catch_up_free_cpu_caches(pool_core& c) noexcept;
// A fork's prepare, once `forking` is raised: takes each CPU cache's lock that a call in flight
// lets go within a short spin (fork_holds), leaving the others to their holders; and, in the
// parent or the child, lets them go. In the child, first: the caches it left, forgotten
// (cache::forget into `departed`) and taken over, so that the child's handler holds them all.
void hold_cpu_caches(pool_core& c) noexcept;
void take_over_cpu_caches(pool_core& c) noexcept;
void let_go_cpu_caches(pool_core& c) noexcept;
// At the start of a call (nothing held): while a fork is in progress, sleeps until its end, for
// at most fork_wait_bound, unless this thread is the one forking. Bounded, because another
// library's fork handler may wait for this very thread (a lock it holds while it calls the pool),
// and the call is correct without the wait. In the handlers, lower_fork_flag ends the sleeps.
inline constexpr long fork_wait_bound_ns = 100'000'000;
void wait_out_fork(pool_core& c) noexcept;
void lower_fork_flag(pool_core& c) noexcept;

// ---- a cache's state (pool/pool.cpp) ------------------------------------------------------------

// The state word and the generation, as of one moment: a cache records both, and must never
// pair a trim's generation with a word from before the trim.
struct view {
  std::uint64_t state;
  std::uint64_t generation;
  std::uint32_t step;  // the decay steps begun, as of `state` or later
};
view read_view(pool_core& c) noexcept;
// Brings tc up to `now`: frees what it caches when a trim began since or runs, or the pool is
// off, and aims its view again.
void catch_up(pool_core& c, cache& tc, const view& now) noexcept;
// Reads the state word (F') and brings tc up to it if it moved; answers the word.
std::uint64_t bring_up_to_date(pool_core& c, cache& tc) noexcept;
// Everything tc holds leaves it: buffers go to the shared stacks when `keep` (a thread that
// exits) and are freed otherwise (or when no slot can be had), places and slots go back.
void empty_cache(caller& k, bool keep) noexcept;

// ---- between the pool's calls (pool.cpp) and a thread's caches (pool/thread_caches.cpp) -------

// This thread's cache for the pool: from the thread's directory or list, or else, when `make`,
// a new one (enrolled with make_cache). Null when there is none: the thread is past its
// thread_local destructors, no memory could be had, or `make` is false.
cache* cache_of_this_thread(pool_core& c, bool make) noexcept;

// Points this thread's front at tc's view under the state word `state` (pool.cpp's leave()).
void point_front(std::uint64_t state, cache& tc) noexcept;

// A new cache for this thread, entered in the core's registry, with a seat if one is free.
// Throws std::bad_alloc.
cache* make_cache(pool_core& c);

// Gives a thread's cache a seat, if one is free (and memory for its view can be had): from then
// on it caches, and its thread's front may point at it.
void take_seat(cache& tc) noexcept;

// Gives a cache back to its pool (its thread is exiting, or the pool is gone) and lets go of the
// pool's control block; deletes the cache, or leaves that to the trims that have it pinned. Runs
// on the cache's own thread, which has taken it off its list and its front.
void give_back(cache* tc) noexcept;

// Takes tc out of the core's registry (under admin_mutex).
void unlink(pool_core& c, cache& tc) noexcept;

// The forking thread's cache for the pool, in a forked child; null if it has none.
cache* own_cache_after_fork(const pool_core& c) noexcept;

// What a thread's exit does for sluice::pool: gives every cache of the calling thread back to
// its pool (or lets it go, if the pool is gone). Run by a thread_local destructor; the
// deterministic tests call it to drive a thread's exit under their scheduler.
void release_thread_caches() noexcept;

// ---- a sleeping thread's pages (pool/sleepers.cpp, pool/thread_caches.cpp) ----------------------

// The general paths the calling thread is in: a decay signal's handler must not read the thread's
// caches there, which the path may be changing; it then leaves the request for a later step.
// Every general call that may touch its thread's caches holds an in_general_path (pool.cpp:
// take_any, retire_any, catch_up_own, trim, decay, set_enabled, ~pool; the thread's exit; a
// fork's prepare to its handlers, by hand). volatile sig_atomic_t, in initial-exec TLS: the
// thread's own handler reads it; the signal fences order it with the path's other accesses.
extern constinit thread_local volatile std::sig_atomic_t tls_in_general_path __attribute__((tls_model("initial-exec")));

class in_general_path {
 public:
  in_general_path() noexcept { enter(); }
  ~in_general_path() { leave(); }
  in_general_path(const in_general_path&) = delete;
  in_general_path& operator=(const in_general_path&) = delete;
  static void enter() noexcept {
    tls_in_general_path = tls_in_general_path + 1;
    std::atomic_signal_fence(std::memory_order_seq_cst);  // before the path touches the caches
  }
  static void leave() noexcept {
    std::atomic_signal_fence(std::memory_order_seq_cst);  // after the path is done with them
    tls_in_general_path = tls_in_general_path - 1;
  }
  static bool inside() noexcept { return tls_in_general_path != 0; }
};

// cache::release, a request to a thread to give back the pages of what its cache holds.
inline constexpr std::uint32_t release_idle = 0;     // none
inline constexpr std::uint32_t release_asked = 1;    // a step signalled the thread
inline constexpr std::uint32_t release_running = 2;  // its handler is at it
inline constexpr std::uint32_t release_closed = 3;   // the pool is gone: never again

// Gives the whole pages inside [p, p + n) back to the system (MADV_DONTNEED): their bytes read
// as zeros afterwards. Answers how many bytes it gave. Async-signal-safe.
std::size_t give_back_pages(std::byte* p, std::size_t n) noexcept;

// A decay step's two parts for the sleepers, with the signal set with set_decay_signal (nothing
// when none is set), under decay_mutex: before the step restamps the state word, note which other
// threads' caches of the pool hold buffers unused since before the step before `step`; after it,
// ask those threads to give back their pages. Read before the restamp, a use seen is one made
// before step `step` began; asked after it, a thread's next call catches up with the step.
void note_sleepers(pool_core& c, std::uint32_t step) noexcept;
void ask_sleepers(pool_core& c, std::uint32_t step) noexcept;

// ~pool's: no handler reads tc from here on, and none still does (waits for one that runs).
void close_release(cache& tc) noexcept;
// The handler's last step: the request is over (wakes a close_release that waits).
void end_release(cache& tc) noexcept;

// The handler's work, on the signalled thread: if `target` is one of this thread's caches, asked,
// and the thread is outside the general path, gives back the whole pages of the buffers its
// magazines hold (thread_caches.cpp).
void release_idle_pages(const void* target) noexcept;

}  // namespace sluice::detail
