// The threads' tallies of the gates' try_admits (sluice/detail/gate_word.hpp, docs/gate.md,
// STATISTICS): a try_admit counts its outcome in its own thread's array, at its gate's index,
// with a relaxed load and store that no other thread races (a gate's destructor zeroes its
// column only once no call on the gate is in progress); stats() sums the gate's column over every
// thread's array, and over the counts of threads that have exited.
//
// Everything here runs rarely, under the registry's mutex: a gate's construction and destruction
// (an index taken, given back), a thread's first tally past its array's end (the array grows),
// stats(), a thread's exit and a fork. The counters are std::atomic and the mutex std::mutex, not
// the seam's types (sluice/detail/atomic.hpp): no ordering of the gate depends on them, and the
// model checkers' schedules need not step through them.
#include "tallies.hpp"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <new>
#include <vector>

#include "pool/fork.hpp"
#include "sluice/detail/atomic.hpp"  // in Relacy's build, the seam that says so (tally_take)

namespace sluice::detail {

constinit thread_local tally_view tls_tally __attribute__((tls_model("initial-exec"))){};

namespace {

// One thread's array, on the registry's list; its counters are written by its thread alone (and
// zeroed by a gate's destructor), read by stats().
struct thread_tallies {
  std::atomic<std::uint64_t>* counts = nullptr;  // [counters]: tally_kinds per gate index
  std::uint32_t counters = 0;
  thread_tallies* prev = nullptr;
  thread_tallies* next = nullptr;
};

// This thread's node (null until its first growth), and whether its exit has given it up: a tally
// from a later destructor is counted on the gate itself. Initial-exec, trivial: the fork handler
// and the slow path read them without constructing anything.
constinit thread_local thread_tallies* tls_node __attribute__((tls_model("initial-exec"))) = nullptr;
constinit thread_local bool tls_gone __attribute__((tls_model("initial-exec"))) = false;

void reap(void*) noexcept;

class registry final : public fork_aware {
 public:
  registry() {
    has_exit_key = pthread_key_create(&exit_key, &reap) == 0;
    join();
  }

  // A thread's array is given up at its exit by a pthread key's destructor (reap), not a
  // thread_local's: glibc runs key destructors after every thread_local destructor (which may still
  // count), and runs one set by another key's destructor in its next round, where a thread_local
  // armed that late would never be destroyed. Without the key, every count goes on its gate.
  pthread_key_t exit_key{};
  bool has_exit_key = false;
  std::mutex mutex;
  thread_tallies* threads = nullptr;  // every thread that has an array
  // [index * tally_kinds + k]: the counts of the threads that have exited (and, in a forked child,
  // of the parent's other threads), for every index issued.
  std::vector<std::uint64_t> gone;
  std::vector<std::uint32_t> free;  // indices given back; its capacity covers every index issued
  std::uint32_t issued = 0;         // indices [0, issued) have been issued

  // The tallies of `t` join those of the threads gone, and t leaves the list and is freed.
  void retire(thread_tallies* t) noexcept {
    const std::uint32_t reach = std::min<std::uint32_t>(t->counters, issued * tally_kinds);
    for (std::uint32_t i = 0; i < reach; ++i) gone[i] += t->counts[i].load(std::memory_order_relaxed);
    (t->prev != nullptr ? t->prev->next : threads) = t->next;
    if (t->next != nullptr) t->next->prev = t->prev;
    delete[] t->counts;
    delete t;
  }

  void lock_for_fork() noexcept override { mutex.lock(); }
  void unlock_in_parent() noexcept override { mutex.unlock(); }
  // The child has the forking thread alone: the other threads' arrays are counts of threads gone.
  void unlock_in_child() noexcept override {
    for (thread_tallies* t = threads; t != nullptr;) {
      thread_tallies* const next = t->next;
      if (t != tls_node) retire(t);
      t = next;
    }
    mutex.unlock();
  }
};

// In static storage, never destroyed (a thread may count, or exit, while the process exits), and
// made through pthread_once rather than as a function-local static: a fork while another thread
// makes it would leave the child a static's guard "in progress" for good (lib/parking.cpp).
alignas(registry) unsigned char registry_storage[sizeof(registry)];
registry* the_registry = nullptr;  // written once, inside registry_once
pthread_once_t registry_once = PTHREAD_ONCE_INIT;
void make_registry() noexcept { the_registry = new (registry_storage) registry; }

registry& registry_of_tallies() noexcept {
  pthread_once(&registry_once, &make_registry);  // orders the read of the_registry after its write
  return *the_registry;
}

// The exit key's destructor: this thread's array joins the counts of the threads gone.
void reap(void*) noexcept {
  tls_gone = true;
  if (tls_node == nullptr) return;
  registry& r = registry_of_tallies();
  std::lock_guard lock(r.mutex);
  r.retire(tls_node);
  tls_node = nullptr;
  tls_tally = {};
}

}  // namespace

std::uint32_t tally_take() noexcept {
#ifdef SLUICE_PER_THREAD_DECLARED
  // Relacy's build (relacy_atomic.hpp): its threads are fibers of one thread, which would share
  // one array, and what an execution allocates must be freed in it. Every gate counts on itself.
  return no_tally;
#endif
  registry& r = registry_of_tallies();
  std::lock_guard lock(r.mutex);
  if (!r.free.empty()) {
    const std::uint32_t index = r.free.back();
    r.free.pop_back();
    return index * tally_kinds;
  }
  if (r.issued >= no_tally / tally_kinds) return no_tally;
  try {
    r.gone.resize(std::size_t{r.issued + 1} * tally_kinds, 0);
    r.free.reserve(r.issued + 1);  // so that giving it back never allocates
  } catch (...) {
    return no_tally;
  }
  return r.issued++ * tally_kinds;
}

void tally_give_back(std::uint32_t first) noexcept {
  if (first == no_tally) return;
  registry& r = registry_of_tallies();
  std::lock_guard lock(r.mutex);
  for (thread_tallies* t = r.threads; t != nullptr; t = t->next) {
    if (first >= t->counters) continue;
    for (unsigned k = 0; k < tally_kinds; ++k) t->counts[first + k].store(0, std::memory_order_relaxed);
  }
  std::fill_n(r.gone.begin() + first, tally_kinds, 0);
  r.free.push_back(first / tally_kinds);
}

bool tally_reach(std::uint32_t first) noexcept {
  if (first == no_tally || tls_gone) return false;
  registry& r = registry_of_tallies();
  if (!r.has_exit_key) return false;
  // Never waits: a try_admit stays lock-free, and while another thread holds the mutex (reading
  // stats(), exiting, stopped there) this count goes on the gate itself.
  std::unique_lock lock(r.mutex, std::try_to_lock);
  if (!lock.owns_lock()) return false;
  thread_tallies* t = tls_node;
  const std::uint32_t old = t != nullptr ? t->counters : 0;
  if (first < old) return true;
  // Twice the array, or as far as the gate, or 16 gates, but never past the indices issued:
  // indices are issued again, the last given back first, so an array is at most as long as the
  // most gates alive at once (docs/gate.md, STATISTICS).
  const std::uint32_t counters = std::min(std::max({first + tally_kinds, old * 2, std::uint32_t{16 * tally_kinds}}),
                                          r.issued * tally_kinds);
  auto* counts = new (std::nothrow) std::atomic<std::uint64_t>[counters]();
  if (counts == nullptr) return false;
  if (t == nullptr) {
    t = new (std::nothrow) thread_tallies;
    if (t == nullptr || pthread_setspecific(r.exit_key, t) != 0) {  // armed: reap at the exit
      delete t;
      delete[] counts;
      return false;
    }
    t->next = r.threads;
    if (r.threads != nullptr) r.threads->prev = t;
    r.threads = t;
    tls_node = t;
  }
  for (std::uint32_t i = 0; i < old; ++i) counts[i].store(t->counts[i].load(std::memory_order_relaxed), std::memory_order_relaxed);
  delete[] t->counts;  // read by others only under the mutex, held here
  t->counts = counts;
  t->counters = counters;
  tls_tally = {counts, counters};
  return true;
}

void tally_sum(std::uint32_t first, std::uint64_t (&sums)[tally_kinds]) noexcept {
  std::fill_n(sums, tally_kinds, 0);
  if (first == no_tally) return;
  registry& r = registry_of_tallies();
  std::lock_guard lock(r.mutex);
  for (const thread_tallies* t = r.threads; t != nullptr; t = t->next) {
    if (first >= t->counters) continue;
    for (unsigned k = 0; k < tally_kinds; ++k) sums[k] += t->counts[first + k].load(std::memory_order_relaxed);
  }
  for (unsigned k = 0; k < tally_kinds; ++k) sums[k] += r.gone[first + k];
}

}  // namespace sluice::detail
