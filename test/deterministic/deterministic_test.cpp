// The lock-free parts under the deterministic scheduler: every interleaving at atomic-operation
// granularity that a seed picks, replayable. Set SLUICE_DET_SEED=N to run one seed alone.
//
// Only one scheduled thread runs between two switch points, and a call's last atomic operation
// is its linearization point, so a thread that logs a call's result right after it returns logs
// in linearization order. Replaying that log through the sequential model (the mutex twin, or a
// plain container) must give the same answers: the check is exact, not a sample.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <cstdlib>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "../doctest.hpp"
#include "pool/slots.hpp"
#include "scheduler.hpp"
#include "sluice/gate.hpp"

using sluice_test::det::moment;
using sluice_test::det::op;
using sluice_test::det::scheduler;
using sluice_test::det::seeds;
namespace sd = sluice::detail;

// seam/ ahead of include/ on the include path (meson.build): the scheduler's atomic, not std's.
static_assert(!std::is_same_v<sd::atomic<int>, std::atomic<int>>, "the deterministic seam is not in use");

namespace {

// A stack of slots 0..n-1 (slot i's buffer pointer records i, so a slot read is checkable).
struct stack_fixture {
  sd::slot_table slots;
  sd::tagged_stack stack;
  std::vector<std::byte> marks;

  explicit stack_fixture(std::uint32_t n) : marks(n) {
    const sd::chain fresh = slots.claim(n);
    REQUIRE((fresh.first == 0 && fresh.count == n));
    for (std::uint32_t i = 0; i < n; ++i) slots[i].items[0] = &marks[i];
    for (std::uint32_t i = n; i-- > 0;) stack.push_chain(slots, sd::chain{i, i, 1});
  }
  std::uint32_t mark_of(sd::slot_index i) { return static_cast<std::uint32_t>(slots[i].items[0] - marks.data()); }
};

}  // namespace

TEST_CASE("ABA: a pop whose head was popped twice and pushed back must fail its CAS") {
  // The stack holds A=0 over B=1 over C=2. The victim reads head A and A's link B, then stops
  // just before its CAS; the intruder pops A, pops B, and pushes A back. The head is A again,
  // but with a new tag, so the victim's CAS must fail; without the tag it would install B,
  // which the intruder holds, as the head.
  stack_fixture f(3);
  constexpr std::size_t victim = 0, intruder = 1;
  int victim_cas = 0;
  bool intruder_ran = false;
  sd::chain victim_got, first, second;
  scheduler::run(
      {[&] { victim_got = f.stack.pop_chain(f.slots, 1); },
       [&] {
         first = f.stack.pop_chain(f.slots, 1);
         second = f.stack.pop_chain(f.slots, 1);
         f.stack.push_chain(f.slots, first);
       }},
      [&](const moment& m) -> std::size_t {
        const auto runnable = [&](std::size_t t) {
          return std::find(m.runnable.begin(), m.runnable.end(), t) != m.runnable.end();
        };
        if (m.current == victim && m.next_op == op::cas) {
          ++victim_cas;
          if (!intruder_ran) {  // the victim has read the head and its link: the intruder runs
            intruder_ran = true;
            return intruder;
          }
        }
        if (intruder_ran && runnable(intruder)) return intruder;  // to its end
        return runnable(victim) ? victim : intruder;
      });
  REQUIRE(intruder_ran);
  CHECK(f.mark_of(first.first) == 0);
  CHECK(f.mark_of(second.first) == 1);
  CHECK(victim_cas == 2);                       // the first CAS failed, the retry succeeded
  CHECK(f.mark_of(victim_got.first) == 0);      // the victim got A, pushed back
  const sd::chain rest = f.stack.pop_all(f.slots);
  REQUIRE(rest.count == 1);
  CHECK(f.mark_of(rest.first) == 2);            // C alone is left; B stays with the intruder
}

TEST_CASE("random schedules of pushes and pops lose and duplicate nothing") {
  std::uint64_t schedules = 0, switch_points = 0;
  for (const std::uint64_t seed : seeds(3000)) {
    CAPTURE(seed);
    constexpr std::uint32_t n = 6;
    stack_fixture f(n);
    std::vector<std::vector<std::uint32_t>> held(3);
    std::vector<std::function<void()>> bodies;
    for (std::size_t t = 0; t < 3; ++t) {
      bodies.push_back([&, t] {
        std::mt19937 rng(static_cast<std::uint32_t>(seed * 7 + t));
        for (int i = 0; i < 4; ++i) {
          if (held[t].empty() || rng() % 2 == 0) {
            const sd::chain got = f.stack.pop_chain(f.slots, 1 + rng() % 2);
            sd::slot_index s = got.first;
            for (std::uint32_t j = 0; j < got.count; ++j, s = f.slots[s].next.load()) held[t].push_back(s);
          } else {
            const sd::slot_index s = held[t].back();
            held[t].pop_back();
            f.stack.push_chain(f.slots, sd::chain{s, s, 1});
          }
        }
      });
    }
    switch_points += scheduler::run(bodies, scheduler::random(seed));
    ++schedules;
    std::multiset<std::uint32_t> all;
    for (const auto& h : held) {
      for (const auto s : h) all.insert(f.mark_of(s));
    }
    const sd::chain rest = f.stack.pop_all(f.slots);
    sd::slot_index s = rest.first;
    for (std::uint32_t j = 0; j < rest.count; ++j, s = f.slots[s].next.load()) all.insert(f.mark_of(s));
    CHECK(all.size() == n);
    CHECK(std::set<std::uint32_t>(all.begin(), all.end()).size() == n);
  }
  MESSAGE("stack: " << schedules << " schedules, " << switch_points << " switch points");
}

namespace {

enum class gate_op { submit, done, admit, grow, shrink, set_cap, read };

struct gate_event {
  gate_op what;
  std::int64_t arg;
  std::int64_t answer;  // try_admit's bool, in_flight(), or 0
};

// One call on a gate or on its model; the answer that can be compared (0 for calls that have none).
template <class Gate>
std::int64_t apply(Gate& g, const gate_event& e) {
  switch (e.what) {
    case gate_op::submit: g.note_submitted(); return 0;
    case gate_op::done: g.note_done(); return 0;
    case gate_op::admit: return g.try_admit();
    case gate_op::grow: g.adjust(sluice::pressure::ok, e.arg); return 0;
    case gate_op::shrink: g.adjust(sluice::pressure::soft, e.arg); return 0;
    case gate_op::set_cap: g.set_cap(e.arg); return 0;
    case gate_op::read: return g.in_flight();
  }
  return 0;
}

}  // namespace

TEST_CASE("random schedules of the gate replay exactly through its sequential model") {
  std::uint64_t schedules = 0, calls = 0, switch_points = 0;
  for (const std::uint64_t seed : seeds(3000)) {
    CAPTURE(seed);
    sluice::gate g{2};
    std::vector<gate_event> log;  // appended by the running thread alone, in linearization order
    std::vector<std::function<void()>> bodies;
    for (std::size_t t = 0; t < 3; ++t) {
      bodies.push_back([&, t] {
        std::mt19937 rng(static_cast<std::uint32_t>(seed * 5 + t));
        for (int i = 0; i < 5; ++i) {
          gate_event e{static_cast<gate_op>(rng() % 7), static_cast<std::int64_t>(rng() % 5) - 1, 0};
          e.answer = apply(g, e);
          log.push_back(e);
        }
      });
    }
    switch_points += scheduler::run(bodies, scheduler::random(seed));
    ++schedules;
    sluice::mutex_gate model{2};
    for (const gate_event& e : log) {
      ++calls;
      CHECK(apply(model, e) == e.answer);
    }
    CHECK(model.in_flight() == g.in_flight());
    CHECK(model.cap() == g.cap());
  }
  MESSAGE("gate: " << schedules << " schedules, " << calls << " calls, " << switch_points << " switch points");
}

TEST_CASE("the gate's floor holds at zero under every schedule a seed picks") {
  for (const std::uint64_t seed : seeds(1000)) {
    CAPTURE(seed);
    sluice::gate g{1};
    g.note_submitted();
    g.note_submitted();
    std::vector<std::function<void()>> bodies(3, [&] {
      g.note_done();
      g.note_done();
    });
    scheduler::run(bodies, scheduler::random(seed));
    CHECK(g.in_flight() == 0);
    g.note_submitted();
    CHECK(g.in_flight() == 1);
  }
}

TEST_CASE("a saturating note_submitted is one step: no schedule shows its add without its undo") {
  // in_flight at gate_limit. A submits (saturated: nothing changes); B finishes one and reads.
  // Sequentially: submit-done-read ends at limit - 1 with read limit - 1; done-submit-read and
  // done-read-submit end at limit. A read of limit must therefore end at limit: a submit that
  // adds, then undoes, lets B's done land between and B read limit, yet ends at limit - 1.
  // Reaching gate_limit by 2^31 calls is too slow here, so the word is set directly: gate is
  // standard-layout with the word as its first member (bits 0-31 count, 32-63 cap).
  static_assert(std::is_standard_layout_v<sluice::gate>);
  std::uint64_t schedules = 0;
  for (const std::uint64_t seed : seeds(1000)) {
    CAPTURE(seed);
    sluice::gate g{1};
    auto& word = *reinterpret_cast<sluice::detail::atomic<std::uint64_t>*>(&g);
    word.store(static_cast<std::uint64_t>(sluice::gate_limit) << 32 | static_cast<std::uint64_t>(sluice::gate_limit));
    REQUIRE(g.in_flight() == sluice::gate_limit);
    std::int64_t read = 0;
    scheduler::run({[&] { g.note_submitted(); },
                    [&] {
                      g.note_done();
                      read = g.in_flight();
                    }},
                   scheduler::random(seed));
    ++schedules;
    const std::int64_t end = g.in_flight();
    CHECK((end == sluice::gate_limit || end == sluice::gate_limit - 1));
    if (read == sluice::gate_limit) CHECK(end == sluice::gate_limit);
    CHECK(g.cap() == sluice::gate_limit);
  }
  MESSAGE("saturation: " << schedules << " schedules");
}

TEST_CASE("waiters are released by note_done, set_cap and adjust, with no wake-up lost") {
  // Cap 1, held by the main thread before the schedule. Two threads admit() (both must wait),
  // then give their admission back; a third makes room in one of three ways. Whatever the
  // schedule, every thread must finish: a lost wake-up is a stall, which the scheduler counts.
  std::uint64_t schedules = 0, switch_points = 0;
  for (int how = 0; how < 3; ++how) {
    for (const std::uint64_t seed : seeds(400)) {
      CAPTURE(how);
      CAPTURE(seed);
      sluice::gate g{1};
      REQUIRE(g.try_admit());
      const auto waiter = [&] {
        g.admit();
        g.note_done();
      };
      switch_points += scheduler::run(
          {waiter, waiter,
           [&] {
             if (how == 0) g.note_done();
             if (how == 1) g.set_cap(3);
             if (how == 2) g.adjust(sluice::pressure::ok, 2);
           }},
          scheduler::random(seed));
      ++schedules;
      CHECK(scheduler::stalls() == 0);
      CHECK(g.in_flight() == (how == 0 ? 0 : 1));  // the main thread's admission, unless returned
    }
  }
  MESSAGE("waiting gate: " << schedules << " schedules, " << switch_points << " switch points");
}

TEST_CASE("a timed wait with nobody to make room gives up and counts nothing") {
  // The scheduler's time passes only when no thread can run: the wait then times out, and
  // try_admit_for, which reads the real clock, gives up once its short timeout has passed.
  for (const std::uint64_t seed : seeds(200)) {
    CAPTURE(seed);
    sluice::gate g{1};
    REQUIRE(g.try_admit());
    bool got = true, other = false;
    scheduler::run({[&] { got = g.try_admit_for(std::chrono::microseconds(200)); },
                    [&] { other = g.try_admit(); }},
                   scheduler::random(seed));
    CHECK_FALSE(got);
    CHECK_FALSE(other);
    CHECK(scheduler::stalls() == 0);
    CHECK(g.in_flight() == 1);
  }
}

TEST_CASE("the scheduler reports a wait that nothing will ever end") {
  // Its own check: a thread that waits on a condition variable nobody notifies is a stall; the
  // scheduler counts it and wakes the thread spuriously, so that the run ends and says so.
  sluice::detail::mutex m;
  sluice::detail::condition_variable cv;
  bool woke = false;
  scheduler::run({[&] {
                    std::unique_lock lock(m);
                    cv.wait(lock);
                    woke = true;
                  },
                  [] {}},
                 scheduler::random(1));
  CHECK(woke);
  CHECK(scheduler::stalls() == 1);
}
