// sluice::pool_resource and mutex_pool_resource: pmr containers, blocks crossing threads, every
// alignment and size against a checking upstream, the bound, the resource's death under living
// threads, a zero bound and trim(). Every case runs against each kind of resource.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <list>
#include <map>
#include <memory_resource>
#include <mutex>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "doctest.hpp"
#include "sluice/pool_resource.hpp"
#include "threads.hpp"

using sluice::pool_options;

namespace {

// The kinds under test: each names its resource and the options every case starts from.
struct cached {
  using resource = sluice::pool_resource;
  static pool_options options(pool_options o = {}) { return o; }
};
struct uncached {
  using resource = sluice::pool_resource;
  static pool_options options(pool_options o = {}) {
    o.thread_cache = false;
    return o;
  }
};
struct locked {
  using resource = sluice::mutex_pool_resource;
  static pool_options options(pool_options o = {}) { return o; }
};
#define RESOURCES cached, uncached, locked

// An upstream that records every block it hands out and checks that each comes back exactly
// once, with the size and alignment it was allocated with.
class checking_upstream final : public std::pmr::memory_resource {
 public:
  ~checking_upstream() override { CHECK(live_.empty()); }

  std::size_t allocations() const {
    std::lock_guard lock(mutex_);
    return allocations_;
  }
  std::size_t live() const {
    std::lock_guard lock(mutex_);
    return live_.size();
  }
  std::size_t mismatches() const {
    std::lock_guard lock(mutex_);
    return mismatches_;
  }

 private:
  struct block {
    std::size_t bytes, alignment;
  };
  void* do_allocate(std::size_t bytes, std::size_t alignment) override {
    void* p = std::pmr::new_delete_resource()->allocate(bytes, alignment);
    std::lock_guard lock(mutex_);
    ++allocations_;
    live_.emplace(p, block{bytes, alignment});
    return p;
  }
  void do_deallocate(void* p, std::size_t bytes, std::size_t alignment) override {
    {
      std::lock_guard lock(mutex_);
      const auto it = live_.find(p);
      if (it == live_.end() || it->second.bytes != bytes || it->second.alignment != alignment) {
        ++mismatches_;
        return;  // not ours, or not as it was given: never hand it on
      }
      live_.erase(it);
    }
    std::pmr::new_delete_resource()->deallocate(p, bytes, alignment);
  }
  bool do_is_equal(const std::pmr::memory_resource& other) const noexcept override { return this == &other; }

  mutable std::mutex mutex_;
  std::map<void*, block> live_;
  std::size_t allocations_ = 0;
  std::size_t mismatches_ = 0;
};

// Blocks the pool answered and took back, against what it says it retains: with no call in
// flight, retained == retired - hits, and every pooled allocate is a hit or a miss.
void check_accounting(const sluice::pool_stats& s, std::size_t bound) {
  CHECK(s.retained <= bound);
  CHECK(s.retired >= s.hits);
  CHECK(s.retained == s.retired - s.hits);
}

}  // namespace

TEST_CASE_TEMPLATE("pmr containers grow and shrink on the resource, and reuse its blocks", K, RESOURCES) {
  checking_upstream upstream;
  typename K::resource r{K::options({.bound = 256, .ceiling = 64 << 10}), &upstream};
  for (int round = 0; round < 20; ++round) {
    std::pmr::vector<std::pmr::string> words(&r);
    for (int i = 0; i < 200; ++i) words.emplace_back(std::string(static_cast<std::size_t>(i % 90), 'a' + i % 26));
    std::pmr::list<int> list(&r);
    for (int i = 0; i < 300; ++i) list.push_back(i);
    std::pmr::map<int, std::pmr::string> map(&r);
    for (int i = 0; i < 300; ++i) map.emplace(i, std::pmr::string(40, 'x'));
    std::pmr::vector<std::uint64_t> big(&r);
    for (std::uint64_t i = 0; i < 20000; ++i) big.push_back(i);  // grows past the ceiling
    REQUIRE(words.size() == 200);
    for (int i = 0; i < 200; ++i) {
      REQUIRE(std::string_view(words[static_cast<std::size_t>(i)]) == std::string(static_cast<std::size_t>(i % 90), 'a' + i % 26));
    }
    CHECK(std::accumulate(list.begin(), list.end(), 0) == 300 * 299 / 2);
    REQUIRE(map.size() == 300);
    CHECK(std::string_view(map.at(299)) == std::string(40, 'x'));
    CHECK(big[19999] == 19999);
    // Shrinking gives blocks back while the containers live.
    words.erase(words.begin() + 10, words.end());
    words.shrink_to_fit();
    while (list.size() > 5) list.pop_back();
    for (int i = 0; i < 290; ++i) map.erase(i);
  }
  const auto s = r.stats();
  CHECK(s.hits > 0);                         // rounds after the first are served from the pool
  CHECK(upstream.allocations() > 0);         // only the large vector's growth went upstream
  CHECK(upstream.live() == 0);
  CHECK(upstream.mismatches() == 0);
  check_accounting(s, 256);
}

TEST_CASE_TEMPLATE("a block goes back into the class whose size it has, never a larger one's", K, RESOURCES) {
  // pool::take(100) may answer a 1024-byte buffer; the resource must not, or deallocate(p, 100)
  // would file that block as a 112-byte one.
  typename K::resource r{K::options()};
  void* large = r.allocate(1000, 8);  // the 1024 class
  r.deallocate(large, 1000, 8);
  REQUIRE(r.stats().retained == 1);
  void* small = r.allocate(100, 8);  // the 112 class: nothing retained there, so fresh memory
  CHECK(small != large);
  CHECK(r.stats().misses == 2);
  // Per class: each fresh block and its miss in its own class, the kept one in 1024's.
  for (const sluice::pool_class_stats& c : r.class_stats()) {
    INFO("class " << c.capacity);
    const bool used = c.capacity == 112 || c.capacity == 1024;
    CHECK(c.misses == (used ? 1 : 0));
    CHECK(c.fresh == c.misses);
    CHECK(c.retained == (c.capacity == 1024 ? 1 : 0));
  }
  r.deallocate(small, 100, 8);
  // Any size of the same class answers the same block; other classes do not.
  void* again = r.allocate(112, 16);
  CHECK(again == small);
  void* other = r.allocate(1024, 1);
  CHECK(other == large);
  r.deallocate(again, 97, 4);   // 97 is in the 112 class too: the same capacity
  r.deallocate(other, 1024, 1);
  CHECK(r.allocate(97, 1) == small);
  r.deallocate(small, 97, 1);
  const auto s = r.stats();
  CHECK(s.retained == 2);
  CHECK(s.retained_bytes == 112 + 1024);
  check_accounting(s, 1024);
}

TEST_CASE_TEMPLATE("blocks allocated on one thread and deallocated on another come back from the pool", K, RESOURCES) {
  constexpr std::size_t count = 200;  // past a cache's limit, so batches cross with the caches on
  typename K::resource r{K::options({.bound = 1024})};
  std::vector<void*> blocks;
  for (std::size_t i = 0; i < count; ++i) {
    blocks.push_back(r.allocate(1500, 8));
    std::memset(blocks.back(), static_cast<int>(i), 1500);
  }
  std::thread other([&] {
    for (std::size_t i = 0; i < count; ++i) {
      const auto* bytes = static_cast<const unsigned char*>(blocks[i]);
      CHECK(bytes[0] == static_cast<unsigned char>(i));
      CHECK(bytes[1499] == static_cast<unsigned char>(i));
      r.deallocate(blocks[i], 1500, 8);
    }
  });
  other.join();  // its exit gives what its cache held back to the shared stacks
  const std::set<void*> first(blocks.begin(), blocks.end());
  std::size_t reused = 0;
  std::vector<void*> again;
  for (std::size_t i = 0; i < count; ++i) {
    again.push_back(r.allocate(1500, 8));
    reused += first.count(again.back());
  }
  CHECK(reused == count);
  CHECK(r.stats().hits == count);
  for (void* p : again) r.deallocate(p, 1500, 8);
  check_accounting(r.stats(), 1024);
}

TEST_CASE_TEMPLATE("every alignment and size: pooled or upstream, each block back where it came from", K, RESOURCES) {
  constexpr std::size_t ceiling = 64 << 10;
  checking_upstream upstream;
  typename K::resource r{K::options({.bound = 4096, .ceiling = ceiling}), &upstream};
  std::vector<std::size_t> sizes = {0, 1, 2, 3, 15, 16, 17, 20, 21, 100, 1000, 1024, 1025, 4096,
                                    ceiling - 1, ceiling, ceiling + 1, 2 * ceiling, 1 << 20};
  for (std::size_t b = 5; (std::size_t{1} << b) < ceiling; ++b) {  // around every class edge
    for (std::size_t j = 4; j <= 8; ++j) {
      const std::size_t edge = (j << b) / 4;
      sizes.insert(sizes.end(), {edge - 1, edge, edge + 1});
    }
  }
  struct block {
    void* p;
    std::size_t n, a;
  };
  std::vector<block> blocks;
  std::size_t expected_upstream = 0;
  for (int round = 0; round < 2; ++round) {  // the second round is served from the pool
    for (std::size_t a = 1; a <= 4096; a *= 2) {
      for (const std::size_t n : sizes) {
        void* p = r.allocate(n, a);
        REQUIRE(p != nullptr);
        CHECK(reinterpret_cast<std::uintptr_t>(p) % a == 0);
        std::memset(p, 0xA5, n);  // every byte is writable (AddressSanitizer checks the rest)
        blocks.push_back({p, n, a});
        if (a > alignof(std::max_align_t) || n > ceiling) ++expected_upstream;
      }
    }
    // Given back in another order than taken.
    std::shuffle(blocks.begin(), blocks.end(), std::mt19937(42 + round));
    for (const block& b : blocks) r.deallocate(b.p, b.n, b.a);
    blocks.clear();
    CHECK(upstream.live() == 0);
  }
  CHECK(upstream.allocations() == expected_upstream);
  CHECK(upstream.mismatches() == 0);
  const auto s = r.stats();
  CHECK(s.hits > 0);
  check_accounting(s, 4096);
}

TEST_CASE_TEMPLATE("many threads never pass the bound, and lose no block", K, RESOURCES) {
  constexpr std::size_t bound = 100, threads = 8;
  checking_upstream upstream;
  typename K::resource r{K::options({.bound = bound, .ceiling = 16 << 10}), &upstream};
  std::atomic<std::size_t> allocations{0};
  std::atomic<bool> done{false};
  std::atomic<std::size_t> worst{0};
  std::thread watcher([&] {
    while (!done.load()) {
      const std::size_t now = r.stats().retained;
      std::size_t seen = worst.load();
      while (seen < now && !worst.compare_exchange_weak(seen, now)) {
      }
    }
  });
  sluice_test::run_threads(threads, [&](std::size_t t) {
    std::mt19937 random(static_cast<unsigned>(t));
    std::vector<std::pair<void*, std::size_t>> held;
    for (int i = 0; i < 4000; ++i) {
      if (held.size() < 40 && (held.empty() || random() % 2 == 0)) {
        const std::size_t n = random() % (20 << 10);  // some past the ceiling
        void* p = r.allocate(n, 8);
        std::memset(p, static_cast<int>(t), std::min<std::size_t>(n, 64));
        held.emplace_back(p, n);
        allocations.fetch_add(n <= (16 << 10) ? 1 : 0);
      } else {
        const std::size_t at = random() % held.size();
        r.deallocate(held[at].first, held[at].second, 8);
        held[at] = held.back();
        held.pop_back();
      }
    }
    for (const auto& [p, n] : held) r.deallocate(p, n, 8);
  });
  done.store(true);
  watcher.join();
  const auto s = r.stats();
  CHECK(worst.load() <= bound);
  CHECK(s.hits + s.misses == allocations.load());
  CHECK(s.retired + s.dropped == allocations.load());  // each pooled block given back once
  CHECK(upstream.live() == 0);
  CHECK(upstream.mismatches() == 0);
  check_accounting(s, bound);
}

TEST_CASE_TEMPLATE("a resource destroyed while threads that used it live on; they use another and exit", K, RESOURCES) {
  // Each thread's cache outlives the first resource, and the second is built at its address.
  for (int round = 0; round < 20; ++round) {
    std::optional<typename K::resource> r;
    r.emplace(K::options());
    std::atomic<int> used{0};
    std::atomic<bool> first_gone{false};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&] {
        {
          std::pmr::vector<std::pmr::string> v(&*r);
          for (int i = 0; i < 50; ++i) v.emplace_back(100, 'x');
        }  // its blocks are in this thread's cache now
        used.fetch_add(1);
        used.notify_all();
        first_gone.wait(false);
        std::pmr::vector<std::pmr::string> v(&*r);  // the second resource, at the same address
        for (int i = 0; i < 50; ++i) v.emplace_back(100, 'y');
        CHECK(std::string_view(v[49]) == std::string(100, 'y'));
      });
    }
    for (int seen = used.load(); seen < 4; seen = used.load()) used.wait(seen);
    r.reset();
    r.emplace(K::options());
    first_gone.store(true);
    first_gone.notify_all();
    for (auto& t : threads) t.join();
    check_accounting(r->stats(), 1024);
  }
}

TEST_CASE_TEMPLATE("a zero bound keeps nothing and serves every request", K, RESOURCES) {
  typename K::resource r{K::options({.bound = 0})};
  std::pmr::vector<std::pmr::string> v(&r);
  for (int i = 0; i < 100; ++i) v.emplace_back(200, 'z');
  v.clear();
  v.shrink_to_fit();
  const auto s = r.stats();
  CHECK(s.retained == 0);
  CHECK(s.retired == 0);
  CHECK(s.hits == 0);
  CHECK(s.dropped > 100);
}

TEST_CASE_TEMPLATE("trim frees what the resource retains, never a block still allocated", K, RESOURCES) {
  typename K::resource r{K::options()};
  std::vector<void*> kept, given;
  for (int i = 0; i < 10; ++i) kept.push_back(r.allocate(256, 8));
  for (int i = 0; i < 10; ++i) given.push_back(r.allocate(256, 8));
  for (void* p : kept) std::memset(p, 0x5A, 256);
  for (void* p : given) r.deallocate(p, 256, 8);
  CHECK(r.stats().retained == 10);
  r.trim();
  CHECK(r.stats().retained == 0);
  CHECK(r.stats().retained_bytes == 0);
  for (void* p : kept) {  // still ours: AddressSanitizer would see a read of freed memory
    CHECK(static_cast<unsigned char*>(p)[255] == 0x5A);
    r.deallocate(p, 256, 8);
  }
  CHECK(r.stats().retained == 10);
}

TEST_CASE_TEMPLATE("trim(share) frees part of what the resource retains, the largest blocks first", K, RESOURCES) {
  typename K::resource r{K::options()};
  std::vector<std::pair<void*, std::size_t>> given;
  for (int i = 0; i < 100; ++i) given.emplace_back(r.allocate(4096, 8), 4096);
  for (int i = 0; i < 100; ++i) given.emplace_back(r.allocate(64, 8), 64);
  void* kept = r.allocate(4096, 8);
  std::memset(kept, 0x5A, 4096);
  for (auto [p, n] : given) r.deallocate(p, n, 8);
  const sluice::pool_stats before = r.stats();
  REQUIRE(before.retained_bytes == 100 * 4096 + 100 * 64);
  // A quarter of the bytes at least: 4 KiB blocks only (the largest first), and with thread caches
  // still enough of them outside this thread's cache (which holds 64 of a class at most).
  r.trim(0.25);
  const sluice::pool_stats after = r.stats();
  CHECK(before.retained_bytes - after.retained_bytes >= before.retained_bytes / 4);
  CHECK((before.retained_bytes - after.retained_bytes) % 4096 == 0);
  CHECK(static_cast<unsigned char*>(kept)[4095] == 0x5A);  // an allocated block is never freed
  r.deallocate(kept, 4096, 8);
  r.trim(1.0);
  CHECK(r.stats().retained == 0);
}

TEST_CASE_TEMPLATE("decay frees the blocks the resource retained unused, never a block still allocated", K, RESOURCES) {
  using namespace std::chrono_literals;
  sluice::pool_options o = K::options();
  o.decay = 1h;
  typename K::resource r{o};
  std::vector<void*> given;
  for (int i = 0; i < 50; ++i) given.push_back(r.allocate(256, 8));
  void* kept = r.allocate(256, 8);
  std::memset(kept, 0x5A, 256);
  for (void* p : given) r.deallocate(p, 256, 8);
  const auto t = std::chrono::steady_clock::now();
  CHECK(r.decay(t + 31min));
  CHECK(r.stats().retained == 50);
  CHECK(r.decay(t + 61min));
  CHECK(r.stats().retained == 0);
  std::uint64_t decayed = 0;
  for (const auto& row : r.class_stats()) decayed += row.decayed;
  CHECK(decayed == 50);
  CHECK(static_cast<unsigned char*>(kept)[255] == 0x5A);  // an allocated block is never freed
  r.deallocate(kept, 256, 8);
}

TEST_CASE_TEMPLATE("equality is identity, and upstream is the one given", K, RESOURCES) {
  typename K::resource a{K::options()}, b{K::options()};
  CHECK(a == a);
  CHECK(a != b);
  CHECK(a.upstream_resource() == std::pmr::get_default_resource());
  typename K::resource c{K::options(), std::pmr::null_memory_resource()};
  CHECK(c.upstream_resource() == std::pmr::null_memory_resource());
  CHECK_THROWS_AS((void)c.allocate(64, 64), std::bad_alloc);  // stricter alignment: upstream's answer
  void* p = c.allocate(64, 8);                                // pooled: never upstream
  c.deallocate(p, 64, 8);
}

TEST_CASE_TEMPLATE("a block that cannot be had is std::bad_alloc, and nothing is lost", K, RESOURCES) {
  typename K::resource r{K::options({.ceiling = ~std::size_t{0}})};  // every size pooled
  CHECK_THROWS_AS((void)r.allocate(~std::size_t{0} - 4096, 8), std::bad_alloc);
  const auto s = r.stats();
  CHECK(s.retained == 0);
  void* p = r.allocate(10, 1);
  r.deallocate(p, 10, 1);
  CHECK(r.stats().retained == 1);
}
