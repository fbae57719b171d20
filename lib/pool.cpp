// sluice::pool: lock-free size-class stacks with thread caches in front (see pool/core.hpp for
// the layout and sluice/pool.hpp for the contract).
//
// Ordering pairs used here, beyond those inside the stacks (pool/slots.hpp, S1-S3, C1-C2):
//   (P) the publish handshake with trim. A thread about to push a chain of kept buffers raises
//       its cache's `publishing` flag (P1, seq_cst store of an odd count), reads `state` (P2,
//       seq_cst), pushes only if no trim or switch has overtaken its call, and lowers the flag
//       (P3, release store of the next even count). trim bumps `state` (T1, seq_cst RMW), then
//       reads every cache's flag (T2, seq_cst) and waits while one is up, until it moves on, and
//       only then empties the stacks (S3). Each side stores, then loads what the other stores,
//       so in the single total order of seq_cst operations either P2 follows T1 (the publisher
//       sees the trim and does not push) or T2 follows P1 (trim waits for P3, which then
//       happens-before its pops, so they find the chain). Buffers kept before a trim therefore
//       never outlive it on a stack, and trim never touches a buffer retired after it returned:
//       there is no drain on the publisher's side. trim waits only for the publish it found in
//       progress, so publishers that keep coming cannot hold it up.
//   (R) the same handshake for a refill, which pops a batch into a cache: the batch must enter
//       the cache under the generation it was popped in, since a thread's next call frees a
//       cache whose generation has passed. The pop runs under the flag, after a check (R2, as
//       P2) that the cache is current and no trim is running. A trim that starts after R2 waits
//       for the flag, so its pops follow this one, and the batch, from before the trim, is
//       rightly freed at the thread's next call; one that ended before R2 lowered its count
//       (T3, release) after its pops, so the batch holds nothing it had to free. While a trim
//       runs, or the cache is behind, a take pops its one buffer directly instead.
//   (M) admin_mutex orders everything a non-owner does to a thread cache (thread exit, ~pool,
//       fork) against the owner's calls, which the caller keeps apart from ~pool; a thread that
//       has no cache (it is exiting, or had no memory for one) publishes under it instead of
//       raising a flag.
#include <algorithm>
#include <array>
#include <atomic>
#include <new>
#include <optional>
#include <thread>
#include <tuple>

#include "pool/core.hpp"
#include "sluice/pool.hpp"

namespace sluice {

using detail::chain;
using detail::counters;
using detail::held;
using detail::magazine;
using detail::no_slot;
using detail::slot_index;
using detail::thread_cache;

namespace {

constexpr std::uint32_t free_slots_batch = 32;   // slots move between caches and the free stack
constexpr std::uint32_t free_slots_limit = 2 * free_slots_batch;

// Below this bound a cache could hold at most three buffers (bound / 16), which would save little
// and could hoard much of what the bound allows: such pools use the shared stacks alone.
constexpr std::size_t min_caching_bound = 64;

bool enabled_in(std::uint64_t state) noexcept { return (state & detail::enabled_bit) != 0; }
bool trimming_in(std::uint64_t state) noexcept { return (state & detail::trims_mask) != 0; }
std::uint64_t generation_of(std::uint64_t state) noexcept { return state / detail::one_generation; }

// A counter update. A cache's counters have one writer, so a plain load and store suffice (no
// read-modify-write on the fast path); the orphans' are shared and use fetch_add.
struct recorder {
  counters* c;
  bool owned;
  void add(detail::atomic<std::uint64_t> counters::*field, std::uint64_t v) const noexcept {
    auto& a = c->*field;
    if (owned) {
      a.store(a.load(std::memory_order_relaxed) + v, std::memory_order_relaxed);
    } else {
      a.fetch_add(v, std::memory_order_relaxed);
    }
  }
};

// ---- a thread's caches ------------------------------------------------------------------------
//
// Every cache a thread holds is on its list (`caches`, linked through next_of_thread). The
// directory, a small array in static TLS, remembers the most recently used few, so that finding
// the cache costs a few compares and no call; a thread that uses more pools than it has ways
// finds the others on its list, without a lock or an allocation. A cache keeps its pool's
// control block alive, so the key, the control block's address, is never reused while a way or
// the list names it. Both are trivially destructible; a separate thread_local `reaper` gives
// every cache back at thread exit.

struct directory_entry {
  const pool::core* core = nullptr;
  thread_cache* cache = nullptr;
};
constexpr std::size_t directory_ways = 8;

struct thread_state {
  std::array<directory_entry, directory_ways> directory{};
  thread_cache* caches = nullptr;  // the list
  bool torn_down = false;          // the reaper has run: calls from later destructors go uncached
};

#ifdef SLUICE_PER_THREAD_DECLARED
// A model checker whose threads share one OS thread (Relacy's fibers) keeps each one's state
// through the seam (sluice/detail/atomic.hpp), and drives their exits through
// release_thread_caches() itself.
thread_state& this_thread() noexcept { return detail::per_thread<thread_state>(); }
void arm_reaper() {}
#else
constinit thread_local thread_state tls_state __attribute__((tls_model("initial-exec"))){};

struct reaper {
  void arm() noexcept {}
  ~reaper() {
    detail::release_thread_caches();
    tls_state.torn_down = true;
  }
};
thread_local reaper tls_reaper;

[[gnu::always_inline]] inline thread_state& this_thread() noexcept { return tls_state; }
void arm_reaper() { tls_reaper.arm(); }  // constructs the reaper, to run at thread exit (may throw)
#endif

void detach(thread_cache* tc) noexcept;

}  // namespace

// ---- construction --------------------------------------------------------------------------

detail::thread_cache::thread_cache(pool::core& c)
    : core(c),
      seen_state(c.state.load(std::memory_order_relaxed)),  // as begin() reads it
      magazines(c.caching ? std::make_unique<std::unique_ptr<magazine>[]>(c.classes.count()) : nullptr) {}

pool::core::core(const pool_options& o)
    : classes(o.ceiling),
      class_size(std::make_unique<std::size_t[]>(classes.count())),
      bound(o.bound),
      caching(o.thread_cache && o.bound >= min_caching_bound),
      cache_limit(static_cast<std::uint32_t>(std::clamp<std::size_t>(o.bound / 16, 1, 64))),
      place_batch(std::max<std::uint32_t>(1, std::min<std::uint32_t>(16, cache_limit / 2))),
      state(o.enabled ? detail::enabled_bit : 0),
      stacks(std::make_unique<detail::tagged_stack[]>(classes.count())),
      off_class(classes.count()),
      off_class_nonempty(std::make_unique<detail::atomic<bool>[]>(classes.count())) {
  for (std::size_t cls = 0; cls < classes.count(); ++cls) class_size[cls] = classes.size(cls);
  join();  // last: a fork may lock this core from here on
}

namespace {

// ---- what every call shares -------------------------------------------------------------------

using core = pool::core;

struct call {
  core& c;
  thread_cache* tc;      // null: this thread has no cache (it is exiting, or none could be made)
  std::uint64_t state;   // the state word this call acts under

  // Where this call counts what it did: its thread's counters, or the shared orphans'.
  recorder rec() const noexcept { return tc != nullptr ? recorder{&tc->counts, true} : recorder{&c.orphans, false}; }
};

// ---- the bound ------------------------------------------------------------------------------

// Takes up to n places of the bound; answers how many. All of `reserved` is relaxed (see
// core.hpp): a place is given back only after the buffer holding it was taken, and that order
// is carried by the stacks' release/acquire pairs.
[[gnu::cold, gnu::noinline]] std::size_t reserve(core& c, std::size_t n) noexcept {
  std::size_t used = c.reserved.load(std::memory_order_relaxed);
  std::size_t got = 0;
  do {
    if (used >= c.bound) return 0;
    got = std::min(n, c.bound - used);
  } while (!c.reserved.compare_exchange_weak(used, used + got, std::memory_order_relaxed));
  return got;
}

void unreserve(core& c, std::size_t n) noexcept {
  if (n > 0) c.reserved.fetch_sub(n, std::memory_order_relaxed);
}

bool caches(const call& k) noexcept { return k.tc != nullptr && k.tc->magazines; }

// One place of the bound for a buffer about to be kept: from this thread's spare places, which
// it refills a batch at a time when it caches; else straight from the shared counter.
[[gnu::always_inline]] inline bool take_place(call& k) noexcept {
  if (!caches(k)) return reserve(k.c, 1) == 1;
  std::uint32_t spare = k.tc->spare.load(std::memory_order_relaxed);
  if (spare == 0) spare = static_cast<std::uint32_t>(reserve(k.c, k.c.place_batch));
  if (spare == 0) return false;
  k.tc->spare.store(spare - 1, std::memory_order_relaxed);
  return true;
}

// The place of a buffer that left the pool: kept as a spare by a caching thread (up to a limit),
// else given back to the shared counter.
[[gnu::always_inline]] inline void give_place(call& k) noexcept {
  if (!caches(k)) return unreserve(k.c, 1);
  std::uint32_t spare = k.tc->spare.load(std::memory_order_relaxed) + 1;
  if (spare > 2 * k.c.place_batch) {
    unreserve(k.c, k.c.place_batch);
    spare -= k.c.place_batch;
  }
  k.tc->spare.store(spare, std::memory_order_relaxed);
}

// ---- slots ----------------------------------------------------------------------------------
//
// Every `next` load and store below is relaxed: it touches a slot that this thread owns (on its
// own spare list, or popped from a stack), whose link only it writes; links on a shared stack
// are ordered by the stack's own CASes (S1, S2).

// The first n slots of a list this thread owns, as a chain (its last slot found by walking).
chain first_of(core& c, const thread_cache::local_chain& list, std::uint32_t n) noexcept {
  chain out{list.first, list.first, n};
  for (std::uint32_t j = 1; j < n; ++j) out.last = c.slots[out.last].next.load(std::memory_order_relaxed);
  return out;
}

// Gives slots with no buffer back: to tc's spare slots, of which it keeps at most
// free_slots_limit (the rest, all but a batch, go to the free stack, so a thread that drains
// many, as trim does, keeps no more than any other); or to the free stack when there is no cache.
[[gnu::cold, gnu::noinline]] void release_slots(core& c, thread_cache* tc, chain ch) noexcept {
  if (tc == nullptr) {
    c.free_slots.push_chain(c.slots, ch);
    return;
  }
  auto& mine = tc->free_slots;
  c.slots[ch.last].next.store(mine.first, std::memory_order_relaxed);
  mine = {ch.first, mine.count + ch.count};
  if (mine.count > free_slots_limit) {
    const chain excess = first_of(c, mine, mine.count - free_slots_batch);
    mine = {c.slots[excess.last].next.load(std::memory_order_relaxed), free_slots_batch};
    c.free_slots.push_chain(c.slots, excess);
  }
}

// A slot for a buffer to be kept: from this thread's spare slots, the free stack, or fresh from
// the slot table (lock-free, see slot_table::claim). no_slot when none can be had (no memory,
// or all 2^32 - 1 made).
[[gnu::cold, gnu::noinline]] slot_index get_slot(call& k) noexcept {
  thread_cache::local_chain* mine = k.tc ? &k.tc->free_slots : nullptr;
  if (mine != nullptr && mine->count > 0) {
    const slot_index i = mine->first;
    *mine = {k.c.slots[i].next.load(std::memory_order_relaxed), mine->count - 1};
    return i;
  }
  const std::uint32_t want = mine != nullptr ? free_slots_batch : 1;
  chain got = k.c.free_slots.pop_chain(k.c.slots, want);
  if (got.count == 0) got = k.c.slots.claim(want);
  if (got.count == 0) return no_slot;
  if (got.count > 1) *mine = {k.c.slots[got.first].next.load(std::memory_order_relaxed), got.count - 1};
  return got.first;
}

// ---- the shared stacks ----------------------------------------------------------------------

// Frees n buffers of class cls that the pool held, and gives back their places.
void free_held(call& k, std::size_t cls, std::byte* const* items, std::uint32_t n) noexcept {
  if (n == 0) return;
  for (std::uint32_t j = 0; j < n; ++j) detail::free_bytes(items[j]);
  k.rec().add(&counters::bytes_out, std::uint64_t{n} * k.c.class_size[cls]);
  unreserve(k.c, n);
}

// Frees the buffers of a chain of class cls that this call holds, and releases its slots.
void free_chain(call& k, std::size_t cls, const chain& ch) noexcept {
  slot_index i = ch.first;
  for (std::uint32_t j = 0; j < ch.count; ++j) {
    detail::free_bytes(k.c.slots[i].data);
    i = k.c.slots[i].next.load(std::memory_order_relaxed);
  }
  k.rec().add(&counters::bytes_out, std::uint64_t{ch.count} * k.c.class_size[cls]);
  unreserve(k.c, ch.count);
  release_slots(k.c, k.tc, ch);
}

// Empties stack cls, freeing its buffers.
[[gnu::cold, gnu::noinline]] void drain(call& k, std::size_t cls) noexcept {
  const chain got = k.c.stacks[cls].pop_all(k.c.slots);  // (S3)
  if (got.count > 0) free_chain(k, cls, got);
}

// The flag of (P) and (R): an odd count while raised. Owner only.
std::uint32_t raise_flag(thread_cache& tc) noexcept {
  const std::uint32_t flag = tc.publishing.load(std::memory_order_relaxed) + 1;  // its own writes
  tc.publishing.store(flag, std::memory_order_seq_cst);  // (P1): seq_cst, for the order with T1/T2
  return flag;
}
void lower_flag(thread_cache& tc, std::uint32_t flag) noexcept {
  tc.publishing.store(flag + 1, std::memory_order_release);  // (P3): pairs with trim's wait
}

// Pushes a chain of kept buffers of class cls onto its stack, keeping the handshake (P) with
// trim. `earlier`: the chain holds buffers that earlier calls kept (a cache's flush), which a
// trim that overtook this call must free; else it holds only this call's own buffer, which only
// a switch to disabled must keep out (a trim alone may be overtaken: the retire then counts as
// coming after it). Answers whether it pushed; if not, the caller still holds the chain.
bool publish(call& k, std::size_t cls, const chain& ch, bool earlier) noexcept {
  const auto may_push = [&](std::uint64_t now) { return earlier ? now == k.state : enabled_in(now); };
  if (k.tc == nullptr) {
    // (M): trim reads the flags under admin_mutex, after its bump; this section comes wholly
    // before that (trim's pops then find the chain) or wholly after (this load sees the bump).
    std::lock_guard lock(k.c.admin_mutex);
    if (!may_push(k.c.state.load(std::memory_order_relaxed))) return false;
    k.c.stacks[cls].push_chain(k.c.slots, ch);  // (S1)
    return true;
  }
  const std::uint32_t flag = raise_flag(*k.tc);                           // (P1)
  const bool push = may_push(k.c.state.load(std::memory_order_seq_cst));  // (P2)
  if (push) k.c.stacks[cls].push_chain(k.c.slots, ch);                   // (S1)
  lower_flag(*k.tc, flag);                                                // (P3)
  return push;
}

// trim's side of (P) and (R), after its bump (T1): waits until no thread is inside a publish or
// a refill that it found in progress (and that may have read the state before the bump).
void await_publishers(core& c) noexcept {
  std::lock_guard lock(c.admin_mutex);  // (M): keeps the registry still, and orders orphans
  for (const thread_cache* tc = c.registry; tc != nullptr; tc = tc->next) {
    const std::uint32_t seen = tc->publishing.load(std::memory_order_seq_cst);  // (T2)
    if (seen % 2 == 0) continue;
    // acquire: synchronizes-with P3, or with a later P1 (a seq_cst store, so a release too)
    while (tc->publishing.load(std::memory_order_acquire) == seen) std::this_thread::yield();
  }
}

// ---- magazines --------------------------------------------------------------------------------

// This thread's magazine for class cls, made at first use; null when it caches nothing or no
// memory can be had (the call then goes to the shared stack directly).
[[gnu::cold, gnu::noinline]] magazine* make_magazine(call& k, std::size_t cls) noexcept {
  std::unique_ptr<magazine> m(new (std::nothrow) magazine);
  if (m != nullptr) m->limit = std::min(2 * detail::batch_size(k.c.class_size[cls]), k.c.cache_limit);
  return (k.tc->magazines[cls] = std::move(m)).get();
}

[[gnu::always_inline]] inline magazine* magazine_for(call& k, std::size_t cls) noexcept {
  if (!caches(k)) return nullptr;
  magazine* m = k.tc->magazines[cls].get();
  return m != nullptr ? m : make_magazine(k, cls);
}

// Moves the oldest n buffers of a magazine to the shared stack as one chain, or frees them when
// a trim or the switch overtook this call (P). Answers how many left the magazine: fewer than n
// only when no slot can be had, and then the rest stay (a kept buffer is never freed for want
// of a slot; the retire that needed the room is dropped instead).
[[gnu::cold, gnu::noinline]] std::uint32_t flush(call& k, std::size_t cls, magazine& m, std::uint32_t n) noexcept {
  chain out;
  while (out.count < n) {
    const slot_index i = get_slot(k);
    if (i == no_slot) break;
    k.c.slots[i].data = m.items[out.count];
    if (out.count == 0) {
      out.first = i;
    } else {
      k.c.slots[out.last].next.store(i, std::memory_order_relaxed);
    }
    out.last = i;
    ++out.count;
  }
  if (out.count == 0) return 0;
  if (!publish(k, cls, out, /*earlier=*/true)) free_chain(k, cls, out);
  std::copy(m.items + out.count, m.items + m.count, m.items);
  m.count -= out.count;
  k.tc->cached -= out.count;
  return out.count;
}

// Room in this thread's cache for n more buffers: when they would pass its limit, everything it
// caches moves to the shared stacks. False when that could not be done (no slot could be had).
bool make_room(call& k, std::uint32_t n) noexcept {
  if (k.tc->cached + n <= k.c.cache_limit) return true;
  for (std::size_t cls = 0; cls < k.c.classes.count() && k.tc->cached > 0; ++cls) {
    if (magazine* m = k.tc->magazines[cls].get(); m != nullptr && m->count > 0) flush(k, cls, *m, m->count);
  }
  return k.tc->cached + n <= k.c.cache_limit;
}

// The batch a magazine moves at once: half of what it holds at most.
std::uint32_t batch_of(const magazine& m) noexcept { return std::max<std::uint32_t>(1, m.limit / 2); }

// Fills an empty magazine with a batch from the shared stack, keeping the handshake (R) with
// trim; their places come with them. Leaves it empty while a trim runs or the cache is behind.
[[gnu::cold, gnu::noinline]] void refill(call& k, std::size_t cls, magazine& m) noexcept {
  if (k.c.stacks[cls].looks_empty() || !make_room(k, batch_of(m))) return;
  const std::uint32_t flag = raise_flag(*k.tc);                         // (P1)
  const std::uint64_t now = k.c.state.load(std::memory_order_seq_cst);  // (R2)
  chain got;
  if (now == k.tc->seen_state && !trimming_in(now)) {
    got = k.c.stacks[cls].pop_chain(k.c.slots, batch_of(m));  // (S2)
  }
  lower_flag(*k.tc, flag);                                      // (P3)
  k.tc->cached += got.count;
  slot_index i = got.first;
  for (std::uint32_t j = 0; j < got.count; ++j) {
    m.items[m.count++] = k.c.slots[i].data;
    i = k.c.slots[i].next.load(std::memory_order_relaxed);
  }
  if (got.count > 0) release_slots(k.c, k.tc, got);
}

// Frees what tc caches and gives back its places of the bound (after a trim, or when the pool
// is disabled). Owner only.
void empty_cache(core& c, thread_cache& tc) noexcept {
  call k{c, &tc, tc.seen_state};
  if (tc.magazines) {
    for (std::size_t cls = 0; cls < c.classes.count(); ++cls) {
      if (magazine* m = tc.magazines[cls].get(); m != nullptr) {
        free_held(k, cls, m->items, m->count);
        m->count = 0;
      }
    }
  }
  tc.cached = 0;
  unreserve(c, tc.spare.exchange(0, std::memory_order_relaxed));
}

[[gnu::cold, gnu::noinline]] void sync(core& c, thread_cache& tc, std::uint64_t state) noexcept {
  if (generation_of(state) != generation_of(tc.seen_state) || !enabled_in(state)) {
    empty_cache(c, tc);
  }
  tc.seen_state = state;
}

// ---- finding this thread's cache ------------------------------------------------------------

// This thread's cache for the pool, if the directory remembers it: a few compares in static TLS.
[[gnu::always_inline]] inline thread_cache* find_cache(const core& c) noexcept {
  for (const auto& e : this_thread().directory) {
    if (e.core == &c) return e.cache;
  }
  return nullptr;
}

// Puts tc in the directory's first way; the last way's cache stays on the thread's list.
void remember(thread_cache* tc) noexcept {
  auto& directory = this_thread().directory;
  std::move_backward(directory.begin(), directory.end() - 1, directory.end());
  directory[0] = {&tc->core, tc};
}

// Lets go of this thread's caches whose pools are gone (each takes that dead pool's mutex).
void forget_dead() noexcept {
  for (thread_cache** link = &this_thread().caches; *link != nullptr;) {
    thread_cache* tc = *link;
    // A hint, relaxed: `alive` only ever falls, and a cache missed now is let go later.
    if (tc->core.alive.load(std::memory_order_relaxed)) {
      link = &tc->next_of_thread;
      continue;
    }
    *link = tc->next_of_thread;
    for (auto& e : this_thread().directory) {
      if (e.cache == tc) e = {};
    }
    detach(tc);
  }
}

// A new cache for this thread's first call to the pool; null when the thread is exiting or no
// memory can be had (the call then goes uncached).
[[gnu::cold, gnu::noinline]] thread_cache* enroll(core& c) noexcept {
  thread_state& me = this_thread();
  if (me.torn_down) return nullptr;
  forget_dead();  // here, where the call blocks anyway, so that other calls never wait for it
  thread_cache* tc = nullptr;
  try {
    arm_reaper();
    tc = new thread_cache(c);
  } catch (...) {
    return nullptr;
  }
  {
    std::lock_guard lock(c.admin_mutex);  // (M)
    tc->next = c.registry;
    if (c.registry != nullptr) c.registry->prev = tc;
    c.registry = tc;
    ++c.refs;
  }
  tc->next_of_thread = me.caches;
  me.caches = tc;
  remember(tc);
  return tc;
}

// This thread's cache for the pool when the directory has no way for it: from the thread's
// list (then remembered), else, when `make`, a new one.
[[gnu::cold, gnu::noinline]] thread_cache* find_slow(core& c, bool make) noexcept {
  for (thread_cache* tc = this_thread().caches; tc != nullptr; tc = tc->next_of_thread) {
    if (&tc->core == &c) {
      remember(tc);
      return tc;
    }
  }
  return make ? enroll(c) : nullptr;
}

// Every take, retire and trim starts here: this thread's cache for the pool, and the state word
// it acts under. Relaxed: a trim or switch that happens-before this call is seen (write-read
// coherence); one that merely ran earlier on another thread reaches this thread at a later call.
// The buffers it must not keep meanwhile are covered by the handshake (P).
[[gnu::always_inline]] inline call begin(core& c) noexcept {
  thread_cache* tc = find_cache(c);
  if (tc == nullptr) tc = find_slow(c, true);
  const std::uint64_t state = c.state.load(std::memory_order_relaxed);
  if (tc != nullptr && state != tc->seen_state) sync(c, *tc, state);
  return {c, tc, state};
}

// The calls that neither take nor retire bring the caller's own cache up to date the same way,
// without making one.
void catch_up(core& c) noexcept {
  thread_cache* tc = find_cache(c);
  if (tc == nullptr) tc = find_slow(c, false);
  if (tc == nullptr) return;
  const std::uint64_t state = c.state.load(std::memory_order_relaxed);  // as begin()
  if (state != tc->seen_state) sync(c, *tc, state);
}

// ---- take and retire, per kind of buffer ----------------------------------------------------

// A buffer of class cls from this thread's magazine or the shared stack, or null.
[[gnu::always_inline]] inline std::byte* take_on_class(call& k, std::size_t cls) noexcept {
  // A miss on a class never seen here makes no magazine: only a refill needs one.
  if (caches(k) && k.tc->magazines[cls] == nullptr && k.c.stacks[cls].looks_empty()) return nullptr;
  if (magazine* m = magazine_for(k, cls)) {
    if (m->count == 0) refill(k, cls, *m);
    if (m->count > 0) {
      give_place(k);  // the place stays with this thread as a spare, for its next retire
      --k.tc->cached;
      return m->items[--m->count];
    }
    if (k.c.stacks[cls].looks_empty()) return nullptr;  // else the cache had no room: pop one
  }
  const chain got = k.c.stacks[cls].pop_chain(k.c.slots, 1);  // (S2)
  if (got.count == 0) return nullptr;
  std::byte* data = k.c.slots[got.first].data;
  release_slots(k.c, k.tc, got);
  give_place(k);
  return data;
}

// Keeps a buffer of class cls; false when the bound or the slots are exhausted, or the pool was
// switched off while this retire ran.
[[gnu::always_inline]] inline bool retire_on_class(call& k, std::size_t cls, std::byte* data) noexcept {
  magazine* m = magazine_for(k, cls);
  if (!take_place(k)) return false;
  if (m != nullptr) {
    if (make_room(k, 1) && (m->count < m->limit || flush(k, cls, *m, batch_of(*m)) > 0)) {
      m->items[m->count++] = data;
      ++k.tc->cached;
      return true;
    }
  } else if (const slot_index i = get_slot(k); i != no_slot) {
    k.c.slots[i].data = data;
    if (publish(k, cls, chain{i, i, 1}, /*earlier=*/false)) return true;
    release_slots(k.c, k.tc, chain{i, i, 1});
  }
  give_place(k);
  return false;
}

[[gnu::cold, gnu::noinline]] std::optional<held> take_off_class(call& k, std::size_t cls, std::size_t size) noexcept {
  std::optional<held> h;
  {
    std::lock_guard lock(k.c.shelf_mutex);
    h = k.c.off_class.take(cls, size);
    k.c.off_class_nonempty[cls].store(!k.c.off_class.empty(cls), std::memory_order_relaxed);
  }
  if (h) give_place(k);
  return h;
}

[[gnu::cold, gnu::noinline]] bool retire_off_class(call& k, std::size_t cls, held h) noexcept {
  if (!take_place(k)) return false;
  {
    std::lock_guard lock(k.c.shelf_mutex);
    // Under the shelf lock, a switch to disabled whose trim has emptied the shelves is seen (the
    // lock orders the two): no buffer is shelved past set_enabled(false). A trim alone may be
    // overtaken, as if this retire came after it.
    if (enabled_in(k.c.state.load(std::memory_order_relaxed))) {
      try {
        k.c.off_class.put(cls, h);
        k.c.off_class_nonempty[cls].store(true, std::memory_order_relaxed);
        return true;
      } catch (const std::bad_alloc&) {
      }
    }
  }
  give_place(k);
  return false;
}

// ---- a cache's end ----------------------------------------------------------------------------

void fold(counters& into, const counters& from) noexcept {
  for (auto field : {&counters::hits, &counters::misses, &counters::retired, &counters::dropped,
                     &counters::bytes_in, &counters::bytes_out}) {
    recorder{&into, true}.add(field, (from.*field).load(std::memory_order_relaxed));
  }
}

// Gives a cache back to its pool (its thread is exiting, or the pool is gone) and lets go of the
// pool's control block. Runs on the cache's own thread, which has taken it off its list.
void detach(thread_cache* tc) noexcept {
  core& c = tc->core;
  bool last = false;
  {
    std::lock_guard lock(c.admin_mutex);  // (M)
    if (c.alive.load(std::memory_order_relaxed)) {
      const std::uint64_t now = c.state.load(std::memory_order_relaxed);
      if (now != tc->seen_state) sync(c, *tc, now);
      call k{c, tc, now};
      if (tc->magazines) {
        for (std::size_t cls = 0; cls < c.classes.count(); ++cls) {
          if (magazine* m = tc->magazines[cls].get(); m != nullptr && m->count > 0) {
            flush(k, cls, *m, m->count);
            free_held(k, cls, m->items, m->count);  // what found no slot: the thread is leaving
            m->count = 0;
          }
        }
      }
      tc->cached = 0;
      unreserve(c, tc->spare.exchange(0, std::memory_order_relaxed));
      if (tc->free_slots.count > 0) {
        release_slots(c, nullptr, first_of(c, tc->free_slots, tc->free_slots.count));
        tc->free_slots = {};
      }
      fold(c.departed, tc->counts);
    }
    (tc->prev != nullptr ? tc->prev->next : c.registry) = tc->next;
    if (tc->next != nullptr) tc->next->prev = tc->prev;
    last = --c.refs == 0;
  }
  delete tc;  // touches nothing of the core, which another thread may free from here on
  if (last) delete &c;
}

// ---- take and retire in full, and their fast paths ----------------------------------------

// The general take and retire: every rule, every kind of buffer and thread. An exact take looks
// only at the class of size, and only at its own-size buffers.
[[gnu::noinline]] buffer take_general(core& c, std::size_t size, bool exact) {
  call k = begin(c);
  const auto& classes = c.classes;
  if (enabled_in(k.state) && size <= classes.ceiling()) {
    const std::size_t first = classes.of(size), end = exact ? first + 1 : classes.count();
    for (std::size_t cls = first; cls < end; ++cls) {
      // Within a class, off-class buffers are the smaller: look at them first.
      if (!exact && c.off_class_nonempty[cls].load(std::memory_order_relaxed)) {
        if (const auto h = take_off_class(k, cls, size)) {
          k.rec().add(&counters::hits, 1);
          k.rec().add(&counters::bytes_out, h->capacity);
          return detail::buffer_access::make(*h, size);
        }
      }
      if (std::byte* data = take_on_class(k, cls)) {
        k.rec().add(&counters::hits, 1);
        const std::size_t capacity = c.class_size[cls];
        k.rec().add(&counters::bytes_out, capacity);
        return detail::buffer_access::make(held{data, capacity}, size);
      }
    }
  }
  k.rec().add(&counters::misses, 1);
  return {};
}

[[gnu::noinline]] void retire_general(core& c, held h) noexcept {
  call k = begin(c);
  const auto& classes = c.classes;
  bool kept = false;
  if (enabled_in(k.state) && h.capacity <= classes.ceiling()) {
    const std::size_t cls = classes.of(h.capacity);
    kept = c.class_size[cls] == h.capacity ? retire_on_class(k, cls, h.data) : retire_off_class(k, cls, h);
  }
  if (kept) {
    k.rec().add(&counters::retired, 1);
    k.rec().add(&counters::bytes_in, h.capacity);
  } else {
    k.rec().add(&counters::dropped, 1);
    detail::free_bytes(h.data);
  }
}

// The fast paths: a thread whose cache is current, a buffer of the pool's own classes, and a
// magazine that can answer (take) or keep (retire) it. Each is a strict subset of the general
// path, taken only where that path would do exactly the same; anything else falls through to it.
[[gnu::always_inline]] inline thread_cache* current_cache(core& c) noexcept {
  thread_cache* tc = find_cache(c);
  const bool current = tc != nullptr && tc->magazines &&
                       c.state.load(std::memory_order_relaxed) == tc->seen_state;  // as begin()
  return current ? tc : nullptr;
}

[[gnu::always_inline]] inline buffer take_fast(core& c, std::size_t size, bool exact) {
  thread_cache* tc = current_cache(c);
  if (tc != nullptr && enabled_in(tc->seen_state) && size <= c.classes.ceiling()) {
    const std::size_t cls = c.classes.of(size);
    magazine* m = tc->magazines[cls].get();
    const std::uint32_t spare = tc->spare.load(std::memory_order_relaxed) + 1;
    if (m != nullptr && m->count > 0 && spare <= 2 * c.place_batch &&
        (exact || !c.off_class_nonempty[cls].load(std::memory_order_relaxed))) {
      const std::size_t capacity = c.class_size[cls];
      tc->spare.store(spare, std::memory_order_relaxed);
      const recorder rec{&tc->counts, true};
      rec.add(&counters::hits, 1);
      rec.add(&counters::bytes_out, capacity);
      --tc->cached;
      return detail::buffer_access::make(held{m->items[--m->count], capacity}, size);
    }
  }
  return take_general(c, size, exact);
}

// A buffer of the pool's class cls, its capacity that class's size.
[[gnu::always_inline]] inline void retire_fast(core& c, held h, std::size_t cls) noexcept {
  thread_cache* tc = current_cache(c);
  if (tc != nullptr && enabled_in(tc->seen_state)) {
    magazine* m = tc->magazines[cls].get();
    const std::uint32_t spare = tc->spare.load(std::memory_order_relaxed);
    if (m != nullptr && m->count < m->limit && tc->cached < c.cache_limit && spare > 0) {
      m->items[m->count++] = h.data;
      ++tc->cached;
      tc->spare.store(spare - 1, std::memory_order_relaxed);
      const recorder rec{&tc->counts, true};
      rec.add(&counters::retired, 1);
      rec.add(&counters::bytes_in, h.capacity);
      return;
    }
  }
  retire_general(c, h);
}

// ---- fork -------------------------------------------------------------------------------------

// In a forked child, where the parent's other threads are gone with whatever their caches held
// and whatever calls they had in flight. Their caches are let go without freeing their buffers:
// a thread stopped inside a call may have left a magazine's count one ahead of its items, so
// freeing could free a buffer its owner had answered; that memory stays allocated in the child,
// as jemalloc's and mimalloc's other threads' caches do. The bound's count and retained_bytes
// are then made exact again from what the child can reach.
void adopt_after_fork(core& c) noexcept {
  thread_cache* mine = nullptr;
  for (thread_cache* tc = this_thread().caches; tc != nullptr; tc = tc->next_of_thread) {
    if (&tc->core == &c) mine = tc;
  }
  for (thread_cache* tc = c.registry; tc != nullptr;) {
    thread_cache* const next = tc->next;
    if (tc != mine) {
      fold(c.departed, tc->counts);
      (tc->prev != nullptr ? tc->prev->next : c.registry) = tc->next;
      if (tc->next != nullptr) tc->next->prev = tc->prev;
      --c.refs;  // never the last: the pool itself holds one
      delete tc;
    }
    tc = next;
  }
  std::size_t places = 0;
  std::uint64_t bytes = 0;
  for (std::size_t cls = 0; cls < c.classes.count(); ++cls) {
    const std::size_t n = c.stacks[cls].count_alone(c.slots);
    places += n;
    bytes += n * c.class_size[cls];
  }
  const auto [shelved, shelved_bytes] = c.off_class.tally();
  places += shelved;
  bytes += shelved_bytes;
  counters sum;
  fold(sum, c.departed);
  fold(sum, c.orphans);
  if (mine != nullptr) {
    fold(sum, mine->counts);
    places += mine->spare.load(std::memory_order_relaxed);
    if (mine->magazines) {
      for (std::size_t cls = 0; cls < c.classes.count(); ++cls) {
        if (const magazine* m = mine->magazines[cls].get(); m != nullptr) {
          places += m->count;
          bytes += std::uint64_t{m->count} * c.class_size[cls];
        }
      }
    }
  }
  c.reserved.store(places, std::memory_order_relaxed);
  // A trim that another thread was running is over: the child's refills must not wait for it.
  c.state.fetch_and(~detail::trims_mask, std::memory_order_relaxed);
  // What the lost caches held leaves the byte count as if freed; a call stopped between moving
  // a buffer and counting it is counted as having finished.
  const std::uint64_t in = sum.bytes_in.load(std::memory_order_relaxed);
  const std::uint64_t out = sum.bytes_out.load(std::memory_order_relaxed);
  if (in - out > bytes) recorder{&c.departed, true}.add(&counters::bytes_out, in - out - bytes);
  if (in - out < bytes) recorder{&c.departed, true}.add(&counters::bytes_in, bytes - (in - out));
}

}  // namespace

void pool::core::lock_for_fork() noexcept {
  admin_mutex.lock();  // lock order: admin_mutex, then shelf_mutex
  shelf_mutex.lock();
}

void pool::core::unlock_in_parent() noexcept {
  shelf_mutex.unlock();
  admin_mutex.unlock();
}

void pool::core::unlock_in_child() noexcept {
  if (alive.load(std::memory_order_relaxed)) adopt_after_fork(*this);
  shelf_mutex.unlock();
  admin_mutex.unlock();
}

void detail::release_thread_caches() noexcept {
  thread_state& me = this_thread();
  me.directory = {};
  while (thread_cache* tc = me.caches) {
    me.caches = tc->next_of_thread;
    detach(tc);
  }
}

// ---- the public calls ---------------------------------------------------------------------------

pool::pool(pool_options options) : core_(new core(options)) {}

pool::~pool() {
  core& c = *core_;
  bool last = false;
  {
    std::lock_guard lock(c.admin_mutex);  // (M)
    c.alive.store(false, std::memory_order_relaxed);
    call k{c, nullptr, 0};  // what it frees is counted with the orphans, which die with it
    for (thread_cache* tc = c.registry; tc != nullptr; tc = tc->next) {
      if (tc->magazines) {
        for (std::size_t cls = 0; cls < c.classes.count(); ++cls) {
          if (magazine* m = tc->magazines[cls].get(); m != nullptr) {
            free_held(k, cls, m->items, m->count);
            m->count = 0;
          }
        }
      }
      tc->cached = 0;
      tc->free_slots = {};
      tc->spare.store(0, std::memory_order_relaxed);
    }
    for (std::size_t cls = 0; cls < c.classes.count(); ++cls) drain(k, cls);
    {
      std::lock_guard shelf_lock(c.shelf_mutex);
      c.off_class.free_all();
    }
    c.stacks.reset();
    c.slots.release();
    last = --c.refs == 0;
  }
  if (last) delete &c;
}

buffer pool::take(std::size_t size) { return take_fast(*core_, size, /*exact=*/false); }

buffer pool::acquire(std::size_t size) {
  if (buffer b = take_fast(*core_, size, /*exact=*/false)) return b;
  return buffer(size, core_->classes.fresh_capacity(size));
}

buffer pool::take_exact(std::size_t size) { return take_fast(*core_, size, /*exact=*/true); }

void* pool::allocate_exact(std::size_t size) {
  buffer b = take_fast(*core_, size, /*exact=*/true);
  if (!b) b = buffer(size, core_->classes.fresh_capacity(size));
  return detail::buffer_access::release(b).data;
}

void pool::deallocate_exact(void* p, std::size_t size) noexcept {
  core& c = *core_;
  const std::size_t cls = c.classes.of(size);  // size <= ceiling: the block has cls's own size
  retire_fast(c, held{static_cast<std::byte*>(p), c.class_size[cls]}, cls);
}

void pool::retire(buffer&& b) noexcept {
  if (!b) return;
  const held h = detail::buffer_access::release(b);
  core& c = *core_;
  if (h.capacity <= c.classes.ceiling()) {
    if (const std::size_t cls = c.classes.of(h.capacity); c.class_size[cls] == h.capacity) {
      return retire_fast(c, h, cls);
    }
  }
  retire_general(c, h);
}

void pool::set_enabled(bool on) noexcept {
  if (on) {
    core_->state.fetch_or(detail::enabled_bit, std::memory_order_relaxed);  // publishes nothing
    catch_up(*core_);
  } else {
    // Relaxed: trim's bump (T1) follows it in the word's modification order, and (P) reads the
    // word after that bump or waits for the publisher.
    core_->state.fetch_and(~detail::enabled_bit, std::memory_order_relaxed);
    trim();
  }
}

bool pool::enabled() const noexcept {
  catch_up(*core_);
  return enabled_in(core_->state.load(std::memory_order_relaxed));
}

void pool::trim() noexcept {
  core& c = *core_;
  call k = begin(c);
  constexpr std::uint64_t start = detail::one_generation + detail::one_trim;
  k.state = c.state.fetch_add(start, std::memory_order_seq_cst) + start;      // (T1)
  await_publishers(c);                                                         // (T2)
  for (std::size_t cls = 0; cls < c.classes.count(); ++cls) drain(k, cls);  // (S3)
  std::size_t count = 0, bytes = 0;
  {
    std::lock_guard lock(c.shelf_mutex);
    std::tie(count, bytes) = c.off_class.free_all();
    for (std::size_t cls = 0; cls < c.classes.count(); ++cls) {
      c.off_class_nonempty[cls].store(false, std::memory_order_relaxed);
    }
  }
  unreserve(c, count);
  k.rec().add(&counters::bytes_out, bytes);
  // (T3) release: a refill that finds no trim running (R2) finds the stacks emptied too.
  const std::uint64_t now = c.state.fetch_sub(detail::one_trim, std::memory_order_release) - detail::one_trim;
  if (k.tc != nullptr) sync(c, *k.tc, now);  // this thread's own cache, now
}

std::size_t pool::retained() const noexcept { return stats().retained; }

pool_stats pool::stats() const noexcept {
  core& c = *core_;
  catch_up(c);
  counters sum;
  std::size_t spare = 0;
  {
    std::lock_guard lock(c.admin_mutex);
    fold(sum, c.departed);
    fold(sum, c.orphans);
    for (const thread_cache* tc = c.registry; tc != nullptr; tc = tc->next) {
      fold(sum, tc->counts);
      spare += tc->spare.load(std::memory_order_relaxed);
    }
  }
  const auto get = [&](auto field) { return (sum.*field).load(std::memory_order_relaxed); };
  const std::size_t reserved = c.reserved.load(std::memory_order_relaxed);
  const std::uint64_t in = get(&counters::bytes_in), out = get(&counters::bytes_out);
  pool_stats s;
  s.hits = get(&counters::hits);
  s.misses = get(&counters::misses);
  s.retired = get(&counters::retired);
  s.dropped = get(&counters::dropped);
  s.retained = reserved - std::min(spare, reserved);  // in [0, reserved], and reserved <= bound
  s.retained_bytes = in > out ? static_cast<std::size_t>(in - out) : 0;
  return s;
}

}  // namespace sluice
