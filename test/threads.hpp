// Helpers shared by the concurrent tests.
#pragma once

#include <atomic>
#include <cstddef>
#include <thread>
#include <vector>

namespace sluice_test {

// Runs body(i) on n threads that all start together (a spin barrier, so that they overlap as
// much as the machine allows), and joins them.
template <class Body>
void run_threads(std::size_t n, Body body) {
  std::atomic<std::size_t> ready{0};
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      ready.fetch_add(1);
      while (ready.load() < n) std::this_thread::yield();
      body(i);
    });
  }
  for (auto& t : threads) t.join();
}

// Keeps the running maximum of the values it is shown.
inline void raise_to(std::atomic<long>& max, long value) {
  long seen = max.load();
  while (seen < value && !max.compare_exchange_weak(seen, value)) {
  }
}

}  // namespace sluice_test
