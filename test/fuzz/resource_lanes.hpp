// pool_resource (caches on and off) and mutex_pool_resource, held to each other and to the contract.
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
#include "pool_lanes.hpp"
#include "sluice/pool_resource.hpp"

namespace fuzz {

// ---- the resources --------------------------------------------------------------------------

// An upstream that keeps count of its live blocks and refuses one that comes back with another
// size or alignment than it left with. Sizes past max_alloc throw at once, as an allocator that
// cannot have them would (no real allocation is ever that large here).
class counting_upstream final : public std::pmr::memory_resource {
 public:
  std::size_t live() const { return live_.size(); }

 private:
  void* do_allocate(std::size_t n, std::size_t a) override {
    if (n > max_alloc) throw std::bad_alloc();
    void* p = std::pmr::new_delete_resource()->allocate(n, a);
    live_.emplace(p, std::pair{n, a});
    return p;
  }
  void do_deallocate(void* p, std::size_t n, std::size_t a) override {
    const auto it = live_.find(p);
    ENSURE(it != live_.end());  // upstream never gave this block
    SAME(it->second.first, n);
    SAME(it->second.second, a);
    live_.erase(it);
    std::pmr::new_delete_resource()->deallocate(p, n, a);
  }
  bool do_is_equal(const std::pmr::memory_resource& o) const noexcept override { return this == &o; }

  std::map<void*, std::pair<std::size_t, std::size_t>> live_;
};

constexpr std::size_t max_blocks = 48;

struct resources {
  // One upstream per resource, each declared before it: a resource outlives none of its blocks.
  counting_upstream up[lanes];
  std::unique_ptr<sluice::pool_resource> cached, uncached;
  std::unique_ptr<sluice::mutex_pool_resource> model;
  std::map<const void*, std::size_t> kept[lanes];  // pooled blocks retained: address -> capacity
  std::multiset<std::size_t> spec_kept;
  pool_stats spec;
  std::size_t spec_upstream_live = 0;
  pool_options options;
  struct block {
    void* p[lanes];
    std::size_t n, a;
  };
  std::vector<block> blocks;

  std::pmr::memory_resource& lane(int i) {
    return i == 0 ? static_cast<std::pmr::memory_resource&>(*cached)
                  : i == 1 ? static_cast<std::pmr::memory_resource&>(*uncached) : *model;
  }
  pool_stats stats(int i) const { return i == 0 ? cached->stats() : i == 1 ? uncached->stats() : model->stats(); }

  void build(const pool_options& o) {
    clear();
    options = o;
    pool_options on = o, off = o;
    on.thread_cache = true;
    off.thread_cache = false;
    cached = std::make_unique<sluice::pool_resource>(on, &up[0]);
    uncached = std::make_unique<sluice::pool_resource>(off, &up[1]);
    model = std::make_unique<sluice::mutex_pool_resource>(o, &up[2]);
    spec = {};
  }
  void clear() {
    while (!blocks.empty()) deallocate(blocks.size() - 1);
    cached.reset();
    uncached.reset();
    model.reset();
    for (auto& k : kept) k.clear();
    spec_kept.clear();
  }
  ~resources() { clear(); }

  bool pooled(std::size_t n, std::size_t a) const { return a <= alignof(std::max_align_t) && n <= options.ceiling; }

  std::size_t live_bytes() const {
    std::size_t bytes = 0;
    for (const block& b : blocks) bytes += b.n;
    for (const std::size_t c : spec_kept) bytes += c;
    return bytes;
  }

  void allocate(std::size_t n, std::size_t a) {
    const bool pool = pooled(n, a);
    const bool impossible = pool ? n > ptrdiff_max : n > max_alloc;
    if (!impossible && (n > max_alloc || live_bytes() + n + n / 4 + 16 > budget || blocks.size() >= max_blocks)) return;
    TRACE("resource: allocate(%zu, %zu)%s\n", n, a, pool ? "" : " upstream");
    std::optional<std::size_t> hit;
    // No block of an impossible size's class is ever kept: one would have been allocated first.
    const std::size_t capacity = pool && !impossible ? spec_fresh_capacity(n, options.ceiling) : 0;
    if (pool) {  // the spec: only a block of n's own class serves
      const auto it = options.enabled && !impossible ? spec_kept.find(capacity) : spec_kept.end();
      if (it != spec_kept.end()) {
        spec_kept.erase(it);
        ++spec.hits;
        hit = capacity;
      } else {
        ++spec.misses;
      }
    }
    const bool spec_throws = impossible && !hit;
    block b{{}, n, a};
    for (int i = 0; i < lanes; ++i) {
      bool threw = false;
      try {
        b.p[i] = lane(i).allocate(n, a);
      } catch (const std::bad_alloc&) {
        threw = true;
      }
      SAME(threw, spec_throws);
      if (threw) continue;
      ENSURE(b.p[i] != nullptr);
      SAME(reinterpret_cast<std::uintptr_t>(b.p[i]) % a, 0u);
      const auto k = kept[i].find(b.p[i]);
      SAME(k != kept[i].end(), hit.has_value());  // a hit is a block the pool held, else fresh
      if (hit) {
        SAME(k->second, capacity);
        kept[i].erase(k);
      }
      if (n > 0) {  // the whole block is writable (AddressSanitizer checks)
        static_cast<std::byte*>(b.p[i])[0] = std::byte{0xA5};
        static_cast<std::byte*>(b.p[i])[n - 1] = std::byte{0x5A};
      }
    }
    if (spec_throws) return;
    if (!pool) ++spec_upstream_live;
    blocks.push_back(b);
  }

  void deallocate(std::size_t at) {
    const block b = blocks[at];
    blocks.erase(blocks.begin() + static_cast<std::ptrdiff_t>(at));
    TRACE("resource: deallocate(%zu, %zu)\n", b.n, b.a);
    const bool pool = pooled(b.n, b.a);
    const std::size_t capacity = pool ? spec_fresh_capacity(b.n, options.ceiling) : 0;
    const bool keep = pool && options.enabled && spec_kept.size() < options.bound;
    if (keep) {
      spec_kept.insert(capacity);
      ++spec.retired;
    } else if (pool) {
      ++spec.dropped;
    } else {
      --spec_upstream_live;
    }
    for (int i = 0; i < lanes; ++i) {
      lane(i).deallocate(b.p[i], b.n, b.a);
      if (keep) ENSURE(kept[i].emplace(b.p[i], capacity).second);
    }
  }

  void trim() {
    TRACE("resource: trim()\n");
    cached->trim();
    uncached->trim();
    model->trim();
    for (auto& k : kept) k.clear();
    spec_kept.clear();
  }

  void check() {
    std::size_t bytes = 0;
    for (const std::size_t c : spec_kept) bytes += c;
    for (int i = 0; i < lanes; ++i) {
      const pool_stats s = stats(i);
      SAME(s.hits, spec.hits);
      SAME(s.misses, spec.misses);
      SAME(s.retired, spec.retired);
      SAME(s.dropped, spec.dropped);
      SAME(s.retained, spec_kept.size());
      SAME(s.retained_bytes, bytes);
      SAME(kept[i].size(), spec_kept.size());
      SAME(up[i].live(), spec_upstream_live);
    }
  }
};

inline void resource_op(resources& rs, reader& r, std::uint8_t op) {
  switch (op % 4) {
    case 0:
    case 1: {
      const std::size_t n = pick_size(r, rs.options.ceiling);
      rs.allocate(n, std::size_t{1} << (r.byte() % 13));  // 1 to 4096
      break;
    }
    case 2: {
      const std::uint8_t x = r.byte();
      if (!rs.blocks.empty()) rs.deallocate(x % rs.blocks.size());
      break;
    }
    case 3:
      rs.trim();
      break;
  }
  rs.check();
}

}  // namespace fuzz
