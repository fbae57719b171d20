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
//   note_done()       in_flight - 1, but never below zero                      lock-free*
//   try_admit()       if in_flight < cap: in_flight + 1 and true, in one step  lock-free
//   admit()           waits until in_flight < cap, then in_flight + 1, in one  blocking
//                     step, exactly as a try_admit that succeeds
//   try_admit_for(d)  admit(), giving up after d: false, and nothing counted   blocking
//   try_admit_until(t)  admit(), giving up at t: false, and nothing counted     blocking
//   has_capacity()    in_flight < cap, both read from one atomic load          wait-free
//   set_cap(c)        cap = clamp(c, 1, gate_limit); in_flight untouched        lock-free*
//   adjust(p, max)    ok: min(cap + 1, max); soft/hard: cap - 1; never below 1  lock-free*
//
//   * when no thread waits; a call that finds waiters then takes their parking spot's mutex
//     for a moment to wake them (WAITING below).
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
// retried only when another call changed it in between: lock-free, and never blocking unless a
// thread waits (see WAITING). The readers are one load: wait-free.
//
// WAITING. admit(), try_admit_for() and try_admit_until() first try as try_admit does; only a
// thread that finds no room waits, in the kernel, on a condition variable (for gate: one of a
// fixed table of spots shared by address, so the gate stays one word; for mutex_gate: its own).
// Whatever may make room wakes the waiters: note_done, set_cap and adjust. A waiter then tries
// again, so raising the cap by k lets up to k of them in, and no wake-up is lost: a waiter
// marks the word before its last try, and a call that finds the mark wakes the spot under its
// mutex. When no thread waits, no call looks at a spot: the mark is one bit of the word that
// note_done, set_cap and adjust clear and test in the CAS they make anyway. When it was set,
// they take the spot's mutex for a moment (once per wait): the only time they block. After
// that CAS they touch nothing of the gate, so the thread their change admits may destroy the
// gate at once (a gate used to signal completion); the same holds for mutex_gate. A timed wait that
// gives up counts nothing; it gives up at its deadline or a little after (the scheduler's
// delay). A timeout of zero or less, or a deadline already past, tries once, as does a NaN one;
// try_admit_for cuts its timeout at a hundred years, and try_admit_until waits for any deadline
// of any clock, in any unit, a hundred years of the steady clock at a time.
//
// FORK. A gate is one atomic word, and its parking spots are held across fork() (through
// pthread_atfork): a forked child may use it whatever the parent's other threads were doing
// (their waits are gone with them). So, while a fork is being prepared, a note_done, set_cap or
// adjust that must wake waiters waits for the fork: do not call them holding a lock that a
// pthread_atfork prepare handler registered before sluice's (which runs after sluice's) takes. mutex_gate, like any object over a std::mutex, may not be:
// a child must not use a mutex_gate that another thread of the parent could have been calling
// at the fork.
//
// MEMORY ORDERING. The gate behaves as a semaphore: note_done() is a release, and every call
// that observes the count (a try_admit that succeeds, has_capacity, in_flight) is an acquire. What a thread
// did before note_done() is visible to a thread whose try_admit() or admit() succeeded on, or
// whose has_capacity()/in_flight() read, a count that reflects that note_done(). A try_admit()
// that refuses, and a wait that gives up, are relaxed reads: a refusal makes nothing visible.
// note_submitted(), set_cap() and adjust() publish nothing.
//
// mutex_gate has the identical interface and semantics over a std::mutex (but for FORK): the
// baseline for benchmarks and the reference model for tests. permit<G> holds one admission and
// gives it back when it goes out of scope.
#pragma once

#if __cplusplus < 202002L
#error "sluice needs C++20 (-std=c++20, or cpp_std=c++20 in Meson, or cxx_std_20 in CMake)"
#endif

#include <chrono>
#include <concepts>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <utility>

#include "sluice/detail/atomic.hpp"
#include "sluice/detail/platform.hpp"

namespace sluice {

enum class pressure { ok, soft, hard };

// The largest cap and the largest count a gate holds (see LIMITS above).
inline constexpr std::int64_t gate_limit = (std::int64_t{1} << 31) - 1;

namespace detail {
// The steady clock's now + timeout, the timeout cut into [0, a hundred years] (a NaN counts as
// zero), so that no sum overflows.
template <class Rep, class Period>
std::chrono::steady_clock::time_point deadline_after(const std::chrono::duration<Rep, Period>& timeout) {
  using namespace std::chrono;
  const duration<long double> longest = hours(24 * 365 * 100);
  duration<long double> wait = timeout;
  if (!(wait > duration<long double>::zero())) wait = duration<long double>::zero();
  if (wait > longest) wait = longest;
  return steady_clock::now() + ceil<nanoseconds>(wait);
}

// try_admit_until for both gates: tries, and while there is no room and time is left, waits on
// the steady clock, checking the caller's clock after each wait. The time left is reckoned in
// floating-point seconds, so that no deadline, however coarse its unit or far its date,
// overflows a conversion; a NaN deadline has no time left.
template <class Gate, class Clock, class Duration>
bool admit_by(Gate& g, const std::chrono::time_point<Clock, Duration>& deadline) {
  using seconds = std::chrono::duration<long double>;
  while (!g.try_admit()) {
    const seconds left = seconds(deadline.time_since_epoch()) - seconds(Clock::now().time_since_epoch());
    if (!(left > seconds::zero())) return false;
    if (g.wait_admit(deadline_after(left))) return true;
  }
  return true;
}
// The timed waits, written once for both gates (admit_by needs Gate::wait_admit, which each
// gate lets admit_by call).
template <class Gate>
class timed_admissions {
 public:
  template <class Rep, class Period>
  [[nodiscard]] bool try_admit_for(const std::chrono::duration<Rep, Period>& timeout) {
    return admit_by(static_cast<Gate&>(*this), deadline_after(timeout));
  }
  template <class Clock, class Duration>
  [[nodiscard]] bool try_admit_until(const std::chrono::time_point<Clock, Duration>& deadline) {
    return admit_by(static_cast<Gate&>(*this), deadline);
  }
};
}  // namespace detail

class gate : public detail::timed_admissions<gate> {
 public:
  explicit gate(std::int64_t cap) noexcept;
  gate(const gate&) = delete;
  gate& operator=(const gate&) = delete;

  void note_submitted() noexcept;
  void note_done() noexcept;
  [[nodiscard]] bool try_admit() noexcept;
  void admit();
  using detail::timed_admissions<gate>::try_admit_for;    // see WAITING
  using detail::timed_admissions<gate>::try_admit_until;
  [[nodiscard]] bool has_capacity() const noexcept;
  [[nodiscard]] std::int64_t in_flight() const noexcept;
  [[nodiscard]] std::int64_t cap() const noexcept;
  void set_cap(std::int64_t cap) noexcept;
  void adjust(pressure p, std::int64_t max_cap) noexcept;

 private:
  template <class G, class C, class D>
  friend bool detail::admit_by(G&, const std::chrono::time_point<C, D>&);
  // Waits for room until the deadline; true once admitted, false when the deadline passed.
  bool wait_admit(std::chrono::steady_clock::time_point deadline);
  static void wake(const gate* g) noexcept;  // touches only g's parking spot, never *g

  // Invariant: bits 0-30 hold in_flight, bits 32-62 hold cap, both at most gate_limit; bit 31
  // marks that a thread may be waiting.
  detail::atomic<std::uint64_t> word_;
};

class mutex_gate : public detail::timed_admissions<mutex_gate> {
 public:
  explicit mutex_gate(std::int64_t cap) noexcept;
  mutex_gate(const mutex_gate&) = delete;
  mutex_gate& operator=(const mutex_gate&) = delete;

  void note_submitted() noexcept;
  void note_done() noexcept;
  [[nodiscard]] bool try_admit() noexcept;
  void admit();
  using detail::timed_admissions<mutex_gate>::try_admit_for;    // see WAITING
  using detail::timed_admissions<mutex_gate>::try_admit_until;
  [[nodiscard]] bool has_capacity() const noexcept;
  [[nodiscard]] std::int64_t in_flight() const noexcept;
  [[nodiscard]] std::int64_t cap() const noexcept;
  void set_cap(std::int64_t cap) noexcept;
  void adjust(pressure p, std::int64_t max_cap) noexcept;

 private:
  template <class G, class C, class D>
  friend bool detail::admit_by(G&, const std::chrono::time_point<C, D>&);
  bool wait_admit(std::chrono::steady_clock::time_point deadline);
  void wake_if_waiting(std::unique_lock<std::mutex>& lock) noexcept;

  mutable std::mutex mutex_;
  std::condition_variable room_;  // waiters sleep on it
  std::int64_t in_flight_ = 0;    // guarded by mutex_
  std::int64_t cap_;              // guarded by mutex_
  std::int64_t waiting_ = 0;      // threads in wait_admit; guarded by mutex_
};

// What the twins share, stated so that generic code can take either and the promise that their
// interfaces are identical cannot drift.
template <class G>
concept admission_gate =
    std::constructible_from<G, std::int64_t> && !std::copyable<G> && !std::movable<G> &&
    requires(G& g, const G& cg, std::int64_t n, pressure p, std::chrono::milliseconds d,
             std::chrono::steady_clock::time_point t) {
      { g.note_submitted() } noexcept -> std::same_as<void>;
      { g.note_done() } noexcept -> std::same_as<void>;
      { g.try_admit() } noexcept -> std::same_as<bool>;
      { g.admit() } -> std::same_as<void>;
      { g.try_admit_for(d) } -> std::same_as<bool>;
      { g.try_admit_until(t) } -> std::same_as<bool>;
      { cg.has_capacity() } noexcept -> std::same_as<bool>;
      { cg.in_flight() } noexcept -> std::same_as<std::int64_t>;
      { cg.cap() } noexcept -> std::same_as<std::int64_t>;
      { g.set_cap(n) } noexcept -> std::same_as<void>;
      { g.adjust(p, n) } noexcept -> std::same_as<void>;
    };
static_assert(admission_gate<gate> && admission_gate<mutex_gate>);

// The tag that makes a permit wait for its admission (admit()).
struct until_admitted_t {
  explicit until_admitted_t() = default;
};
inline constexpr until_admitted_t until_admitted{};

// One admission held for a scope: note_done() runs when the permit is destroyed or released.
//
//   if (sluice::permit p{g}) { ...work...; }        // try_admit(); empty when refused
//   sluice::permit p{g, sluice::until_admitted};   // admit(): waits for room
//   if (sluice::permit p{g, 50ms}) { ... }         // try_admit_for(50ms); empty when it gave up
//   if (sluice::permit p{g, deadline}) { ... }     // try_admit_until(deadline), any clock
//   g.note_submitted(); sluice::permit p{g, std::adopt_lock};  // takes over a counted one
template <class Gate>
class permit {
 public:
  permit() noexcept = default;
  explicit permit(Gate& g) noexcept : gate_(g.try_admit() ? &g : nullptr) {}
  permit(Gate& g, until_admitted_t) : gate_((g.admit(), &g)) {}
  template <class Rep, class Period>
  permit(Gate& g, const std::chrono::duration<Rep, Period>& timeout) : gate_(g.try_admit_for(timeout) ? &g : nullptr) {}
  template <class Clock, class Duration>
  permit(Gate& g, const std::chrono::time_point<Clock, Duration>& deadline)
      : gate_(g.try_admit_until(deadline) ? &g : nullptr) {}
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
