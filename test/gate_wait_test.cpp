// The gates that wait: admit(), try_admit_for(), try_admit_until() and the waiting permits, on
// both gates. Waits that must end are bounded by a timeout far longer than they need, so a
// lost wake-up fails the test (a wait that gave up) instead of hanging it.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <new>
#include <thread>
#include <vector>

#include "doctest.hpp"
#include "sluice/detail/async_wait.hpp"
#include "sluice/gate.hpp"
#include "kinds.hpp"
#include "threads.hpp"

using namespace std::chrono_literals;
using sluice::pressure;


namespace {

constexpr auto long_enough = 60s;  // no correct wait here comes near it

// Starts `waiter` on a thread and answers once it is inside its wait: it has announced itself
// and the gate still has no room for it. (That it sleeps, not spins, is not observable; the
// call that releases it is tested for whichever.)
template <class Gate>
struct waiting_thread {
  std::atomic<bool> started{false}, admitted{false};
  std::thread thread;

  explicit waiting_thread(Gate& g) {
    thread = std::thread([this, &g] {
      started.store(true);
      admitted.store(g.try_admit_for(long_enough));
    });
    while (!started.load()) std::this_thread::yield();
  }
  bool join() {
    thread.join();
    return admitted.load();
  }
};

// Gives a thread that has started a wait the time to fall asleep in it. Not synchronisation:
// each test passes whether the waiter sleeps or not; this only makes the sleeping case usual.
void let_it_sleep() {
  for (int i = 0; i < 200; ++i) std::this_thread::yield();
}

}  // namespace

TEST_CASE_TEMPLATE("admit() at the cap waits for note_done and is admitted by it", G, GATES) {
  G g{1};
  REQUIRE(g.try_admit());
  for (int round = 0; round < 200; ++round) {
    waiting_thread<G> w{g};
    let_it_sleep();
    g.note_done();  // the room w waits for
    REQUIRE(w.join());
    CHECK(g.in_flight() == 1);  // w's admission, counted once
  }
}

TEST_CASE_TEMPLATE("raising the cap by k lets k waiters in, and no more", G, GATES) {
  G g{1};
  REQUIRE(g.try_admit());
  std::atomic<int> admitted{0};
  std::vector<std::thread> waiters;
  for (int i = 0; i < 4; ++i) {
    waiters.emplace_back([&] {
      if (g.try_admit_for(long_enough)) admitted.fetch_add(1);
    });
  }
  let_it_sleep();
  SUBCASE("set_cap") { g.set_cap(3); }
  SUBCASE("adjust(ok), twice") {
    g.adjust(pressure::ok, 10);
    g.adjust(pressure::ok, 10);
  }
  // Two of the four get in; the other two are let in by two note_done calls.
  for (int seen = admitted.load(); seen < 2; seen = admitted.load()) std::this_thread::yield();
  CHECK(g.in_flight() == 3);
  CHECK_FALSE(g.has_capacity());
  g.note_done();
  g.note_done();
  for (auto& t : waiters) t.join();
  CHECK(admitted.load() == 4);
  CHECK(g.in_flight() == 3);
}

TEST_CASE_TEMPLATE("a timed wait that gives up counts nothing", G, GATES) {
  G g{2};
  REQUIRE(g.try_admit());
  REQUIRE(g.try_admit());
  const auto start = std::chrono::steady_clock::now();
  CHECK_FALSE(g.try_admit_for(20ms));
  CHECK(std::chrono::steady_clock::now() - start >= 20ms);
  CHECK_FALSE(g.try_admit_until(std::chrono::steady_clock::now() + 10ms));
  CHECK_FALSE(g.try_admit_until(std::chrono::system_clock::now() + 10ms));  // another clock
  CHECK_FALSE(g.try_admit_for(0ms));
  CHECK_FALSE(g.try_admit_for(-5s));
  CHECK_FALSE(g.try_admit_for(std::chrono::duration<double>(std::nan(""))));
  CHECK_FALSE(g.try_admit_until(std::chrono::steady_clock::time_point::min()));
  CHECK(g.in_flight() == 2);
  g.note_done();
  // With room, every form admits at once, whatever its timeout, even the largest.
  CHECK(g.try_admit_for(std::chrono::nanoseconds::max()));
  g.note_done();
  CHECK(g.try_admit_for(std::chrono::hours::max()));
  g.note_done();
  CHECK(g.try_admit_until(std::chrono::system_clock::time_point::max()));
  g.note_done();
  CHECK(g.try_admit_for(0ms));
  CHECK(g.in_flight() == 2);
}

TEST_CASE_TEMPLATE("waiting permits", G, GATES) {
  G g{1};
  {
    sluice::permit<G> held{g, sluice::until_admitted};
    CHECK(held);
    CHECK(g.in_flight() == 1);
    sluice::permit<G> refused{g, 1ms};
    CHECK_FALSE(refused);
    sluice::permit<G> late{g, std::chrono::steady_clock::now() + 1ms};
    CHECK_FALSE(late);
    CHECK(g.in_flight() == 1);
  }
  CHECK(g.in_flight() == 0);
  sluice::permit<G> timed{g, long_enough};
  CHECK(timed);
}

TEST_CASE_TEMPLATE("many waiters under a small cap never pass it", G, GATES) {
  constexpr int threads = 8, rounds = 2000;
  constexpr std::int64_t cap = 2;
  G g{cap};
  std::atomic<int> held{0}, most{0}, gave_up{0};
  sluice_test::run_threads(threads, [&](std::size_t t) {
    for (int i = 0; i < rounds; ++i) {
      const bool in = t % 2 == 0 ? (g.admit(), true) : g.try_admit_for(long_enough);
      if (!in) {
        gave_up.fetch_add(1);
        continue;
      }
      const int now = held.fetch_add(1) + 1;
      for (int seen = most.load(); seen < now && !most.compare_exchange_weak(seen, now);) {
      }
      std::this_thread::yield();  // hold it a moment, so that others must wait
      held.fetch_sub(1);
      g.note_done();
    }
  });
  CHECK(most.load() <= cap);
  CHECK(most.load() >= 1);
  CHECK(gave_up.load() == 0);
  CHECK(g.in_flight() == 0);
}

// The first try of a waiting form is inline for gate, and a try whose CAS lost goes on in the
// library (gate::first_try, admit_now): with threads contending for the word, both paths run.
TEST_CASE_TEMPLATE("contending waiting forms with weights count each admission once and no refusal", G, GATES) {
  constexpr int threads = 8, rounds = 3000;
  constexpr std::int64_t cap = 6;
  G g{cap};
  std::atomic<std::int64_t> held{0}, most{0};
  std::atomic<std::uint64_t> admissions{0};
  sluice_test::run_threads(threads, [&](std::size_t t) {
    for (int i = 0; i < rounds; ++i) {
      const auto n = static_cast<std::int64_t>((t + static_cast<std::size_t>(i)) % 3 + 1);
      if (i % 2 == 0) {
        g.admit(n);
      } else if (!g.try_admit_for(n, long_enough)) {
        continue;  // the check of admissions below then fails
      }
      admissions.fetch_add(1);
      const std::int64_t now = held.fetch_add(n) + n;
      for (std::int64_t seen = most.load(); seen < now && !most.compare_exchange_weak(seen, now);) {
      }
      held.fetch_sub(n);
      g.note_done(n);
    }
  });
  const sluice::gate_stats s = g.stats();
  CAPTURE(s.admitted_after_wait);
  CHECK(admissions.load() == std::uint64_t{threads} * rounds);
  CHECK(s.admitted == admissions.load());
  CHECK(s.refused == 0);  // a waiting form's try that finds no room waits; it is no refusal
  CHECK(s.timed_out == 0);
  CHECK(s.waiting == 0);
  CHECK(s.in_flight == 0);
  CHECK(most.load() <= cap);
  CHECK(s.peak_in_flight <= cap);
}

TEST_CASE_TEMPLATE("two threads hand one admission back and forth, losing no wake-up", G, GATES) {
  // Cap 1: each round, a thread waits for the admission the other holds. A lost wake-up would
  // leave a waiter asleep with room free: its wait would give up, and the test fail.
  constexpr int rounds = 20000;
  G g{1};
  std::atomic<int> turn{0}, gave_up{0};
  sluice_test::run_threads(2, [&](std::size_t me) {
    for (int i = 0; i < rounds; ++i) {
      if (!g.try_admit_for(long_enough)) {
        gave_up.fetch_add(1);
        return;
      }
      turn.fetch_add(1);
      if ((i + me) % 3 != 0) std::this_thread::yield();  // hold it a moment: the other must wait
      g.note_done();
    }
  });
  CHECK(gave_up.load() == 0);
  CHECK(turn.load() == 2 * rounds);
  CHECK(g.in_flight() == 0);
}

TEST_CASE_TEMPLATE("waiters while a pressure loop moves the cap", G, GATES) {
  constexpr std::int64_t max_cap = 4;
  G g{1};
  std::atomic<bool> done{false};
  std::atomic<int> held{0}, most{0}, finished{0}, gave_up{0};
  std::thread pressure_loop([&] {
    unsigned step = 0;
    while (!done.load()) {
      g.adjust(step % 3 == 0 ? pressure::soft : step % 7 == 0 ? pressure::hard : pressure::ok, max_cap);
      ++step;
      std::this_thread::yield();
    }
  });
  sluice_test::run_threads(6, [&](std::size_t) {
    for (int i = 0; i < 1000; ++i) {
      if (!g.try_admit_for(long_enough)) {
        gave_up.fetch_add(1);
        break;
      }
      const int now = held.fetch_add(1) + 1;
      for (int seen = most.load(); seen < now && !most.compare_exchange_weak(seen, now);) {
      }
      std::this_thread::yield();  // hold it a moment, so that others must wait
      held.fetch_sub(1);
      g.note_done();
    }
    finished.fetch_add(1);
  });
  done.store(true);
  pressure_loop.join();
  CHECK(gave_up.load() == 0);
  CHECK(finished.load() == 6);
  CHECK(most.load() <= max_cap);
  CHECK(g.in_flight() == 0);
}

TEST_CASE_TEMPLATE("the thread that a note_done admits may destroy the gate at once", G, GATES) {
  // The completion-signal pattern: two threads wait on a full gate; the first one admitted gives
  // its place back at once, and the second, admitted by that note_done, destroys the gate while
  // the note_done may still be waking waiters. After the CAS that makes room, note_done must
  // touch nothing of the gate (AddressSanitizer and ThreadSanitizer check it).
  for (int round = 0; round < 1000; ++round) {
    auto* g = new G{1};
    REQUIRE(g->try_admit());
    std::atomic<int> admitted{0};
    const auto waiter = [&] {
      g->admit();
      if (admitted.fetch_add(1) == 0) {
        g->note_done();  // may admit the other, which then destroys the gate
      } else {
        delete g;
      }
    };
    std::thread a(waiter), b(waiter);
    if (round % 2 == 0) let_it_sleep();
    g->note_done();  // admits the first of them (the gate is alive until both are admitted)
    a.join();
    b.join();
    CHECK(admitted.load() == 2);
  }
}

TEST_CASE_TEMPLATE("deadlines of any unit and date wait for room; a NaN deadline tries once", G, GATES) {
  // Far deadlines in coarse units (hours, days) overflow if converted to nanoseconds: they must
  // wait like any other, and a NaN deadline must give up at once, not loop.
  using namespace std::chrono;
  G g{1};
  REQUIRE(g.try_admit());
  const auto admitted_by = [&](auto deadline) {
    bool admitted = false;
    std::thread waiter([&] { admitted = g.try_admit_until(deadline); });
    let_it_sleep();
    g.note_done();  // room, whenever the waiter looks
    waiter.join();
    if (admitted) REQUIRE(g.try_admit() == false);  // its admission holds the one place
    if (!admitted) REQUIRE(g.try_admit());          // the place is still free: take it back
    return admitted;
  };
  CHECK(admitted_by(time_point<system_clock, hours>::max()));
  CHECK(admitted_by(time_point<steady_clock, hours>::max()));
  CHECK(admitted_by(sys_days::max()));
  CHECK(admitted_by(sys_days{year{2300} / 1 / 1}));
  CHECK(admitted_by(time_point<system_clock, duration<double>>(duration<double>(1e300))));
  g.note_done();
  {
    sluice::permit<G> far{g, time_point<system_clock, seconds>::max()};  // room: admitted at once
    CHECK(far);
  }
  REQUIRE(g.try_admit());
  const auto nan_deadline = time_point<system_clock, duration<double>>(duration<double>(std::nan("")));
  CHECK_FALSE(g.try_admit_until(nan_deadline));  // the gate is full: one try, then false
  CHECK(g.in_flight() == 1);
}

// ---- weights (docs/gate.md, WEIGHTS) ----------------------------------------------------------

TEST_CASE_TEMPLATE("a thread waiting for n is admitted once n fits, not before", G, GATES) {
  G g{5};
  REQUIRE(g.try_admit(5));
  std::atomic<bool> admitted{false};
  std::thread waiter([&] { admitted.store(g.try_admit_for(3, long_enough)); });
  let_it_sleep();
  g.note_done(1);  // 4 + 3 > 5
  let_it_sleep();
  CHECK_FALSE(admitted.load());
  g.note_done(1);  // 3 + 3 > 5
  let_it_sleep();
  CHECK_FALSE(admitted.load());
  CHECK(g.in_flight() == 3);
  g.note_done(1);  // 2 + 3 fits
  waiter.join();
  CHECK(admitted.load());
  CHECK(g.in_flight() == 5);
}

TEST_CASE_TEMPLATE("a thread waiting for more than the cap is admitted when the cap grows", G, GATES) {
  G g{2};
  std::atomic<bool> admitted{false};
  std::thread waiter([&] {
    g.admit(6);
    admitted.store(true);
  });
  let_it_sleep();
  CHECK_FALSE(admitted.load());
  SUBCASE("set_cap") { g.set_cap(6); }
  SUBCASE("adjust(ok), four times") {
    for (int i = 0; i < 4; ++i) g.adjust(pressure::ok, 100);
  }
  waiter.join();
  CHECK(g.in_flight() == 6);
}

TEST_CASE_TEMPLATE("a thread waiting for n does not hold back smaller admissions", G, GATES) {
  G g{5};
  REQUIRE(g.try_admit(3));
  std::atomic<bool> admitted{false};
  std::thread waiter([&] { admitted.store(g.try_admit_for(4, long_enough)); });
  let_it_sleep();
  CHECK(g.try_admit(2));  // 3 + 2 fits, whatever waits for 4
  CHECK(g.in_flight() == 5);
  CHECK_FALSE(admitted.load());
  g.note_done(5);
  waiter.join();
  CHECK(admitted.load());
  CHECK(g.in_flight() == 4);
}

TEST_CASE_TEMPLATE("a weighted timed wait that gives up counts nothing", G, GATES) {
  G g{4};
  REQUIRE(g.try_admit(2));
  CHECK_FALSE(g.try_admit_for(3, 10ms));
  CHECK_FALSE(g.try_admit_until(3, std::chrono::system_clock::now() + 5ms));
  sluice::permit<G> refused{g, 3, 1ms};
  CHECK_FALSE(refused);
  CHECK(g.in_flight() == 2);
  sluice::permit<G> fits{g, 2, long_enough};
  CHECK(fits.units() == 2);
  CHECK(g.in_flight() == 4);
}

// ---- close (docs/gate.md, CLOSE) -------------------------------------------------------------

TEST_CASE_TEMPLATE("close wakes every waiting thread at once with gate_closed, counting nothing", G, GATES) {
  G g{2};
  REQUIRE(g.try_admit(2));
  std::atomic<int> closed{0}, other{0};
  std::vector<std::thread> waiters;
  for (int i = 0; i < 6; ++i) {
    waiters.emplace_back([&, i] {
      try {
        if (i % 3 == 0) {
          g.admit(1 + i % 2);
        } else if (i % 3 == 1) {
          (void)g.try_admit_for(1 + i % 2, long_enough);
        } else {
          (void)g.try_admit_until(1, std::chrono::system_clock::now() + long_enough);
        }
        other.fetch_add(1);
      } catch (const sluice::gate_closed&) {
        closed.fetch_add(1);
      }
    });
  }
  let_it_sleep();
  const auto start = std::chrono::steady_clock::now();
  g.close();
  for (auto& t : waiters) t.join();
  CHECK(std::chrono::steady_clock::now() - start < long_enough / 2);  // not a timeout
  CHECK(closed.load() == 6);
  CHECK(other.load() == 0);
  CHECK(g.in_flight() == 2);
  g.note_done(2);
  CHECK(g.in_flight() == 0);
}

TEST_CASE_TEMPLATE("close racing note_done and waiting threads never loses or double-counts an admission", G, GATES) {
  const int rounds = sluice_test::reduced ? 100 : 500;
  for (int round = 0; round < rounds; ++round) {
    G g{2};
    REQUIRE(g.try_admit(2));
    std::atomic<std::int64_t> admitted{0};
    std::atomic<int> closed{0}, entered{0};
    std::vector<std::thread> threads;
    for (int i = 0; i < 3; ++i) {
      threads.emplace_back([&, i] {
        try {
          g.admit(1 + i % 2);
          admitted.fetch_add(1 + i % 2);
          entered.fetch_add(1);
        } catch (const sluice::gate_closed&) {
          closed.fetch_add(1);
        }
      });
    }
    threads.emplace_back([&] { g.note_done(2); });
    threads.emplace_back([&] { g.close(); });
    for (auto& t : threads) t.join();
    CHECK(entered.load() + closed.load() == 3);  // each waiter out: admitted, or closed
    CHECK(g.in_flight() == admitted.load());  // what was admitted before the close, once each
    CHECK(admitted.load() <= 2);
    CHECK(g.closed());
    // and counted once each, by how it ended (the first try(admit) of REQUIRE counts one more)
    const sluice::gate_stats s = g.stats();
    CHECK(s.admitted == 1u + static_cast<unsigned>(entered.load()));
    CHECK(s.closed == static_cast<unsigned>(closed.load()));
    CHECK(s.admitted_after_wait <= static_cast<unsigned>(entered.load()));
    CHECK(s.waiting == 0);
    CHECK(s.refused + s.timed_out + s.cancelled == 0);
  }
}

// ---- statistics of the waits (docs/gate.md, STATISTICS) --------------------------------------

namespace {
// Spins until the gate counts `n` waits in progress: a condition, not a delay.
template <class Gate>
void until_waiting(const Gate& g, std::int64_t n) {
  while (g.stats().waiting != n) std::this_thread::yield();
}
}  // namespace

TEST_CASE_TEMPLATE("stats count each wait once, by how it ended, and the waits in progress", G, GATES) {
  G g{1};
  REQUIRE(g.try_admit());
  {  // admitted after a wait
    waiting_thread<G> w{g};
    until_waiting(g, 1);
    g.note_done();
    REQUIRE(w.join());
  }
  const sluice::gate_stats after_one = g.stats();
  CHECK(after_one.admitted == 2);
  CHECK(after_one.admitted_after_wait == 1);
  CHECK(after_one.waiting == 0);
  CHECK_FALSE(g.try_admit_for(2ms));  // timed out
  CHECK_FALSE(g.try_admit_until(2, std::chrono::system_clock::now() + 2ms));
  CHECK(g.stats().timed_out == 2);
  std::atomic<int> closed{0};
  std::vector<std::thread> waiters;
  for (int i = 0; i < 3; ++i) {
    waiters.emplace_back([&] {
      try {
        g.admit();
      } catch (const sluice::gate_closed&) {
        closed.fetch_add(1);
      }
    });
  }
  until_waiting(g, 3);  // three threads inside their waits
  g.close();
  for (auto& t : waiters) t.join();
  REQUIRE(closed.load() == 3);
  const sluice::gate_stats s = g.stats();
  CHECK(s.closed == 3);
  CHECK(s.waiting == 0);
  CHECK(s.admitted == 2);
  CHECK(s.admitted_after_wait == 1);
  CHECK(s.timed_out == 2);
  CHECK(s.refused == 0);   // no try form was called: a wait's tries are not refusals
  CHECK(s.cancelled == 0);
  CHECK(s.in_flight == 1);
  CHECK(s.peak_in_flight == 1);
}

// ---- a late call and another kind of gate at the same address (docs/gate.md, LIFETIME) ------

namespace {
struct recorded_waiter : sluice::detail::async_waiter {
  int handed = 0;
  bool admitted = false;
  explicit recorded_waiter(const void* g) {
    gate = g;
    hand_over = [](sluice::detail::async_waiter* w, bool ok) noexcept {
      auto& self = static_cast<recorded_waiter&>(*w);
      ++self.handed;
      self.admitted = ok;
      return true;
    };
  }
};
}  // namespace

TEST_CASE("a late serve of a destroyed gate leaves the waiters of another kind of gate made at its address alone") {
  // A late wake-up of a gate destroyed meanwhile (by a thread its close turned away) runs the
  // destroyed gate's code on whatever now lives at its address: here, at once, through the serve
  // of a waiter that waited on it.
  alignas(sluice::gate) alignas(sluice::mutex_gate) unsigned char place[std::max(sizeof(sluice::gate), sizeof(sluice::mutex_gate))];
  auto* old_gate = new (place) sluice::gate{1};
  recorded_waiter stale(old_gate);
  sluice::detail::async_wait(*old_gate, stale);  // admitted at once: its ops are the gate's
  REQUIRE(stale.handed == 1);
  old_gate->note_done();
  old_gate->~gate();
  auto* other = new (place) sluice::mutex_gate{1};
  REQUIRE(other->try_admit());
  recorded_waiter fresh(other);
  sluice::detail::async_wait(*other, fresh);
  REQUIRE(fresh.queued);
  sluice::detail::async_serve(stale);  // the gate's serve at the mutex_gate's address: must touch nothing
  CHECK(fresh.queued);
  CHECK(fresh.handed == 0);
  CHECK(other->in_flight() == 1);
  other->note_done();  // its mutex intact, its own wake-up admits the waiter
  CHECK(fresh.handed == 1);
  CHECK(fresh.admitted);
  CHECK(other->in_flight() == 1);
  other->note_done();
  other->~mutex_gate();
}
