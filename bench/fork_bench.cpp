// fork() while threads call a pool: how long the fork takes with sluice::pool and with its mutex
// twin (docs/pool.md, FORK). A program of its own, not a Google Benchmark: what it measures is the
// latency of one call on the main thread while others load the pool, not a throughput.
//
// For each kind in turn, one pool alive at a time (so that the fork's handlers hold only that
// pool's locks): 24 threads acquire and retire without pause (at the default bound of 1024, 8 of
// them hold seats and the other 16 share the CPU caches), and the main thread forks 10 times, each
// child exiting at once; a fork is timed from its call to its return in the parent, which covers
// the prepare handlers' wait for the pool's locks. Prints each kind's mean and worst per round, the
// kinds alternating, and then over all rounds.
//
//   SLUICE_FORK_ROUNDS   rounds, 5 unless set
//   SLUICE_FORK_THREADS  calling threads, 24 unless set
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "sluice/pool.hpp"

namespace {

int from_env(const char* name, int otherwise) {
  const char* v = std::getenv(name);
  const int n = v != nullptr ? std::atoi(v) : 0;
  return n > 0 ? n : otherwise;
}

struct figures {
  double mean_ms = 0, worst_ms = 0;
};

// Ten forks while `threads` threads call a fresh pool of kind P.
template <class P>
figures forks_under_load(int threads) {
  P pool;
  std::atomic<bool> stop{false};
  std::atomic<int> started{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < threads; ++t) {
    callers.emplace_back([&] {
      pool.retire(pool.acquire(1024));  // its first call: a seat, while one is free
      started.fetch_add(1);
      while (!stop.load(std::memory_order_relaxed)) {
        sluice::buffer a = pool.acquire(1024);
        sluice::buffer b = pool.acquire(4096);
        pool.retire(std::move(a));
        pool.retire(std::move(b));
      }
    });
  }
  while (started.load() < threads) std::this_thread::yield();
  constexpr int forks = 10;
  double total = 0, worst = 0;
  for (int i = 0; i < forks; ++i) {
    const timespec pace{0, 2'000'000};  // the callers run between forks
    nanosleep(&pace, nullptr);
    const auto begin = std::chrono::steady_clock::now();
    const pid_t pid = fork();
    if (pid == 0) _exit(0);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin).count();
    if (pid < 0) {
      std::perror("fork");
      std::exit(1);
    }
    waitpid(pid, nullptr, 0);
    total += ms;
    worst = std::max(worst, ms);
  }
  stop.store(true);
  for (auto& t : callers) t.join();
  return {total / forks, worst};
}

}  // namespace

int main() {
  const int rounds = from_env("SLUICE_FORK_ROUNDS", 5);
  const int threads = from_env("SLUICE_FORK_THREADS", 24);
  std::printf("fork() latency, %d threads calling, 10 forks a round, %u CPUs\n", threads,
              std::thread::hardware_concurrency());
  std::printf("%-6s %-11s %10s %10s\n", "round", "kind", "mean ms", "worst ms");
  double pool_mean = 0, pool_worst = 0, mutex_mean = 0, mutex_worst = 0;
  for (int r = 1; r <= rounds; ++r) {
    const figures p = forks_under_load<sluice::pool>(threads);
    const figures m = forks_under_load<sluice::mutex_pool>(threads);
    std::printf("%-6d %-11s %10.2f %10.2f\n%-6d %-11s %10.2f %10.2f\n", r, "pool", p.mean_ms, p.worst_ms, r,
                "mutex_pool", m.mean_ms, m.worst_ms);
    pool_mean += p.mean_ms / rounds;
    mutex_mean += m.mean_ms / rounds;
    pool_worst = std::max(pool_worst, p.worst_ms);
    mutex_worst = std::max(mutex_worst, m.worst_ms);
  }
  std::printf("%-6s %-11s %10.2f %10.2f\n%-6s %-11s %10.2f %10.2f\n", "all", "pool", pool_mean, pool_worst, "all",
              "mutex_pool", mutex_mean, mutex_worst);
  std::printf("pool / mutex_pool: mean %.2fx, worst %.2fx\n", pool_mean / mutex_mean, pool_worst / mutex_worst);
}
