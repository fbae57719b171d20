// sluice::detail::atomic, mutex and condition_variable for the Relacy model checks: the
// interfaces of std::atomic, std::mutex and std::condition_variable over Relacy's rl::atomic,
// rl::mutex and rl::condition_variable, so that the library's own sources run under Relacy's
// relaxed-memory model (every load may read any value the C++ memory model allows it to).
//
// Each operation passes its caller's source location to Relacy, so a report names the library's
// line. The memory orders map one to one, except at the one call site that a check weakens on
// purpose (weakening below): that is how a check proves it can fail.
#pragma once

// Relacy's parts, without relacy.hpp itself, which redefines new, delete, malloc, free, assert,
// errno, the memory_order names and the pthread and Windows calls as macros, for code written
// against it: the library is not.
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <source_location>

#include <relacy/base.hpp>
#include <relacy/context.hpp>
#include <relacy/context_base_impl.hpp>
#include <relacy/backoff.hpp>
#include <relacy/atomic_fence.hpp>
#include <relacy/atomic.hpp>
#include <relacy/var.hpp>
#include <relacy/thread_local.hpp>
#include <relacy/test_suite.hpp>
#include <relacy/dyn_thread.hpp>
#include <relacy/stdlib/mutex.hpp>
#include <relacy/stdlib/condition_variable.hpp>
#include <relacy/stdlib/semaphore.hpp>
#include <relacy/stdlib/event.hpp>

namespace sluice_relacy {

// The one call site to weaken, if any: operations whose call expression starts on a line of
// `file` (a path suffix) in [first_line, last_line] run one step weaker than the library asks
// (seq_cst as acquire, release or acq_rel; acquire, release and acq_rel as relaxed).
struct weakening {
  bool paused = false;     // a check's set-up, which is not under test, runs at full strength
  const char* file = nullptr;
  unsigned first_line = 0;
  unsigned last_line = 0;
  unsigned long hits = 0;  // how many operations it weakened: a site that never ran proves nothing
};
inline weakening weaken{};

inline bool weakened_here(std::memory_order o, const std::source_location& at) noexcept {
  if (o == std::memory_order_relaxed) return false;  // nothing to weaken
  if (weaken.paused || weaken.file == nullptr || at.line() < weaken.first_line || at.line() > weaken.last_line) return false;
  const std::size_t n = std::strlen(at.file_name()), m = std::strlen(weaken.file);
  if (n < m || std::strcmp(at.file_name() + n - m, weaken.file) != 0) return false;
  ++weaken.hits;
  return true;
}

enum class kind { load, store, rmw };

inline rl::memory_order order(std::memory_order o, kind k, const std::source_location& at) noexcept {
  if (weakened_here(o, at)) {
    switch (o) {
      case std::memory_order_seq_cst:
        return k == kind::load ? rl::mo_acquire : k == kind::store ? rl::mo_release : rl::mo_acq_rel;
      default:
        return rl::mo_relaxed;
    }
  }
  switch (o) {
    case std::memory_order_relaxed: return rl::mo_relaxed;
    case std::memory_order_consume: return rl::mo_consume;
    case std::memory_order_acquire: return rl::mo_acquire;
    case std::memory_order_release: return rl::mo_release;
    case std::memory_order_acq_rel: return rl::mo_acq_rel;
    default: return rl::mo_seq_cst;
  }
}

inline rl::debug_info where(const std::source_location& at) noexcept {
  return rl::debug_info(at.function_name(), at.file_name(), at.line());
}

}  // namespace sluice_relacy

namespace sluice::detail {

template <class T>
class atomic {
  using loc = std::source_location;
  using kind = sluice_relacy::kind;
  static rl::memory_order order(std::memory_order o, kind k, const loc& at) { return sluice_relacy::order(o, k, at); }
  static rl::debug_info where(const loc& at) { return sluice_relacy::where(at); }
  // A successful CAS's order from both of the caller's (C++'s rule: the failure order is a load's).
  static std::memory_order failure_of(std::memory_order o) {
    return o == std::memory_order_acq_rel ? std::memory_order_acquire
           : o == std::memory_order_release ? std::memory_order_relaxed
                                            : o;
  }

 public:
  atomic(const loc& at = loc::current()) noexcept { value_.store(T{}, rl::mo_relaxed, where(at)); }  // NOLINT
  atomic(T v, const loc& at = loc::current()) noexcept { value_.store(v, rl::mo_relaxed, where(at)); }  // NOLINT
  atomic(const atomic&) = delete;
  atomic& operator=(const atomic&) = delete;

  T load(std::memory_order o = std::memory_order_seq_cst, const loc& at = loc::current()) const noexcept {
    return value_.load(order(o, kind::load, at), where(at));
  }
  void store(T v, std::memory_order o = std::memory_order_seq_cst, const loc& at = loc::current()) noexcept {
    value_.store(v, order(o, kind::store, at), where(at));
  }
  T exchange(T v, std::memory_order o = std::memory_order_seq_cst, const loc& at = loc::current()) noexcept {
    return value_.exchange(v, order(o, kind::rmw, at), where(at));
  }
  T fetch_add(T v, std::memory_order o = std::memory_order_seq_cst, const loc& at = loc::current()) noexcept {
    return value_.fetch_add(v, order(o, kind::rmw, at), where(at));
  }
  T fetch_sub(T v, std::memory_order o = std::memory_order_seq_cst, const loc& at = loc::current()) noexcept {
    return value_.fetch_sub(v, order(o, kind::rmw, at), where(at));
  }
  T fetch_or(T v, std::memory_order o = std::memory_order_seq_cst, const loc& at = loc::current()) noexcept {
    return value_.fetch_or(v, order(o, kind::rmw, at), where(at));
  }
  T fetch_and(T v, std::memory_order o = std::memory_order_seq_cst, const loc& at = loc::current()) noexcept {
    return value_.fetch_and(v, order(o, kind::rmw, at), where(at));
  }
  // Relacy's weak CAS may fail spuriously, as the hardware's may.
  bool compare_exchange_weak(T& expected, T desired, std::memory_order s, std::memory_order f,
                             const loc& at = loc::current()) noexcept {
    return value_.compare_exchange_weak(expected, desired, order(s, kind::rmw, at), where(at),
                                        order(f, kind::load, at), where(at));
  }
  bool compare_exchange_weak(T& expected, T desired, std::memory_order o = std::memory_order_seq_cst,
                             const loc& at = loc::current()) noexcept {
    return compare_exchange_weak(expected, desired, o, failure_of(o), at);
  }
  bool compare_exchange_strong(T& expected, T desired, std::memory_order s, std::memory_order f,
                               const loc& at = loc::current()) noexcept {
    return value_.compare_exchange_strong(expected, desired, order(s, kind::rmw, at), where(at),
                                          order(f, kind::load, at), where(at));
  }
  bool compare_exchange_strong(T& expected, T desired, std::memory_order o = std::memory_order_seq_cst,
                               const loc& at = loc::current()) noexcept {
    return compare_exchange_strong(expected, desired, o, failure_of(o), at);
  }

 private:
  mutable rl::atomic<T> value_;
};

class mutex {
 public:
  mutex() = default;
  mutex(const mutex&) = delete;
  mutex& operator=(const mutex&) = delete;
  void lock(const std::source_location& at = std::source_location::current()) { m_.lock(sluice_relacy::where(at)); }
  bool try_lock(const std::source_location& at = std::source_location::current()) {
    return m_.try_lock(sluice_relacy::where(at));
  }
  void unlock(const std::source_location& at = std::source_location::current()) { m_.unlock(sluice_relacy::where(at)); }
  rl::mutex& model() noexcept { return m_; }

 private:
  rl::mutex m_;
};

// Over Relacy's condvar itself, whose wait answers why it woke (std's wrapper folds that into a
// bool whose true means "not notified"). Spurious wake-ups are on, as with std's.
class condition_variable {
 public:
  condition_variable() { cv_.init(true, RL_INFO); }
  ~condition_variable() { cv_.deinit(RL_INFO); }
  condition_variable(const condition_variable&) = delete;
  condition_variable& operator=(const condition_variable&) = delete;

  void wait(std::unique_lock<mutex>& lock, const std::source_location& at = std::source_location::current()) {
    cv_.wait(lock.mutex()->model(), false, sluice_relacy::where(at));
  }
  template <class Predicate>
  void wait(std::unique_lock<mutex>& lock, Predicate ready) {
    while (!ready()) wait(lock);
  }
  // Relacy decides whether a timed wait times out: either outcome is explored. A spurious
  // wake-up is no timeout, as with std's.
  template <class Clock, class Duration>
  std::cv_status wait_until(std::unique_lock<mutex>& lock, const std::chrono::time_point<Clock, Duration>&,
                            const std::source_location& at = std::source_location::current()) {
    return cv_.wait(lock.mutex()->model(), true, sluice_relacy::where(at)) == rl::sema_wakeup_reason_timeout
               ? std::cv_status::timeout
               : std::cv_status::no_timeout;
  }
  void notify_all(const std::source_location& at = std::source_location::current()) noexcept {
    cv_.notify_all(sluice_relacy::where(at));
  }
  void notify_one(const std::source_location& at = std::source_location::current()) noexcept {
    cv_.notify_one(sluice_relacy::where(at));
  }

 private:
  rl::condvar<rl::condvar_tag_std> cv_;
};

// Plain data that passes between threads (a slot's buffer pointer), as an rl::var: Relacy then
// reports a read or write that no release/acquire orders after the last write as a data race.
template <class T>
class plain {
 public:
  plain(T v = T{}) { value_(RL_INFO) = v; }  // NOLINT: as the T it stands for
  plain(const plain&) = delete;
  plain& operator=(const plain&) = delete;
  plain& operator=(T v) {
    value_(RL_INFO) = v;
    return *this;
  }
  operator T() const { return value_(RL_INFO); }  // NOLINT

 private:
  rl::var<T> value_;
};

// A call that lost a CAS tries again at once (the gate's back-off waits on the clock, which
// Relacy's schedules do not follow).
inline constexpr bool contention_backs_off = false;

}  // namespace sluice::detail

namespace sluice_relacy {
inline constexpr unsigned most_threads = 8;
// Every per_thread<T> in use, each made fresh by reset_threads() (a check's before() calls it:
// an execution that Relacy cut short, at a failure, leaves its threads' state behind).
// A fixed table, not a vector: memory allocated during an execution must be freed in it.
inline void (*per_thread_resets[4])() = {};
inline void reset_threads() {
  for (auto reset : per_thread_resets) {
    if (reset != nullptr) reset();
  }
}
}  // namespace sluice_relacy

namespace sluice::detail {
// Relacy runs its threads as fibers of one OS thread, which would share every thread_local: the
// pool's per-thread state comes from here instead, one T per modelled thread (the front through
// seam/sluice/detail/this_thread_front.hpp; the rest in lib/pool/thread_caches.cpp, which this
// macro tells so).
#define SLUICE_PER_THREAD_DECLARED
template <class T>
T& per_thread() noexcept {
  static T states[sluice_relacy::most_threads];
  static const bool registered = [] {
    for (auto& reset : sluice_relacy::per_thread_resets) {
      if (reset == nullptr) {
        reset = [] {
          for (T& s : states) s = T{};
        };
        return true;
      }
    }
    return false;
  }();
  RL_ASSERT(registered);
  return states[rl::thread_index()];
}
}  // namespace sluice::detail
