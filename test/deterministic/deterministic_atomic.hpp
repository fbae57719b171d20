// sluice::detail::atomic for the deterministic tests: std::atomic's interface, with a switch
// point of the deterministic scheduler before every operation.
#pragma once

#include <atomic>

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

}  // namespace sluice::detail
