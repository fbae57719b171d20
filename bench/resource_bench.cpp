// sluice::pool_resource against the memory resources a pmr program would otherwise use.
//
// Families:
//   pool_resource.pair.<size>  each thread, per iteration: allocate a block (alignment 16), write
//                              its first byte, deallocate it.
//   pool_resource.strings      each thread, per iteration: build a std::pmr::vector of 32
//                              std::pmr::strings (24 to 600 characters, none short enough for
//                              the string to keep it inline) and drop it: about 38 allocate and
//                              deallocate pairs, as a request parser or a logger makes them.
// Variants:
//   pool_resource        sluice::pool_resource, default options
//   mutex_pool_resource  sluice::mutex_pool_resource, the baseline
//   pmr_sync             std::pmr::synchronized_pool_resource, pools up to 1 MiB
//   pmr_unsync           std::pmr::unsynchronized_pool_resource, pools up to 1 MiB (1 thread
//                        only: it is not thread-safe)
//   new_delete           std::pmr::new_delete_resource(): glibc malloc underneath
//   pool                 (pairs only) sluice::pool's own acquire and retire, the engine beneath
//                        pool_resource, so that what the resource adds is seen
#include <array>
#include <cstddef>
#include <memory_resource>
#include <string>
#include <vector>

#include "pool_workloads.hpp"
#include "sluice/pool.hpp"
#include "sluice/pool_resource.hpp"

namespace {

using sluice_bench::add;
using sluice_bench::KiB;

constexpr std::pmr::pool_options std_pools{.max_blocks_per_chunk = 0, .largest_required_pool_block = 1 << 20};

// Each resource is made once and never destroyed, as in pool_bench: the benchmark's threads come
// and go, and none outlives a resource it used; the process's exit reclaims them all.
struct sluice_resource {
  static std::pmr::memory_resource& get() {
    static auto* r = new sluice::pool_resource();
    return *r;
  }
};
struct sluice_mutex_resource {
  static std::pmr::memory_resource& get() {
    static auto* r = new sluice::mutex_pool_resource();
    return *r;
  }
};
struct std_sync {
  static std::pmr::memory_resource& get() {
    static auto* r = new std::pmr::synchronized_pool_resource(std_pools);
    return *r;
  }
};
struct std_unsync {
  static std::pmr::memory_resource& get() {
    static auto* r = new std::pmr::unsynchronized_pool_resource(std_pools);
    return *r;
  }
};
struct std_new_delete {
  static std::pmr::memory_resource& get() { return *std::pmr::new_delete_resource(); }
};

// A pool_workloads source over a memory resource.
template <class R>
struct resource_source {
  using item = void*;
  item get(std::size_t n) { return R::get().allocate(n, alignof(std::max_align_t)); }
  void put(item&& p, std::size_t n) noexcept { R::get().deallocate(p, n, alignof(std::max_align_t)); }
  static std::byte* bytes(item& p) { return static_cast<std::byte*>(p); }
};

struct pool_source {
  sluice::pool pool;
  using item = sluice::buffer;
  item get(std::size_t n) { return pool.acquire(n); }
  void put(item&& b, std::size_t) noexcept { pool.retire(std::move(b)); }
  static std::byte* bytes(item& b) { return b.data(); }
};

constexpr std::array<std::size_t, 32> string_lengths = {
    24, 40, 120, 32, 600, 64, 48, 200, 24, 80, 300, 40, 32, 96, 24, 160,
    56, 24, 400, 40, 72, 128, 24, 48, 250, 32, 64, 24, 500, 40, 88, 24};

template <class R>
void strings(benchmark::State& state) {
  std::pmr::memory_resource& r = R::get();
  for (auto _ : state) {
    std::pmr::vector<std::pmr::string> v(&r);
    for (const std::size_t n : string_lengths) v.emplace_back(n, 'x');
    benchmark::DoNotOptimize(v.data());
  }
}

void register_all() {
  using sluice_bench::pair;
  const sluice_bench::which_counts one_thread{.max_threads = 1};
  const auto add_pair = [&](const std::string& family, auto size) {
    constexpr std::size_t n = decltype(size)::value;
    add(family, "pool_resource", pair<resource_source<sluice_resource>, n>);
    add(family, "mutex_pool_resource", pair<resource_source<sluice_mutex_resource>, n>);
    add(family, "pmr_sync", pair<resource_source<std_sync>, n>);
    add(family, "pmr_unsync", pair<resource_source<std_unsync>, n>, one_thread);
    add(family, "new_delete", pair<resource_source<std_new_delete>, n>);
    add(family, "pool", pair<pool_source, n>);
  };
  add_pair("pool_resource.pair.64B", std::integral_constant<std::size_t, 64>{});
  add_pair("pool_resource.pair.1KiB", std::integral_constant<std::size_t, 1 * KiB>{});
  add_pair("pool_resource.pair.64KiB", std::integral_constant<std::size_t, 64 * KiB>{});

  add("pool_resource.strings", "pool_resource", strings<sluice_resource>);
  add("pool_resource.strings", "mutex_pool_resource", strings<sluice_mutex_resource>);
  add("pool_resource.strings", "pmr_sync", strings<std_sync>);
  add("pool_resource.strings", "pmr_unsync", strings<std_unsync>, one_thread);
  add("pool_resource.strings", "new_delete", strings<std_new_delete>);
}

}  // namespace

SLUICE_BENCH_MAIN(register_all)
