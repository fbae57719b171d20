// The gate's real code (lib/gate.cpp) under Relacy: its counts, the publication that docs/gate.md's
// MEMORY ORDERING section promises, and the no-lost-wake-up protocol (W) of a waiting admit.
#include <cstdio>
#include <optional>

#include "check.hpp"
#include "../doctest.hpp"
#include "spot.hpp"
#include "sluice/gate.hpp"

namespace {

using namespace sluice_relacy;

// note_done() -> a successful try_admit(), in_flight() or has_capacity(): what the finisher
// wrote before note_done() is visible to the thread that observed the count it left. The
// payload is an rl::var, so a missing happens-before is a data race that Relacy reports.
struct publication : rl::test_suite<publication, 3> {
  std::optional<sluice::gate> gate;
  rl::var<int> payload;

  void before() {
    gate.emplace(1);
    gate->note_submitted();  // full: only note_done() makes room
    payload($) = 0;
  }
  void thread(unsigned index) {
    if (index == 0) {
      payload($) = 1;
      gate->note_done();
    } else if (index == 1) {
      if (gate->try_admit()) RL_ASSERT(payload($) == 1);
    } else {
      if (gate->in_flight() == 0) RL_ASSERT(payload($) == 1);
      if (gate->has_capacity()) RL_ASSERT(payload($) == 1);
    }
  }
  void after() { gate.reset(); }
};

// Admissions never pass the cap, the floor holds, and no count is lost, while the cap moves.
struct counts : rl::test_suite<counts, 3> {
  std::optional<sluice::gate> gate;
  rl::atomic<int> admitted;  // the test's own count of admissions held

  void before() {
    gate.emplace(2);
    admitted($) = 0;
  }
  void thread(unsigned index) {
    if (index == 2) {
      gate->adjust(sluice::pressure::hard, 4);  // cap 2 -> 1
      gate->note_done();                        // at zero: the floor keeps it there, or takes one
      gate->set_cap(2);
      return;
    }
    for (int round = 0; round < 2; ++round) {
      if (!gate->try_admit()) continue;
      RL_ASSERT(admitted($).fetch_add(1, rl::mo_relaxed) + 1 <= 2);  // never more than the largest cap
      RL_ASSERT(gate->in_flight() <= 2);
      admitted($).fetch_sub(1, rl::mo_relaxed);
      gate->note_done();
    }
  }
  void after() {
    RL_ASSERT(gate->in_flight() == 0);
    RL_ASSERT(gate->cap() == 2);
    gate.reset();
  }
};

// The same with weights: two threads admit 2 at a time under a cap of 3 (so one of them at a
// time) while a third moves the cap; never more than 3 held, all of n or nothing, and every count
// back at zero.
struct weighted_counts : rl::test_suite<weighted_counts, 3> {
  std::optional<sluice::gate> gate;
  rl::atomic<int> admitted;  // the units the test holds

  void before() {
    gate.emplace(3);
    admitted($) = 0;
  }
  void thread(unsigned index) {
    if (index == 2) {
      gate->adjust(sluice::pressure::hard, 4);  // cap 3 -> 2
      gate->set_cap(3);
      return;
    }
    const std::int64_t n = 2;
    for (int round = 0; round < 2; ++round) {
      if (!gate->try_admit(n)) continue;
      RL_ASSERT(admitted($).fetch_add(static_cast<int>(n), rl::mo_relaxed) + n <= 3);
      admitted($).fetch_sub(static_cast<int>(n), rl::mo_relaxed);
      gate->note_done(n);
    }
  }
  void after() {
    RL_ASSERT(gate->in_flight() == 0);
    RL_ASSERT(gate->cap() == 3);
    gate.reset();
  }
};

// (W): a thread that finds the gate full waits in admit(); a note_done() or a raised cap on
// another thread must wake it. A lost wake-up leaves it asleep for good, which Relacy reports as
// a deadlock. The payload checks the publication along the waiting path.
// With Weight 2 the waiter waits for two units: the cap of 2 holds one (note_done frees it),
// or the cap of 1 is raised to 2 (in_flight 0), so that either call makes room for both.
template <bool raise_cap, std::int64_t Weight = 1>
struct wake : rl::test_suite<wake<raise_cap, Weight>, 2> {
  std::optional<sluice::gate> gate;
  rl::var<int> payload;

  void before() {
    spot.emplace();
    gate.emplace(Weight == 1 || !raise_cap ? Weight : 1);
    if (Weight == 1 || !raise_cap) gate->note_submitted();
    payload($) = 0;
  }
  void thread(unsigned index) {
    if (index == 0) {
      gate->admit(Weight);
      if (!raise_cap) RL_ASSERT(payload($) == 1);
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
    RL_ASSERT(gate->in_flight() == (Weight == 1 ? (raise_cap ? 2 : 1) : Weight));
    gate.reset();
    spot.reset();
  }
};

// close() and a thread waiting in admit() on a full gate: the waiter leaves with gate_closed
// (a lost wake-up leaves it asleep: a deadlock to Relacy), having seen what the closer wrote
// before close() (C1, C2), and nothing is counted for it.
struct close_wake : rl::test_suite<close_wake, 2> {
  std::optional<sluice::gate> gate;
  rl::var<int> payload;

  void before() {
    spot.emplace();
    gate.emplace(1);
    gate->note_submitted();
    payload($) = 0;
  }
  void thread(unsigned index) {
    if (index == 0) {
      bool closed = false;
      try {
        gate->admit();
      } catch (const sluice::gate_closed&) {
        closed = true;
        RL_ASSERT(payload($) == 1);
      }
      RL_ASSERT(closed);
    } else {
      payload($) = 1;
      gate->close();
    }
  }
  void after() {
    RL_ASSERT(gate->in_flight() == 1 && gate->cap() == 0);
    gate.reset();
    spot.reset();
  }
};

}  // namespace

// (W) with two threads asleep: a wake-up wakes as many as the room admits and marks the word
// again for the one left asleep, so that the next call that makes room wakes it. Cap 2, both
// units held; thread 0 waits for `first`, thread 1 for 1, thread 2 gives the two units back one
// call at a time, and each waiter, once admitted, gives its admission back. Without the second
// mark the thread left asleep sleeps for good (Relacy reports a deadlock); with weights (first
// = 2) a wake-up passes over a thread whose weight does not fit and wakes the one behind it.
template <std::int64_t first>
struct two_sleepers : rl::test_suite<two_sleepers<first>, 3> {
  std::optional<sluice::gate> gate;

  void before() {
    spot.emplace();
    gate.emplace(2);
    gate->note_submitted(2);
  }
  void thread(unsigned index) {
    if (index == 2) {
      gate->note_done();
      gate->note_done();
      return;
    }
    const std::int64_t n = index == 0 ? first : 1;
    gate->admit(n);
    RL_ASSERT(gate->in_flight() <= 2);
    gate->note_done(n);
  }
  void after() {
    RL_ASSERT(gate->in_flight() == 0);
    gate.reset();
    spot.reset();
  }
};

TEST_CASE("gate: close wakes a waiting admit, which throws gate_closed having seen what the closer wrote (C)") {
  expect_passes("gate close wake, every schedule of <= 2 preemptions", explore<close_wake>(every_schedule(2)));
  expect_passes("gate close wake, random schedules", explore<close_wake>(random_schedules(100'000)));
  const ordering orderings[] = {
      {"(C1) close's release-CAS", "lib/gate.cpp", "std::memory_order_release,  // (C1), (W2)", 1},
      {"(C2) closed()'s acquire-load", "lib/gate.cpp", "return closed_word(word_.load(std::memory_order_acquire));  // (C2)", 0},
  };
  for (const ordering& o : orderings) expect_reported<close_wake>("gate close wake", o, every_schedule(3));
}

TEST_CASE("gate: note_done publishes to the thread that sees its count") {
  expect_passes("gate publication, every schedule of <= 3 preemptions", explore<publication>(every_schedule(3)));
  expect_passes("gate publication, random schedules", explore<publication>(random_schedules(200'000)));
}

TEST_CASE("gate: the cap, the floor and every count, with the cap moving") {
  expect_passes("gate counts, every schedule of <= 2 preemptions", explore<counts>(every_schedule(2)));
  expect_passes("gate counts, random schedules", explore<counts>(random_schedules(100'000)));
}

TEST_CASE("gate: weighted admissions, all or nothing, within the cap, with the cap moving") {
  expect_passes("gate weighted counts, every schedule of <= 1 preemption", explore<weighted_counts>(every_schedule(1)));
  expect_passes("gate weighted counts, random schedules", explore<weighted_counts>(random_schedules(100'000)));
}

TEST_CASE("gate: a waiting admit(2) is woken by the note_done and by the raised cap that make room for both (W)") {
  expect_passes("gate weighted wake by note_done, every schedule of <= 3 preemptions",
                explore<wake<false, 2>>(every_schedule(3)));
  expect_passes("gate weighted wake by set_cap, every schedule of <= 3 preemptions",
                explore<wake<true, 2>>(every_schedule(3)));
}

TEST_CASE("gate: a waiting admit is woken by note_done and by a raised cap (W)") {
  expect_passes("gate wake by note_done, every schedule of <= 3 preemptions", explore<wake<false>>(every_schedule(3)));
  expect_passes("gate wake by set_cap, every schedule of <= 3 preemptions", explore<wake<true>>(every_schedule(3)));
  expect_passes("gate wake by note_done, random schedules", explore<wake<false>>(random_schedules(100'000)));
}

TEST_CASE("gate: two threads asleep, woken as the room admits, neither left asleep (W)") {
  expect_passes("gate two sleepers, every schedule of <= 1 preemption", explore<two_sleepers<1>>(every_schedule(1)));
  expect_passes("gate two sleepers, random schedules", explore<two_sleepers<1>>(random_schedules(200'000)));
  expect_passes("gate two sleepers weighted, random schedules", explore<two_sleepers<2>>(random_schedules(200'000)));
}

TEST_CASE("gate: each ordering that gate.cpp names, weakened, is reported") {
  const ordering orderings[] = {
      {"(1) note_done's release-CAS", "include/sluice/gate.hpp", "std::memory_order_release,  // (1), (W2)", 2},
      {"(2) try_admit's acquire-CAS", "include/sluice/gate.hpp", "std::memory_order_acquire,  // (2)", 2},
      {"(3) has_capacity's acquire-load", "lib/gate.cpp", "std::uint64_t word = word_.load(std::memory_order_acquire);  // (3)", 0},
      {"(3) in_flight's acquire-load", "lib/gate.cpp", "return count_of(word_.load(std::memory_order_acquire));  // (3)", 0},
  };
  for (const ordering& o : orderings) expect_reported<publication>("gate publication", o, every_schedule(3));
}
