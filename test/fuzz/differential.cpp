// Differential fuzzing: one byte string, decoded into a sequence of calls, is applied to
// sluice::pool (thread caches on), sluice::pool (caches off) and the reference model
// sluice::mutex_pool, and to sluice::gate and sluice::mutex_gate (with permits of both). On one
// thread the pools must answer exactly as the model does: whether a buffer was answered, its
// size and capacity, whether acquire threw, retained(), enabled() and every field of stats(),
// after every call. The gates must agree on every answer and on in_flight(), cap() and
// has_capacity() after every call. Beyond agreeing with each other, everything is also checked
// against the contract itself (an oracle written here from the headers, sharing no code with
// the library): take answers the smallest retained capacity that serves, retire keeps exactly
// when the contract says, acquire's fresh capacity fills the class, the gate clamps and steps.
// A pool must never answer memory it does not hold (each pool's buffers are tracked by address).
//
// The same calls' pools also stand behind sluice::pool_resource (caches on and off) and
// mutex_pool_resource, where the resource adds rules of its own: which allocate goes to the pool
// (alignment at most max_align_t, size within the ceiling) and which upstream, that a pooled
// block comes only from its size's own class, and that every block goes back to where it came
// from with the size and alignment it was allocated with.
//
// Any difference prints what differed and aborts, which libFuzzer reports as a crash and saves
// the input. SLUICE_FUZZ_TRACE=1 prints every decoded call (run the binary on one input).
//
// Real allocations stay small: sizes that would allocate come from a table whose entries above
// a few MiB are only ever passed where nothing is allocated (take) or where the allocation must
// fail at once (above PTRDIFF_MAX, which buffer refuses before asking the allocator), and the
// bytes a pool holds plus those the harness holds are kept under a budget.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory_resource>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "sluice/buffer.hpp"
#include "sluice/gate.hpp"
#include "sluice/pool.hpp"
#include "sluice/pool_resource.hpp"
#include "tables.hpp"

namespace {

using namespace fuzz_tables;  // the value tables and where each kind of operation begins

using sluice::buffer;
using sluice::gate_limit;
using sluice::pool_options;
using sluice::pool_stats;
using sluice::pressure;


constexpr std::size_t max_alloc = std::size_t{8} << 20;  // the largest size ever allocated
constexpr std::size_t budget = std::size_t{24} << 20;    // per pool: retained + held bytes
constexpr std::size_t max_ops = 400;
constexpr std::size_t max_held = 48;
constexpr std::size_t max_permits = 16;

bool tracing() {
  static const bool on = [] {
    const char* v = std::getenv("SLUICE_FUZZ_TRACE");
    return v != nullptr && *v != '\0' && *v != '0';
  }();
  return on;
}

#define TRACE(...)                            \
  do {                                        \
    if (tracing()) std::printf(__VA_ARGS__);  \
  } while (0)

std::size_t op_index = 0;

[[noreturn]] void fail(const char* what, unsigned long long a, unsigned long long b, int line) {
  std::fprintf(stderr, "differential: DIFFERENCE at op %zu, line %d: %s (%llu vs %llu)\n", op_index,
               line, what, a, b);
  std::fflush(stderr);
  std::abort();
}

#define SAME(a, b)                                                                   \
  do {                                                                               \
    const auto x_ = (a);                                                             \
    const auto y_ = (b);                                                             \
    if (!(x_ == y_)) {                                                               \
      fail(#a " == " #b, static_cast<unsigned long long>(x_),                        \
           static_cast<unsigned long long>(y_), __LINE__);                           \
    }                                                                                \
  } while (0)
#define ENSURE(c) \
  do {            \
    if (!(c)) fail(#c, 0, 0, __LINE__); \
  } while (0)

// ---- the input --------------------------------------------------------------------------------

class reader {
 public:
  reader(const std::uint8_t* data, std::size_t size) : p_(data), n_(size) {}
  bool empty() const { return n_ == 0; }
  std::uint8_t byte() {
    if (n_ == 0) return 0;
    --n_;
    return *p_++;
  }
  std::uint64_t bytes(int k) {
    std::uint64_t v = 0;
    for (int i = 0; i < k; ++i) v |= std::uint64_t{byte()} << (8 * i);
    return v;
  }

 private:
  const std::uint8_t* p_;
  std::size_t n_;
};

std::size_t pick_size(reader& r, std::size_t ceiling) {
  const std::uint8_t s = r.byte();
  if (s < size_table_count) return size_table[s];
  if (s < 150) return r.byte();
  if (s < 200) return static_cast<std::size_t>(r.bytes(2));
  if (s < 235) return ceiling + static_cast<std::size_t>(static_cast<int>(r.byte() % 9) - 4);  // wraps
  return static_cast<std::size_t>(r.bytes(3)) & ((std::size_t{1} << 20) - 1);  // below 1 MiB
}

std::size_t pick_ceiling(reader& r) {
  const std::uint8_t s = r.byte();
  if (s < std::size(ceiling_table)) return ceiling_table[s];
  if (s < 128) return r.byte();
  if (s < 192) return static_cast<std::size_t>(r.bytes(2));
  return static_cast<std::size_t>(r.bytes(3));
}

std::size_t pick_bound(reader& r) {
  const std::uint8_t s = r.byte();
  if (s < std::size(bound_table)) return bound_table[s];
  return static_cast<std::size_t>(r.bytes(2) % 4096);
}

std::int64_t pick_cap(reader& r) {
  const std::uint8_t s = r.byte();
  if (s < std::size(cap_table)) return cap_table[s];
  if (s < 128) return static_cast<std::int8_t>(r.byte());
  if (s < 192) return static_cast<std::int16_t>(r.bytes(2));
  return static_cast<std::int64_t>(r.bytes(8));
}

// ---- the contract's own arithmetic (no library code) ---------------------------------------

// The smallest size of the series 16, 20, 24, 28, 32, 40, ... that is at least n. Only called
// for n <= max_alloc.
std::size_t spec_class_size(std::size_t n) {
  for (std::size_t shift = 2;; ++shift) {
    for (std::size_t m = 4; m < 8; ++m) {
      if ((m << shift) >= n) return m << shift;
    }
  }
}

std::size_t spec_fresh_capacity(std::size_t n, std::size_t ceiling) {
  return n > ceiling ? n : std::min(spec_class_size(n), ceiling);
}

std::int64_t spec_clamp(std::int64_t c) { return c < 1 ? 1 : (c > gate_limit ? gate_limit : c); }

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

std::size_t bytes_of(const std::vector<held>& hs) {
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

void check_pools(const pools& ps) {
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
std::optional<std::size_t> spec_take(pools& ps, std::size_t n) {
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

void op_take(pools& ps, std::vector<held>& hs, std::size_t n) {
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

void op_acquire(pools& ps, std::vector<held>& hs, std::size_t n) {
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
void retire(pools& ps, held& h) {
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

void forget_kept(pools& ps) {
  ps.cached.kept.clear();
  ps.uncached.kept.clear();
  ps.model.kept.clear();
  ps.spec_kept.clear();
}

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

void resource_op(resources& rs, reader& r, std::uint8_t op) {
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

// ---- the gates ----------------------------------------------------------------------------

struct permits {
  sluice::permit<sluice::gate> g;
  sluice::permit<sluice::mutex_gate> m;
  bool spec = false;
};

struct gates {
  std::unique_ptr<sluice::gate> g;
  std::unique_ptr<sluice::mutex_gate> m;
  std::int64_t spec_cap = 1, spec_in = 0;
  std::vector<permits> ps;  // destroyed before the gates they refer to (see build)

  void build(std::int64_t cap) {
    ps.clear();
    g = std::make_unique<sluice::gate>(cap);
    m = std::make_unique<sluice::mutex_gate>(cap);
    spec_cap = spec_clamp(cap);
    spec_in = 0;
  }
  ~gates() { ps.clear(); }

  void spec_submit() { spec_in = std::min(spec_in + 1, gate_limit); }
  void spec_done() {
    if (spec_in > 0) --spec_in;
  }
  bool spec_admit() {
    if (spec_in >= spec_cap) return false;
    ++spec_in;
    return true;
  }
  void spec_release(permits& p) {
    if (p.spec) spec_done();
    p.spec = false;
  }

  void check() const {
    SAME(g->in_flight(), spec_in);
    SAME(m->in_flight(), spec_in);
    SAME(g->cap(), spec_cap);
    SAME(m->cap(), spec_cap);
    SAME(g->has_capacity(), spec_in < spec_cap);
    SAME(m->has_capacity(), spec_in < spec_cap);
    for (const permits& p : ps) {
      SAME(static_cast<bool>(p.g), p.spec);
      SAME(static_cast<bool>(p.m), p.spec);
    }
  }
};

void gate_op(gates& gs, reader& r, std::uint8_t op) {
  switch (op % 12) {
    case 0: {
      const int few = 1 + r.byte() % 8;
      const int k = r.byte() % 4 == 0 ? few * 100 : few;
      TRACE("gate: note_submitted x%d\n", k);
      for (int i = 0; i < k; ++i) {
        gs.g->note_submitted();
        gs.m->note_submitted();
        gs.spec_submit();
      }
      break;
    }
    case 1: {
      const int k = 1 + r.byte() % 8;
      TRACE("gate: note_done x%d\n", k);
      for (int i = 0; i < k; ++i) {
        gs.g->note_done();
        gs.m->note_done();
        gs.spec_done();
      }
      break;
    }
    case 2: {
      TRACE("gate: try_admit\n");
      const bool a = gs.g->try_admit(), b = gs.m->try_admit(), s = gs.spec_admit();
      SAME(a, s);
      SAME(b, s);
      break;
    }
    case 3: {
      TRACE("gate: has_capacity, in_flight, cap\n");
      SAME(gs.g->has_capacity(), gs.m->has_capacity());
      SAME(gs.g->in_flight(), gs.m->in_flight());
      SAME(gs.g->cap(), gs.m->cap());
      break;
    }
    case 4: {
      const std::int64_t c = pick_cap(r);
      TRACE("gate: set_cap(%lld)\n", static_cast<long long>(c));
      gs.g->set_cap(c);
      gs.m->set_cap(c);
      gs.spec_cap = spec_clamp(c);
      break;
    }
    case 5: {
      const auto p = static_cast<pressure>(r.byte() % 3);
      const std::int64_t max_cap = pick_cap(r);
      TRACE("gate: adjust(%d, %lld)\n", static_cast<int>(p), static_cast<long long>(max_cap));
      gs.g->adjust(p, max_cap);
      gs.m->adjust(p, max_cap);
      gs.spec_cap = p == pressure::ok ? spec_clamp(std::min(gs.spec_cap + 1, max_cap))
                                      : spec_clamp(gs.spec_cap - 1);
      break;
    }
    case 6: {  // a permit by try_admit
      if (gs.ps.size() >= max_permits) break;
      TRACE("gate: permit{g}\n");
      permits p{sluice::permit<sluice::gate>{*gs.g}, sluice::permit<sluice::mutex_gate>{*gs.m}, false};
      p.spec = gs.spec_admit();
      gs.ps.push_back(std::move(p));
      break;
    }
    case 7: {  // a counted submission taken over by a permit
      if (gs.ps.size() >= max_permits) break;
      TRACE("gate: note_submitted + permit{g, adopt_lock}\n");
      gs.g->note_submitted();
      gs.m->note_submitted();
      gs.spec_submit();
      gs.ps.push_back({sluice::permit<sluice::gate>{*gs.g, std::adopt_lock},
                       sluice::permit<sluice::mutex_gate>{*gs.m, std::adopt_lock}, true});
      break;
    }
    case 8: {  // release
      const std::uint8_t x = r.byte();
      if (gs.ps.empty()) break;
      permits& p = gs.ps[x % gs.ps.size()];
      TRACE("gate: permit.release()\n");
      p.g.release();
      p.m.release();
      gs.spec_release(p);
      break;
    }
    case 9: {  // move-assign, self-move included
      const std::uint8_t x = r.byte(), y = r.byte();
      if (gs.ps.empty()) break;
      const std::size_t i = x % gs.ps.size(), j = y % gs.ps.size();
      TRACE("gate: permit[%zu] = move(permit[%zu])\n", i, j);
      permits& a = gs.ps[i];
      permits& b = gs.ps[j];
      a.g = std::move(b.g);
      a.m = std::move(b.m);
      if (i != j) {
        gs.spec_release(a);
        a.spec = std::exchange(b.spec, false);
      }
      break;
    }
    case 10: {  // destroy one
      const std::uint8_t x = r.byte();
      if (gs.ps.empty()) break;
      const std::size_t i = x % gs.ps.size();
      TRACE("gate: ~permit[%zu]\n", i);
      gs.spec_release(gs.ps[i]);
      gs.ps.erase(gs.ps.begin() + static_cast<std::ptrdiff_t>(i));
      break;
    }
    case 11: {
      const std::int64_t c = pick_cap(r);
      TRACE("gate: rebuild(%lld)\n", static_cast<long long>(c));
      gs.build(c);
      break;
    }
  }
  gs.check();
}

// ---- the sequence ---------------------------------------------------------------------------

pool_options pick_options(reader& r) {
  pool_options o;
  o.bound = pick_bound(r);
  o.ceiling = pick_ceiling(r);
  o.enabled = r.byte() % 4 != 0;
  return o;
}

void run(reader& r) {
  pools ps;
  std::vector<held> hs;
  gates gs;
  resources rs;
  {
    const pool_options o = pick_options(r);
    TRACE("pools: bound %zu, ceiling %zu, enabled %d\n", o.bound, o.ceiling, o.enabled);
    ps.build(o);
    rs.build(o);
  }
  gs.build(pick_cap(r));
  TRACE("gate: cap %lld\n", static_cast<long long>(gs.spec_cap));
  check_pools(ps);
  gs.check();

  for (op_index = 0; op_index < max_ops && !r.empty(); ++op_index) {
    const std::uint8_t op = r.byte();
    if (op >= gate_ops) {
      gate_op(gs, r, op);
      continue;
    }
    if (op >= resource_ops) {
      resource_op(rs, r, op);
      continue;
    }
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
      case 12: {  // new pools (the held buffers outlive the old ones and may be retired here)
        const pool_options o = pick_options(r);
        TRACE("rebuild: bound %zu, ceiling %zu, enabled %d\n", o.bound, o.ceiling, o.enabled);
        ps.build(o);
        rs.build(o);
        break;
      }
    }
    check_pools(ps);
  }
}

}  // namespace

// Every input runs on the calling thread. Its pools' thread caches outlive them in this
// thread's cache directory until the next input's first call lets them go, so each input frees
// about what it allocates and libFuzzer's per-input leak check rarely needs to run it twice.
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  reader r(data, size);
  run(r);
  return 0;
}
