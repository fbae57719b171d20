// count WORKLOAD N: runs N warm iterations of one operation pair, for scripts/instructions.sh
// to count under callgrind. The script subtracts an N run from a 2N run, so the setup, the
// warm-up and the program's start and exit cancel out and only the loop body is left.
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <utility>

#include <sluice/sluice.hpp>

namespace {

// Makes the compiler assume p (and the memory behind it) is read, so no call is elided.
inline void escape(const void* p) { asm volatile("" : : "r"(p) : "memory"); }

// The pair with a size the compiler sees (Size), or with one it learns only at run time (Size 0).
template <class Pool, bool Acquire, std::size_t Size = 1024>
int run_pool(long n, std::size_t runtime_size = 0) {
  const std::size_t size = Size != 0 ? Size : runtime_size;
  Pool pool;
  for (int i = 0; i < 8; ++i) pool.retire(pool.acquire(size));  // warm: the buffer is cached now
  for (long i = 0; i < n; ++i) {
    sluice::buffer b = Acquire ? pool.acquire(size) : pool.take(size);
    if (!b) return 2;  // take missed: the measurement would be wrong
    b.data()[0] = std::byte(i);
    escape(b.data());
    pool.retire(std::move(b));
  }
  return 0;
}

template <class Resource>
int run_resource(long n) {
  Resource resource;
  std::pmr::memory_resource& r = resource;  // called as any pmr container calls it
  for (int i = 0; i < 8; ++i) r.deallocate(r.allocate(1024, 16), 1024, 16);  // warm
  for (long i = 0; i < n; ++i) {
    auto* p = static_cast<unsigned char*>(r.allocate(1024, 16));
    p[0] = static_cast<unsigned char>(i);
    escape(p);
    r.deallocate(p, 1024, 16);
  }
  return resource.stats().misses == 1 ? 0 : 2;  // only the very first allocate missed
}

int run_malloc(long n) {
  for (long i = 0; i < n; ++i) {
    auto* p = static_cast<unsigned char*>(std::malloc(1024));
    p[0] = static_cast<unsigned char>(i);
    escape(p);
    std::free(p);
  }
  return 0;
}

// The gate's workloads are functions of their own: inlined into main beside the pool's loops,
// they changed the registers the compiler gave those (the run-time size pair counted 46 there,
// 45 with the gate's loops out of main; 47 as a function of its own, as it was before the gate's
// calls were inline).
[[gnu::noinline]] int run_gate(long n) {
  sluice::gate g{sluice::gate_limit};
  for (long i = 0; i < n; ++i) {
    if (!g.try_admit()) return 2;
    escape(&g);
    g.note_done();
  }
  return 0;
}

// The waiting form with room: admit() answers at once.
[[gnu::noinline]] int run_gate_admit(long n) {
  sluice::gate g{sluice::gate_limit};
  for (long i = 0; i < n; ++i) {
    g.admit();
    escape(&g);
    g.note_done();
  }
  return 0;
}

// The weighted pair, with a weight the compiler cannot fold.
[[gnu::noinline]] int run_gate_weighted(long n, std::int64_t units) {
  sluice::gate g{sluice::gate_limit};
  for (long i = 0; i < n; ++i) {
    if (!g.try_admit(units)) return 2;
    escape(&g);
    g.note_done(units);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 && argc != 4) {
    std::fprintf(stderr, "usage: count pool|pool_acquire|pool_runtime_size|pool_acquire_runtime_size|mutex_pool|mutex_pool_acquire|pool_resource|mutex_pool_resource|malloc|gate|gate_admit|gate_weighted N [SIZE]\n");
    return 1;
  }
  const char* w = argv[1];
  const long n = std::atol(argv[2]);
  if (!std::strcmp(w, "pool")) return run_pool<sluice::pool, false>(n);
  if (!std::strcmp(w, "pool_runtime_size")) return run_pool<sluice::pool, false, 0>(n, std::strtoul(argc == 4 ? argv[3] : "1024", nullptr, 10));
  if (!std::strcmp(w, "pool_acquire")) return run_pool<sluice::pool, true>(n);
  if (!std::strcmp(w, "pool_acquire_runtime_size")) return run_pool<sluice::pool, true, 0>(n, std::strtoul(argc == 4 ? argv[3] : "1024", nullptr, 10));
  if (!std::strcmp(w, "mutex_pool")) return run_pool<sluice::mutex_pool, false>(n);
  if (!std::strcmp(w, "mutex_pool_acquire")) return run_pool<sluice::mutex_pool, true>(n);
  if (!std::strcmp(w, "pool_resource")) return run_resource<sluice::pool_resource>(n);
  if (!std::strcmp(w, "mutex_pool_resource")) return run_resource<sluice::mutex_pool_resource>(n);
  if (!std::strcmp(w, "malloc")) return run_malloc(n);
  if (!std::strcmp(w, "gate")) return run_gate(n);
  if (!std::strcmp(w, "gate_admit")) return run_gate_admit(n);
  if (!std::strcmp(w, "gate_weighted")) return run_gate_weighted(n, std::strtol(argc == 4 ? argv[3] : "1024", nullptr, 10));
  std::fprintf(stderr, "count: unknown workload %s\n", w);
  return 1;
}
