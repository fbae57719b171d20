// Four threads push and pop on boost::lockfree::stack, as a pool on it would: under
// ThreadSanitizer this draws data-race reports from Boost's own headers (the stack's node links
// and free list are plain data). Built and run by `bash scripts/reproduce.sh boost-stack`.
#include <boost/lockfree/stack.hpp>

#include <thread>
#include <vector>

int main() {
  boost::lockfree::stack<void*, boost::lockfree::fixed_sized<true>> stack(1024);
  static char items[4][64];
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&stack, t] {
      for (int i = 0; i < 100000; ++i) {
        stack.bounded_push(items[t]);
        void* got = nullptr;
        stack.pop(got);
      }
    });
  }
  for (auto& th : threads) th.join();
}
