// What sluice::pool allocates for itself, seen through a replaced global operator new: the slot
// table stays flat when one thread trims what another retires, a thread that cycles through
// more pools than its directory has ways allocates nothing once each pool knows it, and a cache
// that finds no slot (operator new failing on purpose) keeps what it holds and drops only the
// retire that needed room.
//
// The replacement counts every allocation of the calling thread and the bytes live in the
// process (by malloc_usable_size, so that frees subtract what allocations added), and fails on
// purpose while `failing` is set. It serves the throwing and nothrow forms; the aligned forms
// are left to the library's runtime, which pairs them with its own deletes.
#include <malloc.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>
#include <thread>
#include <vector>

#include "doctest.hpp"
#include "sluice/pool.hpp"
#if __has_include(<memory_resource>)  // pool_resource needs it (libc++ has it from 16 on)
#include "sluice/pool_resource.hpp"
#endif

namespace {

std::atomic<long long> live_bytes{0};
std::atomic<bool> failing{false};
std::atomic<long long> fail_in{-1};  // when >= 0: allocations left before one fails
thread_local long long allocations = 0;

// When set, a block under 16 bytes is aligned to 8 and no more, as operator new may answer it
// (it need only suit the objects that fit; jemalloc and mimalloc do so): glibc's malloc aligns
// everything to 16, so a pointer that is 8 past a multiple of 16 is one of these.
std::atomic<bool> small_blocks_8_aligned{false};

void* allocate(std::size_t n) noexcept {
  if (failing.load(std::memory_order_relaxed)) return nullptr;
  if (n < 16 && small_blocks_8_aligned.load(std::memory_order_relaxed)) {
    auto* raw = static_cast<char*>(std::malloc(32));
    return raw == nullptr ? nullptr : raw + 8;
  }
  if (fail_in.load(std::memory_order_relaxed) >= 0 && fail_in.fetch_sub(1) == 0) return nullptr;
  void* p = std::malloc(n == 0 ? 1 : n);
  if (p != nullptr) {
    ++allocations;
    live_bytes.fetch_add(static_cast<long long>(malloc_usable_size(p)), std::memory_order_relaxed);
  }
  return p;
}

void release(void* p) noexcept {
  if (p == nullptr) return;
  if (reinterpret_cast<std::uintptr_t>(p) % 16 == 8) return std::free(static_cast<char*>(p) - 8);
  live_bytes.fetch_sub(static_cast<long long>(malloc_usable_size(p)), std::memory_order_relaxed);
  std::free(p);
}

void* allocate_or_throw(std::size_t n) {
  if (void* p = allocate(n)) return p;
  throw std::bad_alloc();
}

}  // namespace

void* operator new(std::size_t n) { return allocate_or_throw(n); }
void* operator new[](std::size_t n) { return allocate_or_throw(n); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return allocate(n); }
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return allocate(n); }
void operator delete(void* p) noexcept { release(p); }
void operator delete[](void* p) noexcept { release(p); }
void operator delete(void* p, std::size_t) noexcept { release(p); }
void operator delete[](void* p, std::size_t) noexcept { release(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { release(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { release(p); }

using sluice::buffer;
using sluice::pool_options;

TEST_CASE("the slot table stays flat when one thread trims what another retires") {
  // A worker retires 20,000 fresh buffers per cycle; the main thread then trims. Every slot the
  // trim empties must be usable again by the worker: after the first cycles the pool allocates
  // no more slots, so what it holds after a trim stops growing. (Buffers are freed by the trim;
  // at most a cache's worth, 32 KiB, may stay in the worker's cache until its next call.)
  for (const bool cached : {true, false}) {
    CAPTURE(cached);
    constexpr int per_cycle = 20000, cycles = 8;
    sluice::pool p{pool_options{.bound = 32768, .thread_cache = cached}};
    std::atomic<int> cycle{0}, done{0};
    std::thread worker([&] {
      for (int c = 1; c <= cycles; ++c) {
        cycle.wait(c - 1);
        for (int i = 0; i < per_cycle; ++i) p.retire(buffer(1024));
        done.store(c);
        done.notify_one();
      }
    });
    std::vector<long long> after_trim;
    for (int c = 1; c <= cycles; ++c) {
      cycle.store(c);
      cycle.notify_one();
      for (int seen = done.load(); seen < c; seen = done.load()) done.wait(seen);
      p.trim();
      after_trim.push_back(live_bytes.load());
    }
    worker.join();
    const long long growth = after_trim.back() - after_trim[1];
    MESSAGE("held after trims, cycle 2 to " << cycles << ": " << after_trim[1] << " -> " << after_trim.back()
                                            << " bytes");
    CHECK(growth < 64 * 1024);
  }
}

TEST_CASE("a thread that cycles through more pools than its directory has ways allocates nothing") {
  // The thread's first call to each pool makes its cache; after that, acquire+retire pairs over
  // 9, 16 or 64 pools in turn find every cache again, with no allocation (and so no lock).
  for (const int pools : {9, 16, 64}) {
    CAPTURE(pools);
    std::vector<std::unique_ptr<sluice::pool>> all;
    for (int i = 0; i < pools; ++i) all.push_back(std::make_unique<sluice::pool>());
    long long first_round = 0, later_rounds = 0;
    std::uint64_t hits = 0;
    std::thread user([&] {
      for (int round = 0; round < 20; ++round) {
        const long long before = allocations;
        for (auto& p : all) p->retire(p->acquire(1024));
        (round == 0 ? first_round : later_rounds) += allocations - before;
      }
    });
    user.join();
    for (auto& p : all) hits += p->stats().hits;
    MESSAGE(pools << " pools: " << first_round << " allocations in the first round, " << later_rounds
                  << " in the 19 after");
    CHECK(first_round > 0);
    CHECK(later_rounds == 0);
    CHECK(hits == static_cast<std::uint64_t>(19 * pools));
  }
}

TEST_CASE("a cache that finds no slot keeps what it holds and drops only the retire that needed room") {
  // bound 1024: a thread caches up to 32 buffers of one class (a magazine's room) before it
  // needs slots. With operator new
  // failing, the 33rd retire cannot move the cache to the shared stacks: it is dropped and
  // counted so, and the 32 already kept stay kept and answer takes.
  sluice::pool p;
  std::vector<buffer> fresh;
  for (int i = 0; i < 33; ++i) fresh.emplace_back(1024);
  buffer probe = p.take(1024);  // makes this thread's cache before allocation fails
  CHECK_FALSE(probe);
  for (int i = 0; i < 32; ++i) p.retire(std::move(fresh[i]));
  failing.store(true);
  p.retire(std::move(fresh[32]));
  failing.store(false);
  const sluice::pool_stats s = p.stats();
  CHECK(s.retired + s.dropped == 33);
  CHECK(s.retained == s.retired);  // nothing kept was freed
  CHECK(s.retained_bytes == 1024 * s.retained);
  std::size_t answered = 0;
  while (p.take(1024)) ++answered;
  CHECK(answered == s.retained);
}

TEST_CASE_TEMPLATE("a pool whose construction fails leaves nothing for a later fork to touch", P, sluice::pool,
                   sluice::mutex_pool) {
  // Each allocation of the constructor in turn fails; the constructor throws std::bad_alloc and
  // must leave no registration behind (a fork's handlers would lock a freed object). After each
  // failure a fork must work, and another pool must construct cleanly.
  int failures = 0;
  for (long long n = 0;; ++n) {
    CAPTURE(n);
    fail_in.store(n);
    bool threw = false;
    try {
      P p;
    } catch (const std::bad_alloc&) {
      threw = true;
    }
    fail_in.store(-1);
    if (!threw) break;  // every allocation of the constructor has failed once
    ++failures;
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) _exit(0);
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
    P again;
    again.retire(buffer(64));
    CHECK(again.retained() == 1);
  }
  MESSAGE(failures << " constructions failed, one at each allocation");
  CHECK(failures > 0);
}

TEST_CASE("buffers and pooled blocks are 16-aligned even where operator new aligns small blocks to 8") {
  small_blocks_8_aligned.store(true);
  const auto aligned = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; };
  void* probe = ::operator new(8);
  CHECK_FALSE(aligned(probe));  // the replacement does what it says
  ::operator delete(probe);
  for (std::size_t n = 0; n <= 16; ++n) {
    CAPTURE(n);
    const buffer b(n);
    CHECK(aligned(b.data()));
    sluice::pool p{pool_options{.ceiling = n}};  // classes cut at a ceiling below 16
    buffer a = p.acquire(n);
    CHECK(aligned(a.data()));
    p.retire(std::move(a));
#if __has_include(<memory_resource>)
    for (const bool locked : {false, true}) {
      CAPTURE(locked);
      std::unique_ptr<std::pmr::memory_resource> r;
      if (locked) {
        r = std::make_unique<sluice::mutex_pool_resource>(pool_options{.ceiling = n});
      } else {
        r = std::make_unique<sluice::pool_resource>(pool_options{.ceiling = n});
      }
      for (std::size_t k = 0; k <= n; ++k) {
        void* q = r->allocate(k, 16);
        CHECK(aligned(q));
        r->deallocate(q, k, 16);
      }
    }
#endif
  }
  small_blocks_8_aligned.store(false);
}
