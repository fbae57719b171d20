// What every sluice benchmark shares: the thread counts, read from SLUICE_BENCH_THREADS
// ("1,2,4,8" unless set, so that a larger machine can run "1,2,4,8,16,32,64"), and a main().
#pragma once

#include <benchmark/benchmark.h>

#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

namespace sluice_bench {

// The positive numbers of a comma-separated list in the environment variable `name`, or of
// `otherwise` where it is unset or empty.
inline std::vector<int> counts_from(const char* name, const char* otherwise) {
  const char* env = std::getenv(name);
  std::stringstream in(env != nullptr && *env != '\0' ? env : otherwise);
  std::vector<int> counts;
  for (std::string item; std::getline(in, item, ',');) {
    if (const int n = std::atoi(item.c_str()); n > 0) counts.push_back(n);
  }
  return counts;
}

inline std::vector<int> thread_counts() { return counts_from("SLUICE_BENCH_THREADS", "1,2,4,8"); }

// Which of the thread counts a benchmark runs at: a workload that pairs threads up (a producer
// and its consumer) needs at least two, and an even number; a ping-pong exactly two.
struct which_counts {
  int min_threads = 1;
  bool even_only = false;
  int max_threads = 1 << 30;
  bool accepts(int n) const { return n >= min_threads && n <= max_threads && (!even_only || n % 2 == 0); }
};

// Registers fn as `family/variant` at every thread count that `which` accepts (nothing at all
// when it accepts none), timed in wall-clock time. Google Benchmark runs the same number of
// iterations on every thread and reports the run's wall-clock time divided by the iterations of
// all threads together: the reciprocal of the throughput, in time per operation pair.
template <class Fn>
void add(const std::string& family, const std::string& variant, Fn fn, which_counts which = {}) {
  std::vector<int> counts;
  for (const int n : thread_counts()) {
    if (which.accepts(n)) counts.push_back(n);
  }
  if (counts.empty()) return;
  auto* b = benchmark::RegisterBenchmark((family + "/" + variant).c_str(), fn);
  for (const int n : counts) b->Threads(n);
  b->UseRealTime();
}

}  // namespace sluice_bench

#define SLUICE_BENCH_MAIN(register_all)               \
  int main(int argc, char** argv) {                   \
    benchmark::Initialize(&argc, argv);               \
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1; \
    register_all();                                   \
    benchmark::RunSpecifiedBenchmarks();              \
    benchmark::Shutdown();                            \
    return 0;                                         \
  }
