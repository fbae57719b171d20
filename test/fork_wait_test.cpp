// Forks that this executable holds inside their prepare, after sluice's handlers have run:
// a prepare handler of its own, registered before sluice's (at static initialisation, before any
// gate or pool exists) and so run after them, does what the case under way asks. Its own
// executable for that, and so that the gate case's wait is the process's first.
#include <pthread.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "doctest.hpp"
#include "kinds.hpp"
#include "sluice/gate.hpp"
#include "sluice/pool.hpp"
#include "threads.hpp"

namespace {

// Under ThreadSanitizer, pthread_once is the sanitizer's own (the guard it also uses for
// function-local statics), which does not let a forked child run an interrupted initialisation
// again as glibc's does: there the child hangs whatever the library does, so the case is run
// plain and under AddressSanitizer only.
constexpr bool tsan = sluice_test::thread_sanitized;

// What the prepare handler does, on the forking thread, while sluice's handlers hold their locks.
std::function<void()> in_prepare;
const bool hooked = pthread_atfork([] { if (in_prepare) in_prepare(); }, nullptr, nullptr) == 0;

// Waits for the child and answers its exit status (negative: killed by that signal; SIGALRM, 14,
// means it hung).
int status_of(pid_t pid) {
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}

}  // namespace

// The first wait makes the gates' table of parking spots. The prepare pauses while sluice's
// handler holds its registry, so that another thread's first wait reaches the table's making
// during the fork. Had the table been a function-local static whose making waits for the
// registry, the child would inherit its guard "in progress" and hang at its first wait. The
// pause only widens that window; the case passes or fails on what the child can do, bounded by
// an alarm.
TEST_CASE("a child forked during the process's first gate wait can wait on a gate" * doctest::skip(tsan)) {
  REQUIRE(hooked);
  in_prepare = [] {
    const timespec pause{0, 200'000'000};  // widens the window, see above; not synchronisation
    nanosleep(&pause, nullptr);
  };
  sluice::gate g{1};
  REQUIRE(g.try_admit());
  std::atomic<bool> waiting{false};
  std::thread first_wait([&] {
    waiting.store(true);
    CHECK(g.try_admit_for(std::chrono::seconds(30)));
  });
  while (!waiting.load()) std::this_thread::yield();
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    alarm(10);  // a hang ends the child by SIGALRM
    sluice::gate h{1};
    const bool gave_up = !(h.try_admit() && h.try_admit_for(std::chrono::milliseconds(10)));
    _exit(gave_up && h.in_flight() == 1 ? 0 : 1);
  }
  in_prepare = nullptr;
  CHECK(status_of(pid) == 0);
  g.note_done();
  first_wait.join();
}

// docs/pool.md FORK. B takes and retires without pause, seated or (every seat held by this thread
// and three others) through the CPU caches. Inside the fork, once sluice's prepare has run, the
// kernel must come to report B asleep, which it can be only in a call that waits for the fork,
// and B must then complete no call until the fork returns; this thread's own calls, made there,
// complete. Before issue 31's last change, a seated B went on hitting its cache through the
// whole fork, so the forking thread waited for a CPU behind every caller (bench/fork_bench.cpp).
TEST_CASE("a pool call that begins during a fork waits for it; the forking thread's own do not") {
  REQUIRE(hooked);
  for (const bool seated : {true, false}) {
    CAPTURE(seated);
    sluice::pool p{sluice::pool_options{.bound = 64}};  // four seats
    p.retire(p.acquire(64));                            // this thread's: a seat
    std::mutex m;
    std::condition_variable changed;
    int holders_seated = 0;
    bool release = false;
    std::vector<std::thread> holders;
    for (int i = 0; i < (seated ? 0 : 3); ++i) {
      holders.emplace_back([&] {
        (void)p.take(64);  // a first call: a seat
        std::unique_lock lock(m);
        ++holders_seated;
        changed.notify_all();
        changed.wait(lock, [&] { return release; });
      });
    }
    {
      std::unique_lock lock(m);
      changed.wait(lock, [&] { return holders_seated == static_cast<int>(holders.size()); });
    }
    std::atomic<long> b_tid{0};
    std::atomic<std::uint64_t> calls{0};
    std::atomic<bool> stop{false};
    std::thread b([&] {
      b_tid.store(sluice_test::this_tid());
      while (!stop.load(std::memory_order_relaxed)) {
        p.retire(p.acquire(64));
        calls.fetch_add(1, std::memory_order_relaxed);
      }
    });
    while (calls.load() < 1000) std::this_thread::yield();
    bool b_slept = false, b_stayed = false, own_completed = false;
    in_prepare = [&] {
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (!sluice_test::asleep(b_tid.load()) && std::chrono::steady_clock::now() < give_up) std::this_thread::yield();
      b_slept = sluice_test::asleep(b_tid.load());
      const std::uint64_t before = calls.load();
      p.retire(p.acquire(64));  // seated, and its buffer's class cached: no mutex of the pool's
      own_completed = true;
      b_stayed = calls.load() == before && sluice_test::asleep(b_tid.load());
    };
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) _exit(0);
    in_prepare = nullptr;
    CHECK(status_of(pid) == 0);
    CHECK(b_slept);
    CHECK(b_stayed);
    CHECK(own_completed);
    const std::uint64_t after_fork = calls.load();
    while (calls.load() < after_fork + 1000) std::this_thread::yield();  // B goes on
    stop.store(true);
    b.join();
    {
      std::lock_guard lock(m);
      release = true;
      changed.notify_all();
    }
    for (auto& t : holders) t.join();
  }
}

// docs/pool.md FORK. A library whose own fork handler runs after sluice's takes a lock M that a
// worker holds while it calls the pool: the worker's call, which sees the fork, must not wait
// for the fork's end without bound, or neither ends. (The first version of the wait, on a mutex
// the fork held, hung here every time: found by the review of issue 31.)
TEST_CASE("a pool call that waits for a fork does not hold up another fork handler that waits for its thread") {
  REQUIRE(hooked);
  sluice::pool p{sluice::pool_options{.bound = 64}};
  std::mutex m;
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> calls{0};
  std::thread worker([&] {
    p.retire(p.acquire(64));  // its first call (an enrolment, under the pool's admin mutex) not under M
    while (!stop.load(std::memory_order_relaxed)) {
      const std::lock_guard lock(m);  // then M: a seated call of a cached class, which takes no mutex
      p.retire(p.acquire(64));
      calls.fetch_add(1, std::memory_order_relaxed);
    }
  });
  while (calls.load() < 1000) std::this_thread::yield();
  in_prepare = [&] { const std::lock_guard lock(m); };  // the other library's prepare
  int forks = 0;
  for (int i = 0; i < 20; ++i) {
    const pid_t pid = fork();  // hangs for good if the worker's wait has no bound
    REQUIRE(pid >= 0);
    if (pid == 0) _exit(0);
    CHECK(status_of(pid) == 0);
    ++forks;
  }
  in_prepare = nullptr;
  stop.store(true);
  worker.join();
  CHECK(forks == 20);
}
