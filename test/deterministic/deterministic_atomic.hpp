// sluice::detail::atomic and sluice::detail::mutex for the deterministic tests: std::atomic's and
// std::mutex's interfaces, with a switch point of the deterministic scheduler before every
// operation, and one inside a mutex just taken. A scheduled thread that finds the mutex held
// yields until it is free, so a holder that the policy does not run keeps it waiting, exactly as
// a preempted holder would.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

#include "scheduler.hpp"

namespace sluice::detail {

template <class T>
class atomic {
  using op = sluice_test::det::op;
  static void yield(op o) { sluice_test::det::scheduler::yield(o); }

 public:
  constexpr atomic() noexcept = default;
  constexpr atomic(T value) noexcept : value_(value) {}  // NOLINT: as std::atomic
  atomic(const atomic&) = delete;
  atomic& operator=(const atomic&) = delete;

  T load(std::memory_order o = std::memory_order_seq_cst) const noexcept {
    yield(op::load);
    return value_.load(o);
  }
  void store(T v, std::memory_order o = std::memory_order_seq_cst) noexcept {
    yield(op::store);
    value_.store(v, o);
  }
  T exchange(T v, std::memory_order o = std::memory_order_seq_cst) noexcept {
    yield(op::rmw);
    return value_.exchange(v, o);
  }
  T fetch_add(T v, std::memory_order o = std::memory_order_seq_cst) noexcept {
    yield(op::rmw);
    return value_.fetch_add(v, o);
  }
  T fetch_sub(T v, std::memory_order o = std::memory_order_seq_cst) noexcept {
    yield(op::rmw);
    return value_.fetch_sub(v, o);
  }
  T fetch_or(T v, std::memory_order o = std::memory_order_seq_cst) noexcept {
    yield(op::rmw);
    return value_.fetch_or(v, o);
  }
  T fetch_and(T v, std::memory_order o = std::memory_order_seq_cst) noexcept {
    yield(op::rmw);
    return value_.fetch_and(v, o);
  }
  // The weak CAS never fails spuriously here, so a schedule replays exactly.
  bool compare_exchange_weak(T& expected, T desired, std::memory_order s, std::memory_order f) noexcept {
    yield(op::cas);
    return value_.compare_exchange_strong(expected, desired, s, f);
  }
  bool compare_exchange_weak(T& expected, T desired, std::memory_order o = std::memory_order_seq_cst) noexcept {
    yield(op::cas);
    return value_.compare_exchange_strong(expected, desired, o);
  }
  bool compare_exchange_strong(T& expected, T desired, std::memory_order s, std::memory_order f) noexcept {
    yield(op::cas);
    return value_.compare_exchange_strong(expected, desired, s, f);
  }
  bool compare_exchange_strong(T& expected, T desired, std::memory_order o = std::memory_order_seq_cst) noexcept {
    yield(op::cas);
    return value_.compare_exchange_strong(expected, desired, o);
  }

 private:
  std::atomic<T> value_{};
};

class mutex {
  using op = sluice_test::det::op;

 public:
  mutex() = default;
  mutex(const mutex&) = delete;
  mutex& operator=(const mutex&) = delete;

  // A switch point before each attempt, and one just after the mutex is taken, so that a policy
  // can stop its holder inside the critical section (a section with no atomic in it has no
  // other switch point) and see whether anyone else needs it.
  void lock() noexcept {
    for (;;) {
      sluice_test::det::scheduler::yield(op::lock);
      if (!held_.exchange(true, std::memory_order_acquire)) break;
      std::this_thread::yield();  // for threads the scheduler does not run
    }
    sluice_test::det::scheduler::yield(op::lock);
  }
  bool try_lock() noexcept {
    sluice_test::det::scheduler::yield(op::lock);
    if (held_.exchange(true, std::memory_order_acquire)) return false;
    sluice_test::det::scheduler::yield(op::lock);
    return true;
  }
  // The switch point comes after the release: a holder may be preempted right after it lets go,
  // before whatever it does next (as ~pool and a thread's exit race right there).
  void unlock() noexcept {
    held_.store(false, std::memory_order_release);
    sluice_test::det::scheduler::yield(op::unlock);
  }

 private:
  std::atomic<bool> held_{false};
};

// A thread that waits is blocked in the scheduler until a notify (block_until); a timed wait
// times out only when no other thread can run (the scheduler's time passes only then), so
// schedules stay deterministic. The deadline itself is not read.
class condition_variable {
  using op = sluice_test::det::op;
  using scheduler = sluice_test::det::scheduler;

 public:
  condition_variable() = default;
  condition_variable(const condition_variable&) = delete;
  condition_variable& operator=(const condition_variable&) = delete;

  void wait(std::unique_lock<mutex>& lock) { sleep(lock, false); }
  template <class Predicate>
  void wait(std::unique_lock<mutex>& lock, Predicate ready) {
    while (!ready()) wait(lock);
  }
  template <class Clock, class Duration>
  std::cv_status wait_until(std::unique_lock<mutex>& lock, const std::chrono::time_point<Clock, Duration>&) {
    return sleep(lock, true) ? std::cv_status::no_timeout : std::cv_status::timeout;
  }
  void notify_all() noexcept {
    scheduler::yield(op::notify);
    epoch_.fetch_add(1);
  }
  void notify_one() noexcept { notify_all(); }  // a spurious wake-up for the others: allowed

 private:
  // False when it timed out. The epoch is read before the mutex is let go, so a notify that
  // comes after that is never missed, as with a real condition variable.
  bool sleep(std::unique_lock<mutex>& lock, bool timed) {
    const std::uint64_t seen = epoch_.load();
    lock.unlock();
    const bool woken = scheduler::block_until([this, seen] { return epoch_.load() != seen; }, timed);
    lock.lock();
    return woken;
  }

  std::atomic<std::uint64_t> epoch_{0};  // notifications so far
};

}  // namespace sluice::detail
