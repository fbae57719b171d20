// Recording short histories from real concurrent runs, and checking each as it is made.
//
// A history: 3 or 4 worker threads released together by a start barrier, each making 4 to 8
// calls from a plan drawn beforehand (so that the threads do nothing between calls but record),
// then one observer thread (the main thread, after every worker has finished) reading what is
// left. The observer's calls are part of the history, so that effects no worker read are checked
// too. The workers are new threads where their exit matters (a pool's thread caches), and
// otherwise threads kept for the whole series (thread_source).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#if defined(__linux__)
#include <pthread.h>
#include <sched.h>
#endif

#include "../kinds.hpp"
#include "exact_class.hpp"
#include "gate_model.hpp"
#include "lincheck.hpp"
#include "pool_model.hpp"
#include "sluice/buffer.hpp"
#include "sluice/pool.hpp"

namespace lincheck {

// How many histories a case runs: its plain-build count, halved under the sanitizers (they slow
// thread start-up and every atomic step several times over, and the suite must stay well under a
// minute under ThreadSanitizer on two cores), times SLUICE_LINCHECK_SCALE when set (for longer
// runs).
inline std::size_t histories(std::size_t plain) {
  std::size_t n = sluice_test::sanitized ? plain / 2 : plain;
  if (const char* scale = std::getenv("SLUICE_LINCHECK_SCALE")) {
    n = static_cast<std::size_t>(static_cast<double>(n) * std::atof(scale));
  }
  return n < 1 ? 1 : n;
}

// SLUICE_LINCHECK_KEEP_GOING set (to anything but 0): a series of pool histories runs to its end
// past rejected ones and counts them (tally::rejections), to measure how often a defect shows,
// and keeps every rejected history's report (the strict rules' too). Unset, a series stops at the
// first.
inline bool keep_going() {
  const char* v = std::getenv("SLUICE_LINCHECK_KEEP_GOING");
  return v != nullptr && *v != '\0' && *v != '0';
}

// The start barrier for the workers of a history. run_threads (../threads.hpp) waits with yield,
// which on a loaded two-core machine hands the processor to other processes for milliseconds at
// a time and lets its threads go microseconds apart, longer than a whole history's calls take,
// so they seldom overlap. Here the threads first sleep until all of them exist (creating them
// takes longer than any spin should), then meet again spinning with the processor's pause hint,
// so that those running when the last one arrives leave together; a thread that spins too long
// sleeps, so that threads still waiting for a processor get one. The counters are 32 bits wide:
// libstdc++ waits on those with a futex on their own address, and on wider ones through a table
// shared by every atomic, where a notify wakes the waiters of other atomics too.
class start_line {
 public:
  explicit start_line(std::size_t n) : n_(static_cast<std::uint32_t>(n)) {}

  void arrive_and_wait() noexcept {
    meet(created_, false);
    meet(ready_, true);
  }

 private:
  void meet(std::atomic<std::uint32_t>& count, bool spin) noexcept {
    if (count.fetch_add(1) + 1 == n_) {
      count.notify_all();
      return;
    }
    if (spin) {
      // A few hundred microseconds: longer than waking the threads takes, so that the last two
      // usually meet spinning; measured here, shorter spins lose most overlaps, longer ones
      // add time and no more.
      const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(400);
      for (unsigned spins = 1;; ++spins) {
        if (count.load() == n_) return;
        relax();
        if (spins % 256 == 0 && std::chrono::steady_clock::now() > until) break;
      }
    }
    for (std::uint32_t seen = count.load(); seen < n_; seen = count.load()) count.wait(seen);
  }

  static void relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
  }

  std::uint32_t n_;
  std::atomic<std::uint32_t> created_{0}, ready_{0};
};

// Puts worker i on the i-th processor this process may use (round robin), on Linux when there are
// two or more. Left to the scheduler, workers queue behind one another on one processor while
// the other runs something else, and then hardly ever run at once: on the two-core machine this
// was written on, beside another busy process, 1% of histories had overlapping calls unpinned
// and over 90% pinned.
inline void spread(std::size_t i) noexcept {
#if defined(__linux__)
  static const std::vector<int> cpus = [] {
    std::vector<int> out;
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
      for (int c = 0; c < CPU_SETSIZE; ++c) {
        if (CPU_ISSET(c, &set)) out.push_back(c);
      }
    }
    return out;
  }();
  if (cpus.size() < 2) return;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpus[i % cpus.size()], &one);
  (void)pthread_setaffinity_np(pthread_self(), sizeof one, &one);  // a refusal only costs overlap
#else
  (void)i;
#endif
}

// Runs body(i) for i in [0, n) on n new threads, spread over the processors, that start
// together, and joins them.
template <class Body>
void run_together(std::size_t n, Body body) {
  start_line start(n);
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      spread(i);
      start.arrive_and_wait();
      body(i);
    });
  }
  for (auto& t : threads) t.join();
}

// n threads, spread over the processors, kept for a series of histories: run(body) releases
// them together (a fresh start_line each time, as run_together's) to run body(i), and returns
// once every one has finished. A new thread costs qemu-user 1.5 to 2.3 ms of CPU and about
// 280 KB it never gives back, and a series starts thousands.
class crew {
 public:
  explicit crew(std::size_t n) : n_(static_cast<std::uint32_t>(n)) {
    threads_.reserve(n);
    for (std::size_t i = 0; i < n; ++i) threads_.emplace_back([this, i] { work(i); });
  }
  ~crew() {
    stop_ = true;
    release();
    for (auto& t : threads_) t.join();
  }
  crew(const crew&) = delete;
  crew& operator=(const crew&) = delete;

  void run(const std::function<void(std::size_t)>& body) {
    start_line start(n_);
    body_ = &body;
    start_ = &start;
    done_.store(0, std::memory_order_relaxed);  // the workers read it only after release()
    release();
    // Acquire: pairs with each worker's release below, so that what the bodies wrote (their
    // histories) is visible here.
    for (std::uint32_t seen = done_.load(std::memory_order_acquire); seen < n_;
         seen = done_.load(std::memory_order_acquire)) {
      done_.wait(seen, std::memory_order_acquire);
    }
  }

 private:
  // Release: publishes body_, start_, done_'s reset and stop_ to the workers' acquire of round_.
  void release() {
    round_.fetch_add(1, std::memory_order_release);
    round_.notify_all();
  }

  void work(std::size_t i) {
    spread(i);
    for (std::uint32_t seen = 0;;) {
      round_.wait(seen, std::memory_order_acquire);
      seen = round_.load(std::memory_order_acquire);
      if (stop_) return;
      start_->arrive_and_wait();
      (*body_)(i);
      // Release: pairs with run()'s acquire; the last one wakes it.
      if (done_.fetch_add(1, std::memory_order_release) + 1 == n_) done_.notify_one();
    }
  }

  std::uint32_t n_;  // 32-bit counters, as start_line's
  const std::function<void(std::size_t)>* body_ = nullptr;
  start_line* start_ = nullptr;
  bool stop_ = false;
  std::atomic<std::uint32_t> round_{0};  // wraps; a worker waits only for it to differ
  std::atomic<std::uint32_t> done_{0};
  std::vector<std::thread> threads_;
};

// Where a series' histories get their threads: fresh ones for each history (run_together), or
// crews kept for the series, one for each number of threads asked for. A pool with thread caches
// needs fresh ones: a thread's exit gives its caches back, and the observer's takes count on it
// (pool_model.hpp, CACHES). For everything else a crew's threads make the same calls; what
// changes is that a crew's thread gives up its record of a pool after the pool is gone (at its
// next enrolment), where a new thread's exit gave it back to the live pool before the observer's
// calls, a path the thread-cache series still take.
class thread_source {
 public:
  explicit thread_source(bool fresh) : fresh_(fresh) {}

  template <class Body>
  void run(std::size_t n, Body body) {
    if (fresh_) return run_together(n, body);
    if (crews_.size() <= n) crews_.resize(n + 1);
    if (!crews_[n]) crews_[n] = std::make_unique<crew>(n);
    crews_[n]->run(body);
  }

 private:
  bool fresh_;
  std::vector<std::unique_ptr<crew>> crews_;
};

// How many calls of different workers overlap in h, pairwise (the observer's never do).
template <class Call>
std::size_t overlapping_pairs(const history<Call>& h, std::uint32_t observer) {
  std::size_t pairs = 0;
  for (std::size_t i = 0; i < h.size(); ++i) {
    for (std::size_t j = i + 1; j < h.size(); ++j) {
      const timing &a = h.when[i], &b = h.when[j];
      if (a.thread != b.thread && a.thread != observer && b.thread != observer && a.invoked < b.returned &&
          b.invoked < a.returned) {
        ++pairs;
      }
    }
  }
  return pairs;
}

// What a series of histories came to.
struct tally {
  std::size_t histories = 0;
  std::size_t calls = 0;
  std::size_t overlapped = 0;         // histories in which calls of different workers overlapped
  std::size_t overlaps = 0;           // such pairs of calls, summed
  std::size_t configurations = 0;     // explored by the checker, summed
  std::string failure;                // the first rejected history's report (all, with keep_going())
  std::size_t rejections = 0;         // histories rejected (more than 1 only with keep_going())
  std::size_t strictly_rejected = 0;  // histories the stricter rules (if any) rejected
  std::string strict_failure;         // the first of them (all, with keep_going())

  bool rejected() const noexcept { return !failure.empty(); }
  std::string summary() const {
    return std::to_string(histories) + " histories, " + std::to_string(calls) + " calls; " +
           std::to_string(overlapped) + " histories with overlapping calls on different threads (" +
           std::to_string(overlaps) + " overlapping pairs); " + std::to_string(configurations) +
           " configurations explored" +
           (rejections > 0 ? "; " + std::to_string(rejections) + " rejected" : std::string());
  }
};

// Appends history h's check to t; false when it was rejected.
template <class Call>
bool count_in(tally& t, const history<Call>& h, std::uint32_t observer, const model& m) {
  const verdict v = check(h.when, m);
  ++t.histories;
  t.calls += h.size();
  const std::size_t pairs = overlapping_pairs(h, observer);
  t.overlapped += pairs > 0;
  t.overlaps += pairs;
  t.configurations += v.configurations;
  if (!v.linearizable && (t.rejections++ == 0 || keep_going())) t.failure += v.report;
  return v.linearizable;
}

// ---- the gate -------------------------------------------------------------------------------

// Draws one call of a plan.
using gate_mix = std::function<gate_call(std::mt19937_64&)>;

// Every call, with arguments around small caps so that both answers of try_admit and
// has_capacity come up, set_cap and adjust meet their clamps, weights theirs, and now and then a
// close races the rest.
inline gate_call any_gate_call(std::mt19937_64& rng) {
  static constexpr gate_op ops[] = {
      gate_op::try_admit, gate_op::try_admit, gate_op::admit_for, gate_op::admit_for, gate_op::note_done, gate_op::note_done,
      gate_op::note_done, gate_op::note_submitted, gate_op::note_submitted, gate_op::has_capacity,
      gate_op::has_capacity, gate_op::in_flight, gate_op::in_flight, gate_op::cap, gate_op::cap,
      gate_op::set_cap, gate_op::adjust, gate_op::adjust, gate_op::adjust, gate_op::closed};
  static constexpr std::int64_t caps[] = {-1, 0, 1, 2, 3, 4};
  static constexpr std::int64_t maxima[] = {0, 1, 2, 3, 5};
  // Mostly the unit forms; weights around the caps, zero and one that no cap admits.
  static constexpr std::int64_t weights[] = {1, 1, 1, 1, 1, 2, 2, 3, 0, sluice::gate_limit + 1};
  gate_call c;
  c.op = ops[rng() % std::size(ops)];
  if (rng() % 48 == 0) c.op = gate_op::close;  // rare: about one history in three closes its gate
  if (c.op == gate_op::note_submitted || c.op == gate_op::note_done || c.op == gate_op::try_admit) {
    c.units = weights[rng() % std::size(weights)];
  }
  if (c.op == gate_op::admit_for) c.units = weights[rng() % (std::size(weights) - 1)];  // a waiting form throws past gate_limit
  if (c.op == gate_op::set_cap) c.arg = caps[rng() % std::size(caps)];
  if (c.op == gate_op::adjust) {
    c.p = static_cast<sluice::pressure>(rng() % 3);
    c.arg = maxima[rng() % std::size(maxima)];
  }
  return c;
}

// Runs `count` histories on fresh gates of type G (initial caps 1 to 3), checking each; stops at
// the first rejected one.
template <class G>
tally check_gate_histories(std::size_t count, std::uint64_t seed, const gate_mix& mix = any_gate_call) {
  tally t;
  thread_source workers(/*fresh=*/false);
  for (std::size_t n = 0; n < count && !t.rejected(); ++n) {
    std::mt19937_64 rng(seed * 0x9E37'79B9 + n);
    const std::size_t threads = 3 + n % 2;
    const std::int64_t cap = 1 + static_cast<std::int64_t>(rng() % 3);
    std::vector<std::vector<gate_call>> plans(threads);
    for (auto& plan : plans) {
      plan.resize(4 + rng() % 5);
      for (auto& c : plan) c = mix(rng);
    }
    G g{cap};
    clock clk;
    std::vector<recorder<gate_call>> logs;
    for (std::size_t i = 0; i <= threads; ++i) logs.emplace_back(clk, static_cast<std::uint32_t>(i));
    workers.run(threads, [&](std::size_t i) {
      for (const gate_call& c : plans[i]) logs[i].run(c, [&](gate_call& k) { perform(g, k); });
    });
    auto& observer = logs[threads];
    observer.run({.op = gate_op::cap}, [&](gate_call& k) { perform(g, k); });
    observer.run({.op = gate_op::in_flight}, [&](gate_call& k) { perform(g, k); });
    history<gate_call> h;
    for (const auto& l : logs) h.append(l.log());
    count_in(t, h, static_cast<std::uint32_t>(threads), gate_model(cap, h.what));
  }
  return t;
}

// ---- the pool -------------------------------------------------------------------------------

inline constexpr std::size_t pool_ceiling = 4096;
// On-class (2048, 4096) and off-class (1000, 3000) capacities, and one above the ceiling.
inline constexpr std::size_t retire_capacities[] = {1000, 2048, 3000, 4096, 8192};
// Requests: below everything, exactly an off-class capacity, just above it (so 1000 no longer
// serves though it sits in 1024's class), between classes, exactly on-class, above the ceiling.
inline constexpr std::size_t take_sizes[] = {16, 1000, 1024, 2048, 2500, 4096, 5000};

struct pool_step {
  pool_op op = pool_op::take;
  std::size_t size = 0;  // take: the request; retire: a fresh buffer's capacity
  bool fresh = true;     // retire: a new buffer, or one this thread took earlier (if it holds one)
  bool exact = false;    // take: from size's own class only (sluice::detail::exact_class)
};

// pool_resource's take, from size's own class only: sluice::detail::exact_class's (a friend of
// sluice's pools, in lib/, not installed), or a toy pool's own (broken.hpp).
template <class Pool>
sluice::buffer take_exact(Pool& p, std::size_t size) {
  if constexpr (requires { p.take_exact(size); }) {
    return p.take_exact(size);
  } else {
    return sluice::detail::exact_class::take(p, size);
  }
}

using pool_mix = std::function<pool_step(std::mt19937_64&)>;

inline pool_step any_pool_step(std::mt19937_64& rng) {
  pool_step s;
  const auto r = rng() % 20;
  s.op = r < 8 ? pool_op::take : r < 17 ? pool_op::retire : pool_op::retained;
  s.size = s.op == pool_op::take ? take_sizes[rng() % std::size(take_sizes)]
                                 : retire_capacities[rng() % std::size(retire_capacities)];
  s.fresh = rng() % 2 == 0;
  return s;
}

// any_pool_step's calls, half of its takes exact: pool_resource's allocate, which takes only
// from the request's own class, beside the pool's own take.
inline pool_step exact_pool_step(std::mt19937_64& rng) {
  pool_step s = any_pool_step(rng);
  s.exact = s.op == pool_op::take && rng() % 2 == 0;
  return s;
}

// any_pool_step's calls with trims among them, 1 call in 8, and statistics, 1 in 16.
inline pool_step trimming_pool_step(std::mt19937_64& rng) {
  const auto r = rng() % 16;
  if (r < 2) return {.op = pool_op::trim};
  if (r < 3) return {.op = pool_op::stats};
  return any_pool_step(rng);
}

// A pool for one history, made from its options (bound, ceiling, thread_cache).
template <class P>
using pool_maker = std::function<std::unique_ptr<P>(const sluice::pool_options&)>;

// One recorded pool history, with the rules and initial state it is to be checked under.
struct pool_history {
  history<pool_call> h;
  pool_rules rules;
  state initial;
  std::string setup_failure;  // the pool did not hold what was retired before the history
};

// Records one history on a fresh pool with bound 2 to 4 (64 to 66 with thread caches, which
// pools with a bound below 64 do not use) and up to 3 buffers retired beforehand by another
// thread (a new one that then exited, its cache given back, where the pool has thread caches;
// its retires counted in the initial state).
// `rules` gets the bound, ceiling and observer filled in. P needs take, retire, retained, trim
// and stats.
template <class P>
pool_history record_pool_history(std::mt19937_64& rng, std::uint32_t threads, pool_rules rules,
                                 bool thread_cache, const pool_maker<P>& make, const pool_mix& mix,
                                 thread_source& workers) {
  pool_history out;
  rules.bound = (thread_cache ? 64 : 2) + rng() % 3;
  rules.ceiling = pool_ceiling;
  rules.observer = threads;
  out.rules = rules;
  std::vector<std::pair<std::size_t, std::uint32_t>> prefill(rng() % std::min<std::size_t>(rules.bound, 4));
  for (std::size_t i = 0; i < prefill.size(); ++i) {
    prefill[i] = {retire_capacities[rng() % 4], static_cast<std::uint32_t>(1 + i)};  // within the ceiling
    out.initial = pool_model::with_buffer(out.initial, prefill[i].first, prefill[i].second);
  }
  out.initial = pool_model::with_counts(out.initial, 0, 0, static_cast<std::int64_t>(prefill.size()), 0);
  std::vector<std::vector<pool_step>> plans(threads);
  for (auto& plan : plans) {
    plan.resize(4 + rng() % 5);
    for (auto& s : plan) s = mix(rng);
  }

  const std::unique_ptr<P> p =
      make({.bound = rules.bound, .ceiling = rules.ceiling, .thread_cache = thread_cache});
  workers.run(1, [&](std::size_t) {
    for (const auto& [capacity, id] : prefill) {
      sluice::buffer b(capacity);
      put_mark(b, id);
      p->retire(std::move(b));
    }
  });
  if (const std::size_t r = p->retained(); r != prefill.size()) {
    out.setup_failure = "the pool retained " + std::to_string(r) + " of " + std::to_string(prefill.size()) +
                        " buffers retired before the history";
    return out;
  }

  clock clk;
  std::vector<recorder<pool_call>> logs;
  for (std::uint32_t i = 0; i <= threads; ++i) logs.emplace_back(clk, i);
  workers.run(threads, [&](std::size_t i) {
    std::vector<sluice::buffer> taken;
    taken.reserve(plans[i].size());
    auto next_id = static_cast<std::uint32_t>(4 + 8 * i);  // marks 4 to 35; 1 to 3 are the prefill's
    for (const pool_step& s : plans[i]) {
      pool_call c{.op = s.op, .size = s.size, .exact = s.exact};
      switch (s.op) {
        case pool_op::take:
          logs[i].run(c, [&](pool_call& k) {
            if (sluice::buffer b = k.exact ? take_exact(*p, k.size) : p->take(k.size)) {
              k.answer = b.capacity();
              k.answer_id = read_mark(b);
              taken.push_back(std::move(b));
            }
          });
          break;
        case pool_op::retire: {
          sluice::buffer b;
          if (!s.fresh && !taken.empty()) {
            b = std::move(taken.back());
            taken.pop_back();
          } else {
            b = sluice::buffer(s.size);
            put_mark(b, next_id++);
          }
          c.size = b.capacity();
          c.id = read_mark(b);
          logs[i].run(c, [&](pool_call&) { p->retire(std::move(b)); });
          break;
        }
        case pool_op::retained:
          logs[i].run(c, [&](pool_call& k) { k.answer = p->retained(); });
          break;
        case pool_op::trim:
          logs[i].run(c, [&](pool_call&) { p->trim(); });
          break;
        case pool_op::stats:
          logs[i].run(c, [&](pool_call& k) { k.stats = p->stats(); });
          break;
      }
    }
  });

  // The observer: the count and the statistics, then everything that is left, smallest first
  // (as many takes as fit in a history with the statistics after them), then the statistics
  // again.
  std::size_t worker_calls = 0;
  for (std::uint32_t i = 0; i < threads; ++i) worker_calls += logs[i].log().size();
  auto& observer = logs[threads];
  observer.run({.op = pool_op::retained}, [&](pool_call& k) { k.answer = p->retained(); });
  observer.run({.op = pool_op::stats}, [&](pool_call& k) { k.stats = p->stats(); });
  for (std::size_t i = 0; i <= rules.bound + 1 && worker_calls + observer.log().size() + 1 < max_calls; ++i) {
    bool hit = false;
    observer.run({.op = pool_op::take, .size = 16}, [&](pool_call& k) {
      if (const sluice::buffer b = p->take(k.size)) {
        k.answer = b.capacity();
        k.answer_id = read_mark(b);
        hit = true;
      }
    });
    if (!hit) break;
  }
  observer.run({.op = pool_op::stats}, [&](pool_call& k) { k.stats = p->stats(); });

  for (const auto& l : logs) out.h.append(l.log());
  annotate(out.h, threads);
  return out;
}

// Runs `count` histories (3 and 4 workers in turn) and checks each under `rules`; stops at the
// first rejected one (unless keep_going()). When `strict` is given, each history is checked
// under it too, and only counted: how often the relaxations in `rules` were needed. A strict
// rule set's bound, ceiling and observer are the history's.
template <class P>
tally check_pool_histories(std::size_t count, std::uint64_t seed, pool_rules rules, bool thread_cache,
                           const pool_maker<P>& make, const pool_mix& mix = any_pool_step,
                           std::optional<pool_rules> strict = std::nullopt) {
  tally t;
  const bool all = keep_going();
  thread_source workers(/*fresh=*/thread_cache);
  for (std::size_t n = 0; n < count && (all || !t.rejected()); ++n) {
    std::mt19937_64 rng(seed * 0x9E37'79B9 + n);
    const auto threads = static_cast<std::uint32_t>(3 + n % 2);
    const auto r = record_pool_history<P>(rng, threads, rules, thread_cache, make, mix, workers);
    if (!r.setup_failure.empty()) {
      t.failure = r.setup_failure;
      break;
    }
    count_in(t, r.h, r.rules.observer, pool_model(r.rules, r.h.when, r.h.what, r.initial));
    if (strict) {
      pool_rules tight = *strict;
      tight.bound = r.rules.bound;
      tight.ceiling = r.rules.ceiling;
      tight.observer = r.rules.observer;
      const verdict v = check(r.h.when, pool_model(tight, r.h.when, r.h.what, r.initial));
      if (!v.linearizable && (t.strictly_rejected++ == 0 || all)) t.strict_failure += v.report;
    }
  }
  return t;
}

}  // namespace lincheck
