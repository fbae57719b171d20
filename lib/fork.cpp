#include "pool/fork.hpp"

#include <pthread.h>

#include <mutex>

namespace sluice::detail {

struct fork_registry {
  std::mutex mutex;  // guards the list; held from prepare to parent/child
  fork_aware* head = nullptr;

  fork_registry() noexcept { pthread_atfork(&prepare, &parent, &child); }

  static fork_registry& get() noexcept {
    static fork_registry r;  // made at the first registration, before any fork can concern it
    return r;
  }

  static void prepare() noexcept {
    fork_registry& r = get();
    r.mutex.lock();
    for (fork_aware* o = r.head; o != nullptr; o = o->next_) o->lock_for_fork();
  }
  static void parent() noexcept {
    fork_registry& r = get();
    for (fork_aware* o = r.head; o != nullptr; o = o->next_) o->unlock_in_parent();
    r.mutex.unlock();
  }
  static void child() noexcept {
    fork_registry& r = get();
    for (fork_aware* o = r.head; o != nullptr; o = o->next_) o->unlock_in_child();
    r.mutex.unlock();
  }
};

void fork_aware::join() noexcept {
  fork_registry& r = fork_registry::get();
  std::lock_guard lock(r.mutex);
  next_ = r.head;
  if (r.head != nullptr) r.head->prev_ = this;
  r.head = this;
  listed_ = true;
}

void fork_aware::leave() noexcept {
  if (!listed_) return;
  fork_registry& r = fork_registry::get();
  std::lock_guard lock(r.mutex);
  (prev_ != nullptr ? prev_->next_ : r.head) = next_;
  if (next_ != nullptr) next_->prev_ = prev_;
  listed_ = false;
}

}  // namespace sluice::detail
