// What every sluice benchmark shares: the thread counts, read from SLUICE_BENCH_THREADS
// ("1,2,4,8" unless set, so that a larger machine can run "1,2,4,8,16,32,64"), and a main().
#pragma once

#include <benchmark/benchmark.h>

#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

namespace sluice_bench {

inline std::vector<int> thread_counts() {
  const char* env = std::getenv("SLUICE_BENCH_THREADS");
  std::stringstream in(env != nullptr && *env != '\0' ? env : "1,2,4,8");
  std::vector<int> counts;
  for (std::string item; std::getline(in, item, ',');) {
    if (const int n = std::atoi(item.c_str()); n > 0) counts.push_back(n);
  }
  return counts;
}

// Registers fn as `family/variant` at every thread count, timed in wall-clock time per
// iteration of one thread: the cost of one operation pair as each thread sees it.
template <class Fn>
void add(const std::string& family, const std::string& variant, Fn fn) {
  auto* b = benchmark::RegisterBenchmark((family + "/" + variant).c_str(), fn);
  for (const int n : thread_counts()) b->Threads(n);
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
