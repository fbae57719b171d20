// Fork safety for the primitives that hold mutexes: each registers itself, and the process's
// pthread_atfork handlers lock every registered object's mutexes before a fork (prepare) and
// unlock them after it, in the parent and in the child. So a child never inherits a mutex that
// a thread which does not exist in it was holding, and each object may repair in the child what
// the parent's other threads left (their thread caches, in sluice::pool).
//
// Lock order: the registry's own mutex, then each object's, in the registry's order: the objects
// that joined first (the gates' parking lot, whose prepare waits for hand-overs that may allocate
// from a pool: docs/asio.md, Fork), then the others, newest first. No object may take the
// registry's mutex while it holds one of its own.
#pragma once

#include <cstdint>

namespace sluice::detail {

// Whether this thread is running the fork handlers, from the prepare to the parent's or child's:
// a call it makes meanwhile (from another library's handler) must not wait for the fork.
bool this_thread_forks() noexcept;

// How many forks separate this process from the first of its ancestors that called this: 0 there
// and in its other descendants' parents, one more in each child. The first call installs the
// fork handlers that count (sluice::limiter's turn names the generation of its holder).
std::uint64_t fork_generation() noexcept;

class fork_aware {
 public:
  fork_aware(const fork_aware&) = delete;
  fork_aware& operator=(const fork_aware&) = delete;

  virtual void lock_for_fork() noexcept = 0;    // prepare: take every mutex of the object
  virtual void unlock_in_parent() noexcept = 0;
  virtual void unlock_in_child() noexcept = 0;  // only the forking thread exists here

 protected:
  fork_aware() noexcept = default;
  ~fork_aware() = default;

  // Registers. The most derived constructor calls it last, once nothing can throw and every
  // member a handler uses exists (a fork may run the handlers from that instant). `first`: its
  // handlers run before those of every object that did not join first.
  void join(bool first = false) noexcept;
  // Unregisters, after a fork in progress has finished. The most derived destructor calls it
  // first, before it destroys anything the handlers use.
  void leave() noexcept;

 private:
  friend struct fork_registry;
  fork_aware* prev_ = nullptr;
  fork_aware* next_ = nullptr;
  bool listed_ = false;
  bool first_ = false;
};

}  // namespace sluice::detail
