// What async waiters cost at scale (<sluice/asio.hpp>, docs/asio.md, Where async waiters live):
// how a gate's wake-up, cancellation, queueing and grant grow with its own waiters, and whether
// they grow with another gate's waiters on the same parking spot. Each benchmark sets its scene
// up outside the timing (Asio waits that never run: an io_context left idle) and times the one
// call in question, in manual time.
//
//   waiters.wake_beside/M        note_done() on gate d waking a thread parked in d.admit(), while
//                                another gate on d's spot has M async waits queued
//   waiters.wake_beside_threads/T
//                                the same, while T threads sleep in admit() on another gate of
//                                d's spot; timed until the woken thread is admitted, as a
//                                wake-up that woke T more threads than it admits costs there
//   waiters.cancel_beside/M      cancelling gate c's only wait, with M waits of another gate on
//                                c's spot
//   waiters.many_gates/G/W       G gates, W waits each: queueing them all, then admitting them all
//                                (set_cap on each gate, which grants and posts), one iteration
//   waiters.one_gate/W           the same for W waits on one gate
// The last two report queue_ms and admit_ms as counters (the time is their sum).
//   waiters.close_async/G/W      close() on a full gate (G: gate or mutex_gate) with W async waits
//                                queued: from the close until the last handler has run (the
//                                io_context run on this thread, one handler each)
//   waiters.close_threads/G/T    close() with T threads waiting in admit(): from the close until
//                                the last of them has caught gate_closed
#include <algorithm>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "../lib/parking.hpp"
#include "../test/threads.hpp"
#include "bench_main.hpp"
#include "sluice/asio.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

// Times one call per iteration: the mean as the benchmark's time, the median as a counter.
class samples {
 public:
  explicit samples(benchmark::State& state) : state_(state) {}
  ~samples() {
    if (us_.empty()) return;
    std::sort(us_.begin(), us_.end());
    state_.counters["median_us"] = us_[us_.size() / 2];
  }
  template <class Call>
  void time(Call call) {
    const auto start = clock_type::now();
    call();
    const std::chrono::duration<double> took = clock_type::now() - start;
    state_.SetIterationTime(took.count());
    us_.push_back(took.count() * 1e6);
  }

 private:
  benchmark::State& state_;
  std::vector<double> us_;
};

// A full gate a (cap 1, its unit held) and a gate d that shares its parking spot (there are 64),
// kept alive in `keep`: where the other gate's waiters go, and the gate the benchmark times.
struct beside {
  sluice::gate a{1};
  std::vector<std::unique_ptr<sluice::gate>> keep;
  sluice::gate& d;
  beside() : d(neighbour()) { (void)a.try_admit(); }

 private:
  sluice::gate& neighbour() {
    do {
      keep.push_back(std::make_unique<sluice::gate>(1));
    } while (&sluice::detail::parking_for(keep.back().get()) != &sluice::detail::parking_for(&a));
    return *keep.back();
  }
};

// M waits on a full gate `a`, queued on an io_context that is never run.
void queue_waits(sluice::gate& a, asio::io_context& io, long m) {
  for (long i = 0; i < m; ++i) {
    sluice::async_admit(a, asio::bind_executor(io, [](std::error_code, sluice::permit<sluice::gate>) {}));
  }
}

// The round of wake_beside and wake_beside_threads on gate d, whose one unit this thread holds:
// a sleeper parks in d.admit(), and `timed` times this thread's note_done, or until the sleeper
// is admitted.
void wake_rounds(benchmark::State& state, sluice::gate& d, bool until_admitted) {
  (void)d.try_admit();  // held here between rounds
  // The sleeper's round: told to go, it parks in admit() (this thread waits until the kernel
  // reports it asleep); once admitted it counts the round and, told to, gives its admission
  // back, which this thread takes again.
  std::atomic<int> go{0}, rounds{0}, back{0};
  std::atomic<long> tid{0};
  std::thread sleeper([&] {
    tid.store(sluice_test::this_tid());
    for (int round = 1;; ++round) {
      int told = go.load();
      while (told >= 0 && told < round) told = (std::this_thread::yield(), go.load());
      if (told < 0) return;  // the benchmark ended
      d.admit();
      rounds.store(round);
      while (back.load() < round) std::this_thread::yield();
      d.note_done();
    }
  });
  {
    samples timed(state);
    int round = 0;
    for (auto _ : state) {
      go.store(++round);
      while (tid.load() == 0 || !sluice_test::asleep(tid.load())) std::this_thread::yield();  // parked in admit(): a note_done must wake it
      timed.time([&] {
        d.note_done();
        while (until_admitted && rounds.load() < round) std::this_thread::yield();
      });
      while (rounds.load() < round) std::this_thread::yield();
      back.store(round);
      d.admit();  // the admission back, for the next round
    }
  }
  go.store(-1);
  sleeper.join();
}

void wake_beside(benchmark::State& state) {
  const long m = state.range(0);
  beside spot;
  auto io = std::make_unique<asio::io_context>();
  queue_waits(spot.a, *io, m);
  wake_rounds(state, spot.d, false);
  io.reset();  // withdraws a's waits
}

void wake_beside_threads(benchmark::State& state) {
  const long count = state.range(0);
  beside spot;
  sluice::gate& a = spot.a;
  std::vector<std::thread> others;
  std::vector<std::atomic<long>> tids(static_cast<std::size_t>(count));
  for (auto& tid : tids) {
    others.emplace_back([&a, &tid] {
      tid.store(sluice_test::this_tid());
      try {
        a.admit();
      } catch (const sluice::gate_closed&) {  // the benchmark ended
      }
    });
  }
  for (auto& tid : tids) {
    while (tid.load() == 0 || !sluice_test::asleep(tid.load())) std::this_thread::yield();
  }
  wake_rounds(state, spot.d, true);
  a.close();
  for (auto& t : others) t.join();
}

void cancel_beside(benchmark::State& state) {
  const long m = state.range(0);
  beside spot;
  sluice::gate& c = spot.d;
  (void)c.try_admit();
  auto io = std::make_unique<asio::io_context>();
  queue_waits(spot.a, *io, m);
  {
    samples timed(state);
    for (auto _ : state) {
      asio::cancellation_signal cancel;
      sluice::async_admit(c, asio::bind_cancellation_slot(cancel.slot(), asio::bind_executor(*io, [](std::error_code, sluice::permit<sluice::gate>) {})));
      timed.time([&] { cancel.emit(asio::cancellation_type::terminal); });
    }
  }
  io.reset();
}

// Queues `waits` waits on each of `gates` full gates, then admits them all; reports each part.
void queue_then_admit(benchmark::State& state, long gates, long waits) {
  for (auto _ : state) {
    std::vector<std::unique_ptr<sluice::gate>> gs;
    for (long i = 0; i < gates; ++i) {
      gs.push_back(std::make_unique<sluice::gate>(1));
      (void)gs.back()->try_admit();
    }
    auto io = std::make_unique<asio::io_context>();
    const auto start = clock_type::now();
    for (auto& g : gs) queue_waits(*g, *io, waits);
    const auto queued = clock_type::now();
    for (auto& g : gs) g->set_cap(waits + 1);
    const auto admitted = clock_type::now();
    state.SetIterationTime(std::chrono::duration<double>(admitted - start).count());
    state.counters["queue_ms"] = std::chrono::duration<double, std::milli>(queued - start).count();
    state.counters["admit_ms"] = std::chrono::duration<double, std::milli>(admitted - queued).count();
    io.reset();  // destroys the posted handlers, whose permits give the admissions back
  }
}

template <class Gate>
void close_async(benchmark::State& state) {
  const long waits = state.range(0);
  for (auto _ : state) {
    Gate g{1};
    (void)g.try_admit();
    asio::io_context io;
    long closed = 0;
    for (long i = 0; i < waits; ++i) {
      sluice::async_admit(g, asio::bind_executor(io, [&closed](std::error_code ec, sluice::permit<Gate>) {
                            closed += ec == sluice::gate_errc::closed;
                          }));
    }
    const auto start = clock_type::now();
    g.close();
    io.run();
    state.SetIterationTime(std::chrono::duration<double>(clock_type::now() - start).count());
    if (closed != waits) state.SkipWithError("a wait did not complete closed");
  }
}

template <class Gate>
void close_threads(benchmark::State& state) {
  const long count = state.range(0);
  for (auto _ : state) {
    Gate g{1};
    (void)g.try_admit();
    std::atomic<long> started{0}, out{0};
    std::atomic<clock_type::rep> last{0};
    std::vector<std::thread> threads;
    threads.reserve(static_cast<std::size_t>(count));
    for (long i = 0; i < count; ++i) {
      threads.emplace_back([&] {
        started.fetch_add(1);
        try {
          g.admit();
        } catch (const sluice::gate_closed&) {
          const auto now = clock_type::now().time_since_epoch().count();
          auto seen = last.load();
          while (seen < now && !last.compare_exchange_weak(seen, now)) {
          }
          out.fetch_add(1);
        }
      });
    }
    while (started.load() < count) std::this_thread::yield();
    for (int i = 0; i < 1000; ++i) std::this_thread::yield();  // most of them asleep in admit()
    const auto start = clock_type::now();
    g.close();
    for (auto& t : threads) t.join();
    state.SetIterationTime(std::chrono::duration<double>(clock_type::time_point(clock_type::duration(last.load())) - start).count());
    if (out.load() != count) state.SkipWithError("a thread did not leave with gate_closed");
  }
}

}  // namespace

BENCHMARK_TEMPLATE(close_async, sluice::gate)->Name("waiters.close_async/gate")->Arg(10'000)
    ->UseManualTime()->Iterations(5)->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(close_async, sluice::mutex_gate)->Name("waiters.close_async/mutex_gate")->Arg(10'000)
    ->UseManualTime()->Iterations(5)->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(close_threads, sluice::gate)->Name("waiters.close_threads/gate")->Arg(1'000)->Arg(10'000)
    ->UseManualTime()->Iterations(3)->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(close_threads, sluice::mutex_gate)->Name("waiters.close_threads/mutex_gate")->Arg(1'000)->Arg(10'000)
    ->UseManualTime()->Iterations(3)->Unit(benchmark::kMillisecond);
BENCHMARK(wake_beside)->Name("waiters.wake_beside")->Arg(0)->Arg(100'000)->Arg(1'000'000)
    ->UseManualTime()->Iterations(50)->Unit(benchmark::kMicrosecond);
BENCHMARK(wake_beside_threads)->Name("waiters.wake_beside_threads")->Arg(0)->Arg(100)->Arg(1'000)
    ->UseManualTime()->Iterations(50)->Unit(benchmark::kMicrosecond);
BENCHMARK(cancel_beside)->Name("waiters.cancel_beside")->Arg(0)->Arg(100'000)->Arg(1'000'000)
    ->UseManualTime()->Iterations(50)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(queue_then_admit, many_gates, 64'000, 10)->Name("waiters.many_gates/64000/10")
    ->UseManualTime()->Iterations(1)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(queue_then_admit, one_gate, 1, 128'000)->Name("waiters.one_gate/128000")
    ->UseManualTime()->Iterations(1)->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
