// Where threads and async waits that wait for a gate are kept: a fixed table of parking spots,
// each a mutex and queues of waiters, shared by every gate whose address hashes to it (the
// parking lot of WebKit's WTF and of Rust's parking_lot). A gate's state stays one atomic word;
// only a call that must wait touches a spot, and a gate that wakes its waiters finds its own in
// the spot's queues, by its address, never another live gate's (a late wake-up of a gate
// destroyed may find a new gate made at its address, and wake its waiters for nothing). Spots
// are never freed.
#pragma once

#include <thread>

#include "async_queue.hpp"
#include "sluice/detail/atomic.hpp"

namespace sluice::detail {

struct parking_spot {
  detail::mutex mutex;
  // The asynchronous waiters of the gates on this spot, a queue per gate (docs/asio.md); guarded
  // by mutex.
  async_queues queues;
  // The threads asleep in a gate's wait, a queue per gate, each with a condition variable of its
  // own (lib/gate.cpp, thread_sleeper), so that a wake-up reaches as many as the room admits,
  // not every thread of the spot; guarded by mutex.
  async_queues sleepers;
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
