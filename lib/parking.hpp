// Where threads that wait for a gate sleep: a fixed table of parking spots, each a mutex and a
// condition variable, shared by every gate whose address hashes to it (the parking lot of
// WebKit's WTF and of Rust's parking_lot, in its simplest form). A gate stays one atomic word;
// only a thread that must wait touches a spot, and a gate that wakes its waiters wakes every
// thread parked on the spot, which then checks its own gate again. Spots are never freed.
#pragma once

#include <thread>

#include "async_queue.hpp"
#include "sluice/detail/atomic.hpp"

namespace sluice::detail {

struct parking_spot {
  detail::mutex mutex;
  detail::condition_variable wake;
  // The asynchronous waiters of the gates on this spot, a queue per gate (docs/asio.md); guarded
  // by mutex.
  async_queues queues;
  // Hand-overs in progress: waiters taken out of the queues (under mutex) whose hand_over has not
  // returned yet. A fork waits, holding every spot's mutex, until each spot's count is zero, so
  // that a child never inherits a waiter that is in neither a queue nor its context's hands
  // (docs/asio.md, Fork). Raised under mutex (relaxed: the mutex orders it before the fork's
  // read); lowered with release, after the hand-overs, for the fork's acquire.
  detail::atomic<long> handing_over{0};
};

// Under the spot's mutex, which keeps new ones from beginning: waits until the hand-overs in
// progress have ended (a fork's prepare).
inline void await_hand_overs(const parking_spot& spot) noexcept {
  // (H3) acquire: pairs with the release that ends a hand-over (H2 in gate.cpp), so that what the
  // hand-over did (posted, queued, freed) happens-before the fork, and the child inherits it whole
  while (spot.handing_over.load(std::memory_order_acquire) != 0) std::this_thread::yield();
}

// The spot of the object at `key`. Never fails; the first call makes the table.
parking_spot& parking_for(const void* key) noexcept;

}  // namespace sluice::detail
