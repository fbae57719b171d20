// gate and mutex_gate. The rules that both share (clamping, the pressure step) are written once
// here, so the reference model cannot drift from the lock-free gate.
#include "sluice/gate.hpp"

#include <algorithm>
#include <mutex>
#include <string>
#include <thread>

#include "cpu_relax.hpp"
#include "parking.hpp"
#include "tallies.hpp"

namespace sluice {

const std::error_category& gate_category() noexcept;

namespace {

// The word's layout: sluice/detail/gate_word.hpp.
using detail::gate_word::admit_limit;
using detail::gate_word::cap_of;
using detail::gate_word::count_mask;
using detail::gate_word::count_of;
using detail::gate_word::pack;
using detail::gate_word::queue_bit;
using detail::gate_word::waiting_bit;
constexpr bool closed_word(std::uint64_t word) noexcept { return detail::gate_word::closed(word); }

// A weight as the gates count it: below zero, zero (docs/gate.md, WEIGHTS).
constexpr std::int64_t weight(std::int64_t n) noexcept { return n < 0 ? 0 : n; }

constexpr std::int64_t clamp_cap(std::int64_t cap) noexcept {
  return std::clamp<std::int64_t>(cap, 1, gate_limit);
}

constexpr std::int64_t next_cap(std::int64_t cap, pressure p, std::int64_t max_cap) noexcept {
  return p == pressure::ok ? clamp_cap(std::min(cap + 1, max_cap)) : clamp_cap(cap - 1);
}

class gate_error_category final : public std::error_category {
 public:
  const char* name() const noexcept override { return "sluice.gate"; }
  std::string message(int e) const override {
    return e == static_cast<int>(gate_errc::closed) ? "the gate is closed" : "unknown sluice.gate error";
  }
};

// ---- the queues of async waiters (docs/asio.md) ---------------------------------------------
//
// Guarded by the spot's mutex. A waiter leaves its gate's queue once: taken by a grant loop
// (admitted), by async_cancel or by its gate's destruction (not admitted), each of which then
// hands it over, or withdrawn by async_withdraw; whichever holds the mutex first.

void link_waiter(detail::parking_spot& spot, detail::async_waiter& w) noexcept {
  spot.queues.push(w);
  w.queued = true;
  if (w.handle != nullptr) *w.handle = &w;
}

// Answers whether a waiter of w's gate is still queued.
bool unlink_waiter(detail::parking_spot& spot, detail::async_waiter& w) noexcept {
  const bool left = spot.queues.remove(w);
  w.queued = false;
  if (w.handle != nullptr) *w.handle = nullptr;
  return left;
}

// Under the spot's mutex: the hand-over of the waiters chained through `next` begins (a fork
// waits for it to end: parking.hpp).
detail::async_waiter* begin_hand_over(detail::parking_spot& spot, detail::async_waiter* taken) noexcept {
  // (H1) relaxed: under the mutex, which the fork's prepare takes before it reads the count
  if (taken != nullptr) spot.handing_over.fetch_add(1, std::memory_order_relaxed);
  return taken;
}

// Waiters whose context is gone, to be discarded by the outermost hand-over on this thread, one
// list for those admitted and one for the rest. A discard gives an admission back, and the
// note_done in that may grant the gate's next waiter, whose context may be gone too: discarded
// in place, each would nest one call deeper (a context shut down with thousands of waits queued
// while room comes overflowed the stack), so the nested hand-over leaves them here instead.
struct discards {
  detail::async_waiter* lists[2] = {nullptr, nullptr};  // [admitted]
  bool running = false;
};
thread_local discards pending_discards;

// After the spot's mutex is let go: hands over each waiter begin_hand_over counted, ends the
// hand-over, and only then discards those whose context is gone (which may call a gate).
void hand_over(detail::parking_spot& spot, detail::async_waiter* taken, bool admitted) noexcept {
  if (taken == nullptr) return;
  detail::async_waiter* undelivered = nullptr;
  while (taken != nullptr) {
    detail::async_waiter* const w = taken;
    taken = w->next;
    w->next = nullptr;
    if (!w->hand_over(w, admitted)) {
      w->next = undelivered;
      undelivered = w;
    }
  }
  spot.handing_over.fetch_sub(1, std::memory_order_release);  // (H2): pairs with H3 (parking.hpp)
  if (undelivered == nullptr) return;
  discards& d = pending_discards;
  detail::async_waiter*& list = d.lists[admitted ? 1 : 0];
  while (undelivered != nullptr) {  // onto this thread's list
    detail::async_waiter* const w = undelivered;
    undelivered = w->next;
    w->next = list;
    list = w;
  }
  if (d.running) return;  // inside a discard: the loop below, further up, takes them
  d.running = true;
  for (int kind = 0; d.lists[0] != nullptr || d.lists[1] != nullptr; kind ^= 1) {
    while (detail::async_waiter* const w = d.lists[kind]) {
      d.lists[kind] = w->next;
      w->next = nullptr;
      w->discard(w, kind == 1);
    }
  }
  d.running = false;
}

// Under the spot's mutex: the head of the queue of the gate at g, if that gate is of the kind
// whose calls `ops` belongs to. A call that comes late (its gate destroyed meanwhile by a thread
// it had turned away or admitted) may find another kind of gate made since at the address: it
// leaves that gate's waiters to that gate's own calls, never taking them with the wrong kind's
// code.
detail::async_waiter* head_of(detail::parking_spot& spot, const void* g, const detail::async_gate_ops* ops) noexcept {
  detail::async_waiter* const head = spot.queues.head(g);
  return head != nullptr && head->ops == ops ? head : nullptr;
}

// The grant loop: takes the gate's waiters from the head, oldest first, while take(units) admits one;
// stops at the first that it cannot admit (take() then left the gate marked, so that the call
// that makes room comes back here). Returns the taken waiters chained through next, their
// hand-over begun; found: whether it met a waiter of the gate (if not, it touched nothing of the
// gate, which may be gone); left: whether one is still queued.
template <class Take>
detail::async_waiter* grant(detail::parking_spot& spot, const void* g, const detail::async_gate_ops* ops, Take take,
                            bool& found, bool& left) noexcept {
  detail::async_waiter* taken = nullptr;
  detail::async_waiter** tail = &taken;
  detail::async_waiter* w = head_of(spot, g, ops);
  found = w != nullptr;
  left = false;
  while (w != nullptr) {
    if (!take(w->units)) {
      left = true;
      break;
    }
    detail::async_waiter* const next = w->next;
    unlink_waiter(spot, *w);
    *tail = w;
    tail = &w->next;
    w = next;
  }
  return begin_hand_over(spot, taken);
}

// A thread asleep in gate::wait_admit: a node of the spot's sleepers, on the thread's stack, with
// a condition variable of its own, so that a wake-up can reach it alone. units: its weight.
struct thread_sleeper : detail::async_waiter {
  thread_sleeper(const void* g, std::int64_t n) noexcept {
    gate = g;
    units = n;
  }
  detail::condition_variable wake;
  bool woken = false;  // taken out of the queue by a wake-up; under the spot's mutex
  // Out of the spot's sleepers, if still there; under the spot's mutex.
  void take_out(detail::parking_spot& spot) noexcept {
    if (!queued) return;
    spot.sleepers.remove(*this);
    queued = false;
  }
};

// Takes the node out of the spot's sleepers if it is still there (under the spot's mutex): when
// asked (a wait that timed out), and when the wait ends by an exception.
class sleeping_guard {
 public:
  sleeping_guard(detail::parking_spot& spot, thread_sleeper& me) noexcept : spot_(spot), me_(me) {}
  ~sleeping_guard() { leave(); }
  sleeping_guard(const sleeping_guard&) = delete;
  sleeping_guard& operator=(const sleeping_guard&) = delete;
  void leave() const noexcept { me_.take_out(spot_); }

 private:
  detail::parking_spot& spot_;
  thread_sleeper& me_;
};

// Under the spot's mutex: w leaves the queue unadmitted. The gate is alive (a queued wait needs
// it), so it may be told (and, when w was the last, wake the threads that the queue may have been
// all that turned away). Answers whether it was the last.
bool leave_unadmitted(detail::parking_spot& spot, detail::async_waiter& w) noexcept {
  const bool last = !unlink_waiter(spot, w);
  w.ops->left_unadmitted(w, last);
  return last;
}

// Under the spot's mutex, in every serving of a gate's queue (the wake-ups, close, a forked
// child's serve): if a waiter of g is queued and g is closed, every waiter of g leaves,
// unadmitted and marked closed, and they are returned chained through next, their hand-over
// begun. A waiter found means that the gate at g is alive (a queued wait keeps it so), and asking
// it whether it is closed (not trusting the caller) keeps a close whose gate was destroyed and
// another made at its address from taking the new gate's waiters.
detail::async_waiter* take_if_closed(detail::parking_spot& spot, const void* g,
                                     const detail::async_gate_ops* ops) noexcept {
  detail::async_waiter* const head = head_of(spot, g, ops);
  if (head == nullptr || !ops->closed(g)) return nullptr;
  detail::async_waiter* taken = nullptr;
  detail::async_waiter** tail = &taken;
  while (detail::async_waiter* const w = spot.queues.head(g)) {
    w->closed = true;
    leave_unadmitted(spot, *w);
    *tail = w;
    tail = &w->next;
  }
  return begin_hand_over(spot, taken);
}

// A gate destroyed with waits queued: they leave unadmitted (operation_aborted), and the gate is
// not touched (docs/gate.md, LIFETIME).
void abandon_waiters(const void* g) noexcept {
  detail::parking_spot& spot = detail::parking_for(g);
  detail::async_waiter* taken = nullptr;
  {
    std::lock_guard lock(spot.mutex);
    detail::async_waiter** tail = &taken;
    while (detail::async_waiter* const w = spot.queues.head(g)) {
      unlink_waiter(spot, *w);
      *tail = w;
      tail = &w->next;
    }
    begin_hand_over(spot, taken);
  }
  hand_over(spot, taken, false);
}

}  // namespace

const std::error_category& gate_category() noexcept {
  static const gate_error_category category;
  return category;
}

// ---- gate ------------------------------------------------------------------------------------
//
// Ordering pairs, numbered as in the comments below:
//   (1) note_done's release-CAS  synchronizes-with  (2) try_admit's acquire-CAS and
//       (3) the acquire-loads of the readers, through the word's release sequence (every other
//       write to the word is a read-modify-write, so it continues the sequence).
//   (W) no lost wake-up. A waiter, holding its spot's mutex, sets the waiting bit with an RMW
//       (W1), tries again, and only then sleeps on the spot, which releases the mutex. A call
//       that may make room clears the bit in the RMW that makes the room (W2) and, when it was
//       set, takes the spot's mutex and wakes the spot (W3). The word's modification order puts
//       W2 before W1 (then the waiter's try sees the room) or after it (then W2 reads the bit,
//       and W3 can only get the mutex once the waiter sleeps, or has left). W3 wakes the gate's
//       own sleepers, as many as the room admits, after marking the word again for the ones it
//       leaves asleep (async_access::wake_sleepers); a woken one that must wait again sets the bit again.
//       Clearing the bit in W2 itself (not later, in W3) means that after W2 the call touches
//       nothing of the gate, only the spot, which outlives every gate: the thread that W2 admits
//       may destroy the gate at once, as with a semaphore that signals completion.
//   (C) close: its CAS (C1, a release, and a W2: it clears the bit) sets the cap to 0; a waiter
//       that then fails to admit reads closed() (C2, an acquire), so what the closer did before
//       close() is visible to the waiter that it turned away. A waiter's W1 comes before C1 in
//       the word's order (C1 reads the bit and wakes the spot: W3) or after it (its try and its
//       closed() read the closed word). An async_wait's queue mark (an RMW, C3, an acquire)
//       likewise comes before C1 (close then visits the spot and takes the waiter) or after it
//       (async_wait reads the closed word and hands its own waiter over, closed). The waiters that
//       close takes are ordered after it by the spot's mutex.
//   (A) async waiters (docs/asio.md): the grant loop, under the spot's mutex, plays the waiter's
//       part: it sets the bit with an RMW (A1) before its last try for the head waiter, so W2
//       either comes before A1 (the try sees the room) or reads the bit (W3 runs the loop again
//       once this one lets the mutex go). W3 touches the gate only when an async waiter or a
//       sleeping thread of it is queued on the spot, which the gate must outlive.
// Everything else is relaxed: the word carries no data besides itself, and each RMW reads the
// latest value in the word's modification order whatever its ordering. The spot's mutex orders
// W3 against the waiter; the word needs nothing more for it.

// The queue's access to a gate: the grant loop's admission (the cap alone: it serves the queue
// that the mark holds room for), the queue mark, the statistics of its waiters, and the wake-up
// of its sleeping threads.
struct gate::async_access {
  static void wake_sleepers(detail::parking_spot& spot, const gate* g) noexcept;  // below
  // The grant loop's admission of n: within the cap, whatever the queue mark; before its last
  // try it marks the word (A1). A waiter admitted here waited (it was queued). It holds the
  // spot's mutex: a lost CAS tries again at once, without backing off.
  static bool take(gate& g, std::int64_t n) noexcept {
    const auto admits = [&g, n] {
      std::uint64_t word = g.word_.load(std::memory_order_relaxed);
      bool admitted;
      while (!g.enter_try<true>(n, word, admitted)) {
      }
      return admitted;
    };
    if (!admits()) {
      g.word_.fetch_or(waiting_bit, std::memory_order_relaxed);  // (A1)
      if (!admits()) return false;
    }
    g.wait_ended(detail::wait_end::admitted, true);
    return true;
  }
  // Under the spot's mutex. Returns the taken waiters. Once no async waiter of g is left, the
  // threads of g that the queue mark turned away are woken, as many as the room admits.
  static detail::async_waiter* grant(detail::parking_spot& spot, const gate* g) noexcept {
    gate& mutable_g = *const_cast<gate*>(g);
    bool found = false, left = false;
    detail::async_waiter* taken =
        sluice::grant(spot, g, &ops, [&](std::int64_t n) { return take(mutable_g, n); }, found, left);
    if (found && !left) clear_queue_mark(mutable_g);  // no waiter of g met: g may be gone, touch nothing of it
    if (!left) wake_sleepers(spot, g);                 // touches g only if a thread of g sleeps here
    return taken;
  }

  // The queue mark is set and cleared only under the spot's mutex, which orders it against the
  // queue; relaxed, as W1: the word carries no data.
  // Answers whether the gate was closed.
  static bool set_queue_mark(gate& g) noexcept {
    // (C3) acquire: a wait that finds the gate closed here completes closed having seen what the
    // closer did before close(), as a thread does through C2 (pairs with C1)
    return closed_word(g.word_.fetch_or(queue_bit, std::memory_order_acquire));
  }
  static void clear_queue_mark(gate& g) noexcept { g.word_.fetch_and(~queue_bit, std::memory_order_relaxed); }
  static void left_unadmitted(const detail::async_waiter& w, bool last) noexcept {
    gate& g = *static_cast<gate*>(const_cast<void*>(w.gate));
    g.wait_ended(w.closed ? detail::wait_end::closed
                 : w.timed_out ? detail::wait_end::timed_out
                               : detail::wait_end::cancelled,
                 true);
    if (last) {
      clear_queue_mark(g);
      wake_sleepers(detail::parking_for(&g), &g);  // the spot's mutex is held: w was queued there
    }
  }
  static void serve(const void* g) noexcept { wake(static_cast<const gate*>(g)); }
  // Relaxed: under the spot's mutex, which close takes after its CAS; a close not seen yet comes
  // to the spot afterwards (the waiters' mark is set) and takes them then.
  static bool is_closed(const void* g) noexcept {
    return closed_word(static_cast<const gate*>(g)->word_.load(std::memory_order_relaxed));
  }
  static constexpr detail::async_gate_ops ops{&left_unadmitted, &serve, &is_closed};
};

gate::gate(std::int64_t cap) noexcept : word_(pack(clamp_cap(cap), 0)), tally_(detail::tally_take()) {}

// Relaxed: the calls that queued a waiter happen-before the destruction (the caller's duty, as
// for any object); a mark that a grant on another thread has just cleared only costs a look at
// the spot, where the waiters are found gone.
gate::~gate() {
  if ((word_.load(std::memory_order_relaxed) & queue_bit) != 0) abandon_waiters(this);
  detail::tally_give_back(tally_);
}

// The unit and weighted calls are inline, in the header (scripts/instructions.sh counts both
// pairs); try_admit(n) comes here for a weight outside [1, gate_limit]. One of zero (or below) is
// admitted at once, counting nothing, unless the gate is closed; one above gate_limit passes
// every cap, so it is refused.
bool gate::try_admit_outside(std::int64_t n) noexcept {
  const std::uint64_t seen = word_.load(std::memory_order_acquire);  // (3), as has_capacity's
  if (n > 0 || closed_word(seen)) return refused(seen);
  return admitted_by_try();
}

bool gate::refused(std::uint64_t word) noexcept {
  const detail::tally k = closed_word(word) ? detail::tally::closed : detail::tally::refused;
  if (!detail::tally_here(tally_, k)) count(k);
  return false;
}

void gate::count(detail::tally k) noexcept {
  if (detail::tally_reach(tally_) && detail::tally_here(tally_, k)) return;
  counts_.tallied[static_cast<unsigned>(k)].fetch_add(1, std::memory_order_relaxed);
}

void gate::raise_peak(std::int64_t count) const noexcept {
  std::int64_t seen = peak_.load(std::memory_order_relaxed);
  while (seen < count && !peak_.compare_exchange_weak(seen, count, std::memory_order_relaxed)) {
  }
}

// A call whose CAS lost to another call's waits before it reads the word again, so that the
// winner runs on with the word's cache line in its core: two threads that take turns at every
// call pass the line between their cores at every step, each a cache miss, while one that stands
// aside for a few microseconds lets the other make a hundred calls that hit (docs/gate.md,
// CONTENTION). The wait is per thread and spans its calls: a thread that loses again within
// 10 us of its last wait's end waits twice as long, from 128-256 ns (about a call's time: a
// collision now and then, between threads that do work between their calls, costs little) up
// to 16-32 us, jittered so that the losers do not come back together; one that has not lost for
// longer starts again at the shortest. A loss means that another call made progress: the gate
// stays lock-free.
namespace {
struct backoff {
  std::chrono::steady_clock::time_point last_end{};
  int level = 0;
};
constinit thread_local backoff tls_backoff __attribute__((tls_model("initial-exec"))){};

// Waits (see above), then reads the word again.
std::uint64_t back_off(const detail::atomic<std::uint64_t>& word) noexcept {
  if constexpr (detail::contention_backs_off) {
    using clock = std::chrono::steady_clock;
    const clock::time_point now = clock::now();
    backoff& b = tls_backoff;
    b.level = now - b.last_end < std::chrono::microseconds(10) ? std::min(b.level + 1, 7) : 0;
    const std::chrono::nanoseconds base{128 << b.level};
    // The jitter, in [0, base): the clock's nanoseconds, mixed (Fibonacci hashing), as ten bits.
    const auto mixed = static_cast<std::uint64_t>(now.time_since_epoch().count()) * 0x9e3779b97f4a7c15u;
    b.last_end = now + base + base * static_cast<long>(mixed >> 54) / 1024;
    do {
      detail::cpu_relax();
    } while (clock::now() < b.last_end);
  }
  return word.load(std::memory_order_relaxed);
}
}  // namespace

bool gate::enter_contended(std::int64_t n, std::uint64_t& word) noexcept {
  bool admitted;
  do {
    word = back_off(word_);
  } while (!enter_try<false>(n, word, admitted));
  return admitted;
}

bool gate::try_enter_contended(std::int64_t n, std::uint64_t word) noexcept {
  return enter_contended(n, word) ? admitted_by_try() : refused(word);
}

bool gate::enter(std::int64_t n, bool backs_off) noexcept {
  std::uint64_t word = word_.load(std::memory_order_relaxed);
  bool admitted;
  while (!enter_try<false>(n, word, admitted)) {
    if (backs_off) word = back_off(word_);
  }
  return admitted;
}

void gate::leave_contended(std::int64_t n, std::uint64_t word) noexcept {
  do {
    word = back_off(word_);
  } while (!leave_try(n, word));
}

void gate::submit_contended(std::int64_t n, std::uint64_t word) noexcept {
  do {
    word = back_off(word_);
  } while (!submit_try(n, word));
}

bool gate::admit_now(std::int64_t n) noexcept {
  if (n <= 0) {
    if (closed()) return false;  // (C2)
  } else {
    if (n > gate_limit || !enter(n, true)) return false;
  }
  return admitted_by_try();
}

bool gate::admit_now_contended(std::int64_t n, std::uint64_t word) noexcept {
  return enter_contended(n, word) && admitted_by_try();  // no room: no refusal counted
}

void gate::wait_began() noexcept { counts_.waiting.fetch_add(1, std::memory_order_relaxed); }

void gate::wait_ended(detail::wait_end end, bool waited) noexcept {
  if (waited) counts_.waiting.fetch_sub(1, std::memory_order_relaxed);
  switch (end) {
    case detail::wait_end::admitted: counts_.after_wait.fetch_add(1, std::memory_order_relaxed); break;
    case detail::wait_end::timed_out: counts_.timed_out.fetch_add(1, std::memory_order_relaxed); break;
    case detail::wait_end::closed: counts_.wait_closed.fetch_add(1, std::memory_order_relaxed); break;
    case detail::wait_end::cancelled: counts_.cancelled.fetch_add(1, std::memory_order_relaxed); break;
  }
}

bool gate::wait_admit(std::int64_t n, std::chrono::steady_clock::time_point deadline) {
  // Each try that finds no room asks whether the gate is closed (C2): then the wait ends. A try
  // made holding the spot's mutex does not back off: every gate of the spot would wait with it.
  bool locked = false;
  const auto attempt = [this, n, &locked] {
    if (enter(n, !locked)) return true;
    if (closed()) throw gate_closed();
    return false;
  };
  // Room often comes within a few hundred nanoseconds (another thread's note_done), far sooner
  // than a sleep and a wake-up in the kernel take: try a while first, as std::counting_semaphore
  // does, pausing, then yielding the core.
  for (int i = 0; i < 32; ++i) {
    if (i < 16) {
      detail::cpu_relax();
    } else {
      std::this_thread::yield();  // may be long on a busy machine: mind the deadline
      if (std::chrono::steady_clock::now() >= deadline) return attempt();
    }
    if (attempt()) return true;
  }
  detail::parking_spot& spot = detail::parking_for(this);
  std::unique_lock lock(spot.mutex);
  locked = true;
  thread_sleeper me(this, n);
  const sleeping_guard guard(spot, me);  // an exception leaves no node of this stack queued
  for (;;) {
    word_.fetch_or(waiting_bit, std::memory_order_relaxed);  // (W1)
    if (attempt()) return true;
    me.woken = false;
    spot.sleepers.push(me);
    me.queued = true;
    bool timed_out = false;
    while (!me.woken && !timed_out) {  // a wake-up takes it out of the queue, then sets woken
      if (deadline == std::chrono::steady_clock::time_point::max()) {
        me.wake.wait(lock);
      } else {
        timed_out = me.wake.wait_until(lock, deadline) == std::cv_status::timeout;
      }
    }
    if (!me.woken) {
      guard.leave();
      return attempt();
    }
  }
}

// (W3), given the gate's address alone: the mutex is taken and let go before the wake, so that a
// waiter between its W1 and its sleep is asleep (or gone) by the time the wake comes. Async
// waiters of g queued on the spot are admitted first, in order, while there is room (A), or, the
// gate closed, all leave closed (C).
void gate::wake(const gate* g) noexcept {
  detail::parking_spot& spot = detail::parking_for(g);
  detail::async_waiter* taken = nullptr;
  detail::async_waiter* closed = nullptr;
  {
    std::lock_guard lock(spot.mutex);
    if (!spot.queues.empty()) closed = take_if_closed(spot, g, &async_access::ops);
    if (closed == nullptr && !spot.queues.empty()) {
      taken = async_access::grant(spot, g);  // which wakes the threads once no async waiter is left
    } else {
      async_access::wake_sleepers(spot, g);
    }
  }
  hand_over(spot, closed, false);
  hand_over(spot, taken, true);
}

// Under the spot's mutex: wakes g's sleeping threads, in the order they went to sleep (a woken
// thread that sleeps again goes to the back), as many as the room admits
// (a thread whose weight does not fit is passed over, as threads are not queued: docs/gate.md,
// WEIGHTS), or, the gate closed, all of them; none while async waiters of g are queued, which go
// first. A woken thread is out of the queue and tries again; one that finds no room (another
// thread took it) sleeps again, marking the word again first. It touches g only when a thread of
// it sleeps here, which keeps g alive.
//
// The room is read in a fetch_or that marks the word again for the threads left asleep (W1 on
// their behalf, relaxed as W1): the call whose W2 cleared the mark and brought it here may have
// woken only some of them, and a later call that makes room must come back. A call whose room
// came before this RMW in the word's order is counted in it; one after it reads the mark (W3).
// A thread woken and not yet running is not subtracted, so a later wake-up may wake more than
// its room (as many more as such threads): each finds no room and sleeps again, harmless.
void gate::async_access::wake_sleepers(detail::parking_spot& spot, const gate* g) noexcept {
  detail::async_waiter* s = spot.sleepers.head(g);
  if (s == nullptr) return;
  const std::uint64_t word = const_cast<gate*>(g)->word_.fetch_or(waiting_bit, std::memory_order_relaxed);
  const bool closed = closed_word(word);
  if ((word & queue_bit) != 0 && !closed) return;  // the async waiters' turn
  std::int64_t room = closed ? gate_limit : std::max<std::int64_t>(cap_of(word) - count_of(word), 0);
  while (s != nullptr && room > 0) {
    detail::async_waiter* const next = s->next;
    if (closed || s->units <= room) {
      if (!closed) room -= s->units;
      thread_sleeper& t = static_cast<thread_sleeper&>(*s);
      t.take_out(spot);
      t.woken = true;
      t.wake.notify_one();  // under the mutex: the thread may leave, and its node go, once it is let go
    }
    s = next;
  }
}

bool gate::has_capacity() const noexcept {
  const std::uint64_t word = word_.load(std::memory_order_acquire);  // (3)
  return count_of(word) < admit_limit(word);
}

std::int64_t gate::in_flight() const noexcept {
  return count_of(word_.load(std::memory_order_acquire));  // (3)
}

std::int64_t gate::cap() const noexcept {
  return cap_of(word_.load(std::memory_order_relaxed));  // the cap publishes nothing
}

// A closed gate stays closed: its cap stays 0 and the word unchanged.
void gate::set_cap(std::int64_t cap) noexcept {
  const std::uint64_t new_cap = pack(clamp_cap(cap), 0);
  std::uint64_t word = word_.load(std::memory_order_relaxed);
  do {
    if (closed_word(word)) return;
  } while (!word_.compare_exchange_weak(word, new_cap | (word & (queue_bit | count_mask)),  // (W2)
                                        std::memory_order_relaxed));
  if ((word & waiting_bit) != 0) wake(this);  // (W3)
}

void gate::adjust(pressure p, std::int64_t max_cap) noexcept {
  std::uint64_t word = word_.load(std::memory_order_relaxed);
  do {
    if (closed_word(word)) return;
  } while (!word_.compare_exchange_weak(
      word, pack(next_cap(cap_of(word), p, max_cap), word & (queue_bit | count_mask)),  // (W2)
      std::memory_order_relaxed));
  if ((word & waiting_bit) != 0) wake(this);  // (W3)
}

void gate::close() noexcept {
  std::uint64_t word = word_.load(std::memory_order_relaxed);
  while (!word_.compare_exchange_weak(word, word & (queue_bit | count_mask),
                                      std::memory_order_release,  // (C1), (W2)
                                      std::memory_order_relaxed)) {
  }
  // (W3): the async waiters, all of them, leave closed, and the threads wake to find it closed
  if ((word & (waiting_bit | queue_bit)) != 0) wake(this);
}

bool gate::closed() const noexcept {
  return closed_word(word_.load(std::memory_order_acquire));  // (C2)
}

// Each count is read once, relaxed: exact for every call that happened before stats() (docs/gate.md,
// STATISTICS). The peak is raised after the CAS that reached it, so the count read here may be
// above it for a moment: the snapshot shows the higher, and raises the peak to it, so that a
// later snapshot never shows less.
gate_stats gate::stats() const noexcept {
  std::uint64_t tallied[detail::tally_kinds];
  detail::tally_sum(tally_, tallied);
  for (unsigned k = 0; k < detail::tally_kinds; ++k) tallied[k] += counts_.tallied[k].load(std::memory_order_relaxed);
  const auto get = [](const auto& c) { return c.load(std::memory_order_relaxed); };
  gate_stats s;
  s.admitted_after_wait = get(counts_.after_wait);
  s.admitted = tallied[static_cast<unsigned>(detail::tally::admitted)] + s.admitted_after_wait;
  s.refused = tallied[static_cast<unsigned>(detail::tally::refused)];
  s.timed_out = get(counts_.timed_out);
  s.cancelled = get(counts_.cancelled);
  s.closed = tallied[static_cast<unsigned>(detail::tally::closed)] + get(counts_.wait_closed);
  s.waiting = get(counts_.waiting);
  s.in_flight = count_of(word_.load(std::memory_order_acquire));  // (3), as in_flight()'s
  raise_peak(s.in_flight);
  s.peak_in_flight = std::max(get(peak_), s.in_flight);
  return s;
}

// ---- mutex_gate ------------------------------------------------------------------------------

mutex_gate::mutex_gate(std::int64_t cap) noexcept : cap_(clamp_cap(cap)) {}

// The queue's access to a mutex_gate, which counts its queued waiters exactly (under its mutex):
// while any is queued, try_admit and the threads' waits refuse, as gate's queue mark makes them.
struct mutex_gate::async_access {
  // Under g.mutex_: one waiter fewer queued; when none is left, the threads that the queue turned
  // away may find room.
  static void dequeued(mutex_gate& g) noexcept {
    --g.stats_.waiting;
    if (--g.async_queued_ == 0 && g.waiting_ > 0) g.room_.notify_all();
  }
  static bool take(mutex_gate& g, std::int64_t n) noexcept {
    std::lock_guard lock(g.mutex_);
    if (g.closed_ || g.in_flight_ + n > g.cap_) return false;
    g.in_flight_ += n;
    g.raise_peak();
    ++g.stats_.admitted;
    ++g.stats_.admitted_after_wait;
    dequeued(g);
    return true;
  }
  static void left_unadmitted(const detail::async_waiter& w, bool /*last*/) noexcept {
    mutex_gate& m = *static_cast<mutex_gate*>(const_cast<void*>(w.gate));
    std::lock_guard lock(m.mutex_);
    ++(w.closed ? m.stats_.closed : w.timed_out ? m.stats_.timed_out : m.stats_.cancelled);
    dequeued(m);
  }
  // Under the spot's mutex; take() touches g only once a waiter of it was found, else g may be gone.
  static detail::async_waiter* grant(detail::parking_spot& spot, const void* g) noexcept {
    bool found = false, left = false;
    return sluice::grant(
        spot, g, &ops, [g](std::int64_t n) { return take(*static_cast<mutex_gate*>(const_cast<void*>(g)), n); }, found,
        left);
  }
  static void wake(const void* g) noexcept {
    detail::parking_spot& spot = detail::parking_for(g);
    detail::async_waiter* taken = nullptr;
    detail::async_waiter* closed = nullptr;
    {
      std::lock_guard lock(spot.mutex);
      closed = take_if_closed(spot, g, &ops);
      if (closed == nullptr) taken = grant(spot, g);
    }
    hand_over(spot, closed, false);
    hand_over(spot, taken, true);
  }
  // Under the spot's mutex, a waiter of g queued (so g is alive).
  static bool is_closed(const void* g) noexcept {
    const mutex_gate& m = *static_cast<const mutex_gate*>(g);
    std::lock_guard lock(m.mutex_);
    return m.closed_;
  }
  static constexpr detail::async_gate_ops ops{&left_unadmitted, &wake, &is_closed};
};

mutex_gate::~mutex_gate() {
  bool queued = false;
  {
    std::lock_guard lock(mutex_);
    queued = async_queued_ > 0;
  }
  if (queued) abandon_waiters(this);
}

// Under mutex_, after in_flight_ rose.
void mutex_gate::raise_peak() noexcept { stats_.peak_in_flight = std::max(stats_.peak_in_flight, in_flight_); }

void mutex_gate::note_submitted() noexcept { note_submitted(1); }

void mutex_gate::note_submitted(std::int64_t n) noexcept {
  std::lock_guard lock(mutex_);
  in_flight_ += std::min(weight(n), gate_limit - in_flight_);
  raise_peak();
}

// After a change that may make room: wakes the waiters, if any. Under the mutex, so that no
// waiter can return, and destroy the gate, before the call is done with it.
// Async waiters are admitted after the mutex is let go, on the spot (a queued one keeps the gate
// alive; without one, nothing of the gate is touched after the unlock).
void mutex_gate::wake_if_waiting(std::unique_lock<std::mutex>& lock) noexcept {
  if (waiting_ > 0) room_.notify_all();
  const bool async = async_queued_ > 0;
  lock.unlock();
  if (async) async_access::wake(this);
}

void mutex_gate::note_done() noexcept { note_done(1); }

void mutex_gate::note_done(std::int64_t n) noexcept {
  std::unique_lock lock(mutex_);
  in_flight_ -= std::min(weight(n), in_flight_);
  wake_if_waiting(lock);
}

bool mutex_gate::try_admit() noexcept { return try_admit(1); }

bool mutex_gate::try_admit(std::int64_t n) noexcept {
  std::lock_guard lock(mutex_);
  if (closed_) {
    ++stats_.closed;
    return false;
  }
  if (n <= 0) {
    ++stats_.admitted;
    return true;
  }
  if (n > gate_limit || in_flight_ + n > cap_ || async_queued_ > 0) {
    ++stats_.refused;
    return false;
  }
  in_flight_ += n;
  raise_peak();
  ++stats_.admitted;
  return true;
}

bool mutex_gate::admit_now(std::int64_t n) noexcept {
  std::lock_guard lock(mutex_);
  if (closed_ || n > gate_limit || (n > 0 && (in_flight_ + n > cap_ || async_queued_ > 0))) return false;
  if (n > 0) {
    in_flight_ += n;
    raise_peak();
  }
  ++stats_.admitted;
  return true;
}

void mutex_gate::wait_began() noexcept {
  std::lock_guard lock(mutex_);
  ++stats_.waiting;
}

void mutex_gate::wait_ended(detail::wait_end end, bool waited) noexcept {
  std::lock_guard lock(mutex_);
  if (waited) --stats_.waiting;
  switch (end) {
    case detail::wait_end::admitted: ++stats_.admitted, ++stats_.admitted_after_wait; break;
    case detail::wait_end::timed_out: ++stats_.timed_out; break;
    case detail::wait_end::closed: ++stats_.closed; break;
    case detail::wait_end::cancelled: ++stats_.cancelled; break;
  }
}

bool mutex_gate::wait_admit(std::int64_t n, std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(mutex_);
  if (closed_) throw gate_closed();
  ++waiting_;
  const auto room = [&] { return closed_ || (in_flight_ + n <= cap_ && async_queued_ == 0); };
  bool admitted = true;
  if (deadline == std::chrono::steady_clock::time_point::max()) {
    room_.wait(lock, room);
  } else {
    admitted = room_.wait_until(lock, deadline, room);
  }
  --waiting_;
  if (closed_) throw gate_closed();
  if (admitted) {
    in_flight_ += n;
    raise_peak();
  }
  return admitted;
}

bool mutex_gate::has_capacity() const noexcept {
  std::lock_guard lock(mutex_);
  return !closed_ && in_flight_ < cap_ && async_queued_ == 0;
}

std::int64_t mutex_gate::in_flight() const noexcept {
  std::lock_guard lock(mutex_);
  return in_flight_;
}

std::int64_t mutex_gate::cap() const noexcept {
  std::lock_guard lock(mutex_);
  return closed_ ? 0 : cap_;
}

void mutex_gate::set_cap(std::int64_t cap) noexcept {
  std::unique_lock lock(mutex_);
  if (closed_) return;
  cap_ = clamp_cap(cap);
  wake_if_waiting(lock);
}

void mutex_gate::adjust(pressure p, std::int64_t max_cap) noexcept {
  std::unique_lock lock(mutex_);
  if (closed_) return;
  cap_ = next_cap(cap_, p, max_cap);
  wake_if_waiting(lock);
}

// The async waiters leave closed first, after the mutex is let go (a queued one keeps the gate
// alive), and the last one to leave wakes the threads (dequeued), under the mutex; with none
// queued, the threads are woken here. Either way they find it closed.
void mutex_gate::close() noexcept {
  std::unique_lock lock(mutex_);
  closed_ = true;
  const bool async = async_queued_ > 0;
  if (!async && waiting_ > 0) room_.notify_all();
  lock.unlock();
  if (async) async_access::wake(this);
}

bool mutex_gate::closed() const noexcept {
  std::lock_guard lock(mutex_);
  return closed_;
}

// Under the mutex: one snapshot, exact.
gate_stats mutex_gate::stats() const noexcept {
  std::lock_guard lock(mutex_);
  gate_stats s = stats_;
  s.in_flight = in_flight_;
  return s;
}

// ---- async waiters (docs/asio.md) ------------------------------------------------------------

namespace detail {

void async_wait(gate& g, async_waiter& w) noexcept {
  parking_spot& spot = parking_for(&g);
  async_waiter* taken = nullptr;
  bool closed = false;
  {
    std::lock_guard lock(spot.mutex);
    w.ops = &gate::async_access::ops;
    link_waiter(spot, w);
    g.wait_began();  // it waits from here on, until it leaves the queue (async_access)
    // The mark's RMW reads a closed word (then w leaves at once, closed) or comes before close's
    // CAS, which then finds the mark and takes w (C).
    closed = gate::async_access::set_queue_mark(g);
    if (closed) {
      w.closed = true;
      leave_unadmitted(spot, w);
      begin_hand_over(spot, &w);
    } else {
      taken = gate::async_access::grant(spot, &g);
    }
  }
  if (closed) {
    hand_over(spot, &w, false);
    return;
  }
  hand_over(spot, taken, true);
}

void async_wait(mutex_gate& g, async_waiter& w) noexcept {
  parking_spot& spot = parking_for(&g);
  async_waiter* taken = nullptr;
  bool closed = false;
  {
    std::lock_guard lock(spot.mutex);
    w.ops = &mutex_gate::async_access::ops;
    link_waiter(spot, w);
    {
      std::lock_guard gate_lock(g.mutex_);  // before the loop's tries: no lost wake-up
      ++g.async_queued_;
      ++g.stats_.waiting;
      closed = g.closed_;  // close() sets it before it looks at the count
    }
    if (closed) {
      w.closed = true;
      leave_unadmitted(spot, w);
      begin_hand_over(spot, &w);
    } else {
      taken = mutex_gate::async_access::grant(spot, &g);
    }
  }
  if (closed) {
    hand_over(spot, &w, false);
    return;
  }
  hand_over(spot, taken, true);
}

// A waiter that leaves unadmitted may have held back the ones behind it (a head whose weight did
// not fit): when any is left, the gate's queue is served again, after the spot's mutex is let go
// (serve touches the gate only through a waiter of it still queued).
bool async_cancel(const void* g, async_waiter* const* handle, bool timed_out) noexcept {
  parking_spot& spot = parking_for(g);
  async_waiter* w = nullptr;
  const async_gate_ops* ops = nullptr;
  bool last = false;
  {
    std::lock_guard lock(spot.mutex);
    w = *handle;  // non-null only while queued (link_waiter, unlink_waiter)
    if (w == nullptr) return false;
    ops = w->ops;
    w->timed_out = timed_out;
    last = leave_unadmitted(spot, *w);
    begin_hand_over(spot, w);
  }
  hand_over(spot, w, false);  // w may be gone from here on
  if (!last) ops->serve(g);
  return true;
}

bool async_withdraw(async_waiter& w) noexcept {
  parking_spot& spot = parking_for(w.gate);
  bool last = false;
  {
    std::lock_guard lock(spot.mutex);
    if (!w.queued) return false;
    last = leave_unadmitted(spot, w);
  }
  if (!last) w.ops->serve(w.gate);
  return true;
}

}  // namespace detail
}  // namespace sluice
