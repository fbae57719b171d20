// The four ways many threads use a pool, written once over any source of byte blocks, so that the
// tests (many_threads_test.cpp) and the benchmarks (bench/pool_workloads.hpp) run the same code:
//
//   handoff  threads in pairs: one takes a block, writes it and hands it through a ring to its
//            partner, which reads it and gives it back (the shape of mimalloc-bench's
//            xmalloc-test, and of a server whose frames are read on one thread and written on
//            another). One thread alone hands blocks to itself through its ring. The blocks in
//            flight over all pairs are at most `in_flight` (a semaphore, as a server's admission
//            control bounds its frames in flight), so that a pool whose bound holds them can keep
//            them all, however many pairs there are.
//   own      each thread takes four blocks, writes them, and gives them back, over and over.
//   churn    short-lived threads: four batches of `threads` threads, one batch after another,
//            each thread taking and giving back one block at a time.
//   idle     threads - 2 threads take and give back four blocks each and then sleep, alive, while
//            one pair hands blocks over as in handoff; only the pair's part is measured.
//
// A source is a class with
//   using item = ...;                            what get answers (a buffer, or a pointer)
//   item get(std::size_t n);                     at least n writable bytes, or throws
//   void put(item&& it, std::size_t n) noexcept; gives back what get(n) answered
//   static std::byte* bytes(item& it);
// A probe's begin() and end() run on the driving thread just before and just after the measured
// part, when no other thread is inside the source (a pool's statistics are then exact).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace sluice_patterns {

enum class pattern { handoff, own, churn, idle };
inline constexpr pattern all_patterns[] = {pattern::handoff, pattern::own, pattern::churn, pattern::idle};

inline const char* name(pattern p) {
  switch (p) {
    case pattern::handoff: return "handoff";
    case pattern::own: return "own";
    case pattern::churn: return "churn";
    case pattern::idle: return "idle";
  }
  return "?";
}

// A ring of blocks from one thread to another. A full or empty ring waits for the index the other
// side moves: yielding a while, so that a pair on two cores streams through it without a system
// call per block, and then asleep on the ring's condition variable, so that hundreds of pairs on
// a few cores leave the cores to the threads that can run. A side wakes the other only when that
// one is asleep.
template <class T>
class ring {
 public:
  static constexpr std::uint32_t capacity = 32;
  // How many times a full or empty ring yields before it sleeps.
  int spins = 64;

  // Each side reads the other's index only when the one it saw last says full (or empty), as
  // boost::lockfree::spsc_queue does, so that a stream moves the other side's cache line once
  // per ring's worth of blocks, not once per block.
  void push(T&& v) {
    const std::uint32_t t = tail_.load(std::memory_order_relaxed);
    if (t - seen_head_ == capacity) seen_head_ = await(head_, [t](std::uint32_t h) { return t - h < capacity; });
    items_[t % capacity] = std::move(v);
    publish(tail_, t + 1);  // the item, for pop's acquire
  }
  T pop() {
    const std::uint32_t h = head_.load(std::memory_order_relaxed);
    if (h == seen_tail_) seen_tail_ = await(tail_, [h](std::uint32_t t) { return t != h; });
    T v = std::move(items_[h % capacity]);
    publish(head_, h + 1);  // the slot is free, for push's acquire
    return v;
  }

 private:
  // The sleeper counts itself (seq_cst) before it looks at the index (seq_cst); the other side
  // moves the index (seq_cst) before it looks at the count: one of the two sees the other's
  // write, and the mutex keeps the sleeper's last look and its sleep together, so no wake-up is
  // lost.
  // Answers the index it found ready.
  template <class Ready>
  std::uint32_t await(const std::atomic<std::uint32_t>& index, Ready ready) {
    for (int n = 0;; ++n) {
      if (const std::uint32_t i = index.load(std::memory_order_acquire); ready(i)) return i;  // its data
      if (n == spins) break;
      std::this_thread::yield();
    }
    std::unique_lock lock(mutex_);
    asleep_.fetch_add(1, std::memory_order_seq_cst);
    std::uint32_t i = 0;
    while (!ready(i = index.load(std::memory_order_seq_cst))) moved_.wait(lock);
    asleep_.fetch_sub(1, std::memory_order_relaxed);
    return i;
  }
  void publish(std::atomic<std::uint32_t>& index, std::uint32_t value) {
    index.store(value, std::memory_order_seq_cst);
    if (asleep_.load(std::memory_order_seq_cst) > 0) {
      std::lock_guard lock(mutex_);
      moved_.notify_all();
    }
  }

  T items_[capacity]{};
  alignas(64) std::atomic<std::uint32_t> head_{0};
  std::uint32_t seen_tail_ = 0;  // the consumer's: tail_ as it read it last
  alignas(64) std::atomic<std::uint32_t> tail_{0};
  std::uint32_t seen_head_ = 0;  // the producer's: head_ as it read it last
  alignas(64) std::atomic<int> asleep_{0};
  std::mutex mutex_;
  std::condition_variable moved_;
};

// One block: taken, its first and last byte written (as a frame read into it would), read back
// and given back.
template <class Src>
typename Src::item take_block(Src& src, std::size_t size) {
  auto it = src.get(size);
  std::byte* b = Src::bytes(it);
  b[0] = std::byte{1};
  b[size - 1] = std::byte{2};
  return it;
}
template <class Src>
void give_block(Src& src, typename Src::item&& it, std::size_t size) {
  if (Src::bytes(it)[size - 1] != std::byte{2}) std::terminate();  // a block handed to two holders
  src.put(std::move(it), size);
}

// A count that threads raise and others wait on (a latch when it only goes from 0 to 1).
class counter {
 public:
  void add() {
    std::lock_guard lock(mutex_);
    ++count_;
    changed_.notify_all();
  }
  void wait_for(int n) {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return count_ >= n; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  int count_ = 0;
};

// A counting semaphore: acquire() waits for a token, release() gives one back. Like the ring, it
// sleeps on a condition variable, and is woken only when someone sleeps.
class tokens {
 public:
  tokens(std::ptrdiff_t n, int spins) : count_(n), spins_(spins) {}
  void acquire() {
    int spun = 0;
    for (std::ptrdiff_t c = count_.load(std::memory_order_relaxed);;) {
      if (c > 0) {
        if (count_.compare_exchange_weak(c, c - 1, std::memory_order_relaxed)) return;
        continue;
      }
      if (spun++ < spins_) {
        std::this_thread::yield();
        c = count_.load(std::memory_order_relaxed);
        continue;
      }
      std::unique_lock lock(mutex_);
      asleep_.fetch_add(1, std::memory_order_seq_cst);  // as in ring::await
      while ((c = count_.load(std::memory_order_seq_cst)) <= 0) returned_.wait(lock);
      asleep_.fetch_sub(1, std::memory_order_relaxed);
    }
  }
  void release() {
    count_.fetch_add(1, std::memory_order_seq_cst);
    if (asleep_.load(std::memory_order_seq_cst) > 0) {
      std::lock_guard lock(mutex_);
      returned_.notify_one();
    }
  }

 private:
  alignas(64) std::atomic<std::ptrdiff_t> count_;
  const int spins_;  // yields before it sleeps, as a ring's
  alignas(64) std::atomic<int> asleep_{0};
  std::mutex mutex_;
  std::condition_variable returned_;
};

// Runs n threads of body(i) and joins them.
template <class Body>
void run_threads(int n, Body body) {
  std::vector<std::thread> ts;
  ts.reserve(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) ts.emplace_back([&body, i] { body(i); });
  for (auto& t : ts) t.join();
}

// Pairs (threads / 2 of them, or one thread alone) hand `buffers` blocks over in all, at most
// in_flight (>= 1) of them taken and not yet given back at once. A pair holds at most
// capacity + 2 (its ring's, one being written, one being read): where the pairs could hold more
// than in_flight, a semaphore (tokens) admits each block before it is taken.
template <class Src>
void hand_over(Src& src, int threads, std::uint64_t buffers, std::size_t size, std::ptrdiff_t in_flight) {
  using item = typename Src::item;
  if (threads == 1) {  // a delay line of `depth` blocks: the oldest goes back before the next
    const auto depth = static_cast<std::size_t>(std::min<std::ptrdiff_t>(8, in_flight));
    std::vector<item> line(depth);
    for (std::uint64_t n = 0; n < buffers; ++n) {
      item& oldest = line[n % depth];
      if (n >= depth) give_block(src, std::move(oldest), size);
      oldest = take_block(src, size);
    }
    for (std::uint64_t n = buffers > depth ? buffers - depth : 0; n < buffers; ++n) {
      give_block(src, std::move(line[n % depth]), size);
    }
    return;
  }
  const int pairs = threads / 2;
  const std::uint64_t per_pair = buffers / static_cast<std::uint64_t>(pairs);
  // Where threads outnumber the cores twice over, a waiting thread yields to nobody that could
  // serve it sooner than the kernel wakes it: it sleeps at once.
  const int cores = static_cast<int>(std::max(1U, std::thread::hardware_concurrency()));
  const int spins = threads > 2 * cores ? 0 : 1000;
  const bool admit = static_cast<std::ptrdiff_t>(pairs) * (ring<item>::capacity + 2) > in_flight;
  tokens admitted(admit ? in_flight : 0, spins);
  auto rings = std::make_unique<ring<item>[]>(static_cast<std::size_t>(pairs));
  for (int p = 0; p < pairs; ++p) rings[static_cast<std::size_t>(p)].spins = spins;
  run_threads(2 * pairs, [&](int i) {
    ring<item>& r = rings[static_cast<std::size_t>(i / 2)];
    for (std::uint64_t n = 0; n < per_pair; ++n) {
      if (i % 2 == 0) {
        if (admit) admitted.acquire();
        r.push(take_block(src, size));
      } else {
        give_block(src, r.pop(), size);
        if (admit) admitted.release();
      }
    }
  });
}

// What one run measured: the seconds of its measured part, and the blocks taken in it.
struct outcome {
  double seconds = 0;
  std::uint64_t buffers = 0;
};

// Runs pattern p with `threads` threads (handoff and idle pair them up: an odd count loses one)
// taking about `buffers` blocks of `size` bytes in all, at most `in_flight` at once in handoff.
template <class Src, class Probe>
outcome run(pattern p, Src& src, int threads, std::uint64_t buffers, std::size_t size, std::ptrdiff_t in_flight,
            Probe& probe) {
  using clock = std::chrono::steady_clock;
  if (threads < 1 || size < 1 || in_flight < 1) {
    throw std::invalid_argument("sluice_patterns::run: threads, size and in_flight must be positive");
  }
  outcome out;
  clock::time_point start;
  const auto begin = [&] {
    probe.begin();
    start = clock::now();
  };
  const auto end = [&] {
    out.seconds = std::chrono::duration<double>(clock::now() - start).count();
    probe.end();
  };
  const auto per_thread = [&](std::uint64_t share) { return buffers / static_cast<std::uint64_t>(threads) / share; };
  switch (p) {
    case pattern::handoff: {
      const int used = threads == 1 ? 1 : threads / 2 * 2;
      out.buffers = used == 1 ? buffers : buffers / static_cast<std::uint64_t>(used / 2) * static_cast<std::uint64_t>(used / 2);
      begin();
      hand_over(src, used, out.buffers, size, in_flight);
      end();
      break;
    }
    case pattern::own: {
      const std::uint64_t rounds = per_thread(4);
      out.buffers = rounds * 4 * static_cast<std::uint64_t>(threads);
      begin();
      run_threads(threads, [&](int) {
        typename Src::item held[4]{};
        for (std::uint64_t r = 0; r < rounds; ++r) {
          for (auto& b : held) b = take_block(src, size);
          for (auto& b : held) give_block(src, std::move(b), size);
        }
      });
      end();
      break;
    }
    case pattern::churn: {
      constexpr int batches = 4;
      const std::uint64_t each = per_thread(batches);
      out.buffers = each * batches * static_cast<std::uint64_t>(threads);
      begin();
      for (int b = 0; b < batches; ++b) {
        run_threads(threads, [&](int) {
          for (std::uint64_t n = 0; n < each; ++n) give_block(src, take_block(src, size), size);
        });
      }
      end();
      break;
    }
    case pattern::idle: {
      const int sleepers = threads > 2 ? threads - 2 : 0;
      const int workers = threads - sleepers;
      counter asleep, wake;
      std::vector<std::thread> ts;
      ts.reserve(static_cast<std::size_t>(sleepers));
      for (int i = 0; i < sleepers; ++i) {
        ts.emplace_back([&] {
          typename Src::item held[4]{};
          for (auto& b : held) b = take_block(src, size);
          for (auto& b : held) give_block(src, std::move(b), size);
          asleep.add();
          wake.wait_for(1);
        });
      }
      asleep.wait_for(sleepers);
      out.buffers = buffers;
      begin();
      hand_over(src, workers, out.buffers, size, in_flight);
      end();
      wake.add();
      for (auto& t : ts) t.join();
      break;
    }
  }
  return out;
}

}  // namespace sluice_patterns
