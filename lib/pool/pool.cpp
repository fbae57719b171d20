// sluice::pool's general paths: lock-free size-class stacks with caches in front (see core.hpp
// for the layout, docs/pool.md for the contract, sluice/pool.hpp for the inline fast paths,
// places.cpp for the bound, thread_caches.cpp for how a thread finds, keeps and gives up its
// caches, and cpu_caches.cpp for the caches of threads without a seat).
//
// A take or retire that hits the calling thread's cache runs inline in the caller: one compare of
// the thread's front key with the pool's state word (F), then the magazine. Everything else
// comes here, and the fast path is this path's first step: enter() brings the thread's cache up
// to the state word, the call does its work (in its thread's cache when that has a seat, else in
// its CPU's cache when that is free, else on the shared stacks), and leave() points the front at
// the thread's cache again, so the next call may hit.
//
// Ordering pairs used here, beyond those inside the stacks (slots.hpp, S1-S3, C1-C2), (F)
// (sluice/detail/pool_cache.hpp) and a CPU cache's lock (L1, L2 in cpu_caches.cpp):
//   (P) the publish handshake with trim. A thread about to push a chain of kept buffers raises
//       its cache's `publishing` flag (P1, seq_cst store of an odd count), reads `state` (P2,
//       seq_cst), pushes only if no trim or switch has overtaken its call, and lowers the flag
//       (P3, release store of the next even count). trim restamps `state` (T1, seq_cst RMW),
//       then reads every cache's flag (T2, seq_cst) and waits while one is up, until it moves
//       on, and only then empties the stacks (S3). Each side stores, then loads what the other
//       stores, so in the single total order of seq_cst operations either P2 follows T1 (the
//       publisher sees the trim: the word shows it running, or, once it has ended, the
//       generation (G) that its end carries has moved; and does not push) or T2 follows P1
//       (trim waits for P3, which then happens-before its pops, so they find the chain). Buffers kept before a trim therefore never outlive it on a
//       stack, and trim never touches a buffer retired after it returned: there is no drain on
//       the publisher's side. trim waits only for the publish it found in progress, so
//       publishers that keep coming cannot hold it up. These are the only seq_cst operations.
//   (R) the same handshake for a refill, which pops a batch into a cache: the batch must enter
//       the cache under the generation it was popped in, since a cache's next use frees it
//       when its generation has passed. The pop runs under the flag, after a check (R2, as P2)
//       that the generation is the cache's and no trim is running. A trim that starts after
//       R2 waits for the flag, so its pops follow this one, and the batch, from before the trim,
//       is rightly freed at the cache's next use; one that ended before R2 lowered its count
//       (T3, release) after its pops, so the batch holds nothing it had to free. A slot carries
//       up to 16 buffers: what a pop takes of it is the caller's, and the rest goes back on the
//       stack under the same flag, which is a publish of (P) with the same check. While a trim
//       runs, or the cache is behind, a refill takes nothing, and a take pops a slot for its one
//       buffer; if a trim ran meanwhile, the rest goes back or is freed by whether the pop came
//       after the trim's drain of the class or before (take_from_stack, drain_marks).
//   (M) admin_mutex orders everything others do to a cache (thread exit, ~pool, fork, stats) against
//       its user's calls, which the caller keeps apart from ~pool. trim holds it to read the
//       flags, never while it waits for one (await_publishers).
//   (O) a thread that has no cache (it is exiting, or had no memory for one) publishes, and pops
//       a slot whose rest it pushes back, under orphan_mutex instead of raising a flag; trim takes
//       that mutex once after T1. Its pop reads the state under the mutex with acquire, which
//       pairs with a finished trim's end (T3), as R2 does.
#include <algorithm>
#include <atomic>
#include <cassert>
#include <new>
#include <optional>
#include <thread>
#include <tuple>

#include "../exact_class.hpp"
#include "core.hpp"

namespace sluice {

using detail::cache;
using detail::caller;
using detail::chain;
using detail::class_counts;
using detail::counters;
using detail::enabled_in;
using detail::held;
using detail::magazine;
using detail::no_slot;
using detail::slot_index;
using detail::trimming_in;

namespace {

using core = detail::pool_core;

constexpr std::uint32_t slots_per_move = 32;  // slots move between a cache and the free stack so

// What the layout relies on: a magazine has room for every place a cache may hold (2 * P, P at
// most 16), a trim count never reaches the stamp, and a view covers every class a size can have.
static_assert(2 * 16 <= magazine::room);
static_assert(detail::trims_mask < detail::one_stamp && (detail::trims_mask & detail::enabled_bit) == 0);
static_assert(detail::class_of(SIZE_MAX) < detail::class_count_max);

// Below this bound a cache could hold at most two places (C = 2 * P with P = 1), which would save
// little and could hoard much of what the bound allows: such pools use the shared stacks alone.
constexpr std::size_t min_caching_bound = 64;

// A stamp no pool's state word has carried (see core.hpp). A plain std::atomic, outside the
// model checkers' seam: it hands out numbers and orders nothing, so relaxed.
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

// The oldest n of a magazine's buffers are gone (moved or freed): the rest move down.
void drop_oldest(magazine& m, std::uint64_t n) noexcept {
  const std::uint64_t count = m.count.load(std::memory_order_relaxed);
  std::copy(m.items + n, m.items + count, m.items);
  m.count.store(count - n, std::memory_order_relaxed);
}

// ---- slots ----------------------------------------------------------------------------------

slot_index take_slot(caller& k) noexcept {
  return detail::get_slot(k.c.slots, k.tc ? &k.tc->free_slots : nullptr, k.c.free_slots, slots_per_move);
}

// Gives slots with no buffer back: to the cache's list, or to the free stack when there is none.
void release_slots(caller& k, const chain& ch) noexcept {
  if (k.tc == nullptr) return k.c.free_slots.push_chain(k.c.slots, ch);  // (S1)
  detail::put_slots(k.c.slots, k.tc->free_slots, ch, k.c.free_slots, slots_per_move);
}

// ---- the shared stacks ----------------------------------------------------------------------

using freed_as = detail::atomic<std::uint64_t> class_counts::*;  // trimmed or decayed

// n retained buffers of class cls, `bytes` in all, have been freed: counted as `why`, their
// places given back.
void count_freed(caller& k, std::size_t cls, std::size_t n, std::uint64_t bytes, freed_as why) noexcept {
  k.rec().add(&counters::bytes_out, bytes);
  k.count(cls, why, n);
  // Relaxed: a sum the decay steps read to learn whether to return pages; it publishes nothing.
  if (why == &class_counts::decayed) k.c.decayed_bytes.fetch_add(bytes, std::memory_order_relaxed);
  detail::unreserve(k.c, n);
}

// Frees n buffers of class cls that the pool held (count_freed).
void free_held(caller& k, std::size_t cls, std::byte* const* items, std::uint32_t n,
               freed_as why = &class_counts::trimmed) noexcept {
  if (n == 0) return;
  for (std::uint32_t j = 0; j < n; ++j) detail::free_bytes(items[j]);
  count_freed(k, cls, n, std::uint64_t{n} * k.c.class_size[cls], why);
}

// Frees what free_some(shelves) picks of class cls's off-class shelf (answering how many and
// their bytes), under shelf_mutex, and counts it (count_freed); answers the bytes.
template <class F>
std::size_t free_shelved(caller& k, std::size_t cls, F free_some, freed_as why) noexcept {
  std::size_t count = 0, bytes = 0;
  {
    std::lock_guard lock(k.c.shelf_mutex);
    std::tie(count, bytes) = free_some(k.c.off_class);
    k.c.off_class_nonempty[cls].store(!k.c.off_class.empty(cls), std::memory_order_relaxed);  // under shelf_mutex
  }
  if (count > 0) count_freed(k, cls, count, bytes, why);
  return bytes;
}

// Copies items[from, from + n) of a slot this call holds to out.
void copy_items(const detail::slot& s, std::uint32_t from, std::uint32_t n, std::byte** out) noexcept {
  for (std::uint32_t j = 0; j < n; ++j) out[j] = s.items[from + j];
}

// Frees the buffers that a chain of class cls carries, which this call holds, and releases its
// slots; counts them as free_held does.
void free_chain(caller& k, std::size_t cls, const chain& ch, freed_as why = &class_counts::trimmed) noexcept {
  slot_index i = ch.first;
  for (std::uint32_t j = 0; j < ch.count; ++j) {
    const detail::slot& s = k.c.slots[i];
    std::byte* items[detail::slot_room];
    copy_items(s, 0, s.count, items);
    free_held(k, cls, items, s.count, why);
    i = s.next.load(std::memory_order_relaxed);
  }
  release_slots(k, ch);
}

// Whether class cls's stack looked empty: never pushed onto (stocked_ever), or empty now.
bool stack_looks_empty(const caller& k, std::size_t cls) noexcept {
  return !detail::stocked_ever(k.c, cls) || k.c.stacks[cls].looks_empty();
}

// Empties every class's stack, freeing its buffers, and marks on each where its drain left the
// head (drain_marks). Under drain_mutex, so that each mark is the latest drain's.
void drain_all(caller& k) noexcept {
  std::lock_guard lock(k.c.drain_mutex);
  for (std::size_t cls = 0; cls < k.c.classes.count(); ++cls) {
    const chain got = k.c.stacks[cls].pop_all(k.c.slots);  // (S3)
    // Relaxed: trim's end (T3, a release) publishes it to the take that reads it (take_from_stack).
    k.c.drain_marks[cls].store(got.tag, std::memory_order_relaxed);
    if (got.count > 0) free_chain(k, cls, got);
  }
}

// A decay step's sort of class cls's stack: the slots whose buffers have sat unused since before
// the step before (decay_schedule::stale) are freed, the others go back on top, in their order.
// Under drain_mutex, so that a trim's drain and a fork's prepare come wholly before or after it.
// Takes that overlap it find the stack empty for that moment, as during a drain.
void decay_stack(caller& k, std::size_t cls, std::uint32_t step) noexcept {
  if (stack_looks_empty(k, cls)) return;
  std::lock_guard lock(k.c.drain_mutex);
  const chain got = k.c.stacks[cls].pop_all(k.c.slots);  // (S3)
  chain keep, gone;
  slot_index i = got.first;
  for (std::uint32_t j = 0; j < got.count; ++j) {
    detail::slot& s = k.c.slots[i];
    const slot_index next = s.next.load(std::memory_order_relaxed);  // ordered by (S3)
    chain& to = detail::decay_schedule::stale(s.step, step) ? gone : keep;
    if (to.count == 0) {
      to.first = i;
    } else {
      k.c.slots[to.last].next.store(i, std::memory_order_relaxed);  // published by (S1) below
    }
    to.last = i;
    ++to.count;
    i = next;
  }
  if (keep.count > 0) k.c.stacks[cls].push_chain(k.c.slots, keep);  // (S1)
  if (gone.count > 0) free_chain(k, cls, gone, &class_counts::decayed);
}

// The flag of (P) and (R): an odd count while raised. Its user only.
std::uint32_t raise_flag(cache& tc) noexcept {
  const std::uint32_t flag = tc.publishing.load(std::memory_order_relaxed) + 1;  // its own writes
  tc.publishing.store(flag, std::memory_order_seq_cst);  // (P1): seq_cst, for the order with T1/T2
  return flag;
}
void lower_flag(cache& tc, std::uint32_t flag) noexcept {
  tc.publishing.store(flag + 1, std::memory_order_release);  // (P3): pairs with trim's wait
}

// Whether no trim has ended since the cache's last catch-up, given that P2 or R2 found none
// running (their seq_cst load, an acquire, carries (G) from the trim's end, T3).
bool same_generation(const caller& k) noexcept {
  return k.c.generation.load(std::memory_order_relaxed) == k.tc->synced_generation;
}

// Pushes a chain of kept buffers of class cls onto its stack, keeping the handshake (P) with
// trim. `earlier`: the chain holds buffers that earlier calls kept (a cache's flush), which a
// trim that overtook this call must free; else it holds only this call's own buffer, which only
// a switch to disabled must keep out (a trim alone may be overtaken: the retire then counts as
// coming after it). Answers whether it pushed; if not, the caller still holds the chain.
bool publish(caller& k, std::size_t cls, const chain& ch, bool earlier) noexcept {
  detail::mark_stocked(k.c, cls);  // before the push: stocked_ever
  if (k.tc == nullptr) {
    assert(!earlier);  // only a cache flushes
    // (O): trim takes orphan_mutex once after its stamp; this section comes wholly before that
    // (trim's pops then find the chain) or wholly after (this load sees the stamp).
    std::lock_guard lock(k.c.orphan_mutex);
    if (!enabled_in(k.c.state.load(std::memory_order_relaxed))) return false;
    k.c.stacks[cls].push_chain(k.c.slots, ch);  // (S1)
    return true;
  }
  const std::uint32_t flag = raise_flag(*k.tc);                         // (P1)
  const std::uint64_t now = k.c.state.load(std::memory_order_seq_cst);  // (P2)
  const bool push = enabled_in(now) && (!earlier || (!trimming_in(now) && same_generation(k)));
  if (push) k.c.stacks[cls].push_chain(k.c.slots, ch);                  // (S1)
  lower_flag(*k.tc, flag);                                              // (P3)
  return push;
}

// trim's side of (P) and (R), after its stamp (T1): waits until no thread is inside a publish or
// a refill that it found in progress (and that may have read the state before the stamp). It
// reads the flags under admin_mutex, which keeps the registry still, but waits for one without
// it, so that a publisher stopped there holds up the trims alone (docs/pool.md, PROGRESS). The
// cache it waits on stays pinned meanwhile: its thread's exit, which may come as soon as the
// flag moves, then leaves it in the registry for the last pin to delete (give_back). A cache
// that enters the registry (at its head) once the scan has begun is not read: it entered under
// admin_mutex after this scan's first hold of it, so T1 happens-before its publishes and
// refills, whose P2 and R2 then see the trim.
void await_publishers(core& c) noexcept {
  std::unique_lock lock(c.admin_mutex);  // (M): keeps the registry still
  for (cache* tc = c.registry; tc != nullptr;) {
    const std::uint32_t seen = tc->publishing.load(std::memory_order_seq_cst);  // (T2)
    if (seen % 2 == 0) {
      tc = tc->next;
      continue;
    }
    ++tc->pins;
    lock.unlock();
    // acquire: synchronizes-with P3, or with a later P1 (a seq_cst store, so a release too)
    while (tc->publishing.load(std::memory_order_acquire) == seen) std::this_thread::yield();
    lock.lock();
    cache* const waited = tc;
    tc = tc->next;  // still in the registry while pinned, so its link is current
    if (--waited->pins == 0 && waited->given_back) {
      detail::unlink(c, *waited);
      delete waited;  // touches nothing of the core (~cache)
    }
  }
  lock.unlock();
  // (O): the threads without a cache publish under orphan_mutex. Each such section comes wholly
  // before this one (this trim's pops, after it, find its chain) or wholly after (it sees T1).
  std::lock_guard orphans(c.orphan_mutex);
}

// ---- magazines --------------------------------------------------------------------------------

// Whether the front may send class cls's calls to the magazine: the pool caches the class whole
// (not the top class cut at the ceiling, whose requests above the ceiling must miss) and no
// off-class buffer of it is shelved (a take must look at those first). A hint read, relaxed: a
// shelving restamps the state word after it sets the flag, and enter() reads the word with
// acquire before it rebuilds the view.
bool fronts_class(const caller& k, std::size_t cls) noexcept {
  return detail::nominal_class_size(cls) == k.c.class_size[cls] &&
         !k.c.off_class_nonempty[cls].load(std::memory_order_relaxed);
}

// Points a thread cache's view for class cls at its magazine when it may (see fronts_class),
// else at `absent`.
void aim_view(caller& k, std::size_t cls) noexcept {
  if (!k.tc->view) return;  // a CPU cache: no front points at it
  magazine* m = k.tc->find(cls);
  k.tc->view[cls] = m != nullptr && fronts_class(k, cls) ? m : &k.tc->absent;
}

// The cache's magazine for class cls, made at first use; null when it caches nothing or no
// memory can be had (the call then goes to the shared stack directly). No lock: stats() reads
// the pointer with acquire (cache::find).
magazine* magazine_for(caller& k, std::size_t cls) noexcept {
  if (!k.caches()) return nullptr;
  if (magazine* m = k.tc->find(cls)) return m;
  auto* m = new (std::nothrow) magazine;
  if (m == nullptr) return nullptr;
  m->capacity = k.c.class_size[cls];
  m->limit = std::min(2 * detail::magazine_batch(m->capacity), k.c.cache_places);
  if (k.tc->owner == detail::cache::kind::cpu) detail::mark_stocked(k.c, cls);  // stocked_ever
  k.tc->install(cls, m);
  aim_view(k, cls);
  return m;
}

// Takes up to `want` (>= 1) buffers of class cls off the top slot of its stack into out[0, n),
// their places with them; answers n. The rest of the slot goes back on the stack under the
// handshake (R) (a thread without a cache: under orphan_mutex, as (O)), unless a trim ran
// meanwhile. Then the rest is freed if the pop may have come before the trim's drain of the
// class (a trim still runs, or its drain mark is at or after the pop), since it may hold buffers
// from before that trim; and goes back if it came after, since it may hold buffers retired after
// that trim returned (which cannot have reached the stack before the drain). A refill
// (`into_cache`) takes nothing while a trim runs or the cache is behind: its batch must enter the
// cache under the generation it was popped in.
std::uint32_t take_from_stack(caller& k, std::size_t cls, std::byte** out, std::uint32_t want,
                              bool into_cache) noexcept {
  std::uint32_t flag = 0;
  // A pool that does not cache pushes slots of one buffer alone, so its pops leave no rest to
  // push back, and need no handshake: a pop is a take before or after a trim's drain, as it falls.
  const bool handshake = k.c.caching;
  // The state word (R2): seq_cst inside the flag, as (P2) (trims that restamp later wait for the
  // flag); acquire under orphan_mutex (trims that restamp later wait for the mutex), which pairs
  // with a finished trim's end (T3). Either way a word that shows no trim running comes after
  // every drain of the trims begun before it. Without a handshake, acquire, as (F').
  if (handshake && k.tc != nullptr) {
    flag = raise_flag(*k.tc);  // (P1)
  } else if (handshake) {
    k.c.orphan_mutex.lock();   // (O)
  }
  const std::uint64_t before = k.c.state.load(handshake && k.tc != nullptr ? std::memory_order_seq_cst
                                                                           : std::memory_order_acquire);  // (R2)
  std::uint32_t n = 0;
  std::byte* rest[detail::slot_room];
  std::uint32_t freed = 0;
  chain got;
  if (enabled_in(before) &&
      !(into_cache && (trimming_in(before) || !same_generation(k)))) {
    got = k.c.stacks[cls].pop_chain(k.c.slots, 1);  // (S2)
  }
  if (got.count == 1) {
    detail::slot& s = k.c.slots[got.first];
    const std::uint32_t count = s.count;
    n = std::min(want, count);
    copy_items(s, count - n, n, out);
    bool back = count > n;
    if (back && trimming_in(before)) {
      // acquire: pairs with the end (T3) of a trim that ran since, which marked its drains before
      // it. Not seq_cst: a trim that restamps after this, also restamped after `before` in the
      // seq_cst order, and so waits for the flag (or the mutex) as R2 says.
      const std::uint64_t after = k.c.state.load(std::memory_order_acquire);
      // Relaxed: ordered by that acquire, after the drains' marks (drain_all).
      back = !trimming_in(after) &&
             detail::tag_after(got.tag, k.c.drain_marks[cls].load(std::memory_order_relaxed));
    }
    if (back) {
      s.count = count - n;
      k.c.stacks[cls].push_chain(k.c.slots, got);  // (S1), inside the handshake
      got = {};
    } else {
      freed = count - n;
      copy_items(s, 0, freed, rest);
    }
  }
  if (handshake && k.tc != nullptr) {
    lower_flag(*k.tc, flag);  // (P3)
  } else if (handshake) {
    k.c.orphan_mutex.unlock();
  }
  assert(handshake || got.count == 0 || freed == 0);  // one buffer a slot: nothing left over
  if (got.count == 1) {
    free_held(k, cls, rest, freed);
    release_slots(k, got);
  }
  return n;
}

// Fills an empty magazine with a batch from the shared stack (take_from_stack); their places come
// with them and stand in for the magazine's spare ones. Leaves it empty while a trim runs or the
// cache is behind.
void refill(caller& k, std::size_t cls, magazine& m) noexcept {
  if (stack_looks_empty(k, cls)) return;
  // The batch brings its own places: the magazine's spare ones go loose, and loose ones the
  // cache then has no room for go back to the shared counter. As many as the cache has places
  // for, up to a batch: a refill never pushes other classes out (a retire does, displace()),
  // so that classes used in turn do not push each other out.
  detail::drop_spare(k, m);
  const std::uint32_t want = std::min(detail::batch_of(m), k.tc->places_max - k.tc->places);
  if (want == 0) return;
  if (const std::uint32_t loose = k.tc->loose.load(std::memory_order_relaxed);
      k.tc->places + loose + want > k.tc->places_max) {
    const std::uint32_t excess = k.tc->places + loose + want - k.tc->places_max;
    detail::unreserve(k.c, excess);
    detail::set_loose(*k.tc, loose - excess);
  }
  const std::uint32_t got = take_from_stack(k, cls, m.items, want, /*into_cache=*/true);
  if (got == 0) return;
  m.count.store(got, std::memory_order_relaxed);
  detail::set_owned(*k.tc, m, got);
}

// ---- entering and leaving the general path --------------------------------------------------

// Every general take and retire starts here: this thread's cache for the pool (made at its first
// call, and given a seat when one is free), brought up to the state word. A trim or switch that
// happens-before this call is seen (write-read coherence); one that merely ran earlier on
// another thread reaches this thread at a later call. The buffers it must not keep meanwhile
// are covered by the handshake (P).
caller enter(core& c) noexcept {
  detail::wait_out_fork(c);
  cache* tc = detail::cache_of_this_thread(c, /*make=*/true);
  if (tc == nullptr) return {c, nullptr, c.state.load(std::memory_order_acquire)};  // (F')
  if (!tc->caching && c.seat_places.load(std::memory_order_relaxed) + c.cache_places <= c.seat_places_max) {
    detail::take_seat(*tc);
  }
  return {c, tc, detail::bring_up_to_date(c, *tc)};
}

// The last step of a general take or retire: the front points at this thread's cache when it
// caches, is current and the pool enabled, so that the thread's next call to this pool may hit
// it inline.
void leave(const caller& k) noexcept {
  if (k.caches() && k.tc->view && enabled_in(k.state) && k.state == k.tc->synced_state) {
    detail::point_front(k.state, *k.tc);
  }
}

// The calls that neither take nor retire bring the caller's own cache up to date the same way,
// without making one.
void catch_up_own(core& c) noexcept {
  const detail::in_general_path guard;
  if (cache* tc = detail::cache_of_this_thread(c, /*make=*/false)) detail::bring_up_to_date(c, *tc);
}

// ---- take and retire, per kind of buffer ----------------------------------------------------

// A buffer of class cls from the cache's magazine or the shared stack, or null. Counts a hit that
// bypassed the magazine (one through it counts itself: sluice/detail/pool_cache.hpp).
std::byte* take_on_class(caller& k, std::size_t cls) noexcept {
  // A miss on a class never seen here makes no magazine: only a refill needs one.
  if (k.caches() && !k.tc->has_made(cls) && stack_looks_empty(k, cls)) return nullptr;
  if (magazine* m = magazine_for(k, cls)) {
    if (m->count.load(std::memory_order_relaxed) == 0) refill(k, cls, *m);
    if (const std::uint64_t n = m->count.load(std::memory_order_relaxed); n > 0) return detail::pop_from(*m, n);
    if (stack_looks_empty(k, cls)) return nullptr;  // else the cache had no room: pop one
  }
  std::byte* data = nullptr;
  if (take_from_stack(k, cls, &data, 1, /*into_cache=*/false) == 0) return nullptr;
  detail::give_place(k);
  k.count(cls, &class_counts::hits);
  k.rec().add(&counters::bytes_out, k.c.class_size[cls]);
  return data;
}

// Keeps a buffer of class cls; false when the bound or the slots are exhausted, or the pool was
// switched off while this retire ran. Counts a retire that bypassed the magazine.
bool retire_on_class(caller& k, std::size_t cls, std::byte* data) noexcept {
  if (magazine* m = magazine_for(k, cls)) {
    if (m->count.load(std::memory_order_relaxed) < m->owned.load(std::memory_order_relaxed) ||
        detail::add_places(k, cls, *m)) {
      detail::push_onto(*m, m->count.load(std::memory_order_relaxed), data);
      return true;
    }
    // No place in the cache (or in the bound, which the shared stack then finds too).
  }
  if (!detail::take_place(k)) return false;
  if (const slot_index i = take_slot(k); i != no_slot) {
    k.c.slots[i].items[0] = data;
    k.c.slots[i].count = 1;
    k.c.slots[i].step = k.c.decay.steps();
    if (publish(k, cls, chain{i, i, 1}, /*earlier=*/false)) {
      k.count(cls, &class_counts::retired);
      k.rec().add(&counters::bytes_in, k.c.class_size[cls]);
      return true;
    }
    release_slots(k, chain{i, i, 1});
  }
  detail::give_place(k);
  return false;
}

std::optional<held> take_off_class(caller& k, std::size_t cls, std::size_t size) noexcept {
  std::optional<held> h;
  {
    std::lock_guard lock(k.c.shelf_mutex);
    h = k.c.off_class.take(cls, size);
    k.c.off_class_nonempty[cls].store(!k.c.off_class.empty(cls), std::memory_order_relaxed);
  }
  if (h) {
    detail::give_place(k);
    k.count(cls, &class_counts::hits);
    k.rec().add(&counters::bytes_out, h->capacity);
  }
  return h;
}

bool retire_off_class(caller& k, std::size_t cls, held h) noexcept {
  if (!detail::take_place(k)) return false;
  {
    std::lock_guard lock(k.c.shelf_mutex);
    // Under the shelf lock, a switch to disabled whose trim has emptied the shelves is seen (the
    // lock orders the two): no buffer is shelved past set_enabled(false). A trim alone may be
    // overtaken, as if this retire came after it.
    if (enabled_in(k.c.state.load(std::memory_order_relaxed))) {
      try {
        const bool first = k.c.off_class.empty(cls);
        detail::mark_stocked(k.c, cls);  // before the shelf holds it: stocked_ever
        k.c.off_class.put(cls, h, k.c.decay.steps());
        k.c.off_class_nonempty[cls].store(true, std::memory_order_relaxed);
        // The class's first shelved buffer: every thread's front must stop answering the class
        // inline, so the word moves (release: the flag, for enter()'s (F')).
        if (first) restamp(k.c, [](std::uint64_t w) { return w; }, std::memory_order_release);
        k.count(cls, &class_counts::retired);
        k.rec().add(&counters::bytes_in, h.capacity);
        return true;
      } catch (const std::bad_alloc&) {
      }
    }
  }
  detail::give_place(k);
  return false;
}

// ---- the general take and retire --------------------------------------------------------------

// Every rule, every kind of buffer and thread. An exact take looks only at the class of size,
// and only at its own-size buffers.
held take_any(core& c, std::size_t size, bool exact) {
  const detail::in_general_path guard;
  caller k = enter(c);
  held found;
  const auto& classes = c.classes;
  if (size <= classes.ceiling()) {
    const std::size_t first = classes.of(size), end = exact ? first + 1 : classes.count();
    detail::cpu_cache_hold cpu(k);  // a thread whose cache has no seat uses its CPU's
    if (enabled_in(k.state)) {
      for (std::size_t cls = first; cls < end && found.data == nullptr; ++cls) {
        // Nothing to look at: no stack, CPU cache or shelf has held the class, and this thread's
        // cache has no magazine of it. A take that looks past its class passes most classes so.
        if (!detail::stocked_ever(c, cls) && !(k.caches() && k.tc->has_made(cls))) continue;
        // Within a class, off-class buffers are the smaller: look at them first.
        if (!exact && c.off_class_nonempty[cls].load(std::memory_order_relaxed)) {
          if (const auto h = take_off_class(k, cls, size)) {
            found = *h;
            break;
          }
        }
        std::byte* data = take_on_class(k, cls);
        // Then what the CPU caches hold (no thread's cache: their buffers are anyone's).
        if (data == nullptr) data = detail::take_from_cpu_caches(k, cls);
        if (data != nullptr) found = {data, c.class_size[cls]};
      }
    }
  }
  if (found.data == nullptr) k.count(c.row_of(size), &class_counts::misses);
  if (k.caches() && enabled_in(k.state) && size <= classes.ceiling()) aim_view(k, classes.of(size));
  leave(k);
  return found;
}

void retire_any(core& c, held h) noexcept {
  const detail::in_general_path guard;
  if (h.data == nullptr) return catch_up_own(c);  // nothing to keep; a call all the same
  caller k = enter(c);
  const auto& classes = c.classes;
  bool kept = false;
  if (h.capacity <= classes.ceiling()) {
    const std::size_t cls = classes.of(h.capacity);
    detail::cpu_cache_hold cpu(k);
    if (enabled_in(k.state)) {
      kept = c.class_size[cls] == h.capacity ? retire_on_class(k, cls, h.data) : retire_off_class(k, cls, h);
    }
  }
  if (!kept) {
    // Why: the ceiling, else the switch as the word shows it now (a retire that the switch
    // overtook finds it off), else no room. Relaxed: it orders nothing, it only names the
    // reason; a switch racing the retire may be read either way (docs/pool.md, STATISTICS).
    k.count(c.row_of(h.capacity), h.capacity > classes.ceiling() ? &class_counts::dropped_over_ceiling
                                  : !enabled_in(c.state.load(std::memory_order_relaxed)) ? &class_counts::dropped_off
                                                                                         : &class_counts::dropped_at_bound);
    detail::free_bytes(h.data);
  }
  if (k.caches() && enabled_in(k.state) && h.capacity <= classes.ceiling()) aim_view(k, classes.of(h.capacity));
  leave(k);
}

// ---- fork -------------------------------------------------------------------------------------

// Adds d's counts to into's.
void accumulate(pool_class_stats& into, const pool_class_stats& d) noexcept {
  for (auto field : class_counts::row_fields()) into.*field += d.*field;
}

// Every class row's counts, passed to f(row, counts) part by part: the core's rows, and what each
// cache that has not departed counted (its rows and its magazines). Under admin_mutex, or alone in
// a forked child.
template <class F>
void each_class_count(const core& c, F f) {
  for (std::size_t row = 0; row <= c.classes.count(); ++row) {
    pool_class_stats d;
    c.class_rows[row].add_to(d);
    f(row, d);
  }
  for (const cache* tc = c.registry; tc != nullptr; tc = tc->next) {
    if (tc->given_back) continue;  // counted with the departed
    tc->class_counts_each([&](std::size_t row, const class_counts& t) {
      pool_class_stats d;
      t.add_to(d);
      f(row, d);
    });
    tc->magazine_counts([&](std::size_t cls, std::uint64_t hits, std::uint64_t kept) {
      pool_class_stats d;
      d.hits = hits;
      d.retired = kept;
      f(cls, d);
    });
  }
}

// The class counts, made to agree with what the child holds, class by class, as the byte count
// is below: what the lost caches held counts as trimmed (given up), and a buffer that a stopped
// call kept without counting it counts as retired. Without memory for the sums, as they were.
void adopt_class_counts(core& c) noexcept {
  const std::size_t n = c.classes.count();
  const std::unique_ptr<pool_class_stats[]> counted(new (std::nothrow) pool_class_stats[n + 1]);
  const std::unique_ptr<std::uint64_t[]> held(new (std::nothrow) std::uint64_t[n]());
  if (!counted || !held) return;
  each_class_count(c, [&](std::size_t row, const pool_class_stats& d) { accumulate(counted[row], d); });
  for (std::size_t cls = 0; cls < n; ++cls) held[cls] = c.stacks[cls].count_alone(c.slots) + c.off_class.count(cls);
  for (const cache* tc = c.registry; tc != nullptr; tc = tc->next) {  // this thread's, and the CPUs'
    tc->for_each_magazine([&](std::size_t cls, const magazine& m) { held[cls] += m.count.load(std::memory_order_relaxed); });
  }
  for (std::size_t cls = 0; cls < n; ++cls) {
    const pool_class_stats& s = counted[cls];
    // What the counts say it holds (as class_stats() finds it) less what it holds.
    const auto excess = static_cast<std::int64_t>(s.retired - s.hits - s.trimmed - s.decayed - held[cls]);
    if (excess > 0) c.class_rows[cls].add(&class_counts::trimmed, static_cast<std::uint64_t>(excess));
    if (excess < 0) c.class_rows[cls].add(&class_counts::retired, static_cast<std::uint64_t>(-excess));
  }
}

// In a forked child, where the parent's other threads are gone with whatever their caches held
// and whatever calls they had in flight. Their caches are let go without freeing their buffers:
// a thread stopped inside a call may have left a magazine's count one ahead of its items, so
// freeing could free a buffer its owner had answered; that memory stays allocated in the child,
// as jemalloc's and mimalloc's other threads' caches do. So are the CPU caches that such a call
// held at the fork (take_over_cpu_caches has forgotten them); the others are whole. The bound's
// count and retained_bytes are then made exact again from what the child can reach.
void adopt_after_fork(core& c) noexcept {
  cache* mine = detail::own_cache_after_fork(c);
  // A request to this thread in flight at the fork: the child has no pending signal.
  if (mine != nullptr) mine->release.store(detail::release_idle, std::memory_order_relaxed);
  for (cache* tc = c.registry; tc != nullptr;) {
    cache* const next = tc->next;
    tc->pins = 0;  // the trims that pinned it are the parent's
    if (tc->owner == cache::kind::thread && tc != mine) {
      if (!tc->given_back) {  // else its thread has let go already
        tc->depart();
        --c.refs;  // never the last: the pool itself holds one
      }
      detail::unlink(c, *tc);
      delete tc;
    }
    tc = next;
  }
  // The seats: this thread's, if it has one. Counted afresh, since a thread stopped by the fork
  // between taking a seat and entering its cache in the registry has a seat no cache holds.
  c.seat_places.store(mine != nullptr && mine->caching ? mine->places_max : 0, std::memory_order_relaxed);
  // A trim that another thread was running is over: the child's refills must not wait for it. A
  // fresh stamp, so that the CPU caches, which that trim may have left behind its generation,
  // free what they hold now, as it would have (the fork holds their locks). A fork between its
  // stamp and its bump of the generation leaves them what they hold: that trim never returns in
  // the child, so nothing it would have freed is owed.
  restamp(c, [](std::uint64_t w) { return w & ~detail::trims_mask; }, std::memory_order_relaxed);
  detail::catch_up_cpu_caches(c, /*held=*/true);
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
  for (const cache* tc = c.registry; tc != nullptr; tc = tc->next) {  // this thread's, and the CPUs'
    tc->tally(sum);
    places += tc->places + tc->loose.load(std::memory_order_relaxed);
    tc->for_each_magazine([&](std::size_t cls, const magazine& m) {
      bytes += m.count.load(std::memory_order_relaxed) * c.class_size[cls];
    });
  }
  c.reserved.store(places, std::memory_order_relaxed);
  adopt_class_counts(c);
  // What the lost caches held leaves the byte count as if freed; a call stopped between moving
  // a buffer and counting it is counted as having finished.
  const std::uint64_t in = sum.bytes_in.load(std::memory_order_relaxed);
  const std::uint64_t out = sum.bytes_out.load(std::memory_order_relaxed);
  const detail::recorder departed{&c.departed, true};
  if (in - out > bytes) departed.add(&counters::bytes_out, in - out - bytes);
  if (in - out < bytes) departed.add(&counters::bytes_in, bytes - (in - out));
}

}  // namespace

// ---- a cache's state ----------------------------------------------------------------------------

namespace detail {

// Moves the oldest n (<= count) buffers of a magazine to the shared stack, slot_room to a slot,
// as one chain of slots, their places with them, or frees them when a trim or the switch
// overtook this call (P). Answers how many left the magazine: fewer than n only when no slot can
// be had, and then the rest stay (a kept buffer is never freed for want of a slot; the retire
// that needed the room is dropped instead).
std::uint32_t flush(caller& k, std::size_t cls, magazine& m, std::uint32_t n) noexcept {
  chain out;
  std::uint32_t moved = 0;
  while (moved < n) {
    const slot_index i = take_slot(k);
    if (i == no_slot) break;
    slot& s = k.c.slots[i];
    const std::uint32_t here = std::min(n - moved, slot_room);
    for (std::uint32_t j = 0; j < here; ++j) s.items[j] = m.items[moved + j];
    s.count = here;
    s.step = k.c.decay.steps();  // the magazine's oldest may be older: they stay a step longer
    if (out.count == 0) {
      out.first = i;
    } else {
      k.c.slots[out.last].next.store(i, std::memory_order_relaxed);
    }
    out.last = i;
    ++out.count;
    moved += here;
  }
  if (out.count == 0) return 0;
  if (!publish(k, cls, out, /*earlier=*/true)) free_chain(k, cls, out);
  drop_oldest(m, moved);
  set_owned(*k.tc, m, static_cast<std::uint32_t>(m.owned.load(std::memory_order_relaxed)) - moved);
  return moved;
}

// Decay in a cache (its user, or a CPU cache's holder, at its first catch-up since a step): frees
// what each magazine holds that has sat unused since before the step before `step`. A magazine
// whose takes and retires moved since the last catch-up was used in that catch-up's step: its
// hits end at the next step's restamp, which sends its user here, and the general path's uses
// come after a catch-up. Its spare places stay. `all`: every magazine's buffers go (a decay
// signal's handler gave back their pages).
void decay_magazines(caller& k, std::uint32_t step, bool all) noexcept {
  cache& tc = *k.tc;
  // Relaxed: the magazines' fields are their user's own writes (a CPU cache's: its previous
  // holders', ordered by its lock, L1 and L2 in cpu_caches.cpp).
  tc.for_each_magazine([&](std::size_t cls, magazine& m) {
    cache::use_seen& seen = tc.seen[cls];
    const std::uint64_t uses = m.takes.load(std::memory_order_relaxed) + m.retires.load(std::memory_order_relaxed);
    if (uses != seen.uses) {
      seen.uses = uses;
      seen.step = tc.synced_step;
    }
    const auto count = static_cast<std::uint32_t>(m.count.load(std::memory_order_relaxed));
    if (count == 0 || (!all && !decay_schedule::stale(seen.step, step))) return;
    free_held(k, cls, m.items, count, &class_counts::decayed);  // their places with them
    m.count.store(0, std::memory_order_relaxed);
    set_owned(tc, m, static_cast<std::uint32_t>(m.owned.load(std::memory_order_relaxed)) - count);
  });
}

void empty_cache(caller& k, bool keep) noexcept {
  cache& tc = *k.tc;
  tc.for_each_magazine([&](std::size_t cls, magazine& m) {
    if (const auto count = static_cast<std::uint32_t>(m.count.load(std::memory_order_relaxed)); keep && count > 0) {
      flush(k, cls, m, count);
    }
    const auto count = static_cast<std::uint32_t>(m.count.load(std::memory_order_relaxed));  // what found no slot
    free_held(k, cls, m.items, count);
    unreserve(k.c, m.owned.load(std::memory_order_relaxed) - count);
    m.count.store(0, std::memory_order_relaxed);
    set_owned(tc, m, 0);
  });
  unreserve(k.c, tc.loose.exchange(0, std::memory_order_relaxed));
  if (keep && tc.free_slots.count > 0) {
    k.c.free_slots.push_chain(k.c.slots, first_of(k.c.slots, tc.free_slots, tc.free_slots.count));  // (S1)
    tc.free_slots = {};
  }
}

// A trim began since, or runs, or the pool is off: what the cache holds goes. Its view is aimed
// again, since an off-class shelving may be why the word moved.
void catch_up(core& c, cache& tc, const view& now) noexcept {
  caller k{c, &tc, now.state};
  // A decay signal's handler gave back pages here since the last catch-up (sleepers.cpp): what
  // the magazines hold goes, whatever its stamps say (review: a thread asleep for a multiple of
  // 2^32 steps had stamps that looked fresh, and its takes read zeros).
  const bool given = tc.pages_given != 0;
  tc.pages_given = 0;
  if (trimming_in(now.state) || now.generation != tc.synced_generation || !enabled_in(now.state)) {
    empty_cache(k, /*keep=*/false);
    shrink(tc);  // a trim takes back what caches grew to, as the memory they held
  } else if (tc.seen && (now.step != tc.synced_step || given)) {
    decay_magazines(k, now.step, given);
  }
  tc.synced_state = now.state;
  tc.synced_generation = now.generation;
  tc.synced_step = now.step;
  if (tc.view) {
    for (std::size_t cls = 0; cls < c.classes.count(); ++cls) aim_view(k, cls);
  }
}

view read_view(core& c) noexcept {
  for (;;) {
    // (F') acquire: a trim's end (T3) releases its generation (G), a shelving its off-class flag;
    // a call that reads the word they wrote sees those too.
    const std::uint64_t state = c.state.load(std::memory_order_acquire);
    // acquire: pairs with (G), so that a generation bumped by a trim whose stamp (T1) came after
    // `state` shows in the word read again below (T1 is sequenced before the bump).
    const std::uint64_t generation = c.generation.load(std::memory_order_acquire);
    // Relaxed: after the acquire above. An unchanged word means no trim stamped in between (the
    // words are never repeated), so `generation` counts exactly the trims stamped up to `state`,
    // those still running aside (a running trim shows in the word itself).
    // Relaxed: a step begins (its number) before it restamps the word (a release), so a word
    // from after the restamp shows the step; a later step's number seen early is only early.
    if (c.state.load(std::memory_order_relaxed) == state) return {state, generation, c.decay.steps()};
  }
}

std::uint64_t bring_up_to_date(core& c, cache& tc) noexcept {
  const std::uint64_t state = c.state.load(std::memory_order_acquire);  // (F'), as read_view
  if (state == tc.synced_state && tc.pages_given == 0) return state;
  const view now = read_view(c);
  catch_up(c, tc, now);
  return now.state;
}

cache::cache(pool_core& c, kind k)
    : core(c),
      owner(k),
      class_count(c.caching ? c.classes.count() : 0),
      caching(k == kind::cpu),
      places_max(c.cache_places),
      class_rows_count(c.classes.count() + 1),
      magazines(std::make_unique<detail::atomic<magazine*>[]>(class_count)),
      rows(std::make_unique<detail::atomic<class_counts*>[]>(class_rows_count)) {
  const detail::view now = read_view(c);  // one view, as a catch-up records it
  synced_state = now.state;
  synced_generation = now.generation;
  synced_step = now.step;
  if (c.decay.on() && class_count > 0) {
    seen = std::make_unique<use_seen[]>(class_count);
    for (std::size_t cls = 0; cls < class_count; ++cls) seen[cls].step = now.step;
  }
}

cache::~cache() {
  for_each_magazine([](std::size_t, magazine& m) { delete &m; });
  for (std::size_t row = 0; row < class_rows_count; ++row) delete rows[row].load(std::memory_order_relaxed);
}

void cache::tally(counters& into) const noexcept {
  counts.fold_into(into);
  const recorder rec{&into, true};
  magazine_counts([&](std::size_t cls, std::uint64_t hits, std::uint64_t kept) {
    rec.add(&counters::bytes_out, hits * core.class_size[cls]);
    rec.add(&counters::bytes_in, kept * core.class_size[cls]);
  });
}

void cache::depart() const noexcept {
  tally(core.departed);
  magazine_counts([&](std::size_t cls, std::uint64_t hits, std::uint64_t kept) {
    core.class_rows[cls].add(&class_counts::hits, hits);
    core.class_rows[cls].add(&class_counts::retired, kept);
  });
  class_counts_each([&](std::size_t row, const class_counts& t) {
    for (auto field : class_counts::fields()) core.class_rows[row].add(field, (t.*field).load(std::memory_order_relaxed));
  });
}

class_counts* cache::own_counts(std::size_t row) noexcept {
  if (class_counts* t = rows[row].load(std::memory_order_relaxed)) return t;  // its user's own store
  auto* t = new (std::nothrow) class_counts;
  if (t != nullptr) rows[row].store(t, std::memory_order_release);  // for class_counts_each's acquire
  return t;
}

void cache::forget() noexcept {  // in a forked child, its one thread: relaxed throughout
  depart();
  counts.clear();
  for (std::size_t row = 0; row < class_rows_count; ++row) {
    if (class_counts* t = rows[row].load(std::memory_order_relaxed)) {
      for (auto field : class_counts::fields()) (t->*field).store(0, std::memory_order_relaxed);
    }
  }
  for_each_magazine([](std::size_t, magazine& m) {
    for (auto field : {&magazine::count, &magazine::owned, &magazine::takes, &magazine::retires}) {
      (m.*field).store(0, std::memory_order_relaxed);
    }
  });
  places = 0;
  loose.store(0, std::memory_order_relaxed);
  free_slots = {};
  // Its uses start again from zero: a count that climbed back to the one remembered is no sign
  // of disuse.
  for (std::size_t cls = 0; seen && cls < class_count; ++cls) seen[cls] = {0, synced_step};
  publishing.store(0, std::memory_order_relaxed);  // its holder's flag: no trim of the child waits for it
}

std::size_t cache::spare_places() const noexcept {
  std::size_t spare = loose.load(std::memory_order_relaxed);
  for_each_magazine(
      [&](std::size_t, const magazine& m) {
        const std::uint64_t owned = m.owned.load(std::memory_order_relaxed);
        const std::uint64_t count = m.count.load(std::memory_order_relaxed);
        spare += owned > count ? owned - count : 0;  // a momentary mix may show count above owned
      },
      std::memory_order_acquire);
  return spare;
}

}  // namespace detail

// ---- the pool's shared state ---------------------------------------------------------------------

detail::pool_core::pool_core(const pool_options& o, detail::atomic<std::uint64_t>& state_word)
    : classes(o.ceiling),
      class_size(std::make_unique<std::size_t[]>(classes.count())),
      bound(o.bound),
      caching(o.thread_cache && o.bound >= min_caching_bound),
      // P = clamp(bound / 32, 1, 16), as docs/pool.md states.
      place_batch(static_cast<std::uint32_t>(std::clamp<std::size_t>(o.bound / 32, 1, 16))),
      cache_places(2 * place_batch),
      cache_places_max(2 * cache_places),
      // A quarter of the bound for each kind of cache (min_caching_bound: at least four each).
      thread_caches_max(caching ? static_cast<std::uint32_t>(std::min<std::size_t>(o.bound / 4 / cache_places, UINT32_MAX)) : 0),
      seat_places_max(std::size_t{thread_caches_max} * cache_places),
      cpus(detail::map_this_process(caching ? static_cast<std::uint32_t>(std::min<std::size_t>(o.bound / 4 / cache_places, UINT32_MAX)) : 0)),
      state(state_word),
      stacks(std::make_unique<detail::tagged_stack[]>(classes.count())),
      drain_marks(std::make_unique<detail::atomic<std::uint32_t>[]>(classes.count())),
      off_class(classes.count()),
      off_class_nonempty(std::make_unique<detail::atomic<bool>[]>(classes.count())),
      cpu_caches(std::make_unique<std::unique_ptr<cache>[]>(cpus.count)),
      class_rows(std::make_unique<class_counts[]>(classes.count() + 1)),
      decay(o.decay, std::chrono::steady_clock::now()) {
  for (std::size_t cls = 0; cls < classes.count(); ++cls) class_size[cls] = classes.size(cls);
  for (std::uint32_t i = 0; i < cpus.count; ++i) {
    cpu_caches[i] = std::make_unique<cache>(*this, cache::kind::cpu);
    cpu_caches[i]->next = registry;
    if (registry != nullptr) registry->prev = cpu_caches[i].get();
    registry = cpu_caches[i].get();
  }
  join();  // last: a fork may lock this core from here on
}

detail::pool_core::~pool_core() { leave(); }

// Lock order: the CPU caches (whose users may take shelf_mutex while they hold one), then
// admin_mutex, then drain_mutex, then shelf_mutex, then orphan_mutex. Under admin_mutex, while the
// pool lives, a fresh stamp makes every seated thread's next call miss inline, see `forking` and
// wait.
void detail::pool_core::lock_for_fork() noexcept {
  detail::in_general_path::enter();  // left in the handlers below
  decay_mutex.lock();  // a step in flight ends first: it waits on nothing the fork holds
  forking.store(1, std::memory_order_relaxed);  // (L3)
  detail::hold_cpu_caches(*this);
  admin_mutex.lock();
  // Relaxed: under admin_mutex, which orders `alive` with ~pool; the stamp publishes nothing, it
  // only makes fronts miss.
  if (alive.load(std::memory_order_relaxed)) restamp(*this, [](std::uint64_t w) { return w; }, std::memory_order_relaxed);
  drain_mutex.lock();
  shelf_mutex.lock();
  orphan_mutex.lock();
}

void detail::pool_core::unlock_in_parent() noexcept {
  orphan_mutex.unlock();
  shelf_mutex.unlock();
  drain_mutex.unlock();
  admin_mutex.unlock();
  detail::let_go_cpu_caches(*this);
  detail::lower_fork_flag(*this);
  decay_mutex.unlock();
  detail::in_general_path::leave();
}

void detail::pool_core::unlock_in_child() noexcept {
  detail::take_over_cpu_caches(*this);
  if (alive.load(std::memory_order_relaxed)) adopt_after_fork(*this);
  orphan_mutex.unlock();
  shelf_mutex.unlock();
  drain_mutex.unlock();
  admin_mutex.unlock();
  detail::let_go_cpu_caches(*this);
  detail::lower_fork_flag(*this);
  decay_mutex.unlock();
  detail::in_general_path::leave();
}

// ---- the public calls ---------------------------------------------------------------------------

pool::pool(pool_options options)
    : state_(fresh_stamp() | (options.enabled ? detail::enabled_bit : 0)), core_(new core(options, state_)) {}

pool::~pool() {
  const detail::in_general_path guard;
  core& c = *core_;
  bool last = false;
  {
    std::lock_guard lock(c.admin_mutex);  // (M)
    c.alive.store(false, std::memory_order_relaxed);
    for (cache* tc = c.registry; tc != nullptr; tc = tc->next) {
      detail::close_release(*tc);  // another thread's handler may be reading it (sleepers.cpp)
      caller k{c, tc, 0};
      detail::empty_cache(k, /*keep=*/false);
      tc->free_slots = {};  // the slot table goes below
    }
    caller k{c, nullptr, 0};  // what it frees is counted with the orphans, which die with it
    drain_all(k);
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
  // On the core's row: a call that allocates, not worth finding the thread's cache again for.
  core_->class_rows[core_->row_of(size)].add(&class_counts::fresh);
  return detail::buffer_access::release(fresh);
}

void pool::retire_general(held h) noexcept { retire_any(*core_, h); }

void* detail::exact_class::allocate(pool& p, std::size_t size) {
  if (held h = p.take_cached(size); h.data != nullptr) return h.data;
  if (held h = take_any(*p.core_, size, /*exact=*/true); h.data != nullptr) return h.data;
  void* fresh = detail::allocate_bytes(p.core_->classes.fresh_capacity(size));
  p.core_->class_rows[p.core_->row_of(size)].add(&class_counts::fresh);  // as acquire's
  return fresh;
}

void detail::exact_class::deallocate(pool& p, void* block, std::size_t size) noexcept {
  // size <= ceiling: the block has its class's own size
  const held h{static_cast<std::byte*>(block), p.core_->class_size[detail::class_of(size)]};
  if (!p.retire_cached(h)) retire_any(*p.core_, h);
}

void pool::set_enabled(bool on) noexcept {
  const detail::in_general_path guard;
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
  const detail::in_general_path guard;
  core& c = *core_;
  caller k{c, detail::cache_of_this_thread(c, /*make=*/false), 0};
  k.state = restamp(c, [](std::uint64_t w) { return w + detail::one_trim; }, std::memory_order_seq_cst);  // (T1)
  // (G) release: after T1, so that a cache never records the trim's generation with a word from
  // before it (read_view); T3 releases it again to those who read the word after the trim.
  c.generation.fetch_add(1, std::memory_order_release);
  await_publishers(c);                                                       // (T2)
  // What the CPU caches hold from before. After T2, not between T1 and T2: either way it comes
  // before the stacks' drain, and T1 and T2 close together keep trims overlapping flushes in the
  // Relacy checks of (P) (with this between them, no weakened ordering of (P) was reported).
  detail::catch_up_cpu_caches(c);
  drain_all(k);  // (S3)
  // Class by class: a switch to disabled restamped before this trim began, so a retire that
  // shelves after one of these sections sees it off (retire_off_class). Every class's section is
  // taken, never skipped on the off_class_nonempty hint (as trim(share) and decay may): a retire
  // whose flag this trim missed would otherwise outlive set_enabled(false).
  for (std::size_t cls = 0; cls < c.classes.count(); ++cls) {
    free_shelved(k, cls, [cls](detail::shelves& s) { return s.free_largest_of(cls, SIZE_MAX); }, &class_counts::trimmed);
  }
  // (T3) release: a refill that finds no trim running (R2) finds the stacks emptied too.
  c.state.fetch_sub(detail::one_trim, std::memory_order_release);
  if (k.tc != nullptr) detail::bring_up_to_date(c, *k.tc);  // this thread's own cache, now
}

// Class by class, the largest first: takes the class's own-size buffers from its shared stack as
// a take does (no more of a batch than it needs) and frees them, then its off-class ones, largest
// first. No restamp: calls in flight and the caches go on as they were.
void pool::trim(double share) noexcept {
  if (!(share > 0)) return catch_up_own(*core_);  // NaN too: nothing, but a call all the same
  if (share >= 1) return trim();
  const detail::in_general_path guard;
  core& c = *core_;
  const std::size_t target = detail::share_of(stats().retained_bytes, share);
  caller k{c, detail::cache_of_this_thread(c, /*make=*/false), 0};
  std::size_t freed = 0;
  for (std::size_t cls = c.classes.count(); cls-- > 0 && freed < target;) {
    std::byte* items[detail::slot_room];
    while (freed < target) {  // the class's own size first: the largest capacities it holds
      const std::size_t need = (target - freed + c.class_size[cls] - 1) / c.class_size[cls];
      const auto want = static_cast<std::uint32_t>(std::min<std::size_t>(detail::slot_room, need));
      const std::uint32_t n = take_from_stack(k, cls, items, want, /*into_cache=*/false);
      if (n == 0) break;
      free_held(k, cls, items, n);
      freed += std::size_t{n} * c.class_size[cls];
    }
    // Relaxed: a hint, as a take reads it (core.hpp); an off-class buffer shelved meanwhile may
    // be missed, as by a take that overlaps its retire. shelf_mutex orders the shelf itself.
    if (freed >= target || !c.off_class_nonempty[cls].load(std::memory_order_relaxed)) continue;
    const std::size_t left = target - freed;
    freed += free_shelved(k, cls, [cls, left](detail::shelves& s) { return s.free_largest_of(cls, left); }, &class_counts::trimmed);
  }
}

// A step, when one is due: the stacks, the off-class shelves, then every cache at its next
// catch-up (the restamp sends each seated thread's next call through enter()), the CPU caches
// that no call holds now and this thread's own cache at once. Then, if decay freed anything since
// the last step asked, the allocator is asked to return free pages. One step at a time: a call
// that finds another running answers false.
bool pool::decay(std::chrono::steady_clock::time_point now) noexcept {
  const detail::in_general_path guard;
  core& c = *core_;
  std::unique_lock lock(c.decay_mutex, std::defer_lock);
  if (!c.decay.on() || !lock.try_lock() || !c.decay.claim(now)) {
    if (lock.owns_lock()) lock.unlock();
    catch_up_own(c);  // a call all the same: this thread's cache catches up (DECAY)
    return false;
  }
  const std::uint32_t step = c.decay.begin();
  caller k{c, nullptr, 0};  // counts on the core's rows
  for (std::size_t cls = 0; cls < c.classes.count(); ++cls) decay_stack(k, cls, step);
  for (std::size_t cls = 0; cls < c.classes.count(); ++cls) {
    // Relaxed: a hint, as trim(share) reads it; a buffer shelved meanwhile is young anyway.
    if (!c.off_class_nonempty[cls].load(std::memory_order_relaxed)) continue;
    free_shelved(k, cls, [cls, step](detail::shelves& s) { return s.free_stale_of(cls, step); }, &class_counts::decayed);
  }
  detail::note_sleepers(c, step);  // with a decay signal set: the other threads' caches at rest
  // release: the step's number (begin(), relaxed) to the caches that read this word (read_view).
  restamp(c, [](std::uint64_t w) { return w; }, std::memory_order_release);
  detail::catch_up_free_cpu_caches(c);
  catch_up_own(c);
  detail::ask_sleepers(c, step);
  // Relaxed: a sum; a free counted late is returned at the next step.
  if (const std::uint64_t freed = c.decayed_bytes.load(std::memory_order_relaxed); freed != c.decayed_bytes_returned) {
    c.decayed_bytes_returned = freed;
    detail::return_free_pages();
  }
  return true;
}

std::size_t pool::retained() const noexcept { return stats().retained; }

std::uint64_t pool::released_idle_bytes() const noexcept {
  // Relaxed: a sum, exact once the handlers it counts have returned.
  return core_->released_idle_bytes.load(std::memory_order_relaxed);
}

pool_stats pool::stats() const noexcept {
  core& c = *core_;
  catch_up_own(c);
  counters sum;
  pool_class_stats all;  // every class's counts, summed
  std::size_t spare = 0;
  {
    std::lock_guard lock(c.admin_mutex);
    c.departed.fold_into(sum);
    c.orphans.fold_into(sum);
    each_class_count(c, [&](std::size_t, const pool_class_stats& d) { accumulate(all, d); });
    for (const cache* tc = c.registry; tc != nullptr; tc = tc->next) {
      if (tc->given_back) continue;  // counted with the departed
      tc->tally(sum);
      spare += tc->spare_places();
    }
  }
  const std::size_t reserved = c.reserved.load(std::memory_order_relaxed);
  const std::uint64_t in = sum.bytes_in.load(std::memory_order_relaxed);
  const std::uint64_t out = sum.bytes_out.load(std::memory_order_relaxed);
  pool_stats s;
  s.hits = all.hits;
  s.misses = all.misses;
  s.retired = all.retired;
  s.dropped = all.dropped_at_bound + all.dropped_over_ceiling + all.dropped_off;
  s.retained = reserved - std::min(spare, reserved);  // in [0, reserved], and reserved <= bound
  s.retained_bytes = in > out ? static_cast<std::size_t>(in - out) : 0;
  return s;
}

std::vector<pool_class_stats> pool::class_stats() const {
  core& c = *core_;
  catch_up_own(c);
  std::vector<pool_class_stats> rows(c.classes.count() + 1);
  {
    std::lock_guard lock(c.admin_mutex);
    each_class_count(c, [&](std::size_t row, const pool_class_stats& d) { accumulate(rows[row], d); });
  }
  for (std::size_t row = 0; row < rows.size(); ++row) {
    pool_class_stats& r = rows[row];
    r.capacity = row < c.classes.count() ? c.class_size[row] : SIZE_MAX;
    // Counts read one by one, while calls run, may show more out than in for a moment.
    const std::uint64_t out = r.hits + r.trimmed + r.decayed;
    r.retained = r.retired > out ? static_cast<std::size_t>(r.retired - out) : 0;
  }
  return rows;
}

}  // namespace sluice
