// A deterministic scheduler for tests: it runs a few threads one at a time and switches between
// them only at atomic operations, as a policy chooses (a seeded random one, or a script). The
// same seed gives the same interleaving, so any failing schedule can be replayed.
//
// The primitives reach it through their one atomic seam: this test's executable compiles the
// library's sources with seam/ ahead of include/ on the include path, so that their
// sluice/detail/atomic.hpp is seam/'s, which takes deterministic_atomic.hpp beside this file, whose
// sluice::detail::atomic calls scheduler::yield() before every operation, and whose
// sluice::detail::mutex yields while it finds the mutex held, so whole pools run here too: their
// lock-free parts, their mutexes, thread exit (sluice::detail::release_thread_caches) and ~pool.
// A test that waits for another scheduled thread spins on wait_until(), which yields.
#pragma once

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <latch>
#include <memory>
#include <random>
#include <thread>
#include <vector>

namespace sluice_test::det {

enum class op { load, store, rmw, cas, lock, unlock, wait, notify };

// What a policy is shown at each switch point: who may run, who is about to act, and how.
struct moment {
  std::size_t step;                       // switch points so far
  const std::vector<std::size_t>& runnable;
  std::size_t current;                    // the thread at this switch point (or none at start)
  op next_op;
};

using policy = std::function<std::size_t(const moment&)>;

// The turn, handed from one thread to the next: the thread that holds it posts the next one's
// baton and waits on its own, one wake and one sleep a switch. With every scheduled thread on one
// CPU (run()), the deterministic suite takes 24 s on a 2-core VM; on a mutex and condition
// variables, its threads free to run on either CPU, it took 345 s.
class baton {
 public:
  void post() {
    posted_.store(1, std::memory_order_release);  // the poster's scheduler state, to wait()
    syscall(SYS_futex, &posted_, FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
  }
  void wait() {
    while (posted_.exchange(0, std::memory_order_acquire) == 0)  // with post()
      syscall(SYS_futex, &posted_, FUTEX_WAIT_PRIVATE, 0, nullptr, nullptr, 0);
  }

 private:
  static_assert(sizeof(std::atomic<int>) == sizeof(int));
  std::atomic<int> posted_{0};
};

// The seeds a case explores: SLUICE_DET_SEED alone when set, else 0..count-1.
inline std::vector<std::uint64_t> seeds(std::uint64_t count) {
  if (const char* one = std::getenv("SLUICE_DET_SEED")) return {std::strtoull(one, nullptr, 10)};
  std::vector<std::uint64_t> all(count);
  for (std::uint64_t i = 0; i < count; ++i) all[i] = i;
  return all;
}

class scheduler {
 public:
  static constexpr std::size_t none = static_cast<std::size_t>(-1);

  // Runs every body on its own thread, one at a time, switching only where policy says. The
  // scheduler's state is touched only by the thread that holds the turn (or by this one before
  // the first turn and after the last), each handing it on through a baton.
  static std::size_t run(const std::vector<std::function<void()>>& bodies, policy pick) {
    scheduler& s = instance();
    s.pick_ = std::move(pick);
    s.done_.assign(bodies.size(), false);
    s.blocked_.assign(bodies.size(), nullptr);
    s.timed_.assign(bodies.size(), false);
    s.timed_out_.assign(bodies.size(), false);
    s.turns_ = std::make_unique<baton[]>(bodies.size());
    s.step_ = 0;
    s.stalls_ = 0;
    s.current_ = s.choose(none, op::load);
    // All on one CPU: since one runs at a time, a switch is then a sleep and a wake on the same
    // CPU, with no cross-CPU wake-up (which costs more than the rest of a switch on a VM).
    cpu_set_t one_cpu;
    CPU_ZERO(&one_cpu);
    CPU_SET(sched_getcpu() < 0 ? 0 : sched_getcpu(), &one_cpu);
    // A thread whose body has finished stays until every body has: its exit (thread-local
    // destructors, a sanitizer's own teardown, which takes the sanitizer's allocator locks) must
    // not run beside scheduled steps. A fork beside it would copy those locks held into a child
    // that then waits on them for good.
    std::latch finished(static_cast<std::ptrdiff_t>(bodies.size()));
    std::vector<std::thread> threads;
    for (std::size_t i = 0; i < bodies.size(); ++i) {
      threads.emplace_back([&s, &bodies, &one_cpu, &finished, i] {
        sched_setaffinity(0, sizeof one_cpu, &one_cpu);  // best effort: a refusal costs only time
        me = i;
        s.turns_[i].wait();
        bodies[i]();
        s.finish(i);
        me = none;
        finished.arrive_and_wait();
      });
    }
    s.hand_on();
    for (auto& t : threads) t.join();
    return s.step_;
  }

  // A switch point, before an atomic operation. Threads the scheduler does not run pass through.
  static void yield(op next) {
    if (me == none) return;
    scheduler& s = instance();
    s.current_ = s.choose(me, next);
    if (s.current_ == me) return;  // no switch
    s.hand_on();
    s.turns_[me].wait();
  }

  // Waits, at switch points, until ready() holds (it reads what other scheduled threads write).
  template <class Ready>
  static void wait_until(Ready ready) {
    while (!ready()) yield(op::load);
  }

  // Blocks the calling thread until ready() holds, as a thread asleep in the kernel: the
  // scheduler does not run it meanwhile, and evaluates ready() (on the thread that holds the
  // turn, so it may read only plain std::atomics) at every switch point. When every unfinished thread is
  // blocked, time passes: the first blocked thread whose wait is timed wakes and answers false.
  // When none is timed, nothing can ever wake them: a stall (a lost wake-up, when a test's
  // threads must finish). The scheduler counts it and wakes them all, spuriously, so that the
  // test can go on and report it; it aborts after 100 stalls in one run.
  static bool block_until(std::function<bool()> ready, bool timed) {
    if (me == none) {
      while (!ready()) std::this_thread::yield();
      return true;
    }
    scheduler& s = instance();
    s.blocked_[me] = std::move(ready);
    s.timed_[me] = timed;
    s.timed_out_[me] = false;
    s.current_ = s.choose(me, op::wait);
    if (s.current_ != me) {
      s.hand_on();
      s.turns_[me].wait();
    }
    return !s.timed_out_[me];
  }

  // In a forked child, where the scheduler's other threads do not exist: the calling thread runs
  // unscheduled from here on.
  static void detach() { me = none; }

  // Stalls in the last run (see block_until); asked after run() returns.
  static std::size_t stalls() { return instance().stalls_; }

  // A policy that picks uniformly at random from a seed.
  static policy random(std::uint64_t seed) {
    return [rng = std::mt19937_64(seed)](const moment& m) mutable {
      return m.runnable[rng() % m.runnable.size()];
    };
  }

 private:
  static scheduler& instance() {
    static scheduler s;
    return s;
  }

  std::size_t choose(std::size_t current, op next) {
    std::vector<std::size_t> runnable, waiting;
    for (std::size_t i = 0; i < done_.size(); ++i) {
      if (done_[i]) continue;
      (blocked_[i] == nullptr || blocked_[i]() ? runnable : waiting).push_back(i);
    }
    if (runnable.empty() && !waiting.empty()) {
      const auto timed = std::find_if(waiting.begin(), waiting.end(), [&](std::size_t i) { return timed_[i]; });
      if (timed != waiting.end()) {
        timed_out_[*timed] = true;  // time passes: its deadline comes
        runnable.push_back(*timed);
      } else {
        if (++stalls_ > 100) {
          std::fprintf(stderr, "deterministic scheduler: every thread blocked for good, 100 times\n");
          std::abort();
        }
        runnable = waiting;  // woken spuriously, to go on and be reported
      }
    }
    if (runnable.empty()) return none;
    const std::size_t pick = pick_(moment{step_++, runnable, current, next});
    blocked_[pick] = nullptr;
    return pick;
  }

  void hand_on() {
    if (current_ != none) turns_[current_].post();
  }

  void finish(std::size_t i) {
    done_[i] = true;
    current_ = choose(none, op::load);
    hand_on();
  }

  static inline thread_local std::size_t me = none;

  std::unique_ptr<baton[]> turns_;  // one per thread: only the chosen one wakes
  policy pick_;
  std::vector<bool> done_;
  std::vector<std::function<bool()>> blocked_;  // what a blocked thread waits for; null if none
  std::vector<bool> timed_, timed_out_;
  std::size_t stalls_ = 0;
  std::size_t step_ = 0;
  std::size_t current_ = none;
};

}  // namespace sluice_test::det
