// The threads' tallies of the gates' try_admits (sluice/detail/gate_word.hpp): where a gate's
// index comes from, how a thread's array grows to reach it, and how stats() sums them.
#pragma once

#include <cstdint>

#include "sluice/detail/gate_word.hpp"

namespace sluice::detail {

// A gate is known to the tallies by its first counter: its index times tally_kinds. no_tally is
// that of a gate that could not be given an index (no memory): no thread's array reaches it, so
// every tally of the gate is counted on the gate itself.
inline constexpr std::uint32_t no_tally = UINT32_MAX;

// A new gate's first counter (its tallies at zero in every thread's array), or no_tally.
std::uint32_t tally_take() noexcept;
// The gate is being destroyed: its tallies go back to zero everywhere, and its index is issued
// again.
void tally_give_back(std::uint32_t first) noexcept;
// Grows this thread's array until it reaches the gate's counters: false when it cannot (no_tally,
// the thread is past its thread_local destructors, no memory can be had, or another thread holds
// the registry's mutex: it never waits for it).
bool tally_reach(std::uint32_t first) noexcept;
// Every tally kind of the gate, summed over the threads that live and those gone.
void tally_sum(std::uint32_t first, std::uint64_t (&sums)[tally_kinds]) noexcept;

}  // namespace sluice::detail
