// sluice/gate.hpp: a non-blocking admission counter whose cap moves under memory pressure.
//
// A gate counts work in flight against a cap, both in one atomic word. Producers that must never
// wait record work with note_submitted(), producers that may decline ask try_admit() (or wait
// for room: admit()), finishers call note_done(); the cap follows memory pressure through
// adjust(), or is set with set_cap(). Every call is one linearizable step, and the gate orders
// memory as a semaphore does: note_done() releases, a call that observes the count acquires.
// Each counting call takes a weight n (units: requests, bytes, tokens), 1 when left out.
//
//   note_submitted(n)   in_flight + n, even past the cap; never refuses           lock-free
//   note_done(n)        in_flight - n, never below zero                           lock-free*
//   try_admit(n)        if in_flight + n <= cap: in_flight + n and true, in one   lock-free
//                       step (refuses while an async waiter is queued: docs/asio.md)
//   admit(n)            waits until in_flight + n <= cap, then as try_admit       blocking
//   try_admit_for(n, d) admit(n), giving up after d: false, and nothing counted   blocking
//   try_admit_until(n, t) admit(n), giving up at t (any clock): false, nothing counted  blocking
//   has_capacity()      whether try_admit() would admit now, from one atomic load wait-free
//   in_flight(), cap()  the count, the cap                                        wait-free
//   set_cap(c)          cap = clamp(c, 1, gate_limit); in_flight untouched        lock-free*
//   adjust(p, max)      ok: min(cap + 1, max); soft, hard: cap - 1; never below 1  lock-free*
//   close()             for good: every admission refused, every waiter out now  lock-free*
//   closed()            whether close() ran                                       wait-free
//   stats()             what it has done: admissions, refusals, waits by how they  blocking**
//                       ended, waiting and in flight now, the highest in flight
//   * a call that finds waiters takes their parking spot's mutex for a moment to wake them
//   ** takes a mutex that threads take when they first count on a gate, exit, or read stats()
// A closed gate's try forms answer false; its waiting forms throw gate_closed, before or during
// their wait; async_admit completes with gate_errc::closed. note_done still counts down (so a
// server can wait for in-flight work to drain), and its cap reads 0 for good: set_cap and adjust
// never reopen it.
// A weight below zero counts as zero (admitted at once, nothing counted); one above gate_limit is
// never admitted (the try forms refuse, the waiting forms throw std::invalid_argument). Threads
// that wait are not queued: a thread waiting for n does not hold back smaller admissions; async
// waiters are, in FIFO order (docs/gate.md, WEIGHTS).
//
// mutex_gate: the same calls over a std::mutex. permit<G>: admissions held for a scope. The
// whole contract (limits, weights, close, statistics, progress, contention, waiting, fork,
// memory ordering): docs/gate.md.
#pragma once

#include "sluice/detail/platform.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <concepts>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <system_error>
#include <type_traits>
#include <utility>

#include "sluice/detail/async_wait.hpp"
#include "sluice/detail/atomic.hpp"
#include "sluice/detail/gate_word.hpp"

namespace sluice {

enum class pressure { ok, soft, hard };  // what adjust() is told of memory

// What a waiting form (admit, try_admit_for, try_admit_until, a waiting permit) throws when its
// gate is closed, before or during the wait; nothing is counted.
class gate_closed : public std::runtime_error {
 public:
  gate_closed() : std::runtime_error("sluice gate: closed") {}
};

// The error code that async_admit completes with when its gate is closed: gate_errc::closed, of
// gate_category() ("sluice.gate").
enum class gate_errc { closed = 1 };
const std::error_category& gate_category() noexcept;
inline std::error_code make_error_code(gate_errc e) noexcept { return {static_cast<int>(e), gate_category()}; }

// The largest cap and the largest count a gate holds (docs/gate.md, LIMITS).
inline constexpr std::int64_t gate_limit = (std::int64_t{1} << 31) - 1;

// What a gate has done, as stats() reads it (docs/gate.md, STATISTICS). Counts are of calls (of
// admissions), not of units; waiting and in_flight are now.
struct gate_stats {
  std::uint64_t admitted = 0;             // admissions, by every form (weight 0 included)
  std::uint64_t admitted_after_wait = 0;  // of those, the ones a waiting form or async_admit waited for
  std::uint64_t refused = 0;              // try forms that answered false, the gate open
  std::uint64_t timed_out = 0;            // timed waits that gave up
  std::uint64_t cancelled = 0;            // waits that left unadmitted otherwise (async cancellation, ...)
  std::uint64_t closed = 0;               // admissions refused, or waits ended, because it was closed
  std::int64_t waiting = 0;               // threads and async waits waiting now
  std::int64_t in_flight = 0;             // the count now
  std::int64_t peak_in_flight = 0;        // the highest count since the gate was made
};

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

// The weight that a waiting form may wait for: n, or std::invalid_argument when no cap could
// ever admit it (a weight below zero counts as zero, as in the try forms).
inline std::int64_t weight_to_wait_for(std::int64_t n) {
  if (n > gate_limit) throw std::invalid_argument("sluice gate: a weight above gate_limit is never admitted");
  return n;
}

// How a wait ended, as the statistics count it.
enum class wait_end { admitted, timed_out, closed, cancelled };

// The waiting forms (admit, the timed forms, async_admit, Python's), written once for both gates,
// which let this class call their hooks: first_try, wait_began, wait_admit, wait_ended.
//
// An object is one wait, after its first try found no room: the gate counts it as waiting while
// it lives, and then by how it ended. until() waits for room, as many times as the form needs (a
// deadline of another clock is waited for in steps); a wait destroyed without an outcome (an
// exception, a signal in Python) counts as cancelled.
template <class Gate>
class waiting {
 public:
  // An admission of n at once, for a form that would otherwise wait (async_admit, Python's
  // admit_async): true when admitted (counted so); false, counting nothing, when there is no
  // room or the gate is closed, and the form goes on to wait.
  static bool admit_now(Gate& g, std::int64_t n) noexcept { return g.first_try(n); }

  // The first try of a waiting form: true when admitted at once (counted so); throws gate_closed
  // when the gate is closed (counted), std::invalid_argument for a weight above gate_limit
  // (counting nothing); false when the form must wait.
  static bool admit_first(Gate& g, std::int64_t n) {
    if (g.first_try(weight_to_wait_for(n))) return true;
    if (g.closed()) {
      g.wait_ended(wait_end::closed, false);
      throw gate_closed();
    }
    return false;
  }

  waiting(Gate& g, std::int64_t n) noexcept : g_(g), n_(n) { g.wait_began(); }
  ~waiting() { g_.wait_ended(end_, true); }
  waiting(const waiting&) = delete;
  waiting& operator=(const waiting&) = delete;

  // Waits for room until the deadline: true once admitted, false when it passed; throws
  // gate_closed when the gate is closed, before or during the wait.
  bool until(std::chrono::steady_clock::time_point deadline) {
    try {
      if (!g_.wait_admit(n_, deadline)) return false;
    } catch (const gate_closed&) {
      end_ = wait_end::closed;
      throw;
    }
    end_ = wait_end::admitted;
    return true;
  }
  // The form gives up (its deadline passed): false.
  bool gave_up() noexcept {
    end_ = wait_end::timed_out;
    return false;
  }

 private:
  Gate& g_;
  const std::int64_t n_;
  wait_end end_ = wait_end::cancelled;
};

// try_admit_until for both gates: tries, and while there is no room and time is left, waits on
// the steady clock, checking the caller's clock after each wait. The time left is reckoned in
// floating-point seconds, so that no deadline, however coarse its unit or far its date,
// overflows a conversion; a NaN deadline has no time left.
template <class Gate, class Clock, class Duration>
bool admit_by(Gate& g, std::int64_t n, const std::chrono::time_point<Clock, Duration>& deadline) {
  using seconds = std::chrono::duration<long double>;
  if (waiting<Gate>::admit_first(g, n)) return true;
  waiting<Gate> wait(g, n);
  for (;;) {
    const seconds left = seconds(deadline.time_since_epoch()) - seconds(Clock::now().time_since_epoch());
    if (!(left > seconds::zero())) return wait.gave_up();
    if (wait.until(deadline_after(left))) return true;
  }
}
// The waiting forms' calls, for both gates (through waiting).
template <class Gate>
class waiting_forms {
 public:
  void admit() { admit(1); }
  void admit(std::int64_t n) {
    Gate& g = static_cast<Gate&>(*this);
    if (!waiting<Gate>::admit_first(g, n)) waiting<Gate>(g, n).until(std::chrono::steady_clock::time_point::max());
  }
  template <class Rep, class Period>
  [[nodiscard]] bool try_admit_for(const std::chrono::duration<Rep, Period>& timeout) {
    return try_admit_for(1, timeout);
  }
  template <class Rep, class Period>
  [[nodiscard]] bool try_admit_for(std::int64_t n, const std::chrono::duration<Rep, Period>& timeout) {
    return admit_by(static_cast<Gate&>(*this), n, deadline_after(timeout));
  }
  template <class Clock, class Duration>
  [[nodiscard]] bool try_admit_until(const std::chrono::time_point<Clock, Duration>& deadline) {
    return try_admit_until(1, deadline);
  }
  template <class Clock, class Duration>
  [[nodiscard]] bool try_admit_until(std::int64_t n, const std::chrono::time_point<Clock, Duration>& deadline) {
    return admit_by(static_cast<Gate&>(*this), n, deadline);
  }
};

}  // namespace detail

// The lock-free gate: its state one atomic word, and its statistics' counters beside it.
class gate : public detail::waiting_forms<gate> {
 public:
  explicit gate(std::int64_t cap) noexcept;  // nothing in flight; cap clamped into [1, gate_limit]
  ~gate();  // async waits still queued complete unadmitted (docs/gate.md, LIFETIME)
  gate(const gate&) = delete;
  gate& operator=(const gate&) = delete;

  void note_submitted() noexcept;                        // in_flight + 1, even past the cap
  void note_submitted(std::int64_t n) noexcept;          // in_flight + n, at most gate_limit
  void note_done() noexcept;                             // in_flight - 1, never below zero; a release
  void note_done(std::int64_t n) noexcept;               // in_flight - n, never below zero; a release
  [[nodiscard]] bool try_admit() noexcept;               // in_flight + 1 and true if below the cap
  [[nodiscard]] bool try_admit(std::int64_t n) noexcept; // in_flight + n and true if within the cap
  using detail::waiting_forms<gate>::admit;              // waits for room, then admits as try_admit
  using detail::waiting_forms<gate>::try_admit_for;      // admit(), giving up after a timeout
  using detail::waiting_forms<gate>::try_admit_until;    // admit(), giving up at a deadline
  [[nodiscard]] bool has_capacity() const noexcept;       // whether try_admit would admit now
  [[nodiscard]] std::int64_t in_flight() const noexcept;  // the count
  [[nodiscard]] std::int64_t cap() const noexcept;        // the cap
  void set_cap(std::int64_t cap) noexcept;                // clamped into [1, gate_limit]
  void adjust(pressure p, std::int64_t max_cap) noexcept; // ok: +1, at most max_cap; soft, hard: -1
  void close() noexcept;                                  // refuses all from now on; waiters leave
  [[nodiscard]] bool closed() const noexcept;             // whether close() ran; an acquire
  [[nodiscard]] gate_stats stats() const noexcept;        // what it has done (docs/gate.md, STATISTICS)

 private:
  // The waiting forms' hooks (detail::waiting).
  friend class detail::waiting<gate>;
  bool first_try(std::int64_t n) noexcept;  // inline while one CAS settles it (below)
  bool admit_now(std::int64_t n) noexcept;  // the first try whole; first_try: n outside [1, gate_limit]
  bool admit_now_contended(std::int64_t n, std::uint64_t word) noexcept;  // after a lost CAS
  void wait_began() noexcept;
  // Waits for room for n in [1, gate_limit] until the deadline; true once admitted, false when the
  // deadline passed; throws gate_closed.
  bool wait_admit(std::int64_t n, std::chrono::steady_clock::time_point deadline);
  void wait_ended(detail::wait_end end, bool waited) noexcept;

  bool try_admit_outside(std::int64_t n) noexcept;  // try_admit(n) of an n outside [1, gate_limit]

  // The bodies the unit and weighted calls share (inline, below), n in [1, gate_limit]: one try
  // each (*_try), and the call made of it. enter_try admits n within what try_admit admits below
  // (Queue: the grant loop's, within the cap whatever the queue mark), counting nothing but the
  // peak.
  bool try_enter(std::int64_t n) noexcept;  // try_admit's, counted in the tally
  void leave(std::int64_t n) noexcept;      // note_done's
  void submit(std::int64_t n) noexcept;     // note_submitted's
  template <bool Queue>
  bool enter_try(std::int64_t n, std::uint64_t& word, bool& admitted) noexcept;
  bool leave_try(std::int64_t n, std::uint64_t& word) noexcept;
  bool submit_try(std::int64_t n, std::uint64_t& word) noexcept;
  // Where a call goes on once its first CAS lost (lib/gate.cpp), from the word that CAS read.
  bool try_enter_contended(std::int64_t n, std::uint64_t word) noexcept;
  void leave_contended(std::int64_t n, std::uint64_t word) noexcept;
  void submit_contended(std::int64_t n, std::uint64_t word) noexcept;
  // Backs off, then enter_try until one settles: whether it admitted, and the word it read.
  bool enter_contended(std::int64_t n, std::uint64_t& word) noexcept;
  // enter_try until one is over, counting nothing but the peak (the waiting forms' tries);
  // backs_off: whether a lost CAS waits before the next try.
  bool enter(std::int64_t n, bool backs_off) noexcept;
  bool admitted_by_try() noexcept;             // a try's admission, counted: true
  bool refused(std::uint64_t word) noexcept;  // a try's refusal, counted (closed or not): false
  void count(detail::tally k) noexcept;       // a tally that this thread's array does not reach
  void raise_peak(std::int64_t count) const noexcept;
  // Touches only g's parking spot, never *g, unless an async waiter or a thread of g waits there.
  static void wake(const gate* g) noexcept;
  friend void detail::async_wait(gate&, detail::async_waiter&) noexcept;
  struct async_access;  // lib/gate.cpp's grant loop

  // Invariant: bits 0-30 hold in_flight, bits 32-62 hold cap, both at most gate_limit, cap 0
  // once closed; bit 31 marks that a thread or an async waiter may be waiting; bit 63 that async
  // waiters are queued (sluice/detail/gate_word.hpp).
  detail::atomic<std::uint64_t> word_;
  // The statistics (lib/tallies.cpp), all relaxed: they order nothing. The try forms' outcomes
  // are counted in the calling thread's tally for this gate, whose first counter is tally_ (the
  // gate's index times tally_kinds); the rest, and tallies that no array holds, in counts_.
  const std::uint32_t tally_;
  // The highest in_flight yet: raised after the CAS that set it, and by stats() to the count it
  // reads, so that no snapshot shows a peak below one an earlier snapshot showed.
  mutable std::atomic<std::int64_t> peak_{0};
  struct counters {
    std::atomic<std::uint64_t> tallied[detail::tally_kinds] = {};  // tallies counted here
    std::atomic<std::uint64_t> after_wait{0}, timed_out{0}, cancelled{0}, wait_closed{0};
    std::atomic<std::int64_t> waiting{0};
  } counts_;
};

// gate's twin over a std::mutex, call for call: the baseline and the tests' reference model.
class mutex_gate : public detail::waiting_forms<mutex_gate> {
 public:
  explicit mutex_gate(std::int64_t cap) noexcept;
  ~mutex_gate();
  mutex_gate(const mutex_gate&) = delete;
  mutex_gate& operator=(const mutex_gate&) = delete;

  void note_submitted() noexcept;
  void note_submitted(std::int64_t n) noexcept;
  void note_done() noexcept;
  void note_done(std::int64_t n) noexcept;
  [[nodiscard]] bool try_admit() noexcept;
  [[nodiscard]] bool try_admit(std::int64_t n) noexcept;
  using detail::waiting_forms<mutex_gate>::admit;
  using detail::waiting_forms<mutex_gate>::try_admit_for;
  using detail::waiting_forms<mutex_gate>::try_admit_until;
  [[nodiscard]] bool has_capacity() const noexcept;
  [[nodiscard]] std::int64_t in_flight() const noexcept;
  [[nodiscard]] std::int64_t cap() const noexcept;
  void set_cap(std::int64_t cap) noexcept;
  void adjust(pressure p, std::int64_t max_cap) noexcept;
  void close() noexcept;
  [[nodiscard]] bool closed() const noexcept;
  [[nodiscard]] gate_stats stats() const noexcept;

 private:
  friend class detail::waiting<mutex_gate>;
  bool first_try(std::int64_t n) noexcept { return admit_now(n); }
  bool admit_now(std::int64_t n) noexcept;
  void wait_began() noexcept;
  bool wait_admit(std::int64_t n, std::chrono::steady_clock::time_point deadline);
  void wait_ended(detail::wait_end end, bool waited) noexcept;
  void wake_if_waiting(std::unique_lock<std::mutex>& lock) noexcept;
  void raise_peak() noexcept;  // under mutex_
  friend void detail::async_wait(mutex_gate&, detail::async_waiter&) noexcept;
  struct async_access;  // lib/gate.cpp's grant loop

  mutable std::mutex mutex_;
  std::condition_variable room_;  // waiters sleep on it
  std::int64_t in_flight_ = 0;    // guarded by mutex_
  std::int64_t cap_;              // guarded by mutex_
  std::int64_t waiting_ = 0;      // threads in wait_admit; guarded by mutex_
  std::int64_t async_queued_ = 0; // async waiters queued on our spot; guarded by mutex_
  bool closed_ = false;           // guarded by mutex_
  gate_stats stats_;              // guarded by mutex_ (in_flight there unused: in_flight_ is it)
};

// What the twins share, stated so that generic code can take either and the promise that their
// interfaces are identical cannot drift.
template <class G>
concept admission_gate =
    std::constructible_from<G, std::int64_t> && !std::copyable<G> && !std::movable<G> &&
    requires(G& g, const G& cg, std::int64_t n, pressure p, std::chrono::milliseconds d,
             std::chrono::steady_clock::time_point t) {
      { g.note_submitted() } noexcept -> std::same_as<void>;
      { g.note_submitted(n) } noexcept -> std::same_as<void>;
      { g.note_done() } noexcept -> std::same_as<void>;
      { g.note_done(n) } noexcept -> std::same_as<void>;
      { g.try_admit() } noexcept -> std::same_as<bool>;
      { g.try_admit(n) } noexcept -> std::same_as<bool>;
      { g.admit() } -> std::same_as<void>;
      { g.admit(n) } -> std::same_as<void>;
      { g.try_admit_for(d) } -> std::same_as<bool>;
      { g.try_admit_for(n, d) } -> std::same_as<bool>;
      { g.try_admit_until(t) } -> std::same_as<bool>;
      { g.try_admit_until(n, t) } -> std::same_as<bool>;
      { cg.has_capacity() } noexcept -> std::same_as<bool>;
      { cg.in_flight() } noexcept -> std::same_as<std::int64_t>;
      { cg.cap() } noexcept -> std::same_as<std::int64_t>;
      { g.set_cap(n) } noexcept -> std::same_as<void>;
      { g.adjust(p, n) } noexcept -> std::same_as<void>;
      { g.close() } noexcept -> std::same_as<void>;
      { cg.closed() } noexcept -> std::same_as<bool>;
      { cg.stats() } noexcept -> std::same_as<gate_stats>;
    };
static_assert(admission_gate<gate> && admission_gate<mutex_gate>);

// The tag that makes a permit wait for its admission (admit()).
struct until_admitted_t {
  explicit until_admitted_t() = default;
};
inline constexpr until_admitted_t until_admitted{};

// Admissions held for a scope: note_done(n) runs when the permit is destroyed or released.
//
//   if (sluice::permit p{g}) { ...work...; }        // try_admit(); empty when refused
//   sluice::permit p{g, sluice::until_admitted};   // admit(): waits for room
//   if (sluice::permit p{g, 50ms}) { ... }         // try_admit_for(50ms); empty when it gave up
//   if (sluice::permit p{g, deadline}) { ... }     // try_admit_until(deadline), any clock
//   g.note_submitted(); sluice::permit p{g, std::adopt_lock};  // takes over a counted one
// and each with a weight n after the gate: permit p{g, n}, permit p{g, n, until_admitted},
// permit p{g, n, 50ms}, permit p{g, n, deadline}, permit p{g, n, std::adopt_lock}.
template <class Gate>
class permit {
 public:
  permit() noexcept = default;
  explicit permit(Gate& g) noexcept : permit(g, 1) {}
  permit(Gate& g, std::int64_t n) noexcept : permit(g.try_admit(n) ? &g : nullptr, n) {}
  permit(Gate& g, until_admitted_t) : permit(g, 1, until_admitted) {}
  permit(Gate& g, std::int64_t n, until_admitted_t) : permit((g.admit(n), &g), n) {}
  template <class Rep, class Period>
  permit(Gate& g, const std::chrono::duration<Rep, Period>& timeout) : permit(g, 1, timeout) {}
  template <class Rep, class Period>
  permit(Gate& g, std::int64_t n, const std::chrono::duration<Rep, Period>& timeout)
      : permit(g.try_admit_for(n, timeout) ? &g : nullptr, n) {}
  template <class Clock, class Duration>
  permit(Gate& g, const std::chrono::time_point<Clock, Duration>& deadline) : permit(g, 1, deadline) {}
  template <class Clock, class Duration>
  permit(Gate& g, std::int64_t n, const std::chrono::time_point<Clock, Duration>& deadline)
      : permit(g.try_admit_until(n, deadline) ? &g : nullptr, n) {}
  permit(Gate& g, std::adopt_lock_t) noexcept : permit(&g, 1) {}
  permit(Gate& g, std::int64_t n, std::adopt_lock_t) noexcept : permit(&g, n) {}
  permit(permit&& other) noexcept
      : gate_(std::exchange(other.gate_, nullptr)), units_(std::exchange(other.units_, 0)) {}
  permit& operator=(permit&& other) noexcept {
    if (this != &other) {
      release();
      gate_ = std::exchange(other.gate_, nullptr);
      units_ = std::exchange(other.units_, 0);
    }
    return *this;
  }
  ~permit() { release(); }

  // Whether it holds an admission (of weight zero, too).
  explicit operator bool() const noexcept { return gate_ != nullptr; }
  // The weight it holds: 0 when empty.
  [[nodiscard]] std::int64_t units() const noexcept { return units_; }

  // Gives the admission back now; the permit then holds nothing.
  void release() noexcept {
    if (gate_ != nullptr) std::exchange(gate_, nullptr)->note_done(std::exchange(units_, 0));
  }

 private:
  // A weight below zero counts as zero, as the gates count it.
  permit(Gate* g, std::int64_t n) noexcept : gate_(g), units_(g != nullptr && n > 0 ? n : 0) {}

  Gate* gate_ = nullptr;
  std::int64_t units_ = 0;
};

namespace detail {
// Whether a weight is one the inline bodies take, in [1, gate_limit]: one compare.
constexpr bool weight_in_range(std::int64_t n) noexcept {
  return static_cast<std::uint64_t>(n) - 1 < std::uint64_t{gate_limit};
}
}  // namespace detail

// ---- sluice::gate's inline calls: the unit calls and the bodies every call shares --------------
//
// Ordering pairs (lib/gate.cpp lists them all, with the waiting marks'): (1) note_done's
// release-CAS synchronizes-with (2) an admission's acquire-CAS, through the word's release
// sequence (every other write to the word is a read-modify-write). Everything else here is
// relaxed: the word carries no data besides itself, and the statistics order nothing.

// Each body makes one CAS on the word at a time, inline; a CAS that fails lost to another call,
// which made progress (lock-free), and the body goes on out of line (*_contended, lib/gate.cpp),
// backing off a while before each new try (docs/gate.md, CONTENTION). The tries are written once,
// as *_try: true when the call is over, false when its CAS lost (word then holds what it read).

// admitted: whether enter admitted; when it refuses, word is what it refused on.
template <bool Queue>
[[gnu::always_inline]] inline bool gate::enter_try(std::int64_t n, std::uint64_t& word, bool& admitted) noexcept {
  using namespace detail::gate_word;
  // count + n past the limit, and past the peak, each written with n on the other side, so that
  // for n = 1 the compiler compares count itself (>= limit, >= peak)
  const std::int64_t count = count_of(word);
  admitted = false;
  if (count > (Queue ? cap_of(word) : admit_limit(word)) - n) return true;
  if (!word_.compare_exchange_strong(word, word + static_cast<std::uint64_t>(n),
                                     std::memory_order_acquire,  // (2)
                                     std::memory_order_relaxed)) [[unlikely]] {
    return false;
  }
  if (count > peak_.load(std::memory_order_relaxed) - n) [[unlikely]] raise_peak(count + n);
  admitted = true;
  return true;
}

[[gnu::always_inline]] inline bool gate::admitted_by_try() noexcept {
  if (!detail::tally_here(tally_, detail::tally::admitted)) [[unlikely]] count(detail::tally::admitted);
  return true;
}

[[gnu::always_inline]] inline bool gate::try_enter(std::int64_t n) noexcept {
  std::uint64_t word = word_.load(std::memory_order_relaxed);
  bool admitted;
  if (!enter_try<false>(n, word, admitted)) [[unlikely]] return try_enter_contended(n, word);
  if (!admitted) [[unlikely]] return refused(word);
  return admitted_by_try();
}

// After its CAS (W2: it clears the waiting mark) it touches nothing of the gate, only the parking
// spot when the mark was set (W3), and the gate through it only while another thread or an async
// waiter of the gate is queued there: the thread that it admits may destroy the gate at once.
[[gnu::always_inline]] inline bool gate::leave_try(std::int64_t n, std::uint64_t& word) noexcept {
  using namespace detail::gate_word;
  if (count_of(word) == 0) return true;  // the floor: at zero it stays zero
  const auto taken = static_cast<std::uint64_t>(std::min(n, count_of(word)));
  if (!word_.compare_exchange_strong(word, (word - taken) & ~waiting_bit,
                                     std::memory_order_release,  // (1), (W2)
                                     std::memory_order_relaxed)) [[unlikely]] {
    return false;
  }
  if ((word & waiting_bit) != 0) [[unlikely]] wake(this);  // (W3)
  return true;
}

[[gnu::always_inline]] inline void gate::leave(std::int64_t n) noexcept {
  std::uint64_t word = word_.load(std::memory_order_relaxed);
  if (!leave_try(n, word)) [[unlikely]] leave_contended(n, word);
}

// At gate_limit the count stays put, so a saturated submission is one step, never an add and an
// undo that another call could see between. A submission publishes nothing and makes no room.
[[gnu::always_inline]] inline bool gate::submit_try(std::int64_t n, std::uint64_t& word) noexcept {
  using namespace detail::gate_word;
  const std::int64_t count = count_of(word);
  if (count == gate_limit) return true;
  const std::int64_t added = std::min(n, gate_limit - count);
  if (!word_.compare_exchange_strong(word, word + static_cast<std::uint64_t>(added), std::memory_order_relaxed)) [[unlikely]] {
    return false;
  }
  if (count > peak_.load(std::memory_order_relaxed) - added) [[unlikely]] raise_peak(count + added);
  return true;
}

[[gnu::always_inline]] inline void gate::submit(std::int64_t n) noexcept {
  std::uint64_t word = word_.load(std::memory_order_relaxed);
  if (!submit_try(n, word)) [[unlikely]] submit_contended(n, word);
}

// A waiting form's first try: a try_admit that counts no refusal (the form waits instead).
// Inline, as try_admit is, so that admit() with room costs what try_admit() does; a weight
// outside [1, gate_limit] (admit_now) and a CAS that lost (admit_now_contended, which backs off
// first, as try_admit's does) go on in the library.
[[gnu::always_inline]] inline bool gate::first_try(std::int64_t n) noexcept {
  if (!detail::weight_in_range(n)) [[unlikely]] return admit_now(n);
  std::uint64_t word = word_.load(std::memory_order_relaxed);  // orders nothing: the CAS is (2)
  bool admitted;
  if (!enter_try<false>(n, word, admitted)) [[unlikely]] return admit_now_contended(n, word);
  return admitted && admitted_by_try();
}

// The unit calls are the weighted ones with n = 1, each a call of its own into the one inline
// body, so that the compiler folds the constant and drops the weight's checks.
inline bool gate::try_admit() noexcept { return try_enter(1); }
inline void gate::note_done() noexcept { leave(1); }
inline void gate::note_submitted() noexcept { submit(1); }

// A weight of zero or below counts nothing; one above gate_limit saturates as any other
// (note_submitted), takes away what is there (note_done), or is refused (try_admit, in the
// library with the weights of zero and below).
inline bool gate::try_admit(std::int64_t n) noexcept {
  if (!detail::weight_in_range(n)) [[unlikely]] return try_admit_outside(n);
  return try_enter(n);
}
inline void gate::note_done(std::int64_t n) noexcept {
  if (n > 0) leave(std::min(n, gate_limit));
}
inline void gate::note_submitted(std::int64_t n) noexcept {
  if (n > 0) submit(std::min(n, gate_limit));
}

}  // namespace sluice

template <>
struct std::is_error_code_enum<sluice::gate_errc> : std::true_type {};
