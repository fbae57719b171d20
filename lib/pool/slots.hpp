// The lock-free layer under sluice::pool: a table of slots and Treiber stacks of slot indices.
//
// A slot carries up to slot_room retained buffers of one class, side by side, and a link: a
// cache's batch travels in one slot, so that the thread that takes it reads one slot's three
// cache lines, not a chain of links written on another core (docs/many_threads.md, batches).
// Slots are made in chunks and never freed while the pool lives, so a thread holding a stale
// index can always read the slot's link safely (the link is atomic; the buffers and their count
// are read only by the thread that popped the slot). Each stack's head packs a 32-bit slot index
// and a 32-bit tag into one 64-bit word, and every successful CAS bumps the tag, which defeats
// ABA: a pop that read head (A, t) and A's link B cannot succeed after A was popped and pushed
// back, because the head is then (A, t' != t).
// The tag wraps after 2^32 modifications of one head; ABA then needs a thread to be suspended
// between its read and its CAS for a multiple of exactly that many, the residual risk of IBM's
// original (docs/pool.md, PROGRESS, states it).
//
// The algorithm is R. K. Treiber's stack (Systems Programming: Coping with Parallelism, IBM
// RJ 5118, 1986) with the tagged head of the IBM System/370 manual, extended to move chains:
// push_chain links a chain below the head with one CAS, and pop_chain detaches up to n slots with
// one CAS (valid because a successful CAS proves that no slot left the stack since the head was
// read, so the links walked in between were the stack's own).
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <new>
#include <utility>

#include "sluice/detail/atomic.hpp"

namespace sluice::detail {

using slot_index = std::uint32_t;
inline constexpr slot_index no_slot = 0xFFFF'FFFF;

// The most buffers a slot carries: a magazine's largest batch (sluice/detail/pool_cache.hpp).
inline constexpr std::uint32_t slot_room = 16;

struct slot {
  detail::atomic<slot_index> next{no_slot};  // the link; read by stale poppers, hence atomic
  // Read and written only by the slot's owner: items[0, count).
  detail::plain<std::uint32_t> count = 0;
  // The decay step in which its buffers were last kept (pool/decay.hpp); its owner's too.
  detail::plain<std::uint32_t> step = 0;
  detail::plain<std::byte*> items[slot_room];
};

// A chain of slots detached from or bound for a stack: first..last linked through `next`.
struct chain {
  slot_index first = no_slot;
  slot_index last = no_slot;
  std::uint32_t count = 0;
  // From a pop: the tag of the head it left (an empty pop_all: of the head it read), so that
  // two pops of one stack can tell which came first (tag_after).
  std::uint32_t tag = 0;
};

// Whether a head tagged `a` came after one tagged `b` on the same stack; assumes fewer than 2^31
// changes of the head between the two (the tags wrap).
inline bool tag_after(std::uint32_t a, std::uint32_t b) noexcept {
  return static_cast<std::int32_t>(a - b) > 0;
}

// Chunk k holds the 64 << k slots from index (64 << k) - 64; 27 chunks cover every index below
// no_slot (the last one stops short of it).
//
// Growth is lock-free: a thread claims fresh indices by advancing `fresh_` with a CAS, after
// making sure the chunk under them exists; a thread that finds the chunk missing allocates it
// and installs it with one CAS, and one that loses that race frees its copy and uses the
// winner's. No thread ever waits for another to finish an allocation.
class slot_table {
 public:
  slot_table() = default;
  slot_table(const slot_table&) = delete;
  slot_table& operator=(const slot_table&) = delete;
  ~slot_table() { release(); }

  // The slot of an index that came from a stack or a chain this thread owns.
  slot& operator[](slot_index i) noexcept { return *find(i); }

  // The slot of an index read from a link that may be stale: null when its chunk is not visible
  // to this thread yet (the index then cannot be on the stack the caller is walking).
  slot* find(slot_index i) noexcept {
    const auto [chunk, offset] = locate(i);
    // (C2) acquire; synchronizes-with (C1). A holder of a genuine index always sees the chunk,
    // since the index reached it through stack CASes that the claimer's push released.
    slot* base = chunks_[chunk].load(std::memory_order_acquire);
    return base == nullptr ? nullptr : base + offset;
  }

  // Up to n (>= 1) slots never used before, as a chain linked first to last; an empty chain
  // when no memory can be had or every index is taken. Lock-free (see above).
  chain claim(std::uint32_t n) noexcept {
    // Relaxed: `fresh_` only hands out numbers; the slots themselves are reached through (C2).
    slot_index first = fresh_.load(std::memory_order_relaxed);
    for (;;) {
      if (first == no_slot) return {};
      const std::size_t k = locate(first).first;
      if (!ensure_chunk(k)) return {};
      const auto count = static_cast<std::uint32_t>(std::min<std::uint64_t>(n, chunk_end(k) - first));
      if (fresh_.compare_exchange_weak(first, first + count, std::memory_order_relaxed)) {
        const chain c{first, first + count - 1, count};
        for (slot_index i = c.first; i != c.last; ++i) (*this)[i].next.store(i + 1, std::memory_order_relaxed);
        return c;
      }
    }
  }

  // Frees every chunk. Only when no thread can use an index any more.
  void release() noexcept {
    for (auto& c : chunks_) delete[] c.exchange(nullptr, std::memory_order_relaxed);
    fresh_.store(0, std::memory_order_relaxed);
  }

 private:
  static std::pair<std::size_t, std::size_t> locate(slot_index i) noexcept {
    const std::uint64_t v = std::uint64_t{i} + 64;
    const std::size_t chunk = static_cast<std::size_t>(std::bit_width(v)) - 7;
    return {chunk, static_cast<std::size_t>(v - (std::uint64_t{64} << chunk))};
  }
  static std::uint64_t chunk_begin(std::size_t k) noexcept { return (std::uint64_t{64} << k) - 64; }
  static std::uint64_t chunk_end(std::size_t k) noexcept {
    return std::min<std::uint64_t>(chunk_begin(k + 1), no_slot);
  }

  // Whether chunk k exists, made now if it is missing; false when no memory can be had.
  //
  // Relaxed loads: this only tests for null, and the claimer reaches the chunk's slots through
  // find()'s (C2), which reads the one non-null value (C1) wrote (coherence: no older one after
  // this load saw it) and so synchronizes with it. The Relacy checks found these acquires
  // redundant (test/relacy/stack_check.cpp).
  bool ensure_chunk(std::size_t k) noexcept {
    slot* base = chunks_[k].load(std::memory_order_relaxed);
    if (base != nullptr) return true;
    slot* mine = new (std::nothrow) slot[chunk_end(k) - chunk_begin(k)];
    if (mine == nullptr) return false;
    // (C1) release: the chunk's constructed slots are visible to whoever finds it through (C2).
    if (chunks_[k].compare_exchange_strong(base, mine, std::memory_order_release, std::memory_order_relaxed)) {
      return true;
    }
    delete[] mine;  // another thread made it first
    return true;
  }

  std::array<detail::atomic<slot*>, 27> chunks_{};
  detail::atomic<slot_index> fresh_{0};  // every index below it has been claimed
};

class alignas(64) tagged_stack {
 public:
  // Links c (count >= 1) on top. (S1) The CAS is a release, so c's buffers and links are visible
  // to whoever pops them.
  void push_chain(slot_table& slots, const chain& c) noexcept {
    std::uint64_t head = head_.load(std::memory_order_relaxed);
    do {
      slots[c.last].next.store(index_of(head), std::memory_order_relaxed);
    } while (!head_.compare_exchange_weak(head, pack(c.first, tag_of(head) + 1),
                                          std::memory_order_release, std::memory_order_relaxed));
  }

  // Detaches up to n (>= 1) slots from the top; an empty chain when the stack is empty.
  chain pop_chain(slot_table& slots, std::uint32_t n) noexcept {
    // (S2) acquire; synchronizes-with every (S1) before it: all writes to the head are RMWs, so
    // the value read continues the release sequence of each earlier push.
    std::uint64_t head = head_.load(std::memory_order_acquire);
    for (;;) {
      chain c{index_of(head), index_of(head), 0};
      if (c.first == no_slot) return {};
      slot_index after = no_slot;
      bool stale = false;
      for (c.count = 1;; ++c.count) {
        slot* s = slots.find(c.last);
        if (s == nullptr) {  // a stale link into a chunk not yet visible here: the head moved
          stale = true;
          break;
        }
        after = s->next.load(std::memory_order_relaxed);  // ordered by (S2); checked by the CAS
        if (c.count == n || after == no_slot) break;
        c.last = after;
      }
      if (!stale && head_.compare_exchange_weak(head, pack(after, tag_of(head) + 1),
                                                std::memory_order_acquire,    // (S2)
                                                std::memory_order_acquire)) { // (S2), for the retry
        c.tag = tag_of(head) + 1;
        return c;
      }
      if (stale) head = head_.load(std::memory_order_acquire);  // (S2)
    }
  }

  // Detaches everything. (S3) acquire, like (S2): it synchronizes-with every push before it.
  chain pop_all(slot_table& slots) noexcept {
    std::uint64_t head = head_.load(std::memory_order_relaxed);
    while (index_of(head) != no_slot &&
           !head_.compare_exchange_weak(head, pack(no_slot, tag_of(head) + 1), std::memory_order_acquire,
                                        std::memory_order_relaxed)) {
    }
    chain c{index_of(head), index_of(head), 0, tag_of(head)};
    if (c.first == no_slot) return c;
    ++c.tag;
    for (c.count = 1;; ++c.count) {
      const slot_index next = slots[c.last].next.load(std::memory_order_relaxed);
      if (next == no_slot) return c;
      c.last = next;
    }
  }

  // How many buffers the stack's slots carry, walked without a CAS: only where no other thread
  // can touch it (a forked child, whose parent's other threads are gone).
  std::size_t count_alone(slot_table& slots) noexcept {
    std::size_t n = 0;
    for (slot_index i = index_of(head_.load(std::memory_order_relaxed)); i != no_slot;
         i = slots[i].next.load(std::memory_order_relaxed)) {
      n += slots[i].count;
    }
    return n;
  }

  // A hint: true when the stack looked empty. Relaxed: a racing push may be missed, as a take
  // that ran just before it would have missed it. Lets a miss skip the work before a pop.
  bool looks_empty() const noexcept {
    return index_of(head_.load(std::memory_order_relaxed)) == no_slot;
  }

 private:
  static constexpr std::uint64_t pack(slot_index i, std::uint32_t tag) noexcept {
    return std::uint64_t{tag} << 32 | i;
  }
  static constexpr slot_index index_of(std::uint64_t head) noexcept { return static_cast<slot_index>(head); }
  static constexpr std::uint32_t tag_of(std::uint64_t head) noexcept { return static_cast<std::uint32_t>(head >> 32); }

  detail::atomic<std::uint64_t> head_{pack(no_slot, 0)};
};

// ---- a thread's own list of free slots, and its moves to and from the free stack -----------
//
// Every `next` load and store below is relaxed: it touches a slot that this thread owns (on its
// own list, or popped from a stack), whose link only it writes; links on a shared stack are
// ordered by the stack's own CASes (S1, S2).

struct slot_list {
  slot_index first = no_slot;
  std::uint32_t count = 0;
};

// The first n (1 <= n <= list.count) slots of a list, as a chain (its last slot found by walking).
inline chain first_of(slot_table& slots, const slot_list& list, std::uint32_t n) noexcept {
  chain out{list.first, list.first, n};
  for (std::uint32_t j = 1; j < n; ++j) out.last = slots[out.last].next.load(std::memory_order_relaxed);
  return out;
}

// Puts a chain of slots on the list; when the list then holds more than 2 * batch, all but
// batch go to the free stack, so that no list grows past that.
inline void put_slots(slot_table& slots, slot_list& list, const chain& ch, tagged_stack& free_stack,
                      std::uint32_t batch) noexcept {
  slots[ch.last].next.store(list.first, std::memory_order_relaxed);
  list = {ch.first, list.count + ch.count};
  if (list.count > 2 * batch) {
    const chain excess = first_of(slots, list, list.count - batch);
    list = {slots[excess.last].next.load(std::memory_order_relaxed), batch};
    free_stack.push_chain(slots, excess);  // (S1)
  }
}

// One slot: from the list (null: the caller has none, and gets one slot alone), else from the
// free stack or fresh from the table, batch at a time, the rest kept on the list. no_slot when
// none can be had (no memory, or all 2^32 - 1 made).
inline slot_index get_slot(slot_table& slots, slot_list* list, tagged_stack& free_stack,
                           std::uint32_t batch) noexcept {
  if (list != nullptr && list->count > 0) {
    const slot_index i = list->first;
    *list = {slots[i].next.load(std::memory_order_relaxed), list->count - 1};
    return i;
  }
  const std::uint32_t want = list != nullptr ? batch : 1;
  chain got = free_stack.pop_chain(slots, want);  // (S2)
  if (got.count == 0) got = slots.claim(want);
  if (got.count == 0) return no_slot;
  if (got.count > 1) *list = {slots[got.first].next.load(std::memory_order_relaxed), got.count - 1};
  return got.first;
}

}  // namespace sluice::detail
