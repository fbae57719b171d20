// The pool's seed suite (a Go frame pool's tests), carried over case by case, then what the
// seed does not test. Every case runs against sluice::pool with its thread caches on and off and
// against the reference model sluice::mutex_pool.
#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <new>
#include <span>
#include <stdexcept>
#include <thread>
#include <vector>

#include "doctest.hpp"
#include "kinds.hpp"
#include "threads.hpp"

using sluice::buffer;
using sluice::pool_options;
using sluice_test::channel;
using sluice_test::fill;
using sluice_test::first_difference;
using sluice_test::run_threads;

namespace {

constexpr std::size_t ceiling = std::size_t{4} << 20;  // the default, as the seed's pool had

// Resident set and malloc's bytes in use: the seed's "heap in use".
struct memory_use {
  std::size_t resident = 0, in_use = 0;
  static memory_use now() {
    memory_use m;
    if (FILE* f = std::fopen("/proc/self/statm", "r")) {
      unsigned long size = 0, resident = 0;
      if (std::fscanf(f, "%lu %lu", &size, &resident) == 2) m.resident = resident * static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
      std::fclose(f);
    }
    m.in_use = mallinfo2().uordblks;
    return m;
  }
};

}  // namespace

// ---- the seed -------------------------------------------------------------------------------

TEST_CASE_TEMPLATE("take answers exact lengths", P, POOLS) {
  P p;
  CHECK_FALSE(p.take(1000));  // an empty pool answers nothing
  p.retire(buffer(1000));
  buffer b = p.take(600);
  REQUIRE(b);
  CHECK(b.size() == 600);
  CHECK(b.capacity() >= 600);
  CHECK(b.bytes().size() == 600);
  CHECK_FALSE(p.take(600));  // a taken buffer is not answered twice
}

TEST_CASE_TEMPLATE("take answers the smallest that fits", P, POOLS) {
  P p;
  p.retire(buffer(5000));
  p.retire(buffer(900));
  buffer first = p.take(800);
  REQUIRE(first);
  CHECK(first.capacity() == 900);
  buffer second = p.take(800);
  REQUIRE(second);
  CHECK(second.capacity() == 5000);
}

TEST_CASE_TEMPLATE("a take looks past every class that holds nothing, to the one that holds a buffer wherever it is kept", P, POOLS) {
  // 100 bytes, and one buffer some forty classes up: in the calling thread's cache, on the shared
  // stack (another thread's, moved there at its exit), on an off-class shelf (60000 is no class's
  // size). The classes between were never used, which the general path passes without a look.
  {
    P p;
    p.retire(buffer(65536));
    CHECK(p.take(100).capacity() == 65536);
  }
  {
    P p;
    std::thread([&] { p.retire(buffer(65536)); }).join();
    CHECK(p.take(100).capacity() == 65536);
  }
  {
    P p;
    std::thread([&] { p.retire(buffer(60000)); }).join();
    CHECK(p.take(100).capacity() == 60000);
  }
}

TEST_CASE_TEMPLATE("the ceiling refuses the oversized", P, POOLS) {
  P p;
  CHECK_FALSE(p.take(ceiling + 1));
  p.retire(buffer(ceiling + 1));
  CHECK(p.retained() == 0);
  p.retire(buffer(ceiling));
  CHECK(p.retained() == 1);
  buffer b = p.take(ceiling);
  REQUIRE(b);
  CHECK(b.size() == ceiling);
}

TEST_CASE_TEMPLATE("the pool holds the bound", P, POOLS) {
  for (const std::size_t bound : {std::size_t{64}, std::size_t{1024}}) {
    P p{pool_options{.bound = bound}};
    for (std::size_t i = 0; i < bound + 5; ++i) p.retire(buffer(1000));
    CHECK(p.retained() == bound);
    CHECK(p.stats().dropped == 5);
    CHECK(p.take(1000));
  }
}

TEST_CASE_TEMPLATE("a disabled pool answers nothing", P, POOLS) {
  P p;
  p.set_enabled(false);
  CHECK_FALSE(p.enabled());
  p.retire(buffer(1000));
  CHECK(p.retained() == 0);
  CHECK_FALSE(p.take(1000));
}

TEST_CASE_TEMPLATE("the heap stays flat over repeated rounds", P, POOLS) {
  P p;
  const std::size_t sizes[] = {64 << 10, 256 << 10, ceiling};
  std::uint64_t serial = 0;
  const auto round = [&] {
    for (const std::size_t s : sizes) {
      buffer b = p.acquire(s);
      std::memset(b.data(), static_cast<int>(++serial), b.size());  // every byte, as the seed did
      p.retire(std::move(b));
    }
  };
  for (int i = 0; i < 50; ++i) round();
  const memory_use before = memory_use::now();
  const auto hits_before = p.stats().hits;
  for (int i = 0; i < 200; ++i) round();
  const memory_use after = memory_use::now();
  CHECK(after.in_use <= before.in_use + (4 << 20));
  CHECK(after.resident <= before.resident + (4 << 20));
  CHECK(p.stats().hits - hits_before == 200 * std::size(sizes));  // every buffer was reused
}

// The ownership chain: frames written by one thread, relayed by a second, checked byte by byte
// and retired by a third, while the first draws every new frame from what comes back. A buffer
// answered twice, or retired early, would scramble bytes the checker reads.
TEST_CASE_TEMPLATE("frames ride the chain from writer to relay to checker and back", P, POOLS) {
  P p;
  constexpr std::uint64_t rounds = 3000;
  struct frame {
    std::uint64_t serial;
    buffer payload;
  };
  channel<frame> to_relay(8), to_checker(8);
  std::uint64_t bad = 0, checked = 0;
  std::thread writer([&] {
    for (std::uint64_t i = 0; i < rounds; ++i) {
      buffer b = p.acquire(std::size_t{1} << 14 | (i % 7) << 9);  // about 16 KiB, a few classes
      fill(b.bytes(), i);
      to_relay.push({i, std::move(b)});
    }
  });
  std::thread relay([&] {
    for (std::uint64_t i = 0; i < rounds; ++i) to_checker.push(to_relay.pop());
  });
  std::thread checker([&] {
    for (std::uint64_t i = 0; i < rounds; ++i) {
      frame f = to_checker.pop();
      bad += f.serial != i || first_difference(f.payload.bytes(), f.serial) != f.payload.size();
      ++checked;
      p.retire(std::move(f.payload));
    }
  });
  writer.join();
  relay.join();
  checker.join();
  CHECK(checked == rounds);
  CHECK(bad == 0);
  const auto s = p.stats();
  CHECK(s.hits >= rounds / 2);  // buffers really rode the chain back to the writer
  CHECK(s.hits + s.misses == rounds);
}

// ---- beyond the seed ------------------------------------------------------------------------

TEST_CASE_TEMPLATE("a watcher never sees retained() pass the bound", P, POOLS) {
  constexpr std::size_t bound = 48;
  P p{pool_options{.bound = bound}};
  std::atomic<int> working{4};
  std::atomic<std::size_t> most{0};
  std::atomic<long> samples{0};
  run_threads(5, [&](std::size_t t) {
    if (t == 0) {
      do {
        const std::size_t r = p.retained();
        if (r > most.load()) most.store(r);
        samples.fetch_add(1);
      } while (working.load() > 0);
      return;
    }
    std::vector<buffer> held;
    for (int i = 0; i < 4000; ++i) {
      const std::size_t size = std::size_t{64} << ((i * 7 + t) % 9);  // 64 B to 16 KiB
      if (i % 3 == 2) {
        held.push_back(p.take(size));
      } else {
        held.push_back(p.acquire(size));
      }
      if (held.size() > 6) {
        for (auto& b : held) p.retire(std::move(b));
        held.clear();
      }
    }
    for (auto& b : held) p.retire(std::move(b));
    working.fetch_sub(1);
  });
  CHECK(samples.load() > 0);
  CHECK(most.load() <= bound);
  CHECK(p.retained() <= bound);
}

TEST_CASE_TEMPLATE("no buffer is ever handed to two holders at once", P, POOLS) {
  P p{pool_options{.bound = 16}};
  std::atomic<long> clashes{0}, hits{0};
  run_threads(4, [&](std::size_t t) {
    for (std::uint64_t i = 0; i < 3000; ++i) {
      buffer b = p.acquire(512 + (i % 3) * 100);
      const std::uint64_t mark = t << 32 | i;
      fill(b.bytes(), mark);
      std::this_thread::yield();  // give another holder of the same memory time to write
      clashes.fetch_add(first_difference(b.bytes(), mark) != b.size());
      p.retire(std::move(b));
    }
  });
  hits = static_cast<long>(p.stats().hits);
  CHECK(clashes.load() == 0);
  CHECK(hits.load() > 0);
}

// Three threads take, write, check and retire (off-class buffers too) while a fourth calls
// trim_once(i) 300 times; then, the traffic's caches given back at its threads' exit, one more
// trim() must free everything.
template <class P, class Trim>
void trims_race_traffic(P& p, Trim trim_once) {
  std::atomic<bool> stop{false};
  run_threads(4, [&](std::size_t t) {
    if (t == 0) {
      for (int i = 0; i < 300; ++i) {
        trim_once(i);
        std::this_thread::yield();
      }
      stop.store(true);
      return;
    }
    std::uint64_t i = 0;
    while (!stop.load()) {
      buffer b = p.acquire(1000 + (i++ % 5) * 3000);
      fill(b.bytes(), i);
      CHECK(first_difference(b.bytes(), i) == b.size());
      p.retire(std::move(b));
      if (i % 7 == 0) p.retire(buffer(1000));  // off-class buffers too
    }
  });
  p.trim();
  CHECK(p.retained() == 0);
  CHECK(p.stats().retained_bytes == 0);
  CHECK_FALSE(p.take(1));
}

TEST_CASE_TEMPLATE("trim races with traffic and leaves nothing behind", P, POOLS) {
  P p{pool_options{.bound = 256}};
  trims_race_traffic(p, [&](int) { p.trim(); });
}

TEST_CASE_TEMPLATE("trim(share) frees a share of the bytes, largest classes first", P, POOLS) {
  // Uncached (or the twin): every buffer where trim(share) reaches it, so the twins agree exactly.
  P p{pool_options{.bound = 64, .thread_cache = false}};
  std::vector<buffer> held;
  for (int i = 0; i < 4; ++i) held.push_back(p.acquire(64 << 10));
  for (int i = 0; i < 8; ++i) held.push_back(p.acquire(1024));
  for (buffer& b : held) p.retire(std::move(b));
  REQUIRE(p.stats().retained_bytes == 4 * 65536 + 8 * 1024);
  p.trim(0.0);
  p.trim(-1.0);
  p.trim(std::numeric_limits<double>::quiet_NaN());
  CHECK(p.retained() == 12);  // nothing
  p.trim(0.5);  // 135,168 bytes at least: three of the 64 KiB buffers
  CHECK(p.retained() == 9);
  CHECK(p.stats().retained_bytes == 65536 + 8 * 1024);
  p.trim(0.01);  // 738 bytes at least: the largest class first, so the last 64 KiB buffer
  CHECK(p.retained() == 8);
  CHECK(p.stats().retained_bytes == 8 * 1024);
  p.trim(0.3);  // 2,458 bytes at least: three of 1 KiB
  CHECK(p.retained() == 5);
  CHECK(p.take(1024));  // what is left still answers
  p.trim(7.0);  // 1 or more: trim()
  CHECK(p.retained() == 0);
  CHECK(p.stats().retained_bytes == 0);

  // Off-class buffers are freed too, in their class's turn: after the class's own size, before
  // any smaller class.
  p.retire(buffer(1000));
  p.retire(buffer(3000));
  p.trim(0.5);
  CHECK(p.retained() == 1);
  CHECK(p.stats().retained_bytes == 1000);
  CHECK(p.take(900).capacity() == 1000);
  {
    std::vector<buffer> small;
    for (int i = 0; i < 4; ++i) small.push_back(p.acquire(64));
    for (buffer& b : small) p.retire(std::move(b));
  }
  p.retire(buffer(1000));  // the 1,024 class, above the 64s
  p.trim(0.5);             // 628 bytes at least: the 1000 alone
  CHECK(p.retained() == 4);
  CHECK(p.stats().retained_bytes == 4 * 64);
  p.trim();
  p.retire(p.acquire(1024));
  p.retire(buffer(1000));
  p.trim(0.5);  // 1,012 bytes at least: the class's own size first, so the 1,024 alone
  CHECK(p.retained() == 1);
  CHECK(p.stats().retained_bytes == 1000);
}

TEST_CASE("trim(share) takes no more of a batch than it needs") {
  sluice::pool p{pool_options{.bound = 1024}};
  std::thread([&] {  // its exit moves its cache to the shared stack, sixteen buffers a batch
    std::vector<buffer> held;
    for (int i = 0; i < 16; ++i) held.push_back(p.acquire(4096));
    for (buffer& b : held) p.retire(std::move(b));
  }).join();
  REQUIRE(p.retained() == 16);
  p.trim(0.01);  // 656 bytes at least: one buffer, the rest of its batch back on the stack
  CHECK(p.retained() == 15);
  CHECK(p.take(4096));
}

TEST_CASE("trim(share) with thread caches: from the shared stacks, what the caches hold kept") {
  sluice::pool p{pool_options{.bound = 1024}};
  std::vector<buffer> held;
  for (int i = 0; i < 300; ++i) held.push_back(p.acquire(4096));
  for (buffer& b : held) p.retire(std::move(b));
  const sluice::pool_stats before = p.stats();
  REQUIRE(before.retained == 300);
  p.trim(0.5);  // the stacks hold all but this thread's cache (at most 64 here): 150 go
  const sluice::pool_stats after = p.stats();
  CHECK(after.retained <= 150);
  CHECK(after.retained >= 150 - 16);  // whole batches of up to 16: at most one more than needed
  CHECK(after.retained_bytes == after.retained * 4096);
  CHECK(after.hits == before.hits);  // not counted as takes
  for (int i = 0; i < 20; ++i) p.retire(p.acquire(4096));  // the pool works on
  p.trim();
  CHECK(p.retained() == 0);
}

TEST_CASE_TEMPLATE("trim(share) races with traffic: nothing handed twice, nothing lost", P, POOLS) {
  P p{pool_options{.bound = 256}};
  trims_race_traffic(p, [&](int i) {
    p.trim(0.25 * (i % 4));
    CHECK(p.retained() <= 256);
  });
}

TEST_CASE_TEMPLATE("a zero bound keeps nothing", P, POOLS) {
  P p{pool_options{.bound = 0}};
  for (int i = 0; i < 10; ++i) p.retire(p.acquire(4096));
  CHECK(p.retained() == 0);
  CHECK_FALSE(p.take(1));
  const auto s = p.stats();
  CHECK(s.dropped == 10);
  CHECK(s.retired == 0);
  CHECK(s.misses == 11);
}

TEST_CASE_TEMPLATE("statistics add up", P, POOLS) {
  P p{pool_options{.bound = 3, .ceiling = 1 << 20}};
  buffer fresh = p.acquire(100);    // a miss: fresh memory
  p.retire(buffer(4096));           // kept
  p.retire(buffer(1000));           // kept (off-class)
  p.retire(buffer(2 << 20));        // dropped: over the ceiling
  p.retire(std::move(fresh));       // kept
  p.retire(buffer(64));             // dropped: the bound
  p.retire(buffer());               // ignored: empty
  auto s = p.stats();
  CHECK(s.retired == 3);
  CHECK(s.dropped == 2);
  CHECK(s.misses == 1);
  CHECK(s.retained == 3);
  CHECK(s.retained_bytes == 4096 + 1000 + 112);  // 100 fills its class of 112
  CHECK(p.take(900).capacity() == 1000);
  CHECK(p.take(100).capacity() == 112);
  CHECK_FALSE(p.take(8192));
  s = p.stats();
  CHECK(s.hits == 2);
  CHECK(s.misses == 2);
  CHECK(s.retained == 1);
  CHECK(s.retained_bytes == 4096);
  p.trim();
  CHECK(p.stats().retained == 0);
  CHECK(p.stats().retained_bytes == 0);
}

// The row of the class that holds capacity n: the first whose capacity reaches it (the last row,
// SIZE_MAX, for what lies above the ceiling).
const sluice::pool_class_stats& row_for(const std::vector<sluice::pool_class_stats>& rows, std::size_t n) {
  for (const auto& r : rows) {
    if (r.capacity >= n) return r;
  }
  FAIL("no row holds " << n);
  return rows.back();
}

// Each row's counts summed: what stats() answers.
template <class P>
void check_rows_sum_to_totals(const P& p) {
  const auto rows = p.class_stats();
  const sluice::pool_stats s = p.stats();
  sluice::pool_stats sum;
  for (const auto& r : rows) {
    sum.hits += r.hits;
    sum.misses += r.misses;
    sum.retired += r.retired;
    sum.dropped += r.dropped_at_bound + r.dropped_over_ceiling + r.dropped_off;
    sum.retained += r.retained;
    sum.retained_bytes += r.retained * r.capacity;  // own-size buffers only in these cases
  }
  CHECK(sum.hits == s.hits);
  CHECK(sum.misses == s.misses);
  CHECK(sum.retired == s.retired);
  CHECK(sum.dropped == s.dropped);
  CHECK(sum.retained == s.retained);
  CHECK(sum.retained_bytes == s.retained_bytes);
}

TEST_CASE_TEMPLATE("statistics per class: each count in its class, each dropped retire with its reason", P, POOLS) {
  P p{pool_options{.bound = 3, .ceiling = 1 << 20}};
  buffer fresh = p.acquire(100);      // class 112: a miss, fresh memory
  CHECK_FALSE(p.take(3 << 20));       // above the ceiling: a miss in the last row, nothing fresh
  p.retire(buffer(4096));             // kept
  p.retire(buffer(1000));             // kept, shelved in class 1024
  p.retire(buffer(2 << 20));          // dropped: over the ceiling
  p.retire(std::move(fresh));         // kept
  p.retire(buffer(64));               // dropped: the bound
  auto rows = p.class_stats();
  for (std::size_t i = 1; i < rows.size(); ++i) CHECK(rows[i - 1].capacity < rows[i].capacity);
  CHECK(rows.back().capacity == SIZE_MAX);
  CHECK(rows[rows.size() - 2].capacity == std::size_t{1} << 20);  // the top class: the ceiling
  CHECK(row_for(rows, 100).capacity == 112);
  CHECK(row_for(rows, 100).misses == 1);
  CHECK(row_for(rows, 100).fresh == 1);
  CHECK(row_for(rows, 100).retired == 1);
  CHECK(row_for(rows, 100).retained == 1);
  CHECK(row_for(rows, 4096).retained == 1);
  CHECK(row_for(rows, 1000).capacity == 1024);
  CHECK(row_for(rows, 1000).retained == 1);
  CHECK(row_for(rows, 64).dropped_at_bound == 1);
  CHECK(row_for(rows, 64).retired == 0);
  CHECK(rows.back().misses == 1);
  CHECK(rows.back().fresh == 0);
  CHECK(rows.back().dropped_over_ceiling == 1);
  CHECK(rows.back().retained == 0);

  CHECK(p.take(900).capacity() == 1000);  // a hit in class 1024
  CHECK(p.take(100).capacity() == 112);
  CHECK_FALSE(p.take(8192));              // a miss in class 8192
  rows = p.class_stats();
  CHECK(row_for(rows, 1000).hits == 1);
  CHECK(row_for(rows, 1000).retained == 0);
  CHECK(row_for(rows, 100).hits == 1);
  CHECK(row_for(rows, 8192).misses == 1);

  p.set_enabled(false);        // trims the 4096
  p.retire(buffer(256));       // dropped: switched off
  rows = p.class_stats();
  CHECK(row_for(rows, 4096).trimmed == 1);
  CHECK(row_for(rows, 4096).retained == 0);
  CHECK(row_for(rows, 256).dropped_off == 1);
  check_rows_sum_to_totals(p);
}

TEST_CASE_TEMPLATE("statistics per class count what the caches answer, and what trims free", P, POOLS) {
  P p{pool_options{.bound = 1024}};
  std::vector<buffer> held;
  for (int round = 0; round < 50; ++round) {
    for (int i = 0; i < 8; ++i) held.push_back(p.acquire(64));
    for (int i = 0; i < 3; ++i) held.push_back(p.acquire(5000));
    for (auto& b : held) p.retire(std::move(b));
    held.clear();
  }
  auto rows = p.class_stats();
  const auto small = row_for(rows, 64);  // copies: rows is read again below
  const auto large = row_for(rows, 5000);
  CHECK(small.hits + small.misses == 400);
  CHECK(small.retired == 400);
  CHECK(small.fresh == small.misses);
  CHECK(small.retained == 400 - small.hits);
  CHECK(small.hits >= 392);  // all but the first round's, at most
  CHECK(large.hits + large.misses == 150);
  CHECK(large.retained == 150 - large.hits);
  check_rows_sum_to_totals(p);
  p.trim();
  rows = p.class_stats();
  CHECK(row_for(rows, 64).retained == 0);
  CHECK(row_for(rows, 64).trimmed == small.retained);
  CHECK(row_for(rows, 5000).trimmed == large.retained);
  check_rows_sum_to_totals(p);
}

// ---- decay ----------------------------------------------------------------------------------
//
// Steps are driven by the time points the tests pass: a decay of an hour takes a step every half
// hour of that clock, so no case waits for time to pass.

namespace {
using namespace std::chrono_literals;
using decay_clock = std::chrono::steady_clock;

template <class P>
std::uint64_t decayed_in(const P& p, std::size_t capacity) {
  return row_for(p.class_stats(), capacity).decayed;
}
}  // namespace

TEST_CASE_TEMPLATE("decay off, by default or by a duration of zero or less, takes no step", P, POOLS) {
  for (const auto d : {0ms, -5ms, std::chrono::milliseconds::min()}) {
    P p{pool_options{.decay = d}};
    for (int i = 0; i < 5; ++i) p.retire(p.acquire(64));
    p.retire(p.acquire(64));
    const auto t = decay_clock::now();
    CHECK_FALSE(p.decay(t + 1h));
    CHECK_FALSE(p.decay(t + 24h * 365 * 100));
    CHECK(p.retained() == 1);
    CHECK(decayed_in(p, 64) == 0);
  }
}

TEST_CASE_TEMPLATE("a decay step frees what sat unused since before the step before, and no sooner", P, POOLS) {
  P p{pool_options{.bound = 1024, .decay = 1h}};
  std::vector<buffer> held;
  for (int i = 0; i < 8; ++i) held.push_back(p.acquire(64));
  for (auto& b : held) p.retire(std::move(b));
  held.clear();
  p.retire(buffer(1000));  // off-class: shelved under 1024
  const auto t = decay_clock::now();  // the pool was made before: its first step is due by t + 30 min
  CHECK_FALSE(p.decay(t));
  CHECK(p.decay(t + 31min));  // step 1: everything was kept in step 0, the step before it
  CHECK(p.retained() == 9);
  CHECK_FALSE(p.decay(t + 32min));  // the next is due an hour after the pool was made
  CHECK(p.decay(t + 61min));  // step 2: unused since before step 1
  CHECK(p.retained() == 0);
  CHECK(p.stats().retained_bytes == 0);
  CHECK(decayed_in(p, 64) == 8);
  CHECK(decayed_in(p, 1000) == 1);
  CHECK(row_for(p.class_stats(), 64).trimmed == 0);
  check_rows_sum_to_totals(p);
  // Used between two steps, a buffer outlives the next one.
  for (int i = 0; i < 8; ++i) held.push_back(p.acquire(64));
  for (auto& b : held) p.retire(std::move(b));
  held.clear();
  CHECK(p.decay(t + 91min));  // step 3: they were used in step 2
  for (int i = 0; i < 8; ++i) held.push_back(p.take(64));
  for (auto& b : held) {
    CHECK(b);
    p.retire(std::move(b));
  }
  held.clear();
  CHECK(p.decay(t + 121min));  // step 4: used in step 3, the step before
  CHECK(p.retained() == 8);
  CHECK(decayed_in(p, 64) == 8);
  CHECK(p.decay(t + 151min));  // step 5
  CHECK(p.retained() == 0);
  CHECK(decayed_in(p, 64) == 16);
  check_rows_sum_to_totals(p);
}

TEST_CASE_TEMPLATE("the next decay step is due half the decay after the last one ran, however late it ran", P, POOLS) {
  P p{pool_options{.decay = 1h}};
  const auto t = decay_clock::now();
  CHECK(p.decay(t + 10h));  // long overdue: one step
  CHECK_FALSE(p.decay(t + 10h + 29min));
  CHECK(p.decay(t + 10h + 31min));
  // A step that ran late (review: with due times kept on a grid, the next came at once and freed
  // what was used just before the late one).
  P late{pool_options{.decay = 1h}};
  late.retire(late.acquire(64));  // kept in step 0
  CHECK(late.decay(t + 40min));  // step 1, ten minutes late
  CHECK_FALSE(late.decay(t + 61min));
  CHECK(late.retained() == 1);
  CHECK(late.decay(t + 71min));  // step 2: unused for 31 minutes at least
  CHECK(late.retained() == 0);
  // The longest decay (2^40 ms, about 35 years) and longer: a step every 2^39 ms.
  P q{pool_options{.decay = std::chrono::milliseconds::max()}};
  CHECK_FALSE(q.decay(t + 24h * 365 * 17));
  CHECK(q.decay(t + 24h * 365 * 18));
  // The end of the clock: a step, and none due after it (review: the next due time overflowed,
  // and every later call took a step).
  P end{pool_options{.decay = 1h}};
  end.retire(end.acquire(64));
  CHECK(end.decay(decay_clock::time_point::max()));
  CHECK_FALSE(end.decay(t + 2h));
  CHECK_FALSE(end.decay(decay_clock::time_point::max()));
  CHECK(end.retained() == 1);
}

TEST_CASE_TEMPLATE("the twins free the same buffers by trim(share) and by decay", P, sluice_test::uncached_pool, sluice::mutex_pool) {
  // Review: mutex_pool's trim(share) freed the oldest buffer of a capacity, the pool the newest
  // (the top of its stack); with decay, which is which shows.
  P p{pool_options{.bound = 64, .decay = 1h}};
  const auto t = decay_clock::now();
  p.retire(buffer(1024));     // A, kept in step 0
  CHECK(p.decay(t + 31min));
  p.retire(buffer(1024));     // B, kept in step 1
  p.trim(0.5);                // frees the newest: B
  CHECK(p.decay(t + 61min));  // A, unused since step 0: freed
  CHECK(p.retained() == 0);
  const auto row = row_for(p.class_stats(), 1024);
  CHECK(row.trimmed == 1);
  CHECK(row.decayed == 1);
}

TEST_CASE("decay reaches another thread's cache at that thread's next call") {
  sluice::pool p{pool_options{.bound = 1024, .decay = 1h}};
  channel<int> to_thread{1}, from_thread{1};
  std::thread other([&] {
    std::vector<buffer> held;
    for (int i = 0; i < 8; ++i) held.push_back(p.acquire(64));
    for (auto& b : held) p.retire(std::move(b));  // into its own cache
    from_thread.push(0);
    to_thread.pop();
    p.trim(0);  // its next call, which does nothing else: its cache catches up
    from_thread.push(0);
    to_thread.pop();
  });
  from_thread.pop();
  const auto t = decay_clock::now();
  for (int step = 1; step <= 3; ++step) CHECK(p.decay(t + step * 31min));
  CHECK(p.retained() == 8);  // still in its sleeping thread's cache (docs/pool.md, DECAY)
  to_thread.push(0);
  from_thread.pop();
  CHECK(decayed_in(p, 64) == 8);
  CHECK(p.retained() == 0);
  to_thread.push(0);
  other.join();
  check_rows_sum_to_totals(p);
}

namespace {
// The signal the decay-signal cases lend the library; none of the suite's other cases use one.
int test_decay_signal() { return SIGRTMIN + 4; }

// Whether none of the whole pages inside [p, p + n) is resident (mincore).
bool pages_gone(const std::byte* p, std::size_t n) {
  const auto page = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
  const std::uintptr_t begin = (reinterpret_cast<std::uintptr_t>(p) + page - 1) / page * page;
  const std::uintptr_t end = (reinterpret_cast<std::uintptr_t>(p) + n) / page * page;
  std::vector<unsigned char> in((end - begin) / page);
  REQUIRE(mincore(reinterpret_cast<void*>(begin), end - begin, in.data()) == 0);
  for (const unsigned char v : in) {
    if ((v & 1) != 0) return false;
  }
  return true;
}

// Waits, up to a minute, for pred; answers it.
template <class F>
bool eventually(F pred) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::minutes(1);
  while (!pred()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::yield();
  }
  return true;
}
}  // namespace

TEST_CASE("set_decay_signal takes 0 or a real-time signal the program left to it, and refuses the rest") {
  CHECK_THROWS_AS(sluice::set_decay_signal(SIGINT), std::invalid_argument);
  CHECK_THROWS_AS(sluice::set_decay_signal(-1), std::invalid_argument);
  CHECK_THROWS_AS(sluice::set_decay_signal(SIGRTMAX + 1), std::invalid_argument);
  const int taken = SIGRTMIN + 5;
  struct sigaction mine {};
  mine.sa_handler = [](int) {};
  sigemptyset(&mine.sa_mask);
  struct sigaction before {};
  REQUIRE(sigaction(taken, &mine, &before) == 0);
  CHECK_THROWS_AS(sluice::set_decay_signal(taken), std::invalid_argument);
  mine.sa_handler = SIG_IGN;  // ignored is the program's choice too
  REQUIRE(sigaction(taken, &mine, nullptr) == 0);
  CHECK_THROWS_AS(sluice::set_decay_signal(taken), std::invalid_argument);
  REQUIRE(sigaction(taken, &before, nullptr) == 0);
  sluice::set_decay_signal(test_decay_signal());
  sluice::set_decay_signal(test_decay_signal());  // its own handler: taken again
  struct sigaction now {};
  REQUIRE(sigaction(test_decay_signal(), nullptr, &now) == 0);
  CHECK((now.sa_flags & SA_RESTART) != 0);  // a system call it cuts short resumes where it can
  sluice::set_decay_signal(0);
}

TEST_CASE("with a decay signal, a sleeping thread's cache gives its pages back, and its buffers stay good") {
  // docs/pool.md, DECAY: a step signals a thread whose cache sat unused since before the step
  // before; its handler gives back the whole pages of the buffers the cache holds.
  constexpr std::size_t size = 64 << 10;
  sluice::set_decay_signal(test_decay_signal());
  sluice::pool p{pool_options{.bound = 1024, .decay = 1h}};
  channel<int> to_thread{1}, from_thread{1};
  std::vector<const std::byte*> kept;
  std::thread other([&] {
    std::vector<buffer> held;
    for (int i = 0; i < 8; ++i) {
      held.push_back(p.acquire(size));
      fill(std::span(held.back().data(), size), 7);
      kept.push_back(held.back().data());
    }
    for (auto& b : held) p.retire(std::move(b));  // into its own cache, some of it
    from_thread.push(0);
    to_thread.pop();  // asleep, on a condition variable
    for (int i = 0; i < 8; ++i) {
      held[i] = p.acquire(size);  // the cache's first (the steps freed what its exit would not)
      fill(std::span(held[i].data(), size), 8);  // its pages back, written
    }
    for (int i = 0; i < 8; ++i) CHECK(first_difference(std::span(held[i].data(), size), 8) == size);
    for (auto& b : held) p.retire(std::move(b));
    from_thread.push(0);
  });
  from_thread.pop();
  const auto t = decay_clock::now();
  CHECK(p.decay(t + 31min));  // sees the thread's cache used since the step before
  CHECK(p.released_idle_bytes() == 0);
  CHECK(p.decay(t + 61min));  // unused since before step 1: the thread is asked
  REQUIRE(eventually([&] { return p.released_idle_bytes() > 0; }));
  // What the thread's cache holds stays retained, all but its magazine's top buffer without its
  // pages: a 64 KiB buffer has 15 or 16 whole pages. The step freed what the cache had moved to
  // the shared stack (decayed).
  const std::size_t cached = p.retained();
  const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  CHECK(cached > 1);
  CHECK(cached + row_for(p.class_stats(), size).decayed == 8);
  CHECK(p.released_idle_bytes() >= (cached - 1) * (size - page));
  CHECK(p.released_idle_bytes() <= (cached - 1) * size);
  if (!sluice_test::emulated) {  // an emulator may keep pages it was told it could drop
    std::size_t gone = 0;
    for (const std::byte* b : kept) gone += pages_gone(b, size) ? 1 : 0;
    CHECK(gone >= cached - 1);
  }
  const std::uint64_t released = p.released_idle_bytes();
  CHECK(p.decay(t + 91min));  // still asleep, already asked: not again
  CHECK(p.decay(t + 121min));
  to_thread.push(0);
  from_thread.pop();
  other.join();
  CHECK(p.released_idle_bytes() == released);
  CHECK(p.retained() == 8);  // the exit put the cache's buffers on the shared stack
  check_rows_sum_to_totals(p);
  sluice::set_decay_signal(0);
}

TEST_CASE("a decay signal delivered late, after its thread used its cache again, gives nothing back") {
  // Review: a thread that blocked the signal woke, used its cache, then unblocked it; the handler
  // gave back the pages of what it had just retired, and takes answered zeros.
  constexpr std::size_t size = 64 << 10;
  sluice::set_decay_signal(test_decay_signal());
  sluice::pool p{pool_options{.bound = 1024, .decay = 1h}};
  channel<int> to_thread{1}, from_thread{1};
  std::thread other([&] {
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, test_decay_signal());
    REQUIRE(pthread_sigmask(SIG_BLOCK, &mask, nullptr) == 0);
    std::vector<buffer> held;
    for (int i = 0; i < 8; ++i) held.push_back(p.acquire(size));
    for (auto& b : held) p.retire(std::move(b));
    from_thread.push(0);
    to_thread.pop();  // asked meanwhile; the request waits, blocked
    held.clear();
    for (int i = 0; i < 8; ++i) {
      held.push_back(p.acquire(size));
      fill(std::span(held.back().data(), size), 0xCD);
    }
    for (auto& b : held) p.retire(std::move(b));
    held.clear();
    REQUIRE(pthread_sigmask(SIG_UNBLOCK, &mask, nullptr) == 0);  // the handler runs here
    for (buffer b = p.take(size); b; b = p.take(size)) {
      CHECK(first_difference(std::span(b.data(), size), 0xCD) == size);
      held.push_back(std::move(b));
    }
    CHECK(held.size() == 8);
    from_thread.push(0);
  });
  from_thread.pop();
  const auto t = decay_clock::now();
  CHECK(p.decay(t + 31min));
  CHECK(p.decay(t + 61min));  // asks it
  to_thread.push(0);
  from_thread.pop();
  other.join();
  CHECK(p.released_idle_bytes() == 0);
  sluice::set_decay_signal(0);
}

TEST_CASE("with a decay signal, no take answers a buffer whose pages were given back") {
  // Review: steps that free many stale buffers (a long while between a step's start and its look
  // at the caches) against a thread that wakes at random for a burst of takes and retires: the
  // handler judged a request current when the thread had caught up one step before the asking
  // one, whose catch-up then kept the magazine, and 261 of 157,040 takes read zeroed pages. Each
  // buffer is retired filled; a take must read back what was retired.
  constexpr std::size_t size = 64 << 10;
  sluice::set_decay_signal(test_decay_signal());
  sluice::pool p{pool_options{.bound = 1 << 16, .decay = 1h}};
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> zeroed{0}, answered{0};
  std::thread worker([&] {
    std::uint64_t seed = 1;
    std::vector<buffer> held;
    while (!stop.load()) {
      seed = seed * 6364136223846793005u + 1442695040888963407u;
      std::this_thread::sleep_for(std::chrono::microseconds(seed >> 53));  // its quiet spells: 0 to 2 ms
      for (int i = 0; i < 4; ++i) {
        buffer b = p.take(size);
        if (b) {
          answered.fetch_add(1);
          for (std::size_t at = 0; at < size; at += 4096) {
            if (b.data()[at] != std::byte{0xAB}) {
              zeroed.fetch_add(1);
              break;
            }
          }
        } else {
          b = p.acquire(size);
        }
        std::memset(b.data(), 0xAB, size);
        held.push_back(std::move(b));
      }
      for (auto& b : held) p.retire(std::move(b));
      held.clear();
    }
  });
  const auto t = decay_clock::now();
  std::vector<buffer> stale;
  const std::uint64_t enough = sluice_test::reduced ? 1000 : 6000;  // takes answered
  for (int step = 1; answered.load() < enough && step < 1'000'000; ++step) {
    for (int i = 0; i < 5000; ++i) stale.push_back(p.acquire(1024));
    for (auto& b : stale) p.retire(std::move(b));
    stale.clear();
    REQUIRE(p.decay(t + step * 31min));
    std::this_thread::sleep_for(std::chrono::microseconds(200));  // the steps' pace, a timer's
  }
  stop.store(true);
  worker.join();
  MESSAGE(answered.load() << " takes answered, " << p.released_idle_bytes() << " bytes given back");
  CHECK(zeroed.load() == 0);
  sluice::set_decay_signal(0);
}

TEST_CASE("a decay signal that lands while its thread takes and writes takes no byte the thread uses") {
  // The handler interrupts its thread anywhere, on the inline paths too: a buffer the thread took
  // and wrote must keep every byte. Each round the thread sleeps, a step sees its cache unused,
  // and the next step asks it just as it wakes to work.
  constexpr std::size_t size = 16 << 10;
  sluice::set_decay_signal(test_decay_signal());
  sluice::pool p{pool_options{.bound = 1024, .decay = 1h}};
  channel<int> to_thread{1}, from_thread{1};
  const int rounds = sluice_test::reduced ? 60 : 300;
  std::thread other([&] {
    std::vector<buffer> held;
    for (int round = 0;; ++round) {
      if (to_thread.pop() < 0) return;
      for (int i = 0; i < 64; ++i) {
        for (int j = 0; j < 4; ++j) {
          held.push_back(p.acquire(size));
          fill(std::span(held.back().data(), size), static_cast<std::uint64_t>(round * 1000 + i * 4 + j));
        }
        for (int j = 0; j < 4; ++j) {
          REQUIRE(first_difference(std::span(held[j].data(), size), static_cast<std::uint64_t>(round * 1000 + i * 4 + j)) == size);
        }
        for (auto& b : held) p.retire(std::move(b));
        held.clear();
      }
      from_thread.push(0);
    }
  });
  const auto t = decay_clock::now();
  int step = 0;
  for (int round = 0; round < rounds; ++round) {
    to_thread.push(round);
    from_thread.pop();
    CHECK(p.decay(t + ++step * 31min));  // sees it used
    to_thread.push(round);               // it wakes
    CHECK(p.decay(t + ++step * 31min));  // and is asked as it works
    from_thread.pop();
  }
  to_thread.push(-1);
  other.join();
  MESSAGE("pages given back in " << rounds << " rounds: " << p.released_idle_bytes() << " bytes");
  check_rows_sum_to_totals(p);
  sluice::set_decay_signal(0);
}

TEST_CASE_TEMPLATE("decay steps race with traffic, trims and exits: nothing handed twice, nothing lost", P, POOLS) {
  P p{pool_options{.bound = 256, .decay = 1h}};
  // A buffer of a class the traffic never uses, kept before the traffic starts (its thread's exit
  // puts it on the shared stack): the second step frees it, long before the first trim (i = 9),
  // however the traffic is scheduled (what the traffic leaves may all be in use at every step, or
  // trimmed first).
  std::thread([&] { p.retire(p.acquire(64)); }).join();
  REQUIRE(p.retained() == 1);
  const auto t = decay_clock::now();
  trims_race_traffic(p, [&](int i) {
    CHECK(p.decay(t + (i + 1) * 31min));
    if (i % 10 == 9) p.trim();
    CHECK(p.retained() <= 256);
  });
  CHECK(decayed_in(p, 64) == 1);
}

TEST_CASE_TEMPLATE("acquire fills the class: 16 bytes up to 16, less than a fifth wasted from 13", P, POOLS) {
  P p;
  for (std::size_t n = 0; n <= (1 << 20); n = n < 64 ? n + 1 : n * 3 / 2 + 1) {
    CAPTURE(n);
    const buffer b = p.acquire(n);
    CHECK(b.size() == n);
    CHECK(b.capacity() >= n);
    if (n <= 16) CHECK(b.capacity() == 16);
    if (n >= 13) CHECK(5 * (b.capacity() - n) < b.capacity());
    if (n == 12) CHECK(5 * (b.capacity() - n) >= b.capacity());  // why the contract says 13
    CHECK(reinterpret_cast<std::uintptr_t>(b.data()) % 16 == 0);
  }
  // A ceiling that is not a class size: its top class is cut at the ceiling.
  P q{pool_options{.ceiling = 1000}};
  buffer top = q.acquire(999);
  CHECK(top.capacity() == 1000);
  q.retire(std::move(top));
  CHECK(q.take(1000).capacity() == 1000);
  CHECK(q.acquire(1001).capacity() == 1001);  // above the ceiling: exactly what was asked
}

TEST_CASE_TEMPLATE("an off-class buffer serves every request up to its real capacity", P, POOLS) {
  P p;
  p.retire(buffer(1000));
  CHECK(p.take(1000).capacity() == 1000);
  p.retire(buffer(1000));
  p.retire(buffer(1024));
  p.retire(buffer(980));
  CHECK(p.take(990).capacity() == 1000);  // the smallest that serves, of three in one class
  CHECK(p.take(10).capacity() == 980);
  CHECK(p.take(1).capacity() == 1024);
  CHECK_FALSE(p.take(1));
}

TEST_CASE_TEMPLATE("off-class retires that overlap set_enabled(false) leave nothing retained", P, POOLS) {
  // docs/pool.md, CONTRACT: a retire that overlaps the switch leaves nothing retained once both
  // have returned. Off-class buffers of many classes (shelved, never cached), so that a trim that
  // frees the shelves class by class meets retires in classes it has passed and has not reached.
  // A guard of the contract, not a sharp one: a trim that skipped a class on its "nonempty" hint
  // lost a buffer in 2 of 12,000 rounds of the review's program, and in none of 15,000 here.
  constexpr std::size_t sizes[] = {1000, 980, 70, 33, 130, 3000, 50000};
  for (int round = 0; round < (sluice_test::sanitized ? 60 : 200); ++round) {
    P p{pool_options{.bound = 256}};
    std::atomic<bool> stop{false};
    std::atomic<int> retires{0};
    run_threads(4, [&](std::size_t t) {
      if (t == 0) {  // once the others retire, at a point that moves from round to round
        while (retires.load() < 30 + 7 * (round % 11)) std::this_thread::yield();
        p.set_enabled(false);
        stop.store(true);
        return;
      }
      for (std::size_t i = t; !stop.load(); ++i) {
        p.retire(buffer(sizes[i % std::size(sizes)]));
        retires.fetch_add(1);
      }
    });
    CHECK(p.retained() == 0);
    CHECK(p.stats().retained_bytes == 0);
  }
}

TEST_CASE_TEMPLATE("switching the pool off frees what it holds, and on again keeps anew", P, POOLS) {
  P p;
  for (int i = 0; i < 40; ++i) p.retire(p.acquire(2048));
  CHECK(p.retained() > 0);
  p.set_enabled(false);
  CHECK(p.retained() == 0);
  CHECK_FALSE(p.take(2048));
  p.set_enabled(true);
  p.retire(p.acquire(2048));
  CHECK(p.retained() == 1);
  CHECK(p.take(2048));
}

TEST_CASE_TEMPLATE("bad sizes get documented answers", P, POOLS) {
  constexpr std::size_t huge = std::numeric_limits<std::size_t>::max();
  P p;
  CHECK_FALSE(p.take(huge));
  CHECK_THROWS_AS((void)p.acquire(huge), std::bad_alloc);
  CHECK_THROWS_AS((void)buffer(huge), std::bad_alloc);
  buffer zero = p.acquire(0);
  CHECK(zero);
  CHECK(zero.size() == 0);
  p.retire(std::move(zero));
  CHECK_FALSE(zero);  // NOLINT: the moved-from handle is empty
  p.retire(std::move(zero));  // retiring it again is ignored
  CHECK(p.retained() == 1);
  CHECK(p.take(0));
  P unbounded{pool_options{.bound = huge, .ceiling = huge}};
  unbounded.retire(buffer(100));
  CHECK(unbounded.take(50).capacity() == 100);
  P nothing{pool_options{.ceiling = 0}};
  nothing.retire(buffer(1));
  CHECK(nothing.retained() == 0);
  nothing.retire(buffer(0));
  CHECK(nothing.take(0));
}

TEST_CASE("a buffer owns its memory and moves") {
  buffer a(100, 300);
  CHECK(a.size() == 100);
  CHECK(a.capacity() == 300);
  fill(a.bytes(), 1);
  std::byte* data = a.data();
  buffer b = std::move(a);
  CHECK_FALSE(a);  // NOLINT: moved-from, and empty in every word
  CHECK(a.size() == 0);  // NOLINT
  CHECK(a.capacity() == 0);  // NOLINT
  CHECK(b.data() == data);
  CHECK(b.size() == 100);
  CHECK(b.capacity() == 300);
  buffer& alias = b;  // through a reference, as generic code would, so no compiler flags it
  b = std::move(alias);  // self-move keeps it
  CHECK(b.data() == data);
  CHECK(first_difference(b.bytes(), 1) == 100);
  buffer c(50, 10);  // a capacity below the size is raised to it
  CHECK(c.capacity() == 50);
  c = std::move(b);  // frees c's own memory
  CHECK(c.data() == data);
  CHECK(c.size() == 100);
  CHECK(c.capacity() == 300);
  CHECK_FALSE(b);  // NOLINT: moved-from
  CHECK(b.size() == 0);  // NOLINT
  CHECK(b.capacity() == 0);  // NOLINT
}
