// A shared object that uses sluice::pool and is loaded with dlopen (host.cpp), as a plugin would
// be: its inline paths and libsluice.so reach the thread's cache through initial-exec TLS, which
// glibc must grant from the static TLS it keeps spare for libraries loaded late.
#include <sluice/pool.hpp>

#include <thread>

extern "C" int plugin_run() {
  sluice::pool p;
  int failures = 0;
  const auto work = [&] {
    for (int i = 0; i < 1000; ++i) {
      sluice::buffer b = p.acquire(1024);
      if (b.size() != 1024) ++failures;
      p.retire(std::move(b));
    }
  };
  work();
  std::thread other(work);
  other.join();
  // Each thread's first acquire misses (the other's buffer stays in its cache); every other hits.
  return failures == 0 && p.stats().hits == 1998 && p.retained() == 2 ? 0 : 1;
}
