// The checker on hand-written histories: the deterministic half of its self-test. Each history
// is small enough to judge by hand; the comment says why it is (or is not) linearizable.
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <vector>
#include <string>

#include "../doctest.hpp"
#include "gate_model.hpp"
#include "lincheck.hpp"
#include "pool_model.hpp"

using lincheck::gate_call;
using lincheck::gate_op;
using lincheck::pool_call;
using lincheck::pool_op;
using lincheck::pool_rules;
using sluice::pressure;

namespace {

// A history written out call by call: thread, invoked, returned.
template <class Call>
struct script {
  lincheck::history<Call> h;
  script& operator()(std::uint32_t thread, std::uint64_t invoked, std::uint64_t returned, Call c) {
    h.when.push_back({thread, invoked, returned});
    h.what.push_back(c);
    return *this;
  }
};

// What a case checked, for its closing MESSAGE.
std::size_t checked_histories = 0, checked_calls = 0;

lincheck::verdict counted(std::span<const lincheck::timing> when, const lincheck::model& m) {
  ++checked_histories;
  checked_calls += when.size();
  return lincheck::check(when, m);
}

std::string checked() {
  std::string out =
      std::to_string(checked_histories) + " histories, " + std::to_string(checked_calls) + " calls";
  checked_histories = checked_calls = 0;
  return out;
}

bool gate_ok(std::int64_t cap, const script<gate_call>& s) {
  return counted(s.h.when, lincheck::gate_model(cap, s.h.what)).linearizable;
}

gate_call admit(bool answer) { return {.op = gate_op::try_admit, .answer = answer}; }
gate_call read_cap(std::int64_t answer) { return {.op = gate_op::cap, .answer = answer}; }
gate_call read_count(std::int64_t answer) { return {.op = gate_op::in_flight, .answer = answer}; }
gate_call up(std::int64_t max_cap) { return {.op = gate_op::adjust, .arg = max_cap, .p = pressure::ok}; }
constexpr gate_call submitted{.op = gate_op::note_submitted};
constexpr gate_call done{.op = gate_op::note_done};

}  // namespace

TEST_CASE("checker: two overlapping admissions under cap 1 cannot both succeed") {
  CHECK_FALSE(gate_ok(1, script<gate_call>{}(0, 0, 3, admit(true))(1, 1, 2, admit(true))));
  CHECK(gate_ok(1, script<gate_call>{}(0, 0, 3, admit(true))(1, 1, 2, admit(false))));
  CHECK(gate_ok(1, script<gate_call>{}(0, 0, 3, admit(false))(1, 1, 2, admit(true))));
  MESSAGE(checked());
}

TEST_CASE("checker: real-time order binds, overlap frees") {
  const gate_call set5{.op = gate_op::set_cap, .arg = 5};
  // set_cap(5) returned before cap() was invoked: cap() must see 5.
  CHECK_FALSE(gate_ok(1, script<gate_call>{}(1, 0, 1, set5)(0, 2, 3, read_cap(1))));
  CHECK(gate_ok(1, script<gate_call>{}(1, 0, 1, set5)(0, 2, 3, read_cap(5))));
  // Overlapping, either order will do.
  CHECK(gate_ok(1, script<gate_call>{}(1, 0, 2, set5)(0, 1, 3, read_cap(1))));
  CHECK(gate_ok(1, script<gate_call>{}(1, 0, 2, set5)(0, 1, 3, read_cap(5))));
  MESSAGE(checked());
}

TEST_CASE("checker: a linearization that must put a long call early") {
  // The submission spans everything; t1 sees it (1), then t2's note_done, then sees 0. Only
  // "submitted, read 1, done, read 0" fits, with the submission placed before t1's first read.
  script<gate_call> s;
  s(0, 0, 10, submitted)(1, 1, 2, read_count(1))(2, 3, 4, done)(1, 5, 6, read_count(0));
  CHECK(gate_ok(2, s));
  // The count cannot rise again without a second submission.
  script<gate_call> t;
  t(0, 0, 10, submitted)(1, 1, 2, read_count(1))(2, 3, 4, done)(1, 5, 6, read_count(1));
  CHECK_FALSE(gate_ok(2, t));
  MESSAGE(checked());
}

TEST_CASE("checker: a lost adjust step is caught, and the report shows the history") {
  script<gate_call> s;
  s(0, 0, 3, up(10))(1, 1, 2, up(10))(2, 4, 5, read_cap(3));  // two steps up from 2 read as one
  const auto v = counted(s.h.when, lincheck::gate_model(2, s.h.what));
  CHECK_FALSE(v.linearizable);
  CHECK(v.report.find("adjust(ok, 10)") != std::string::npos);
  CHECK(v.report.find("cap() -> 3") != std::string::npos);
  MESSAGE(v.report);
  script<gate_call> t;
  t(0, 0, 3, up(10))(1, 1, 2, up(10))(2, 4, 5, read_cap(4));
  CHECK(gate_ok(2, t));
  MESSAGE(checked());
}

TEST_CASE("checker: memoisation keeps an exhaustive rejection small") {
  // Four threads of fifteen submissions, each call overlapping its neighbours on the other
  // threads: each round of four can go 4! ways, so the interleavings number (4!)^15, about
  // 5 * 10^20, but the configurations (a prefix of each thread, and the count it implies) at most
  // 16^4. A final read of 59 must be rejected, which means exhausting them all.
  for (const std::int64_t seen : {59, 60}) {
    script<gate_call> s;
    for (std::uint32_t t = 0; t < 4; ++t) {
      for (std::uint64_t k = 0; k < 15; ++k) s(t, 10 * k + t, 10 * k + t + 8, submitted);
    }
    s(4, 1000, 1001, read_count(seen));
    const auto v = counted(s.h.when, lincheck::gate_model(1, s.h.what));
    CHECK(v.linearizable == (seen == 60));
    CHECK(v.configurations <= 16 * 16 * 16 * 16 + 1);
    MESSAGE("final read " << seen << ": " << v.configurations << " configurations");
  }
  MESSAGE(checked());
}

// ---- the pool model ---------------------------------------------------------------------------

namespace {

constexpr std::uint32_t observer = 9;

pool_call take(std::size_t n, std::size_t capacity = 0, std::uint32_t id = 0) {
  return {.op = pool_op::take, .size = n, .answer = capacity, .answer_id = id};
}
pool_call retire(std::size_t capacity, std::uint32_t id) {
  return {.op = pool_op::retire, .size = capacity, .id = id};
}
pool_call retained(std::size_t n) { return {.op = pool_op::retained, .answer = n}; }
pool_call trim() { return {.op = pool_op::trim}; }
pool_call stats(std::uint64_t hits, std::uint64_t misses, std::uint64_t retired, std::uint64_t dropped,
                std::size_t count, std::size_t bytes) {
  return {.op = pool_op::stats, .stats = {hits, misses, retired, dropped, count, bytes}};
}

pool_rules exact(std::size_t bound) { return {.bound = bound, .ceiling = 4096, .observer = observer}; }

bool pool_ok(pool_rules rules, script<pool_call> s, lincheck::state initial = {}) {
  lincheck::annotate(s.h, observer);
  return counted(s.h.when, lincheck::pool_model(rules, s.h.when, s.h.what, initial)).linearizable;
}

lincheck::state holding_1000_and_4096() {
  return lincheck::pool_model::with_buffer(lincheck::pool_model::with_buffer({}, 1000, 1), 4096, 2);
}

// Two buffers retired before the history (and counted so).
lincheck::state holding_2048_and_4096() {
  const auto s = lincheck::pool_model::with_buffer(lincheck::pool_model::with_buffer({}, 2048, 1), 4096, 2);
  return lincheck::pool_model::with_counts(s, 0, 0, 2, 0);
}

pool_rules uncached(std::size_t bound) {
  pool_rules r = exact(bound);
  r.in_flight = r.scan = r.trim_in_flight = true;
  return r;
}

pool_rules cached(std::size_t bound, bool trim_in_flight) {
  pool_rules r = exact(bound);
  r.scan = r.caches = true;
  r.trim_in_flight = trim_in_flight;
  return r;
}

}  // namespace

TEST_CASE("checker: take answers the smallest buffer that serves") {
  CHECK(pool_ok(exact(4), script<pool_call>{}(0, 0, 1, take(900, 1000, 1)), holding_1000_and_4096()));
  CHECK_FALSE(pool_ok(exact(4), script<pool_call>{}(0, 0, 1, take(900, 4096, 2)), holding_1000_and_4096()));
  // 1000 does not serve 1024, though it sits in 1024's class.
  CHECK(pool_ok(exact(4), script<pool_call>{}(0, 0, 1, take(1024, 4096, 2)), holding_1000_and_4096()));
  CHECK_FALSE(pool_ok(exact(4), script<pool_call>{}(0, 0, 1, take(1024, 1000, 1)), holding_1000_and_4096()));
  // Above the ceiling nothing is answered.
  CHECK_FALSE(pool_ok(exact(4), script<pool_call>{}(0, 0, 1, take(5000, 4096, 2)), holding_1000_and_4096()));
  MESSAGE(checked());
}

TEST_CASE("checker: a buffer is answered once, and only while retained") {
  CHECK_FALSE(pool_ok(exact(4), script<pool_call>{}(0, 0, 1, take(16, 1000, 1))(1, 2, 3, take(16, 1000, 1)),
                      holding_1000_and_4096()));
  // Overlapping takes may answer the two buffers either way round, not the same one twice.
  CHECK(pool_ok(exact(4), script<pool_call>{}(0, 0, 3, take(16, 4096, 2))(1, 1, 2, take(16, 1000, 1)),
                holding_1000_and_4096()));
  // A buffer retired over the ceiling was dropped and cannot come back.
  CHECK_FALSE(pool_ok(exact(4), script<pool_call>{}(0, 0, 1, retire(8192, 5))(0, 2, 3, take(5000, 8192, 5))));
  MESSAGE(checked());
}

TEST_CASE("checker: the bound") {
  script<pool_call> s;
  s(0, 0, 2, retire(2048, 4))(1, 1, 3, retire(4096, 12))(2, 4, 5, retire(1000, 20));
  CHECK(pool_ok(exact(2), script<pool_call>(s)(observer, 6, 7, retained(2))));
  CHECK_FALSE(pool_ok(exact(2), script<pool_call>(s)(observer, 6, 7, retained(3))));
  // The third retire came after both others: it is the one dropped.
  CHECK_FALSE(pool_ok(exact(2), script<pool_call>(s)(observer, 6, 7, take(16, 1000, 20))));
  CHECK(pool_ok(exact(2), script<pool_call>(s)(observer, 6, 7, take(16, 2048, 4))));
  MESSAGE(checked());
}

TEST_CASE("checker: the caches rule passes over what another thread caches, and only that") {
  pool_rules cached = exact(4);
  cached.caches = true;
  // t1 misses the buffer t0 cached; the exact model refuses, the caches rule admits.
  script<pool_call> s;
  s(0, 0, 1, retire(4096, 4))(1, 2, 3, take(4096));
  CHECK_FALSE(pool_ok(exact(4), s));
  CHECK(pool_ok(cached, s));
  // A thread does not miss its own cache, nor anyone an off-class buffer (never cached).
  CHECK_FALSE(pool_ok(cached, script<pool_call>{}(0, 0, 1, retire(4096, 4))(0, 2, 3, take(4096))));
  CHECK_FALSE(pool_ok(cached, script<pool_call>{}(0, 0, 1, retire(3000, 4))(1, 2, 3, take(3000))));
  // Shared buffers: t1's take may pop both 4096s into its cache, so t0 may then miss the other.
  script<pool_call> batch;
  batch(1, 0, 1, take(4096, 4096, 2))(0, 2, 3, take(4096));
  const auto two = lincheck::pool_model::with_buffer(lincheck::pool_model::with_buffer({}, 4096, 1), 4096, 2);
  CHECK(pool_ok(cached, batch, two));
  CHECK_FALSE(pool_ok(exact(4), batch, two));
  // Once the workers have exited the observer sees everything, and the count is exact.
  CHECK_FALSE(pool_ok(cached, script<pool_call>(s)(observer, 4, 5, take(16))));
  CHECK(pool_ok(cached, script<pool_call>(s)(observer, 4, 5, take(16, 4096, 4))));
  CHECK(pool_ok(cached, script<pool_call>{}(0, 0, 1, retire(4096, 4))(1, 2, 3, retained(0))));
  CHECK_FALSE(pool_ok(cached, script<pool_call>{}(0, 0, 1, retire(4096, 4))(observer, 2, 3, retained(0))));
  MESSAGE(checked());
}

TEST_CASE("checker: the in-flight rule admits a drop and a count skewed by a retire still in flight") {
  pool_rules relaxed = exact(1);
  relaxed.in_flight = true;
  // t0's retire holds the only place for a long time; t1's retire is dropped meanwhile and its
  // take misses t0's buffer, not yet filed. No sequence explains that, but the rule does.
  script<pool_call> s;
  s(0, 0, 10, retire(2048, 4))(1, 1, 2, retire(4096, 12))(1, 3, 4, take(16));
  s(observer, 11, 12, take(16, 2048, 4));
  CHECK_FALSE(pool_ok(exact(1), s));
  CHECK(pool_ok(relaxed, s));
  // Without a call in flight, the same drop is a bug.
  script<pool_call> t;
  t(0, 0, 1, retire(2048, 4))(1, 2, 3, take(16, 2048, 4))(1, 4, 5, retire(4096, 12))(1, 6, 7, take(16));
  CHECK_FALSE(pool_ok(relaxed, t));
  // retained() may count the place t0's retire holds before its buffer can be taken.
  script<pool_call> r;
  r(0, 0, 10, retire(2048, 4))(1, 1, 2, retained(1))(1, 3, 4, take(16));
  CHECK_FALSE(pool_ok(exact(1), r));
  CHECK(pool_ok(relaxed, r));
  MESSAGE(checked());
}

TEST_CASE("checker: the scan rule passes over a smaller buffer filed during the take") {
  pool_rules relaxed = exact(4);
  relaxed.scan = true;
  // t1 files 1000, then 4096, both inside t0's take, which answers 4096: it had looked at 1024's
  // class before 1000 landed there.
  script<pool_call> s;
  s(0, 0, 10, take(16, 4096, 13))(1, 1, 2, retire(1000, 12))(1, 3, 4, retire(4096, 13))(observer, 11, 12,
                                                                                         take(16, 1000, 12));
  CHECK_FALSE(pool_ok(exact(4), s));
  CHECK(pool_ok(relaxed, s));
  // A smaller buffer filed before the take began may not be passed over.
  script<pool_call> t;
  t(1, 0, 1, retire(1000, 12))(1, 2, 3, retire(4096, 13))(0, 4, 10, take(16, 4096, 13));
  CHECK_FALSE(pool_ok(relaxed, t));
  MESSAGE(checked());
}

TEST_CASE("checker: trim frees everything, and stats() counts a trimmed buffer retired") {
  script<pool_call> s;
  s(0, 0, 1, retire(2048, 4))(0, 2, 3, trim());
  CHECK(pool_ok(exact(4), script<pool_call>(s)(1, 4, 5, take(16))));
  CHECK_FALSE(pool_ok(exact(4), script<pool_call>(s)(1, 4, 5, take(16, 2048, 4))));
  CHECK(pool_ok(exact(4), script<pool_call>(s)(observer, 4, 5, stats(0, 0, 1, 0, 0, 0))));
  CHECK_FALSE(pool_ok(exact(4), script<pool_call>(s)(observer, 4, 5, stats(0, 0, 0, 1, 0, 0))));
  CHECK_FALSE(pool_ok(exact(4), script<pool_call>(s)(observer, 4, 5, stats(0, 0, 1, 0, 1, 2048))));
  // A take overlapping the trim may come before it.
  CHECK(pool_ok(exact(4), script<pool_call>{}(0, 0, 1, retire(2048, 4))(0, 2, 5, trim())(1, 3, 4, take(16, 2048, 4))));
  MESSAGE(checked());
}

TEST_CASE("checker: a buffer retired after a trim returned outlives it, whatever began before") {
  // lib/pool.cpp at 8c28088: t0's retire began before t1's trim; t2 retired 2048#12 after the
  // trim returned; t0's retire, filing after the trim, drained the class, 2048#12 with it.
  script<pool_call> s;
  s(0, 0, 10, retire(2048, 4))(1, 1, 2, trim())(2, 3, 4, retire(2048, 12));
  for (const pool_rules& rules : {uncached(4), cached(64, true)}) {
    CHECK_FALSE(pool_ok(rules, script<pool_call>(s)(observer, 11, 12, take(16))));
    CHECK_FALSE(pool_ok(rules, script<pool_call>(s)(observer, 11, 12, stats(0, 0, 2, 0, 0, 0))));
    CHECK(pool_ok(rules, script<pool_call>(s)(observer, 11, 12, take(16, 2048, 12))(observer, 13, 14, take(16))));
    CHECK(pool_ok(rules, script<pool_call>(s)(observer, 11, 12, stats(0, 0, 2, 0, 1, 2048))));
  }
  MESSAGE(checked());
}

TEST_CASE("checker: with caches, a trim reaches another worker's cache at its next call") {
  // t0 caches 4096#4; t1's trim dooms it.
  script<pool_call> s;
  s(0, 0, 1, retire(4096, 4))(1, 2, 3, trim());
  // t0's next call, invoked after the trim returned, frees its cache first.
  CHECK_FALSE(pool_ok(cached(64, true), script<pool_call>(s)(0, 4, 5, take(4096, 4096, 4))));
  // Every worker has exited before the observer.
  CHECK_FALSE(pool_ok(cached(64, true), script<pool_call>(s)(observer, 4, 5, take(16, 4096, 4))));
  CHECK(pool_ok(cached(64, true), script<pool_call>(s)(observer, 4, 5, take(16))));
  CHECK(pool_ok(cached(64, true), script<pool_call>(s)(observer, 4, 5, stats(0, 0, 1, 0, 0, 0))));
  // A call of t0 that began before the trim returned may still answer it, placed after the trim
  // (t2's take cannot pass over 1000#1 on the shelf, never cached, before the trim). Another
  // thread may not, unless TRIM IN FLIGHT (it might have been on a stack not yet emptied).
  const auto on_shelf = lincheck::pool_model::with_counts(lincheck::pool_model::with_buffer({}, 1000, 1), 0, 0, 1, 0);
  script<pool_call> late;
  late(0, 0, 1, retire(4096, 4))(1, 2, 9, trim())(2, 3, 4, take(16));
  CHECK(pool_ok(cached(64, false), script<pool_call>(late)(0, 5, 6, take(4096, 4096, 4)), on_shelf));
  CHECK_FALSE(pool_ok(cached(64, false), script<pool_call>(late)(3, 5, 6, take(4096, 4096, 4)), on_shelf));
  CHECK(pool_ok(cached(64, true), script<pool_call>(late)(3, 5, 6, take(4096, 4096, 4)), on_shelf));
  // What the trimming thread itself caches is freed with the trim.
  script<pool_call> own;
  own(1, 0, 1, retire(4096, 4))(1, 2, 9, trim())(2, 3, 4, take(16));
  CHECK_FALSE(pool_ok(cached(64, false), script<pool_call>(own)(0, 5, 6, take(4096, 4096, 4)), on_shelf));
  MESSAGE(checked());
}

TEST_CASE("checker: TRIM IN FLIGHT, a trim that frees one class after another") {
  pool_rules without = uncached(4);
  without.trim_in_flight = false;
  // t0's take looked at 2048's class after the trim emptied it and at 4096's before.
  script<pool_call> s;
  s(1, 0, 10, trim())(0, 1, 2, take(16, 4096, 2));
  CHECK_FALSE(pool_ok(without, s, holding_2048_and_4096()));
  CHECK(pool_ok(uncached(4), s, holding_2048_and_4096()));
  // Not once the trim has returned.
  CHECK_FALSE(pool_ok(uncached(4), script<pool_call>{}(1, 0, 3, trim())(0, 4, 5, take(16, 4096, 2)),
                      holding_2048_and_4096()));
  // A retire overlapping the trim may be dropped, with room in the bound...
  script<pool_call> drop;
  drop(1, 0, 10, trim())(0, 1, 2, retire(1000, 4))(observer, 11, 12, stats(0, 0, 2, 1, 0, 0));
  CHECK_FALSE(pool_ok(without, drop, holding_2048_and_4096()));
  CHECK(pool_ok(uncached(4), drop, holding_2048_and_4096()));
  // ... or kept and then freed by the trim, with none: the trim gave 2048's place back early.
  script<pool_call> kept;
  kept(1, 0, 10, trim())(0, 1, 2, retire(1000, 4))(observer, 11, 12, stats(0, 0, 3, 0, 0, 0));
  pool_rules without_at_2 = without;
  without_at_2.bound = 2;
  CHECK_FALSE(pool_ok(without_at_2, kept, holding_2048_and_4096()));
  CHECK(pool_ok(uncached(2), kept, holding_2048_and_4096()));
  // But a retire invoked after every trim returned is kept or dropped as ever.
  script<pool_call> after;
  after(1, 0, 3, trim())(0, 4, 5, retire(1000, 4))(observer, 11, 12, stats(0, 0, 3, 0, 0, 0));
  CHECK_FALSE(pool_ok(uncached(2), after, holding_2048_and_4096()));
  MESSAGE(checked());
}

TEST_CASE("checker: stats() is exact from the observer, and from a worker within its calls' counts") {
  script<pool_call> s;
  s(0, 0, 1, retire(2048, 4))(0, 2, 3, take(16, 2048, 4))(1, 4, 5, take(16))(0, 6, 7, retire(8192, 5));
  CHECK(pool_ok(exact(4), script<pool_call>(s)(observer, 8, 9, stats(1, 1, 1, 1, 0, 0))));
  CHECK_FALSE(pool_ok(exact(4), script<pool_call>(s)(observer, 8, 9, stats(2, 1, 1, 1, 0, 0))));
  CHECK_FALSE(pool_ok(exact(4), script<pool_call>(s)(observer, 8, 9, stats(1, 0, 1, 1, 0, 0))));
  CHECK_FALSE(pool_ok(exact(4), script<pool_call>(s)(observer, 8, 9, stats(1, 1, 2, 0, 0, 0))));
  CHECK_FALSE(pool_ok(exact(4), script<pool_call>(s)(observer, 8, 9, stats(1, 1, 1, 1, 1, 0))));
  CHECK_FALSE(pool_ok(exact(4), script<pool_call>(s)(observer, 8, 9, stats(1, 1, 1, 1, 0, 2048))));
  // The retired buffer's bytes while it is held.
  CHECK(pool_ok(exact(4), script<pool_call>{}(0, 0, 1, retire(3000, 4))(observer, 2, 3, stats(0, 0, 1, 0, 1, 3000))));
  // A worker's stats() during t0's retire: that retire counted or not, nothing else.
  const pool_rules relaxed = uncached(4);
  script<pool_call> w;
  w(0, 0, 3, retire(2048, 4))(1, 1, 2, stats(0, 0, 0, 0, 0, 0));
  CHECK(pool_ok(relaxed, w));
  CHECK(pool_ok(relaxed, script<pool_call>{}(0, 0, 3, retire(2048, 4))(1, 1, 2, stats(0, 0, 1, 0, 1, 2048))));
  CHECK_FALSE(pool_ok(relaxed, script<pool_call>{}(0, 0, 3, retire(2048, 4))(1, 1, 2, stats(0, 0, 2, 0, 1, 2048))));
  CHECK_FALSE(pool_ok(relaxed, script<pool_call>{}(0, 0, 3, retire(2048, 4))(1, 1, 2, stats(1, 0, 0, 0, 0, 0))));
  // After it returned, it counts.
  CHECK_FALSE(pool_ok(relaxed, script<pool_call>{}(0, 0, 1, retire(2048, 4))(1, 2, 3, stats(0, 0, 0, 0, 1, 2048))));
  // Exact for mutex_pool, whose stats() is one step: not the retire counted and its buffer not.
  script<pool_call> split;
  split(0, 0, 3, retire(2048, 4))(1, 1, 2, stats(0, 0, 1, 0, 0, 0));
  CHECK(pool_ok(relaxed, split));
  CHECK_FALSE(pool_ok(exact(4), split));
  CHECK(pool_ok(exact(4), w));
  MESSAGE(checked());
}

// ---- against the definition ---------------------------------------------------------------------

namespace {

// Linearizability by its definition, with no pruning: some order of all the calls, each placed
// only after every call that returned before it was invoked, that the model accepts.
bool by_definition(std::span<const lincheck::timing> calls, const lincheck::model& m, std::uint64_t placed,
                   const lincheck::state& s) {
  if (placed == (std::uint64_t{1} << calls.size()) - 1) return true;
  for (std::size_t i = 0; i < calls.size(); ++i) {
    if (placed >> i & 1) continue;
    bool ready = true;
    for (std::size_t j = 0; j < calls.size(); ++j) {
      if ((placed >> j & 1) == 0 && calls[j].returned < calls[i].invoked) ready = false;
    }
    if (!ready) continue;
    std::vector<lincheck::state> next;
    m.step(s, i, next);
    for (const auto& t : next) {
      if (by_definition(calls, m, placed | std::uint64_t{1} << i, t)) return true;
    }
  }
  return false;
}

// Random intervals for `per_thread` calls on each of `threads` threads: invocations and returns
// interleaved at random, each thread's calls one after another.
std::vector<lincheck::timing> random_timings(std::mt19937_64& rng, std::uint32_t threads,
                                             std::size_t per_thread) {
  std::vector<lincheck::timing> out;
  std::vector<std::size_t> made(threads), open(threads, SIZE_MAX);
  for (std::uint64_t tick = 0;; ++tick) {
    std::vector<std::uint32_t> movable;
    for (std::uint32_t t = 0; t < threads; ++t) {
      if (open[t] != SIZE_MAX || made[t] < per_thread) movable.push_back(t);
    }
    if (movable.empty()) return out;
    const std::uint32_t t = movable[rng() % movable.size()];
    if (open[t] == SIZE_MAX) {
      open[t] = out.size();
      out.push_back({t, tick, 0});
      ++made[t];
    } else {
      out[open[t]].returned = tick;
      open[t] = SIZE_MAX;
    }
  }
}

}  // namespace

TEST_CASE("checker: agrees with the definition on random small histories, gate and pool") {
  std::mt19937_64 rng(5);
  std::size_t yes = 0, no = 0;
  for (int n = 0; n < 3000; ++n) {
    // Gate: random calls with random answers, so that both verdicts come up.
    script<gate_call> s;
    s.h.when = random_timings(rng, 2 + rng() % 2, 1 + rng() % 3);
    for (std::size_t i = 0; i < s.h.when.size(); ++i) {
      gate_call c{.op = static_cast<gate_op>(rng() % 8), .answer = static_cast<std::int64_t>(rng() % 3)};
      if (c.op == gate_op::try_admit || c.op == gate_op::has_capacity) c.answer %= 2;
      c.arg = static_cast<std::int64_t>(rng() % 4);
      c.p = static_cast<pressure>(rng() % 3);
      s.h.what.push_back(c);
    }
    const lincheck::gate_model m(1 + static_cast<std::int64_t>(rng() % 2), s.h.what);
    const bool fast = counted(s.h.when, m).linearizable;
    CHECK(fast == by_definition(s.h.when, m, 0, m.initial()));
    (fast ? yes : no) += 1;
  }
  for (int n = 0; n < 3000; ++n) {
    // Pool: retires of fresh buffers and takes answering one of them (or none), under rules
    // drawn at random, since the relaxations make the model nondeterministic.
    script<pool_call> s;
    s.h.when = random_timings(rng, 2 + rng() % 2, 1 + rng() % 3);
    static constexpr std::size_t capacities[] = {1000, 2048, 4096};
    for (std::size_t i = 0; i < s.h.when.size(); ++i) {
      const auto id = static_cast<std::uint32_t>(4 + i);
      switch (rng() % 4) {
        case 0: s.h.what.push_back(retire(capacities[rng() % 3], id)); break;
        case 3: s.h.what.push_back(trim()); break;
        case 1: {
          const std::size_t k = rng() % 4;  // 3: none
          const auto id = static_cast<std::uint32_t>(4 + rng() % 7);
          s.h.what.push_back(k == 3 ? take(16) : take(16, capacities[k], id));
          break;
        }
        default: s.h.what.push_back(retained(rng() % 3)); break;
      }
    }
    const auto flags = rng();
    pool_rules rules = exact(1 + rng() % 2);
    rules.in_flight = flags & 1;
    rules.scan = flags & 2;
    rules.caches = flags & 4;
    rules.trim_in_flight = flags & 8;
    lincheck::annotate(s.h, observer);
    const lincheck::pool_model m(rules, s.h.when, s.h.what, {});
    const bool fast = counted(s.h.when, m).linearizable;
    CHECK(fast == by_definition(s.h.when, m, 0, m.initial()));
    (fast ? yes : no) += 1;
  }
  CHECK(yes > 500);
  CHECK(no > 500);
  MESSAGE(checked() << " (" << yes << " linearizable, " << no << " not)");
}
