// mutex_pool: the pool's semantics over one std::mutex and sorted shelves. The baseline every
// benchmark compares with and the reference model the tests check sluice::pool against. Its
// state and its take are in mutex_pool.hpp.
#include <mutex>

#include "exact_class.hpp"
#include "mutex_pool.hpp"
#include "pool/memory.hpp"
#include "sluice/pool.hpp"

namespace sluice {

mutex_pool::mutex_pool(pool_options options) : state_(std::make_unique<state>(options)) {}

mutex_pool::~mutex_pool() { trim(); }

buffer mutex_pool::take(std::size_t size) { return take_from(size, /*exact=*/false); }

buffer mutex_pool::acquire(std::size_t size) {
  if (buffer b = take(size)) return b;
  buffer fresh(size, state_->classes.fresh_capacity(size));
  std::lock_guard lock(state_->mutex);
  ++state_->row_of_size(size).fresh;
  return fresh;
}

void* detail::exact_class::allocate(mutex_pool& p, std::size_t size) {
  buffer b = take(p, size);
  if (!b) {
    b = buffer(size, p.state_->classes.fresh_capacity(size));
    std::lock_guard lock(p.state_->mutex);
    ++p.state_->row_of_size(size).fresh;
  }
  return detail::buffer_access::release(b).data;
}

void detail::exact_class::deallocate(mutex_pool& p, void* block, std::size_t size) noexcept {
  const detail::held h{static_cast<std::byte*>(block), p.state_->classes.fresh_capacity(size)};
  p.retire(detail::buffer_access::make(h, size));
}

void mutex_pool::retire(buffer&& b) noexcept {
  if (!b) return;
  const detail::held h = detail::buffer_access::release(b);
  {
    std::lock_guard lock(state_->mutex);
    state& s = *state_;
    if (s.enabled && h.capacity <= s.classes.ceiling() && s.stats.retained < s.bound) {
      try {
        s.shelves.put(s.classes.of(h.capacity), h, s.decay.steps());
        ++s.rows[s.classes.of(h.capacity)].retired;
        ++s.stats.retained;
        s.stats.retained_bytes += h.capacity;
        return;
      } catch (const std::bad_alloc&) {  // no room to record it: drop it, as at the bound
      }
    }
    pool_class_stats& row = s.row_of_size(h.capacity);
    ++(h.capacity > s.classes.ceiling() ? row.dropped_over_ceiling : !s.enabled ? row.dropped_off : row.dropped_at_bound);
  }
  detail::free_bytes(h.data);
}

void mutex_pool::set_enabled(bool on) noexcept {
  {
    std::lock_guard lock(state_->mutex);
    state_->enabled = on;
  }
  if (!on) trim();
}

bool mutex_pool::enabled() const noexcept {
  std::lock_guard lock(state_->mutex);
  return state_->enabled;
}

std::size_t mutex_pool::retained() const noexcept {
  std::lock_guard lock(state_->mutex);
  return state_->stats.retained;
}

pool_stats mutex_pool::stats() const noexcept {
  std::lock_guard lock(state_->mutex);
  pool_stats s = state_->stats;
  for (const pool_class_stats& r : state_->rows) {
    s.hits += r.hits;
    s.misses += r.misses;
    s.retired += r.retired;
    s.dropped += r.dropped_at_bound + r.dropped_over_ceiling + r.dropped_off;
  }
  return s;
}

std::vector<pool_class_stats> mutex_pool::class_stats() const {
  std::lock_guard lock(state_->mutex);
  const state& s = *state_;
  std::vector<pool_class_stats> rows = s.rows;
  for (std::size_t c = 0; c < rows.size(); ++c) {
    const bool cls = c < s.classes.count();  // else the last row, above the ceiling
    rows[c].capacity = cls ? s.classes.size(c) : SIZE_MAX;
    rows[c].retained = cls ? s.shelves.count(c) : 0;
  }
  return rows;
}

void mutex_pool::trim() noexcept {
  std::lock_guard lock(state_->mutex);
  state_->free_largest(SIZE_MAX);
}

void mutex_pool::trim(double share) noexcept {
  if (!(share > 0)) return;  // NaN too: nothing
  if (share >= 1) return trim();
  std::lock_guard lock(state_->mutex);
  state_->free_largest(detail::share_of(state_->stats.retained_bytes, share));
}

bool mutex_pool::decay(std::chrono::steady_clock::time_point now) noexcept {
  std::size_t freed = 0;
  {
    std::lock_guard lock(state_->mutex);
    state& s = *state_;
    if (!s.decay.claim(now)) return false;
    const std::uint32_t step = s.decay.begin();
    for (std::size_t c = 0; c < s.classes.count(); ++c) {
      const auto [n, b] = s.shelves.free_stale_of(c, step);
      freed += s.count_freed(c, n, b, &pool_class_stats::decayed);
    }
  }
  if (freed > 0) detail::return_free_pages();
  return true;
}

}  // namespace sluice
