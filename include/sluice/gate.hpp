// sluice/gate.hpp: a non-blocking admission counter whose cap moves under memory pressure.
//
// A gate counts work in flight against a cap, both in one atomic word. Producers that must never
// wait record work with note_submitted(), producers that may decline ask try_admit() (or wait
// for room: admit()), finishers call note_done(); the cap follows memory pressure through
// adjust(), or is set with set_cap(). Every call is one linearizable step, and the gate orders
// memory as a semaphore does: note_done() releases, a call that observes the count acquires.
//
//   note_submitted()    in_flight + 1, even past the cap; never refuses           lock-free
//   note_done()         in_flight - 1, never below zero                           lock-free*
//   try_admit()         if in_flight < cap: in_flight + 1 and true, in one step   lock-free
//                       (refuses while an async waiter is queued: docs/asio.md)
//   admit()             waits until in_flight < cap, then as try_admit            blocking
//   try_admit_for(d)    admit(), giving up after d: false, and nothing counted    blocking
//   try_admit_until(t)  admit(), giving up at t (any clock): false, nothing counted  blocking
//   has_capacity()      whether try_admit would admit now, from one atomic load  wait-free
//   in_flight(), cap()  the count, the cap                                        wait-free
//   set_cap(c)          cap = clamp(c, 1, gate_limit); in_flight untouched        lock-free*
//   adjust(p, max)      ok: min(cap + 1, max); soft, hard: cap - 1; never below 1  lock-free*
//   * a call that finds waiters takes their parking spot's mutex for a moment to wake them
//
// mutex_gate: the same calls over a std::mutex. permit<G>: one admission held for a scope. The
// whole contract (limits, progress, waiting, fork, memory ordering) is in docs/gate.md.
#pragma once

#include "sluice/detail/platform.hpp"

#include <chrono>
#include <concepts>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <utility>

#include "sluice/detail/async_wait.hpp"
#include "sluice/detail/atomic.hpp"

namespace sluice {

enum class pressure { ok, soft, hard };  // what adjust() is told of memory

// The largest cap and the largest count a gate holds (docs/gate.md, LIMITS).
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

// The lock-free gate: one atomic word.
class gate : public detail::timed_admissions<gate> {
 public:
  explicit gate(std::int64_t cap) noexcept;  // nothing in flight; cap clamped into [1, gate_limit]
  ~gate();  // async waits still queued complete unadmitted (docs/gate.md, LIFETIME)
  gate(const gate&) = delete;
  gate& operator=(const gate&) = delete;

  void note_submitted() noexcept;           // in_flight + 1, even past the cap
  void note_done() noexcept;                // in_flight - 1, never below zero; a release
  [[nodiscard]] bool try_admit() noexcept;  // in_flight + 1 and true if below the cap, else false
  void admit();                             // waits for room, then admits as try_admit
  using detail::timed_admissions<gate>::try_admit_for;    // admit(), giving up after a timeout
  using detail::timed_admissions<gate>::try_admit_until;  // admit(), giving up at a deadline
  [[nodiscard]] bool has_capacity() const noexcept;       // whether try_admit would admit now
  [[nodiscard]] std::int64_t in_flight() const noexcept;  // the count
  [[nodiscard]] std::int64_t cap() const noexcept;        // the cap
  void set_cap(std::int64_t cap) noexcept;                // clamped into [1, gate_limit]
  void adjust(pressure p, std::int64_t max_cap) noexcept; // ok: +1, at most max_cap; soft, hard: -1

 private:
  template <class G, class C, class D>
  friend bool detail::admit_by(G&, const std::chrono::time_point<C, D>&);
  // Waits for room until the deadline; true once admitted, false when the deadline passed.
  bool wait_admit(std::chrono::steady_clock::time_point deadline);
  // Touches only g's parking spot, never *g, unless an async waiter of g is queued there.
  static void wake(const gate* g) noexcept;
  friend void detail::async_wait(gate&, detail::async_waiter&) noexcept;
  struct async_access;  // lib/gate.cpp's grant loop

  // Invariant: bits 0-30 hold in_flight, bits 32-62 hold cap, both at most gate_limit; bit 31
  // marks that a thread or an async waiter may be waiting; bit 63 that async waiters are queued.
  detail::atomic<std::uint64_t> word_;
};

// gate's twin over a std::mutex, call for call: the baseline and the tests' reference model.
class mutex_gate : public detail::timed_admissions<mutex_gate> {
 public:
  explicit mutex_gate(std::int64_t cap) noexcept;
  ~mutex_gate();
  mutex_gate(const mutex_gate&) = delete;
  mutex_gate& operator=(const mutex_gate&) = delete;

  void note_submitted() noexcept;
  void note_done() noexcept;
  [[nodiscard]] bool try_admit() noexcept;
  void admit();
  using detail::timed_admissions<mutex_gate>::try_admit_for;
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
  friend void detail::async_wait(mutex_gate&, detail::async_waiter&) noexcept;
  struct async_access;  // lib/gate.cpp's grant loop

  mutable std::mutex mutex_;
  std::condition_variable room_;  // waiters sleep on it
  std::int64_t in_flight_ = 0;    // guarded by mutex_
  std::int64_t cap_;              // guarded by mutex_
  std::int64_t waiting_ = 0;      // threads in wait_admit; guarded by mutex_
  std::int64_t async_queued_ = 0; // async waiters queued on our spot; guarded by mutex_
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
