// The gate against its mutex twin and two anchors: the bare atomic pair it is built from (a
// fetch_add and a CAS-floored decrement on one word) and std::counting_semaphore.
//
// gate.note_pair:  note_submitted + note_done   (the bare pair's shape)
// gate.admit_pair: try_admit + note_done        (the semaphore's shape)
// gate.weighted_pair: try_admit(n) + note_done(n), n = 3 read at run time, beside the unit pair
//                  and the semaphore's (which has no weighted try)
// gate.pingpong:   two threads, two gates of cap one, each held by the other thread: a thread
//                  admits on its gate (waiting for the other's note_done there) and gives the
//                  other's back, so every admission is a hand-off, and an iteration is two of
//                  them, one each way (std::binary_semaphore: the classic two-semaphore ping-pong)
// gate.serve:      a server's shape: every thread admits (waiting for room: admit(), or the
//                  semaphore's acquire()), works for a while with the admission held (a spin
//                  of about 100 ns or 1 us of CPU, the argument), and gives it back; the cap is
//                  4, below the larger thread counts, so that threads wait for each other's
//                  note_done. Thread counts from SLUICE_BENCH_SERVE_THREADS ("1,2,8,64" unless
//                  set); ns per admission, all threads together.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <semaphore>
#include <string>

#include "bench_main.hpp"
#include "sluice/gate.hpp"

namespace {

constexpr std::int64_t roomy_cap = 1 << 20;  // never the limit: the benchmark times the word

template <class Gate>
Gate& shared_gate() {
  static Gate g{roomy_cap};
  return g;
}

template <class Gate>
void note_pair(benchmark::State& state) {
  Gate& g = shared_gate<Gate>();
  for (auto _ : state) {
    g.note_submitted();
    g.note_done();
  }
}

template <class Gate>
void admit_pair(benchmark::State& state) {
  Gate& g = shared_gate<Gate>();
  for (auto _ : state) {
    const bool got = g.try_admit();
    benchmark::DoNotOptimize(got);
    if (got) g.note_done();  // a note_done after a refusal would end someone else's admission
  }
}

template <class Gate>
void weighted_pair(benchmark::State& state) {
  Gate& g = shared_gate<Gate>();
  std::int64_t n = 3;
  benchmark::DoNotOptimize(n);  // a weight the compiler cannot fold
  for (auto _ : state) {
    const bool got = g.try_admit(n);
    benchmark::DoNotOptimize(got);
    if (got) g.note_done(n);
  }
}

// The anchor: what the gate's note pair would cost written by hand on a bare counter.
std::atomic<std::int64_t> bare_count{0};

void bare_atomic_pair(benchmark::State& state) {
  for (auto _ : state) {
    bare_count.fetch_add(1, std::memory_order_relaxed);
    std::int64_t n = bare_count.load(std::memory_order_relaxed);
    while (n > 0 && !bare_count.compare_exchange_weak(n, n - 1, std::memory_order_release,
                                                      std::memory_order_relaxed)) {
    }
  }
}

std::counting_semaphore<roomy_cap> semaphore{roomy_cap};

void semaphore_pair(benchmark::State& state) {
  for (auto _ : state) {
    const bool got = semaphore.try_acquire();
    benchmark::DoNotOptimize(got);
    if (got) semaphore.release();  // as the gate's pair gives back only what it was given
  }
}

template <class Gate>
void pingpong(benchmark::State& state) {
  static Gate gates[2]{Gate{1}, Gate{1}};
  if (state.thread_index() == 0) {  // both places held: each thread waits for the other's
    (void)gates[0].try_admit();
    (void)gates[1].try_admit();
  }
  Gate& mine = gates[state.thread_index()];
  Gate& theirs = gates[1 - state.thread_index()];
  if (state.thread_index() == 0) theirs.note_done();  // serve first
  for (auto _ : state) {
    mine.admit();
    theirs.note_done();
  }
  if (state.thread_index() == 0) mine.note_done();  // whatever is left, for the next run
}

std::binary_semaphore pings[2]{std::binary_semaphore{0}, std::binary_semaphore{0}};

void semaphore_pingpong(benchmark::State& state) {
  std::binary_semaphore& mine = pings[state.thread_index()];
  std::binary_semaphore& theirs = pings[1 - state.thread_index()];
  if (state.thread_index() == 0) theirs.release();
  for (auto _ : state) {
    mine.acquire();
    theirs.release();
  }
  // Thread 0's last release is one more than thread 1 took: take it, or the next run's serve
  // would raise a binary semaphore to 2 (past max(), undefined) and let the threads run ahead.
  if (state.thread_index() == 1) mine.acquire();
}

constexpr std::int64_t serve_cap = 4;

// CPU work of about `ns` nanoseconds: a loop of a fixed length, so that every gate does the same
// work and a thread preempted in the middle of it is not counted as working. The loop's speed is
// measured once, the fastest of five tries (a try that the scheduler interrupts only reads
// slower), before any thread starts.
double loops_per_ns() {
  static const double speed = [] {
    using clock = std::chrono::steady_clock;
    constexpr long loops = 4'000'000;
    double best = 0;
    for (int t = 0; t < 5; ++t) {
      const auto start = clock::now();
      for (long i = 0; i < loops; ++i) benchmark::DoNotOptimize(i);
      best = std::max(best, loops / std::chrono::duration<double, std::nano>(clock::now() - start).count());
    }
    return best;
  }();
  return speed;
}

void work_for(long ns) {
  const long loops = static_cast<long>(static_cast<double>(ns) * loops_per_ns());
  for (long i = 0; i < loops; ++i) benchmark::DoNotOptimize(i);
}

template <class Gate>
void serve(benchmark::State& state) {
  static Gate g{serve_cap};
  const long ns = state.range(0);
  for (auto _ : state) {
    g.admit();
    work_for(ns);
    g.note_done();
  }
}

std::counting_semaphore<serve_cap> serve_semaphore{serve_cap};

void semaphore_serve(benchmark::State& state) {
  const long ns = state.range(0);
  for (auto _ : state) {
    serve_semaphore.acquire();
    work_for(ns);
    serve_semaphore.release();
  }
}

// gate.serve at each work length and SLUICE_BENCH_SERVE_THREADS thread count.
template <class Fn>
void add_serve(const std::string& variant, Fn fn) {
  auto* b = benchmark::RegisterBenchmark(("gate.serve/" + variant).c_str(), fn);
  b->ArgName("work_ns")->Arg(100)->Arg(1000);
  for (const int n : sluice_bench::counts_from("SLUICE_BENCH_SERVE_THREADS", "1,2,8,64")) b->Threads(n);
  b->UseRealTime();
}

void register_all() {
  using sluice_bench::add;
  loops_per_ns();  // measured while no benchmark runs
  add("gate.note_pair", "gate", note_pair<sluice::gate>);
  add("gate.note_pair", "mutex_gate", note_pair<sluice::mutex_gate>);
  add("gate.note_pair", "bare_atomic", bare_atomic_pair);
  add("gate.admit_pair", "gate", admit_pair<sluice::gate>);
  add("gate.admit_pair", "mutex_gate", admit_pair<sluice::mutex_gate>);
  add("gate.admit_pair", "counting_semaphore", semaphore_pair);
  add("gate.weighted_pair", "gate", weighted_pair<sluice::gate>);
  add("gate.weighted_pair", "mutex_gate", weighted_pair<sluice::mutex_gate>);
  add("gate.weighted_pair", "gate_unit", admit_pair<sluice::gate>);
  add("gate.weighted_pair", "counting_semaphore", semaphore_pair);
  const sluice_bench::which_counts two{.min_threads = 2, .max_threads = 2};
  add("gate.pingpong", "gate", pingpong<sluice::gate>, two);
  add("gate.pingpong", "mutex_gate", pingpong<sluice::mutex_gate>, two);
  add("gate.pingpong", "counting_semaphore", semaphore_pingpong, two);
  add_serve("gate", serve<sluice::gate>);
  add_serve("mutex_gate", serve<sluice::mutex_gate>);
  add_serve("counting_semaphore", semaphore_serve);
}

}  // namespace

SLUICE_BENCH_MAIN(register_all)
