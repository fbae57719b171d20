// Hostile input: every size, capacity, ceiling, bound and cap at the ends of its type, and the
// handles moved onto themselves. Each case checks the answer the headers document (sluice/
// buffer.hpp "Bad input", docs/pool.md CONTRACT, docs/gate.md LIMITS); the sanitizer
// builds check that none of it is undefined behaviour or a leak.
//
// Ends that other suites already drive are not repeated here; docs/verification.md is the one
// index of which test proves each guarantee. test/fuzz/differential.cpp drives the same ends at
// random against the reference models.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <new>
#include <thread>
#include <utility>
#include <vector>

#include "doctest.hpp"
#include "kinds.hpp"
#include "sluice/gate.hpp"
#include "threads.hpp"

using sluice::buffer;
using sluice::gate_limit;
using sluice::pool_options;
using sluice::pressure;

namespace {

constexpr std::size_t size_max = std::numeric_limits<std::size_t>::max();
constexpr std::size_t ptrdiff_max = static_cast<std::size_t>(PTRDIFF_MAX);
constexpr std::int64_t i64_min = std::numeric_limits<std::int64_t>::min();
constexpr std::int64_t i64_max = std::numeric_limits<std::int64_t>::max();

// Impossible sizes are answered alike in every build: buffers ask operator new not to throw, and
// the sanitizers' nothrow operator new answers null under allocator_may_return_null=1, which
// test/main.cpp makes their default.

// Sizes across the whole of size_t: 0, every power of two and its neighbours, and the top.
std::vector<std::size_t> every_magnitude() {
  std::vector<std::size_t> v{0, ptrdiff_max, ptrdiff_max + 1, std::size_t{7} << 61,
                             (std::size_t{7} << 61) + 1, size_max - 1, size_max};
  for (int b = 0; b < 64; ++b) {
    const std::size_t p = std::size_t{1} << b;
    v.insert(v.end(), {p - 1, p, p + 1, p + p / 4, p + p / 4 + 1});
  }
  return v;
}

template <class P>
bool throws_bad_alloc(P& p, std::size_t n) {
  try {
    (void)p.acquire(n);
  } catch (const std::bad_alloc&) {
    return true;
  }
  return false;
}

}  // namespace

// ---- sizes ------------------------------------------------------------------------------------

TEST_CASE_TEMPLATE("size 0: an empty pool misses, and acquire(0) fills the smallest class", P, POOLS) {
  P p;
  CHECK_FALSE(p.take(0));
  CHECK(p.stats().misses == 1);
  buffer b = p.acquire(0);
  REQUIRE(b);
  CHECK(b.size() == 0);
  CHECK(b.capacity() == 16);  // "capacity fills n's class": class 0 is 16 bytes
  CHECK(b.bytes().empty());
  p.retire(std::move(b));
  CHECK(p.retained() == 1);
  buffer again = p.take(0);
  REQUIRE(again);
  CHECK(again.capacity() == 16);
  p.retire(std::move(again));
  CHECK(p.take(16).capacity() == 16);  // the same buffer serves any request up to its capacity
  const auto s = p.stats();
  CHECK(s.hits == 2);
  CHECK(s.misses == 2);
  CHECK(s.retained == 0);
}

TEST_CASE_TEMPLATE("sizes no allocator can give: take misses, acquire throws, nothing is lost", P, POOLS) {
  P p;
  p.retire(buffer(4096));  // a buffer a wrong class could hand out for a huge request
  std::uint64_t misses = 0;
  for (const std::size_t n : {ptrdiff_max + 1, std::size_t{7} << 61, (std::size_t{7} << 61) + 1,
                              size_max - 1, size_max}) {
    CAPTURE(n);
    CHECK_FALSE(p.take(n));
    CHECK(throws_bad_alloc(p, n));  // its take missed first, then buffer(n) threw
    misses += 2;
    CHECK(p.stats().misses == misses);
    CHECK(p.retained() == 1);       // the retained buffer is untouched
  }
  // Sizes up to PTRDIFF_MAX that no machine has: the allocator fails, and acquire throws.
  for (const std::size_t n : {std::size_t{1} << 50, std::size_t{1} << 62, ptrdiff_max}) {
    CAPTURE(n);
    CHECK(throws_bad_alloc(p, n));
  }
  CHECK(p.take(4096).capacity() == 4096);
}

TEST_CASE("buffers of impossible capacities throw, whichever argument is huge") {
  CHECK_THROWS_AS(buffer(size_max, 0), std::bad_alloc);
  CHECK_THROWS_AS(buffer(0, size_max), std::bad_alloc);
  CHECK_THROWS_AS(buffer(ptrdiff_max + 1), std::bad_alloc);
  CHECK_THROWS_AS(buffer(1, ptrdiff_max + 1), std::bad_alloc);
  CHECK_THROWS_AS(buffer(ptrdiff_max + 1, 1), std::bad_alloc);
  CHECK_THROWS_AS(buffer(std::size_t{1} << 50), std::bad_alloc);
  CHECK_THROWS_AS(buffer(0, ptrdiff_max), std::bad_alloc);
  CHECK_THROWS_AS(buffer{ptrdiff_max}, std::bad_alloc);
  // Size 0 is not bad input: fresh memory of no bytes, which a buffer holds.
  buffer zero(0);
  CHECK(zero);
  CHECK(zero.size() == 0);
  CHECK(zero.capacity() == 0);
  buffer roomy(0, 100);
  CHECK(roomy.size() == 0);
  CHECK(roomy.capacity() == 100);
}

// ---- ceilings ---------------------------------------------------------------------------------

TEST_CASE_TEMPLATE("a ceiling of 0 keeps only empty buffers and answers only take(0)", P, POOLS) {
  P p{pool_options{.ceiling = 0}};
  for (const std::size_t n : every_magnitude()) {
    CAPTURE(n);
    CHECK_FALSE(p.take(n));  // nothing retained yet; and above 0 nothing is ever answered
  }
  buffer zero = p.acquire(0);  // class 0 cut at the ceiling: capacity 0
  REQUIRE(zero);
  CHECK(zero.capacity() == 0);
  buffer one = p.acquire(1);  // above the ceiling: exactly what was asked
  CHECK(one.capacity() == 1);
  CHECK(p.acquire(1000).capacity() == 1000);
  CHECK_THROWS_AS((void)p.acquire(size_max), std::bad_alloc);
  p.retire(std::move(one));
  p.retire(std::move(zero));
  CHECK(p.retained() == 1);
  CHECK(p.stats().dropped == 1);
  for (const std::size_t n : every_magnitude()) {
    if (n == 0) continue;
    CAPTURE(n);
    CHECK_FALSE(p.take(n));
  }
  CHECK(p.take(0).capacity() == 0);
  CHECK(p.retained() == 0);
}

TEST_CASE_TEMPLATE("a ceiling of SIZE_MAX: class arithmetic holds across the whole range", P, POOLS) {
  P p{pool_options{.ceiling = size_max}};
  const std::vector<std::size_t> capacities{0, 16, 17, 1000, 4096, std::size_t{1} << 20};
  for (const std::size_t c : capacities) p.retire(buffer(c));
  CHECK(p.retained() == capacities.size());
  for (const std::size_t n : every_magnitude()) {
    CAPTURE(n);
    // The answer is the smallest retained capacity that serves n, or none: a class computed
    // wrongly at the top (a wrap to a small class) would answer a small buffer here.
    std::size_t expected = 0;
    bool any = false;
    for (const std::size_t c : capacities) {
      if (c >= n && (!any || c < expected)) {
        expected = c;
        any = true;
      }
    }
    buffer b = p.take(n);
    REQUIRE(static_cast<bool>(b) == any);
    if (!b) continue;
    CHECK(b.size() == n);
    CHECK(b.capacity() == expected);
    p.retire(std::move(b));
  }
  CHECK(p.retained() == capacities.size());
  for (const std::size_t n : {ptrdiff_max + 1, std::size_t{7} << 61, (std::size_t{7} << 61) + 1, size_max - 1, size_max}) {
    CAPTURE(n);
    CHECK(throws_bad_alloc(p, n));  // n's class is at least n: still no allocator can give it
  }
  CHECK(p.acquire((2 << 20) + 1).capacity() == (5 << 19));  // fresh: an ordinary class under the top
  CHECK(p.retained() == capacities.size());
}

TEST_CASE_TEMPLATE("ceilings near the top that are not class sizes", P, POOLS) {
  for (const std::size_t ceiling : {size_max - 1, ptrdiff_max + 1, ptrdiff_max, std::size_t{7} << 61}) {
    CAPTURE(ceiling);
    P p{pool_options{.ceiling = ceiling}};
    CHECK_FALSE(p.take(ceiling));
    CHECK_FALSE(p.take(ceiling + 1));
    p.retire(buffer(1000));
    CHECK_FALSE(p.take(ceiling));
    CHECK_FALSE(p.take(ceiling - 1));
    if (ceiling > ptrdiff_max) CHECK(throws_bad_alloc(p, ceiling));
    CHECK(throws_bad_alloc(p, size_max));
    CHECK(p.take(999).capacity() == 1000);
  }
}

TEST_CASE_TEMPLATE("tiny ceilings cut the smallest classes", P, POOLS) {
  P one{pool_options{.ceiling = 1}};
  CHECK(one.acquire(0).capacity() == 1);  // class 0, cut at 1
  CHECK(one.acquire(1).capacity() == 1);
  CHECK(one.acquire(2).capacity() == 2);  // above the ceiling
  one.retire(buffer(1));
  one.retire(buffer(0));
  one.retire(buffer(2));
  CHECK(one.retained() == 2);
  CHECK(one.take(0).capacity() == 0);  // the smallest that serves
  CHECK(one.take(0).capacity() == 1);
  P seventeen{pool_options{.ceiling = 17}};  // class 1 (20 bytes) cut at 17
  CHECK(seventeen.acquire(16).capacity() == 16);
  CHECK(seventeen.acquire(17).capacity() == 17);
  CHECK(seventeen.acquire(18).capacity() == 18);
  seventeen.retire(buffer(17));
  seventeen.retire(buffer(18));
  CHECK(seventeen.retained() == 1);
  CHECK(seventeen.take(17).capacity() == 17);
}

// ---- the bound --------------------------------------------------------------------------------

TEST_CASE_TEMPLATE("a bound of SIZE_MAX keeps everything and counts it exactly", P, POOLS) {
  for (const std::size_t bound : {size_max, size_max - 1, size_max / 2 + 1}) {
    CAPTURE(bound);
    P p{pool_options{.bound = bound}};
    std::vector<buffer> held;
    // 40 of one class: more than a thread cache keeps (2 * 16), so batches reach the stack.
    for (int i = 0; i < 40; ++i) held.push_back(p.acquire(4096));
    for (int i = 0; i < 20; ++i) held.push_back(buffer(1000 + i));  // off-class
    for (auto& b : held) p.retire(std::move(b));
    CHECK(p.retained() == 60);
    CHECK(p.stats().dropped == 0);
    CHECK(p.stats().retained_bytes == 40 * 4096 + 20 * 1000 + 190);
    int taken = 0;
    while (p.take(1)) ++taken;
    CHECK(taken == 60);
    CHECK(p.retained() == 0);
    for (int i = 0; i < 5; ++i) p.retire(buffer(64));
    p.trim();
    CHECK(p.retained() == 0);
    CHECK(p.stats().retained_bytes == 0);
  }
}

// ---- empty and moved-from buffers -------------------------------------------------------------

TEST_CASE_TEMPLATE("an empty buffer is ignored whatever the pool's state", P, POOLS) {
  P disabled{pool_options{.enabled = false}};
  P no_room{pool_options{.bound = 0}};
  P no_ceiling{pool_options{.ceiling = 0}};
  buffer source(100);
  buffer taken = std::move(source);
  for (P* p : {&disabled, &no_room, &no_ceiling}) {
    p->retire(buffer());
    p->retire(std::move(source));  // NOLINT: moved-from on purpose
    p->retire(std::move(source));
    const auto s = p->stats();
    CHECK(s.retired == 0);
    CHECK(s.dropped == 0);  // ignored, not dropped
    CHECK(s.retained == 0);
  }
  CHECK(taken.capacity() == 100);
}

TEST_CASE("self-moves of buffers leave them as they were") {
  buffer empty;
  buffer& alias = empty;
  empty = std::move(alias);
  CHECK_FALSE(empty);
  CHECK(empty.capacity() == 0);
  buffer zero(0);  // holds memory of no bytes
  const std::byte* data = zero.data();
  buffer& zero_alias = zero;
  zero = std::move(zero_alias);
  CHECK(zero);
  CHECK(zero.data() == data);
  buffer full(64, 128);
  data = full.data();
  std::swap(full, full);  // a move out, a self-move of the moved-from, a move back
  CHECK(full.data() == data);
  CHECK(full.size() == 64);
  CHECK(full.capacity() == 128);
  full = buffer();  // assigning an empty one frees the memory (LeakSanitizer checks)
  CHECK_FALSE(full);
  CHECK(full.size() == 0);
  CHECK(full.capacity() == 0);
}

// ---- gate caps --------------------------------------------------------------------------------

TEST_CASE_TEMPLATE("caps outside the packing are clamped by every door, and the count is untouched", G, GATES) {
  for (const std::int64_t cap : {gate_limit + 1, std::int64_t{1} << 31, (std::int64_t{1} << 32) - 1,
                                 std::int64_t{1} << 32, (std::int64_t{1} << 32) + 5, i64_max - 1}) {
    CAPTURE(cap);
    G g{cap};
    CHECK(g.cap() == gate_limit);
    CHECK(g.in_flight() == 0);
    g.note_submitted();
    g.set_cap(cap);
    CHECK(g.cap() == gate_limit);
    CHECK(g.in_flight() == 1);  // cap bits that spilled into the count would show here
    g.set_cap(3);
    g.adjust(pressure::ok, cap);
    CHECK(g.cap() == 4);
    CHECK(g.in_flight() == 1);
  }
  for (const std::int64_t cap : {i64_min + 1, -(std::int64_t{1} << 32), -gate_limit - 1, -gate_limit, std::int64_t{-1}}) {
    CAPTURE(cap);
    G g{cap};
    CHECK(g.cap() == 1);
    g.set_cap(5);
    g.set_cap(cap);
    CHECK(g.cap() == 1);
    CHECK(g.try_admit());
    CHECK_FALSE(g.try_admit());
    CHECK(g.in_flight() == 1);
  }
  G g{i64_max};
  g.set_cap(i64_max);
  CHECK(g.cap() == gate_limit);
  g.adjust(pressure::hard, i64_max);  // shrinking ignores max_cap
  CHECK(g.cap() == gate_limit - 1);
  g.adjust(pressure::ok, i64_max);
  CHECK(g.cap() == gate_limit);
  g.adjust(pressure::soft, i64_min);
  CHECK(g.cap() == gate_limit - 1);
  g.adjust(pressure::ok, 5);  // "cap + 1, not above max": a max below the cap pulls it down
  CHECK(g.cap() == 5);
  g.adjust(pressure::ok, -1);
  CHECK(g.cap() == 1);
  g.adjust(pressure::hard, i64_min);
  CHECK(g.cap() == 1);
  CHECK(g.in_flight() == 0);
}

// The count up to its limit, walked at its carries: for each bit of the count, unit submissions
// from two below the step that carries into it to one past that step, a weighted submission
// between, the count and the cap read after each. The count is a field of the gate's word under
// the cap's, so an add that overflowed its field would show at a carry; a walk of 2^31 unit calls
// checked the same end state at 2^31 times the cost (20 s natively before the statistics, 60
// after, and minutes under qemu).
template <class Gate>
void walk_to_limit(Gate& gate) {
  std::int64_t count = 0;
  bool kept = true;  // each step counted exactly, the cap untouched
  const auto submit = [&](std::int64_t n) {
    gate.note_submitted(n);
    count += n;
    kept = kept && gate.in_flight() == count && gate.cap() == gate_limit;
  };
  for (int bit = 1; bit <= 31; ++bit) {
    const std::int64_t carry = std::int64_t{1} << bit;  // the first count with this bit set
    // Bit 31 is past the limit: there the unit steps end at it instead.
    const std::int64_t from = std::min(carry - 2, gate_limit - 4), to = std::min(carry + 1, gate_limit - 1);
    if (from > count) submit(from - count);  // weighted, to two below the carry
    while (count < to) submit(1);            // unit steps across it
  }
  CHECK(kept);
  CHECK(count == gate_limit - 1);
}

TEST_CASE("note_submitted saturates at gate_limit and the cap survives") {
  sluice::gate g{gate_limit};
  sluice::mutex_gate m{gate_limit};
  walk_to_limit(g);
  walk_to_limit(m);

  const auto at_limit = [](auto& gate) {
    CHECK(gate.in_flight() == gate_limit - 1);
    CHECK(gate.has_capacity());
    CHECK(gate.try_admit());  // the last place under a cap of gate_limit
    CHECK(gate.in_flight() == gate_limit);
    CHECK_FALSE(gate.has_capacity());
    CHECK_FALSE(gate.try_admit());
    for (int i = 0; i < 1000; ++i) gate.note_submitted();  // saturates: not counted
    CHECK(gate.in_flight() == gate_limit);
    CHECK(gate.cap() == gate_limit);
    gate.set_cap(1);
    gate.note_submitted();
    CHECK(gate.cap() == 1);
    CHECK(gate.in_flight() == gate_limit);
    gate.adjust(pressure::ok, i64_max);
    CHECK(gate.cap() == 2);
    gate.set_cap(i64_max);
    CHECK(gate.cap() == gate_limit);
    gate.note_done();
    CHECK(gate.in_flight() == gate_limit - 1);
    CHECK(gate.has_capacity());
    gate.note_submitted();
    gate.note_submitted();
    CHECK(gate.in_flight() == gate_limit);
  };
  at_limit(g);
  at_limit(m);

  // Saturating submissions from two threads at once: each is one step that changes nothing, so
  // a reader never sees the count move, past the limit or below it, nor the cap change.
  long bad = 0;
  std::atomic<int> working{2};
  sluice_test::run_threads(3, [&](std::size_t t) {
    if (t == 0) {
      while (working.load() > 0) {
        bad += g.in_flight() != gate_limit || g.cap() != gate_limit || g.has_capacity() || g.try_admit();
      }
      return;
    }
    for (int i = 0; i < 200000; ++i) g.note_submitted();
    working.fetch_sub(1);
  });
  CHECK(bad == 0);
  CHECK(g.in_flight() == gate_limit);
  CHECK(g.cap() == gate_limit);
}

// ---- permits ----------------------------------------------------------------------------------

TEST_CASE_TEMPLATE("permits moved onto themselves, over held admissions and between gates", G, GATES) {
  G a{2}, b{2};
  {
    sluice::permit<G> empty;
    sluice::permit<G>& alias = empty;
    empty = std::move(alias);  // self-move of an empty permit: still empty, nothing released
    CHECK_FALSE(static_cast<bool>(empty));
    empty.release();
    empty.release();
    sluice::permit<G> held{a};
    std::swap(held, held);  // a move out, a self-move of the moved-from, a move back
    CHECK(static_cast<bool>(held));
    CHECK(a.in_flight() == 1);
    sluice::permit<G> other{b};
    held = std::move(other);  // gives a's admission back, takes b's
    CHECK(a.in_flight() == 0);
    CHECK(b.in_flight() == 1);
    CHECK_FALSE(static_cast<bool>(other));  // NOLINT: moved-from
    held = sluice::permit<G>{};  // an empty one over a held one releases it
    CHECK(b.in_flight() == 0);
    CHECK_FALSE(static_cast<bool>(held));
  }
  CHECK(a.in_flight() == 0);
  CHECK(b.in_flight() == 0);
  {
    // adopt_lock without a counted submission is misuse; its note_done stops at zero.
    sluice::permit<G> adopted{a, std::adopt_lock};
  }
  CHECK(a.in_flight() == 0);
  a.note_submitted();
  CHECK(a.in_flight() == 1);
}
