// Histories of real concurrent runs of sluice::gate and sluice::mutex_gate, each checked against
// the sequential gate; then the checker's other half of its self-test: gates broken on purpose
// must be caught.
#include <random>

#include "../doctest.hpp"
#include "broken.hpp"
#include "drivers.hpp"

using lincheck::gate_call;
using lincheck::gate_op;

TEST_CASE_TEMPLATE("lincheck: gate histories are linearizable", G, sluice::gate, sluice::mutex_gate) {
  const auto t = lincheck::check_gate_histories<G>(lincheck::histories(2000), 1);
  MESSAGE(t.summary());
  CHECK_MESSAGE(!t.rejected(), t.failure);
  CHECK(t.histories > 0);
}

// A broken gate must be caught within `tries` histories; one rejection is enough, and the run
// stops there. Detection is all but certain long before: each history has several chances.
namespace {

template <class G>
void expect_caught(const lincheck::gate_mix& mix) {
  constexpr std::size_t tries = 2000;
  const auto t = lincheck::check_gate_histories<G>(tries, 7, mix);
  MESSAGE("caught after " << t.histories << " of at most " << tries << " histories (" << t.calls
                          << " calls); the first rejected:\n" << t.failure);
  CHECK(t.rejected());
}

}  // namespace

TEST_CASE("lincheck: a gate whose adjust reads then sets is caught") {
  expect_caught<lincheck::broken::lossy_adjust_gate>([](std::mt19937_64& rng) {
    const auto r = rng() % 10;
    if (r < 6) return gate_call{.op = gate_op::adjust, .arg = 1000, .p = sluice::pressure::ok};
    if (r < 8) return gate_call{.op = gate_op::adjust, .arg = 1000, .p = sluice::pressure::soft};
    return gate_call{.op = gate_op::cap};
  });
}

TEST_CASE("lincheck: a gate whose try_admit checks then increments is caught") {
  expect_caught<lincheck::broken::racy_admit_gate>([](std::mt19937_64& rng) {
    const auto r = rng() % 10;
    if (r < 6) return gate_call{.op = gate_op::try_admit};
    if (r < 8) return gate_call{.op = gate_op::note_done};
    return gate_call{.op = gate_op::in_flight};
  });
}

TEST_CASE("lincheck: a waiting gate that lets a woken waiter in without checking is caught") {
  expect_caught<lincheck::broken::unchecked_wake_gate>([](std::mt19937_64& rng) {
    const auto r = rng() % 10;
    if (r < 6) return gate_call{.op = gate_op::admit_for};
    if (r < 8) return gate_call{.op = gate_op::note_done};
    return gate_call{.op = gate_op::in_flight};
  });
}

TEST_CASE("lincheck: a gate whose weighted try_admit checks one unit only is caught") {
  expect_caught<lincheck::broken::weight_blind_gate>([](std::mt19937_64& rng) {
    const auto r = rng() % 10;
    if (r < 6) return gate_call{.op = gate_op::try_admit, .units = static_cast<std::int64_t>(2 + rng() % 2)};
    if (r < 8) return gate_call{.op = gate_op::note_done, .units = 2};
    return gate_call{.op = gate_op::in_flight};
  });
}
