// sluice::pool (caches on and off) and mutex_pool, held to each other and to the contract.
// A part of the differential fuzz target (differential.cpp, its only includer).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <memory_resource>
#include <new>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "check.hpp"
#include "decoder.hpp"
#include "spec.hpp"
#include "sluice/buffer.hpp"
#include "sluice/pool.hpp"

namespace fuzz {

using sluice::buffer;
using sluice::pool_options;
using sluice::pool_stats;

// ---- the pools ----------------------------------------------------------------------------

constexpr int lanes = 3;  // 0: pool, thread caches on; 1: pool, caches off; 2: mutex_pool

// A pool and what it is known to hold, by address.
template <class P>
struct lane {
  std::unique_ptr<P> pool;
  std::map<const std::byte*, std::size_t> kept;  // address -> capacity
};

struct pools {
  pool_options options;
  lane<sluice::pool> cached, uncached;
  lane<sluice::mutex_pool> model;
  std::multiset<std::size_t> spec_kept;  // capacities the contract says are retained
  bool spec_enabled = true;
  pool_stats spec;                       // hits, misses, retired, dropped as the contract counts

  void build(const pool_options& o) {
    cached = {};
    uncached = {};
    model = {};
    options = o;
    pool_options on = o, off = o;
    on.thread_cache = true;
    off.thread_cache = false;
    cached.pool = std::make_unique<sluice::pool>(on);
    uncached.pool = std::make_unique<sluice::pool>(off);
    model.pool = std::make_unique<sluice::mutex_pool>(o);
    spec_kept.clear();
    spec_enabled = o.enabled;
    spec = {};
  }
};

// Three buffers answered alike, one per lane, held by the harness.
struct held {
  buffer b[lanes];
};

inline std::size_t bytes_of(const std::vector<held>& hs) {
  std::size_t n = 0;
  for (const auto& h : hs) n += h.b[2].capacity();
  return n;
}

// The model against the contract; answers the stats it read.
template <class P>
pool_stats check_lane(const lane<P>& l, const pools& ps) {
  const pool_stats s = l.pool->stats();
  SAME(s.hits, ps.spec.hits);
  SAME(s.misses, ps.spec.misses);
  SAME(s.retired, ps.spec.retired);
  SAME(s.dropped, ps.spec.dropped);
  SAME(s.retained, ps.spec_kept.size());
  std::size_t bytes = 0;
  for (const std::size_t c : ps.spec_kept) bytes += c;
  SAME(s.retained_bytes, bytes);
  SAME(l.pool->retained(), ps.spec_kept.size());
  SAME(l.pool->enabled(), ps.spec_enabled);
  SAME(l.kept.size(), ps.spec_kept.size());
  return s;
}

inline void check_pools(const pools& ps) {
  // The model against the contract, then each pool field by field against the model.
  const pool_stats m = check_lane(ps.model, ps);
  const std::size_t retained = ps.model.pool->retained();
  const bool enabled = ps.model.pool->enabled();
  const auto same_as_model = [&](const auto& l) {
    const pool_stats s = l.pool->stats();
    SAME(s.hits, m.hits);
    SAME(s.misses, m.misses);
    SAME(s.retired, m.retired);
    SAME(s.dropped, m.dropped);
    SAME(s.retained, m.retained);
    SAME(s.retained_bytes, m.retained_bytes);
    SAME(l.pool->retained(), retained);
    SAME(l.pool->enabled(), enabled);
    SAME(l.kept.size(), ps.spec_kept.size());
  };
  same_as_model(ps.cached);
  same_as_model(ps.uncached);
}

// An answered buffer: its shape, its memory (touched at both ends, so AddressSanitizer sees a
// capacity the allocation does not have), and, for a hit, that the pool held exactly it.
template <class P>
void check_answer(lane<P>& l, buffer& b, std::size_t n, std::optional<std::size_t> hit_capacity,
                  std::size_t fresh_capacity) {
  ENSURE(static_cast<bool>(b));
  SAME(b.size(), n);
  SAME(b.bytes().size(), n);
  SAME(reinterpret_cast<std::uintptr_t>(b.data()) % 16, 0u);
  if (hit_capacity) {
    SAME(b.capacity(), *hit_capacity);
    const auto it = l.kept.find(b.data());
    ENSURE(it != l.kept.end());  // the pool answered memory it never kept
    SAME(it->second, b.capacity());
    l.kept.erase(it);
  } else {
    SAME(b.capacity(), fresh_capacity);
    ENSURE(l.kept.find(b.data()) == l.kept.end());  // fresh memory the pool still holds
  }
  if (b.capacity() > 0) {
    b.data()[0] = std::byte{0xA5};
    b.data()[b.capacity() - 1] = std::byte{0x5A};
  }
}

// What the contract says take(n) answers: the smallest retained capacity >= n.
inline std::optional<std::size_t> spec_take(pools& ps, std::size_t n) {
  if (ps.spec_enabled && n <= ps.options.ceiling) {
    const auto it = ps.spec_kept.lower_bound(n);
    if (it != ps.spec_kept.end()) {
      const std::size_t c = *it;
      ps.spec_kept.erase(it);
      ++ps.spec.hits;
      return c;
    }
  }
  ++ps.spec.misses;
  return std::nullopt;
}

inline void op_take(pools& ps, std::vector<held>& hs, std::size_t n) {
  TRACE("take(%zu)\n", n);
  const auto hit = spec_take(ps, n);
  held h{{ps.cached.pool->take(n), ps.uncached.pool->take(n), ps.model.pool->take(n)}};
  for (const buffer& b : h.b) SAME(static_cast<bool>(b), hit.has_value());
  if (!hit) return;
  check_answer(ps.cached, h.b[0], n, hit, 0);
  check_answer(ps.uncached, h.b[1], n, hit, 0);
  check_answer(ps.model, h.b[2], n, hit, 0);
  if (hs.size() < max_held) hs.push_back(std::move(h));
}

inline void op_acquire(pools& ps, std::vector<held>& hs, std::size_t n) {
  const bool impossible = n > ptrdiff_max;
  const std::size_t fresh_bound = impossible ? 0 : n + n / 4 + 16;
  const std::size_t live = bytes_of(hs) + ps.model.pool->stats().retained_bytes;
  if (!impossible && (n > max_alloc || live + fresh_bound > budget)) return op_take(ps, hs, n);
  TRACE("acquire(%zu)\n", n);
  const auto hit = spec_take(ps, n);
  held h;
  bool threw[lanes] = {};
  const auto call = [&](int i, auto& p) {
    try {
      h.b[i] = p.acquire(n);
    } catch (const std::bad_alloc&) {
      threw[i] = true;
    }
  };
  call(0, *ps.cached.pool);
  call(1, *ps.uncached.pool);
  call(2, *ps.model.pool);
  const bool spec_throws = !hit && impossible;
  for (int i = 0; i < lanes; ++i) {
    SAME(threw[i], spec_throws);
    SAME(static_cast<bool>(h.b[i]), !spec_throws);
  }
  if (spec_throws) return;
  const std::size_t fresh = hit ? 0 : spec_fresh_capacity(n, ps.options.ceiling);
  check_answer(ps.cached, h.b[0], n, hit, fresh);
  check_answer(ps.uncached, h.b[1], n, hit, fresh);
  check_answer(ps.model, h.b[2], n, hit, fresh);
  if (hs.size() < max_held) hs.push_back(std::move(h));
}

// Retires the three buffers of h, one into each pool; all must be kept or dropped alike.
inline void retire(pools& ps, held& h) {
  const std::size_t capacity = h.b[2].capacity();
  const bool empty = !h.b[2];
  for (const buffer& b : h.b) {
    SAME(static_cast<bool>(b), !empty);
    SAME(b.capacity(), capacity);
  }
  TRACE("  retire(capacity %zu%s)\n", capacity, empty ? ", empty" : "");
  bool keep = false;
  if (!empty) {
    keep = ps.spec_enabled && capacity <= ps.options.ceiling && ps.spec_kept.size() < ps.options.bound;
    if (keep) {
      ps.spec_kept.insert(capacity);
      ++ps.spec.retired;
    } else {
      ++ps.spec.dropped;
    }
  }
  const auto one = [&](auto& l, buffer& b) {
    const std::byte* data = b.data();
    l.pool->retire(std::move(b));
    ENSURE(!b);  // NOLINT: retire takes the buffer, kept or not
    if (keep) ENSURE(l.kept.emplace(data, capacity).second);
  };
  one(ps.cached, h.b[0]);
  one(ps.uncached, h.b[1]);
  one(ps.model, h.b[2]);
}

inline void forget_kept(pools& ps) {
  ps.cached.kept.clear();
  ps.uncached.kept.clear();
  ps.model.kept.clear();
  ps.spec_kept.clear();
}

// One pool call (op % 13, 0 to 11), applied to the three lanes and to the oracle.
inline void pool_op(pools& ps, std::vector<held>& hs, reader& r, std::uint8_t op) {
  switch (op % 13) {
    case 0:
      op_take(ps, hs, pick_size(r, ps.options.ceiling));
      break;
    case 1:
    case 2:
      op_acquire(ps, hs, pick_size(r, ps.options.ceiling));
      break;
    case 3:
    case 4: {  // retire a held buffer (one these pools answered, or an earlier pool did)
      const std::uint8_t x = r.byte();
      if (hs.empty()) break;
      const std::size_t i = x % hs.size();
      TRACE("retire(held %zu)\n", i);
      retire(ps, hs[i]);
      hs.erase(hs.begin() + static_cast<std::ptrdiff_t>(i));
      break;
    }
    case 5: {  // retire a fresh buffer(size, capacity)
      const std::size_t size = pick_size(r, ps.options.ceiling);
      const std::size_t capacity = pick_size(r, ps.options.ceiling);
      const std::size_t real = std::max(size, capacity);
      TRACE("retire(buffer(%zu, %zu))\n", size, capacity);
      if (real > ptrdiff_max) {  // the documented answer: bad_alloc, whichever is the larger
        bool threw = false;
        try {
          buffer b(size, capacity);
        } catch (const std::bad_alloc&) {
          threw = true;
        }
        ENSURE(threw);
        break;
      }
      if (real > max_alloc || bytes_of(hs) + ps.model.pool->stats().retained_bytes + real > budget) break;
      held h{{buffer(size, capacity), buffer(size, capacity), buffer(size, capacity)}};
      for (const buffer& b : h.b) {
        SAME(b.size(), size);
        SAME(b.capacity(), real);
      }
      retire(ps, h);
      break;
    }
    case 6: {  // retire an empty buffer: a moved-from one, or one that never held anything
      held h;
      const std::uint8_t kind = r.byte(), x = r.byte();
      if (!hs.empty() && kind % 2 == 0) {
        const std::size_t i = x % hs.size();
        TRACE("retire(moved-from held %zu)\n", i);
        held moved{{std::move(hs[i].b[0]), std::move(hs[i].b[1]), std::move(hs[i].b[2])}};
        retire(ps, hs[i]);  // the moved-from handles: ignored
        hs[i] = std::move(moved);
      } else {
        TRACE("retire(buffer())\n");
        retire(ps, h);
      }
      break;
    }
    case 7: {
      const bool on = r.byte() % 2 != 0;
      TRACE("set_enabled(%d)\n", on);
      ps.cached.pool->set_enabled(on);
      ps.uncached.pool->set_enabled(on);
      ps.model.pool->set_enabled(on);
      ps.spec_enabled = on;
      if (!on) forget_kept(ps);  // set_enabled(false) trims
      break;
    }
    case 8:
      TRACE("trim()\n");
      ps.cached.pool->trim();
      ps.uncached.pool->trim();
      ps.model.pool->trim();
      forget_kept(ps);
      break;
    case 9:
      TRACE("retained(), stats()\n");  // checked after every call; here on their own
      SAME(ps.cached.pool->retained(), ps.model.pool->retained());
      SAME(ps.uncached.pool->retained(), ps.model.pool->retained());
      break;
    case 10: {  // let a held buffer go without retiring it
      const std::uint8_t x = r.byte();
      if (hs.empty()) break;
      const std::size_t i = x % hs.size();
      TRACE("~buffer(held %zu)\n", i);
      hs.erase(hs.begin() + static_cast<std::ptrdiff_t>(i));
      break;
    }
    case 11: {  // self-move of held buffers: each must keep its memory
      const std::uint8_t x = r.byte();
      if (hs.empty()) break;
      held& h = hs[x % hs.size()];
      TRACE("self-move(held)\n");
      for (buffer& b : h.b) {
        const std::byte* data = b.data();
        const std::size_t size = b.size(), capacity = b.capacity();
        buffer& alias = b;
        b = std::move(alias);
        SAME(b.data() == data, true);
        SAME(b.size(), size);
        SAME(b.capacity(), capacity);
      }
      break;
    }
  }
  check_pools(ps);
}

}  // namespace fuzz
