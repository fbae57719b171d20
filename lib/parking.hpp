// Where threads that wait for a gate sleep: a fixed table of parking spots, each a mutex and a
// condition variable, shared by every gate whose address hashes to it (the parking lot of
// WebKit's WTF and of Rust's parking_lot, in its simplest form). A gate stays one atomic word;
// only a thread that must wait touches a spot, and a gate that wakes its waiters wakes every
// thread parked on the spot, which then checks its own gate again. Spots are never freed.
#pragma once

#include "sluice/detail/atomic.hpp"

namespace sluice::detail {

struct async_waiter;

struct parking_spot {
  detail::mutex mutex;
  detail::condition_variable wake;
  // The asynchronous waiters of the gates on this spot, oldest first (docs/asio.md); guarded by
  // mutex.
  async_waiter* async_head = nullptr;
  async_waiter* async_tail = nullptr;
};

// The spot of the object at `key`. Never fails; the first call makes the table.
parking_spot& parking_for(const void* key) noexcept;

}  // namespace sluice::detail
