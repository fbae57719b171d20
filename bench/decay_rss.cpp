// Resident memory over time after a burst, with a pool's decay off and on (docs/bench/decay.md,
// docs/pool.md, DECAY). A program of its own, not a Google Benchmark: what it measures is the
// process's resident memory (/proc/self/statm) while the program idles, not a throughput.
//
// A pool{{.bound = 4096, .decay = D}} (D = 0 with --mode=off) is filled with 4,096 buffers of
// 64 KiB, each written whole, which are then all retired; then the main thread idles for 2.5 D,
// waking every D / 20 to call decay() (with --mode=on; never with off) and to sample the
// resident memory and what the pool retains. The bursts (--burst):
//
//   main      the main thread takes all 4,096 and retires them
//   threads   4 workers take 1,024 each and hand them to the next worker, which retires them (as
//             frames travel between threads); then the workers exit (joined)
//   sleepers  as threads, but the workers stay alive, blocked on a condition variable without
//             calling the pool, for the 2.5 D: what decay cannot reach; then they exit, and the
//             samples go on to 4 D
//
// The pre-burst figure is read after the pool is made and the workers are started (their
// stacks and malloc arenas in it). The retires come right after a decay step (with off, at the
// time it would have run: D / 2 after the pool was made, on the same D / 20 tick): a buffer
// retired just after a step waits longest, D and up to a tick, so the run shows the worst phase.
// Prints the samples, each decay() call that ran a step and its time (it calls malloc_trim when
// it freed anything), and when the resident memory first came within 10% of the pre-burst figure.
//
// --signal lends the pool a decay signal (sluice::set_decay_signal(SIGRTMIN)), so that the steps
// reach the sleepers' caches too: their pages go back, the buffers stay until the exit.
//
// --warm runs the same burst once before the pre-burst reading (its workers exit, even for
// sleepers), then trim() and malloc_trim(0): a baseline that holds what a pool keeps once it has
// carried a burst (its slot table, which does not shrink) and the pages a burst touches besides.
//
//   decay_rss [--decay-ms=2000] [--mode=off|on] [--burst=main|threads|sleepers] [--warm] [--signal]
#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "sluice/pool.hpp"

namespace {

using clock_type = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr std::size_t buffers = 4096;
constexpr std::size_t buffer_bytes = std::size_t{64} << 10;
constexpr int workers = 4;
constexpr double mib = 1024.0 * 1024.0;

double ms_between(clock_type::time_point a, clock_type::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// Resident bytes: /proc/self/statm's second field (pages) times the page size.
double rss_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return -1;
  unsigned long size = 0, resident = 0;
  const int n = std::fscanf(f, "%lu %lu", &size, &resident);
  std::fclose(f);
  if (n != 2) return -1;
  return static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE));
}

struct options {
  long decay_ms = 2000;
  bool on = true;
  std::string burst = "main";
  bool warm = false;
  bool signal = false;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr, "decay_rss: %s\nusage: decay_rss [--decay-ms=N] [--mode=off|on] [--burst=main|threads|sleepers] [--warm] [--signal]\n", why);
  std::exit(2);
}

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* key) -> const char* {
      const std::size_t n = std::strlen(key);
      return a.compare(0, n, key) == 0 ? a.c_str() + n : nullptr;
    };
    if (const char* ms = value("--decay-ms=")) {
      o.decay_ms = std::atol(ms);
      if (o.decay_ms < 20) usage("--decay-ms must be 20 or more");
    } else if (const char* mode = value("--mode=")) {
      if (std::strcmp(mode, "on") != 0 && std::strcmp(mode, "off") != 0) usage("--mode is off or on");
      o.on = std::strcmp(mode, "on") == 0;
    } else if (const char* burst = value("--burst=")) {
      o.burst = burst;
      if (o.burst != "main" && o.burst != "threads" && o.burst != "sleepers") usage("--burst is main, threads or sleepers");
    } else if (a == "--warm") {
      o.warm = true;
    } else if (a == "--signal") {
      o.signal = true;
    } else {
      usage(("unknown argument " + a).c_str());
    }
  }
  return o;
}

std::vector<sluice::buffer> fill(sluice::pool& p, std::size_t n, int seed) {
  std::vector<sluice::buffer> out;
  out.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    sluice::buffer b = p.acquire(buffer_bytes);
    std::memset(b.data(), static_cast<int>((static_cast<std::size_t>(seed) + i) & 0xff) | 1, b.size());  // every page touched
    out.push_back(std::move(b));
  }
  return out;
}

// The workers of --burst=threads and sleepers, and the main thread's signals to them.
struct crew {
  std::mutex m;
  std::condition_variable cv;
  std::vector<sluice::buffer> mailbox[workers];  // mailbox[i]: what worker i retires
  int ready = 0, filled = 0, retired = 0;
  bool go_fill = false, go_retire = false, end = false;
  std::vector<std::thread> threads;

  void start(sluice::pool& p, bool stay) {
    for (int w = 0; w < workers; ++w) {
      threads.emplace_back([this, &p, w, stay] {
        std::vector<sluice::buffer> mine;
        mine.reserve(buffers / workers);  // this thread's first malloc: its arena, before the baseline
        std::unique_lock lock(m);
        ++ready;
        cv.notify_all();
        cv.wait(lock, [&] { return go_fill; });
        lock.unlock();
        mine = fill(p, buffers / workers, w);
        lock.lock();
        mailbox[(w + 1) % workers] = std::move(mine);  // handed to the next worker
        ++filled;
        cv.notify_all();
        cv.wait(lock, [&] { return go_retire; });
        std::vector<sluice::buffer> theirs = std::move(mailbox[w]);
        lock.unlock();
        for (sluice::buffer& b : theirs) p.retire(std::move(b));
        lock.lock();
        ++retired;
        cv.notify_all();
        if (stay) cv.wait(lock, [&] { return end; });  // asleep: no call to the pool
      });
    }
    std::unique_lock lock(m);
    cv.wait(lock, [&] { return ready == workers; });
  }
  void signal(bool crew::*flag, int crew::*count) {
    std::unique_lock lock(m);
    this->*flag = true;
    cv.notify_all();
    cv.wait(lock, [&] { return this->*count == workers; });
  }
  void join() {
    {
      std::lock_guard lock(m);
      end = true;
    }
    cv.notify_all();
    for (std::thread& t : threads) t.join();
    threads.clear();
  }
};

struct step_time {
  double at_ms;  // since idle began (negative: before it)
  double took_ms;
  std::size_t retained_before, retained_after;
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  const options o = parse(argc, argv);
  const milliseconds d{o.decay_ms};
  const milliseconds tick = d / 20;
  if (o.signal) sluice::set_decay_signal(SIGRTMIN);
  const clock_type::time_point made = clock_type::now();
  sluice::pool p{{.bound = buffers, .decay = o.on ? d : milliseconds{0}}};

  const bool threaded = o.burst != "main";
  if (o.warm) {
    // The same burst once before (its workers exit even for sleepers), all of it trimmed and its
    // pages returned: the baseline holds what the pool keeps after a burst (its slot table) and the
    // pages of code and of the workers' arenas that a burst touches.
    if (threaded) {
      crew w;
      w.start(p, false);
      w.signal(&crew::go_fill, &crew::filled);
      w.signal(&crew::go_retire, &crew::retired);
      w.join();
    } else {
      for (sluice::buffer& b : fill(p, buffers, 0)) p.retire(std::move(b));
    }
    p.trim();
#if defined(__GLIBC__)
    malloc_trim(0);
#endif
  }
  crew c;
  if (threaded) c.start(p, o.burst == "sleepers");
  const double pre = rss_bytes();

  std::vector<step_time> steps;
  auto timed_decay = [&](clock_type::time_point from) {
    if (!o.on) return false;
    const std::size_t before = p.retained();
    const clock_type::time_point t0 = clock_type::now();
    const bool ran = p.decay();
    const clock_type::time_point t1 = clock_type::now();
    if (ran) steps.push_back({ms_between(from, t0), ms_between(t0, t1), before, p.retained()});
    return ran;
  };

  // The fill: the buffers are held, none retained.
  std::vector<sluice::buffer> held;
  if (threaded) {
    c.signal(&crew::go_fill, &crew::filled);
  } else {
    held = fill(p, buffers, 0);
  }
  const double filled = rss_bytes();

  // The phase: the retires follow a step at once (off: the time of the first one, D / 2 after the
  // pool was made), on a tick of the pool's making.
  const clock_type::time_point first_due = made + d / 2;
  for (clock_type::time_point t = made + tick;; t += tick) {
    std::this_thread::sleep_until(t);
    const std::size_t n = steps.size();
    timed_decay(made);  // times from the pool's making: made relative to idle below
    if (steps.size() > n || (!o.on && clock_type::now() >= first_due)) break;
  }
  const clock_type::time_point retire_began = clock_type::now();
  if (threaded) {
    c.signal(&crew::go_retire, &crew::retired);
    if (o.burst == "threads") c.join();
  } else {
    for (sluice::buffer& b : held) p.retire(std::move(b));
    held.clear();
    held.shrink_to_fit();
  }
  const clock_type::time_point idle = clock_type::now();
  for (step_time& s : steps) s.at_ms -= ms_between(made, idle);  // relative to idle, as the rest

  std::printf("# decay_rss --decay-ms=%ld --mode=%s --burst=%s%s%s: %zu buffers of %zu KiB, bound %zu, %d workers\n",
              o.decay_ms, o.on ? "on" : "off", o.burst.c_str(), o.warm ? " --warm" : "", o.signal ? " --signal" : "", buffers, buffer_bytes >> 10,
              buffers, threaded ? workers : 0);
  std::printf("# pre-burst RSS %.2f MiB; after the fill %.2f MiB; the retires began %.0f ms after the pool was made and took %.1f ms\n",
              pre / mib, filled / mib, ms_between(made, retire_began), ms_between(retire_began, idle));
  std::printf("%8s %10s %9s %13s\n", "t_ms", "rss_mib", "retained", "retained_mib");

  const double target = pre * 1.10;
  double within_at = -1, exit_within_at = -1, exit_at = -1;
  double last_rss = 0, idle_end_rss = 0;
  auto sample = [&](double at_ms) {
    const sluice::pool_stats s = p.stats();
    last_rss = rss_bytes();
    std::printf("%8.0f %10.2f %9zu %13.2f\n", at_ms, last_rss / mib, s.retained, static_cast<double>(s.retained_bytes) / mib);
    double& first = exit_at < 0 ? within_at : exit_within_at;
    if (first < 0 && last_rss <= target) first = at_ms;
  };
  sample(0);
  // Sleepers: after the 2.5 D, the workers are let go (they exit without another call to the
  // pool) and the samples go on for 1.5 D more: what their caches held departs at their exit.
  const int idle_ticks = 50, ticks = o.burst == "sleepers" ? 80 : idle_ticks;
  for (int i = 1; i <= ticks; ++i) {
    std::this_thread::sleep_until(idle + i * tick);
    if (i == idle_ticks + 1) {
      idle_end_rss = last_rss;
      exit_at = ms_between(idle, clock_type::now());
      c.join();
      std::printf("# the workers exit now (joined in %.1f ms)\n", ms_between(idle, clock_type::now()) - exit_at);
    }
    timed_decay(idle);
    sample(ms_between(idle, clock_type::now()));
  }
  if (exit_at < 0) idle_end_rss = last_rss;
  if (o.signal) std::printf("# pages the sleeping threads gave back: %.2f MiB\n", static_cast<double>(p.released_idle_bytes()) / mib);

  if (o.on) {
    std::printf("# decay() calls that ran a step: at_ms (since idle began) took_ms retained before -> after\n");
    std::vector<double> took, freeing;  // every step; the steps that freed buffers (and so trimmed)
    for (const step_time& s : steps) {
      std::printf("#   %8.0f %8.3f %6zu -> %zu\n", s.at_ms, s.took_ms, s.retained_before, s.retained_after);
      took.push_back(s.took_ms);
      if (s.retained_after < s.retained_before) freeing.push_back(s.took_ms);
    }
    for (const auto& [what, v] : {std::pair{"steps", &took}, std::pair{"steps that freed buffers", &freeing}}) {
      if (!v->empty()) {
        std::printf("# %s: %zu, time max %.3f ms, median %.3f ms\n", what, v->size(), *std::max_element(v->begin(), v->end()),
                    median(*v));
      }
    }
  } else {
    std::printf("# decay off: decay() not called\n");
  }
  const double by = 1.1 * static_cast<double>(o.decay_ms);
  std::printf("# RSS at %.0f ms: %.2f MiB, %+.2f MiB against pre-burst (%.2fx)\n", 2.5 * static_cast<double>(o.decay_ms),
              idle_end_rss / mib, (idle_end_rss - pre) / mib, idle_end_rss / pre);
  if (within_at >= 0) {
    std::printf("# RSS within 10%% of pre-burst (<= %.2f MiB) first at %.0f ms after idle began; target by %.0f ms: %s\n",
                target / mib, within_at, by, within_at <= by ? "met" : "missed");
  } else {
    std::printf("# RSS within 10%% of pre-burst (<= %.2f MiB): never in %.0f ms; target by %.0f ms: missed\n",
                target / mib, 2.5 * static_cast<double>(o.decay_ms), by);
  }
  if (exit_at >= 0) {
    if (exit_within_at >= 0) {
      std::printf("# after the workers' exit at %.0f ms: within 10%% first at %.0f ms (%.0f ms after the exit)\n", exit_at,
                  exit_within_at, exit_within_at - exit_at);
    } else {
      std::printf("# after the workers' exit at %.0f ms: never within 10%% (last %.2f MiB)\n", exit_at, last_rss / mib);
    }
  }
  return 0;
}
