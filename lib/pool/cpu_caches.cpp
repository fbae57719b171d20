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
// which keeps take and retire lock-free. trim waits for a holder to let go, but not for a call
// that starts after it: a call that sees a trim running (may_use) or a fork gathering the caches
// (L3) leaves them alone, and one that learns of either only once it holds one lets it go at once.
// A fork waits for no holder beyond a short spin: a cache still held then (its holder preempted,
// as it mostly is on a loaded machine, where it would run again only after every other runnable
// thread) stays with its call in the parent, and the child, where that call does not exist,
// forgets what the cache held (FORK in docs/pool.md). There are as many caches as CPUs the process may run on, at most a quarter of
// the bound's worth (map_this_process), each allowed CPU with its own while there are enough.
//
// A CPU cache has no thread whose next call would see a trim, so trim brings each one up to date
// itself (catch_up_cpu_caches). And since no one thread owns what one holds, a take looks into
// the others at each class it tries, and a retire at the bound takes the places they hold spare,
// so that calls one after another still see the sequential pool.
//
// (L1) try_hold's exchange is an acquire and (L2) let_go's store a release: each holder sees
// everything the previous holder did to the cache (plain fields included), as a mutex orders
// them. (L3) the fork's flag, pool_core::forking, relaxed: see core.hpp.
#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <memory>
#include <thread>

#include "../cpu_relax.hpp"
#include "core.hpp"

namespace sluice::detail {

namespace {

using core = pool_core;

bool try_hold(cache& cc) noexcept { return !cc.in_use.exchange(true, std::memory_order_acquire); }  // (L1)
void let_go(cache& cc) noexcept { cc.in_use.store(false, std::memory_order_release); }              // (L2)

bool forking(const core& c) noexcept { return c.forking.load(std::memory_order_relaxed) != 0; }  // (L3)

// The CPU cache for the CPU the calling thread runs on now (it may move at any moment: the lock,
// not the CPU, keeps the cache to one call at a time).
cache& this_cpus(core& c) noexcept { return *c.cpu_caches[c.cpus(sched_getcpu())]; }

// Whether this call may use CPU caches: the pool has some, no trim ran when the call read the
// state word, and no fork is gathering them. A call that sees a trim or a fork leaves the caches
// to it (and goes to the shared stacks), and one that learns of it only once it holds one lets it
// go at once, so that trim and fork wait only for calls that took a CPU cache before they began,
// and for a later call only until it sees them (PROGRESS and FORK in docs/pool.md; what calls
// that overlap a trim then miss: THREAD CACHES).
bool may_use(const caller& k) noexcept { return k.c.cpus.count > 0 && !trimming_in(k.state) && !forking(k.c); }

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
  if (forking(k.c)) {  // a fork began since may_use: the cache is the fork's
    let_go(cc);
    return;
  }
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
  if (!stocked_ever(k.c, cls) || !may_use(k)) return nullptr;
  for (std::uint32_t i = 0; i < k.c.cpus.count; ++i) {
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
  for (std::uint32_t i = 0; i < k.c.cpus.count && got < n; ++i) {
    cache& cc = *k.c.cpu_caches[i];
    if (&cc == k.tc || cc.spare_places() == 0 || !try_hold(cc)) continue;
    caller lender{k.c, &cc, bring_up_to_date(k.c, cc)};
    got += shed_places(lender, n - got);
    let_go(cc);
  }
  return got;
}

void catch_up_cpu_caches(core& c, bool held) noexcept {
  for (std::uint32_t i = 0; i < c.cpus.count; ++i) {
    cache& cc = *c.cpu_caches[i];
    // A fork in progress goes first: it takes no cache this trim holds.
    if (!held) {
      while (forking(c) || !try_hold(cc)) forking(c) ? wait_out_fork(c) : std::this_thread::yield();
    }
    bring_up_to_date(c, cc);
    if (!held) let_go(cc);
  }
}

// No fork runs meanwhile: its prepare waits for the step (decay_mutex) before it raises `forking`.
void catch_up_free_cpu_caches(core& c) noexcept {
  for (std::uint32_t i = 0; i < c.cpus.count; ++i) {
    cache& cc = *c.cpu_caches[i];
    if (!try_hold(cc)) continue;
    bring_up_to_date(c, cc);
    let_go(cc);
  }
}

void hold_cpu_caches(core& c) noexcept {
  // Once the calls see `forking`, only a call already in flight holds a cache, and one that runs
  // lets go within a few microseconds at most (a batch's move).
  constexpr int spins = 256;
  std::uint32_t missing = c.cpus.count;
  for (int spin = 0; missing > 0 && spin < spins; ++spin) {
    if (spin > 0) cpu_relax();
    for (std::uint32_t i = 0; i < c.cpus.count; ++i) {
      cache& cc = *c.cpu_caches[i];
      if (!cc.fork_holds && try_hold(cc)) {
        cc.fork_holds = true;
        --missing;
      }
    }
  }
}

void take_over_cpu_caches(core& c) noexcept {
  for (std::uint32_t i = 0; i < c.cpus.count; ++i) {
    cache& cc = *c.cpu_caches[i];
    if (cc.fork_holds) continue;
    cc.forget();  // its holder's call is the parent's
    cc.fork_holds = true;   // its lock, raised by that call, is this thread's now
  }
}

void let_go_cpu_caches(core& c) noexcept {
  for (std::uint32_t i = 0; i < c.cpus.count; ++i) {
    cache& cc = *c.cpu_caches[i];
    if (!cc.fork_holds) continue;
    cc.fork_holds = false;
    let_go(cc);
  }
}

void wait_out_fork(core& c) noexcept {
  if (!forking(c) || this_thread_forks()) return;
  const timespec bound{0, fork_wait_bound_ns};
  syscall(SYS_futex, &c.forking, FUTEX_WAIT_PRIVATE, 1, &bound, nullptr, 0);  // returns at once if lowered
}

void lower_fork_flag(core& c) noexcept {
  c.forking.store(0, std::memory_order_relaxed);  // (L3)
  syscall(SYS_futex, &c.forking, FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
}

cpu_map map_cpus(const cpu_set_t* allowed, std::size_t bytes, std::uint32_t most) {
  std::uint32_t n = 0;
  std::size_t highest = 0;
  for (std::size_t cpu = 0; cpu < bytes * 8; ++cpu) {
    if (CPU_ISSET_S(cpu, bytes, allowed)) {
      ++n;
      highest = cpu;
    }
  }
  cpu_map m;
  m.count = std::min(n, most);
  if (m.count == 0) return m;
  m.cache_of.resize(highest + 1);
  std::uint32_t next = 0;  // the allowed CPUs in turn, each its own cache while there are enough
  for (std::size_t cpu = 0; cpu <= highest; ++cpu) {
    m.cache_of[cpu] = CPU_ISSET_S(cpu, bytes, allowed) ? next++ % m.count : static_cast<std::uint32_t>(cpu % m.count);
  }
  return m;
}

cpu_map map_this_process(std::uint32_t most) {
  // A larger set while the kernel's mask is larger than the one offered (EINVAL).
  for (std::size_t cpus = CPU_SETSIZE; cpus <= (std::size_t{1} << 20); cpus *= 2) {
    const std::unique_ptr<cpu_set_t, void (*)(cpu_set_t*)> set(CPU_ALLOC(cpus), [](cpu_set_t* s) { CPU_FREE(s); });
    if (!set) break;
    const std::size_t bytes = CPU_ALLOC_SIZE(cpus);
    if (sched_getaffinity(getpid(), bytes, set.get()) == 0) return map_cpus(set.get(), bytes, most);
    if (errno != EINVAL) break;
  }
  const unsigned n = std::max(1U, std::thread::hardware_concurrency());
  cpu_map m;
  m.count = std::min(n, most);
  return m;  // CPU i: cache i % count
}

}  // namespace sluice::detail
