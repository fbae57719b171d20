// The limiter's turn (lib/limit.cpp, (T1) and (T2)) under Relacy: samples and adjusts from three
// threads, one turn at a time; the window's fields are watched plain data, so two turns that
// overlap, or one that does not see the last one's writes, are a data race that Relacy reports.
// Afterwards the gate's cap is the effective cap of the last change.
#include <algorithm>
#include <chrono>
#include <optional>

#include "check.hpp"
#include "../doctest.hpp"
#include "spot.hpp"
#include "sluice/limit.hpp"

namespace {

using namespace sluice_relacy;
using namespace std::chrono_literals;

struct turns : rl::test_suite<turns, 3> {
  std::optional<sluice::gate> gate;
  std::optional<sluice::limiter<sluice::gate>> lim;

  void before() {
    spot.emplace();
    gate.emplace(100);
    // Limits 4 to 12; a window of 2, so that a turn's writes are read by the next turn.
    lim.emplace(*gate, sluice::aimd_limit{{.initial_limit = 8, .min_limit = 4, .max_limit = 12}},
                sluice::limiter_options{.min = 2, .max = 10, .window = 2});
  }
  void thread(unsigned index) {
    if (index == 0) {
      lim->adjust(sluice::pressure::soft);
      lim->adjust(sluice::pressure::soft);
    } else {
      lim->sample(1ms, 8, sluice::outcome::done);
      lim->sample(1ms, 8, index == 1 ? sluice::outcome::done : sluice::outcome::dropped);
    }
  }
  void after() {
    const sluice::limiter_stats s = lim->stats();
    RL_ASSERT(s.applied + s.skipped == 4);
    RL_ASSERT(lim->pressure_cap() == 8);  // the adjusts wait for the turn: neither is lost
    RL_ASSERT(lim->cap() == std::clamp<std::int64_t>(std::min(lim->limit(), lim->pressure_cap()), 2, 10));
    RL_ASSERT(gate->cap() == lim->cap());
    lim.reset();
    gate.reset();
    spot.reset();
  }
};

TEST_CASE("limiter: one turn at a time, and the gate's cap is the last turn's (T)") {
  // Random schedules only: an adjust that waits for the turn spins (yielding), and a search with a
  // bound on preemptions would never preempt the spin.
  expect_passes("limiter turns, random schedules", explore<turns>(random_schedules(100'000)));
  const ordering orderings[] = {
      {"(T1) taking the turn, an acquire", "lib/limit.cpp", "// (T1) turn taken", 0},
      {"(T2) giving the turn back, a release", "lib/limit.cpp", "// (T2) turn given", 0},
  };
  for (const ordering& o : orderings) expect_reported<turns>("limiter turns", o, random_schedules(100'000));
}

}  // namespace
