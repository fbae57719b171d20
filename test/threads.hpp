// Helpers shared by the concurrent tests.
#pragma once

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <fstream>
#include <string>
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

// This thread's kernel id, for asleep().
inline long this_tid() { return static_cast<long>(syscall(SYS_gettid)); }

// Whether the kernel reports thread `tid` of this process asleep ('S'): blocked in a futex, a
// read or a sleep. A test that needs another thread to be waiting inside a call (not merely
// about to enter it) spins on this.
inline bool asleep(long tid) {
  std::ifstream stat("/proc/self/task/" + std::to_string(tid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const auto end = line.rfind(')');  // the state follows the command's name
  return end != std::string::npos && end + 2 < line.size() && line[end + 2] == 'S';
}

// Keeps the running maximum of the values it is shown.
inline void raise_to(std::atomic<long>& max, long value) {
  long seen = max.load();
  while (seen < value && !max.compare_exchange_weak(seen, value)) {
  }
}

}  // namespace sluice_test

#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>

namespace sluice_test {

// A bounded blocking queue: the hand-off between the threads of a frame chain.
template <class T>
class channel {
 public:
  explicit channel(std::size_t depth) : depth_(depth) {}

  void push(T value) {
    std::unique_lock lock(mutex_);
    room_.wait(lock, [&] { return items_.size() < depth_; });
    items_.push_back(std::move(value));
    ready_.notify_one();
  }

  T pop() {
    std::unique_lock lock(mutex_);
    ready_.wait(lock, [&] { return !items_.empty(); });
    T value = std::move(items_.front());
    items_.pop_front();
    room_.notify_one();
    return value;
  }

 private:
  std::size_t depth_;
  std::mutex mutex_;
  std::condition_variable room_, ready_;
  std::deque<T> items_;
};

}  // namespace sluice_test
