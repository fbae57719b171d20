#include <pthread.h>

#include <atomic>
#include <cstdint>
#include <mutex>

#include "pool/fork.hpp"

namespace sluice::detail {

// No function-local static here: a fork while another thread is inside a static's first
// initialisation would leave the child that static's guard "in progress" for good. The list and
// its mutex are constant-initialised, and the handlers are installed through pthread_once,
// which glibc lets a forked child run again if the fork interrupted it.
struct fork_registry {
  static constinit inline std::mutex mutex{};  // guards the list; held from prepare to parent/child
  static constinit inline fork_aware* head = nullptr;
  // fork_generation(): written in a child by its one thread, before any other exists; relaxed.
  static constinit inline std::atomic<std::uint64_t> generation{0};
  static inline pthread_once_t handlers = PTHREAD_ONCE_INIT;

  // this_thread_forks(); initial-exec, as the library's other thread-locals are
  static constinit inline thread_local bool forks_here __attribute__((tls_model("initial-exec"))) = false;

  static void install() noexcept { pthread_atfork(&prepare, &parent, &child); }

  static void prepare() noexcept {
    mutex.lock();
    forks_here = true;
    for (fork_aware* o = head; o != nullptr; o = o->next_) o->lock_for_fork();
  }
  static void parent() noexcept {
    for (fork_aware* o = head; o != nullptr; o = o->next_) o->unlock_in_parent();
    forks_here = false;
    mutex.unlock();
  }
  static void child() noexcept {
    generation.store(generation.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    for (fork_aware* o = head; o != nullptr; o = o->next_) o->unlock_in_child();
    forks_here = false;
    mutex.unlock();
  }
};

bool this_thread_forks() noexcept { return fork_registry::forks_here; }

std::uint64_t fork_generation() noexcept {
  pthread_once(&fork_registry::handlers, &fork_registry::install);
  return fork_registry::generation.load(std::memory_order_relaxed);
}

void fork_aware::join(bool first) noexcept {
  pthread_once(&fork_registry::handlers, &fork_registry::install);
  std::lock_guard lock(fork_registry::mutex);
  first_ = first;
  prev_ = nullptr;  // at the head, or behind the objects that joined first
  if (!first) {
    for (fork_aware* o = fork_registry::head; o != nullptr && o->first_; o = o->next_) prev_ = o;
  }
  fork_aware*& at = prev_ != nullptr ? prev_->next_ : fork_registry::head;
  next_ = at;
  if (next_ != nullptr) next_->prev_ = this;
  at = this;
  listed_ = true;
}

void fork_aware::leave() noexcept {
  if (!listed_) return;
  std::lock_guard lock(fork_registry::mutex);
  (prev_ != nullptr ? prev_->next_ : fork_registry::head) = next_;
  if (next_ != nullptr) next_->prev_ = prev_;
  listed_ = false;
}

}  // namespace sluice::detail
