// When a pool's decay steps fall due (docs/pool.md, DECAY), for both twins.
//
// A pool with decay D takes a step every D / 2, driven by the program's calls of decay(): the
// first is due D / 2 after the pool was made, each later one D / 2 after the one before ran. What
// the pool retains carries the number of the steps begun when it was last used; a step frees what
// carries a number two or more below its own, which has sat unused since before the step before
// it ran: at least D / 2, and at most D + twice the calls' period. (Due times kept on a grid
// instead would let a late step be followed at once by the next, which would then free what was
// used just before the late one.)
#pragma once

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>

#include "sluice/detail/atomic.hpp"

namespace sluice::detail {

class decay_schedule {
 public:
  using clock = std::chrono::steady_clock;

  decay_schedule(std::chrono::milliseconds decay, clock::time_point now) noexcept
      : half_ns_(half_of(decay)), due_ns_(ns(now) + half_ns_) {}  // a steady clock's now: far from its end

  bool on() const noexcept { return half_ns_ > 0; }

  // Whether a step is due at `now`; if so, claims it. Under the caller's lock (one step at a time).
  // A `now` so far ahead that the next step's time passes the clock's range (time_point::max())
  // leaves no step due again.
  bool claim(clock::time_point now) noexcept {
    const std::int64_t t = ns(now);
    if (!on() || t < due_ns_ || due_ns_ == never) return false;
    due_ns_ = t >= never - half_ns_ ? never : t + half_ns_;
    return true;
  }
  // Begins the step claimed: answers its number, which every later stamp carries. Under the same
  // lock.
  std::uint32_t begin() noexcept {
    const std::uint32_t next = steps_.load(std::memory_order_relaxed) + 1;  // its one writer
    steps_.store(next, std::memory_order_relaxed);
    return next;
  }
  // The steps begun: what a buffer kept now is stamped with. Relaxed: a stale number only makes
  // a buffer look used later than it was, so it stays a step longer.
  std::uint32_t steps() const noexcept { return steps_.load(std::memory_order_relaxed); }

  // Whether something stamped `stamp` has sat unused since before the step before `step`. The
  // numbers wrap: an age that is a multiple of 2^32, or one more, waits for the next step.
  static bool stale(std::uint32_t stamp, std::uint32_t step) noexcept { return static_cast<std::uint32_t>(step - stamp) >= 2; }

 private:
  static constexpr std::int64_t most_ms = std::int64_t{1} << 40;
  static constexpr std::int64_t never = INT64_MAX;  // a due time past the clock's range
  static std::int64_t half_of(std::chrono::milliseconds d) noexcept {
    const std::int64_t ms = std::clamp<std::int64_t>(d.count(), 0, most_ms);
    return ms * 1'000'000 / 2;
  }
  static std::int64_t ns(clock::time_point t) noexcept {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
  }

  const std::int64_t half_ns_;  // 0: off
  std::int64_t due_ns_;         // the next step's time, on the clock's scale
  detail::atomic<std::uint32_t> steps_{0};
};

}  // namespace sluice::detail
