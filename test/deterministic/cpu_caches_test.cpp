// The CPU caches of sluice::pool (lib/pool/cpu_caches.cpp): which CPU uses which cache, and a
// fork's prepare against a stream of calls that take them, under the deterministic scheduler.
// Built into the deterministic tests' executable, which compiles the library's sources itself,
// so that these cases can build a pool's core and run its parts directly.
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "../doctest.hpp"
#include "pool/core.hpp"
#include "scheduler.hpp"

using sluice_test::det::moment;
using sluice_test::det::scheduler;
namespace sd = sluice::detail;

namespace {

// A CPU set of `cpus` CPUs holding those listed.
class cpu_set {
 public:
  cpu_set(std::size_t cpus, std::initializer_list<std::size_t> in) : set_(CPU_ALLOC(cpus)), bytes_(CPU_ALLOC_SIZE(cpus)) {
    CPU_ZERO_S(bytes_, set_);
    for (const std::size_t cpu : in) CPU_SET_S(cpu, bytes_, set_);
  }
  ~cpu_set() { CPU_FREE(set_); }
  cpu_set(const cpu_set&) = delete;
  cpu_set& operator=(const cpu_set&) = delete;
  void add(std::size_t cpu) { CPU_SET_S(cpu, bytes_, set_); }
  sd::cpu_map map(std::uint32_t most) const { return sd::map_cpus(set_, bytes_, most); }
  cpu_set_t* get() const { return set_; }
  std::size_t bytes() const { return bytes_; }

 private:
  cpu_set_t* set_;
  std::size_t bytes_;
};

// A state word for a core built without a pool object: enabled, with a stamp far above any that
// this process draws.
constexpr std::uint64_t test_word = (std::uint64_t{1} << 60) | sd::enabled_bit;

}  // namespace

TEST_CASE("each CPU the process may run on has a CPU cache of its own, up to the bound's share") {
  // docs/pool.md THREAD CACHES. Two CPUs of a large host: until issue 31 the count came from
  // hardware_concurrency() and the cache from cpu % count, so CPUs 8 and 24 shared cache 0.
  const cpu_set two(1024, {8, 24});
  const sd::cpu_map m = two.map(8);
  CHECK(m.count == 2);
  CHECK(m(8) != m(24));
  for (const int outside : {-1, 0, 9, 23, 25, 1023, 5000, 1 << 30}) CHECK(m(outside) < m.count);  // valid

  // Capped by the bound's share: 16 CPUs, 4 caches, each serving 4 of them.
  cpu_set sixteen(1024, {});
  for (std::size_t cpu = 100; cpu < 116; ++cpu) sixteen.add(cpu);
  const sd::cpu_map capped = sixteen.map(4);
  REQUIRE(capped.count == 4);
  std::vector<int> served(4, 0);
  for (int cpu = 100; cpu < 116; ++cpu) ++served.at(capped(cpu));
  CHECK(served == std::vector<int>{4, 4, 4, 4});

  // Every CPU of a full set its own; one CPU, one cache; a pool that does not cache, none.
  cpu_set all(64, {});
  for (std::size_t cpu = 0; cpu < 64; ++cpu) all.add(cpu);
  const sd::cpu_map full = all.map(1000);
  CHECK(full.count == 64);
  std::set<std::uint32_t> distinct;
  for (int cpu = 0; cpu < 64; ++cpu) distinct.insert(full(cpu));
  CHECK(distinct.size() == 64);
  const cpu_set one(1024, {37});
  CHECK(one.map(8).count == 1);
  CHECK(one.map(8)(37) == 0);
  CHECK(one.map(8)(3) == 0);
  CHECK(two.map(0).count == 0);
}

TEST_CASE("a pool's CPU caches follow the process's affinity") {
  // The pool's core, made while the process may run on one CPU only, has one CPU cache (until
  // issue 31: as many as hardware_concurrency(), 2 on a 2-CPU machine). The affinity is the main
  // thread's, this one's, and is given back after.
  const long cpus = sysconf(_SC_NPROCESSORS_CONF);
  REQUIRE(cpus > 0);
  const cpu_set before(static_cast<std::size_t>(cpus), {});
  REQUIRE(sched_getaffinity(0, before.bytes(), before.get()) == 0);
  std::size_t first = 0;
  while (!CPU_ISSET_S(first, before.bytes(), before.get())) ++first;
  const cpu_set only(static_cast<std::size_t>(cpus), {first});
  REQUIRE(sched_setaffinity(0, only.bytes(), only.get()) == 0);
  std::uint32_t count = 0;
  {
    sd::atomic<std::uint64_t> word{test_word};
    const sd::pool_core core(sluice::pool_options{.bound = 1024}, word);  // a share of 8
    count = core.cpus.count;
  }
  REQUIRE(sched_setaffinity(0, before.bytes(), before.get()) == 0);
  CHECK(count == 1);
}

TEST_CASE("a fork's prepare waits for the calls that hold a CPU cache as it begins, not for later ones") {
  // docs/pool.md FORK. Three callers take the CPU cache of the CPU they run on (every scheduled
  // thread runs on one CPU), as a call of a thread without a seat does (cpu_cache_hold), one call
  // after another without pause; F runs a fork's prepare (lock_for_fork) and then the parent's or
  // the child's handler. The policy is the callers' best: F runs only while a caller holds the
  // cache, unless none has taken it for `patience` steps. Until issue 31 nothing kept a call that
  // began after the prepare from taking the cache, so F never had it (`stuck`, after a budget of
  // the callers' steps); now the callers leave it alone once they see the fork's flag (L3), the one
  // in flight lets it go, and F has it. After the handler the callers take it again.
  for (const bool child : {false, true}) {
    CAPTURE(child);
    sd::atomic<std::uint64_t> word{test_word};
    sd::pool_core core(sluice::pool_options{.bound = 64}, word);  // CPU caches of 4 places
    REQUIRE(core.cpus.count > 0);
    int holders = 0;
    bool preparing = false, prepared = false, done = false;
    std::uint64_t taken_after = 0;  // holds that began once the handler had run
    const auto call = [&] {
      while (!done) {
        sd::caller k{core, nullptr, core.state.load(std::memory_order_acquire)};
        sd::cpu_cache_hold hold(k);
        if (k.tc == nullptr) continue;  // in use: the call goes to the shared stacks
        ++holders;
        taken_after += prepared;
        (void)k.tc->loose.load(std::memory_order_relaxed);  // a step while it holds the cache
        --holders;
      }
    };
    constexpr std::size_t forker = 3;
    constexpr std::uint64_t patience = 100, budget = 20000;
    std::uint64_t idle = 0, waited = 0, after = 0;
    bool stuck = false;
    scheduler::run(
        {call, call, call,
         [&] {
           preparing = true;
           core.lock_for_fork();
           prepared = true;
           child ? core.unlock_in_child() : core.unlock_in_parent();
           scheduler::wait_until([&] { return taken_after > 0 || ++after > budget; });
           done = true;
         }},
        [&](const moment& m) -> std::size_t {
          idle = holders > 0 ? 0 : idle + 1;
          const bool f_runnable = std::find(m.runnable.begin(), m.runnable.end(), forker) != m.runnable.end();
          if (preparing && !prepared && f_runnable && !stuck) {
            if (++waited > budget) {
              stuck = true;
            } else if (holders == 0 && idle < patience) {
              return m.step % 3;  // a caller (they never finish before F does)
            }
          }
          return m.runnable[m.step % m.runnable.size()];
        });
    CHECK_FALSE(stuck);
    CHECK(taken_after > 0);
    MESSAGE(std::string(child ? "child" : "parent") << ": F's prepare took " << waited << " steps of the callers");
  }
}
