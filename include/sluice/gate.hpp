// sluice/gate.hpp: a non-blocking admission counter whose cap moves under memory pressure.
//
// CONTRACT
//
// A gate counts work in flight against a cap. Producers that must never wait record work with
// note_submitted(); producers that may decline ask try_admit(); finishers call note_done().
// The cap follows a pressure signal through adjust() or is set outright with set_cap().
//
//   call              guarantee                                                progress
//   ----------------  -------------------------------------------------------  -----------
//   note_submitted()  in_flight + 1, even past the cap; never refuses          lock-free
//   note_done()       in_flight - 1, but never below zero                      lock-free
//   try_admit()       if in_flight < cap: in_flight + 1 and true, in one step  lock-free
//   has_capacity()    in_flight < cap, both read from one atomic load          wait-free
//   set_cap(c)        cap = clamp(c, 1, gate_limit); in_flight untouched        lock-free
//   adjust(p, max)    ok: min(cap + 1, max); soft/hard: cap - 1; never below 1  lock-free
//
// adjust(ok, max) with the cap already above max drops it to max at once (100 -> 64 for max 64);
// soft and hard ignore max. Both twins share the rule.
//
// Every call is a single linearizable step on one 64-bit word that packs the cap and the count,
// saturating ones included: two threads adjusting at once never lose a step, and try_admit
// never admits past the cap, whatever the contention.
//
// LIMITS. Both the cap and in_flight are at most gate_limit = 2^31 - 1. Caps are clamped into
// [1, gate_limit] (set_cap, adjust's max_cap, the constructor). note_submitted at in_flight ==
// gate_limit saturates: one step that leaves the count at gate_limit (that submission is not
// counted, so a later note_done may reach zero early); nothing ever wraps. try_admit never
// passes the cap, so it reaches gate_limit only under a cap of gate_limit.
//
// PROGRESS. note_submitted, note_done, try_admit, set_cap and adjust are one CAS on the word,
// retried only when another call changed it in between: lock-free, never blocking. The readers
// are one load: wait-free.
//
// FORK. A gate is one atomic word: a forked child may use it whatever the parent's other
// threads were doing. mutex_gate, like any object over a std::mutex, may not be: a child must
// not use a mutex_gate that another thread of the parent could have been calling at the fork.
//
// MEMORY ORDERING. The gate behaves as a semaphore: note_done() is a release, and every call
// that observes the count (a try_admit that succeeds, has_capacity, in_flight) is an acquire. What a thread
// did before note_done() is visible to a thread whose try_admit() succeeded on, or whose
// has_capacity()/in_flight() read, a count that reflects that note_done(). note_submitted(),
// set_cap() and adjust() publish nothing.
//
// mutex_gate has the identical interface and semantics over a std::mutex (but for FORK): the
// baseline for benchmarks and the reference model for tests. permit<G> holds one admission and
// gives it back when it goes out of scope.
#pragma once

#include <cstdint>
#include <mutex>
#include <utility>

#include "sluice/detail/atomic.hpp"

namespace sluice {

enum class pressure { ok, soft, hard };

// The largest cap and the largest count a gate holds (see LIMITS above).
inline constexpr std::int64_t gate_limit = (std::int64_t{1} << 31) - 1;

class gate {
 public:
  explicit gate(std::int64_t cap) noexcept;
  gate(const gate&) = delete;
  gate& operator=(const gate&) = delete;

  void note_submitted() noexcept;
  void note_done() noexcept;
  [[nodiscard]] bool try_admit() noexcept;
  [[nodiscard]] bool has_capacity() const noexcept;
  [[nodiscard]] std::int64_t in_flight() const noexcept;
  [[nodiscard]] std::int64_t cap() const noexcept;
  void set_cap(std::int64_t cap) noexcept;
  void adjust(pressure p, std::int64_t max_cap) noexcept;

 private:
  // Invariant: bits 0-31 hold in_flight, bits 32-63 hold cap; both are at most gate_limit.
  detail::atomic<std::uint64_t> word_;
};

class mutex_gate {
 public:
  explicit mutex_gate(std::int64_t cap) noexcept;
  mutex_gate(const mutex_gate&) = delete;
  mutex_gate& operator=(const mutex_gate&) = delete;

  void note_submitted() noexcept;
  void note_done() noexcept;
  [[nodiscard]] bool try_admit() noexcept;
  [[nodiscard]] bool has_capacity() const noexcept;
  [[nodiscard]] std::int64_t in_flight() const noexcept;
  [[nodiscard]] std::int64_t cap() const noexcept;
  void set_cap(std::int64_t cap) noexcept;
  void adjust(pressure p, std::int64_t max_cap) noexcept;

 private:
  mutable std::mutex mutex_;
  std::int64_t in_flight_ = 0;  // guarded by mutex_
  std::int64_t cap_;            // guarded by mutex_
};

// One admission held for a scope: note_done() runs when the permit is destroyed or released.
//
//   if (sluice::permit p{g}) { ...work...; }        // try_admit(); empty when refused
//   g.note_submitted(); sluice::permit p{g, std::adopt_lock};  // takes over a counted one
template <class Gate>
class permit {
 public:
  permit() noexcept = default;
  explicit permit(Gate& g) noexcept : gate_(g.try_admit() ? &g : nullptr) {}
  permit(Gate& g, std::adopt_lock_t) noexcept : gate_(&g) {}
  permit(permit&& other) noexcept : gate_(std::exchange(other.gate_, nullptr)) {}
  permit& operator=(permit&& other) noexcept {
    if (this != &other) {
      release();
      gate_ = std::exchange(other.gate_, nullptr);
    }
    return *this;
  }
  ~permit() { release(); }

  explicit operator bool() const noexcept { return gate_ != nullptr; }

  // Gives the admission back now; the permit then holds nothing.
  void release() noexcept {
    if (gate_ != nullptr) std::exchange(gate_, nullptr)->note_done();
  }

 private:
  Gate* gate_ = nullptr;
};

}  // namespace sluice
