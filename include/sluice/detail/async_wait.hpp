// sluice/detail/async_wait.hpp: the queue of asynchronous waiters that <sluice/asio.hpp> builds
// on. Not part of sluice's API: a waiter is a node that the caller owns and that the gate's
// parking spot links while it waits (docs/asio.md).
#pragma once

namespace sluice {
class gate;
class mutex_gate;
}  // namespace sluice

namespace sluice::detail {

// One asynchronous wait for an admission. The caller fills gate, handle and finish, and keeps the
// node alive until finish is called or async_withdraw returns true.
struct async_waiter {
  // Called exactly once for a node that left the queue through a wake-up (admitted: the
  // admission is counted and now belongs to the waiter) or through async_cancel (not admitted:
  // nothing counted). Called with no lock held, on the thread of the call that took the node.
  void (*finish)(async_waiter*, bool admitted) noexcept = nullptr;
  const void* gate = nullptr;  // the gate waited on
  // Set by async_wait: tells the gate, under the spot's mutex, that the node left the queue
  // unadmitted (cancelled or withdrawn); last: no other waiter of the gate is queued.
  void (*left_unadmitted)(const void* gate, bool last) noexcept = nullptr;
  // Where a canceller keeps this node's address (null: no cancellation). Set to the node when it
  // is queued and to null, under the spot's mutex, when it leaves the queue in any way: the
  // canceller then finds it in one step, and never after it left. The canceller must outlive
  // the wait (Asio's rule for a cancellation slot's handler).
  async_waiter** handle = nullptr;
  // Guarded by the spot's mutex.
  async_waiter* prev = nullptr;
  async_waiter* next = nullptr;
  bool queued = false;
};

// Queues w at the tail of its gate's waiters, then admits waiters from the head while there is
// room, w included (their finish runs before this returns, after the spot is unlocked).
void async_wait(gate& g, async_waiter& w) noexcept;
void async_wait(mutex_gate& g, async_waiter& w) noexcept;

// The waiter whose handle is `handle`, taken out of the queue, or null when it has already left.
// `gate` is its gate's address: only that gate's parking spot is touched, never the gate.
async_waiter* async_cancel(const void* gate, async_waiter* const* handle) noexcept;

// Takes w out of the queue if it is still there (true), without calling finish.
bool async_withdraw(async_waiter& w) noexcept;

}  // namespace sluice::detail
