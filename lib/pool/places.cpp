// The bound, and the places of it that a cache holds (see pool/core.hpp).
//
// Every buffer the pool keeps holds one place of the bound, taken from the shared counter
// (`reserved`) before the buffer is kept and given back after it left. A cache takes places a
// batch (P, place_batch) at a time and holds at most places_max of them (C = 2 * P, up to 2 * C once
// grown, grow()): in its
// magazines, with a buffer or spare (a take that hits leaves its place there, and a retire that
// hits uses one), or loose, for whichever class needs one next. So a cache touches the shared
// counter once a batch, and what all caches hold is bounded by the number of caches there may
// be (pool_core::thread_caches_max plus pool_core::cpus.count), not by the number of threads.
#include <algorithm>
#include <cassert>

#include "core.hpp"

namespace sluice::detail {

using core = pool_core;

// All of `reserved` is relaxed (see core.hpp): a place is given back only after the buffer
// holding it was taken, and that order is carried by the stacks' release/acquire pairs.
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

void set_owned(cache& tc, magazine& m, std::uint32_t owned) noexcept {
  tc.places = tc.places - static_cast<std::uint32_t>(m.owned.load(std::memory_order_relaxed)) + owned;
  m.owned.store(owned, std::memory_order_relaxed);
  assert(m.count.load(std::memory_order_relaxed) <= owned && owned <= m.limit);
  assert(tc.places + tc.loose.load(std::memory_order_relaxed) <= tc.places_max);
}

void set_loose(cache& tc, std::uint32_t loose) noexcept {
  tc.loose.store(loose, std::memory_order_relaxed);
  assert(tc.places + loose <= tc.places_max);
}

namespace {

std::uint32_t loose_of(const cache& tc) noexcept { return tc.loose.load(std::memory_order_relaxed); }

std::uint32_t spare_in(const magazine& m) noexcept {
  return static_cast<std::uint32_t>(m.owned.load(std::memory_order_relaxed) - m.count.load(std::memory_order_relaxed));
}

// Moves all spare places of the cache's magazines (but `except`'s) to its loose ones.
void drop_all_spare(caller& k, const magazine* except) noexcept {
  k.tc->for_each_magazine([&](std::size_t, magazine& m) {
    if (&m != except) drop_spare(k, m);
  });
}

// Loose places for this cache, up to `want` (at least one if it can): those it has; else a
// batch from the shared counter, within the cache's limit; else, at that limit, half the spare
// places of the magazine that has most (so that a class in use now takes them over from one
// used before, a few at a time, and classes used in turn do not strip each other); and when the
// bound is spent, every spare place it has, or else what CPU caches do not need. Answers how many
// it has loose now.
std::uint32_t gather_loose(caller& k, const magazine* except, std::uint32_t want) noexcept {
  cache& tc = *k.tc;
  if (loose_of(tc) > 0) return loose_of(tc);
  if (const std::uint32_t room = tc.places_max - tc.places; room > 0) {
    auto got = static_cast<std::uint32_t>(reserve(k.c, std::min(room, std::max(want, k.c.place_batch))));
    if (got == 0) {  // the bound is spent: this cache's own spare places, else the CPU caches'
      drop_all_spare(k, except);
      if (loose_of(tc) == 0) {
        // Again whatever the borrow answers: a CPU cache brought up to a trim while it lent
        // gave its places back to the counter without lending them.
        borrow_from_cpu_caches(k, want);
        got = static_cast<std::uint32_t>(reserve(k.c, std::min(room, want)));
      }
    }
    set_loose(tc, loose_of(tc) + got);
    return loose_of(tc);
  }
  magazine* richest = nullptr;
  std::uint32_t most = 0;
  tc.for_each_magazine([&](std::size_t, magazine& m) {
    if (&m != except && spare_in(m) > most) {
      most = spare_in(m);
      richest = &m;
    }
  });
  if (richest == nullptr) return 0;
  const std::uint32_t moved = (most + 1) / 2;
  set_owned(tc, *richest, static_cast<std::uint32_t>(richest->owned.load(std::memory_order_relaxed)) - moved);
  set_loose(tc, moved);
  return moved;
}

// When the cache's places all hold buffers and it is a seated thread's: place_batch more of them,
// up to cache_places_max, while half the thread caches' quarter has places no seat claims, so that a
// working set of many classes (a pmr container's strings) fits rather than cycling its batches
// through the shared stacks. A trim takes the growth back (shrink()).
bool grow(caller& k) noexcept {
  cache& tc = *k.tc;
  if (tc.owner != cache::kind::thread || tc.places_max >= k.c.cache_places_max) return false;
  // Room left means the bound is spent, not the cache full: growing would hold seats for nothing.
  if (tc.places + tc.loose.load(std::memory_order_relaxed) < tc.places_max) return false;
  // Growth stops at half the quarter, so that half the seats stay for threads yet to come.
  if (claim_seat_places(k.c, k.c.place_batch, k.c.seat_places_max / 2) == 0) return false;
  tc.places_max += k.c.place_batch;
  return true;
}

// When the cache's places all hold buffers: the oldest batch of the fullest other magazine moves
// to the shared stack, so that a class in use now can displace one used before. False when no
// other magazine holds anything, or no slot could be had.
bool displace(caller& k, const magazine& except) noexcept {
  std::size_t fullest = 0;
  magazine* most = nullptr;
  k.tc->for_each_magazine([&](std::size_t cls, magazine& m) {
    if (&m != &except && m.count.load(std::memory_order_relaxed) >
                             (most != nullptr ? most->count.load(std::memory_order_relaxed) : 0)) {
      most = &m;
      fullest = cls;
    }
  });
  if (most == nullptr) return false;
  const auto n = static_cast<std::uint32_t>(std::min<std::uint64_t>(most->count.load(std::memory_order_relaxed), batch_of(*most)));
  if (flush(k, fullest, *most, n) == 0) return false;
  drop_spare(k, *most);
  return true;
}

}  // namespace

void give_place(caller& k) noexcept {
  if (k.caches() && k.tc->places + loose_of(*k.tc) < k.tc->places_max) return set_loose(*k.tc, loose_of(*k.tc) + 1);
  unreserve(k.c, 1);
}

void drop_spare(caller& k, magazine& m) noexcept {
  const std::uint32_t spare = spare_in(m);
  set_owned(*k.tc, m, static_cast<std::uint32_t>(m.count.load(std::memory_order_relaxed)));
  set_loose(*k.tc, loose_of(*k.tc) + spare);
}

// So the bound drops a retire only for places that other threads' caches hold: a thread alone
// sees the sequential pool.
bool take_place(caller& k) noexcept {
  if (reserve(k.c, 1) == 1) return true;
  if (k.caches()) {  // the bound is spent: this cache's own spare places, else the CPU caches'
    drop_all_spare(k, nullptr);
    if (const std::uint32_t loose = loose_of(*k.tc); loose > 0) {
      set_loose(*k.tc, loose - 1);
      return true;
    }
  }
  borrow_from_cpu_caches(k, 1);  // then the counter again, whatever it answers (as gather_loose)
  return reserve(k.c, 1) == 1;
}

// Up to place_batch, within its limit, gathered as gather_loose() does; a full magazine first
// moves its oldest batch out, and when every place of the cache holds a buffer another class's
// batch makes way. A magazine that only retires (no take since the last retire that found no
// spare place in it) moves all it holds out once it holds a batch, and takes places up to a
// batch only: its thread will not take what it keeps, which another thread's take would then
// allocate afresh (a frame retired on the thread it was handed to). False when the bound (or a
// slot for a flush) cannot be had.
bool add_places(caller& k, std::size_t cls, magazine& m) noexcept {
  // Relaxed: the magazine's user's own writes (a CPU cache's holders', ordered by its lock).
  const auto takes = static_cast<std::uint32_t>(m.takes.load(std::memory_order_relaxed));
  const bool retiring_only = takes == m.takes_at_full;
  m.takes_at_full = takes;
  const std::uint32_t batch = batch_of(m);
  if (const auto count = static_cast<std::uint32_t>(m.count.load(std::memory_order_relaxed));
      retiring_only && count >= batch) {
    if (flush(k, cls, m, count) == 0) return false;
  } else if (m.owned.load(std::memory_order_relaxed) == m.limit && flush(k, cls, m, batch) == 0) {
    return false;
  }
  const auto owned = static_cast<std::uint32_t>(m.owned.load(std::memory_order_relaxed));
  // At least one: owned is below the limit here (a full magazine at it flushed), and below the
  // batch wherever that caps it.
  const std::uint32_t want =
      std::min({k.c.place_batch, m.limit - owned, retiring_only && owned < batch ? batch - owned : m.limit});
  assert(want > 0);
  std::uint32_t loose = gather_loose(k, &m, want);
  if (loose == 0 && (grow(k) || displace(k, m))) loose = gather_loose(k, &m, want);
  if (loose == 0) return false;
  const std::uint32_t got = std::min(want, loose);
  set_loose(*k.tc, loose - got);
  set_owned(*k.tc, m, owned + got);
  return true;
}

std::uint32_t claim_seat_places(core& c, std::uint32_t n, std::size_t up_to) noexcept {
  std::size_t used = c.seat_places.load(std::memory_order_relaxed);
  do {
    if (used + n > up_to) return 0;
  } while (!c.seat_places.compare_exchange_weak(used, used + n, std::memory_order_relaxed));
  return n;
}

void shrink(cache& tc) noexcept {
  assert(tc.places + tc.loose.load(std::memory_order_relaxed) == 0);
  if (tc.places_max <= tc.core.cache_places) return;
  tc.core.seat_places.fetch_sub(tc.places_max - tc.core.cache_places, std::memory_order_relaxed);
  tc.places_max = tc.core.cache_places;
}

std::uint32_t shed_places(caller& k, std::uint32_t n) noexcept {
  drop_all_spare(k, nullptr);
  const std::uint32_t shed = std::min(n, loose_of(*k.tc));
  set_loose(*k.tc, loose_of(*k.tc) - shed);
  unreserve(k.c, shed);
  return shed;
}

}  // namespace sluice::detail
