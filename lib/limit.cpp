// The limit algorithms and what a limiter keeps apart from its gate's type (sluice/limit.hpp,
// docs/limit.md). The algorithms are single-threaded values: a limiter calls them in its turn.
#include "sluice/limit.hpp"

#include "pool/fork.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <random>
#include <thread>

namespace sluice {

namespace {
// floor(log10 limit), at least 1: Vegas' step (1 up to a limit of 99, 2 up to 999, ...).
// Of the limit's whole part, as the source takes it of (int) limit: 99.99... steps by 1, not 2.
double log10_step(double limit) noexcept { return std::max(1.0, std::floor(std::log10(std::max(std::floor(limit), 1.0)))); }

std::int64_t clamp_limit(std::int64_t v, std::int64_t lo, std::int64_t hi) noexcept {
  return std::clamp(v, std::clamp<std::int64_t>(lo, 1, gate_limit), std::clamp<std::int64_t>(hi, std::max<std::int64_t>(lo, 1), gate_limit));
}
double clamp_limit(double v, std::int64_t lo, std::int64_t hi) noexcept {
  const std::int64_t l = std::clamp<std::int64_t>(lo, 1, gate_limit);
  return std::clamp(v, static_cast<double>(l), static_cast<double>(std::clamp<std::int64_t>(hi, l, gate_limit)));
}
}  // namespace

// ---- AIMD ----

aimd_limit::aimd_limit(const options& o) noexcept : o_(o) {
  o_.backoff_ratio = std::isnan(o.backoff_ratio) ? 0.9 : std::clamp(o.backoff_ratio, 0.5, std::nextafter(1.0, 0.0));
  o_.min_limit = std::clamp<std::int64_t>(o.min_limit, 1, gate_limit);
  o_.max_limit = std::clamp<std::int64_t>(o.max_limit, o_.min_limit, gate_limit);
  o_.timeout = std::max(o.timeout, std::chrono::nanoseconds{1});
  limit_ = clamp_limit(o.initial_limit, o_.min_limit, o_.max_limit);
}

std::int64_t aimd_limit::update(const limit_sample& s) noexcept {
  if (s.rtt.count() <= 0 && !s.dropped) return limit_;  // no time measured: nothing to learn from
  if (s.dropped || s.rtt > o_.timeout) {
    const auto cut = static_cast<std::int64_t>(static_cast<double>(limit_) * o_.backoff_ratio);
    limit_ = std::min(limit_ - 1, cut);
  } else if (static_cast<double>(s.in_flight) * 2 >= static_cast<double>(limit_)) {  // no overflow
    limit_ = limit_ + 1;
  }
  limit_ = clamp_limit(limit_, o_.min_limit, o_.max_limit);
  return limit_;
}

// ---- Vegas ----

vegas_limit::vegas_limit(const options& o) : o_(o), random_(o.seed != 0 ? o.seed : std::random_device{}()) {
  o_.max_limit = std::clamp<std::int64_t>(o.max_limit, 1, gate_limit);
  o_.smoothing = std::isnan(o.smoothing) ? 1.0 : std::clamp(o.smoothing, 0.0, 1.0);
  o_.probe_multiplier = std::isnan(o.probe_multiplier) ? 30.0 : std::max(o.probe_multiplier, 0.0);
  // Ordered, threshold <= alpha <= beta, so that the bands below do not overlap.
  constexpr int most = 1 << 20;
  o_.threshold = std::clamp(o.threshold, 0, most);
  o_.alpha = std::clamp(o.alpha, o_.threshold, most);
  o_.beta = std::clamp(o.beta, o_.alpha, most);
  limit_ = clamp_limit(static_cast<double>(o.initial_limit), 1, o_.max_limit);
  probe_jitter_ = next_jitter();
}

// Uniform in [0.5, 1), from a splitmix64 step: the jitter spreads the probes of many limiters.
double vegas_limit::next_jitter() noexcept {
  std::uint64_t z = (random_ += 0x9e3779b97f4a7c15);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9;
  z = (z ^ (z >> 27)) * 0x94d049bb133111eb;
  z ^= z >> 31;
  return 0.5 + 0.5 * static_cast<double>(z >> 11) / static_cast<double>(std::uint64_t{1} << 53);
}

std::int64_t vegas_limit::update(const limit_sample& s) noexcept {
  if (s.rtt.count() <= 0) {  // no time measured: a drop still takes a step away
    if (s.dropped) limit_ = (1 - o_.smoothing) * limit_ + o_.smoothing * clamp_limit(limit_ - log10_step(limit_), 1, o_.max_limit);
    return limit();
  }
  if (probe_jitter_ * o_.probe_multiplier * limit_ <= static_cast<double>(++probe_count_)) {
    // A probe: the lowest RTT is taken again from this sample, so that a service that has
    // become slower for good is not read as queueing for ever.
    probe_jitter_ = next_jitter();
    probe_count_ = 0;
    rtt_noload_ = s.rtt;
    return limit();
  }
  if (rtt_noload_.count() == 0 || s.rtt < rtt_noload_) {
    rtt_noload_ = s.rtt;
    return limit();
  }
  const double step = log10_step(limit_);
  double next;
  if (s.dropped) {
    next = limit_ - step;
  } else if (static_cast<double>(s.in_flight) * 2 < limit_) {
    return limit();  // not using the limit: no evidence to grow it
  } else {
    const double queue = std::ceil(limit_ * (1.0 - static_cast<double>(rtt_noload_.count()) / static_cast<double>(s.rtt.count())));
    if (queue <= o_.threshold * step) {
      next = limit_ + o_.beta * step;  // no queue: grow fast
    } else if (queue < o_.alpha * step) {
      next = limit_ + step;
    } else if (queue > o_.beta * step) {
      next = limit_ - step;
    } else {
      return limit();
    }
  }
  next = clamp_limit(next, 1, o_.max_limit);
  limit_ = (1 - o_.smoothing) * limit_ + o_.smoothing * next;
  return limit();
}

// ---- Gradient2 ----

gradient2_limit::gradient2_limit(const options& o) noexcept : o_(o) {
  o_.min_limit = std::clamp<std::int64_t>(o.min_limit, 1, gate_limit);
  o_.max_limit = std::clamp<std::int64_t>(o.max_limit, o_.min_limit, gate_limit);
  o_.smoothing = std::isnan(o.smoothing) ? 0.2 : std::clamp(o.smoothing, 0.0, 1.0);
  o_.queue_size = std::isfinite(o.queue_size) ? std::clamp(o.queue_size, 0.0, static_cast<double>(gate_limit)) : 4.0;
  o_.long_window = std::clamp(o.long_window, 1, 1 << 30);
  o_.rtt_tolerance = std::isnan(o.rtt_tolerance) ? 1.5 : std::clamp(o.rtt_tolerance, 1.0, 1e9);
  limit_ = clamp_limit(static_cast<double>(o.initial_limit), o_.min_limit, o_.max_limit);
}

std::int64_t gradient2_limit::update(const limit_sample& s) noexcept {
  if (s.rtt.count() <= 0) return limit();
  const auto rtt = static_cast<double>(s.rtt.count());
  constexpr int warm_up = 10;
  if (warmed_ < warm_up) {
    warm_sum_ += rtt;
    long_rtt_ = warm_sum_ / ++warmed_;  // the plain mean of the first samples, whatever cut it
  } else {
    const double factor = 2.0 / (static_cast<double>(o_.long_window) + 1);
    long_rtt_ = long_rtt_ * (1 - factor) + rtt * factor;
  }
  const double long_rtt = long_rtt_;
  // After a long overload the long average lags far above the present: bring it down faster.
  if (long_rtt_ / rtt > 2) long_rtt_ *= 0.95;
  if (static_cast<double>(s.in_flight) < limit_ / 2) return limit();
  const double gradient = std::clamp(o_.rtt_tolerance * long_rtt / rtt, 0.5, 1.0);
  const double next = limit_ * gradient + o_.queue_size;
  limit_ = clamp_limit(limit_ * (1 - o_.smoothing) + next * o_.smoothing, o_.min_limit, o_.max_limit);
  return limit();
}

// ---- the limiter's core ----

namespace detail {

limit_core::limit_core(limit_algorithm a, limiter_options o) noexcept
    : algorithm(std::move(a)),
      options{std::clamp<std::int64_t>(o.min, 1, gate_limit), std::clamp<std::int64_t>(o.max, std::clamp<std::int64_t>(o.min, 1, gate_limit), gate_limit),
              std::clamp<std::int64_t>(o.window, 1, std::int64_t{1} << 20), std::clamp<std::int64_t>(o.unit, 1, gate_limit),
              std::clamp<std::int64_t>(o.sample_every, 1, std::int64_t{1} << 20)} {
  fork_generation();  // the fork handlers installed before the turn is first taken
  // Relaxed, as every figure below: the limiter is not shared with another thread yet.
  limit.store(std::visit([](const auto& alg) { return alg.limit(); }, algorithm), std::memory_order_relaxed);
  pressure_cap.store(options.max, std::memory_order_relaxed);
  cap.store(effective(), std::memory_order_relaxed);
}

// In a turn (or before the limiter is shared), where the turn orders every figure: relaxed.
std::int64_t limit_core::effective() const noexcept {
  return std::clamp(std::min(limit.load(std::memory_order_relaxed), pressure_cap.load(std::memory_order_relaxed)), options.min, options.max);
}

// The turn: (T1) taking it, an acquire, synchronizes with (T2) the previous holder's giving it
// back, a release, so each turn sees the algorithm's state as the last one left it. Held, it names
// the fork generation of its holder's process: a forked child, whose generation is one more, takes
// over a turn that a thread of its parent held when the parent forked (that thread is not in the
// child), and clears the cap it publishes so that its first change sets the gate's cap again.
bool limit_core::try_take_turn() noexcept {
  const std::uint64_t mine = fork_generation() + 1;
  // A load first: while another thread holds the turn, a sample reads the line and goes,
  // rather than taking it exclusive from the holder.
  std::uint64_t seen = turn.load(std::memory_order_relaxed);
  if (seen == mine) return false;
  if (!turn.compare_exchange_strong(seen, mine, std::memory_order_acquire, std::memory_order_relaxed)) return false;  // (T1) turn taken
  if (seen != 0) cap.store(0, std::memory_order_relaxed);  // taken over in a child: read in this turn only
  return true;
}

void limit_core::take_turn() noexcept {
  while (!try_take_turn()) std::this_thread::yield();
}

void limit_core::give_turn() noexcept { turn.store(0, std::memory_order_release); }  // (T2) turn given

namespace {
// The effective cap if it moved, 0 if not; in a turn (relaxed: the turn orders the figures).
std::int64_t publish(limit_core& core) noexcept {
  const std::int64_t c = core.effective();
  if (c == core.cap.load(std::memory_order_relaxed)) return 0;
  core.cap.store(c, std::memory_order_relaxed);
  return c;
}
}  // namespace

std::int64_t limit_core::gate_cap(std::int64_t c) const noexcept {
  return c > gate_limit / options.unit ? gate_limit : c * options.unit;
}

std::int64_t limit_core::in_units(std::int64_t in_flight) const noexcept {
  return in_flight <= 0 ? 0 : (in_flight - 1) / options.unit + 1;  // rounded up, with no overflow
}

std::int64_t limit_core::sample_in_turn(const limit_sample& s) noexcept {
  applied.store(applied.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);  // one writer: the turn's
  constexpr std::int64_t most = INT64_MAX;  // the sum saturates: RTTs come from callers too
  const std::int64_t rtt = std::max<std::int64_t>(s.rtt.count(), 0), sum = window_rtt_ns;  // a drop may come untimed
  window_rtt_ns = rtt > most - sum ? most : sum + rtt;
  window_in_flight = std::max<std::int64_t>(window_in_flight, s.in_flight);
  window_dropped = window_dropped || s.dropped;
  const std::int64_t count = window_count + 1;
  if (count < options.window) {
    window_count = count;
    return 0;
  }
  const limit_sample taken{std::chrono::nanoseconds{window_rtt_ns / count}, window_in_flight, window_dropped};
  window_rtt_ns = 0;
  window_in_flight = 0;
  window_dropped = false;
  window_count = 0;
  limit.store(std::visit([&](auto& alg) { return alg.update(taken); }, algorithm), std::memory_order_relaxed);  // in a turn
  return publish(*this);
}

std::int64_t limit_core::adjust_in_turn(pressure p) noexcept {
  const std::int64_t now = pressure_cap.load(std::memory_order_relaxed);  // in a turn, as the store
  pressure_cap.store(p == pressure::ok ? std::min(now + 1, options.max) : std::max(now - 1, options.min), std::memory_order_relaxed);
  return publish(*this);
}

}  // namespace detail
}  // namespace sluice
