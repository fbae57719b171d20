// sluice/limit.hpp: a gate's cap found from the latency of its admissions.
//
// A limiter owns a gate's cap. Admissions through it (try_admit, admit, try_admit_for) answer a
// timed_permit, which records when it was admitted and how many were in flight then; its release
// says how the work ended (done, dropped, ignored) and hands the limiter a sample: the time from
// admission to release, that in-flight count, and whether it was dropped. The limiter's algorithm
// turns samples into a latency limit; the gate's cap is the smaller of that limit and the memory-
// pressure cap that adjust() moves, within [min, max] (docs/limit.md).
//
//   limiter(g, algorithm, {min, max, window, unit, sample_every})  sets g's cap to the algorithm's
//                    initial limit, clamped
//   try_admit(n), admit(n), try_admit_for(n, d)   the gate's, answering a timed_permit
//   adopt(n)         a timed_permit for n units admitted on the gate itself (async_admit)
//   sample(rtt, in_flight, outcome)  a sample timed by the caller (async admissions)
//   adjust(p)        the pressure cap: ok +1 up to max, soft and hard -1 down to min
//   refresh()        the gate's cap set again to the limiter's (after a set_cap on the gate itself)
//   limit(), pressure_cap(), cap(), stats()   the latency limit, the pressure cap, the cap set
//
// The algorithms, each as its source publishes it, with its defaults: aimd_limit (additive
// increase, multiplicative decrease on a drop or a timeout), vegas_limit (the queue estimated
// from the lowest RTT seen), gradient2_limit (a short against a long average RTT). Each is a
// plain value with update(sample) that a test can drive by hand.
//
// Sampling takes no lock of the limiter's: an admission reads the clock and the gate's count, a
// release reads the clock and applies its sample only if no other thread is changing the limits
// (one exchange on the limiter's turn): a sample that finds the turn taken is counted as skipped,
// never waited for. A sample that moves the cap calls the gate's set_cap (lock-free when no thread
// waits on the gate; docs/gate.md). adjust() waits for the turn. The gate's cap is set only in a turn, so it is always the
// effective cap of the last change, never a stale one. The limiter owns the cap: a set_cap or
// adjust called on the gate itself lasts until the limiter's next change of the cap.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <utility>
#include <variant>

#include "sluice/gate.hpp"

namespace sluice {

// How an admitted piece of work ended: done (a sample), dropped (a sample that says the service
// shed it or timed out), ignored (no sample: a cancelled request says nothing of the latency).
enum class outcome { done, dropped, ignored };

// One admission's sample: the time from admission to release, the count in flight when it was
// admitted (its own included), and whether it was dropped.
struct limit_sample {
  std::chrono::nanoseconds rtt{0};
  std::int64_t in_flight = 0;
  bool dropped = false;
};

// AIMD: +1 per sample while at least half the limit is in flight; times backoff_ratio (and at
// least -1) on a drop or an RTT past the timeout; within [min_limit, max_limit].
class aimd_limit {
 public:
  struct options {
    std::int64_t initial_limit = 10;
    double backoff_ratio = 0.9;  // clamped into [0.5, 1)
    std::chrono::nanoseconds timeout = std::chrono::seconds(5);  // at least 1 ns
    std::int64_t min_limit = 1;
    std::int64_t max_limit = 200;
  };
  aimd_limit() : aimd_limit(options{}) {}
  explicit aimd_limit(const options& o) noexcept;
  std::int64_t update(const limit_sample& s) noexcept;  // the new limit
  [[nodiscard]] std::int64_t limit() const noexcept { return limit_; }

 private:
  options o_;
  std::int64_t limit_;
};

// Vegas: the queue is limit x (1 - rtt_noload / rtt), rtt_noload the lowest RTT seen (taken again
// from one sample every probe_multiplier x limit samples, jittered by [0.5, 1)). With L =
// max(1, floor(log10 limit)): a queue of at most threshold x L adds beta x L, below alpha x L adds
// L, above beta x L takes L away, a drop takes L away (defaults 1, 3, 6: the source's log10
// functions); no growth while under half the limit is in flight; smoothing blends the old limit
// with the new (1: the new alone); within [1, max_limit].
class vegas_limit {
 public:
  struct options {
    std::int64_t initial_limit = 20;
    std::int64_t max_limit = 1000;
    double smoothing = 1.0;
    double probe_multiplier = 30;
    std::uint64_t seed = 0;  // of the probes' jitter; 0: one from std::random_device
    // In steps of L, as the source's log10 functions; clamped into [0, 2^20], threshold <= alpha <= beta.
    int alpha = 3;      // the queue allowance's floor
    int beta = 6;       // its ceiling, and the growth when no queue
    int threshold = 1;  // a queue this small reads as none
  };
  vegas_limit() : vegas_limit(options{}) {}
  explicit vegas_limit(const options& o);
  std::int64_t update(const limit_sample& s) noexcept;
  [[nodiscard]] std::int64_t limit() const noexcept { return static_cast<std::int64_t>(limit_); }
  [[nodiscard]] std::chrono::nanoseconds rtt_noload() const noexcept { return rtt_noload_; }

 private:
  double next_jitter() noexcept;
  options o_;
  double limit_;
  std::chrono::nanoseconds rtt_noload_{0};
  std::uint64_t random_;
  double probe_jitter_;
  std::int64_t probe_count_ = 0;
};

// Gradient2: the gradient is rtt_tolerance x the long average RTT (exponential over long_window
// samples, a plain mean over the first 10) over the sample's, within [0.5, 1]; the new limit is
// limit x gradient + queue_size, blended by smoothing, within [min_limit, max_limit]. No change
// while under half the limit is in flight; a long average above twice the sample's is cut by 5%
// per sample. Drops are not read (as in its source): its signal is the RTT alone.
class gradient2_limit {
 public:
  struct options {
    std::int64_t initial_limit = 20;
    std::int64_t min_limit = 20;
    std::int64_t max_limit = 200;
    double smoothing = 0.2;
    double queue_size = 4;  // clamped into [0, gate_limit]; not finite: 4
    int long_window = 600;  // clamped into [1, 2^30]
    double rtt_tolerance = 1.5;  // an RTT up to this x the long average reads as no queue; into [1, 1e9] (NaN: 1.5)
  };
  gradient2_limit() : gradient2_limit(options{}) {}
  explicit gradient2_limit(const options& o) noexcept;
  std::int64_t update(const limit_sample& s) noexcept;
  [[nodiscard]] std::int64_t limit() const noexcept { return static_cast<std::int64_t>(limit_); }
  [[nodiscard]] double long_rtt_ns() const noexcept { return long_rtt_; }

 private:
  options o_;
  double limit_;
  double long_rtt_ = 0;
  double warm_sum_ = 0;  // of the first samples, whose plain mean the long RTT is
  int warmed_ = 0;       // samples in that mean, up to 10
};

using limit_algorithm = std::variant<aimd_limit, vegas_limit, gradient2_limit>;

// A limiter's options. min, max: the cap's bounds, whatever the algorithm or the pressure say
// (clamped into [1, gate_limit], max at least min). window: how many samples the algorithm takes
// as one (clamped into [1, 2^20]): their mean RTT, the highest count in flight among them, and a
// drop if any dropped, as Netflix's WindowedLimit does; a window smooths the noise of single
// round trips out of the lowest RTT that Vegas reads and the gradient that Gradient2 reads.
// unit: how many of the gate's units one unit of the limits is (clamped into [1, gate_limit]): a
// gate that counts bytes with a unit of 16 KiB has its cap set to the limit times 16 KiB (at most
// gate_limit), and a sample's count in flight, in the gate's units, is divided by it (rounded up).
// min, max, limit(), pressure_cap() and cap() are in the limits' units.
struct limiter_options {
  std::int64_t min = 1;
  std::int64_t max = gate_limit;
  std::int64_t window = 1;
  std::int64_t unit = 1;
  // sample_every: each admission is timed and sampled with probability 1 / sample_every (a draw
  // from the thread's own generator); the others read no clock, and their release, whatever its
  // outcome, only gives the units back (clamped into [1, 2^20]). A timed permit costs two reads of
  // steady_clock and a sample (docs/limit.md, What sampling costs).
  std::int64_t sample_every = 1;
};

struct limiter_stats {
  std::uint64_t applied = 0;  // samples taken (into a window, or by the algorithm when the window is 1)
  std::uint64_t skipped = 0;  // samples that found the turn taken (by a sample or an adjust)
  std::uint64_t ignored = 0;  // outcome::ignored, or an RTT of zero or below that was not a drop
  // (timed permits and sample() calls only: a permit that sample_every left untimed counts nowhere)
};

namespace detail {
// Whether to time an admission: a draw of this thread's xorshift64 generator at or below the
// limiter's threshold (UINT64_MAX / sample_every; UINT64_MAX: every admission, no draw). A draw,
// not a count: one count shared by a thread's limiters would fall into step with admissions that
// alternate between them, and starve one of samples.
inline thread_local std::uint64_t sampling_draws = 0;
[[gnu::always_inline]] inline bool times_this_admission(std::uint64_t threshold) noexcept {
  if (threshold == UINT64_MAX) return true;
  std::uint64_t x = sampling_draws;
  if (x == 0) x = reinterpret_cast<std::uintptr_t>(&sampling_draws) * 0x9e3779b97f4a7c15u | 1u;  // a seed per thread
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  sampling_draws = x;
  return x <= threshold;
}

// What a limiter keeps apart from its gate's type (lib/limit.cpp).
class limit_core {
 public:
  limit_core(limit_algorithm a, limiter_options o) noexcept;
  // The turn to change the limits, held by one thread at a time: a sample tries for it once, an
  // adjust waits for it (yielding). Held, its value names the process's fork generation, so that
  // a forked child takes over a turn that a thread of its parent held (lib/limit.cpp). Held, a change feeds the algorithm (sample) or moves the
  // pressure cap (adjust), and answers the effective cap if it moved (0 if not), to be set on the
  // gate before the turn is given back.
  bool try_take_turn() noexcept;
  void take_turn() noexcept;
  void give_turn() noexcept;
  std::int64_t sample_in_turn(const limit_sample& s) noexcept;
  std::int64_t adjust_in_turn(pressure p) noexcept;
  std::int64_t effective() const noexcept;
  std::int64_t gate_cap(std::int64_t cap) const noexcept;       // cap x unit, at most gate_limit
  std::int64_t in_units(std::int64_t in_flight) const noexcept;  // in_flight / unit, rounded up
  std::uint64_t sampling_threshold() const noexcept { return UINT64_MAX / static_cast<std::uint64_t>(options.sample_every); }
  detail::atomic<std::uint64_t> turn{0};  // 0: free; else the holder's fork generation + 1
  limit_algorithm algorithm;
  const limiter_options options;
  // The window's samples so far, in a turn: RTTs summed (in ns), the highest count, any drop.
  detail::plain<std::int64_t> window_rtt_ns{0}, window_in_flight{0}, window_count{0};
  detail::plain<bool> window_dropped{false};
  // Written in a turn, read by any thread: relaxed (figures; the turn orders what a turn reads).
  detail::atomic<std::int64_t> limit{0}, pressure_cap{0}, cap{0};
  detail::atomic<std::uint64_t> applied{0}, skipped{0}, ignored{0};
};
}  // namespace detail

template <class Gate = gate>
class limiter;

// An admission through a limiter: a permit (its units given back at release) that also samples
// its latency. Empty when the admission was refused. Its destructor releases with outcome::done.
template <class Gate = gate>
class timed_permit {
 public:
  timed_permit() noexcept = default;
  timed_permit(timed_permit&& o) noexcept
      : owner_(std::exchange(o.owner_, nullptr)), units_(o.units_), in_flight_(o.in_flight_), start_(o.start_) {}
  timed_permit& operator=(timed_permit&& o) noexcept {
    if (this != &o) {
      release(outcome::done);
      owner_ = std::exchange(o.owner_, nullptr);
      units_ = o.units_;
      in_flight_ = o.in_flight_;
      start_ = o.start_;
    }
    return *this;
  }
  ~timed_permit() { release(outcome::done); }

  explicit operator bool() const noexcept { return owner_ != nullptr; }
  [[nodiscard]] std::int64_t units() const noexcept { return owner_ != nullptr ? units_ : 0; }
  // Gives the units back and samples how the work ended; the permit then holds nothing.
  void release(outcome how) noexcept {
    if (owner_ != nullptr) std::exchange(owner_, nullptr)->finish(units_, in_flight_, start_, how);
  }

 private:
  friend class limiter<Gate>;
  timed_permit(limiter<Gate>* owner, std::int64_t units, std::int64_t in_flight, std::chrono::steady_clock::time_point start) noexcept
      : owner_(owner), units_(units), in_flight_(in_flight), start_(start) {}
  limiter<Gate>* owner_ = nullptr;
  std::int64_t units_ = 0;
  std::int64_t in_flight_ = 0;  // below zero: not timed (limiter_options::sample_every)
  std::chrono::steady_clock::time_point start_{};
};

template <class Gate>
class limiter {
 public:
  limiter(Gate& g, limit_algorithm algorithm, limiter_options options = {}) : gate_(g), core_(std::move(algorithm), options) {
    gate_.set_cap(core_.gate_cap(core_.cap.load(std::memory_order_relaxed)));  // no other thread knows it yet
  }
  limiter(const limiter&) = delete;
  limiter& operator=(const limiter&) = delete;

  [[nodiscard]] timed_permit<Gate> try_admit(std::int64_t n = 1) noexcept {
    return gate_.try_admit(n) ? admitted(n) : timed_permit<Gate>{};
  }
  // admit and try_admit_for wait for room, and throw gate_closed (and std::invalid_argument for n
  // past gate_limit) as the gate's do. A permit records the gate's count read just after its
  // admission (its own units included; others' admitted since may be in it too).
  [[nodiscard]] timed_permit<Gate> admit(std::int64_t n = 1) {
    gate_.admit(n);
    return admitted(n);
  }
  template <class Rep, class Period>
  [[nodiscard]] timed_permit<Gate> try_admit_for(std::int64_t n, const std::chrono::duration<Rep, Period>& d) {
    return gate_.try_admit_for(n, d) ? admitted(n) : timed_permit<Gate>{};
  }

  // A timed permit for n units already admitted on the gate itself (by its admit, async_admit or
  // try_admit), timed from now: the permit gives them back at its release, sampled as any other.
  [[nodiscard]] timed_permit<Gate> adopt(std::int64_t n) noexcept { return admitted(n); }

  // A sample timed by the caller: for admissions made on the gate itself (async_admit), released
  // with the gate's note_done, which comes after this call (once the units are back, a thread
  // that waited for the gate to drain may destroy the limiter). in_flight is in the gate's units
  // (what its in_flight() said at the admission). An RTT of zero or below counts as ignored,
  // unless the work was dropped: a drop says enough without a time.
  void sample(std::chrono::nanoseconds rtt, std::int64_t in_flight, outcome how) noexcept {
    if (how == outcome::ignored || (rtt.count() <= 0 && how != outcome::dropped)) {  // nothing to learn
      core_.ignored.fetch_add(1, std::memory_order_relaxed);  // a statistic: orders nothing
      return;
    }
    if (!core_.try_take_turn()) {
      core_.skipped.fetch_add(1, std::memory_order_relaxed);  // a statistic: orders nothing
      return;
    }
    const limit_sample s{rtt, core_.in_units(in_flight), how == outcome::dropped};
    if (const std::int64_t c = core_.sample_in_turn(s)) gate_.set_cap(core_.gate_cap(c));
    core_.give_turn();
  }

  // Moves the pressure cap as gate::adjust moves a cap (ok: +1 up to max; soft, hard: -1 down to
  // min) and sets the gate's cap from it.
  void adjust(pressure p) noexcept {
    core_.take_turn();
    if (const std::int64_t c = core_.adjust_in_turn(p)) gate_.set_cap(core_.gate_cap(c));
    core_.give_turn();
  }

  // The figures, relaxed: written in turns, they order nothing for their readers.
  // Sets the gate's cap to the limiter's again, in a turn (waiting for it, as adjust): after the
  // program set the gate's cap itself for a while (to open it for a wait heavier than the limit,
  // which no sample can raise while nothing is in flight: docs/limit.md), the limiter's back,
  // with no sample's change between the read and the set.
  void refresh() noexcept {
    core_.take_turn();
    gate_.set_cap(core_.gate_cap(core_.cap.load(std::memory_order_relaxed)));  // in a turn: relaxed
    core_.give_turn();
  }

  [[nodiscard]] std::int64_t limit() const noexcept { return core_.limit.load(std::memory_order_relaxed); }
  [[nodiscard]] std::int64_t pressure_cap() const noexcept { return core_.pressure_cap.load(std::memory_order_relaxed); }
  // The effective cap, min(limit, pressure_cap) within [min, max]: the gate's cap is this times
  // the unit (at most gate_limit), unless the gate is closed (its cap then reads 0 for good).
  [[nodiscard]] std::int64_t cap() const noexcept { return core_.cap.load(std::memory_order_relaxed); }
  [[nodiscard]] limiter_stats stats() const noexcept {
    return {core_.applied.load(std::memory_order_relaxed), core_.skipped.load(std::memory_order_relaxed),
            core_.ignored.load(std::memory_order_relaxed)};
  }
  [[nodiscard]] Gate& gate() noexcept { return gate_; }

 private:
  friend class timed_permit<Gate>;
  timed_permit<Gate> admitted(std::int64_t n) noexcept {
    const std::int64_t units = n > 0 ? n : 0;  // the gate counts a weight below zero as zero
    if (!detail::times_this_admission(core_.sampling_threshold())) return timed_permit<Gate>(this, units, -1, {});
    return timed_permit<Gate>(this, units, gate_.in_flight(), std::chrono::steady_clock::now());
  }
  // The sample first, the units last: once note_done has run, a thread that waited for the
  // gate to drain may destroy the limiter and the gate (docs/gate.md, LIFETIME).
  void finish(std::int64_t units, std::int64_t in_flight, std::chrono::steady_clock::time_point start, outcome how) noexcept {
    if (in_flight < 0) {  // not timed
      gate_.note_done(units);
      return;
    }
    const auto rtt = how == outcome::ignored ? std::chrono::steady_clock::duration{0} : std::chrono::steady_clock::now() - start;
    sample(std::chrono::duration_cast<std::chrono::nanoseconds>(rtt), in_flight, how);
    gate_.note_done(units);
  }

  Gate& gate_;
  detail::limit_core core_;
};

}  // namespace sluice
