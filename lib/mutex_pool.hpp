// mutex_pool's state, and its take, inline: lib/mutex_pool.cpp's take and acquire and the exact
// takes of exact_class.hpp (pool_resource's allocate, and the tests') all inline it. Not
// installed.
#pragma once

#include <cstddef>
#include <mutex>
#include <vector>

#include "pool/decay.hpp"
#include "pool/fork.hpp"
#include "pool/shelves.hpp"
#include "pool/size_classes.hpp"
#include "sluice/buffer.hpp"
#include "sluice/pool.hpp"

namespace sluice {

struct mutex_pool::state final : detail::fork_aware {
  explicit state(const pool_options& o)
      : classes(o.ceiling), bound(o.bound), enabled(o.enabled), decay(o.decay, std::chrono::steady_clock::now()),
        shelves(classes.count()) {
    join();  // last: a fork may lock this state from here on
  }
  ~state() { leave(); }

  // A fork's child never inherits the mutex locked by a thread it does not have.
  void lock_for_fork() noexcept override { mutex.lock(); }
  void unlock_in_parent() noexcept override { mutex.unlock(); }
  void unlock_in_child() noexcept override { mutex.unlock(); }

  const detail::size_classes classes;
  const std::size_t bound;
  mutable std::mutex mutex;
  bool enabled;             // the rest is guarded by mutex
  detail::decay_schedule decay;
  detail::shelves shelves;
  pool_stats stats;         // retained and retained_bytes kept current; the counts are the rows'
  // Per class, and a last row for what lies above the ceiling: the counts (retained is
  // class_stats()'s to work out).
  std::vector<pool_class_stats> rows = std::vector<pool_class_stats>(classes.count() + 1);
  pool_class_stats& row_of_size(std::size_t n) { return rows[n <= classes.ceiling() ? classes.of(n) : classes.count()]; }

  // Under mutex: n retained buffers of class c, b bytes in all, were freed, counted as `why`
  // (trimmed or decayed); answers b.
  std::size_t count_freed(std::size_t c, std::size_t n, std::size_t b, std::uint64_t pool_class_stats::*why) noexcept {
    rows[c].*why += n;
    stats.retained -= n;
    stats.retained_bytes -= b;
    return b;
  }

  // Under mutex: frees buffers class by class, the largest first, until their bytes reach
  // `bytes` (trim and trim(share), as sluice::pool's).
  void free_largest(std::size_t bytes) noexcept {
    std::size_t freed = 0;
    for (std::size_t c = classes.count(); c-- > 0 && freed < bytes;) {
      const auto [n, b] = shelves.free_largest_of(c, bytes - freed);
      freed += count_freed(c, n, b, &pool_class_stats::trimmed);
    }
  }
};

// An exact take looks only at the class of size, and only at its own-size buffers.
[[gnu::always_inline]] inline buffer mutex_pool::take_from(std::size_t size, bool exact) {
  std::lock_guard lock(state_->mutex);
  state& s = *state_;
  if (s.enabled && size <= s.classes.ceiling()) {
    const std::size_t first = s.classes.of(size), end = exact ? first + 1 : s.classes.count();
    for (std::size_t c = first; c < end; ++c) {
      if (s.shelves.empty(c)) continue;
      if (const auto h = exact ? s.shelves.take(c, s.classes.size(c)) : s.shelves.take(c, size)) {
        ++s.rows[c].hits;
        --s.stats.retained;
        s.stats.retained_bytes -= h->capacity;
        return detail::buffer_access::make(*h, size);
      }
    }
  }
  ++s.row_of_size(size).misses;
  return {};
}

}  // namespace sluice
