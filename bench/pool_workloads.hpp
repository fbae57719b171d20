// The two pool workloads, written once over any source of byte blocks, so that the pools and
// every allocator they are measured against run exactly the same loop.
//
// pool.pair.<size>   each thread, per iteration: get a block, write its first byte, give it back.
// pool.mixed.frames  each thread, per iteration: get a block whose size is the next of a fixed
//                    mix of frame sizes (mostly small, a few up to 1 MiB), write all of it, as a
//                    router reading a frame into it does, and give it back.
// pool.flow.16KiB    threads pair up (even index: producer, odd: its consumer); per iteration a
//                    producer gets a block, writes its first and last byte and pushes it into
//                    the pair's ring (boost::lockfree::spsc_queue), and the consumer pops one,
//                    reads its last byte and gives it back. Memory crosses threads, as frames do
//                    in a server.
// pool.handoff, pool.own, pool.churn, pool.idle
//                    the many-thread patterns (below, and test/patterns.hpp), up to 512 threads.
//
// A source is a default-constructible class with
//   using item = ...;                            what get answers (a buffer, or a pointer)
//   item get(std::size_t n);                     at least n writable bytes, or throws
//   void put(item&& it, std::size_t n) noexcept; gives back what get(n) answered
//   static std::byte* bytes(item& it);
// and one instance per source type and block size serves all threads of every run.
#pragma once

#include <boost/lockfree/spsc_queue.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstddef>
#include <cstring>
#include <dlfcn.h>
#include <fstream>
#include <memory>
#include <sstream>
#include <new>
#include <string>
#include <thread>
#include <utility>

#include "bench_main.hpp"
#include "patterns.hpp"  // test/patterns.hpp: the many-thread patterns, shared with the tests

namespace sluice_bench {

inline constexpr std::size_t KiB = 1024;
inline constexpr std::size_t flow_size = 16 * KiB;

// The one instance of Src for blocks of N bytes, shared by all threads and alive until exit,
// so that it outlives every benchmark thread.
template <class Src, std::size_t N>
Src& shared_source() {
  static Src src;
  return src;
}

template <class Src, std::size_t N>
void pair(benchmark::State& state) {
  Src& src = shared_source<Src, N>();
  for (auto _ : state) {
    auto it = src.get(N);
    std::byte* bytes = Src::bytes(it);
    bytes[0] = std::byte{1};
    benchmark::DoNotOptimize(bytes);  // the write and the pointer escape: no malloc/free elision
    src.put(std::move(it), N);
  }
}

// Frame sizes in the proportions a router might see them: headers and acknowledgements, MTU-sized
// packets, jumbo frames, and now and then a large message. 32 entries, 1 MiB once.
inline constexpr std::array<std::size_t, 32> frame_mix = {
    64,   1500, 256,  1500, 128,  4096, 1500, 512,  9000, 1500, 64,    16384, 1500, 65536,  256,  1500,
    1500, 64,   1500, 2048, 1500, 9000, 128,  1500, 4096, 1500, 32768, 1500,  256,  262144, 1500, 1048576};

template <class Src>
void mixed(benchmark::State& state) {
  Src& src = shared_source<Src, 0>();  // one instance for every size
  std::size_t i = static_cast<std::size_t>(state.thread_index()) * 7;  // threads out of step
  for (auto _ : state) {
    const std::size_t n = frame_mix[i++ % frame_mix.size()];
    auto it = src.get(n);
    std::memset(Src::bytes(it), static_cast<int>(i), n);
    benchmark::DoNotOptimize(Src::bytes(it));
    src.put(std::move(it), n);
  }
}

// The flow's ring: boost::lockfree::spsc_queue of 64 places. A full or empty ring spins with
// yield: the machine may have fewer cores than benchmark threads.
// Boost 1.74's queue copies an element in (push takes const T&), and an item may be move-only
// (sluice::buffer); so the queue holds each item in a box whose copy moves it. push copies a box
// only when there is room, and the consumer moves the item out before the queue destroys the
// box: the item crosses by moves alone, with no allocation, as in any ring.
template <class T>
struct moving_box {
  mutable T item;
  explicit moving_box(T&& it) noexcept : item(std::move(it)) {}
  moving_box(const moving_box& other) noexcept : item(std::move(other.item)) {}
  moving_box& operator=(const moving_box&) = delete;
};

template <class T>
using flow_queue = boost::lockfree::spsc_queue<moving_box<T>, boost::lockfree::capacity<64>>;

// One ring per producer/consumer pair, enough for the largest thread count registered. Every
// run leaves each ring empty (a producer pushes exactly as many blocks as its consumer pops), so
// the rings carry over from run to run.
template <class Src>
flow_queue<typename Src::item>& flow_ring(int pair_index) {
  static const auto rings = [] {
    int most = 2;
    for (const int n : thread_counts()) most = n > most ? n : most;
    return std::make_unique<flow_queue<typename Src::item>[]>(static_cast<std::size_t>(most / 2));
  }();
  return rings[static_cast<std::size_t>(pair_index)];
}

// Google Benchmark runs the same number of iterations on every thread of a run, so each consumer
// pops exactly what its producer pushed, and neither can be left waiting at the end.
template <class Src>
void flow(benchmark::State& state) {
  if (state.threads() % 2 != 0) {
    state.SkipWithError("pool.flow needs an even thread count");
    return;
  }
  Src& src = shared_source<Src, flow_size>();
  auto& ring = flow_ring<Src>(state.thread_index() / 2);
  if (state.thread_index() % 2 == 0) {
    for (auto _ : state) {
      auto it = src.get(flow_size);
      std::byte* bytes = Src::bytes(it);
      bytes[0] = std::byte{1};
      bytes[flow_size - 1] = std::byte{2};
      const moving_box<typename Src::item> box{std::move(it)};
      while (!ring.push(box)) std::this_thread::yield();  // full
    }
  } else {
    for (auto _ : state) {
      typename Src::item it{};
      while (!ring.consume_one([&it](auto& box) { it = std::move(box.item); })) {
        std::this_thread::yield();  // empty
      }
      benchmark::DoNotOptimize(Src::bytes(it)[flow_size - 1]);
      src.put(std::move(it), flow_size);
    }
  }
}

inline constexpr which_counts flow_counts{.min_threads = 2, .even_only = true};

// ---- many threads: the four patterns of test/patterns.hpp --------------------------------------
//
// pool.handoff, pool.own, pool.churn, pool.idle: 1 KiB blocks, each cell one run of the pattern
// with its own threads (SLUICE_BENCH_PATTERN_THREADS, "1,2,8,64,512" unless set) taking
// SLUICE_BENCH_PATTERN_BUFFERS blocks in all (1000000 unless set, so that the first blocks a
// pattern needs, the most at 512 threads, are a small part), on a source made for that cell alone
// (pools with bound 32768, below). The cell's time is wall-clock ns per block taken (in idle, the
// working pair's), and its
// counters: peak_rss_mib, the peak resident memory above what the process held at the cell's
// start (VmHWM, reset through /proc/self/clear_refs), and for a pool hit_rate (percent of takes
// answered from retained blocks) and fresh_per_buffer (takes that allocated, per block).
// SLUICE_BENCH_DECAY_MS=D: the pools decay with D (pool_options::decay, pool_bench.cpp), and a
// thread of the cell calls decay() every D / 10 while the pattern runs, as a program's timer
// would: the hit rate with decay on (docs/bench/decay.md).

inline std::vector<int> pattern_thread_counts() { return counts_from("SLUICE_BENCH_PATTERN_THREADS", "1,2,8,64,512"); }

// The pools' bound in the patterns (pool_bench.cpp): twice what 256 pairs' rings hold in flight,
// and no admission beyond the rings (the tests, test/many_threads_test.cpp, take the bounds
// tight and admit a quarter of the bound: here the cells time the sources, not their misses).
inline constexpr std::size_t pattern_bound = 32768;
inline constexpr std::ptrdiff_t pattern_in_flight = PTRDIFF_MAX;

inline std::uint64_t pattern_buffers() {
  const char* env = std::getenv("SLUICE_BENCH_PATTERN_BUFFERS");
  const long long n = env != nullptr ? std::atoll(env) : 0;
  return n > 0 ? static_cast<std::uint64_t>(n) : 1'000'000;
}

// A field of /proc/self/status, in KiB (VmRSS: resident now; VmHWM: the peak since the last
// reset); -1 where there is none.
inline long status_kib(const std::string& field) {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(field + ":", 0) == 0) return std::atol(line.c_str() + field.size() + 1);
  }
  return -1;
}

// Makes VmHWM start again from the resident memory now (Linux 4.0 and later).
inline void reset_peak_rss() { std::ofstream("/proc/self/clear_refs") << "5"; }

// SLUICE_BENCH_DECAY_MS, or 0 (decay off).
inline std::chrono::milliseconds bench_decay() {
  const char* env = std::getenv("SLUICE_BENCH_DECAY_MS");
  return std::chrono::milliseconds(env != nullptr ? std::strtoll(env, nullptr, 10) : 0);
}

// A pool's statistics around a pattern's measured part, and its decay's timer meanwhile; nothing
// for an allocator.
template <class Src>
struct pattern_probe {
  static constexpr bool pool = requires(Src& s) { s.pool.stats(); };
  Src& src;
  std::uint64_t hits = 0, misses = 0, decayed = 0;
  std::atomic<bool> stop{false};
  std::thread timer{};
  void begin() {
    if constexpr (pool) {
      const auto s = src.pool.stats();
      hits = s.hits;
      misses = s.misses;
      if (const auto d = bench_decay(); d.count() > 0) {
        timer = std::thread([this, d] {
          while (!stop.load(std::memory_order_relaxed)) {
            std::this_thread::sleep_for(d / 10);
            src.pool.decay();
          }
        });
      }
    }
  }
  void end() {
    if constexpr (pool) {
      stop.store(true, std::memory_order_relaxed);
      if (timer.joinable()) timer.join();
      const auto s = src.pool.stats();
      hits = s.hits - hits;
      misses = s.misses - misses;
      for (const auto& row : src.pool.class_stats()) decayed += row.decayed;
    }
  }
};

template <class Src>
void pattern_cell(benchmark::State& state, sluice_patterns::pattern p, int threads) {
  for (auto _ : state) {
    auto src = std::make_unique<Src>();
    pattern_probe<Src> probe{*src, 0, 0, 0, {false}, {}};
    reset_peak_rss();
    const long start_kib = status_kib("VmRSS");
    const auto out = sluice_patterns::run(p, *src, threads, pattern_buffers(), KiB, pattern_in_flight, probe);
    const long peak_kib = status_kib("VmHWM");
    state.SetIterationTime(out.seconds / static_cast<double>(out.buffers));  // real_time: per block
    state.counters["peak_rss_mib"] = static_cast<double>(peak_kib - start_kib) / 1024.0;
    if constexpr (pattern_probe<Src>::pool) {
      const double takes = static_cast<double>(probe.hits + probe.misses);
      state.counters["hit_rate"] = 100.0 * static_cast<double>(probe.hits) / takes;
      state.counters["fresh_per_buffer"] = static_cast<double>(probe.misses) / static_cast<double>(out.buffers);
      if (bench_decay().count() > 0) state.counters["decayed"] = static_cast<double>(probe.decayed);
    }
  }
}

// Registers the four patterns at each thread count for one source: pool.<pattern>/<variant>/
// threads:<n>, where n is the pattern's own threads (the benchmark runs on one).
template <class Src>
void add_patterns(const std::string& variant) {
  for (const auto p : sluice_patterns::all_patterns) {
    for (const int n : pattern_thread_counts()) {
      const std::string name = std::string("pool.") + sluice_patterns::name(p) + "/" + variant + "/threads:" + std::to_string(n);
      benchmark::RegisterBenchmark(name.c_str(), [p, n](benchmark::State& state) { pattern_cell<Src>(state, p, n); })
          ->UseManualTime()
          ->Iterations(1)
          ->Unit(benchmark::kNanosecond);
    }
  }
}

// Registers the pair families at 1 KiB, 64 KiB and 1 MiB, the mixed frames, the flow family and
// the many-thread patterns for one source.
template <class Src>
void add_all(const std::string& variant) {
  add("pool.pair.1KiB", variant, pair<Src, 1 * KiB>);
  add("pool.pair.64KiB", variant, pair<Src, 64 * KiB>);
  add("pool.pair.1MiB", variant, pair<Src, 1024 * KiB>);
  add("pool.mixed.frames", variant, mixed<Src>);
  add("pool.flow.16KiB", variant, flow<Src>, flow_counts);
  add_patterns<Src>(variant);
}

// A source over a plain allocation API: Api::allocate(n) and Api::release(p, n).
template <class Api>
struct raw_source {
  using item = std::byte*;
  item get(std::size_t n) {
    auto* p = static_cast<std::byte*>(Api::allocate(n));
    if (p == nullptr) throw std::bad_alloc();
    return p;
  }
  void put(item&& p, std::size_t n) noexcept { Api::release(p, n); }
  static std::byte* bytes(item& p) { return p; }
};

// The file of the library whose malloc this process's calls to malloc reach (the executable's
// own lookup order), so that a run records which allocator "malloc" was.
inline std::string malloc_provider() {
  void* sym = dlsym(RTLD_DEFAULT, "malloc");
  Dl_info info{};
  if (sym == nullptr || dladdr(sym, &info) == 0 || info.dli_fname == nullptr) return "?";
  return info.dli_fname;
}

}  // namespace sluice_bench
