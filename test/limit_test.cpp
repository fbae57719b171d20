// The latency limiter (sluice/limit.hpp, docs/limit.md): each algorithm against sequences of
// samples computed by hand, properties over random and shaped sample streams, and the limiter
// over both gates: the cap it sets, pressure beside latency, and concurrent sampling.
#include "doctest.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <limits>
#include <random>
#include <thread>
#include <vector>

#include "sluice/limit.hpp"
#include "kinds.hpp"
#include "threads.hpp"

using namespace std::chrono_literals;
using sluice::limit_sample;
using sluice::outcome;
using sluice::pressure;

namespace {
limit_sample at(std::chrono::nanoseconds rtt, std::int64_t in_flight, bool dropped = false) {
  return {rtt, in_flight, dropped};
}
}  // namespace

// ---- AIMD ---------------------------------------------------------------------------------------

TEST_CASE("aimd: +1 while half the limit is in flight, times the ratio on a drop or a timeout") {
  sluice::aimd_limit a;  // 10, 0.9, 5 s, [1, 200]
  CHECK(a.limit() == 10);
  CHECK(a.update(at(1ms, 5)) == 11);          // 5 x 2 >= 10
  CHECK(a.update(at(1ms, 5)) == 11);          // 10 < 11: not using the limit
  CHECK(a.update(at(1ms, 6, true)) == 9);     // floor(11 x 0.9)
  CHECK(a.update(at(6s, 9)) == 8);            // past the timeout: a drop; floor(8.1)
  CHECK(a.update(at(5s, 9)) == 9);            // at the timeout: not past it
}

TEST_CASE("aimd: within its bounds, a cut of at least one") {
  sluice::aimd_limit a{{.initial_limit = 2, .backoff_ratio = 0.99, .min_limit = 2, .max_limit = 3}};
  CHECK(a.update(at(1ms, 2)) == 3);
  CHECK(a.update(at(1ms, 3)) == 3);         // at the maximum
  CHECK(a.update(at(1ms, 3, true)) == 2);   // floor(2.97) = 2
  CHECK(a.update(at(1ms, 3, true)) == 2);   // at the minimum
  sluice::aimd_limit clamped{{.initial_limit = 500, .backoff_ratio = 7}};
  CHECK(clamped.limit() == 200);            // the initial limit within the bounds
  CHECK(clamped.update(at(1ms, 1, true)) == 199);  // the ratio clamped below 1: still at least -1
}

// ---- Vegas --------------------------------------------------------------------------------------

TEST_CASE("vegas: the queue against log10 thresholds") {
  sluice::vegas_limit v{{.probe_multiplier = 1e12, .seed = 1}};  // no probe in this sequence
  CHECK(v.limit() == 20);
  CHECK(v.update(at(10ms, 20)) == 20);        // the first RTT: the lowest yet, nothing else
  CHECK(v.rtt_noload() == 10ms);
  CHECK(v.update(at(10ms, 20)) == 26);        // queue ceil(20 x 0) = 0 <= 1: + 6
  CHECK(v.update(at(20ms, 26)) == 25);        // queue ceil(26 x 0.5) = 13 > 6: - 1
  CHECK(v.update(at(11ms, 25)) == 25);        // queue ceil(2.27) = 3: between 3 and 6
  CHECK(v.update(at(10500us, 25)) == 26);     // queue ceil(1.19) = 2 < 3: + 1
  CHECK(v.update(at(10ms, 26, true)) == 25);  // a drop: - 1
  CHECK(v.update(at(30ms, 5)) == 25);         // 5 x 2 < 25: not using the limit
  CHECK(v.update(at(5ms, 25)) == 25);         // a lower RTT: taken, nothing else
  CHECK(v.rtt_noload() == 5ms);
}

TEST_CASE("vegas: log10 steps past 100, smoothing, the maximum") {
  sluice::vegas_limit big{{.initial_limit = 150, .probe_multiplier = 1e12, .seed = 1}};
  big.update(at(10ms, 150));
  CHECK(big.update(at(10ms, 150)) == 162);    // step 2: + 12
  sluice::vegas_limit smooth{{.smoothing = 0.5, .probe_multiplier = 1e12, .seed = 1}};
  smooth.update(at(10ms, 20));
  CHECK(smooth.update(at(10ms, 20)) == 23);   // (20 + 26) / 2
  sluice::vegas_limit top{{.initial_limit = 998, .max_limit = 1000, .probe_multiplier = 1e12, .seed = 1}};
  top.update(at(10ms, 998));
  CHECK(top.update(at(10ms, 998)) == 1000);
}

TEST_CASE("vegas: alpha, beta and threshold, in steps of L, kept in order") {
  sluice::vegas_limit v{{.probe_multiplier = 1e12, .seed = 1, .alpha = 2, .beta = 4, .threshold = 0}};
  v.update(at(10ms, 20));
  CHECK(v.update(at(10ms, 20)) == 24);     // queue 0 <= 0: + beta
  CHECK(v.update(at(10500us, 24)) == 24);  // queue ceil(1.14) = 2: between alpha and beta
  CHECK(v.update(at(10400us, 24)) == 25);  // queue ceil(0.92) = 1 < alpha: + 1
  CHECK(v.update(at(13ms, 25)) == 24);     // queue ceil(5.77) = 6 > beta: - 1
  // Out of order: threshold 7, so alpha and beta at least 7; below 0: 0.
  sluice::vegas_limit odd{{.probe_multiplier = 1e12, .seed = 1, .alpha = 5, .beta = 1, .threshold = 7}};
  odd.update(at(10ms, 20));
  CHECK(odd.update(at(10ms, 20)) == 27);   // queue 0 <= 7: + 7
  CHECK(odd.update(at(12ms, 27)) == 34);   // queue ceil(4.5) = 5 <= 7: + 7
  sluice::vegas_limit none{{.probe_multiplier = 1e12, .seed = 1, .alpha = -4, .beta = -1, .threshold = -9}};
  none.update(at(10ms, 20));
  CHECK(none.update(at(10ms, 20)) == 20);  // queue 0 <= 0: + 0
  CHECK(none.update(at(10500us, 20)) == 19);  // queue 1 > 0: - 1
}

TEST_CASE("vegas: the step is of the limit's whole part, as the source's (int) limit") {
  // A limit a hair under 100 steps by 1 (log10 99 < 2), not by 2.
  sluice::vegas_limit v{{.initial_limit = 100, .smoothing = 0.91367699036758399, .probe_multiplier = 1e300, .seed = 1}};
  v.update(at(10ms, 1000));
  for (bool dropped : {true, true, true, false, true}) v.update(at(10ms, 1000, dropped));
  REQUIRE(v.limit() == 99);
  CHECK(v.update(at(10ms, 1000)) == 105);  // 99.99... + 0.9137 x 6, not x 12
}

TEST_CASE("vegas: a probe takes the lowest RTT again") {
  sluice::vegas_limit v{{.probe_multiplier = 1e-3, .seed = 1}};  // every sample is a probe
  v.update(at(10ms, 20));
  CHECK(v.rtt_noload() == 10ms);
  CHECK(v.update(at(40ms, 20)) == 20);  // not read as a queue: the probe resets the lowest
  CHECK(v.rtt_noload() == 40ms);
}

// ---- Gradient2 ----------------------------------------------------------------------------------

TEST_CASE("gradient2: the long average against the sample, smoothed") {
  sluice::gradient2_limit g{{.min_limit = 1, .rtt_tolerance = 1}};  // 20, [1, 200], 0.2, 4, 600
  CHECK(g.update(at(10ms, 20)) == 20);  // gradient 1: 20 x 0.8 + 24 x 0.2 = 20.8
  CHECK(g.update(at(20ms, 20)) == 20);  // long 15 ms: 0.75; 20.8 x 0.8 + 19.6 x 0.2 = 20.56
  CHECK(g.update(at(10ms, 5)) == 20);   // 5 < 10.28: not using the limit
  for (int i = 0; i < 40; ++i) g.update(at(10ms, 40));
  CHECK(g.limit() > 20);                // gradient 1 again: grows by queue_size x smoothing
}

TEST_CASE("gradient2: rtt_tolerance, a rise within it read as no queue") {
  sluice::gradient2_limit g{{.min_limit = 1, .smoothing = 1}};  // tolerance 1.5
  CHECK(g.update(at(10ms, 20)) == 24);  // 20 x 1 + 4
  CHECK(g.update(at(14ms, 24)) == 28);  // long 12 ms: 1.5 x 12 / 14 > 1, so 1: + 4
  CHECK(g.update(at(60ms, 28)) == 23);  // long 28 ms: 1.5 x 28 / 60 = 0.7: 19.6 + 4
  sluice::gradient2_limit strict{{.min_limit = 1, .smoothing = 1, .rtt_tolerance = 1}};
  strict.update(at(10ms, 20));
  CHECK(strict.update(at(14ms, 24)) == 24);  // 12 / 14: 24 x 0.857 + 4 = 24.57
  sluice::gradient2_limit below{{.min_limit = 1, .smoothing = 1, .rtt_tolerance = 0.5}};  // clamped to 1
  below.update(at(10ms, 20));
  CHECK(below.update(at(14ms, 24)) == 24);
}

TEST_CASE("gradient2: a long average far above the present is cut") {
  sluice::gradient2_limit g;
  for (int i = 0; i < 10; ++i) g.update(at(100ms, 0));
  CHECK(g.long_rtt_ns() == doctest::Approx(100e6));
  g.update(at(10ms, 0));
  // (100 - 90 x 2/601) ms, then x 0.95 as it is over twice 10 ms
  CHECK(g.long_rtt_ns() == doctest::Approx((100e6 - 90e6 * 2.0 / 601) * 0.95));
  CHECK(g.limit() == 20);  // the minimum
}

// ---- properties ---------------------------------------------------------------------------------

namespace {
template <class Alg>
void within_bounds(Alg alg, std::int64_t lo, std::int64_t hi) {
  std::mt19937_64 rng{42};
  std::uniform_int_distribution<std::int64_t> rtt_us{1, 200'000};
  for (int i = 0; i < 20'000; ++i) {
    const std::int64_t lim = alg.limit();
    const limit_sample s = at(std::chrono::microseconds{rtt_us(rng)}, std::uniform_int_distribution<std::int64_t>{0, 2 * lim}(rng),
                              rng() % 20 == 0);
    const std::int64_t next = alg.update(s);
    REQUIRE(next >= lo);
    REQUIRE(next <= hi);
    REQUIRE(next == alg.limit());
  }
}

// The limit stops moving under a steady RTT with the limit in use.
template <class Alg>
void steady(Alg alg) {
  for (int i = 0; i < 5'000; ++i) alg.update(at(10ms, alg.limit()));
  const std::int64_t settled = alg.limit();
  for (int i = 0; i < 1'000; ++i) REQUIRE(alg.update(at(10ms, alg.limit())) == settled);
}

// RTTs that double at every sample after ten at 10 ms (Gradient2's warm-up), the limit in use:
// it never rises.
template <class Alg>
void doubling_never_raises(Alg alg) {
  for (int i = 0; i < 10; ++i) alg.update(at(10ms, alg.limit()));
  std::chrono::nanoseconds rtt = 10ms;
  for (int i = 0; i < 30; ++i) {
    rtt *= 2;
    const std::int64_t before = alg.limit();
    REQUIRE(alg.update(at(rtt, before)) <= before);
  }
}
}  // namespace

TEST_CASE("every algorithm stays within its bounds over random samples") {
  within_bounds(sluice::aimd_limit{{.min_limit = 3, .max_limit = 150}}, 3, 150);
  within_bounds(sluice::vegas_limit{{.max_limit = 300, .seed = 7}}, 1, 300);
  within_bounds(sluice::gradient2_limit{{.min_limit = 5, .max_limit = 120}}, 5, 120);
}

TEST_CASE("a steady RTT gives a steady limit") {
  steady(sluice::aimd_limit{});
  steady(sluice::vegas_limit{{.seed = 3}});
  steady(sluice::gradient2_limit{});
}

TEST_CASE("a rising RTT never raises the limit (past the timeout for AIMD; doubling for the others)") {
  sluice::aimd_limit a{{.initial_limit = 50, .timeout = 5ms}};
  for (std::chrono::nanoseconds rtt = 6ms; rtt < 1s; rtt += 7ms) {
    const std::int64_t before = a.limit();
    REQUIRE(a.update(at(rtt, before)) <= before);
  }
  doubling_never_raises(sluice::vegas_limit{{.probe_multiplier = 1e12, .seed = 5}});
  doubling_never_raises(sluice::gradient2_limit{});
  doubling_never_raises(sluice::gradient2_limit{{.initial_limit = 100, .min_limit = 1}});
}

// ---- the limiter --------------------------------------------------------------------------------

TEST_CASE_TEMPLATE("a limiter sets the gate's cap from its algorithm, clamped into its bounds", G, GATES) {
  G g{1000};
  sluice::limiter lim{g, sluice::aimd_limit{}, {.min = 4, .max = 12}};
  CHECK(lim.limit() == 10);
  CHECK(g.cap() == 10);
  lim.sample(1ms, 10, outcome::done);
  lim.sample(1ms, 10, outcome::done);
  lim.sample(1ms, 10, outcome::done);
  CHECK(lim.limit() == 13);
  CHECK(g.cap() == 12);  // the maximum
  for (int i = 0; i < 20; ++i) lim.sample(1ms, 1, outcome::dropped);
  CHECK(lim.limit() == 1);
  CHECK(g.cap() == 4);  // the minimum
  CHECK(lim.cap() == g.cap());
}

TEST_CASE_TEMPLATE("the cap is the smaller of the latency limit and the pressure cap", G, GATES) {
  G g{1};
  sluice::limiter lim{g, sluice::aimd_limit{{.initial_limit = 6}}, {.min = 2, .max = 8}};
  CHECK(lim.pressure_cap() == 8);
  CHECK(g.cap() == 6);
  for (int i = 0; i < 5; ++i) lim.adjust(pressure::soft);
  CHECK(lim.pressure_cap() == 3);
  CHECK(g.cap() == 3);
  lim.adjust(pressure::hard);
  lim.adjust(pressure::hard);
  CHECK(lim.pressure_cap() == 2);  // never below the minimum
  CHECK(g.cap() == 2);
  for (int i = 0; i < 10; ++i) lim.adjust(pressure::ok);
  CHECK(lim.pressure_cap() == 8);
  CHECK(g.cap() == 6);  // the latency limit again
  // A random walk of both: after every step the gate's cap is the effective cap.
  std::mt19937_64 rng{9};
  for (int i = 0; i < 5'000; ++i) {
    if (rng() % 3 == 0) {
      lim.adjust(static_cast<pressure>(rng() % 3));
    } else {
      lim.sample(std::chrono::microseconds{1 + rng() % 1000}, static_cast<std::int64_t>(rng() % 16),
                 rng() % 10 == 0 ? outcome::dropped : outcome::done);
    }
    REQUIRE(g.cap() == std::clamp(std::min(lim.limit(), lim.pressure_cap()), std::int64_t{2}, std::int64_t{8}));
    REQUIRE(lim.cap() == g.cap());
  }
}

TEST_CASE_TEMPLATE("timed permits: admitted within the cap, sampled at release by outcome", G, GATES) {
  G g{100};
  sluice::limiter lim{g, sluice::aimd_limit{{.initial_limit = 2}}};
  auto a = lim.try_admit();
  auto b = lim.try_admit();
  CHECK(a);
  CHECK(b);
  CHECK(!lim.try_admit());  // the limit: 2
  CHECK(g.in_flight() == 2);
  a.release(outcome::done);  // in flight 1 at admission: 1 x 2 >= 2, + 1
  CHECK(lim.limit() == 3);
  CHECK(g.in_flight() == 1);
  b.release(outcome::ignored);
  CHECK(lim.limit() == 3);
  CHECK(lim.stats().applied == 1);
  CHECK(lim.stats().ignored == 1);
  {
    auto w = lim.admit(3);
    CHECK(w.units() == 3);
    CHECK(g.in_flight() == 3);
  }  // the destructor: done
  CHECK(g.in_flight() == 0);
  CHECK(lim.stats().applied == 2);
  auto c = lim.try_admit_for(1, 1ms);
  CHECK(c);
  c.release(outcome::dropped);
  CHECK(lim.limit() == 3);  // floor(4 x 0.9)
  c.release(outcome::dropped);  // empty now: nothing
  CHECK(lim.stats().applied == 3);
}

TEST_CASE("a closed gate's limiter admits nothing and never reopens it") {
  sluice::gate g{10};
  sluice::limiter lim{g, sluice::vegas_limit{{.seed = 2}}};
  g.close();
  CHECK(!lim.try_admit());
  CHECK_THROWS_AS((void)lim.admit(), sluice::gate_closed);
  lim.adjust(pressure::ok);
  lim.sample(1ms, 20, outcome::done);
  CHECK(g.cap() == 0);
  CHECK(g.closed());
}

TEST_CASE_TEMPLATE("concurrent sampling: every release counted once, the gate's cap the limiter's", G, GATES) {
  G g{1};
  sluice::limiter lim{g, sluice::gradient2_limit{{.min_limit = 2, .max_limit = 64}}, {.min = 2, .max = 64}};
  constexpr int threads = 4;
  const int rounds = sluice_test::reduced ? 1'000 : 4'000;
  std::atomic<bool> stop{false};
  std::atomic<std::int64_t> over_cap{0};
  std::thread pressure_source([&] {
    std::mt19937_64 rng{1};
    while (!stop.load(std::memory_order_relaxed)) lim.adjust(static_cast<pressure>(rng() % 3));
  });
  std::atomic<std::uint64_t> released{0};
  sluice_test::run_threads(threads, [&](std::size_t t) {
    std::mt19937_64 rng{t + 100};
    for (int i = 0; i < rounds; ++i) {
      auto p = lim.try_admit();
      if (!p) continue;
      if (g.in_flight() > 64) over_cap.fetch_add(1);  // never past the maximum
      const auto how = static_cast<outcome>(rng() % 3);
      p.release(how);
      released.fetch_add(1);
    }
  });
  stop = true;
  pressure_source.join();
  const sluice::limiter_stats s = lim.stats();
  CHECK(s.applied + s.skipped + s.ignored == released.load());
  CHECK(over_cap.load() == 0);
  CHECK(g.in_flight() == 0);
  CHECK(g.cap() == lim.cap());
  CHECK(lim.cap() >= 2);
  CHECK(lim.cap() <= 64);
}

// ---- review: what bad input and lifetimes broke -------------------------------------------------

TEST_CASE("gradient2's warm-up mean is of the samples, whatever cut the long average") {
  sluice::gradient2_limit g;
  g.update(at(100ms, 0));
  g.update(at(10ms, 0));   // mean 55 ms, over twice 10: cut to 52.25
  g.update(at(10ms, 0));   // mean 40 ms (not from 52.25), cut to 38
  CHECK(g.long_rtt_ns() == doctest::Approx(38e6));
}

TEST_CASE("options and samples out of range: clamped, never undefined") {
  sluice::gradient2_limit g{{.max_limit = 50, .smoothing = 0, .queue_size = 1e300 * 1e300, .long_window = 2147483647}};
  for (int i = 0; i < 20; ++i) REQUIRE(g.update(at(10ms, 1'000'000)) == 20);  // smoothing 0: never moves
  sluice::gradient2_limit q{{.max_limit = 50, .queue_size = 1e300 * 1e300}};
  for (int i = 0; i < 40; ++i) q.update(at(10ms, 50));
  CHECK(q.limit() == 50);  // queue_size not finite: 4, up to the maximum
  sluice::gate gate{1};
  sluice::limiter lim{gate, sluice::aimd_limit{}};
  lim.sample(1ms, INT64_MAX, outcome::done);  // no overflow doubling the count
  CHECK(lim.limit() == 11);
  lim.sample(0ns, 100, outcome::done);  // no time measured: ignored
  lim.sample(-5ms, 100, outcome::done);
  CHECK(lim.limit() == 11);
  lim.sample(-5ms, 100, outcome::dropped);  // a drop needs no time: floor(11 x 0.9)
  CHECK(lim.limit() == 9);
  CHECK(lim.stats().ignored == 2);
  CHECK(lim.stats().applied == 2);
}

TEST_CASE("a release gives the units back last: the gate may be destroyed once it drains") {
  for (int round = 0; round < (sluice_test::reduced ? 200 : 2'000); ++round) {
    auto g = std::make_unique<sluice::gate>(4);
    auto lim = std::make_unique<sluice::limiter<sluice::gate>>(*g, sluice::vegas_limit{{.seed = 1}});
    auto p = lim->try_admit();
    REQUIRE(p);
    std::thread releaser([&p] { p.release(outcome::done); });
    while (g->in_flight() != 0) std::this_thread::yield();
    lim.reset();  // what a drained server does; the releaser must be done with both by now
    g.reset();
    releaser.join();
  }
}

TEST_CASE_TEMPLATE("a window: its samples taken as one, mean RTT, highest count, any drop", G, GATES) {
  G g{1};
  sluice::limiter lim{g, sluice::aimd_limit{{.timeout = 3ms}}, {.window = 3}};
  lim.sample(1ms, 2, outcome::done);
  lim.sample(2ms, 6, outcome::done);
  CHECK(lim.limit() == 10);  // the window is not full
  lim.sample(3ms, 1, outcome::done);  // mean 2 ms, highest count 6: 6 x 2 >= 10
  CHECK(lim.limit() == 11);
  lim.sample(1ms, 9, outcome::done);
  lim.sample(1ms, 9, outcome::dropped);
  lim.sample(1ms, 9, outcome::done);
  CHECK(lim.limit() == 9);  // a drop among them: floor(11 x 0.9)
  lim.sample(1ms, 9, outcome::done);
  lim.sample(1ms, 9, outcome::done);
  lim.sample(10ms, 9, outcome::done);  // mean 4 ms, past the timeout
  CHECK(lim.limit() == 8);
  CHECK(lim.stats().applied == 9);
  CHECK(g.cap() == 8);
}

TEST_CASE_TEMPLATE("a unit: the gate counts bytes, the limits count blocks", G, GATES) {
  G g{1};
  sluice::limiter lim{g, sluice::aimd_limit{}, {.max = 1000, .unit = 4096}};
  CHECK(g.cap() == 10 * 4096);
  lim.sample(1ms, 5 * 4096 - 100, outcome::done);  // 5 blocks, rounded up: 5 x 2 >= 10
  CHECK(lim.limit() == 11);
  CHECK(g.cap() == 11 * 4096);
  lim.sample(1ms, 4 * 4096, outcome::done);  // 4 blocks: 8 < 11
  CHECK(lim.limit() == 11);
  auto p = lim.try_admit(6 * 4096);
  CHECK(p);
  p.release(outcome::done);  // 6 blocks in flight at admission: 12 >= 11
  CHECK(lim.limit() == 12);
  G big{1};
  sluice::limiter huge{big, sluice::aimd_limit{{.initial_limit = 200}}, {.unit = sluice::gate_limit}};
  CHECK(big.cap() == sluice::gate_limit);  // the product saturates
}

TEST_CASE("sample_every: about one admission in k timed, for each of a thread's limiters") {
  sluice::gate g{100}, h{100};
  sluice::limiter a{g, sluice::aimd_limit{}, {.sample_every = 4}};
  sluice::limiter b{h, sluice::aimd_limit{}, {.sample_every = 4}};
  for (int i = 0; i < 4'000; ++i) {
    auto p = a.try_admit(2);  // admissions alternate between the two limiters
    auto q = b.try_admit();
    REQUIRE(p);
    REQUIRE(q);
    CHECK(p.units() == 2);
    q.release(outcome::dropped);  // an untimed drop samples nothing
  }  // p released (done) here
  CHECK(g.in_flight() == 0);
  CHECK(h.in_flight() == 0);
  // Binomial(4,000, 1/4): 1,000 expected, 27 the standard deviation.
  for (const auto& s : {a.stats(), b.stats()}) {
    CHECK(s.applied + s.skipped > 850);
    CHECK(s.applied + s.skipped < 1'150);
    CHECK(s.ignored == 0);
  }
}

TEST_CASE("a drop needs no time: an untimed drop is applied, an untimed done is ignored") {
  sluice::gate g{1};
  sluice::limiter lim{g, sluice::vegas_limit{{.seed = 1}}};
  lim.sample(0ns, 5, outcome::dropped);
  CHECK(lim.limit() == 19);
  lim.sample(0ns, 5, outcome::done);
  CHECK(lim.limit() == 19);
  CHECK(lim.stats().applied == 1);
  CHECK(lim.stats().ignored == 1);
}

TEST_CASE("a forked child takes over a turn that a thread of its parent held") {
  if (sluice_test::reduced) return;  // forks beside a running thread: plain builds only
  sluice::gate g{1};
  sluice::limiter lim{g, sluice::aimd_limit{{.max_limit = 1000}}, {.min = 2, .max = 500}};
  std::atomic<bool> stop{false};
  std::thread busy([&] {  // holds the turn much of the time
    while (!stop.load(std::memory_order_relaxed)) {
      lim.adjust(pressure::ok);
      lim.sample(1ms, 1000, outcome::done);
    }
  });
  for (int i = 0; i < 20; ++i) {
    const pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      alarm(10);  // a child left waiting for the turn dies of it: the parent sees the signal
      lim.adjust(pressure::soft);
      lim.sample(1ms, 1, outcome::dropped);
      _exit(g.cap() == lim.cap() && lim.stats().applied > 0 ? 0 : 1);
    }
    int status = 0;
    REQUIRE(waitpid(child, &status, 0) == child);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  stop = true;
  busy.join();
}

TEST_CASE("adopt: a timed permit for units admitted on the gate itself") {
  sluice::gate g{10};
  sluice::limiter lim{g, sluice::aimd_limit{}};
  REQUIRE(g.try_admit(3));  // as async_admit would have
  {
    auto p = lim.adopt(3);
    CHECK(p.units() == 3);
    CHECK(g.in_flight() == 3);
  }
  CHECK(g.in_flight() == 0);
  CHECK(lim.stats().applied == 1);
  CHECK(lim.limit() == 10);  // 3 in flight at the adoption: 3 x 2 < 10, no growth
}

TEST_CASE_TEMPLATE("refresh: the limiter's cap back on the gate after a set_cap of the program's", G, GATES) {
  G g{1};
  sluice::limiter lim{g, sluice::aimd_limit{}, {.unit = 2}};
  CHECK(g.cap() == 20);
  g.set_cap(100);  // opened by hand, for a heavy wait
  lim.adjust(pressure::ok);  // the pressure cap at its maximum already: the cap does not move
  CHECK(g.cap() == 100);
  lim.refresh();
  CHECK(g.cap() == 20);
}
