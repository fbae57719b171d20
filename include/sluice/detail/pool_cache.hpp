// What sluice::pool's inline fast paths read: a thread's cache of one pool, as far as a take or
// a retire that hits it needs to see. Not part of sluice's API. Code that calls a pool inlines
// these layouts, so it must be built against the headers of the libsluice it runs with (the
// library's soname carries its minor version for that reason).
//
// A thread's front (thread_front, one per thread, in static TLS) names the pool it last called
// and that pool's magazines as this thread's cache holds them: `key` is the pool's state word as
// the thread last brought its cache up to date with it, and `view` the magazine to use per size
// class. Every pool's state word is unique to that pool and that moment (the library draws its
// stamps so), so one compare, key == the pool's state word, stands for "this thread's cache, of
// this pool, up to date, the pool enabled"; any other answer sends the call to the library's
// general path, which brings the cache up to date and points the front at it again. Only a
// thread whose cache has a seat has its front pointed at it (docs/pool.md, THREAD CACHES): the
// others' calls all go to the general path, and to the cache of the CPU they run on.
//
// A magazine holds one class's cached buffers, items[0, count), and owns `owned` places of the
// pool's bound, one for each buffer it holds and the rest spare: a take that hits leaves its
// place with the magazine, and a retire that hits uses a spare one, so neither touches anything
// shared. Where the general path must see a call (a class whose off-class shelf holds buffers, a
// class the pool cuts at its ceiling, one it has never cached), the view points at `absent`, a
// magazine that owns nothing and is never written: its count of 0 fails a take and its count not
// below its places fails a retire.
#pragma once

#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>

#include "sluice/detail/atomic.hpp"
#include "sluice/detail/this_thread_front.hpp"

namespace sluice::detail {

inline constexpr std::size_t smallest_class_size = 16;

// The pools' size classes: four per power of two from 16 bytes (16, 20, 24, 28, 32, 40, ...). The
// smallest class whose nominal size is at least n: for 2^b < n <= 2^(b+1) the four classes are
// 2^b + j * 2^(b-2), j = 1..4, and (n - 1) >> (b - 2) is 3 + j. Any std::size_t has a class.
constexpr std::size_t class_of(std::size_t n) noexcept {
  if (n <= smallest_class_size) return 0;
  // b >= 4, the index of n - 1's top bit (63 ^ countl_zero is one bsr on x86-64)
  const auto b = static_cast<std::size_t>(63 ^ std::countl_zero(std::uint64_t{n - 1}));
  return 4 * b - 19 + ((n - 1) >> (b - 2));
}
static_assert(sizeof(std::size_t) == 8, "class_of is written for 64-bit sizes");
inline constexpr std::size_t class_count_max = class_of(SIZE_MAX) + 1;  // a view's length

// Fields a thread other than the owner reads (stats(), under the pool's admin mutex) are atomics
// with one writer each.
struct magazine {
  static constexpr std::uint32_t room = 32;
  atomic<std::uint64_t> count{0};   // buffers held: items[0, count)
  atomic<std::uint64_t> owned{0};   // places of the bound held: count <= owned <= limit
  std::uint32_t limit = 0;          // most places (and buffers) it holds; <= room
  // The general path's alone: takes' low bits when a retire last found no spare place, so that
  // the next such retire knows whether any take came between (lib/pool/places.cpp, add_places;
  // exactly 2^32 takes between two look like none: a flush of all it holds, nothing lost).
  std::uint32_t takes_at_full = 0;
  std::size_t capacity = 0;         // its class's size
  // Buffers ever taken from it and kept in it: the statistics' hits and retires, each one
  // field with one writer, so that stats() never sees one half of a call (bytes follow from
  // the capacity).
  atomic<std::uint64_t> takes{0};
  atomic<std::uint64_t> retires{0};
  std::byte* items[room];
};

// A take that hits: the newest of the n (> 0) buffers magazine m holds; its place stays there,
// spare. A retire that hits: data kept in m, which holds n buffers and owns more places than
// that. Only the magazine's user writes it (the owning thread, or a CPU cache's holder), so these
// are plain loads and stores, relaxed (sluice/pool.hpp's inline paths and the library's general
// ones share them).
//
// The signal fences cost no instruction: they keep the compiler from moving the caller's own
// accesses to the buffer across the count's store, for a decay signal's handler that may
// interrupt this thread anywhere and give back the pages of the buffers items[0, count) holds
// (lib/pool/sleepers.cpp): a buffer below the count it reads is one the caller has not yet
// touched after its take, or no longer touches after its retire.
[[gnu::always_inline]] inline std::byte* pop_from(magazine& m, std::uint64_t n) noexcept {
  m.count.store(n - 1, std::memory_order_relaxed);
  std::atomic_signal_fence(std::memory_order_seq_cst);  // the caller's use of the buffer comes after
  m.takes.store(m.takes.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  return m.items[n - 1];
}
[[gnu::always_inline]] inline void push_onto(magazine& m, std::uint64_t n, std::byte* data) noexcept {
  m.items[n] = data;
  std::atomic_signal_fence(std::memory_order_seq_cst);  // the caller's use of data, and items[n], come before
  m.count.store(n + 1, std::memory_order_relaxed);
  m.retires.store(m.retires.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

struct thread_front {
  std::uint64_t key = 0;              // no pool's state word is 0
  magazine* const* view = nullptr;    // class_count_max magazines
  // The magazine the last retire that found one through the view kept its buffer in, and that
  // buffer's capacity, so that a retire of the same capacity (frames are mostly of one size)
  // needs no class computation. Set with the view to `absent` and 0.
  std::size_t recent_capacity = 0;
  magazine* recent = nullptr;
};

// This thread's front. The library uses it through this function; the inline paths below name
// the variable itself (SLUICE_DETAIL_FRONT, sluice/detail/this_thread_front.hpp).
inline thread_front& this_thread_front() noexcept { return SLUICE_DETAIL_FRONT; }

// Whether this thread's front is the cache of the pool whose state word is `state`, up to date.
// Then front_view(class_of(n)) is the magazine for a request or a capacity of n.
//
// (F) Relaxed: a trim, switch or off-class shelving that happens-before this call wrote the state
// word before it, so this load sees that write or a later one (write-read coherence) and the call
// goes to the general path, which frees or mends the cache; one that merely ran earlier on
// another thread reaches this one at a later call, as docs/pool.md's THREAD CACHES allows.
[[gnu::always_inline]] inline bool front_is_current(const atomic<std::uint64_t>& state) noexcept {
  return SLUICE_DETAIL_FRONT.key == state.load(std::memory_order_relaxed);
}

[[gnu::always_inline]] inline magazine* front_view(std::size_t cls) noexcept { return SLUICE_DETAIL_FRONT.view[cls]; }

// The magazine the last retire remembered, and the capacity of its buffers.
[[gnu::always_inline]] inline std::size_t front_recent_capacity() noexcept { return SLUICE_DETAIL_FRONT.recent_capacity; }
[[gnu::always_inline]] inline magazine* front_recent() noexcept { return SLUICE_DETAIL_FRONT.recent; }
[[gnu::always_inline]] inline void front_remember(std::size_t capacity, magazine* m) noexcept {
  SLUICE_DETAIL_FRONT.recent_capacity = capacity;
  SLUICE_DETAIL_FRONT.recent = m;
}

#undef SLUICE_DETAIL_FRONT

}  // namespace sluice::detail
