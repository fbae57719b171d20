// The gate's queue of async waiters (lib/gate.cpp, docs/asio.md) under Relacy: the grant loop's
// no-lost-wake-up argument (A), the queue mark that turns threads away while a waiter is queued,
// and cancellation racing a wake-up. The waiters are the nodes that <sluice/asio.hpp> queues,
// without Asio: their hand_over records what happened.
#include <optional>

#include "check.hpp"
#include "../doctest.hpp"
#include "spot.hpp"
#include "sluice/detail/async_wait.hpp"
#include "sluice/gate.hpp"

namespace {

using namespace sluice_relacy;

// The spot's queue holds nobody.
bool queue_empty() { return spot->queues.empty(); }

// Each check's start: a fresh spot and a full gate of cap 1, which only a note_done opens.
void full_gate(std::optional<sluice::gate>& gate) {
  spot.emplace();
  gate.emplace(1);
  gate->note_submitted();
}

// Each check's end, after its assertions.
void end_check(std::optional<sluice::gate>& gate) {
  gate.reset();
  spot.reset();
}

// An async wait as asio_admit.hpp makes one: a node the gate's spot links, and what its
// hand-over saw.
struct waiter : sluice::detail::async_waiter {
  rl::var<int> finished;   // how many times it was handed over
  rl::var<bool> admitted;  // what the last one said
  rl::var<int>* payload = nullptr;
  // When set, the handler counts itself in, then drops its permit (note_done) as an Asio handler
  // that cannot be posted is dropped: in discard, once the hand-over has ended.
  sluice::gate* release_on_admit = nullptr;
  rl::atomic<int>* held = nullptr;
  sluice::detail::async_waiter* handle_slot = nullptr;  // the canceller's handle

  void start(sluice::gate& g, bool cancellable) {
    finished($) = 0;
    admitted($) = false;
    gate = &g;
    handle = cancellable ? &handle_slot : nullptr;
    handle_slot = prev = next = tail = bucket_next = nullptr;
    bucket_link = nullptr;
    queued = false;
    closed = false;
    units = 1;
    hand_over = [](sluice::detail::async_waiter* node, bool ok) noexcept {
      waiter& w = *static_cast<waiter*>(node);
      w.finished($) = w.finished($) + 1;
      w.admitted($) = ok;
      if (ok && w.payload != nullptr) RL_ASSERT((*w.payload)($) == 1);  // what note_done published
      if (!ok && w.closed && w.payload != nullptr) RL_ASSERT((*w.payload)($) == 1);  // what close published
      if (ok && w.release_on_admit != nullptr) {
        RL_ASSERT((*w.held)($).fetch_add(1, rl::mo_relaxed) == 0);  // alone in the gate
        (*w.held)($).fetch_sub(1, rl::mo_relaxed);
        return false;
      }
      return true;
    };
    discard = [](sluice::detail::async_waiter* node, bool) noexcept {
      static_cast<waiter*>(node)->release_on_admit->note_done();
    };
  }
};

// (A): a coroutine waits on a full gate; a note_done() or a raised cap on another thread must
// admit it, whichever of the two gets the spot's mutex first. A lost wake-up leaves the waiter
// queued at the end. The payload checks that the admission sees what the finisher wrote.
template <bool raise_cap>
struct async_wake : rl::test_suite<async_wake<raise_cap>, 2> {
  std::optional<sluice::gate> gate;
  waiter w;
  rl::var<int> payload;

  void before() {
    full_gate(gate);
    payload($) = 0;
    w.payload = raise_cap ? nullptr : &payload;
    w.start(*gate, false);
  }
  void thread(unsigned index) {
    if (index == 0) {
      sluice::detail::async_wait(*gate, w);
    } else {
      payload($) = 1;
      if (raise_cap) {
        gate->set_cap(2);
      } else {
        gate->note_done();
      }
    }
  }
  void after() {
    RL_ASSERT(w.finished($) == 1 && w.admitted($) && !w.queued && queue_empty());
    RL_ASSERT(gate->in_flight() == (raise_cap ? 2 : 1));
    gate->set_cap(3);
    RL_ASSERT(gate->try_admit());  // the queue mark left with the waiter
    end_check(gate);
  }
};

// The queue mark: while a coroutine is queued, try_admit and has_capacity refuse, so that the
// room a note_done makes goes to it. The waiter's own thread makes that room after queueing it
// (nobody else can, so it is queued for certain); the other thread must never get in.
struct async_before_try : rl::test_suite<async_before_try, 2> {
  std::optional<sluice::gate> gate;
  waiter w;

  void before() {
    full_gate(gate);
    w.start(*gate, false);
  }
  void thread(unsigned index) {
    if (index == 0) {
      sluice::detail::async_wait(*gate, w);  // queued: the gate is full
      gate->note_done();                     // the room, which must go to w
    } else {
      RL_ASSERT(!gate->has_capacity());
      RL_ASSERT(!gate->try_admit());  // never overtakes the queued waiter
    }
  }
  void after() {
    RL_ASSERT(w.finished($) == 1 && w.admitted($) && queue_empty());
    RL_ASSERT(gate->in_flight() == 1);
    end_check(gate);
  }
};

// A thread's admit() behind a queued coroutine whose handler gives its admission back at once:
// the admission reaches the thread (or, if the thread came first, the thread's reaches the
// coroutine). Neither may wait for good (a thread asleep is a deadlock to Relacy, a waiter still
// queued fails after()), and the count never passes the cap of 1.
struct async_then_thread : rl::test_suite<async_then_thread, 3> {
  std::optional<sluice::gate> gate;
  waiter w;
  rl::atomic<int> held;  // the test's own count of admissions held

  void before() {
    full_gate(gate);
    held($) = 1;
    w.release_on_admit = &*gate;
    w.held = &held;
    w.start(*gate, false);
  }
  void thread(unsigned index) {
    if (index == 0) {
      sluice::detail::async_wait(*gate, w);
    } else if (index == 1) {
      held($).fetch_sub(1, rl::mo_relaxed);  // the admission made in before()
      gate->note_done();
    } else {
      gate->admit();
      RL_ASSERT(held($).fetch_add(1, rl::mo_relaxed) == 0);  // alone in the gate
      held($).fetch_sub(1, rl::mo_relaxed);
      gate->note_done();  // if it came first, the queued waiter's turn
    }
  }
  void after() {
    RL_ASSERT(w.finished($) == 1 && w.admitted($) && queue_empty());
    RL_ASSERT(gate->in_flight() == 0);
    RL_ASSERT(gate->try_admit());  // the queue mark left with the waiter
    end_check(gate);
  }
};

// Cancellation racing a wake-up: whichever takes the node from the queue first owns it. hand_over
// runs exactly once; a cancelled wait counted nothing, an admitted one holds its admission; the
// queue mark is gone either way.
struct async_cancel_race : rl::test_suite<async_cancel_race, 3> {
  std::optional<sluice::gate> gate;
  waiter w;

  void before() {
    full_gate(gate);
    w.start(*gate, true);
  }
  void thread(unsigned index) {
    if (index == 0) {
      sluice::detail::async_wait(*gate, w);
    } else if (index == 1) {
      gate->note_done();
    } else {
      sluice::detail::async_cancel(&*gate, &w.handle_slot);
    }
  }
  void after() {
    // A cancel that came before the wait was queued found nothing: the wait was then admitted.
    RL_ASSERT(w.finished($) == 1 && !w.queued && queue_empty() && w.handle_slot == nullptr);
    RL_ASSERT(gate->in_flight() == (w.admitted($) ? 1 : 0));
    gate->set_cap(2);
    RL_ASSERT(gate->try_admit());  // the queue mark left with the waiter
    end_check(gate);
  }
};

// No admission lost: two coroutines queued in order, the first cancelled while a note_done
// makes room. The one admission goes to exactly one of them, the first only if the room came
// before its cancellation, otherwise the second (FIFO: never the second while the first waits).
struct async_cancel_head : rl::test_suite<async_cancel_head, 3> {
  std::optional<sluice::gate> gate;
  waiter first, second;

  void before() {
    full_gate(gate);
    first.start(*gate, true);
    second.start(*gate, false);
  }
  void thread(unsigned index) {
    if (index == 0) {
      sluice::detail::async_wait(*gate, first);
      sluice::detail::async_wait(*gate, second);
    } else if (index == 1) {
      gate->note_done();
    } else {
      sluice::detail::async_cancel(&*gate, &first.handle_slot);
    }
  }
  void after() {
    RL_ASSERT(first.finished($) == 1);
    if (first.admitted($)) {  // the second still waits: take it out, unfinished
      RL_ASSERT(second.finished($) == 0);
      RL_ASSERT(sluice::detail::async_withdraw(second));
    } else {  // the room passed on to the second
      RL_ASSERT(second.finished($) == 1 && second.admitted($));
    }
    RL_ASSERT(gate->in_flight() == 1);  // one admission: not lost, not doubled
    RL_ASSERT(queue_empty());
    gate->set_cap(2);
    RL_ASSERT(gate->try_admit());  // the queue mark left with the last waiter
    end_check(gate);
  }
};

// Two gates on one spot (the checks' one spot is every gate's): each gate's wake-up and
// cancellation reach its own waiters alone. A's note_done admits A's waiter, never B's; B's
// cancellation takes B's waiter, never A's; each queue's head hands its place on as it leaves.
struct async_two_gates : rl::test_suite<async_two_gates, 3> {
  std::optional<sluice::gate> a, b;
  waiter wa, wb1, wb2;

  void before() {
    spot.emplace();
    a.emplace(1);
    b.emplace(1);
    a->note_submitted();
    b->note_submitted();
    wa.start(*a, false);
    wb1.start(*b, true);
    wb2.start(*b, false);
  }
  void thread(unsigned index) {
    if (index == 0) {
      sluice::detail::async_wait(*b, wb1);
      sluice::detail::async_wait(*a, wa);
      sluice::detail::async_wait(*b, wb2);
    } else if (index == 1) {
      a->note_done();
    } else {
      sluice::detail::async_cancel(&*b, &wb1.handle_slot);
    }
  }
  void after() {
    RL_ASSERT(wa.finished($) == 1 && wa.admitted($) && a->in_flight() == 1);
    RL_ASSERT(wb2.finished($) == 0 && wb2.queued && b->in_flight() == 1);  // B made no room
    if (wb1.finished($) == 1) {
      RL_ASSERT(!wb1.admitted($) && !wb1.queued);
    } else {  // the cancellation came before the wait was queued
      RL_ASSERT(wb1.queued && sluice::detail::async_withdraw(wb1));
    }
    RL_ASSERT(sluice::detail::async_withdraw(wb2) && queue_empty());
    b->set_cap(2);
    RL_ASSERT(b->try_admit());  // B's queue mark left with its last waiter
    a.reset();
    b.reset();
    spot.reset();
  }
};

// close() racing a grant and a cancellation (docs/gate.md, CLOSE): two coroutines queued on a
// full gate; one thread makes room and cancels the first, another closes the gate. Every wait
// leaves exactly once (admitted, cancelled, or closed: none is left queued on the closed gate),
// and the count is exactly the admissions granted: none lost, none doubled.
struct async_close_race : rl::test_suite<async_close_race, 3> {
  std::optional<sluice::gate> gate;
  waiter first, second;

  void before() {
    full_gate(gate);
    first.start(*gate, true);
    second.start(*gate, false);
  }
  void thread(unsigned index) {
    if (index == 0) {
      sluice::detail::async_wait(*gate, first);
      sluice::detail::async_wait(*gate, second);
    } else if (index == 1) {
      gate->note_done();
      sluice::detail::async_cancel(&*gate, &first.handle_slot);
    } else {
      gate->close();
    }
  }
  void after() {
    RL_ASSERT(first.finished($) == 1 && second.finished($) == 1 && queue_empty());
    RL_ASSERT(!(first.admitted($) && second.admitted($)));  // one room
    RL_ASSERT(gate->in_flight() == (first.admitted($) || second.admitted($) ? 1 : 0));
    RL_ASSERT(second.admitted($) || second.closed);  // never cancelled: admitted, or closed
    RL_ASSERT(gate->closed() && !gate->try_admit());
    end_check(gate);
  }
};

// An async wait that begins as the gate closes (C): it leaves closed, whether close() took it
// from the queue (ordered by the spot's mutex) or async_wait found the gate closed as it queued
// (C3's acquire of C1's release), and either way it sees what the closer wrote before close().
struct async_close_late : rl::test_suite<async_close_late, 2> {
  std::optional<sluice::gate> gate;
  waiter w;
  rl::var<int> payload;

  void before() {
    full_gate(gate);
    payload($) = 0;
    w.payload = &payload;
    w.start(*gate, false);
  }
  void thread(unsigned index) {
    if (index == 0) {
      payload($) = 1;
      gate->close();
    } else {
      sluice::detail::async_wait(*gate, w);
    }
  }
  void after() {
    RL_ASSERT(w.finished($) == 1 && !w.admitted($) && w.closed && queue_empty());
    end_check(gate);
  }
};

// A fork's prepare, holding the spot's mutex, waits for the hand-overs in progress (H): it then
// finds the waiter queued, or handed over whole, never taken out but not yet handed over, and
// what the hand-over wrote is visible to it (the child would inherit it). The waiter is queued
// before the threads start.
struct async_fork_window : rl::test_suite<async_fork_window, 2> {
  std::optional<sluice::gate> gate;
  waiter w;

  void before() {
    full_gate(gate);
    w.start(*gate, false);
    sluice::detail::async_wait(*gate, w);
  }
  void thread(unsigned index) {
    if (index == 0) {
      gate->note_done();
    } else {
      spot->mutex.lock();
      sluice::detail::await_hand_overs(*spot);
      RL_ASSERT(w.queued || w.finished($) == 1);
      spot->mutex.unlock();
    }
  }
  void after() {
    RL_ASSERT(w.finished($) == 1 && w.admitted($) && queue_empty());
    end_check(gate);
  }
};

}  // namespace

TEST_CASE("gate: an async waiter is admitted by note_done and by a raised cap (A)") {
  expect_passes("async wake by note_done, every schedule of <= 3 preemptions", explore<async_wake<false>>(every_schedule(3)));
  expect_passes("async wake by set_cap, every schedule of <= 3 preemptions", explore<async_wake<true>>(every_schedule(3)));
  expect_passes("async wake by note_done, random schedules", explore<async_wake<false>>(random_schedules(100'000)));
  expect_passes("async wake by set_cap, random schedules", explore<async_wake<true>>(random_schedules(100'000)));
}

TEST_CASE("gate: the grant loop's admission acquires what note_done released, weakened") {
  const ordering orderings[] = {
      {"(1) note_done's release-CAS", "include/sluice/gate.hpp", "std::memory_order_release,  // (1), (W2)", 2},
      {"(2) the admission's acquire-CAS", "include/sluice/gate.hpp", "std::memory_order_acquire,  // (2)", 2},
  };
  for (const ordering& o : orderings) expect_reported<async_wake<false>>("async wake", o, every_schedule(3));
}

TEST_CASE("gate: try_admit and has_capacity refuse while an async waiter is queued") {
  expect_passes("async before try, every schedule of <= 3 preemptions", explore<async_before_try>(every_schedule(3)));
  expect_passes("async before try, random schedules", explore<async_before_try>(random_schedules(100'000)));
}

TEST_CASE("gate: a thread behind a queued async waiter is admitted when the waiter's permit returns") {
  expect_passes("async then thread, every schedule of <= 1 preemption", explore<async_then_thread>(every_schedule(1)));
  expect_passes("async then thread, random schedules", explore<async_then_thread>(random_schedules(1'000'000)));
}

TEST_CASE("gate: cancellation racing a wake-up owns the waiter, or the wake-up does") {
  expect_passes("async cancel race, every schedule of <= 3 preemptions", explore<async_cancel_race>(every_schedule(3)));
  expect_passes("async cancel race, random schedules", explore<async_cancel_race>(random_schedules(100'000)));
  expect_passes("async cancel of the head, every schedule of <= 3 preemptions", explore<async_cancel_head>(every_schedule(3)));
  expect_passes("async cancel of the head, random schedules", explore<async_cancel_head>(random_schedules(100'000)));
}

TEST_CASE("gate: waiters of two gates on one spot: each wake-up and cancellation reaches its own") {
  expect_passes("async two gates, every schedule of <= 2 preemptions", explore<async_two_gates>(every_schedule(2)));
  expect_passes("async two gates, random schedules", explore<async_two_gates>(random_schedules(100'000)));
}

TEST_CASE("gate: close racing a grant and a cancellation: every wait out once, no admission lost or doubled") {
  expect_passes("async close race, every schedule of <= 2 preemptions", explore<async_close_race>(every_schedule(2)));
  expect_passes("async close race, random schedules", explore<async_close_race>(random_schedules(100'000)));
}

TEST_CASE("gate: an async wait that begins as the gate closes leaves closed, seeing what the closer wrote (C3)") {
  expect_passes("async close late, every schedule of <= 3 preemptions", explore<async_close_late>(every_schedule(3)));
  expect_passes("async close late, random schedules", explore<async_close_late>(random_schedules(100'000)));
  const ordering late{"(C3) the queue mark's acquire", "lib/gate.cpp",
                      "return closed_word(g.word_.fetch_or(queue_bit, std::memory_order_acquire));", 0};
  expect_reported<async_close_late>("async close late", late, every_schedule(3));
}

TEST_CASE("gate: a fork's prepare finds every async waiter queued or handed over (H)") {
  // Random schedules alone: the prepare's wait spins, and a bounded search would explore its
  // every spin.
  expect_passes("async fork window, random schedules", explore<async_fork_window>(random_schedules(20'000)));
  const ordering end{"(H2) a hand-over's end", "lib/gate.cpp", "std::memory_order_release);  // (H2)", 0};
  expect_reported<async_fork_window>("async fork window", end, random_schedules(20'000));
}
