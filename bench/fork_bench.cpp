// fork() while threads call a pool: how long the fork takes with sluice::pool and with its mutex
// twin (docs/pool.md, FORK). A program of its own, not a Google Benchmark: what it measures is the
// latency of one call on the main thread while others load the pool, not a throughput.
//
// For each kind in turn, one pool alive at a time (so that the fork's handlers hold only that
// pool's locks): 24 threads acquire and retire without pause (at the default bound of 1024, 8 of
// them hold seats and the other 16 share the CPU caches), and the main thread forks 10 times, each
// child exiting at once. Each fork is timed whole, from its call to its return in the parent, and
// so is its prepare, sluice's handler alone (which gathers the pool's CPU caches and mutexes), by
// handlers of this program's own on either side of it. Prints each kind's mean and worst per
// round, the kinds alternating, and then over all rounds.
//
//   SLUICE_FORK_ROUNDS   rounds, 5 unless set
//   SLUICE_FORK_THREADS  calling threads, 24 unless set
#include <pthread.h>
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

using clock_type = std::chrono::steady_clock;

double ms_between(clock_type::time_point a, clock_type::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// pthread_atfork runs the prepare handlers in the reverse order of their registration: main
// registers prepare_ended before sluice registers its own (at the first pool), prepare_begins after.
clock_type::time_point prepare_began, prepare_ended;
void prepare_begins() { prepare_began = clock_type::now(); }
void prepare_ends() { prepare_ended = clock_type::now(); }

double thread_cpu_ms() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) / 1e6;
}

struct figures {
  double mean_ms = 0, worst_ms = 0;                // fork() whole
  double cpu_mean_ms = 0;                          // the CPU time fork() took on its thread
  double prepare_mean_ms = 0, prepare_worst_ms = 0;  // sluice's prepare handler
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
  figures f;
  for (int i = 0; i < forks; ++i) {
    const timespec pace{0, 2'000'000};  // the callers run between forks
    nanosleep(&pace, nullptr);
    const double cpu_begin = thread_cpu_ms();
    const auto begin = clock_type::now();
    const pid_t pid = fork();
    if (pid == 0) _exit(0);
    const double ms = ms_between(begin, clock_type::now());
    f.cpu_mean_ms += (thread_cpu_ms() - cpu_begin) / forks;
    if (pid < 0) {
      std::perror("fork");
      std::exit(1);
    }
    waitpid(pid, nullptr, 0);
    const double prepare_ms = ms_between(prepare_began, prepare_ended);
    f.mean_ms += ms / forks;
    f.worst_ms = std::max(f.worst_ms, ms);
    f.prepare_mean_ms += prepare_ms / forks;
    f.prepare_worst_ms = std::max(f.prepare_worst_ms, prepare_ms);
  }
  stop.store(true);
  for (auto& t : callers) t.join();
  return f;
}

void print(const char* round, const char* kind, const figures& f) {
  std::printf("%-6s %-11s %10.2f %10.2f %10.2f %12.2f %12.2f\n", round, kind, f.mean_ms, f.worst_ms, f.cpu_mean_ms,
              f.prepare_mean_ms, f.prepare_worst_ms);
}

}  // namespace

int main() {
  const int rounds = from_env("SLUICE_FORK_ROUNDS", 5);
  const int threads = from_env("SLUICE_FORK_THREADS", 24);
  pthread_atfork(&prepare_ends, nullptr, nullptr);
  { sluice::mutex_pool registers_sluice; }  // sluice's handlers, installed once
  pthread_atfork(&prepare_begins, nullptr, nullptr);
  std::printf("fork() latency, %d threads calling, 10 forks a round, %u CPUs\n", threads,
              std::thread::hardware_concurrency());
  std::printf("%-6s %-11s %10s %10s %10s %12s %12s\n", "round", "kind", "mean ms", "worst ms", "cpu ms", "prepare mean",
              "prepare worst");
  figures pool_all, mutex_all;
  const auto add = [rounds](figures& all, const figures& f) {
    all.mean_ms += f.mean_ms / rounds;
    all.worst_ms = std::max(all.worst_ms, f.worst_ms);
    all.cpu_mean_ms += f.cpu_mean_ms / rounds;
    all.prepare_mean_ms += f.prepare_mean_ms / rounds;
    all.prepare_worst_ms = std::max(all.prepare_worst_ms, f.prepare_worst_ms);
  };
  for (int r = 1; r <= rounds; ++r) {
    const figures p = forks_under_load<sluice::pool>(threads);
    const figures m = forks_under_load<sluice::mutex_pool>(threads);
    const std::string round = std::to_string(r);
    print(round.c_str(), "pool", p);
    print(round.c_str(), "mutex_pool", m);
    add(pool_all, p);
    add(mutex_all, m);
  }
  print("all", "pool", pool_all);
  print("all", "mutex_pool", mutex_all);
  std::printf("pool / mutex_pool: fork mean %.2fx, worst %.2fx; prepare mean %.2fx, worst %.2fx\n",
              pool_all.mean_ms / mutex_all.mean_ms, pool_all.worst_ms / mutex_all.worst_ms,
              pool_all.prepare_mean_ms / mutex_all.prepare_mean_ms, pool_all.prepare_worst_ms / mutex_all.prepare_worst_ms);
}
