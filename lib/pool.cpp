// sluice::pool's general paths: lock-free size-class stacks with thread caches in front (see
// pool/core.hpp for the layout, sluice/pool.hpp for the contract and the inline fast paths, and
// pool/thread_caches.cpp for how a thread finds, keeps and gives up its caches).
//
// A take or retire that hits the calling thread's cache runs inline in the caller: one compare of
// the thread's front key with the pool's state word (F), then the magazine. Everything else
// comes here, and the fast path is this path's first step: enter() brings the cache up to the
// state word, the call does its work, and leave() points the front at the cache again, so the
// next call may hit.
//
// Ordering pairs used here, beyond those inside the stacks (pool/slots.hpp, S1-S3, C1-C2) and
// (F) (sluice/detail/pool_cache.hpp):
//   (P) the publish handshake with trim. A thread about to push a chain of kept buffers raises
//       its cache's `publishing` flag (P1, seq_cst store of an odd count), reads `state` (P2,
//       seq_cst), pushes only if no trim or switch has overtaken its call, and lowers the flag
//       (P3, release store of the next even count). trim restamps `state` (T1, seq_cst RMW),
//       then reads every cache's flag (T2, seq_cst) and waits while one is up, until it moves
//       on, and only then empties the stacks (S3). Each side stores, then loads what the other
//       stores, so in the single total order of seq_cst operations either P2 follows T1 (the
//       publisher sees the trim, through the state word and the generation (G) it carries, and
//       does not push) or T2 follows P1 (trim waits for P3, which then happens-before its pops,
//       so they find the chain). Buffers kept before a trim therefore never outlive it on a
//       stack, and trim never touches a buffer retired after it returned: there is no drain on
//       the publisher's side. trim waits only for the publish it found in progress, so
//       publishers that keep coming cannot hold it up. These are the only seq_cst operations.
//   (R) the same handshake for a refill, which pops a batch into a cache: the batch must enter
//       the cache under the generation it was popped in, since a thread's next call frees a
//       cache whose generation has passed. The pop runs under the flag, after a check (R2, as
//       P2) that the generation is the cache's and no trim is running. A trim that starts after
//       R2 waits for the flag, so its pops follow this one, and the batch, from before the trim,
//       is rightly freed at the thread's next call; one that ended before R2 lowered its count
//       (T3, release) after its pops, so the batch holds nothing it had to free. While a trim
//       runs, or the cache is behind, a take pops its one buffer directly instead.
//   (M) admin_mutex orders everything a non-owner does to a thread cache (thread exit, ~pool,
//       fork) against the owner's calls, which the caller keeps apart from ~pool; a thread that
//       has no cache (it is exiting, or had no memory for one) publishes under it instead of
//       raising a flag.
#include <algorithm>
#include <atomic>
#include <cassert>
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

using core = pool::core;

constexpr std::uint32_t slots_per_move = 32;  // slots move between a cache and the free stack so

// What the layout relies on: a magazine has room for every place a cache may hold (2 * P, P at
// most 16), a trim count never reaches the stamp, and a view covers every class a size can have.
static_assert(2 * 16 <= magazine::room);
static_assert(detail::trims_mask < detail::one_stamp && (detail::trims_mask & detail::enabled_bit) == 0);
static_assert(detail::class_of(SIZE_MAX) < detail::class_count_max);

// Below this bound a cache could hold at most three buffers (bound / 16), which would save little
// and could hoard much of what the bound allows: such pools use the shared stacks alone.
constexpr std::size_t min_caching_bound = 64;

bool enabled_in(std::uint64_t state) noexcept { return (state & detail::enabled_bit) != 0; }
bool trimming_in(std::uint64_t state) noexcept { return (state & detail::trims_mask) != 0; }

// A stamp no pool's state word has carried (see pool/core.hpp). A plain std::atomic, outside
// the model checkers' seam: it hands out numbers and orders nothing, so relaxed.
std::uint64_t fresh_stamp() noexcept {
  static constinit std::atomic<std::uint64_t> next{1};
  std::uint64_t stamp = 0;
  while (stamp == 0) stamp = next.fetch_add(1, std::memory_order_relaxed) * detail::one_stamp;
  return stamp;
}

// Writes f(word) with a fresh stamp into the state word; answers the new word.
template <class F>
std::uint64_t restamp(core& c, F f, std::memory_order order) noexcept {
  std::uint64_t old = c.state.load(std::memory_order_relaxed);
  std::uint64_t now = 0;
  do {
    now = (f(old) & (detail::one_stamp - 1)) | fresh_stamp();
  } while (!c.state.compare_exchange_weak(old, now, order, std::memory_order_relaxed));  // (T1) in trim
  return now;
}

// A counter update. A cache's counters have one writer, so a plain load and store suffice (no
// read-modify-write); the orphans' are shared and use fetch_add.
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

// One owner's increment of a magazine's counter (see sluice/detail/pool_cache.hpp).
void bump(detail::atomic<std::uint64_t>& a) noexcept {
  a.store(a.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

// The oldest n of a magazine's buffers are gone (moved or freed): the rest move down.
void drop_oldest(magazine& m, std::uint64_t n) noexcept {
  const std::uint64_t count = m.count.load(std::memory_order_relaxed);
  std::copy(m.items + n, m.items + count, m.items);
  m.count.store(count - n, std::memory_order_relaxed);
}

// ---- what every general call shares ---------------------------------------------------------

// The calling thread and what it acts under: the pool's core, the thread's cache for it (null:
// it has none, because it is exiting or none could be made), and the state word it read.
struct caller {
  core& c;
  thread_cache* tc;
  std::uint64_t state;

  bool caches() const noexcept { return tc != nullptr && tc->magazines; }
  // Where this call counts what it did: its thread's counters, or the shared orphans'.
  recorder rec() const noexcept { return tc != nullptr ? recorder{&tc->counts, true} : recorder{&c.orphans, false}; }
};

// ---- the bound ------------------------------------------------------------------------------

// Takes up to n places of the bound; answers how many. All of `reserved` is relaxed (see
// core.hpp): a place is given back only after the buffer holding it was taken, and that order
// is carried by the stacks' release/acquire pairs.
std::size_t reserve(core& c, std::size_t n) noexcept {
  std::size_t used = c.reserved.load(std::memory_order_relaxed);
  std::size_t got = 0;
  do {
    if (used >= c.bound) return 0;
    got = std::min(n, c.bound - used);
  } while (!c.reserved.compare_exchange_weak(used, used + got, std::memory_order_relaxed));
  assert(used + got <= c.bound);
  return got;
}

void unreserve(core& c, std::size_t n) noexcept {
  if (n > 0) c.reserved.fetch_sub(n, std::memory_order_relaxed);
}

// A magazine's places: it holds `owned`, the cache all its magazines' `places`.
void set_owned(thread_cache& tc, magazine& m, std::uint32_t owned) noexcept {
  tc.places = tc.places - static_cast<std::uint32_t>(m.owned.load(std::memory_order_relaxed)) + owned;
  m.owned.store(owned, std::memory_order_relaxed);
  assert(m.count.load(std::memory_order_relaxed) <= owned && owned <= m.limit);
  assert(tc.places + tc.loose.load(std::memory_order_relaxed) <= tc.core.cache_places);
}

void set_loose(thread_cache& tc, std::uint32_t loose) noexcept {
  tc.loose.store(loose, std::memory_order_relaxed);
  assert(tc.places + loose <= tc.core.cache_places);
}

// A place this call no longer needs (its buffer left the pool): kept loose by a cache with
// room, else given back to the shared counter.
void give_place(caller& k) noexcept {
  if (k.caches() && k.tc->places + k.tc->loose.load(std::memory_order_relaxed) < k.c.cache_places) {
    return set_loose(*k.tc, k.tc->loose.load(std::memory_order_relaxed) + 1);
  }
  unreserve(k.c, 1);
}

// ---- slots ----------------------------------------------------------------------------------

slot_index get_slot(caller& k) noexcept {
  return detail::get_slot(k.c.slots, k.tc ? &k.tc->free_slots : nullptr, k.c.free_slots, slots_per_move);
}

// Gives slots with no buffer back: to the cache's list, or to the free stack when there is none.
void release_slots(caller& k, const chain& ch) noexcept {
  if (k.tc == nullptr) return k.c.free_slots.push_chain(k.c.slots, ch);  // (S1)
  detail::put_slots(k.c.slots, k.tc->free_slots, ch, k.c.free_slots, slots_per_move);
}

// ---- the shared stacks ----------------------------------------------------------------------

// Frees n buffers of class cls that the pool held, and gives back their places.
void free_held(caller& k, std::size_t cls, std::byte* const* items, std::uint32_t n) noexcept {
  if (n == 0) return;
  for (std::uint32_t j = 0; j < n; ++j) detail::free_bytes(items[j]);
  k.rec().add(&counters::bytes_out, std::uint64_t{n} * k.c.class_size[cls]);
  unreserve(k.c, n);
}

// Frees the buffers of a chain of class cls that this call holds, and releases its slots.
void free_chain(caller& k, std::size_t cls, const chain& ch) noexcept {
  slot_index i = ch.first;
  for (std::uint32_t j = 0; j < ch.count; ++j) {
    detail::free_bytes(k.c.slots[i].data);
    i = k.c.slots[i].next.load(std::memory_order_relaxed);
  }
  k.rec().add(&counters::bytes_out, std::uint64_t{ch.count} * k.c.class_size[cls]);
  unreserve(k.c, ch.count);
  release_slots(k, ch);
}

// Empties stack cls, freeing its buffers.
void drain(caller& k, std::size_t cls) noexcept {
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

// Whether no trim has begun since the cache's last catch-up (the generation read after P2 or R2,
// whose seq_cst load carries (G)).
bool same_generation(const caller& k) noexcept {
  return k.c.generation.load(std::memory_order_relaxed) == k.tc->synced_generation;
}

// Pushes a chain of kept buffers of class cls onto its stack, keeping the handshake (P) with
// trim. `earlier`: the chain holds buffers that earlier calls kept (a cache's flush), which a
// trim that overtook this call must free; else it holds only this call's own buffer, which only
// a switch to disabled must keep out (a trim alone may be overtaken: the retire then counts as
// coming after it). Answers whether it pushed; if not, the caller still holds the chain.
bool publish(caller& k, std::size_t cls, const chain& ch, bool earlier) noexcept {
  if (k.tc == nullptr) {
    assert(!earlier);  // only a cache flushes
    // (M): trim reads the flags under admin_mutex, after its stamp; this section comes wholly
    // before that (trim's pops then find the chain) or wholly after (this load sees the stamp).
    std::lock_guard lock(k.c.admin_mutex);
    if (!enabled_in(k.c.state.load(std::memory_order_relaxed))) return false;
    k.c.stacks[cls].push_chain(k.c.slots, ch);  // (S1)
    return true;
  }
  const std::uint32_t flag = raise_flag(*k.tc);                    // (P1)
  const std::uint64_t now = k.c.state.load(std::memory_order_seq_cst);  // (P2)
  const bool push = enabled_in(now) && (!earlier || same_generation(k));
  if (push) k.c.stacks[cls].push_chain(k.c.slots, ch);            // (S1)
  lower_flag(*k.tc, flag);                                         // (P3)
  return push;
}

// trim's side of (P) and (R), after its stamp (T1): waits until no thread is inside a publish or
// a refill that it found in progress (and that may have read the state before the stamp).
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

// The batch a magazine moves at once: half of what it holds at most.
std::uint32_t batch_of(const magazine& m) noexcept { return std::max<std::uint32_t>(1, m.limit / 2); }

// Whether the front may send class cls's calls to the magazine: the pool caches the class whole
// (not the top class cut at the ceiling, whose requests above the ceiling must miss) and no
// off-class buffer of it is shelved (a take must look at those first). A hint read, relaxed: a
// shelving restamps the state word after it sets the flag, and enter() reads the word with
// acquire before it rebuilds the view.
bool fronts_class(const caller& k, std::size_t cls) noexcept {
  return detail::nominal_class_size(cls) == k.c.class_size[cls] &&
         !k.c.off_class_nonempty[cls].load(std::memory_order_relaxed);
}

// Points the view's class cls at its magazine when it may (see fronts_class), else at `absent`.
void aim_view(caller& k, std::size_t cls) noexcept {
  magazine* m = k.tc->magazines[cls].get();
  k.tc->view[cls] = m != nullptr && fronts_class(k, cls) ? m : &k.tc->absent;
}

// This thread's magazine for class cls, made at first use; null when it caches nothing or no
// memory can be had (the call then goes to the shared stack directly).
magazine* magazine_for(caller& k, std::size_t cls) noexcept {
  if (!k.caches()) return nullptr;
  if (magazine* m = k.tc->magazines[cls].get()) return m;
  std::unique_ptr<magazine> m(new (std::nothrow) magazine);
  if (m == nullptr) return nullptr;
  m->capacity = k.c.class_size[cls];
  m->limit = std::min(2 * detail::magazine_batch(m->capacity), k.c.cache_places);
  {
    std::lock_guard lock(k.c.admin_mutex);  // (M): stats() reads the magazines under it
    k.tc->magazines[cls] = std::move(m);
  }
  aim_view(k, cls);
  return k.tc->magazines[cls].get();
}

// Moves the oldest n (<= count) buffers of a magazine to the shared stack as one chain, their places with
// them, or frees them when a trim or the switch overtook this call (P). Answers how many left
// the magazine: fewer than n only when no slot can be had, and then the rest stay (a kept buffer
// is never freed for want of a slot; the retire that needed the room is dropped instead).
std::uint32_t flush(caller& k, std::size_t cls, magazine& m, std::uint32_t n) noexcept {
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
  drop_oldest(m, out.count);
  set_owned(*k.tc, m, m.owned.load(std::memory_order_relaxed) - out.count);
  return out.count;
}

// Moves a magazine's spare places to the cache's loose ones.
void drop_spare(caller& k, magazine& m) noexcept {
  const auto count = static_cast<std::uint32_t>(m.count.load(std::memory_order_relaxed));
  const auto spare = static_cast<std::uint32_t>(m.owned.load(std::memory_order_relaxed)) - count;
  set_owned(*k.tc, m, count);
  set_loose(*k.tc, k.tc->loose.load(std::memory_order_relaxed) + spare);
}

// Moves all spare places of the cache's magazines (but `except`'s) to its loose ones.
void drop_all_spare(caller& k, const magazine* except) noexcept {
  for (std::size_t cls = 0; cls < k.c.classes.count(); ++cls) {
    if (magazine* m = k.tc->magazines[cls].get(); m != nullptr && m != except) drop_spare(k, *m);
  }
}

// Loose places for this cache, up to `want` (at least one if it can): those it has; else a
// batch from the shared counter, within the cache's limit; else, at that limit, half the spare
// places of the magazine that has most (so that a class in use now takes them over from one
// used before, a few at a time, and classes used in turn do not strip each other); and when the
// bound is spent, every spare place it has. Answers how many it has loose now.
std::uint32_t gather_loose(caller& k, const magazine* except, std::uint32_t want) noexcept {
  thread_cache& tc = *k.tc;
  const auto loose = [&] { return tc.loose.load(std::memory_order_relaxed); };
  if (loose() > 0) return loose();
  if (const std::uint32_t room = k.c.cache_places - tc.places; room > 0) {
    const auto got = static_cast<std::uint32_t>(reserve(k.c, std::min(room, std::max(want, k.c.place_batch))));
    if (got > 0) {
      set_loose(tc, got);
      return got;
    }
    drop_all_spare(k, except);  // the bound is spent: only this thread's own spare places are left
    return loose();
  }
  magazine* richest = nullptr;
  std::uint64_t most = 0;
  for (std::size_t cls = 0; cls < k.c.classes.count(); ++cls) {
    magazine* m = tc.magazines[cls].get();
    if (m == nullptr || m == except) continue;
    if (const std::uint64_t spare = m->owned.load(std::memory_order_relaxed) - m->count.load(std::memory_order_relaxed); spare > most) {
      most = spare;
      richest = m;
    }
  }
  if (richest == nullptr) return 0;
  const auto moved = static_cast<std::uint32_t>((most + 1) / 2);
  set_owned(tc, *richest, static_cast<std::uint32_t>(richest->owned.load(std::memory_order_relaxed)) - moved);
  set_loose(tc, moved);
  return moved;
}

// One place of the bound for a buffer about to be kept outside a magazine: from the shared
// counter, or else, once it is spent, from this thread's own spare places. So the bound drops a
// retire only for places that other threads hold: a thread alone sees the sequential pool.
bool take_place(caller& k) noexcept {
  if (reserve(k.c, 1) == 1) return true;
  if (!k.caches()) return false;
  drop_all_spare(k, nullptr);
  const std::uint32_t loose = k.tc->loose.load(std::memory_order_relaxed);
  if (loose == 0) return false;
  set_loose(*k.tc, loose - 1);
  return true;
}

// When the cache's places all hold buffers: the oldest batch of the fullest other magazine moves
// to the shared stack, so that a class in use now can displace one used before. False when no
// other magazine holds anything, or no slot could be had.
bool displace(caller& k, const magazine& except) noexcept {
  std::size_t fullest = 0;
  std::uint64_t most = 0;
  for (std::size_t cls = 0; cls < k.c.classes.count(); ++cls) {
    const magazine* m = k.tc->magazines[cls].get();
    if (m == nullptr || m == &except) continue;
    if (const std::uint64_t n = m->count.load(std::memory_order_relaxed); n > most) {
      most = n;
      fullest = cls;
    }
  }
  if (most == 0) return false;
  magazine& m = *k.tc->magazines[fullest];
  if (flush(k, fullest, m, static_cast<std::uint32_t>(std::min<std::uint64_t>(most, batch_of(m)))) == 0) return false;
  drop_spare(k, m);
  return true;
}

// Spare places for a magazine that has none (count == owned): up to place_batch, within its
// limit, gathered as gather_loose() does; a full magazine first moves its oldest batch out, and
// when every place of the cache holds a buffer another class's batch makes way. False when the
// bound (or a slot for a flush) cannot be had.
bool add_places(caller& k, std::size_t cls, magazine& m) noexcept {
  if (m.owned.load(std::memory_order_relaxed) == m.limit && flush(k, cls, m, batch_of(m)) == 0) return false;
  const auto owned = static_cast<std::uint32_t>(m.owned.load(std::memory_order_relaxed));
  const std::uint32_t want = std::min(k.c.place_batch, m.limit - owned);
  std::uint32_t loose = gather_loose(k, &m, want);
  if (loose == 0 && displace(k, m)) loose = gather_loose(k, &m, want);
  if (loose == 0) return false;
  const std::uint32_t got = std::min(want, loose);
  set_loose(*k.tc, loose - got);
  set_owned(*k.tc, m, owned + got);
  return true;
}

// Fills an empty magazine with a batch from the shared stack, keeping the handshake (R) with
// trim; their places come with them and stand in for the magazine's spare ones. Leaves it empty
// while a trim runs or the cache is behind.
void refill(caller& k, std::size_t cls, magazine& m) noexcept {
  if (k.c.stacks[cls].looks_empty()) return;
  // The batch brings its own places: the magazine's spare ones go loose, and loose ones the
  // cache then has no room for go back to the shared counter. As many as the cache has places
  // for, up to a batch: a refill never pushes other classes out (a retire does, displace()),
  // so that classes used in turn do not push each other out.
  drop_spare(k, m);
  const std::uint32_t want = std::min(batch_of(m), k.c.cache_places - k.tc->places);
  if (want == 0) return;
  if (const std::uint32_t loose = k.tc->loose.load(std::memory_order_relaxed);
      k.tc->places + loose + want > k.c.cache_places) {
    const std::uint32_t excess = k.tc->places + loose + want - k.c.cache_places;
    unreserve(k.c, excess);
    set_loose(*k.tc, loose - excess);
  }
  const std::uint32_t flag = raise_flag(*k.tc);                         // (P1)
  const std::uint64_t now = k.c.state.load(std::memory_order_seq_cst);  // (R2)
  chain got;
  if (enabled_in(now) && !trimming_in(now) && same_generation(k)) {
    got = k.c.stacks[cls].pop_chain(k.c.slots, want);  // (S2)
  }
  lower_flag(*k.tc, flag);                               // (P3)
  if (got.count == 0) return;
  slot_index i = got.first;
  for (std::uint32_t j = 0; j < got.count; ++j) {
    m.items[j] = k.c.slots[i].data;
    i = k.c.slots[i].next.load(std::memory_order_relaxed);
  }
  m.count.store(got.count, std::memory_order_relaxed);
  set_owned(*k.tc, m, got.count);
  release_slots(k, got);
}

// Frees what tc caches and gives back its places of the bound (after a trim, or when the pool
// is disabled). Owner only.
// Frees what a magazine holds and gives back all its places.
void empty_magazine(caller& k, std::size_t cls, magazine& m) noexcept {
  const std::uint32_t count = m.count.load(std::memory_order_relaxed);
  free_held(k, cls, m.items, count);
  unreserve(k.c, m.owned.load(std::memory_order_relaxed) - count);
  m.count.store(0, std::memory_order_relaxed);
  set_owned(*k.tc, m, 0);
}

void empty_cache(core& c, thread_cache& tc) noexcept {
  caller k{c, &tc, tc.synced_state};
  if (!tc.magazines) return;
  for (std::size_t cls = 0; cls < c.classes.count(); ++cls) {
    if (magazine* m = tc.magazines[cls].get(); m != nullptr) empty_magazine(k, cls, *m);
  }
  unreserve(c, tc.loose.exchange(0, std::memory_order_relaxed));
}

// Brings tc up to the state word `state`, read with acquire: frees what it caches when a trim
// began since (the generation, read after the word, sees it: (G)) or the pool is off, and aims
// its view again, since an off-class shelving may be why the word moved.
void catch_up(core& c, thread_cache& tc, std::uint64_t state) noexcept {
  const std::uint64_t generation = c.generation.load(std::memory_order_relaxed);
  if (generation != tc.synced_generation || !enabled_in(state)) empty_cache(c, tc);
  tc.synced_state = state;
  tc.synced_generation = generation;
  if (tc.magazines) {
    caller k{c, &tc, state};
    for (std::size_t cls = 0; cls < c.classes.count(); ++cls) aim_view(k, cls);
  }
}

// ---- entering and leaving the general path --------------------------------------------------

// Every general take, retire and trim starts here: this thread's cache for the pool, brought up
// to the state word. (F') acquire: a trim's restamp (T1) releases its generation (G), a shelving's
// its off-class flag; a call that reads the word they wrote sees those too. A trim or switch
// that happens-before this call is seen (write-read coherence); one that merely ran earlier on
// another thread reaches this thread at a later call. The buffers it must not keep meanwhile
// are covered by the handshake (P).
caller enter(core& c) noexcept {
  thread_cache* tc = detail::cache_of_this_thread(c, /*make=*/true);
  const std::uint64_t state = c.state.load(std::memory_order_acquire);  // (F')
  if (tc != nullptr && state != tc->synced_state) catch_up(c, *tc, state);
  return {c, tc, state};
}

// The last step of a general take or retire: the front points at this cache when it is current
// and enabled, so that the thread's next call to this pool may hit it inline.
void leave(const caller& k) noexcept {
  if (k.caches() && enabled_in(k.state) && k.state == k.tc->synced_state) {
    detail::point_front(k.state, *k.tc);
  }
}

// The calls that neither take nor retire bring the caller's own cache up to date the same way,
// without making one.
void catch_up_own(core& c) noexcept {
  thread_cache* tc = detail::cache_of_this_thread(c, /*make=*/false);
  if (tc == nullptr) return;
  const std::uint64_t state = c.state.load(std::memory_order_acquire);  // (F')
  if (state != tc->synced_state) catch_up(c, *tc, state);
}

// ---- take and retire, per kind of buffer ----------------------------------------------------

// A buffer of class cls from this thread's magazine or the shared stack, or null. Counts a hit
// that bypassed the magazine (one through it counts itself: sluice/detail/pool_cache.hpp).
std::byte* take_on_class(caller& k, std::size_t cls) noexcept {
  // A miss on a class never seen here makes no magazine: only a refill needs one.
  if (k.caches() && k.tc->magazines[cls] == nullptr && k.c.stacks[cls].looks_empty()) return nullptr;
  magazine* m = magazine_for(k, cls);
  if (m != nullptr) {
    if (m->count.load(std::memory_order_relaxed) == 0) refill(k, cls, *m);
    if (const std::uint64_t n = m->count.load(std::memory_order_relaxed); n > 0) {
      m->count.store(n - 1, std::memory_order_relaxed);  // its place stays, spare
      bump(m->takes);
      return m->items[n - 1];
    }
    if (k.c.stacks[cls].looks_empty()) return nullptr;  // else the cache had no room: pop one
  }
  const chain got = k.c.stacks[cls].pop_chain(k.c.slots, 1);  // (S2)
  if (got.count == 0) return nullptr;
  std::byte* data = k.c.slots[got.first].data;
  release_slots(k, got);
  give_place(k);
  k.rec().add(&counters::hits, 1);
  k.rec().add(&counters::bytes_out, k.c.class_size[cls]);
  return data;
}

// Keeps a buffer of class cls; false when the bound or the slots are exhausted, or the pool was
// switched off while this retire ran. Counts a retire that bypassed the magazine.
bool retire_on_class(caller& k, std::size_t cls, std::byte* data) noexcept {
  if (magazine* m = magazine_for(k, cls)) {
    if (m->count.load(std::memory_order_relaxed) < m->owned.load(std::memory_order_relaxed) ||
        add_places(k, cls, *m)) {
      const std::uint64_t n = m->count.load(std::memory_order_relaxed);
      m->items[n] = data;
      m->count.store(n + 1, std::memory_order_relaxed);
      bump(m->retires);
      return true;
    }
    // No place in the cache (or in the bound, which the shared stack then finds too).
  }
  if (!take_place(k)) return false;
  if (const slot_index i = get_slot(k); i != no_slot) {
    k.c.slots[i].data = data;
    if (publish(k, cls, chain{i, i, 1}, /*earlier=*/false)) {
      k.rec().add(&counters::retired, 1);
      k.rec().add(&counters::bytes_in, k.c.class_size[cls]);
      return true;
    }
    release_slots(k, chain{i, i, 1});
  }
  give_place(k);
  return false;
}

std::optional<held> take_off_class(caller& k, std::size_t cls, std::size_t size) noexcept {
  std::optional<held> h;
  {
    std::lock_guard lock(k.c.shelf_mutex);
    h = k.c.off_class.take(cls, size);
    k.c.off_class_nonempty[cls].store(!k.c.off_class.empty(cls), std::memory_order_relaxed);
  }
  if (h) give_place(k);
  return h;
}

bool retire_off_class(caller& k, std::size_t cls, held h) noexcept {
  if (!take_place(k)) return false;
  bool first = false;
  {
    std::lock_guard lock(k.c.shelf_mutex);
    // Under the shelf lock, a switch to disabled whose trim has emptied the shelves is seen (the
    // lock orders the two): no buffer is shelved past set_enabled(false). A trim alone may be
    // overtaken, as if this retire came after it.
    if (enabled_in(k.c.state.load(std::memory_order_relaxed))) {
      try {
        first = k.c.off_class.empty(cls);
        k.c.off_class.put(cls, h);
        k.c.off_class_nonempty[cls].store(true, std::memory_order_relaxed);
        // The class's first shelved buffer: every thread's front must stop answering the class
        // inline, so the word moves (release: the flag, for enter()'s (F')).
        if (first) restamp(k.c, [](std::uint64_t w) { return w; }, std::memory_order_release);
        k.rec().add(&counters::retired, 1);
        k.rec().add(&counters::bytes_in, h.capacity);
        return true;
      } catch (const std::bad_alloc&) {
      }
    }
  }
  give_place(k);
  return false;
}

// ---- the general take and retire --------------------------------------------------------------

// Every rule, every kind of buffer and thread. An exact take looks only at the class of size,
// and only at its own-size buffers.
held take_any(core& c, std::size_t size, bool exact) {
  caller k = enter(c);
  held found;
  const auto& classes = c.classes;
  if (enabled_in(k.state) && size <= classes.ceiling()) {
    const std::size_t first = classes.of(size), end = exact ? first + 1 : classes.count();
    for (std::size_t cls = first; cls < end && found.data == nullptr; ++cls) {
      // Within a class, off-class buffers are the smaller: look at them first.
      if (!exact && c.off_class_nonempty[cls].load(std::memory_order_relaxed)) {
        if (const auto h = take_off_class(k, cls, size)) {
          k.rec().add(&counters::hits, 1);
          k.rec().add(&counters::bytes_out, h->capacity);
          found = *h;
          break;
        }
      }
      if (std::byte* data = take_on_class(k, cls)) found = {data, c.class_size[cls]};
    }
    if (k.caches() && classes.of(size) < classes.count()) aim_view(k, classes.of(size));
  }
  if (found.data == nullptr) k.rec().add(&counters::misses, 1);
  leave(k);
  return found;
}

void retire_any(core& c, held h) noexcept {
  caller k = enter(c);
  const auto& classes = c.classes;
  bool kept = false;
  if (enabled_in(k.state) && h.capacity <= classes.ceiling()) {
    const std::size_t cls = classes.of(h.capacity);
    kept = c.class_size[cls] == h.capacity ? retire_on_class(k, cls, h.data) : retire_off_class(k, cls, h);
    if (k.caches()) aim_view(k, cls);
  }
  if (!kept) {
    k.rec().add(&counters::dropped, 1);
    detail::free_bytes(h.data);
  }
  leave(k);
}

// ---- fork -------------------------------------------------------------------------------------

// In a forked child, where the parent's other threads are gone with whatever their caches held
// and whatever calls they had in flight. Their caches are let go without freeing their buffers:
// a thread stopped inside a call may have left a magazine's count one ahead of its items, so
// freeing could free a buffer its owner had answered; that memory stays allocated in the child,
// as jemalloc's and mimalloc's other threads' caches do. The bound's count and retained_bytes
// are then made exact again from what the child can reach.
void adopt_after_fork(core& c) noexcept {
  thread_cache* mine = detail::own_cache_after_fork(c);
  for (thread_cache* tc = c.registry; tc != nullptr;) {
    thread_cache* const next = tc->next;
    if (tc != mine) {
      tc->tally(c.departed);
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
  c.departed.fold_into(sum);
  c.orphans.fold_into(sum);
  if (mine != nullptr) {
    mine->tally(sum);
    places += mine->places + mine->loose.load(std::memory_order_relaxed);
    if (mine->magazines) {
      for (std::size_t cls = 0; cls < c.classes.count(); ++cls) {
        if (const magazine* m = mine->magazines[cls].get(); m != nullptr) {
          bytes += std::uint64_t{m->count.load(std::memory_order_relaxed)} * c.class_size[cls];
        }
      }
    }
  }
  c.reserved.store(places, std::memory_order_relaxed);
  // A trim that another thread was running is over: the child's refills must not wait for it.
  restamp(c, [](std::uint64_t w) { return w & ~detail::trims_mask; }, std::memory_order_relaxed);
  // What the lost caches held leaves the byte count as if freed; a call stopped between moving
  // a buffer and counting it is counted as having finished.
  const std::uint64_t in = sum.bytes_in.load(std::memory_order_relaxed);
  const std::uint64_t out = sum.bytes_out.load(std::memory_order_relaxed);
  if (in - out > bytes) recorder{&c.departed, true}.add(&counters::bytes_out, in - out - bytes);
  if (in - out < bytes) recorder{&c.departed, true}.add(&counters::bytes_in, bytes - (in - out));
}

}  // namespace

// ---- a cache's life, as the pool sees it -------------------------------------------------------

detail::thread_cache::thread_cache(pool::core& c)
    : core(c),
      synced_state(c.state.load(std::memory_order_acquire)),  // (F'), as enter() reads it
      synced_generation(c.generation.load(std::memory_order_relaxed)),
      magazines(c.caching ? std::make_unique<std::unique_ptr<magazine>[]>(c.classes.count()) : nullptr),
      view(c.caching ? std::make_unique<magazine*[]>(detail::class_count_max) : nullptr) {
  if (view) std::fill_n(view.get(), detail::class_count_max, &absent);
}

void detail::thread_cache::tally(counters& into) const noexcept {
  counts.fold_into(into);
  if (!magazines) return;
  recorder rec{&into, true};
  for (std::size_t cls = 0; cls < core.classes.count(); ++cls) {
    if (const magazine* m = magazines[cls].get(); m != nullptr) {
      const std::uint64_t takes = m->takes.load(std::memory_order_relaxed);
      const std::uint64_t kept = m->retires.load(std::memory_order_relaxed);
      rec.add(&counters::hits, takes);
      rec.add(&counters::retired, kept);
      rec.add(&counters::bytes_out, takes * m->capacity);
      rec.add(&counters::bytes_in, kept * m->capacity);
    }
  }
}

std::size_t detail::thread_cache::spare_places() const noexcept {
  std::size_t spare = loose.load(std::memory_order_relaxed);
  if (!magazines) return 0;
  for (std::size_t cls = 0; cls < core.classes.count(); ++cls) {
    if (const magazine* m = magazines[cls].get(); m != nullptr) {
      const std::uint32_t owned = m->owned.load(std::memory_order_relaxed);
      const std::uint32_t count = m->count.load(std::memory_order_relaxed);
      spare += owned > count ? owned - count : 0;  // a momentary mix may show count above owned
    }
  }
  return spare;
}

detail::thread_cache* detail::make_cache(pool::core& c) {
  auto* tc = new thread_cache(c);
  std::lock_guard lock(c.admin_mutex);  // (M)
  tc->next = c.registry;
  if (c.registry != nullptr) c.registry->prev = tc;
  c.registry = tc;
  ++c.refs;
  return tc;
}

void detail::give_back(thread_cache* tc) noexcept {
  core& c = tc->core;
  bool last = false;
  {
    std::lock_guard lock(c.admin_mutex);  // (M)
    if (c.alive.load(std::memory_order_relaxed)) {
      const std::uint64_t now = c.state.load(std::memory_order_acquire);  // (F')
      if (now != tc->synced_state) catch_up(c, *tc, now);
      caller k{c, tc, now};
      if (tc->magazines) {
        for (std::size_t cls = 0; cls < c.classes.count(); ++cls) {
          magazine* m = tc->magazines[cls].get();
          if (m == nullptr) continue;
          if (const std::uint32_t count = m->count.load(std::memory_order_relaxed); count > 0) {
            flush(k, cls, *m, count);
          }
          empty_magazine(k, cls, *m);  // what found no slot: the thread is leaving
        }
      }
      unreserve(c, tc->loose.exchange(0, std::memory_order_relaxed));
      if (tc->free_slots.count > 0) {
        c.free_slots.push_chain(c.slots, detail::first_of(c.slots, tc->free_slots, tc->free_slots.count));
        tc->free_slots = {};
      }
      tc->tally(c.departed);
    }
    (tc->prev != nullptr ? tc->prev->next : c.registry) = tc->next;
    if (tc->next != nullptr) tc->next->prev = tc->prev;
    last = --c.refs == 0;
  }
  delete tc;  // touches nothing of the core, which another thread may free from here on
  if (last) delete &c;
}

pool::core::core(const pool_options& o, detail::atomic<std::uint64_t>& state_word)
    : classes(o.ceiling),
      class_size(std::make_unique<std::size_t[]>(classes.count())),
      bound(o.bound),
      caching(o.thread_cache && o.bound >= min_caching_bound),
      // P = clamp(L / 2, 1, 16) with L = clamp(bound / 16, 1, 64), as pool.hpp states.
      place_batch(static_cast<std::uint32_t>(std::clamp<std::size_t>(std::clamp<std::size_t>(o.bound / 16, 1, 64) / 2, 1, 16))),
      cache_places(2 * place_batch),
      state(state_word),
      stacks(std::make_unique<detail::tagged_stack[]>(classes.count())),
      off_class(classes.count()),
      off_class_nonempty(std::make_unique<detail::atomic<bool>[]>(classes.count())) {
  for (std::size_t cls = 0; cls < classes.count(); ++cls) class_size[cls] = classes.size(cls);
  join();  // last: a fork may lock this core from here on
}

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

// ---- the public calls ---------------------------------------------------------------------------

pool::pool(pool_options options)
    : state_(fresh_stamp() | (options.enabled ? detail::enabled_bit : 0)), core_(new core(options, state_)) {}

pool::~pool() {
  core& c = *core_;
  bool last = false;
  {
    std::lock_guard lock(c.admin_mutex);  // (M)
    c.alive.store(false, std::memory_order_relaxed);
    caller k{c, nullptr, 0};  // what it frees is counted with the orphans, which die with it
    for (thread_cache* tc = c.registry; tc != nullptr; tc = tc->next) {
      if (tc->magazines) {
        for (std::size_t cls = 0; cls < c.classes.count(); ++cls) {
          if (magazine* m = tc->magazines[cls].get(); m != nullptr) {
            free_held(k, cls, m->items, m->count.load(std::memory_order_relaxed));
            m->count.store(0, std::memory_order_relaxed);
            m->owned.store(0, std::memory_order_relaxed);
          }
        }
      }
      tc->places = 0;
      tc->loose.store(0, std::memory_order_relaxed);
      tc->free_slots = {};
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

held pool::take_general(std::size_t size, bool exact) { return take_any(*core_, size, exact); }

held pool::acquire_general(std::size_t size) {
  if (const held h = take_any(*core_, size, /*exact=*/false); h.data != nullptr) return h;
  buffer fresh(size, core_->classes.fresh_capacity(size));
  return detail::buffer_access::release(fresh);
}

void pool::retire_general(held h) noexcept { retire_any(*core_, h); }

buffer pool::take_exact(std::size_t size) {
  held h = take_cached(size);
  if (h.data == nullptr) h = take_any(*core_, size, /*exact=*/true);
  return detail::buffer_access::make_or_empty(h, size);
}

void* pool::allocate_exact(std::size_t size) {
  if (held h = take_cached(size); h.data != nullptr) return h.data;
  if (held h = take_any(*core_, size, /*exact=*/true); h.data != nullptr) return h.data;
  return detail::allocate_bytes(core_->classes.fresh_capacity(size));
}

void pool::deallocate_exact(void* p, std::size_t size) noexcept {
  // size <= ceiling: the block has its class's own size
  const held h{static_cast<std::byte*>(p), core_->class_size[detail::class_of(size)]};
  if (!retire_cached(h)) retire_any(*core_, h);
}

void pool::set_enabled(bool on) noexcept {
  core& c = *core_;
  if (on) {
    // Relaxed: publishes nothing; a fresh stamp so that no earlier word comes back.
    if (!enabled_in(c.state.load(std::memory_order_relaxed))) {
      restamp(c, [](std::uint64_t w) { return w | detail::enabled_bit; }, std::memory_order_relaxed);
    }
    catch_up_own(c);
  } else {
    // Relaxed: trim's stamp (T1) follows it in the word's modification order, and (P) reads the
    // word after that stamp or waits for the publisher.
    restamp(c, [](std::uint64_t w) { return w & ~detail::enabled_bit; }, std::memory_order_relaxed);
    trim();
  }
}

bool pool::enabled() const noexcept {
  catch_up_own(*core_);
  return enabled_in(state_.load(std::memory_order_relaxed));
}

void pool::trim() noexcept {
  core& c = *core_;
  caller k = enter(c);
  c.generation.fetch_add(1, std::memory_order_relaxed);  // (G): T1 releases it
  k.state = restamp(c, [](std::uint64_t w) { return w + detail::one_trim; }, std::memory_order_seq_cst);  // (T1)
  await_publishers(c);                                                       // (T2)
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
  if (k.tc != nullptr) catch_up(c, *k.tc, now);  // this thread's own cache, now
}

std::size_t pool::retained() const noexcept { return stats().retained; }

pool_stats pool::stats() const noexcept {
  core& c = *core_;
  catch_up_own(c);
  counters sum;
  std::size_t spare = 0;
  {
    std::lock_guard lock(c.admin_mutex);
    c.departed.fold_into(sum);
    c.orphans.fold_into(sum);
    for (const thread_cache* tc = c.registry; tc != nullptr; tc = tc->next) {
      tc->tally(sum);
      spare += tc->spare_places();
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
