// The gate's queue of async waiters (lib/gate.cpp, docs/asio.md) under Relacy: the grant loop's
// no-lost-wake-up argument (A), the queue mark that turns threads away while a waiter is queued,
// and cancellation racing a wake-up. The waiters are the nodes that <sluice/asio.hpp> queues,
// without Asio: their finish records what happened.
#include <optional>

#include "check.hpp"
#include "../doctest.hpp"
#include "parking.hpp"
#include "sluice/detail/async_wait.hpp"
#include "sluice/gate.hpp"

namespace sluice_relacy {
extern std::optional<sluice::detail::parking_spot> spot;
}

namespace {

using namespace sluice_relacy;

// An async wait as asio_admit.hpp makes one: a node the gate's spot links, and what its finish saw.
struct waiter : sluice::detail::async_waiter {
  rl::var<int> finished;   // how many times finish ran
  rl::var<bool> admitted;  // what the last one said
  rl::var<int>* payload = nullptr;
  // When set, the handler counts itself in, then drops its permit at once (note_done).
  sluice::gate* release_on_admit = nullptr;
  rl::atomic<int>* held = nullptr;
  sluice::detail::async_waiter* handle_slot = nullptr;  // the canceller's handle

  void start(sluice::gate& g, bool cancellable) {
    finished($) = 0;
    admitted($) = false;
    gate = &g;
    handle = cancellable ? &handle_slot : nullptr;
    handle_slot = prev = next = nullptr;
    queued = false;
    finish = [](sluice::detail::async_waiter* node, bool ok) noexcept {
      waiter& w = *static_cast<waiter*>(node);
      w.finished($) = w.finished($) + 1;
      w.admitted($) = ok;
      if (ok && w.payload != nullptr) RL_ASSERT((*w.payload)($) == 1);  // what note_done published
      if (ok && w.release_on_admit != nullptr) {
        RL_ASSERT((*w.held)($).fetch_add(1, rl::mo_relaxed) == 0);  // alone in the gate
        (*w.held)($).fetch_sub(1, rl::mo_relaxed);
        w.release_on_admit->note_done();
      }
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
    spot.emplace();
    gate.emplace(1);
    gate->note_submitted();
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
    RL_ASSERT(w.finished($) == 1 && w.admitted($));
    RL_ASSERT(gate->in_flight() == (raise_cap ? 2 : 1));
    gate->set_cap(3);
    RL_ASSERT(gate->try_admit());  // the queue mark left with the waiter
    gate.reset();
    spot.reset();
  }
};

// The queue mark: while the coroutine is queued a thread's admit() waits, and the admission the
// coroutine's handler gives back reaches the thread (or, if the thread came first, the thread's
// reaches the coroutine). Neither may wait for good (a thread asleep is a deadlock to Relacy, a
// waiter still queued fails after()), and the count never passes the cap of 1.
struct async_then_thread : rl::test_suite<async_then_thread, 3> {
  std::optional<sluice::gate> gate;
  waiter w;
  rl::atomic<int> held;  // the test's own count of admissions held

  void before() {
    spot.emplace();
    gate.emplace(1);
    gate->note_submitted();
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
    RL_ASSERT(w.finished($) == 1 && w.admitted($));
    RL_ASSERT(gate->in_flight() == 0);
    gate.reset();
    spot.reset();
  }
};

// Cancellation racing a wake-up: whichever takes the node from the queue first owns it. finish
// runs exactly once; a cancelled wait counted nothing, an admitted one holds its admission; the
// queue mark is gone either way.
struct async_cancel_race : rl::test_suite<async_cancel_race, 3> {
  std::optional<sluice::gate> gate;
  waiter w;

  void before() {
    spot.emplace();
    gate.emplace(1);
    gate->note_submitted();
    w.start(*gate, true);
  }
  void thread(unsigned index) {
    if (index == 0) {
      sluice::detail::async_wait(*gate, w);
    } else if (index == 1) {
      gate->note_done();
    } else if (sluice::detail::async_waiter* taken = sluice::detail::async_cancel(&*gate, &w.handle_slot)) {
      taken->finish(taken, false);
    }
  }
  void after() {
    // A cancel that came before the wait was queued found nothing: the wait was then admitted.
    RL_ASSERT(w.finished($) == 1);
    RL_ASSERT(gate->in_flight() == (w.admitted($) ? 1 : 0));
    RL_ASSERT(w.handle_slot == nullptr);
    gate->set_cap(2);
    RL_ASSERT(gate->try_admit());  // the queue mark left with the waiter
    gate.reset();
    spot.reset();
  }
};

}  // namespace

TEST_CASE("gate: an async waiter is admitted by note_done and by a raised cap (A)") {
  expect_passes("async wake by note_done, every schedule of <= 3 preemptions", explore<async_wake<false>>(every_schedule(3)));
  expect_passes("async wake by set_cap, every schedule of <= 3 preemptions", explore<async_wake<true>>(every_schedule(3)));
  expect_passes("async wake by note_done, random schedules", explore<async_wake<false>>(random_schedules(100'000)));
}

TEST_CASE("gate: a thread behind a queued async waiter is admitted when the waiter's permit returns") {
  expect_passes("async then thread, every schedule of <= 1 preemption", explore<async_then_thread>(every_schedule(1)));
  expect_passes("async then thread, random schedules", explore<async_then_thread>(random_schedules(1'000'000)));
}

TEST_CASE("gate: cancellation racing a wake-up owns the waiter, or the wake-up does") {
  expect_passes("async cancel race, every schedule of <= 3 preemptions", explore<async_cancel_race>(every_schedule(3)));
  expect_passes("async cancel race, random schedules", explore<async_cancel_race>(random_schedules(100'000)));
}
