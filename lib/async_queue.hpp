// The async waiters of the gates that share a parking spot (docs/asio.md): one FIFO queue per
// gate, found by the gate's address in a hash table of the spot's own, so that what a gate's
// wake-up, grant or cancellation costs depends on its own waiters alone, never on another gate's
// that hash to the same spot. Guarded by the spot's mutex.
//
// The queue lives in its waiters (sluice/detail/async_wait.hpp): a gate's waiters are linked
// oldest first through prev and next, and the oldest, the head, also holds the tail and the
// gate's link in the table's bucket chain. When the head leaves, the next waiter takes its place
// in the chain. So queueing needs no memory but the table's, and the table's growth may fail
// without harm: its chains then grow longer.
#pragma once

#include <cstddef>

#include "sluice/detail/async_wait.hpp"

namespace sluice::detail {

class async_queues {
 public:
  async_queues() noexcept = default;
  ~async_queues();
  async_queues(const async_queues&) = delete;
  async_queues& operator=(const async_queues&) = delete;

  // The oldest queued waiter of gate, or null.
  async_waiter* head(const void* gate) const noexcept;
  // Queues w (whose gate is set) behind its gate's waiters.
  void push(async_waiter& w) noexcept;
  // Takes a queued w out; answers whether a waiter of its gate is still queued.
  bool remove(async_waiter& w) noexcept;
  // Whether no waiter is queued.
  bool empty() const noexcept { return gates_ == 0; }
  // Drops every waiter, touching none (a forked child's, whose threads are gone).
  void forget_all() noexcept;
  // Calls f(head) for each gate with waiters, in no order; f must not change the queues.
  template <class F>
  void for_each_head(F f) const {
    for (std::size_t i = 0; i < std::size_t{1} << bits_; ++i) {
      for (async_waiter* h = buckets_[i]; h != nullptr; h = h->bucket_next) f(*h);
    }
  }

 private:
  static constexpr unsigned inline_bits = 3;

  async_waiter** bucket(const void* gate) const noexcept;
  void chain(async_waiter& head, async_waiter** slot) noexcept;
  void resize(unsigned bits) noexcept;

  async_waiter* inline_[std::size_t{1} << inline_bits] = {};
  async_waiter** buckets_ = inline_;
  unsigned bits_ = inline_bits;
  std::size_t gates_ = 0;  // gates with waiters: heads in the table
};

}  // namespace sluice::detail
