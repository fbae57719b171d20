// Fork safety for the primitives that hold mutexes: each registers itself, and the process's
// pthread_atfork handlers lock every registered object's mutexes before a fork (prepare) and
// unlock them after it, in the parent and in the child. So a child never inherits a mutex that
// a thread which does not exist in it was holding, and each object may repair in the child what
// the parent's other threads left (their thread caches, in sluice::pool).
//
// Lock order: the registry's own mutex, then each object's, in registration order. No object
// may take the registry's mutex while it holds one of its own.
#pragma once

namespace sluice::detail {

class fork_aware {
 public:
  fork_aware(const fork_aware&) = delete;
  fork_aware& operator=(const fork_aware&) = delete;

  virtual void lock_for_fork() noexcept = 0;    // prepare: take every mutex of the object
  virtual void unlock_in_parent() noexcept = 0;
  virtual void unlock_in_child() noexcept = 0;  // only the forking thread exists here

 protected:
  fork_aware() noexcept;  // registers
  ~fork_aware();          // a no-op: the most derived destructor must call leave() first

  // Unregisters; waits for a fork in progress to finish. Called by the most derived class's
  // destructor before it destroys anything the handlers use.
  void leave() noexcept;

 private:
  friend struct fork_registry;
  fork_aware* prev_ = nullptr;
  fork_aware* next_ = nullptr;
  bool listed_ = false;
};

}  // namespace sluice::detail
