// gate and mutex_gate. The rules that both share (clamping, the pressure step) are written once
// here, so the reference model cannot drift from the lock-free gate.
#include "sluice/gate.hpp"

#include <algorithm>
#include <mutex>
#include <thread>

#include "parking.hpp"

namespace sluice {
namespace {

constexpr std::int64_t clamp_cap(std::int64_t cap) noexcept {
  return std::clamp<std::int64_t>(cap, 1, gate_limit);
}

constexpr std::int64_t next_cap(std::int64_t cap, pressure p, std::int64_t max_cap) noexcept {
  return p == pressure::ok ? clamp_cap(std::min(cap + 1, max_cap)) : clamp_cap(cap - 1);
}

// The packed word: in_flight in bits 0-30, the waiting mark in bit 31, cap in bits 32-62.
constexpr int cap_shift = 32;
constexpr std::uint64_t waiting_bit = std::uint64_t{1} << 31;
constexpr std::uint64_t count_mask = waiting_bit - 1;

constexpr std::uint64_t pack(std::int64_t cap, std::uint64_t count) noexcept {
  return static_cast<std::uint64_t>(cap) << cap_shift | count;
}
constexpr std::int64_t cap_of(std::uint64_t word) noexcept {
  return static_cast<std::int64_t>(word >> cap_shift);
}
constexpr std::int64_t count_of(std::uint64_t word) noexcept {
  return static_cast<std::int64_t>(word & count_mask);
}

}  // namespace

// ---- gate ------------------------------------------------------------------------------------
//
// Ordering pairs, numbered as in the comments below:
//   (1) note_done's release-CAS  synchronizes-with  (2) try_admit's acquire-CAS and
//       (3) the acquire-loads of the readers, through the word's release sequence (every other
//       write to the word is a read-modify-write, so it continues the sequence).
//   (W) no lost wake-up. A waiter, holding its spot's mutex, sets the waiting bit with an RMW
//       (W1), tries again, and only then sleeps on the spot, which releases the mutex. A call
//       that may make room clears the bit in the RMW that makes the room (W2) and, when it was
//       set, takes the spot's mutex and wakes the spot (W3). The word's modification order puts
//       W2 before W1 (then the waiter's try sees the room) or after it (then W2 reads the bit,
//       and W3 can only get the mutex once the waiter sleeps, or has left). Every sleeper on the
//       spot wakes, and one that must wait again sets the bit again.
//       Clearing the bit in W2 itself (not later, in W3) means that after W2 the call touches
//       nothing of the gate, only the spot, which outlives every gate: the thread that W2 admits
//       may destroy the gate at once, as with a semaphore that signals completion.
// Everything else is relaxed: the word carries no data besides itself, and each RMW reads the
// latest value in the word's modification order whatever its ordering. The spot's mutex orders
// W3 against the waiter; the word needs nothing more for it.

gate::gate(std::int64_t cap) noexcept : word_(pack(clamp_cap(cap), 0)) {}

void gate::note_submitted() noexcept {
  // Relaxed: a submission publishes nothing, and makes no room. One CAS, retried only when
  // another call changed the word (lock-free); at gate_limit the count stays put, so the
  // saturated submission is one step that changes nothing, never an add and an undo that
  // another call could see between.
  std::uint64_t word = word_.load(std::memory_order_relaxed);
  do {
    if (count_of(word) == gate_limit) return;
  } while (!word_.compare_exchange_weak(word, word + 1, std::memory_order_relaxed));
}

void gate::note_done() noexcept {
  std::uint64_t word = word_.load(std::memory_order_relaxed);
  do {
    if (count_of(word) == 0) return;  // the floor: at zero it stays zero
  } while (!word_.compare_exchange_weak(word, (word - 1) & ~waiting_bit,
                                        std::memory_order_release,    // (1), (W2)
                                        std::memory_order_relaxed));
  if ((word & waiting_bit) != 0) wake(this);  // (W3)
}

bool gate::try_admit() noexcept {
  std::uint64_t word = word_.load(std::memory_order_relaxed);
  do {
    if (count_of(word) >= cap_of(word)) return false;
  } while (!word_.compare_exchange_weak(word, word + 1,
                                        std::memory_order_acquire,    // (2)
                                        std::memory_order_relaxed));
  return true;
}

void gate::admit() {
  if (!try_admit()) wait_admit(std::chrono::steady_clock::time_point::max());
}

namespace {
void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}
}  // namespace

bool gate::wait_admit(std::chrono::steady_clock::time_point deadline) {
  // Room often comes within a few hundred nanoseconds (another thread's note_done), far sooner
  // than a sleep and a wake-up in the kernel take: try a while first, as std::counting_semaphore
  // does, pausing, then yielding the core.
  for (int i = 0; i < 32; ++i) {
    if (i < 16) {
      cpu_relax();
    } else {
      std::this_thread::yield();  // may be long on a busy machine: mind the deadline
      if (std::chrono::steady_clock::now() >= deadline) return try_admit();
    }
    if (try_admit()) return true;
  }
  detail::parking_spot& spot = detail::parking_for(this);
  std::unique_lock lock(spot.mutex);
  for (;;) {
    word_.fetch_or(waiting_bit, std::memory_order_relaxed);  // (W1)
    if (try_admit()) return true;
    if (deadline == std::chrono::steady_clock::time_point::max()) {
      spot.wake.wait(lock);
    } else if (spot.wake.wait_until(lock, deadline) == std::cv_status::timeout) {
      return try_admit();
    }
  }
}

// (W3), given the gate's address alone: the mutex is taken and let go before the wake, so that a
// waiter between its W1 and its sleep is asleep (or gone) by the time the wake comes.
void gate::wake(const gate* g) noexcept {
  detail::parking_spot& spot = detail::parking_for(g);
  { std::lock_guard lock(spot.mutex); }
  spot.wake.notify_all();
}

bool gate::has_capacity() const noexcept {
  const std::uint64_t word = word_.load(std::memory_order_acquire);  // (3)
  return count_of(word) < cap_of(word);
}

std::int64_t gate::in_flight() const noexcept {
  return count_of(word_.load(std::memory_order_acquire));  // (3)
}

std::int64_t gate::cap() const noexcept {
  return cap_of(word_.load(std::memory_order_relaxed));  // the cap publishes nothing
}

void gate::set_cap(std::int64_t cap) noexcept {
  const std::uint64_t cap_bits = pack(clamp_cap(cap), 0);
  std::uint64_t word = word_.load(std::memory_order_relaxed);
  while (!word_.compare_exchange_weak(word, cap_bits | (word & count_mask),  // (W2)
                                      std::memory_order_relaxed)) {
  }
  if ((word & waiting_bit) != 0) wake(this);  // (W3)
}

void gate::adjust(pressure p, std::int64_t max_cap) noexcept {
  std::uint64_t word = word_.load(std::memory_order_relaxed);
  while (!word_.compare_exchange_weak(
      word, pack(next_cap(cap_of(word), p, max_cap), word & count_mask),  // (W2)
      std::memory_order_relaxed)) {
  }
  if ((word & waiting_bit) != 0) wake(this);  // (W3)
}

// ---- mutex_gate ------------------------------------------------------------------------------

mutex_gate::mutex_gate(std::int64_t cap) noexcept : cap_(clamp_cap(cap)) {}

void mutex_gate::note_submitted() noexcept {
  std::lock_guard lock(mutex_);
  in_flight_ = std::min(in_flight_ + 1, gate_limit);
}

// After a change that may make room: wakes the waiters, if any. Under the mutex, so that no
// waiter can return, and destroy the gate, before the call is done with it.
void mutex_gate::wake_if_waiting(std::unique_lock<std::mutex>& lock) noexcept {
  if (waiting_ > 0) room_.notify_all();
  lock.unlock();
}

void mutex_gate::note_done() noexcept {
  std::unique_lock lock(mutex_);
  if (in_flight_ > 0) --in_flight_;
  wake_if_waiting(lock);
}

bool mutex_gate::try_admit() noexcept {
  std::lock_guard lock(mutex_);
  if (in_flight_ >= cap_) return false;
  ++in_flight_;
  return true;
}

void mutex_gate::admit() { wait_admit(std::chrono::steady_clock::time_point::max()); }

bool mutex_gate::wait_admit(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(mutex_);
  ++waiting_;
  const auto room = [&] { return in_flight_ < cap_; };
  bool admitted = true;
  if (deadline == std::chrono::steady_clock::time_point::max()) {
    room_.wait(lock, room);
  } else {
    admitted = room_.wait_until(lock, deadline, room);
  }
  --waiting_;
  if (admitted) ++in_flight_;
  return admitted;
}

bool mutex_gate::has_capacity() const noexcept {
  std::lock_guard lock(mutex_);
  return in_flight_ < cap_;
}

std::int64_t mutex_gate::in_flight() const noexcept {
  std::lock_guard lock(mutex_);
  return in_flight_;
}

std::int64_t mutex_gate::cap() const noexcept {
  std::lock_guard lock(mutex_);
  return cap_;
}

void mutex_gate::set_cap(std::int64_t cap) noexcept {
  std::unique_lock lock(mutex_);
  cap_ = clamp_cap(cap);
  wake_if_waiting(lock);
}

void mutex_gate::adjust(pressure p, std::int64_t max_cap) noexcept {
  std::unique_lock lock(mutex_);
  cap_ = next_cap(cap_, p, max_cap);
  wake_if_waiting(lock);
}

}  // namespace sluice
