// mutex_pool: the pool's semantics over one std::mutex and sorted shelves. The baseline every
// benchmark compares with and the reference model the tests check sluice::pool against.
#include <mutex>

#include "exact_class.hpp"
#include "pool/fork.hpp"
#include "pool/memory.hpp"
#include "pool/shelves.hpp"
#include "pool/size_classes.hpp"
#include "sluice/pool.hpp"

namespace sluice {

struct mutex_pool::state final : detail::fork_aware {
  explicit state(const pool_options& o)
      : classes(o.ceiling), bound(o.bound), enabled(o.enabled), shelves(classes.count()) {
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
  detail::shelves shelves;
  pool_stats stats;         // retained and retained_bytes kept current
};

mutex_pool::mutex_pool(pool_options options) : state_(std::make_unique<state>(options)) {}

mutex_pool::~mutex_pool() { trim(); }

// An exact take looks only at the class of size, and only at its own-size buffers. Out of line:
// the tests' exact take (lib/exact_class.hpp) calls it from their own code.
buffer mutex_pool::take_from(std::size_t size, bool exact) {
  std::lock_guard lock(state_->mutex);
  state& s = *state_;
  if (s.enabled && size <= s.classes.ceiling()) {
    const std::size_t first = s.classes.of(size), end = exact ? first + 1 : s.classes.count();
    for (std::size_t c = first; c < end; ++c) {
      if (s.shelves.empty(c)) continue;
      if (const auto h = exact ? s.shelves.take(c, s.classes.size(c)) : s.shelves.take(c, size)) {
        ++s.stats.hits;
        --s.stats.retained;
        s.stats.retained_bytes -= h->capacity;
        return detail::buffer_access::make(*h, size);
      }
    }
  }
  ++s.stats.misses;
  return {};
}

buffer mutex_pool::take(std::size_t size) { return take_from(size, /*exact=*/false); }

buffer mutex_pool::acquire(std::size_t size) {
  if (buffer b = take(size)) return b;
  return buffer(size, state_->classes.fresh_capacity(size));
}

void* detail::exact_class::allocate(mutex_pool& p, std::size_t size) {
  buffer b = p.take_from(size, /*exact=*/true);
  if (!b) b = buffer(size, p.state_->classes.fresh_capacity(size));
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
        s.shelves.put(s.classes.of(h.capacity), h);
        ++s.stats.retired;
        ++s.stats.retained;
        s.stats.retained_bytes += h.capacity;
        return;
      } catch (const std::bad_alloc&) {  // no room to record it: drop it, as at the bound
      }
    }
    ++s.stats.dropped;
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
  return state_->stats;
}

void mutex_pool::trim() noexcept {
  std::lock_guard lock(state_->mutex);
  state_->shelves.free_all();
  state_->stats.retained = 0;
  state_->stats.retained_bytes = 0;
}

}  // namespace sluice
