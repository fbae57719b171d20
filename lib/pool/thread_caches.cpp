// A thread's caches of sluice::pool: how a thread finds its cache for a pool, keeps it, and
// gives it up at its exit. What runs here runs rarely: at a thread's first call to a pool, at a
// general call (pool.cpp), and at the thread's end. A hit never comes here: the front
// (sluice/detail/pool_cache.hpp) takes it to the magazine directly.
//
// Every thread that calls a pool has a cache for it, for its statistics and spare slots; it
// caches buffers only while it holds one of the pool's seats (pool_core::thread_caches_max of
// them), taken at its first call or at a later one when another thread has given its seat up, and
// held until the thread exits.
//
// Every cache a thread holds is on its list (`caches`, linked through next_of_thread). The
// directory, a small array, remembers the most recently used few, so that finding the cache
// costs a few compares; a thread that uses more pools than it has ways finds the others on its
// list, without a lock or an allocation. A cache keeps its pool's control block alive, so the
// key, the control block's address, is never reused while a way or the list names it. The
// thread's state is trivially destructible; a separate thread_local `reaper` gives every cache
// back at thread exit.
#include <algorithm>
#include <array>
#include <cassert>
#include <csignal>
#include <mutex>
#include <new>
#include <type_traits>

#include "core.hpp"

namespace sluice::detail {

// SLUICE_PER_THREAD_DECLARED: the Relacy checks' build, whose seam (test/relacy/seam) keeps each
// modelled thread's state apart; no other build, nor any header a program includes, defines it.
// One OS thread's, in every build: under Relacy its modelled threads share it, and only balance it.
constinit thread_local volatile std::sig_atomic_t tls_in_general_path __attribute__((tls_model("initial-exec"))) = 0;

#ifndef SLUICE_PER_THREAD_DECLARED
constinit thread_local thread_front tls_front __attribute__((tls_model("initial-exec"))){};
#endif

namespace {

struct directory_entry {
  const pool_core* core = nullptr;
  cache* tc = nullptr;
};
constexpr std::size_t directory_ways = 8;

struct thread_caches {
  std::array<directory_entry, directory_ways> directory{};
  cache* caches = nullptr;  // the list
  bool torn_down = false;          // the reaper has run: calls from later destructors go uncached
};

// The initial-exec TLS that sluice/detail/this_thread_front.hpp promises stays under 200 bytes.
static_assert(sizeof(thread_front) + sizeof(thread_caches) + sizeof(tls_in_general_path) < 200);
static_assert(std::is_trivially_destructible_v<thread_front> && std::is_trivially_destructible_v<thread_caches>);

#ifdef SLUICE_PER_THREAD_DECLARED
// A model checker whose threads share one OS thread (Relacy's fibers) keeps each one's state
// through its seam (per_thread, test/relacy/relacy_atomic.hpp), and drives their exits through
// release_thread_caches() itself.
thread_caches& this_thread() noexcept { return per_thread<thread_caches>(); }
void arm_reaper() {}
#else
// Initial-exec, like the front: sluice/detail/this_thread_front.hpp says what that means for
// dlopen.
constinit thread_local thread_caches tls_caches __attribute__((tls_model("initial-exec"))){};

struct reaper {
  void arm() noexcept {}
  ~reaper() {
    const in_general_path guard;
    release_thread_caches();
    tls_caches.torn_down = true;
  }
};
thread_local reaper tls_reaper;

thread_caches& this_thread() noexcept { return tls_caches; }
void arm_reaper() { tls_reaper.arm(); }  // constructs the reaper, to run at thread exit (may throw)
#endif

// Puts tc in the directory's first way; the last way's cache stays on the thread's list.
void remember(cache* tc) noexcept {
  auto& directory = this_thread().directory;
  std::move_backward(directory.begin(), directory.end() - 1, directory.end());
  directory[0] = {&tc->core, tc};
}

// Takes tc off this thread's directory and front, before it is given back.
void forget(cache* tc) noexcept {
  for (auto& e : this_thread().directory) {
    if (e.tc == tc) e = {};
  }
  thread_front& front = this_thread_front();  // defined in this file: no UBSan false null
  if (tc->view && front.view == tc->view.get()) front = {};
}

// Lets go of this thread's caches whose pools are gone (each takes that dead pool's mutex).
void forget_dead() noexcept {
  for (cache** link = &this_thread().caches; *link != nullptr;) {
    cache* tc = *link;
    // A hint, relaxed: `alive` only ever falls, and a cache missed now is let go later.
    if (tc->core.alive.load(std::memory_order_relaxed)) {
      link = &tc->next_of_thread;
      continue;
    }
    *link = tc->next_of_thread;
    forget(tc);
    give_back(tc);
  }
}

// A new cache for this thread's first call to the pool; null when the thread is exiting or no
// memory can be had (the call then goes uncached).
cache* enroll(pool_core& c) noexcept {
  thread_caches& me = this_thread();
  if (me.torn_down) return nullptr;
  forget_dead();  // here, where the call blocks anyway, so that other calls never wait for it
  cache* tc = nullptr;
  try {
    arm_reaper();
    tc = make_cache(c);
  } catch (...) {
    return nullptr;
  }
  tc->next_of_thread = me.caches;
  std::atomic_signal_fence(std::memory_order_seq_cst);  // a handler walking the list sees it whole
  me.caches = tc;
  remember(tc);
  return tc;
}

}  // namespace

cache* cache_of_this_thread(pool_core& c, bool make) noexcept {
  thread_caches& me = this_thread();
  for (const auto& e : me.directory) {
    if (e.core == &c) return e.tc;
  }
  for (cache* tc = me.caches; tc != nullptr; tc = tc->next_of_thread) {
    if (&tc->core == &c) {
      remember(tc);
      return tc;
    }
  }
  return make ? enroll(c) : nullptr;
}

void point_front(std::uint64_t state, cache& tc) noexcept {
  this_thread_front() = {state, tc.view.get(), 0, &tc.absent};
}

cache* own_cache_after_fork(const pool_core& c) noexcept {
  for (cache* tc = this_thread().caches; tc != nullptr; tc = tc->next_of_thread) {
    if (&tc->core == &c) return tc;
  }
  return nullptr;
}

void release_thread_caches() noexcept {
  thread_caches& me = this_thread();
  me.directory = {};
  this_thread_front() = {};
  while (cache* tc = me.caches) {
    me.caches = tc->next_of_thread;
    give_back(tc);
  }
}

void take_seat(cache& tc) noexcept {
  pool_core& c = tc.core;
  if (claim_seat_places(c, c.cache_places, c.seat_places_max) == 0) return;
  tc.view.reset(new (std::nothrow) magazine*[class_count_max]);
  if (!tc.view) {
    c.seat_places.fetch_sub(c.cache_places, std::memory_order_relaxed);
    return;
  }
  std::fill_n(tc.view.get(), class_count_max, &tc.absent);
  tc.caching = true;
}

cache* make_cache(pool_core& c) {
  auto* tc = new cache(c, cache::kind::thread);
  tc->thread = pthread_self();
  take_seat(*tc);
  std::lock_guard lock(c.admin_mutex);  // (M)
  tc->next = c.registry;
  if (c.registry != nullptr) c.registry->prev = tc;
  c.registry = tc;
  ++c.refs;
  return tc;
}

void give_back(cache* tc) noexcept {
  pool_core& c = tc->core;
  bool last = false, pinned = false;
  {
    std::lock_guard lock(c.admin_mutex);  // (M)
    if (c.alive.load(std::memory_order_relaxed)) {
      caller k{c, tc, bring_up_to_date(c, *tc)};
      empty_cache(k, /*keep=*/true);
      tc->depart();
    }
    if (tc->caching) c.seat_places.fetch_sub(tc->places_max, std::memory_order_relaxed);  // after its places went back
    // A trim that waits for its flag (await_publishers) deletes it; that trim is a call on the
    // living pool, which holds a reference, so this one is never the last.
    pinned = tc->pins > 0;
    if (pinned) {
      tc->given_back = true;
    } else {
      unlink(c, *tc);
    }
    last = --c.refs == 0;
    assert(!(pinned && last));
  }
  if (!pinned) delete tc;  // touches nothing of the core, which another thread may free from here on
  if (last) delete &c;
}

// Runs in a signal handler, on the thread that owns the caches it reads: it interrupts that
// thread between any two instructions, so what it reads is the thread's own writes, as the
// signal fences order them. Outside the general path the thread's caches change only on the
// inline paths, which move a magazine's count and items and never free a magazine.
//
// What it may drop, and why no take answers a buffer without its pages:
// - only a request still current: the cache's uses are those the step saw (no take or retire
//   since; one at a stale view of the state word shows here), and the thread's last catch-up
//   came before the step before the asking one. Its next catch-up (at the asking step or later)
//   then finds every magazine stale by its own rule (decay_magazines: a magazine dates from its
//   last catch-up at the latest, even one whose take or retire this handler interrupted before
//   its count of uses moved). (Review: with "before the asking step" instead, a catch-up one
//   step back kept magazines whose pages were gone, and takes read zeros, in 261 of 157,040
//   takes of a stress program);
// - and the next catch-up frees all it holds whatever their stamps say: the handler marks the
//   cache (pages_given), which sends the thread's next general call through a catch-up even at
//   an unchanged word, and that catch-up frees every magazine's buffers (review: a thread asleep
//   for a multiple of 2^32 steps had stamps that looked fresh, and takes read zeros);
// - the thread's next call after this handler catches up: the step restamped the word before it
//   signalled, and the kernel orders the signal's delivery, and all that follows it, after that;
// - a take or retire this interrupts may be answering, or have just kept, its magazine's top
//   buffer: left alone. Below it, a buffer is retained, unused since before the step before.
// MADV_DONTNEED leaves it valid memory that reads as zeros and gets pages again when written.
// Only madvise, futex and lock-free atomics here (async-signal-safe).
void release_idle_pages(const void* target) noexcept {
  thread_caches& me = this_thread();
  for (cache* tc = me.caches; tc != nullptr; tc = tc->next_of_thread) {
    if (tc != target) continue;
    std::uint32_t asked = release_asked;
    if (in_general_path::inside()) {  // the path may be changing them: a later step asks again
      // Relaxed: the request is the step's and this thread's; it publishes nothing.
      tc->release.compare_exchange_strong(asked, release_idle, std::memory_order_relaxed);
      return;
    }
    // (Q) acquire: pairs with the step's CAS to release_asked, so the request's fields are its.
    if (!tc->release.compare_exchange_strong(asked, release_running, std::memory_order_acquire)) return;
    std::uint64_t uses = 0;
    tc->for_each_magazine([&](std::size_t, const magazine& m) {
      uses += m.takes.load(std::memory_order_relaxed) + m.retires.load(std::memory_order_relaxed);
    });
    // Relaxed: the step wrote them before its CAS to release_asked, a release that the CAS above
    // (acquire) read.
    const bool current = uses == tc->asked_uses.load(std::memory_order_relaxed) &&
                         decay_schedule::stale(tc->synced_step, tc->asked_step.load(std::memory_order_relaxed));
    std::uint64_t bytes = 0;
    if (current) {
      tc->for_each_magazine([&](std::size_t, magazine& m) {
        const std::uint64_t n = m.count.load(std::memory_order_relaxed);
        for (std::uint64_t i = 0; i + 1 < n; ++i) bytes += give_back_pages(m.items[i], m.capacity);
      });
      tc->pages_given = 1;  // its next catch-up frees what the magazines hold, stamps aside
      // Relaxed: a hint for the steps (not asked again until the cache is used).
      tc->released_uses.store(uses, std::memory_order_relaxed);
      // Relaxed: a sum (released_idle_bytes()); the cache keeps the core alive.
      tc->core.released_idle_bytes.fetch_add(bytes, std::memory_order_relaxed);
    }
    end_release(*tc);
    return;
  }
}

void unlink(pool_core& c, cache& tc) noexcept {
  (tc.prev != nullptr ? tc.prev->next : c.registry) = tc.next;
  if (tc.next != nullptr) tc.next->prev = tc.prev;
}

}  // namespace sluice::detail
