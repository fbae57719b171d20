// Stress: a long randomized run of the pools' whole lifecycle (docs/pool.md LIFETIME, THREAD
// CACHES, BOUND and the statistics' promises), under threads that come and go.
//
// Each round, drawn from a std::mt19937_64 seeded with the round's number, makes 1-12 pools
// (sluice::pool with its caches on or off, now and then a mutex_pool; bounds 0 to 4096, ceilings
// 64 KiB, 4 MiB or 5000, some switched off) and 2-6 short-lived threads, some of which start more
// threads. Each thread calls its pools at random: acquire and take of sizes mostly small, some
// at or above the ceiling; retire, sometimes into another pool than the one that answered, and
// of buffers made elsewhere (buffer(1000), buffer(0), ...); trim; set_enabled; stats. Buffers
// also move between threads through a shared exchange. Some threads make private pools one after
// another, more than 8 alive at once. The round's owner (the main thread) destroys some pools
// while the threads that used them live on: a thread reports that it is done with a pool, goes
// on with others or exits at once, and the owner destroys the pool without joining it; then it
// builds replacement pools, which some threads use after their first pools are gone.
//
// What is checked:
//   - no two holders at once: every data pointer the test holds is in a registry from the
//     answer to the retire (or free); a second insert of a pointer is a failure. A pattern
//     written into every buffer held is checked before it is given away.
//   - take/acquire answer what they promise (size, capacity, alignment, exactly n above the
//     ceiling); retained() <= bound at every instant.
//   - with no call in flight (a pool's users are done, or the round's threads are joined): the
//     statistics count every call exactly; a disabled pool retains nothing; draining an enabled
//     pool with take(0) answers exactly stats().retained buffers of retained_bytes bytes; after
//     a trim it retains nothing. Private pools, which one thread alone uses, are also checked
//     for the sequential rule that a buffer just retired is answered.
//   - the sanitizer builds check the rest: thread exit racing with ~pool, trims racing with
//     calls, pools destroyed with buffers cached in threads that still live (LeakSanitizer).
// A second case checks that a thread that trims while another retires leaves the slot table
// (the pool's own memory) bounded.
//
// Settings: SLUICE_STRESS_SECONDS (default 6) is the time budget, spent in whole rounds;
// SLUICE_STRESS_SEED=N replays round N alone (a failure prints the number to pass).
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <unordered_set>
#include <utility>
#include <vector>

#include "doctest.hpp"
#include "kinds.hpp"
#include "sluice/pool.hpp"

#ifdef SLUICE_TEST_SANITIZED
// From <sanitizer/allocator_interface.h>, which GCC does not install: ASan's and TSan's count of
// the bytes the program holds.
extern "C" std::size_t __sanitizer_get_current_allocated_bytes();
#else
#include <malloc.h>
#endif

using sluice::buffer;
using sluice::pool_options;
using sluice::pool_stats;

namespace {

using sluice_test::sanitized;

constexpr std::size_t npos = static_cast<std::size_t>(-1);

// ---- settings ---------------------------------------------------------------------------------

double budget_seconds() {
  if (const char* s = std::getenv("SLUICE_STRESS_SECONDS"); s != nullptr && *s != '\0') {
    char* end = nullptr;
    const double v = std::strtod(s, &end);
    if (end != s && v >= 0) return v;
  }
  return 6.0;  // plain and sanitized alike: the whole suite must stay reasonable on two cores
}

std::optional<std::uint64_t> replay_round() {
  if (const char* s = std::getenv("SLUICE_STRESS_SEED"); s != nullptr && *s != '\0') {
    return std::strtoull(s, nullptr, 0);
  }
  return std::nullopt;
}

// ---- failures, noted on any thread and reported by the main one -----------------------------

class failure_log {
 public:
  void add(std::string what) {
    count_.fetch_add(1);
    std::lock_guard lock(mutex_);
    if (first_.size() < 12) first_.push_back(std::move(what));
  }
  std::size_t count() const { return count_.load(); }
  std::vector<std::string> messages() {
    std::lock_guard lock(mutex_);
    return first_;
  }

 private:
  std::atomic<std::size_t> count_{0};
  std::mutex mutex_;
  std::vector<std::string> first_;
};

failure_log failures;

template <class... A>
std::string describe(const A&... a) {
  std::ostringstream out;
  (out << ... << a);
  return out.str();
}

#define STRESS_EXPECT(cond, ...)                                                              \
  do {                                                                                        \
    if (!(cond)) failures.add(describe(__FILE__, ":", __LINE__, ": ", #cond, " -- ", __VA_ARGS__)); \
  } while (0)

// ---- who holds what -------------------------------------------------------------------------
//
// Every data pointer the test holds, from the call that answered it to the retire (or free)
// that gives it up: a pool that answered one buffer twice, or kept one it also answered, shows
// as a second insert. Sharded, so that the registry does not serialize the pools' callers.

class holders {
 public:
  void hold(const buffer& b, const char* how) {
    if (!b) return;
    shard& s = shard_of(b.data());
    bool fresh = false;
    {
      std::lock_guard lock(s.mutex);
      fresh = s.held.insert(b.data()).second;
    }
    if (!fresh) {
      failures.add(describe("two holders of ", static_cast<const void*>(b.data()), " at once (the second from ", how,
                            ", capacity ", b.capacity(), ")"));
    }
  }
  void let_go(const buffer& b) {
    if (!b) return;
    shard& s = shard_of(b.data());
    std::size_t erased = 0;
    {
      std::lock_guard lock(s.mutex);
      erased = s.held.erase(b.data());
    }
    if (erased != 1) failures.add(describe("let go of ", static_cast<const void*>(b.data()), ", which no one held"));
  }
  std::size_t size() {
    std::size_t n = 0;
    for (shard& s : shards_) {
      std::lock_guard lock(s.mutex);
      n += s.held.size();
    }
    return n;
  }

 private:
  struct shard {
    std::mutex mutex;
    std::unordered_set<const std::byte*> held;
  };
  shard& shard_of(const std::byte* p) { return shards_[(reinterpret_cast<std::uintptr_t>(p) >> 4) % shards_.size()]; }
  std::array<shard, 64> shards_;
};

holders registry;

// A buffer the test holds, with the seed of the pattern written into it.
struct held_buf {
  buffer b;
  std::uint64_t seed = 0;
};

// The pattern covers the first 512 and the last 64 bytes: enough to see a second holder, cheap
// enough for buffers of megabytes.
template <class Span>
std::pair<Span, Span> marked(Span bytes) {  // the head, and the tail beyond it
  const std::size_t head = std::min<std::size_t>(bytes.size(), 512);
  return {bytes.first(head), bytes.last(std::min<std::size_t>(bytes.size() - head, 64))};
}

void mark(held_buf& h) {
  const auto [head, tail] = marked(h.b.bytes());
  sluice_test::fill(head, h.seed);
  sluice_test::fill(tail, h.seed + 1);
}

bool intact(const held_buf& h) {
  const auto [head, tail] = marked(h.b.bytes());
  return sluice_test::first_difference(head, h.seed) == head.size() &&
         sluice_test::first_difference(tail, h.seed + 1) == tail.size();
}

// ---- pools of either kind behind one face ---------------------------------------------------

struct pool_spec {
  pool_options options;
  bool mutex = false;  // a mutex_pool, else a sluice::pool
};

std::ostream& operator<<(std::ostream& out, const pool_spec& s) {
  return out << (s.mutex ? "mutex_pool" : "pool") << "{bound " << s.options.bound << ", ceiling "
             << s.options.ceiling << ", enabled " << s.options.enabled << ", thread_cache "
             << s.options.thread_cache << "}";
}

struct any_pool {
  virtual ~any_pool() = default;
  virtual buffer take(std::size_t n) = 0;
  virtual buffer acquire(std::size_t n) = 0;
  virtual void retire(buffer&& b) noexcept = 0;
  virtual void set_enabled(bool on) noexcept = 0;
  virtual bool enabled() const noexcept = 0;
  virtual std::size_t retained() const noexcept = 0;
  virtual pool_stats stats() const noexcept = 0;
  virtual void trim() noexcept = 0;
};

template <class P>
struct pool_as final : any_pool {
  explicit pool_as(pool_options o) : p(o) {}
  buffer take(std::size_t n) override { return p.take(n); }
  buffer acquire(std::size_t n) override { return p.acquire(n); }
  void retire(buffer&& b) noexcept override { p.retire(std::move(b)); }
  void set_enabled(bool on) noexcept override { p.set_enabled(on); }
  bool enabled() const noexcept override { return p.enabled(); }
  std::size_t retained() const noexcept override { return p.retained(); }
  pool_stats stats() const noexcept override { return p.stats(); }
  void trim() noexcept override { p.trim(); }
  P p;
};

std::unique_ptr<any_pool> make_pool(const pool_spec& s) {
  if (s.mutex) return std::make_unique<pool_as<sluice::mutex_pool>>(s.options);
  return std::make_unique<pool_as<sluice::pool>>(s.options);
}

template <class T>
const T& pick(std::mt19937_64& rng, std::initializer_list<T> from) {
  return from.begin()[rng() % from.size()];
}

std::size_t uniform(std::mt19937_64& rng, std::size_t lo, std::size_t hi) {  // [lo, hi]
  return std::uniform_int_distribution<std::size_t>(lo, hi)(rng);
}

pool_spec draw_spec(std::mt19937_64& rng) {
  pool_spec s;
  s.options.bound = pick<std::size_t>(rng, {0, 1, 63, 64, 256, 4096});
  s.options.ceiling = pick<std::size_t>(rng, {std::size_t{64} << 10, std::size_t{4} << 20, 5000});
  s.options.thread_cache = rng() % 4 != 0;
  s.options.enabled = rng() % 6 != 0;
  s.mutex = rng() % 8 == 0;
  return s;
}

// ---- what the test did to each pool ---------------------------------------------------------

struct counts {
  std::uint64_t take_hits = 0, take_misses = 0, acquires = 0, retires = 0, trims = 0, switches_off = 0;
  void add(const counts& o) {
    take_hits += o.take_hits;
    take_misses += o.take_misses;
    acquires += o.acquires;
    retires += o.retires;
    trims += o.trims;
    switches_off += o.switches_off;
  }
};

std::atomic<std::uint64_t> total_calls{0};
std::atomic<std::uint64_t> exact_checks{0};    // pools checked with no call in flight
std::atomic<std::uint64_t> drained_total{0};   // buffers those checks drained

// The statistics against what the test counted; exact when no call is in flight on the pool.
void check_counts(any_pool& p, const pool_spec& spec, const counts& c, const std::string& label) {
  const pool_stats s = p.stats();
  STRESS_EXPECT(s.hits + s.misses == c.take_hits + c.take_misses + c.acquires,
                label, ": hits ", s.hits, " + misses ", s.misses, " vs takes ", c.take_hits, "+", c.take_misses,
                " and acquires ", c.acquires);
  STRESS_EXPECT(s.hits >= c.take_hits && s.hits <= c.take_hits + c.acquires,
                label, ": hits ", s.hits, " vs takes answered ", c.take_hits, " and acquires ", c.acquires);
  STRESS_EXPECT(s.misses >= c.take_misses && s.misses <= c.take_misses + c.acquires,
                label, ": misses ", s.misses, " vs takes unanswered ", c.take_misses, " and acquires ", c.acquires);
  STRESS_EXPECT(s.retired + s.dropped == c.retires,
                label, ": retired ", s.retired, " + dropped ", s.dropped, " vs retires ", c.retires);
  STRESS_EXPECT(s.retained <= spec.options.bound, label, ": retained ", s.retained);
  total_calls.fetch_add(1);
}

// The full check of a pool no one else calls now (its users are joined, or it is private):
// counts exact; retained exactly what a drain by take(0) answers; nothing after a trim.
void check_quiescent(any_pool& p, const pool_spec& spec, counts& c, const std::string& label) {
  check_counts(p, spec, c, label);
  exact_checks.fetch_add(1);
  const pool_stats before = p.stats();
  const bool on = p.enabled();
  total_calls.fetch_add(2);
  const std::string where = describe(label, " (trims ", c.trims, ", switched off ", c.switches_off, " times, ",
                                     on ? "enabled" : "disabled", ")");
  if (!on) {
    // set_enabled(false) ran a trim, and every cache that held a buffer was emptied at its
    // thread's next call or exit.
    STRESS_EXPECT(before.retained == 0 && before.retained_bytes == 0,
                  where, ": disabled but retains ", before.retained, " buffers, ", before.retained_bytes, " bytes");
  } else {
    std::vector<buffer> drained;
    std::size_t bytes = 0;
    for (;;) {
      buffer b = p.take(0);
      total_calls.fetch_add(1);
      if (!b) break;
      ++c.take_hits;
      registry.hold(b, "a drain");
      STRESS_EXPECT(b.capacity() <= spec.options.ceiling, where, ": drained capacity ", b.capacity());
      bytes += b.capacity();
      drained.push_back(std::move(b));
      if (drained.size() > spec.options.bound + 1) break;  // a runaway: reported below
    }
    ++c.take_misses;
    drained_total.fetch_add(drained.size());
    STRESS_EXPECT(drained.size() == before.retained,
                  where, ": a drain answered ", drained.size(), " buffers where stats().retained was ", before.retained);
    STRESS_EXPECT(bytes == before.retained_bytes,
                  where, ": a drain answered ", bytes, " bytes where stats().retained_bytes was ", before.retained_bytes);
    const pool_stats after = p.stats();
    STRESS_EXPECT(after.retained == 0 && after.retained_bytes == 0,
                  where, ": after the drain, retained ", after.retained, ", bytes ", after.retained_bytes);
    STRESS_EXPECT(after.hits == before.hits + drained.size() && after.misses == before.misses + 1,
                  where, ": the drain's counts");
    for (buffer& b : drained) registry.let_go(b);
    // Some go back, for the trim to free.
    for (std::size_t i = 0; i < drained.size(); i += 2) {
      ++c.retires;
      p.retire(std::move(drained[i]));
    }
    total_calls.fetch_add(drained.size() / 2 + 1);
  }
  p.trim();
  ++c.trims;
  const pool_stats trimmed = p.stats();
  STRESS_EXPECT(trimmed.retained == 0 && trimmed.retained_bytes == 0 && p.retained() == 0,
                where, ": after a final trim, retained ", trimmed.retained, ", bytes ", trimmed.retained_bytes);
  total_calls.fetch_add(3);
  check_counts(p, spec, c, label + " at the end");
}

// ---- a round ----------------------------------------------------------------------------------

struct shared_pool {
  pool_spec spec;
  std::unique_ptr<any_pool> pool;  // null until made (replacements) and once destroyed
  bool doomed = false;             // destroyed while the round's threads live, once its users are done
  bool replacement = false;        // made once the doomed are gone
  std::size_t users = 0;           // threads that may still call it; under round::mutex
  counts done;                     // what those that finished did to it; under round::mutex
};

struct thread_plan {
  std::uint64_t seed = 0;
  std::vector<std::size_t> pools;  // the shared pools it uses, in the order it is done with them
  std::size_t ops = 0;
  bool late = false;               // when done with its own, waits for the replacements and uses them
  std::size_t churn = 0;           // private pools it makes and destroys, one after another
  std::size_t spawn_at = 0;        // the call at which it starts its children
  std::vector<thread_plan> children;
};

struct round_state {
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<std::unique_ptr<shared_pool>> pools;  // sized before any thread starts
  bool replacements_ready = false;                  // under mutex

  std::mutex exchange_mutex;
  std::vector<held_buf> exchange;  // buffers in transit between threads, still held by the test

  std::atomic<std::size_t> threads{0};
  std::atomic<std::size_t> running{0};  // workers that have not yet returned
  std::atomic<std::size_t> private_pools{0};
  std::atomic<std::size_t> started{0};  // the first threads start together, to overlap
  std::size_t first_threads = 0;
};

// A few microseconds of busy work, only to shake interleavings (never to synchronize).
void shake(std::mt19937_64& rng) {
  const std::size_t spins = uniform(rng, 0, 4000);
  for (std::size_t i = 0; i < spins; ++i) {
    if (i % 512 == 511) std::this_thread::yield();
    std::atomic_signal_fence(std::memory_order_seq_cst);
  }
}

class worker {
 public:
  worker(round_state& r, const thread_plan& plan) : r_(r), plan_(plan), rng_(plan.seed) {}

  void run(bool first = false) {
    r_.threads.fetch_add(1);
    r_.running.fetch_add(1);
    if (first) {
      r_.started.fetch_add(1);
      while (r_.started.load() < r_.first_threads) std::this_thread::yield();
    }
    try {
      body();
    } catch (const std::exception& e) {
      // Reported; and the pools let go, so that the owner, waiting for their users, goes on.
      failures.add(describe("a worker threw: ", e.what()));
      for (held_buf& h : held_) registry.let_go(h.b);
      held_.clear();
      while (!active_.empty()) {
        if (active_.back().owned) {
          active_.pop_back();
        } else {
          leave(active_.size() - 1);
        }
      }
    }
    for (std::thread& t : children_) {
      if (t.joinable()) t.join();
    }
    total_calls.fetch_add(calls_);
    r_.running.fetch_sub(1);
  }

 private:
  struct use {
    any_pool* pool = nullptr;
    pool_spec spec;
    counts c;
    std::size_t shared = npos;          // index in round_state::pools; npos for a private pool
    std::unique_ptr<any_pool> owned;    // a private pool
    bool enabled = true;                // private pools only: this thread alone switches them
  };

  void body() {
    for (std::size_t i : plan_.pools) {
      shared_pool& sp = *r_.pools[i];
      use u;
      u.pool = sp.pool.get();
      u.spec = sp.spec;
      u.shared = i;
      active_.push_back(std::move(u));
    }
    // When it is done with each shared pool but the last: at calls spread over the run.
    std::vector<std::size_t> leave_at;
    for (std::size_t i = 0; i + 1 < plan_.pools.size(); ++i) leave_at.push_back(uniform(rng_, 0, plan_.ops));
    std::sort(leave_at.begin(), leave_at.end());
    std::size_t left = 0;
    const std::size_t churn_every = plan_.churn > 0 ? std::max<std::size_t>(1, plan_.ops / (plan_.churn + 1)) : 0;
    std::size_t made = 0;
    const std::size_t keep_private = uniform(rng_, 1, 10);

    const auto spawn = [&] {
      for (const thread_plan& child : plan_.children) {
        children_.emplace_back([this, &child] { worker(r_, child).run(); });
      }
    };

    for (std::size_t op = 0; op < plan_.ops; ++op) {
      if (op == plan_.spawn_at) spawn();
      while (left < leave_at.size() && leave_at[left] <= op) {
        leave(next_shared(plan_.pools[left]));
        ++left;
      }
      if (churn_every != 0 && op % churn_every == churn_every - 1 && made < plan_.churn) {
        make_private();
        ++made;
        if (private_count() > keep_private) leave(oldest_private());
      }
      if (!active_.empty()) call(active_[rng_() % active_.size()]);
    }
    if (plan_.spawn_at >= plan_.ops) spawn();

    // The end: private pools checked and destroyed; then everything held goes into the last
    // shared pool, which this thread leaves with its cache full, just before it exits (or
    // waits for the replacements): the owner may be destroying that pool as it exits.
    while (private_count() > 0) leave(oldest_private());
    while (active_.size() > 1) leave(0);  // the shared pools left, in the plan's order
    if (!active_.empty()) {
      while (!held_.empty()) retire_one(active_[0], /*anywhere=*/false);
      leave(0);
    }
    if (plan_.late) late_phase();
    for (held_buf& h : held_) {
      STRESS_EXPECT(intact(h), "a buffer's pattern changed while this thread held it");
      registry.let_go(h.b);
    }
    held_.clear();
    for (std::thread& t : children_) t.join();
    shake(rng_);  // so that the exit comes at a varying distance after the last leave
  }

  void late_phase() {
    {
      std::unique_lock lock(r_.mutex);
      r_.changed.wait(lock, [&] { return r_.replacements_ready; });
      for (std::size_t i = 0; i < r_.pools.size(); ++i) {
        shared_pool& sp = *r_.pools[i];
        if (!sp.replacement) continue;
        use u;
        u.pool = sp.pool.get();
        u.spec = sp.spec;
        u.shared = i;
        active_.push_back(std::move(u));
      }
    }
    if (active_.empty()) return;
    const std::size_t ops = plan_.ops / 2 + 1;
    for (std::size_t op = 0; op < ops; ++op) call(active_[rng_() % active_.size()]);
    while (!held_.empty()) retire_one(active_[rng_() % active_.size()], /*anywhere=*/false);
    std::lock_guard lock(r_.mutex);
    for (use& u : active_) r_.pools[u.shared]->done.add(u.c);  // joined before they are checked
    active_.clear();
  }

  std::size_t next_shared(std::size_t index) const {
    for (std::size_t i = 0; i < active_.size(); ++i) {
      if (active_[i].shared == index) return i;
    }
    return npos;
  }
  std::size_t private_count() const {
    return static_cast<std::size_t>(std::count_if(active_.begin(), active_.end(), [](const use& u) { return u.owned != nullptr; }));
  }
  std::size_t oldest_private() const {
    for (std::size_t i = 0; i < active_.size(); ++i) {
      if (active_[i].owned) return i;
    }
    return npos;
  }

  void make_private() {
    use u;
    u.spec = draw_spec(rng_);
    u.owned = make_pool(u.spec);
    u.pool = u.owned.get();
    u.enabled = u.spec.options.enabled;
    active_.push_back(std::move(u));
    r_.private_pools.fetch_add(1);
  }

  // Done with a pool: a private one is checked and destroyed; for a shared one, what this
  // thread did is handed to the owner, who may destroy it from then on.
  void leave(std::size_t i) {
    if (i == npos) return;
    use u = std::move(active_[i]);
    active_.erase(active_.begin() + static_cast<std::ptrdiff_t>(i));
    if (u.owned) {
      check_quiescent(*u.pool, u.spec, u.c, describe("a private ", u.spec));
      u.owned.reset();
      return;
    }
    std::lock_guard lock(r_.mutex);
    shared_pool& sp = *r_.pools[u.shared];
    sp.done.add(u.c);
    if (--sp.users == 0) r_.changed.notify_all();
  }

  std::size_t draw_size(const pool_spec& spec) {
    const std::size_t ceiling = spec.options.ceiling;
    const std::size_t r = rng_() % 1000;
    if (r < 600) return uniform(rng_, 1, 256);
    if (r < 800) return uniform(rng_, 257, 8192);
    if (r < 880) return uniform(rng_, 8193, 65536);
    if (r < 900) return ceiling <= (std::size_t{1} << 20) || rng_() % 4 == 0 ? ceiling : 4096;
    if (r < 915) return ceiling + uniform(rng_, 1, 64);  // above the ceiling
    if (r < 935) return 0;
    if (r < 990) return pick<std::size_t>(rng_, {1000, 1024, 4096, 5000, 5120, 16, 17, 20});
    return uniform(rng_, 65537, 262144);
  }

  void keep(buffer b) {
    held_buf h{std::move(b), ++seeds_ ^ (plan_.seed << 20)};
    mark(h);
    held_.push_back(std::move(h));
    // Big buffers go back at once, and a thread holds a bounded number.
    if (held_.back().b.capacity() > (std::size_t{64} << 10) || held_.size() > 24) retire_one(active_[rng_() % active_.size()], true, held_.size() - 1);
  }

  void check_answer(const use& u, const buffer& b, std::size_t n, const char* how) {
    STRESS_EXPECT(b.size() == n, how, "(", n, ") answered size ", b.size(), " from ", u.spec);
    STRESS_EXPECT(b.capacity() >= n, how, "(", n, ") answered capacity ", b.capacity(), " from ", u.spec);
    STRESS_EXPECT(reinterpret_cast<std::uintptr_t>(b.data()) % 16 == 0, how, " answered unaligned memory");
  }

  void do_acquire(use& u) {
    const std::size_t n = draw_size(u.spec);
    buffer b = u.pool->acquire(n);
    ++calls_;
    ++u.c.acquires;
    STRESS_EXPECT(b, "acquire(", n, ") answered nothing");
    if (!b) return;
    check_answer(u, b, n, "acquire");
    if (n > u.spec.options.ceiling) {
      STRESS_EXPECT(b.capacity() == n, "acquire(", n, ") above the ceiling: capacity ", b.capacity(), " from ", u.spec);
    }
    registry.hold(b, "acquire");
    keep(std::move(b));
  }

  void do_take(use& u) {
    const std::size_t n = draw_size(u.spec);
    buffer b = u.pool->take(n);
    ++calls_;
    if (!b) {
      ++u.c.take_misses;
      return;
    }
    ++u.c.take_hits;
    check_answer(u, b, n, "take");
    STRESS_EXPECT(n <= u.spec.options.ceiling && b.capacity() <= u.spec.options.ceiling,
                  "take(", n, ") answered capacity ", b.capacity(), " from ", u.spec);
    registry.hold(b, "take");
    keep(std::move(b));
  }

  // Retires held_[which] (or a random one) into u, or now and then into another pool this
  // thread may call: retire accepts any buffer.
  void retire_one(use& u, bool anywhere, std::size_t which = npos) {
    if (held_.empty()) return;
    if (which == npos) which = rng_() % held_.size();
    held_buf h = std::move(held_[which]);
    held_[which] = std::move(held_.back());
    held_.pop_back();
    STRESS_EXPECT(intact(h), "a buffer's pattern changed while this thread held it (capacity ", h.b.capacity(), ")");
    use* into = &u;
    if (anywhere && rng_() % 4 == 0) into = &active_[rng_() % active_.size()];
    registry.let_go(h.b);
    ++into->c.retires;
    const std::size_t capacity = h.b.capacity();
    // The sequential rule, on a pool only this thread calls: a buffer it keeps is answered.
    const bool must_keep = into->owned && into->enabled && capacity <= into->spec.options.ceiling &&
                           into->pool->retained() < into->spec.options.bound && rng_() % 8 == 0;
    into->pool->retire(std::move(h.b));
    ++calls_;
    if (must_keep) {
      buffer again = into->pool->take(capacity);
      ++calls_;
      STRESS_EXPECT(again && again.capacity() >= capacity,
                    "a private ", into->spec, " kept a buffer of ", capacity, " bytes but take(", capacity,
                    ") answered ", again.capacity());
      if (!again) {
        ++into->c.take_misses;
        return;
      }
      ++into->c.take_hits;
      registry.hold(again, "take after retire");
      held_buf k{std::move(again), ++seeds_ ^ (plan_.seed << 20)};
      mark(k);
      held_.push_back(std::move(k));
    }
  }

  void foreign(use& u) {
    const std::size_t ceiling = u.spec.options.ceiling;
    buffer b;
    switch (rng_() % 8) {
      case 0: b = buffer(1000); break;            // off-class below 1024
      case 1: b = buffer(5000); break;            // off-class, or the top class at ceiling 5000
      case 2: b = buffer(0); break;               // capacity 0: off-class under class 0
      case 3: b = buffer(10, 100); break;         // capacity 100, between 96 and 112
      case 4: b = buffer(ceiling + 1); break;     // above the ceiling: dropped
      case 5: b = buffer(64); break;              // on-class, made elsewhere
      case 6: b = buffer(3, 3000); break;         // off-class between 2560 and 3072
      default: {                                  // an empty buffer: ignored, not counted
        buffer empty;
        u.pool->retire(std::move(empty));
        ++calls_;
        return;
      }
    }
    registry.hold(b, "a buffer made elsewhere");
    keep(std::move(b));
  }

  void exchange() {
    std::unique_lock lock(r_.exchange_mutex);
    if (!r_.exchange.empty() && (held_.empty() || rng_() % 2 == 0)) {
      const std::size_t i = rng_() % r_.exchange.size();
      held_buf h = std::move(r_.exchange[i]);
      r_.exchange[i] = std::move(r_.exchange.back());
      r_.exchange.pop_back();
      lock.unlock();
      STRESS_EXPECT(intact(h), "a buffer's pattern changed in the exchange");
      held_.push_back(std::move(h));
    } else if (!held_.empty() && r_.exchange.size() < 64) {
      const std::size_t i = rng_() % held_.size();
      r_.exchange.push_back(std::move(held_[i]));
      held_[i] = std::move(held_.back());
      held_.pop_back();
    }
  }

  void call(use& u) {
    const std::size_t r = rng_() % 1000;
    if (r < 280) {
      do_acquire(u);
    } else if (r < 480) {
      do_take(u);
    } else if (r < 780) {
      if (held_.empty()) {
        do_acquire(u);
      } else {
        retire_one(u, true);
      }
    } else if (r < 810) {
      foreign(u);
    } else if (r < 828) {
      u.pool->trim();
      ++calls_;
      ++u.c.trims;
    } else if (r < 833) {
      u.pool->set_enabled(false);
      ++calls_;
      ++u.c.switches_off;
      u.enabled = false;
    } else if (r < 855) {
      u.pool->set_enabled(true);
      ++calls_;
      u.enabled = true;
    } else if (r < 900) {
      const pool_stats s = u.pool->stats();
      ++calls_;
      STRESS_EXPECT(s.retained <= u.spec.options.bound, "stats().retained ", s.retained, " above the bound of ", u.spec);
      if (u.owned) check_counts(*u.pool, u.spec, u.c, describe("a private ", u.spec, " in use"));
    } else if (r < 930) {
      const std::size_t n = u.pool->retained();
      const bool on = u.pool->enabled();
      calls_ += 2;
      STRESS_EXPECT(n <= u.spec.options.bound, "retained() ", n, " above the bound of ", u.spec);
      if (u.owned) STRESS_EXPECT(on == u.enabled, "a private ", u.spec, " says enabled() ", on);
    } else if (r < 975) {
      exchange();
    } else {
      shake(rng_);
    }
  }

  round_state& r_;
  const thread_plan& plan_;
  std::mt19937_64 rng_;
  std::vector<use> active_;  // the pools it may call now
  std::vector<held_buf> held_;
  std::vector<std::thread> children_;
  std::uint64_t seeds_ = 0;
  std::uint64_t calls_ = 0;
};

thread_plan draw_plan(std::mt19937_64& rng, const round_state& r, std::size_t pools, int depth, bool all_pools) {
  thread_plan p;
  p.seed = rng();
  std::vector<std::size_t> mine(pools);
  for (std::size_t i = 0; i < pools; ++i) mine[i] = i;
  std::shuffle(mine.begin(), mine.end(), rng);
  if (!all_pools && pools > 0) mine.resize(uniform(rng, 1, pools));
  // Half the threads are done last with a doomed pool, so that their exit races its ~pool.
  if (rng() % 2 == 0) {
    const auto doomed = std::find_if(mine.begin(), mine.end(), [&](std::size_t i) { return r.pools[i]->doomed; });
    if (doomed != mine.end()) std::rotate(doomed, doomed + 1, mine.end());
  }
  p.pools = std::move(mine);
  p.ops = sanitized ? uniform(rng, 100, 600) : uniform(rng, 300, 2000);
  if (depth > 0) p.ops /= 2;
  p.late = rng() % 3 == 0;
  p.churn = rng() % 4 == 0 ? uniform(rng, 9, 14) : 0;
  p.spawn_at = uniform(rng, 0, p.ops);
  if (depth < 2 && rng() % (depth == 0 ? 5 : 2) < 2) {
    const std::size_t n = uniform(rng, 1, 2);
    for (std::size_t i = 0; i < n; ++i) p.children.push_back(draw_plan(rng, r, pools, depth + 1, false));
  }
  return p;
}

void count_users(const thread_plan& p, round_state& r) {
  for (std::size_t i : p.pools) ++r.pools[i]->users;
  for (const thread_plan& c : p.children) count_users(c, r);
}

struct round_summary {
  std::size_t threads = 0, pools = 0, destroyed_live = 0;  // destroyed while some worker ran
};

round_summary run_round(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  round_state r;
  const std::size_t initial = seed % 3 == 2 ? uniform(rng, 9, 12) : uniform(rng, 1, 12);
  const std::size_t replacements = uniform(rng, 0, 3);
  for (std::size_t i = 0; i < initial + replacements; ++i) {
    auto sp = std::make_unique<shared_pool>();
    sp->spec = draw_spec(rng);
    sp->replacement = i >= initial;
    sp->doomed = !sp->replacement && rng() % 3 == 0;
    if (!sp->replacement) sp->pool = make_pool(sp->spec);
    r.pools.push_back(std::move(sp));
  }
  std::vector<thread_plan> plans;
  const std::size_t top = uniform(rng, 2, 6);
  for (std::size_t t = 0; t < top; ++t) {
    plans.push_back(draw_plan(rng, r, initial, 0, seed % 3 == 2 && t == 0));  // > 8 pools on one thread
  }
  for (const thread_plan& p : plans) count_users(p, r);

  std::vector<std::thread> threads;
  r.first_threads = plans.size();
  for (const thread_plan& p : plans) threads.emplace_back([&r, &p] { worker(r, p).run(/*first=*/true); });

  // Destroys each doomed pool as soon as its users are done, without joining them: they go on
  // with other pools, or exit while it is destroyed.
  round_summary summary;
  {
    std::unique_lock lock(r.mutex);
    for (;;) {
      std::vector<std::pair<std::size_t, counts>> ready;
      bool waiting = false;
      for (std::size_t i = 0; i < r.pools.size(); ++i) {
        shared_pool& sp = *r.pools[i];
        if (!sp.doomed || !sp.pool) continue;
        if (sp.users == 0) {
          ready.emplace_back(i, sp.done);
        } else {
          waiting = true;
        }
      }
      if (!ready.empty()) {
        lock.unlock();
        for (auto& [i, done] : ready) {
          shared_pool& sp = *r.pools[i];
          // No call is in flight on it: its users are done, though some still live.
          check_counts(*sp.pool, sp.spec, done, describe("doomed pool ", i, " ", sp.spec));
          const bool live = r.running.load() > 0;
          std::unique_ptr<any_pool> gone = std::move(sp.pool);
          gone.reset();
          if (live) ++summary.destroyed_live;
        }
        lock.lock();
        continue;
      }
      if (!waiting) break;
      r.changed.wait(lock);
    }
    for (auto& sp : r.pools) {
      if (sp->replacement) sp->pool = make_pool(sp->spec);  // perhaps where a doomed one lived
    }
    r.replacements_ready = true;
  }
  r.changed.notify_all();
  for (std::thread& t : threads) t.join();

  // No call in flight on any pool: the exact checks.
  for (std::size_t i = 0; i < r.pools.size(); ++i) {
    shared_pool& sp = *r.pools[i];
    if (!sp.pool) continue;
    check_quiescent(*sp.pool, sp.spec, sp.done, describe(sp.replacement ? "replacement pool " : "pool ", i, " ", sp.spec));
    sp.pool.reset();
  }
  for (held_buf& h : r.exchange) {
    STRESS_EXPECT(intact(h), "a buffer's pattern changed in the exchange");
    registry.let_go(h.b);
  }
  r.exchange.clear();
  const std::size_t still_held = registry.size();
  STRESS_EXPECT(still_held == 0, still_held, " buffers still registered as held after the round");
  summary.threads = r.threads.load();
  summary.pools = r.pools.size() + r.private_pools.load();
  return summary;
}

// ---- the heap, for the slot table's growth ------------------------------------------------------

std::size_t heap_in_use() {
#ifdef SLUICE_TEST_SANITIZED
  return __sanitizer_get_current_allocated_bytes();
#else
  const struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
#endif
}

}  // namespace

TEST_CASE("stress: pools live and die under threads that come and go") {
  const double budget = budget_seconds();
  const auto replay = replay_round();
  const auto start = std::chrono::steady_clock::now();
  const auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  std::size_t rounds = 0, threads = 0, pools = 0, destroyed_live = 0;
  const std::uint64_t calls_before = total_calls.load(), checks_before = exact_checks.load(),
                      drained_before = drained_total.load();
  for (std::uint64_t round = replay.value_or(0);; ++round) {
    if (replay ? rounds == 1 : (rounds > 0 && elapsed() >= budget)) break;
    const std::uint64_t seed = round;
    CAPTURE(seed);
    const round_summary s = run_round(seed);
    ++rounds;
    threads += s.threads;
    pools += s.pools;
    destroyed_live += s.destroyed_live;
    if (failures.count() > 0) {
      for (const std::string& m : failures.messages()) FAIL_CHECK(m);
      FAIL("round " << seed << " failed (" << failures.count() << " failures); replay it with SLUICE_STRESS_SEED="
                    << seed);
    }
  }
  MESSAGE("stress: " << rounds << " rounds, " << threads << " threads, " << pools << " pools ("
                     << destroyed_live << " destroyed mid-round while workers ran), " << (total_calls.load() - calls_before)
                     << " calls, " << (exact_checks.load() - checks_before) << " pools checked exactly ("
                     << (drained_total.load() - drained_before) << " buffers drained) in " << elapsed() << " s");
}

// The slot table under the stacks gives every retained buffer a slot; a trim returns the slots
// it empties. A thread that trims what another retires must hand them back, not hoard them:
// else the retirer takes fresh slots every time and the table grows without bound.
TEST_CASE("stress: a thread that trims what another retires leaves the slot table bounded") {
  for (const bool cached : {true, false}) {
    CAPTURE(cached);
    sluice::pool p{pool_options{.bound = 4096, .thread_cache = cached}};
    constexpr std::size_t frames = 256;
    // The two threads take turns: the retirer retires a batch, then this thread trims it.
    std::mutex m;
    std::condition_variable turn;
    int batches = 0, trimmed = 0;  // under m
    bool stop = false;             // under m
    std::thread retirer([&] {
      std::vector<buffer> held;
      held.reserve(frames);
      for (;;) {
        {
          std::unique_lock lock(m);
          turn.wait(lock, [&] { return stop || trimmed == batches; });
          if (stop) break;
        }
        for (std::size_t i = 0; i < frames; ++i) held.push_back(p.acquire(64 + (i % 3) * 16));
        for (buffer& b : held) p.retire(std::move(b));
        held.clear();
        std::lock_guard lock(m);
        ++batches;
        turn.notify_all();
      }
    });
    const auto cycle = [&] {
      {
        std::unique_lock lock(m);
        turn.wait(lock, [&] { return batches > trimmed; });
      }
      p.trim();
      std::lock_guard lock(m);
      ++trimmed;
      turn.notify_all();
    };
    for (int i = 0; i < 16; ++i) cycle();
    const std::size_t before = heap_in_use();
    constexpr int cycles = 150;  // a hoarding trimmer would grow the table by some 3 KiB a cycle
    for (int i = 0; i < cycles; ++i) cycle();
    const std::size_t after = heap_in_use();
    {
      std::lock_guard lock(m);
      stop = true;
      turn.notify_all();
    }
    retirer.join();
    const std::ptrdiff_t growth = static_cast<std::ptrdiff_t>(after) - static_cast<std::ptrdiff_t>(before);
    MESSAGE("heap growth over " << cycles << " retire/trim cycles (cached " << cached << "): " << growth << " bytes");
    CHECK(growth < std::ptrdiff_t{128} << 10);
    CHECK(p.retained() <= 4096);
  }
}
