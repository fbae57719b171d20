// Deliberately broken gates and pools: the checker is trusted only if it rejects what they do.
// The concurrency bugs yield between their two steps, which on a machine with fewer cores than
// threads hands the processor to another worker right inside the window.
#pragma once

#include <chrono>
#include <algorithm>
#include <bit>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "sluice/buffer.hpp"
#include "sluice/gate.hpp"
#include "sluice/pool.hpp"
#include "pool_model.hpp"

namespace lincheck::broken {

// adjust as a read, then a set: two adjusts that read the same cap make one step, not two.
class lossy_adjust_gate : public sluice::gate {
 public:
  using sluice::gate::gate;
  void adjust(sluice::pressure p, std::int64_t max_cap) noexcept {
    const std::int64_t c = cap();
    std::this_thread::yield();
    set_cap(p == sluice::pressure::ok ? std::min(c + 1, max_cap) : c - 1);
  }
};

// try_admit as a check, then an increment: two admissions can pass one free place.
class racy_admit_gate : public sluice::gate {
 public:
  using sluice::gate::gate;
  using sluice::gate::try_admit;  // the weighted form stays sound: the unit one is broken
  bool try_admit() noexcept {
    if (!has_capacity()) return false;
    std::this_thread::yield();
    note_submitted();
    return true;
  }
};

// A weighted try_admit that asks only whether one unit fits, then counts all n: the cap is
// passed by a weight that does not fit, even on one thread.
class weight_blind_gate : public sluice::gate {
 public:
  using sluice::gate::gate;
  using sluice::gate::try_admit;
  bool try_admit(std::int64_t n) noexcept {
    if (!try_admit()) return false;
    note_submitted(n - 1);
    return true;
  }
};

// A waiting admission that, once woken, counts itself in without checking again: a wake-up
// for one free place lets every waiter through. Like the others, it yields between its two steps
// (seeing room, counting itself in): without that, the window is a few instructions, and a second
// waiter (or a try_admit) had to land in it; on a loaded two-core machine, where the workers ran
// one after another, 2,000 histories then went by uncaught.
class unchecked_wake_gate : public sluice::gate {
 public:
  using sluice::gate::gate;
  using sluice::gate::try_admit_for;  // the weighted form stays sound: the unit one is broken
  template <class Rep, class Period>
  bool try_admit_for(const std::chrono::duration<Rep, Period>& timeout) {
    if (try_admit()) return true;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!has_capacity()) {
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::yield();
    }
    std::this_thread::yield();
    note_submitted();
    return true;
  }
};

enum class fault {
  none,           // a correct pool: the exact model must accept it
  largest_first,  // take answers the largest buffer that serves
  short_answer,   // take answers a buffer of at least half the request
  over_bound,     // retire keeps one buffer more than the bound
  racy_bound,     // retire checks the bound and files the buffer in two separate critical sections
  // lib/pool.cpp's publish at 8c28088: a retire that began before a trim and files its buffer
  // after it frees every buffer of that capacity, those retired after the trim returned included.
  late_trim,
  trim_as_dropped,  // trim counts what it frees as dropped: the buffers are gone, the statistics wrong
  trim_misses_odd,  // trim leaves buffers whose capacity is not a power of two (as if it forgot a list)
  inexact,          // an exact take (pool_resource's) answers as take does: a larger class too
};

// A pool over one mutex and a list, with the fault asked for; pool's interface as far as the
// tests use it.
class toy_pool {
 public:
  toy_pool(const sluice::pool_options& o, fault f) : bound_(o.bound), ceiling_(o.ceiling), fault_(f) {}

  sluice::buffer take(std::size_t n) {
    std::lock_guard lock(mutex_);
    sluice::buffer b = take_locked(n);
    ++(b ? counts_.hits : counts_.misses);
    return b;
  }

  // pool_resource's take (drivers.hpp's take_exact): only n's own class size serves.
  sluice::buffer take_exact(std::size_t n) {
    if (fault_ == fault::inexact) return take(n);
    std::lock_guard lock(mutex_);
    sluice::buffer b;
    if (n <= ceiling_) {
      const std::size_t own = class_size(n, ceiling_);
      const auto it = std::find_if(held_.begin(), held_.end(), [&](const auto& h) { return h.capacity() == own; });
      if (it != held_.end()) {
        b = std::move(*it);
        held_.erase(it);
      }
    }
    ++(b ? counts_.hits : counts_.misses);
    return b;
  }

  void retire(sluice::buffer&& b) {
    if (!b) return;
    std::uint64_t began = 0;
    if (fault_ == fault::late_trim) {
      {
        std::lock_guard lock(mutex_);
        began = generation_;
      }
      std::this_thread::yield();
    }
    if (fault_ == fault::racy_bound) {
      {
        std::lock_guard lock(mutex_);
        if (b.capacity() > ceiling_ || held_.size() >= bound_) {
          ++counts_.dropped;
          return;  // freed as b goes out of scope at the caller
        }
      }
      std::this_thread::yield();
      std::lock_guard lock(mutex_);
      held_.push_back(std::move(b));
      ++counts_.retired;
      return;
    }
    std::lock_guard lock(mutex_);
    if (b.capacity() > ceiling_ || held_.size() >= bound_ + (fault_ == fault::over_bound ? 1 : 0)) {
      ++counts_.dropped;
      return;
    }
    const std::size_t capacity = b.capacity();
    held_.push_back(std::move(b));
    ++counts_.retired;
    if (fault_ == fault::late_trim && generation_ != began) {
      std::erase_if(held_, [&](const sluice::buffer& h) { return h.capacity() == capacity; });
    }
  }

  void trim() {
    std::lock_guard lock(mutex_);
    ++generation_;
    if (fault_ == fault::trim_as_dropped) counts_.dropped += held_.size();
    if (fault_ == fault::trim_misses_odd) {
      std::erase_if(held_, [](const sluice::buffer& h) { return std::has_single_bit(h.capacity()); });
    } else {
      held_.clear();
    }
  }

  std::size_t retained() const {
    std::lock_guard lock(mutex_);
    return held_.size();
  }

  sluice::pool_stats stats() const {
    std::lock_guard lock(mutex_);
    sluice::pool_stats s = counts_;
    s.retained = held_.size();
    for (const sluice::buffer& h : held_) s.retained_bytes += h.capacity();
    return s;
  }

 private:
  sluice::buffer take_locked(std::size_t n) {
    if (n > ceiling_) return {};
    const std::size_t need = fault_ == fault::short_answer ? (n + 1) / 2 : n;
    auto best = held_.end();
    for (auto it = held_.begin(); it != held_.end(); ++it) {
      if (it->capacity() < need) continue;
      const bool better = best == held_.end() || (fault_ == fault::largest_first
                                                      ? it->capacity() > best->capacity()
                                                      : it->capacity() < best->capacity());
      if (better) best = it;
    }
    if (best == held_.end()) return {};
    sluice::buffer b = std::move(*best);
    held_.erase(best);
    return b;
  }

  const std::size_t bound_, ceiling_;
  const fault fault_;
  mutable std::mutex mutex_;
  std::vector<sluice::buffer> held_;
  std::uint64_t generation_ = 0;  // trims so far
  sluice::pool_stats counts_;     // hits, misses, retired, dropped
};

}  // namespace lincheck::broken
