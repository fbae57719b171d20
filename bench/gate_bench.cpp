// The gate against its mutex twin and two anchors: the bare atomic pair it is built from (a
// fetch_add and a CAS-floored decrement on one word) and std::counting_semaphore.
//
// gate.note_pair:  note_submitted + note_done   (the bare pair's shape)
// gate.admit_pair: try_admit + note_done        (the semaphore's shape)
// gate.weighted_pair: try_admit(n) + note_done(n), n = 3 read at run time, beside the unit pair
//                  and the semaphore's (which has no weighted try)
// gate.limited_pair: lim.try_admit() + release(done) through a limiter (every admission timed,
//                  or one in 8: sample_every), beside permit{g} (what sampling costs a permit)
// gate.pingpong:   two threads, two gates of cap one, each held by the other thread: a thread
//                  admits on its gate (waiting for the other's note_done there) and gives the
//                  other's back, so every admission is a hand-off, and an iteration is two of
//                  them, one each way (std::binary_semaphore: the classic two-semaphore ping-pong)
// gate.serve:      a server's shape: every thread admits (waiting for room: admit(), or the
//                  semaphore's acquire()), works for a while with the admission held (a loop of
//                  256 or 2,560 steps, about 100 ns or 1 us of CPU here), and gives it back; the cap is
//                  4, below the larger thread counts, so that threads wait for each other's
//                  note_done. Thread counts from SLUICE_BENCH_SERVE_THREADS ("1,2,8,64" unless
//                  set); ns per admission, all threads together (the wall clock from the
//                  threads' start to the last one's end, divided by the admissions).
// pressure.poll:   one pressure_monitor::poll() (docs/pressure.md): of /proc/pressure/memory
//                  (system, skipped where the file is missing), and of a cgroup's three files
//                  (cgroup: memory.pressure, memory.current, memory.max, written to a temporary
//                  directory at the start); one thread, ns a poll.
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <semaphore>
#include <string>
#include <thread>
#include <vector>

#include "bench_main.hpp"
#include "sluice/gate.hpp"
#include "sluice/limit.hpp"
#include "sluice/pressure.hpp"

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

// gate.limited_pair: a timed permit through a limiter (Gradient2, bounds that keep the cap roomy)
// taken and released done, beside the plain permit pair: what sampling adds, the clock read at
// admission and at release and the sample applied (or skipped while another thread applies one).
template <class Gate, std::int64_t SampleEvery>
sluice::limiter<Gate>& shared_limiter() {
  static sluice::limiter<Gate> lim{shared_gate<Gate>(), sluice::gradient2_limit{{.min_limit = roomy_cap, .max_limit = roomy_cap}},
                                   {.min = roomy_cap, .max = roomy_cap, .sample_every = SampleEvery}};
  return lim;
}

template <class Gate, std::int64_t SampleEvery = 1>
void limited_pair(benchmark::State& state) {
  sluice::limiter<Gate>& lim = shared_limiter<Gate, SampleEvery>();
  for (auto _ : state) {
    auto p = lim.try_admit();
    benchmark::DoNotOptimize(p);
    p.release(sluice::outcome::done);
  }
}

template <class Gate>
void permit_pair(benchmark::State& state) {
  Gate& g = shared_gate<Gate>();
  for (auto _ : state) {
    sluice::permit<Gate> p{g};
    benchmark::DoNotOptimize(p);
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

// CPU work: a loop of a fixed length, the same for every gate, whatever the clock speed; a
// thread preempted in the middle of it is not counted as working. On the project's VM a loop
// takes 0.37 to 0.39 ns, so 256 loops are about 100 ns and 2,560 about 1 us. (A length computed
// from a timing at start-up moved by 2x between processes there.) One function, not inlined, so
// that every gate runs the very same loop: inlined, each copy had its own alignment, and the
// copies' speeds differed by up to 1.7x with one thread, where the gates' own calls differ by
// tens of nanoseconds.
[[gnu::noinline]] void work(long loops) {
  for (long i = 0; i < loops; ++i) benchmark::DoNotOptimize(i);
}

// One iteration of gate.serve: `threads` threads of its own, started together, make `admissions`
// admissions between them, each holding it for the work; its time is the wall clock's, from the
// start until the last thread is done, and the counter ns_per_admission that time per admission.
// (Google Benchmark's own threads time themselves, which with 64 threads on 2 cores read 8 ns
// per admission of 100 ns of work.)
template <class Admit, class Done>
void serve_run(benchmark::State& state, Admit admit, Done done) {
  using clock = std::chrono::steady_clock;
  const long loops = state.range(0);
  const auto threads = static_cast<int>(state.range(1));
  constexpr long admissions = 1 << 14;
  double seconds = 0;
  for (auto _ : state) {
    std::atomic<int> ready{0};
    std::atomic<bool> go{false};
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        ready.fetch_add(1);
        while (!go.load()) std::this_thread::yield();
        for (long i = t; i < admissions; i += threads) {
          admit();
          work(loops);
          done();
        }
      });
    }
    while (ready.load() != threads) std::this_thread::yield();
    const clock::time_point start = clock::now();
    go.store(true);
    for (auto& w : workers) w.join();
    const double took = std::chrono::duration<double>(clock::now() - start).count();
    state.SetIterationTime(took);
    seconds += took;
  }
  state.counters["ns_per_admission"] = seconds * 1e9 / static_cast<double>(state.iterations() * admissions);
}

template <class Gate>
void serve(benchmark::State& state) {
  static Gate g{serve_cap};
  serve_run(state, [] { g.admit(); }, [] { g.note_done(); });
}

std::counting_semaphore<serve_cap> serve_semaphore{serve_cap};

void semaphore_serve(benchmark::State& state) {
  serve_run(state, [] { serve_semaphore.acquire(); }, [] { serve_semaphore.release(); });
}

// gate.serve at each work length and SLUICE_BENCH_SERVE_THREADS thread count.
template <class Fn>
void add_serve(const std::string& variant, Fn fn) {
  auto* b = benchmark::RegisterBenchmark(("gate.serve/" + variant).c_str(), fn);
  b->ArgNames({"work_loops", "threads"});
  for (const long loops : {256, 2560}) {
    for (const int n : sluice_bench::counts_from("SLUICE_BENCH_SERVE_THREADS", "1,2,8,64")) b->Args({loops, n});
  }
  b->UseManualTime();
}

void pressure_poll_system(benchmark::State& state) {
  if (::access("/proc/pressure/memory", R_OK) != 0) {
    state.SkipWithError("no /proc/pressure/memory");
    return;
  }
  sluice::pressure_monitor m;
  for (auto _ : state) benchmark::DoNotOptimize(m.poll());
}

void pressure_poll_cgroup(benchmark::State& state) {
  std::string dir = "/tmp/sluice-bench-XXXXXX";
  if (::mkdtemp(dir.data()) == nullptr) {
    state.SkipWithError("mkdtemp failed");
    return;
  }
  std::ofstream(dir + "/memory.pressure") << "some avg10=1.00 avg60=0.50 avg300=0.10 total=123456\n"
                                             "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";
  std::ofstream(dir + "/memory.current") << "943718400\n";
  std::ofstream(dir + "/memory.max") << "1073741824\n";
  sluice::pressure_monitor m({.psi = dir + "/memory.pressure", .cgroup = dir});
  for (auto _ : state) benchmark::DoNotOptimize(m.poll());
  for (const char* name : {"/memory.pressure", "/memory.current", "/memory.max"}) ::unlink((dir + name).c_str());
  ::rmdir(dir.c_str());
}

void register_all() {
  using sluice_bench::add;
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
  add("gate.limited_pair", "gate", limited_pair<sluice::gate>);
  add("gate.limited_pair", "gate_every_8", limited_pair<sluice::gate, 8>);
  add("gate.limited_pair", "gate_permit", permit_pair<sluice::gate>);
  add("gate.limited_pair", "mutex_gate", limited_pair<sluice::mutex_gate>);
  const sluice_bench::which_counts two{.min_threads = 2, .max_threads = 2};
  add("gate.pingpong", "gate", pingpong<sluice::gate>, two);
  add("gate.pingpong", "mutex_gate", pingpong<sluice::mutex_gate>, two);
  add("gate.pingpong", "counting_semaphore", semaphore_pingpong, two);
  add_serve("gate", serve<sluice::gate>);
  add_serve("mutex_gate", serve<sluice::mutex_gate>);
  add_serve("counting_semaphore", semaphore_serve);
  const sluice_bench::which_counts one{.min_threads = 1, .max_threads = 1};
  add("pressure.poll", "system", pressure_poll_system, one);
  add("pressure.poll", "cgroup", pressure_poll_cgroup, one);
}

}  // namespace

SLUICE_BENCH_MAIN(register_all)
