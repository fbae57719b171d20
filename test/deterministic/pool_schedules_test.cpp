// sluice::pool under the deterministic scheduler: lib/pool/ compiled again over the atomic and
// mutex seam (deterministic_atomic.hpp), so thread exit, ~pool, trim, the switch and the calls
// that straddle them interleave at every atomic operation and mutex step that a seed picks.
// Set SLUICE_DET_SEED=N to replay one seed.
//
// A thread's exit is driven by calling what its thread_local destructor calls
// (sluice::detail::release_thread_caches), so that it runs under the scheduler too.
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <functional>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "../doctest.hpp"
#include "../kinds.hpp"
#include "exact_class.hpp"
#include "pool/core.hpp"
#include "scheduler.hpp"
#include "sluice/pool.hpp"

using sluice::buffer;
using sluice::pool_options;
using sluice_test::det::moment;
using sluice_test::det::scheduler;
using sluice_test::det::seeds;

namespace {

void exit_thread() { sluice::detail::release_thread_caches(); }

// A forked child has no scheduler: its one thread leaves it before sluice's child handlers run
// (registered at static initialisation, before any pool registers sluice's, so run first).
const bool child_detaches = pthread_atfork(nullptr, nullptr, [] { scheduler::detach(); }) == 0;

// Logical time at call boundaries. One scheduled thread runs at a time and the scheduler's own
// mutex orders every switch, so a plain counter is exact: a call's span [begin, end] holds every
// switch point inside it.
struct span {
  std::uint64_t begin = 0, end = 0;
};
struct logical_clock {
  std::uint64_t now = 0;
  template <class Call>
  span time(Call call) {
    span s;
    s.begin = ++now;
    call();
    s.end = ++now;
    return s;
  }
};

// Buffers are told apart by a mark in their first bytes, which the pool never touches.
buffer marked(std::size_t capacity, std::uint64_t mark) {
  buffer b(capacity);
  std::memcpy(b.data(), &mark, sizeof mark);
  return b;
}
std::uint64_t mark_of(const buffer& b) {
  std::uint64_t mark = 0;
  std::memcpy(&mark, b.data(), sizeof mark);
  return mark;
}

// How many schedules a case runs: its plain-build count, halved under the sanitizers, which
// slow every switch several times over.
std::uint64_t scaled(std::uint64_t plain) {
  return sluice_test::sanitized ? plain / 2 : plain;
}

// A policy that stops `victim` at its k-th switch point once `armed` is set, and runs the other
// threads in turn while it stays stopped: until all of them have finished, or until a budget of
// steps shows that they cannot finish without it (`stuck`). Otherwise threads take turns.
struct stop_at {
  std::size_t victim;
  std::uint64_t k;
  const bool& armed;
  std::uint64_t budget = 3000;  // steps the others may take while the victim stays stopped
  std::uint64_t points = 0, waited = 0;
  bool stopped = false, reached = false, stuck = false;

  std::size_t pick(const moment& m) {
    if (m.current == victim && armed && !reached && ++points == k) stopped = reached = true;
    if (stopped) {
      std::vector<std::size_t> others;
      for (const std::size_t t : m.runnable) {
        if (t != victim) others.push_back(t);
      }
      if (!others.empty() && ++waited <= budget) return others[m.step % others.size()];
      stuck = !others.empty();
      stopped = false;
    }
    return m.runnable[m.step % m.runnable.size()];
  }
};

// Threads outside the scheduler that take n of a pool's seats (a first call each) and hold them,
// alive, until this object goes.
class seat_holders {
 public:
  seat_holders(sluice::pool& p, int n) {
    for (int i = 0; i < n; ++i) {
      threads_.emplace_back([&p, this] {
        (void)p.take(1);
        {
          std::unique_lock lock(mutex_);
          ++seated_;
          changed_.notify_all();
          changed_.wait(lock, [this] { return done_; });
        }
      });
    }
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return seated_ == n; });
  }
  ~seat_holders() {
    {
      std::lock_guard lock(mutex_);
      done_ = true;
      changed_.notify_all();
    }
    for (auto& t : threads_) t.join();
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  int seated_ = 0;
  bool done_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace

TEST_CASE("a thread's exit and its cache's eviction race ~pool, each stopped anywhere") {
  // Two threads use pool X and say so; a third destroys X without waiting for them. One of them
  // exits at once; the other goes on to pool Y, whose first call lets go of its cache for the
  // dead X. The last to let go of X's control block frees it; nothing may be read after that
  // (AddressSanitizer and ThreadSanitizer check it; LeakSanitizer checks that it is freed).
  // Each of the three is stopped at each of its switch points in turn while the others run on as
  // far as they can (an exit may wait for ~pool's mutex, and ~pool for an exit's: both block),
  // and then random schedules mix all three.
  std::uint64_t schedules = 0, switch_points = 0;
  const auto round = [&](const std::function<std::size_t(const moment&)>& policy, bool& exiting,
                         bool& evicting, bool& destroying) {
    sluice::pool y;
    auto* x = new sluice::pool(pool_options{.bound = 256});
    int used = 0;
    bool gone = false;
    switch_points += scheduler::run(
        {[&] {
           x->retire(x->acquire(1024));
           ++used;
           exiting = true;
           exit_thread();
         },
         [&] {
           x->retire(x->acquire(1024));
           x->retire(buffer(4096));
           ++used;
           scheduler::wait_until([&] { return gone; });
           evicting = true;
           y.retire(y.acquire(1024));
           exit_thread();
         },
         [&] {
           scheduler::wait_until([&] { return used == 2; });
           destroying = true;
           delete x;
           gone = true;
         }},
        policy);
    ++schedules;
    CHECK(y.retained() == 1);
  };
  for (std::size_t victim = 0; victim < 3; ++victim) {
    for (std::uint64_t k = 1;; ++k) {
      CAPTURE(victim);
      CAPTURE(k);
      bool flags[3] = {false, false, false};
      stop_at stop{victim, k, flags[victim], 400};
      round([&](const moment& m) { return stop.pick(m); }, flags[0], flags[1], flags[2]);
      if (!stop.reached) break;
    }
  }
  for (const std::uint64_t seed : seeds(scaled(100))) {
    CAPTURE(seed);
    bool flags[3] = {false, false, false};
    round(scheduler::random(seed), flags[0], flags[1], flags[2]);
  }
  MESSAGE("exit against ~pool: " << schedules << " schedules, " << switch_points << " switch points");
}

TEST_CASE("a call that straddles a trim or the switch frees only what they must") {
  // C retires three buffers (the third moves its cache to the shared stack), T trims or switches
  // the pool off, B retires three more; C and B then exit. Every buffer retired after T returned
  // must stay retained; none retired before T began may (trim freed it, or the switch did).
  // Same class for all, told apart by marks: a straddling call that freed the whole class would
  // take B's with it.
  // With `seated` off, four other threads hold the pool's four seats (bound 64), so C, T and B
  // have none and keep their batches in the CPU caches, which trim empties itself.
  std::uint64_t schedules = 0, switch_points = 0;
  for (const bool cached : {true, false}) {
    for (const bool seated : {true, false}) {
      if (!cached && !seated) continue;
    for (const bool disable : {false, true}) {
      for (const std::uint64_t seed : seeds(scaled(300))) {
        CAPTURE(cached);
        CAPTURE(seated);
        CAPTURE(disable);
        CAPTURE(seed);
        // bound 64: a cache holds at most 2 buffers, so C's third retire publishes a batch
        sluice::pool p{pool_options{.bound = 64, .thread_cache = cached}};
        seat_holders holders(p, seated ? 0 : 4);
        logical_clock clock;
        span turn;
        std::vector<std::pair<std::uint64_t, span>> retires;  // mark, when
        const auto retire = [&](std::uint64_t mark) {
          buffer b = marked(1024, mark);
          retires.emplace_back(mark, clock.time([&] { p.retire(std::move(b)); }));
        };
        switch_points += scheduler::run(
            {[&] {
               for (std::uint64_t m = 1; m <= 3; ++m) retire(m);
               exit_thread();
             },
             [&] { turn = clock.time([&] { disable ? p.set_enabled(false) : p.trim(); }); },
             [&] {
               for (std::uint64_t m = 11; m <= 13; ++m) retire(m);
               exit_thread();
             }},
            scheduler::random(seed));
        ++schedules;
        std::set<std::uint64_t> must, may;
        for (const auto& [mark, when] : retires) {
          if (!disable && when.begin > turn.end) must.insert(mark);
          if (!disable && when.end > turn.begin) may.insert(mark);
        }
        const sluice::pool_stats s = p.stats();
        CHECK(s.retired + s.dropped == 6);
        if (!disable) CHECK(s.dropped == 0);
        std::set<std::uint64_t> found;
        while (buffer b = p.take(1024)) found.insert(mark_of(b));
        CHECK(s.retained == found.size());
        CHECK(s.retained_bytes == 1024 * found.size());
        CHECK(std::includes(found.begin(), found.end(), must.begin(), must.end()));
        CHECK(std::includes(may.begin(), may.end(), found.begin(), found.end()));
        CHECK(p.retained() == 0);
      }
    }
    }
  }
  MESSAGE("straddled trims: " << schedules << " schedules, " << switch_points << " switch points");
}

TEST_CASE("a take that straddles a trim keeps what was retired after the trim returned") {
  // C leaves buffers on the shared stack; R's takes begin while they are there; T trims; Q
  // retires after the trim returned, so Q's buffers must survive it; then all exit. R is stopped
  // at each of its switch points in turn while the others run to their end: a take that began
  // before the trim and refills its cache after it must not let its thread's next call free
  // what it found (Q's buffers), and what it did find before the trim is freed or answered.
  std::uint64_t stops = 0;
  for (std::uint64_t k = 1;; ++k) {
    CAPTURE(k);
    sluice::pool p{pool_options{.bound = 256}};  // caches of 8 buffers, batches of 4
    bool c_done = false, armed = false, trimmed = false;
    std::set<std::uint64_t> answered, must;
    stop_at stop{1, k, armed};
    scheduler::run(
        {[&] {
           for (std::uint64_t m = 1; m <= 3; ++m) p.retire(marked(1024, m));
           exit_thread();  // its cache goes to the shared stack
           c_done = true;
         },
         [&] {
           scheduler::wait_until([&] { return c_done; });
           armed = true;
           for (int i = 0; i < 2; ++i) {
             if (buffer b = p.take(1024)) answered.insert(mark_of(b));
           }
           exit_thread();
         },
         [&] {
           scheduler::wait_until([&] { return c_done; });
           p.trim();
           trimmed = true;
         },
         [&] {
           scheduler::wait_until([&] { return trimmed; });
           for (std::uint64_t m = 11; m <= 13; ++m) {
             p.retire(marked(1024, m));
             must.insert(m);
           }
           exit_thread();
         }},
        [&](const moment& m) { return stop.pick(m); });
    std::set<std::uint64_t> found = answered;
    while (buffer b = p.take(1024)) found.insert(mark_of(b));
    CHECK(std::includes(found.begin(), found.end(), must.begin(), must.end()));
    const sluice::pool_stats s = p.stats();
    CHECK(s.retired == 6);
    CHECK(s.retained == 0);
    if (!stop.reached) break;
    ++stops;
  }
  MESSAGE("take against trim: R stopped at " << stops << " switch points");
}

TEST_CASE("what a cache holds from before a trim is gone when the trim returns, wherever the trim stops") {
  // The shared stack holds buffers retired before the trim. T trims, stopped at each of its switch
  // points in turn; while it stays stopped, S takes, which refills S's cache from the stack. Once
  // the trim has returned, nothing from before it may be retained, nor answered by S's next take.
  // S caches for itself (a seat), or shares its CPU's cache (every seat held elsewhere, and the
  // CPU cache behind the state word: an off-class shelving restamped it). The review of issue 23
  // found the gap this closes: a cache caught up between the trim's bump of the generation and
  // its stamp recorded the new generation with the old word, and kept its refill past the trim.
  for (const bool seated : {true, false}) {
    CAPTURE(seated);
    std::uint64_t stops = 0;
    for (std::uint64_t k = 1;; ++k) {
      CAPTURE(k);
      sluice::pool p{pool_options{.bound = seated ? 256u : 64u}};  // 64: four seats
      std::thread([&] {  // takes a seat, retires six, and at its exit leaves them on the stack
        for (std::uint64_t m = 1; m <= 6; ++m) p.retire(marked(1024, m));
        exit_thread();
      }).join();
      std::optional<seat_holders> holders;
      if (!seated) {
        holders.emplace(p, 4);
        p.retire(buffer(100));  // off-class: shelved, with a restamp of the word
      }
      bool armed = false, trimmed = false;
      std::uint64_t after = 0;
      stop_at stop{0, k, armed};
      scheduler::run(
          {[&] {
             armed = true;
             p.trim();
             trimmed = true;
           },
           [&] {
             scheduler::wait_until([&] { return stop.stopped || trimmed; });
             (void)p.take(1024);
             scheduler::wait_until([&] { return trimmed; });
             if (buffer b = p.take(1024)) after = mark_of(b);
             exit_thread();
           }},
          [&](const moment& m) { return stop.pick(m); });
      CHECK(after == 0);
      std::size_t left = 0;
      while (p.take(1024)) ++left;
      CHECK(left == 0);
      if (!stop.reached) break;
      ++stops;
    }
    MESSAGE(std::string(seated ? "seated" : "through a CPU cache") << ": T stopped at " << stops << " switch points");
  }
}

TEST_CASE("a take that pops a batch while a trim runs keeps none of it past the trim") {
  // The shared stack holds one slot of six buffers retired before the trim. T trims; S, whose
  // take sees the trim running, pops that slot for one buffer. T runs its first k1 switch points,
  // then S its first k2, then T to its end, then S: for every k2, and k1 in steps, S stops
  // anywhere in its take, before T's drain of the class, or after it, or after T's end. The rest
  // of the slot goes back only where S's pop came after the drain; else a buffer from before
  // the trim would outlive it.
  std::uint64_t runs = 0;
  bool s_done = false;
  for (std::uint64_t k2 = 1; !s_done; ++k2) {
    s_done = true;
    bool t_done = false;
    for (std::uint64_t k1 = 1; !t_done; k1 += 5) {
      CAPTURE(k1);
      CAPTURE(k2);
      sluice::pool p{pool_options{.bound = 256}};  // caches of 16: six retires stay in one
      std::thread([&] {
        for (std::uint64_t m = 1; m <= 6; ++m) p.retire(marked(1024, m));
        exit_thread();  // one slot of six on the stack
      }).join();
      bool warm = false, taken = false;
      std::uint64_t t_points = 0, s_points = 0, waited = 0;
      int phase = 0;
      scheduler::run(
          {[&] { p.trim(); },
           [&] {
             p.retire(buffer(64));  // its cache, made before the trim (a take would find the six)
             warm = true;
             (void)p.take(1024);
             taken = true;
             exit_thread();
           }},
          [&](const moment& m) -> std::size_t {
            if (m.current == 0) ++t_points;
            if (m.current == 1 && warm) ++s_points;
            const auto can = [&](std::size_t t) {
              return std::find(m.runnable.begin(), m.runnable.end(), t) != m.runnable.end();
            };
            if (phase == 0 && (warm || !can(1))) phase = 1;
            if (phase == 1 && (t_points >= k1 || !can(0))) {
              t_done = !can(0);  // T ends within its k1 points: larger k1 add nothing
              phase = 2;
            }
            if (phase == 2 && (s_points >= k2 || taken)) {
              if (!taken) s_done = false;  // S stopped inside its take: try a larger k2
              phase = 3;
            }
            // T may wait for S's flag: a budget, then both in turn
            if (phase == 3 && (!can(0) || ++waited > 3000)) phase = 4;
            if (phase == 4) return m.runnable[m.step % m.runnable.size()];
            const std::size_t want = phase == 0 || phase == 2 ? 1 : 0;
            return can(want) ? want : m.runnable.front();
          });
      ++runs;
      std::size_t left = 0;
      while (p.take(1024)) ++left;
      CHECK(left == 0);
    }
  }
  MESSAGE("batch popped against a trim: " << runs << " schedules");
}

// Lock-freedom, checked directly: G's measured calls are stopped at their k-th switch point, for
// every k (inside a mutex too), and H must finish its own calls while G stays stopped; a lock held
// by G that H needs would leave H waiting for G forever (here: past a budget). Each pool comes
// from make(cached), caching and not; both threads make a first call before (an enrolment may
// block: not measured). H does not exit under the scheduler, since an exit takes admin_mutex (it
// blocks, as documented): its thread's real exit gives its cache back after the run. Answers how
// many switch points G was stopped at.
template <class MakePool, class GCalls, class HCalls>
std::uint64_t stop_g_everywhere(MakePool make, GCalls g_calls, HCalls h_calls) {
  std::uint64_t stops = 0;
  for (const bool cached : {false, true}) {
    for (std::uint64_t k = 1;; ++k) {
      CAPTURE(cached);
      CAPTURE(k);
      sluice::pool p{make(cached)};
      bool warm_g = false, warm_h = false, measuring = false;
      stop_at stop{0, k, measuring};
      scheduler::run(
          {[&] {
             (void)p.take(1);
             warm_g = true;
             scheduler::wait_until([&] { return warm_h; });
             measuring = true;
             g_calls(p);
             measuring = false;
             exit_thread();
           },
           [&] {
             (void)p.take(1);
             warm_h = true;
             scheduler::wait_until([&] { return stop.stopped || (warm_g && !measuring && stop.points > 0); });
             h_calls(p);
           }},
          [&](const moment& m) { return stop.pick(m); });
      CHECK_FALSE(stop.stuck);
      if (!stop.reached) break;  // G's calls have fewer than k switch points: every one was tried
      ++stops;
    }
  }
  return stops;
}

TEST_CASE("take and retire complete while another thread is stopped anywhere inside them") {
  // G's calls are the pool's first retires of a class, so the slot table grows under them and
  // each cache makes its magazine: a mutex around the table's growth, or around the install of a
  // magazine (as there was, under admin_mutex, until issue 23), would keep H's calls of the same
  // class waiting.
  const auto takes_and_retires = [](sluice::pool& p) {
    for (int i = 0; i < 3; ++i) p.retire(buffer(4096));
    for (int i = 0; i < 3; ++i) p.retire(p.acquire(4096));
  };
  const std::uint64_t stops = stop_g_everywhere(
      [](bool cached) { return pool_options{.bound = 64, .thread_cache = cached}; }, takes_and_retires,
      takes_and_retires);
  MESSAGE("lock-freedom: G stopped at " << stops << " switch points, H finished every time");
}

TEST_CASE("take, retire and a pmr deallocate complete while another thread holds the pool's mutex") {
  // stats() and trim() hold admin_mutex (and trim each CPU cache in turn): H's takes and retires
  // of a class it has never used (its first magazine), and the deallocate a pool_resource makes,
  // must complete while G is stopped inside them. With bound 64, H has a seat when caching. A
  // small ceiling keeps the classes, and trim's switch points, few.
  const std::uint64_t stops = stop_g_everywhere(
      [](bool cached) { return pool_options{.bound = 64, .ceiling = 8192, .thread_cache = cached}; },
      [](sluice::pool& p) {
        (void)p.stats();
        p.trim();
      },
      [](sluice::pool& p) {
        p.retire(buffer(4096));
        p.retire(p.acquire(4096));
        (void)p.take(4096);
        sluice::detail::exact_class::deallocate(p, sluice::detail::exact_class::allocate(p, 2048), 2048);
      });
  MESSAGE("G stopped at " << stops << " switch points of stats and trim; H finished every time");
}

// G stopped at its k-th switch point once `armed` is set, while a trim (or a fork) may wait for it: T runs
// alone first (`lead` steps, more than a whole trim takes: one that has not returned by then waits
// for G), then the others in turn, T at one step in eight (it may only spin), until enough()
// holds, or a budget of their steps runs out (`stuck`: they cannot finish without G). Then G runs
// alone (`solo` steps at most, in case it needs a mutex another holds), so that it leaves its call
// and exits before the trim looks at its flag again; then all in turn.
struct stop_under_trim {
  std::size_t victim, trimmer;
  std::uint64_t k;
  const bool& armed;
  std::function<bool()> enough;
  std::uint64_t lead = 200, budget = 20000, solo = 1000;
  std::uint64_t points = 0, waited = 0, alone = 0;
  bool stopped = false, reached = false, stuck = false, trim_waited = false;

  std::size_t pick(const moment& m) {
    const auto runnable = [&](std::size_t t) { return std::find(m.runnable.begin(), m.runnable.end(), t) != m.runnable.end(); };
    if (m.current == victim && armed && !reached && ++points == k) stopped = reached = true;
    if (stopped) {
      ++waited;
      if (waited == lead + 1) trim_waited = runnable(trimmer);
      if (enough() || waited > budget) {
        stuck = !enough();
        stopped = false;
      } else if (runnable(trimmer) && (waited <= lead || waited % 8 == 0)) {
        return trimmer;
      } else {
        std::vector<std::size_t> others;
        for (const std::size_t t : m.runnable) {
          if (t != victim && t != trimmer) others.push_back(t);
        }
        if (!others.empty()) return others[m.step % others.size()];
        if (runnable(trimmer)) return trimmer;
        stopped = false;
      }
    }
    if (reached && runnable(victim) && ++alone <= solo) return victim;
    return m.runnable[m.step % m.runnable.size()];
  }
};

TEST_CASE("a call stopped anywhere inside a take or retire holds up a trim, and no other call") {
  // docs/pool.md PROGRESS: G's takes and retires move batches (flushes to the shared stack and
  // refills from it, each under G's flag); G is stopped at each of their switch points in turn.
  // T then trims, and waits for G if G's flag is up (or if G holds a CPU cache). Meanwhile H reads
  // stats() and retained() and switches the pool on, and N makes its first call and exits: they
  // must all finish while G stays stopped. (Until issue 31, trim waited holding admin_mutex, which
  // each of them takes: they waited for G.) G then leaves its call and exits at once, before T looks
  // at its flag again: T must not read the cache that G's exit gave back (AddressSanitizer).
  // Seated, G moves batches between its own cache and the stack; with the four seats held
  // elsewhere, through the CPU cache that every scheduled thread shares (they run on one CPU).
  for (const bool seated : {true, false}) {
    CAPTURE(seated);
    std::uint64_t stops = 0, held_up = 0, steps = 0;
    for (std::uint64_t k = 1;; ++k) {
      CAPTURE(k);
      sluice::pool p{pool_options{.bound = 64, .ceiling = 64}};  // caches of 4 places, batches of 2; 9 classes
      std::optional<seat_holders> holders;
      if (!seated) holders.emplace(p, 4);
      bool armed = false, g_done = false, t_began = false, h_done = false, n_done = false;
      stop_under_trim stop{0, 1, k, armed, [&] { return h_done && n_done; }};
      steps += scheduler::run(
          {[&] {
             (void)p.take(1);  // its first call (an enrolment, under admin_mutex): not measured
             armed = true;
             for (int i = 0; i < 5; ++i) p.retire(buffer(64));  // the fifth flushes two
             for (int i = 0; i < 5; ++i) (void)p.take(64);  // the fourth refills from the stack
             armed = false;
             g_done = true;
             exit_thread();
           },
           [&] {
             scheduler::wait_until([&] { return stop.stopped || g_done; });
             t_began = true;
             p.trim();
           },
           [&] {
             scheduler::wait_until([&] { return t_began; });
             (void)p.stats();
             (void)p.retained();
             p.set_enabled(true);
             (void)p.enabled();
             h_done = true;
           },
           [&] {
             scheduler::wait_until([&] { return t_began; });
             p.retire(p.acquire(48));  // its first call
             exit_thread();
             n_done = true;
           }},
          [&](const moment& m) { return stop.pick(m); });
      REQUIRE_FALSE(stop.stuck);
      if (!stop.reached) break;
      ++stops;
      held_up += stop.trim_waited;
      p.trim();
      CHECK(p.retained() == 0);
    }
    CHECK(held_up > 0);  // the case did hold a trim up
    MESSAGE(std::string(seated ? "seated" : "through a CPU cache") << ": G stopped at " << stops << " switch points, "
            << held_up << " of them holding up a trim (" << steps << " steps); stats, retained, set_enabled(true), a first call and an exit finished every time");
  }
}

TEST_CASE("a decay step stopped anywhere holds up no take or retire, and frees only what sat unused") {
  // docs/pool.md, DECAY: a thread left six marked buffers on the shared stack, and S four in its
  // cache, all kept in step 0. D takes steps 1 and 2 (the second frees them: the stack's, and the
  // CPU cache's, which the step catches up under its lock) and is stopped at each of its switch
  // points in turn; meanwhile S takes and retires (its own buffers marked too) and T trims. S must finish
  // while D stays stopped (T may wait for the step's sort of a class, as a fork would); what S
  // takes must be one of the marked buffers, never freed memory (AddressSanitizer, and the marks);
  // and the counts must add up afterwards, each buffer freed once. Seated, S caches for itself;
  // with the seats held elsewhere, through the CPU cache that the step catches up.
  using namespace std::chrono_literals;
  for (const bool seated : {true, false}) {
    CAPTURE(seated);
    std::uint64_t stops = 0;
    for (std::uint64_t k = 1;; ++k) {
      CAPTURE(k);
      sluice::pool p{pool_options{.bound = 64, .decay = 1h}};  // 64: four seats
      const auto t = std::chrono::steady_clock::now();
      std::thread([&] {
        for (std::uint64_t m = 1; m <= 6; ++m) p.retire(marked(1024, m));
        exit_thread();
      }).join();
      std::optional<seat_holders> holders;
      if (!seated) holders.emplace(p, 4);
      bool armed = false, d_done = false, s_done = false, s_ready = false;
      std::vector<std::uint64_t> strays;
      stop_under_trim stop{0, 2, k, armed, [&] { return s_done; }};
      scheduler::run(
          {[&] {
             scheduler::wait_until([&] { return s_ready; });
             armed = true;
             CHECK(p.decay(t + 31min));
             CHECK(p.decay(t + 61min));
             armed = false;
             d_done = true;
           },
           [&] {
             for (std::uint64_t m = 200; m < 204; ++m) p.retire(marked(1024, m));
             s_ready = true;
             scheduler::wait_until([&] { return stop.stopped || d_done; });
             for (std::uint64_t i = 0; i < 4; ++i) {
               if (buffer b = p.take(1024)) {
                 const std::uint64_t m = mark_of(b);
                 if (!(m >= 1 && m <= 6) && !(m >= 100 && m < 104) && !(m >= 200 && m < 204)) strays.push_back(m);
               }
               p.retire(marked(1024, 100 + i));
             }
             exit_thread();
             s_done = true;
           },
           [&] {
             scheduler::wait_until([&] { return stop.stopped || d_done; });
             p.trim();
           }},
          [&](const moment& m) { return stop.pick(m); });
      REQUIRE_FALSE(stop.stuck);
      CHECK(strays.empty());
      std::uint64_t retired = 0, out = 0;
      for (const auto& r : p.class_stats()) {
        retired += r.retired;
        out += r.hits + r.trimmed + r.decayed;
      }
      CHECK(retired - out == p.retained());
      holders.reset();  // their first takes (of 1 byte) may have refilled their caches: back at exit
      p.trim();
      CHECK(p.retained() == 0);
      if (!stop.reached) break;
      ++stops;
    }
    MESSAGE(std::string(seated ? "seated" : "through a CPU cache") << ": D stopped at " << stops << " switch points");
  }
}

TEST_CASE("a fork while a call is stopped anywhere inside a take or retire waits for none, and the child has the whole bound") {
  // docs/pool.md FORK. G's takes and retires as above, G stopped at each of their switch points in
  // turn; F then forks (a real fork: its child is a process of its own, detached from the
  // scheduler). F's prepare must return without G running again (until issue 31's last change it
  // waited for the CPU cache G held), and the child, where G's call does not exist, must trim,
  // keep the whole bound and count it exactly: G's cache (seated) or the CPU cache G held lost to
  // it, what they held allocated but uncounted.
  REQUIRE(child_detaches);
  for (const bool seated : {true, false}) {
    CAPTURE(seated);
    std::uint64_t forks = 0, steps = 0;
    for (std::uint64_t k = 1;; ++k) {
      CAPTURE(k);
      sluice::pool p{pool_options{.bound = 64, .ceiling = 64}};
      std::optional<seat_holders> holders;
      if (!seated) holders.emplace(p, 4);
      bool armed = false, g_done = false, f_done = false;
      int status = -1;
      stop_under_trim stop{0, 1, k, armed, [&] { return f_done; }};
      steps += scheduler::run(
          {[&] {
             (void)p.take(1);  // its first call (an enrolment, under admin_mutex): not measured
             armed = true;
             for (int i = 0; i < 5; ++i) p.retire(buffer(64));
             for (int i = 0; i < 5; ++i) (void)p.take(64);
             armed = false;
             g_done = true;
             exit_thread();
           },
           [&] {
             scheduler::wait_until([&] { return stop.stopped || g_done; });
             const pid_t pid = fork();
             if (pid == 0) {
               alarm(10);  // a hang ends the child by SIGALRM
               _exit(sluice_test::keeps_whole_bound(p, 64, 64) ? 0 : 1);
             }
             if (pid > 0) waitpid(pid, &status, 0);
             f_done = true;
           }},
          [&](const moment& m) { return stop.pick(m); });
      REQUIRE_FALSE(stop.stuck);
      if (!stop.reached) break;
      ++forks;
      CHECK(WIFEXITED(status));
      CHECK(WEXITSTATUS(status) == 0);
      p.trim();
      CHECK(p.retained() == 0);
    }
    CHECK(forks > 0);
    MESSAGE(std::string(seated ? "seated" : "through a CPU cache") << ": G stopped at " << forks
            << " switch points, a fork and a whole child each time (" << steps << " steps)");
  }
}

// A fork at switch points of G's retires and exit (pushes onto the stacks, a shelving, CPU
// caches' first magazines): the child must find, by take(100) alone, every buffer it can reach
// (stats().retained counts exactly those after the fork), so no class that holds one has its
// bit clear in the pool's line of classes held (docs/pool.md, FAST PATH). At every second point:
// each run replays all of G's, so the sweep is quadratic, and a misplaced mark opens windows of
// two adjacent points or more (the mark moved after the push fails it in three such windows).
TEST_CASE("a fork anywhere in a push, a shelving or a CPU cache's first magazine leaves no buffer the child's takes pass") {
  REQUIRE(child_detaches);
  const std::uint64_t stride = 2;
  for (const int mode : {0, 1, 2}) {  // seated, through a CPU cache, caches off
    CAPTURE(mode);
    const bool seated = mode != 1;
    std::uint64_t forks = 0, waited_for = 0;
    for (std::uint64_t k = 1;; k += stride) {
      CAPTURE(k);
      sluice::pool p{pool_options{.bound = 64, .thread_cache = mode != 2}};
      std::optional<seat_holders> holders;
      if (!seated) holders.emplace(p, 4);
      bool armed = false, g_done = false, f_done = false;
      int status = -1;
      stop_under_trim stop{0, 1, k, armed, [&] { return f_done; }};
      stop.budget = 1000;  // a fork held up by G's mutex spins on it; one not held up needs far fewer steps
      scheduler::run(
          {[&] {
             (void)p.take(1 << 30);  // its first call
             armed = true;
             p.retire(buffer(65536));
             p.retire(buffer(60000));  // a shelf
             for (int i = 0; i < 6; ++i) p.retire(buffer(4096));  // a full magazine flushes (publish)
             exit_thread();            // a seated cache's flush (publish)
             armed = false;
             g_done = true;
           },
           [&] {
             scheduler::wait_until([&] { return stop.stopped || g_done; });
             const pid_t pid = fork();
             if (pid == 0) {
               alarm(10);
               const std::size_t reach = p.stats().retained;
               std::size_t got = 0;
               while (p.take(100)) ++got;
               _exit(got == reach && p.stats().retained == 0 ? 0 : 10 + static_cast<int>(reach - got));
             }
             if (pid > 0) waitpid(pid, &status, 0);
             f_done = true;
           }},
          [&](const moment& m) { return stop.pick(m); });
      if (!stop.reached) break;
      ++forks;
      if (stop.stuck) ++waited_for;  // G held a mutex the fork takes: it ran on, then the fork
      CAPTURE(stop.stuck);
      CAPTURE((WIFSIGNALED(status) ? WTERMSIG(status) : 0));
      CHECK(WIFEXITED(status));
      CHECK(WEXITSTATUS(status) == 0);
    }
    CHECK(forks > 0);
    MESSAGE("mode " << mode << ": " << forks << " forks, " << waited_for << " after G let go of a mutex");
  }
}
