// sluice::pool against its mutex twin and the alternatives a program would otherwise use for
// recycled network frames: a pool built directly on boost::lockfree::stack, the standard
// library's synchronized pool resource, and plain glibc malloc. (mimalloc, jemalloc and TBB's
// scalable_malloc run the same workloads from alloc_bench.cpp, each in its own executable,
// because linking mimalloc or jemalloc replaces malloc for the whole process.)
//
// Families (see pool_workloads.hpp): pool.pair.1KiB, pool.pair.64KiB, pool.pair.1MiB,
// pool.mixed.frames, pool.flow.16KiB, and the many-thread patterns pool.handoff, pool.own,
// pool.churn and pool.idle (pool, mutex_pool and malloc). Variants:
//   pool            sluice::pool, default options (thread caches on)
//   pool_uncached   sluice::pool with thread_cache = false (the lock-free shared stacks alone)
//   mutex_pool      sluice::mutex_pool, the baseline
//   lockfree_stack  boost::lockfree::stack<std::byte*>, fixed-sized, 1024 places: pop or malloc,
//                   push or free (pair families only: one stack serves one block size)
//   pmr_sync        std::pmr::synchronized_pool_resource, pools up to 1 MiB (not in the flow)
//   malloc          glibc malloc and free
#include <boost/lockfree/stack.hpp>

#include <cstdio>
#include <cstdlib>
#include <memory_resource>
#include <string>
#include <utility>

#include "pool_workloads.hpp"
#include "sluice/pool.hpp"

namespace {

using sluice_bench::raw_source;

template <class Pool, bool ThreadCache, std::size_t Bound = sluice::pool_options{}.bound>
struct pool_source {
  Pool pool{sluice::pool_options{.bound = Bound, .thread_cache = ThreadCache, .decay = sluice_bench::bench_decay()}};

  using item = sluice::buffer;
  item get(std::size_t n) { return pool.acquire(n); }
  void put(item&& b, std::size_t) noexcept { pool.retire(std::move(b)); }
  static std::byte* bytes(item& b) { return b.data(); }
};

using cached_pool = pool_source<sluice::pool, true>;
using uncached_pool = pool_source<sluice::pool, false>;
using mutex_pool = pool_source<sluice::mutex_pool, false>;  // mutex_pool has no caches anyway

struct glibc_malloc {
  static void* allocate(std::size_t n) { return std::malloc(n); }
  static void release(void* p, std::size_t) noexcept { std::free(p); }
};

// The pool one would write straight on boost::lockfree::stack, with the same bound as sluice's
// default (1024 retained). One instance per block size, so every block on it has the right size.
struct lockfree_stack_source {
  boost::lockfree::stack<std::byte*, boost::lockfree::fixed_sized<true>> stack{1024};

  lockfree_stack_source() = default;
  lockfree_stack_source(const lockfree_stack_source&) = delete;
  lockfree_stack_source& operator=(const lockfree_stack_source&) = delete;
  ~lockfree_stack_source() {
    stack.consume_all([](std::byte* p) { std::free(p); });
  }

  using item = std::byte*;
  item get(std::size_t n) {
    std::byte* p = nullptr;
    if (stack.pop(p)) return p;
    p = static_cast<std::byte*>(std::malloc(n));
    if (p == nullptr) throw std::bad_alloc();
    return p;
  }
  void put(item&& p, std::size_t) noexcept {
    if (!stack.bounded_push(p)) std::free(p);
  }
  static std::byte* bytes(item& p) { return p; }
};

// libstdc++'s synchronized_pool_resource keeps per-thread state, and the benchmark's threads come
// and go; so one resource serves the whole process and is never destroyed (the process's exit
// reclaims it), and no thread ever outlives the resource it used.
struct pmr_sync {
  static std::pmr::synchronized_pool_resource& resource() {
    static auto* r = new std::pmr::synchronized_pool_resource(
        std::pmr::pool_options{.max_blocks_per_chunk = 0, .largest_required_pool_block = 1 << 20});
    return *r;
  }
  static void* allocate(std::size_t n) { return resource().allocate(n, 16); }
  static void release(void* p, std::size_t n) noexcept { resource().deallocate(p, n, 16); }
};

void register_all() {
  // The glibc "malloc" variant and the pools' own memory must be glibc's: if an allocator that
  // interposes malloc ever got linked into this executable, say so and stop.
  const std::string provider = sluice_bench::malloc_provider();
  benchmark::AddCustomContext("malloc_from", provider);
  if (provider.find("libc.so") == std::string::npos) {
    std::fprintf(stderr, "pool_bench: malloc comes from %s, not glibc\n", provider.c_str());
    std::exit(1);
  }

  using sluice_bench::add;
  using sluice_bench::KiB;
  using sluice_bench::flow;
  using sluice_bench::flow_counts;
  using sluice_bench::mixed;
  using sluice_bench::pair;

  const auto add_pair = [](const std::string& family, auto size) {
    constexpr std::size_t n = decltype(size)::value;
    add(family, "pool", pair<cached_pool, n>);
    add(family, "pool_uncached", pair<uncached_pool, n>);
    add(family, "mutex_pool", pair<mutex_pool, n>);
    add(family, "lockfree_stack", pair<lockfree_stack_source, n>);
    add(family, "pmr_sync", pair<raw_source<pmr_sync>, n>);
    add(family, "malloc", pair<raw_source<glibc_malloc>, n>);
  };
  add_pair("pool.pair.1KiB", std::integral_constant<std::size_t, 1 * KiB>{});
  add_pair("pool.pair.64KiB", std::integral_constant<std::size_t, 64 * KiB>{});
  add_pair("pool.pair.1MiB", std::integral_constant<std::size_t, 1024 * KiB>{});

  add("pool.mixed.frames", "pool", mixed<cached_pool>);
  add("pool.mixed.frames", "pool_uncached", mixed<uncached_pool>);
  add("pool.mixed.frames", "mutex_pool", mixed<mutex_pool>);
  add("pool.mixed.frames", "pmr_sync", mixed<raw_source<pmr_sync>>);
  add("pool.mixed.frames", "malloc", mixed<raw_source<glibc_malloc>>);

  add("pool.flow.16KiB", "pool", flow<cached_pool>, flow_counts);
  add("pool.flow.16KiB", "pool_uncached", flow<uncached_pool>, flow_counts);
  add("pool.flow.16KiB", "mutex_pool", flow<mutex_pool>, flow_counts);
  add("pool.flow.16KiB", "malloc", flow<raw_source<glibc_malloc>>, flow_counts);

  // The patterns keep up to 34 blocks in flight per pair (8,704 at 512 threads): pools whose
  // bound holds them beside what caches hide, so that the cells time the pools, not misses.
  sluice_bench::add_patterns<pool_source<sluice::pool, true, sluice_bench::pattern_bound>>("pool");
  sluice_bench::add_patterns<pool_source<sluice::mutex_pool, false, sluice_bench::pattern_bound>>("mutex_pool");
  sluice_bench::add_patterns<raw_source<glibc_malloc>>("malloc");
}

}  // namespace

SLUICE_BENCH_MAIN(register_all)
