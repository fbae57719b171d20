// follow: a gate and a pool that follow the kernel's memory pressure (docs/pressure.md).
//
// Each tick, the program does a little work (it takes and retires 16 buffers of 64 KiB through
// its pool), then polls the pressure and follows it: the gate's cap one step down under soft and
// hard pressure, one up (to --max-cap) when it is ok; the pool gives back a quarter of what it
// retains under soft pressure and all of it under hard. One line a tick says what it read and
// where the cap and the pool stand.
//
//   follow [--psi=PATH] [--cgroup=DIR] [--ticks=N] [--interval=SECONDS] [--max-cap=N]
//          [--expect-cap=N]
//   --psi        a PSI file (default /proc/pressure/memory; a cgroup v2's memory.pressure)
//   --cgroup     a cgroup v2 directory whose memory.current / memory.max is read too
//   --ticks      how many polls (default 10); --interval  seconds between them (default 1)
//   --max-cap    the gate's cap at the start and its ceiling (default 64)
//   --expect-cap exit 1 unless the cap ends at N (the tests' check)
//
// Exit status: 0, or 1 when a poll fails (the file is named) or the cap is not the expected one,
// 2 for a bad option, 77 (a skipped test) when the default PSI file does not exist.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "sluice/gate.hpp"
#include "sluice/pool.hpp"
#include "sluice/pressure.hpp"

namespace {

const char* name_of(sluice::pressure p) {
  return p == sluice::pressure::ok ? "ok" : p == sluice::pressure::soft ? "soft" : "hard";
}

bool option(const char* arg, const char* name, std::string& value) {
  const std::size_t n = std::strlen(name);
  if (std::strncmp(arg, name, n) != 0 || arg[n] != '=') return false;
  value = arg + n + 1;
  return true;
}

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr, "follow: %s\nusage: follow [--psi=PATH] [--cgroup=DIR] [--ticks=N] [--interval=SECONDS] "
                       "[--max-cap=N] [--expect-cap=N]\n", why);
  std::exit(2);
}

long whole(const std::string& s, const char* what) {
  char* end = nullptr;
  const long v = std::strtol(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || v < 0) usage(what);
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  sluice::pressure_options options;
  long ticks = 10, max_cap = 64, expect_cap = -1;
  double interval = 1;
  bool psi_given = false;
  for (int i = 1; i < argc; ++i) {
    std::string v;
    if (option(argv[i], "--psi", v)) {
      options.psi = v;
      psi_given = true;
    } else if (option(argv[i], "--cgroup", v)) {
      options.cgroup = v;
    } else if (option(argv[i], "--ticks", v)) {
      ticks = whole(v, "--ticks: a whole number");
    } else if (option(argv[i], "--interval", v)) {
      char* end = nullptr;
      interval = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0' || !(interval >= 0 && interval <= 3600)) usage("--interval: seconds, 0 to 3600");
    } else if (option(argv[i], "--max-cap", v)) {
      max_cap = whole(v, "--max-cap: a whole number");
      if (max_cap < 1) usage("--max-cap: at least 1");
    } else if (option(argv[i], "--expect-cap", v)) {
      expect_cap = whole(v, "--expect-cap: a whole number");
    } else {
      usage((std::string("unknown option ") + argv[i]).c_str());
    }
  }
  if (!psi_given && ::access(options.psi.c_str(), R_OK) != 0) {
    std::fprintf(stderr, "follow: %s cannot be read (a kernel without PSI?): nothing to follow\n", options.psi.c_str());
    return 77;
  }

  sluice::pressure_monitor monitor(options);
  sluice::gate requests{max_cap};
  sluice::pool frames{{.bound = 256}};
  for (long t = 1; t <= ticks; ++t) {
    // The work: a burst of frames taken and retired, which the pool keeps for the next burst.
    std::vector<sluice::buffer> burst;
    for (int k = 0; k < 16; ++k) burst.push_back(frames.acquire(64 << 10));
    for (sluice::buffer& b : burst) frames.retire(std::move(b));

    sluice::pressure level;
    try {
      level = monitor.poll();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "follow: %s\n", e.what());
      return 1;
    }
    requests.adjust(level, max_cap);
    if (level == sluice::pressure::soft) frames.trim(0.25);
    if (level == sluice::pressure::hard) frames.trim();

    const sluice::pressure_reading& r = monitor.reading();
    std::printf("tick %ld: %s (some avg10 %.2f%%, full avg10 %.2f%%", t, name_of(level), r.some_avg10, r.full_avg10);
    if (r.usage) std::printf(", usage %.1f%%", 100 * *r.usage);
    std::printf("); cap %lld of %ld; the pool retains %zu buffers (%zu KiB)\n", static_cast<long long>(requests.cap()),
                max_cap, frames.retained(), frames.stats().retained_bytes >> 10);
    std::fflush(stdout);
    if (t < ticks && interval > 0) std::this_thread::sleep_for(std::chrono::duration<double>(interval));
  }
  if (expect_cap >= 0 && requests.cap() != expect_cap) {
    std::fprintf(stderr, "follow: the cap ended at %lld, not %ld\n", static_cast<long long>(requests.cap()), expect_cap);
    return 1;
  }
  return 0;
}
