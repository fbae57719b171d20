// The CPU caches: where the calls of threads whose cache has no seat keep their batches.
//
// A pool lets at most thread_caches_max threads cache for themselves (a seat each), so that what
// caches hold does not grow with the number of threads (docs/pool.md, THREAD CACHES). The other
// threads share one cache per CPU, as tcmalloc's per-CPU caches and Go's per-P pools do: a call
// holds the cache of the CPU it runs on for its length, with a try-lock, and moves batches between
// it and the shared stacks exactly as a thread's cache does (pool.cpp). Threads that run on one
// CPU take turns, so the lock is almost always free and its cache line stays on that CPU: a call
// costs one atomic exchange on a line no other core wants. A call that finds the cache in use (its
// holder was preempted, or migrated while holding it) does not wait: it goes to the shared stacks,
// which keeps take and retire lock-free. trim and a fork wait for a holder to let go.
//
// A CPU cache has no thread whose next call would see a trim, so trim brings each one up to date
// itself (catch_up_cpu_caches). And since no one thread owns what one holds, a take looks into
// the others at each class it tries, and a retire at the bound takes the places they hold spare,
// so that calls one after another still see the sequential pool.
//
// (L1) try_hold's exchange is an acquire and (L2) let_go's store a release: each holder sees
// everything the previous holder did to the cache (plain fields included), as a mutex orders
// them.
#include <sched.h>

#include <thread>

#include "core.hpp"

namespace sluice::detail {

namespace {

using core = pool_core;

bool try_hold(cache& cc) noexcept { return !cc.in_use.exchange(true, std::memory_order_acquire); }  // (L1)
void let_go(cache& cc) noexcept { cc.in_use.store(false, std::memory_order_release); }              // (L2)
void hold(cache& cc) noexcept {
  while (!try_hold(cc)) std::this_thread::yield();
}

// The CPU cache for the CPU the calling thread runs on now (it may move at any moment: the lock,
// not the CPU, keeps the cache to one call at a time).
cache& this_cpus(core& c) noexcept {
  const int cpu = sched_getcpu();
  return *c.cpu_caches[static_cast<unsigned>(cpu < 0 ? 0 : cpu) % c.cpu_cache_count];
}

// Whether this call may use CPU caches: the pool has some, and no trim ran when the call read the
// state word. A call that sees a trim leaves them to it (and goes to the shared stacks), and one
// that learns of it only once it holds one lets it go at once, so that trim waits only for calls
// that took a CPU cache before its stamp, and for a later call only until it reads the stamp
// (PROGRESS in docs/pool.md; what calls that overlap a trim then miss: THREAD CACHES).
bool may_use(const caller& k) noexcept { return k.c.cpu_cache_count > 0 && !trimming_in(k.state); }

// A hint, read without the lock: whether cc's magazine of class cls holds a buffer.
bool holds_one(const cache& cc, std::size_t cls) noexcept {
  const magazine* m = cc.find(cls, std::memory_order_acquire);  // pairs with install()'s release
  return m != nullptr && m->count.load(std::memory_order_relaxed) > 0;
}

}  // namespace

cpu_cache_hold::cpu_cache_hold(caller& k) noexcept : k_(k), own_(k.tc) {
  if (k.caches() || !may_use(k)) return;
  cache& cc = this_cpus(k.c);
  if (!try_hold(cc)) return;
  const std::uint64_t state = bring_up_to_date(k.c, cc);
  if (trimming_in(state)) {  // a trim began since the call read the word: the cache is the trim's
    let_go(cc);
    return;
  }
  held_ = &cc;
  k.tc = &cc;
  k.state = state;
}

cpu_cache_hold::~cpu_cache_hold() {
  if (held_ == nullptr) return;
  k_.tc = own_;
  let_go(*held_);
}

std::byte* take_from_cpu_caches(caller& k, std::size_t cls) noexcept {
  if (!may_use(k)) return nullptr;
  for (std::uint32_t i = 0; i < k.c.cpu_cache_count; ++i) {
    cache& cc = *k.c.cpu_caches[i];
    if (&cc == k.tc || !holds_one(cc, cls) || !try_hold(cc)) continue;
    std::byte* data = nullptr;
    if (enabled_in(bring_up_to_date(k.c, cc))) {
      if (magazine* m = cc.find(cls); m != nullptr) {
        // its place stays there, spare, as for any hit
        if (const std::uint64_t n = m->count.load(std::memory_order_relaxed); n > 0) data = pop_from(*m, n);
      }
    }
    let_go(cc);
    if (data != nullptr) return data;
  }
  return nullptr;
}

std::uint32_t borrow_from_cpu_caches(caller& k, std::uint32_t n) noexcept {
  if (!may_use(k)) return 0;
  std::uint32_t got = 0;
  for (std::uint32_t i = 0; i < k.c.cpu_cache_count && got < n; ++i) {
    cache& cc = *k.c.cpu_caches[i];
    if (&cc == k.tc || cc.spare_places() == 0 || !try_hold(cc)) continue;
    caller lender{k.c, &cc, bring_up_to_date(k.c, cc)};
    got += shed_places(lender, n - got);
    let_go(cc);
  }
  return got;
}

void catch_up_cpu_caches(core& c, bool held) noexcept {
  for (std::uint32_t i = 0; i < c.cpu_cache_count; ++i) {
    cache& cc = *c.cpu_caches[i];
    if (!held) hold(cc);
    bring_up_to_date(c, cc);
    if (!held) let_go(cc);
  }
}

void hold_cpu_caches(core& c) noexcept {
  for (std::uint32_t i = 0; i < c.cpu_cache_count; ++i) hold(*c.cpu_caches[i]);
}

void let_go_cpu_caches(core& c) noexcept {
  for (std::uint32_t i = 0; i < c.cpu_cache_count; ++i) let_go(*c.cpu_caches[i]);
}

}  // namespace sluice::detail
