// What sluice::gate's inline calls read and write: the layout of the gate's word, and the calling
// thread's tally of its try_admits. Not part of sluice's API. Code that calls a gate inlines
// these, so it must be built against the headers of the libsluice it runs with (the library's
// soname carries its minor version for that reason).
#pragma once

#include <atomic>
#include <cstdint>

namespace sluice::detail {

// The word: in_flight in bits 0-30, the waiting mark in bit 31 (a thread or an async waiter may be
// waiting), the cap in bits 32-62 (0 once closed), and the queue mark in bit 63 (async waiters of
// the gate are queued, so try_admit refuses: they go first, docs/asio.md, Fairness).
namespace gate_word {
inline constexpr int cap_shift = 32;
inline constexpr std::uint64_t waiting_bit = std::uint64_t{1} << 31;
inline constexpr std::uint64_t count_mask = waiting_bit - 1;
inline constexpr std::uint64_t queue_bit = std::uint64_t{1} << 63;
inline constexpr std::uint64_t cap_bits = std::uint64_t{count_mask} << cap_shift;

constexpr std::uint64_t pack(std::int64_t cap, std::uint64_t count) noexcept {
  return static_cast<std::uint64_t>(cap) << cap_shift | count;
}
constexpr std::int64_t count_of(std::uint64_t word) noexcept { return static_cast<std::int64_t>(word & count_mask); }
constexpr std::int64_t cap_of(std::uint64_t word) noexcept {
  return static_cast<std::int64_t>((word & ~queue_bit) >> cap_shift);
}
// What try_admit admits below: the cap, or, with the queue mark set, a negative number. The
// arithmetic shift carries the mark into the sign: the same one instruction as cap_of's shift.
constexpr std::int64_t admit_limit(std::uint64_t word) noexcept { return static_cast<std::int64_t>(word) >> cap_shift; }
// A closed gate's cap field is 0, below every cap that set_cap, adjust and the constructor make.
constexpr bool closed(std::uint64_t word) noexcept { return (word & cap_bits) == 0; }
}  // namespace gate_word

// ---- the tallies: a thread's counts of its try_admits, per gate (docs/gate.md, STATISTICS) ----
//
// A try_admit's outcome is counted on the calling thread, in a counter that only that thread
// writes (a relaxed load and store, no read-modify-write, on memory no other thread writes but
// a gate's destructor zeroing it), at the gate's index in the thread's array of tallies; stats()
// sums every thread's counter for the gate (lib/tallies.cpp). The array grows, in the library,
// when a thread first counts for a gate past its end; a thread that has no array (it is exiting,
// or no memory could be had) counts on the gate's own atomics instead.
enum class tally : unsigned { admitted, refused, closed };
inline constexpr unsigned tally_kinds = 3;

// The calling thread's array: its tally of kind k for the gate whose first counter is `first`
// (its index times tally_kinds) is counts[first + k], for first below `counters`.
struct tally_view {
  std::atomic<std::uint64_t>* counts = nullptr;
  std::uint32_t counters = 0;
};
// Initial-exec, as sluice::pool's front (sluice/detail/this_thread_front.hpp says what that means
// for dlopen).
extern constinit thread_local tally_view tls_tally __attribute__((tls_model("initial-exec")));

// Counts k for the gate whose first counter is `first` on this thread, if its array reaches that
// far; false if not (the gate then grows the array, or counts on itself). The variable is named
// itself, never through a reference (sluice/detail/this_thread_front.hpp says why).
[[gnu::always_inline]] inline bool tally_here(std::uint32_t first, tally k) noexcept {
  if (first >= tls_tally.counters) return false;
  std::atomic<std::uint64_t>& c = tls_tally.counts[first + static_cast<unsigned>(k)];
  c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);  // one writer: this thread
  return true;
}

}  // namespace sluice::detail
