#include "parking.hpp"

#include <array>
#include <cstdint>
#include <functional>
#include <new>

#include <pthread.h>

#include "pool/fork.hpp"

namespace sluice::detail {
namespace {

// The table, held across fork() like the pools' mutexes, so that a forked child never finds a
// spot locked by a thread it does not have; the child also forgets each spot's sleeping
// threads, which are the parent's other threads (the forking thread is not asleep). With every
// spot held, no waiter can leave a queue, and the fork waits for the hand-overs already under
// way (docs/asio.md, Fork): a child finds each async waiter queued or handed over, never between.
// It joins the fork registry first, so that no pool is held while it waits: a hand-over may
// allocate, from a pool too.
class parking_lot final : public fork_aware {
 public:
  static constexpr std::size_t size = 64;  // a power of two

  parking_lot() { join(/*first=*/true); }

  parking_spot& spot(const void* key) noexcept {
    const auto h = std::hash<const void*>{}(key);
    return spots_[(h ^ (h >> 6) ^ (h >> 12)) & (size - 1)];
  }

  void lock_for_fork() noexcept override {
    for (auto& s : spots_) s.mutex.lock();
    for (const auto& s : spots_) await_hand_overs(s);
  }
  void unlock_in_parent() noexcept override {
    for (auto& s : spots_) s.mutex.unlock();
  }
  void unlock_in_child() noexcept override {
    for (auto& s : spots_) {
      s.sleepers.forget_all();
      s.mutex.unlock();
    }
  }

 private:
  std::array<parking_spot, size> spots_;
};

// The table lives in static storage (no allocation that could fail) and is never destroyed: a
// thread may still wait while the process exits. It is made at the first wait through
// pthread_once, not as a function-local static: a fork while another thread makes it would
// leave the child a static's guard "in progress" for good, while glibc lets a child run an
// interrupted pthread_once again.
alignas(parking_lot) unsigned char lot_storage[sizeof(parking_lot)];
parking_lot* lot = nullptr;  // written once, inside lot_once
pthread_once_t lot_once = PTHREAD_ONCE_INIT;

void make_lot() noexcept { lot = new (lot_storage) parking_lot; }

}  // namespace

parking_spot& parking_for(const void* key) noexcept {
  pthread_once(&lot_once, &make_lot);  // orders the read of `lot` after its write
  return lot->spot(key);
}

}  // namespace sluice::detail
