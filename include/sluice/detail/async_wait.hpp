// sluice/detail/async_wait.hpp: the queues of asynchronous waiters that <sluice/asio.hpp> and the
// Python module build on. Not part of sluice's API: a waiter is a node that the caller owns and
// that its gate's queue links while it waits (docs/asio.md).
#pragma once

#include <cstdint>

namespace sluice {
class gate;
class mutex_gate;
}  // namespace sluice

namespace sluice::detail {

struct async_waiter;

// What a queue needs of the gate a waiter waits on; set by async_wait.
struct async_gate_ops {
  // Under the spot's mutex: w left its gate's queue unadmitted (cancelled, withdrawn, or closed:
  // w.closed); last: no other waiter of the gate is queued.
  void (*left_unadmitted)(const async_waiter& w, bool last) noexcept;
  // Admits the gate's queued waiters while there is room, as the calls that make room do; touches
  // the gate only if a waiter of it is queued.
  void (*serve)(const void* gate) noexcept;
  // Under the spot's mutex, with a waiter of the gate queued (so that it is alive): whether the
  // gate is closed; serve then hands every waiter of it over, closed.
  bool (*closed)(const void* gate) noexcept;
};

// One asynchronous wait for an admission. The caller fills hand_over, discard, gate and handle,
// and keeps the node alive until hand_over returned true, discard was called, or async_withdraw
// returned true.
struct async_waiter {
  // Hands the outcome over, exactly once, for a node that left the queue through a grant
  // (admitted: the admission is counted and now belongs to the waiter), a cancellation or its
  // gate's destruction (not admitted: nothing counted). Called with no lock held, on the thread
  // that took the node. A fork waits until it returns (docs/asio.md, Fork), so it must neither
  // call a gate nor wait for anything: it posts, or queues, and returns. False when the outcome
  // cannot be delivered (the waiter's context is gone): discard is then called, after the fork's
  // wait has ended, to destroy what the node holds (an admission with it: `admitted`).
  bool (*hand_over)(async_waiter*, bool admitted) noexcept = nullptr;
  void (*discard)(async_waiter*, bool admitted) noexcept = nullptr;
  const void* gate = nullptr;  // the gate waited on
  std::int64_t units = 1;      // the weight waited for, in [1, gate_limit]
  const async_gate_ops* ops = nullptr;  // set by async_wait
  // Where a canceller keeps this node's address (null: no cancellation). Set to the node when it
  // is queued and to null, under the spot's mutex, when it leaves the queue in any way: the
  // canceller then finds it in one step, and never after it left. The canceller must outlive
  // the wait (Asio's rule for a cancellation slot's handler).
  async_waiter** handle = nullptr;
  // The queue's links, under the spot's mutex (lib/async_queue.hpp): the gate's FIFO, and, in its
  // head alone, its tail and its place in the spot's table of gates.
  async_waiter* prev = nullptr;
  async_waiter* next = nullptr;
  async_waiter* tail = nullptr;
  async_waiter* bucket_next = nullptr;
  async_waiter** bucket_link = nullptr;
  bool queued = false;
  // Set, under the spot's mutex, when its gate's close() takes it: not admitted because closed
  // (not cancelled, nor its gate destroyed).
  bool closed = false;
  // Set, under the spot's mutex, when a cancellation takes it because its deadline passed (Python's
  // admit_async(timeout=...)): the statistics count it timed out, not cancelled.
  bool timed_out = false;
};

// Queues w at the tail of its gate's waiters, then admits waiters from the head while there is
// room, w included (their hand_over runs before this returns, after the spot is unlocked).
void async_wait(gate& g, async_waiter& w) noexcept;
void async_wait(mutex_gate& g, async_waiter& w) noexcept;

// Cancels the waiter whose handle is `handle`: takes it out of the queue and hands it over
// unadmitted; false when it has already left. `gate` is its gate's address: only that gate's
// parking spot is touched, and the gate only if the waiter is still queued. timed_out: the
// cancellation is its wait's deadline (counted so in the gate's statistics).
bool async_cancel(const void* gate, async_waiter* const* handle, bool timed_out = false) noexcept;

// Takes w out of the queue if it is still there (true), without handing it over.
bool async_withdraw(async_waiter& w) noexcept;

// Admits w's gate's queued waiters while there is room, or hands them all over closed if the gate
// is closed (a forked child's io_context, whose wake-ups may have stayed in the parent:
// docs/gate.md, FORK). Touches the gate only if a waiter of it is queued.
inline void async_serve(const async_waiter& w) noexcept { w.ops->serve(w.gate); }

}  // namespace sluice::detail
