// gate and mutex_gate. The rules that both share (clamping, the pressure step) are written once
// here, so the reference model cannot drift from the lock-free gate.
#include "sluice/gate.hpp"

#include <algorithm>

namespace sluice {
namespace {

constexpr std::int64_t clamp_cap(std::int64_t cap) noexcept {
  return std::clamp<std::int64_t>(cap, 1, gate_limit);
}

constexpr std::int64_t next_cap(std::int64_t cap, pressure p, std::int64_t max_cap) noexcept {
  return p == pressure::ok ? clamp_cap(std::min(cap + 1, max_cap)) : clamp_cap(cap - 1);
}

// The packed word: in_flight in bits 0-31, cap in bits 32-63.
constexpr int cap_shift = 32;
constexpr std::uint64_t count_mask = (std::uint64_t{1} << cap_shift) - 1;

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
// Everything else is relaxed: the word carries no data besides itself, and each RMW reads the
// latest value in the word's modification order whatever its ordering.

gate::gate(std::int64_t cap) noexcept : word_(pack(clamp_cap(cap), 0)) {}

void gate::note_submitted() noexcept {
  // Relaxed: a submission publishes nothing. One CAS, retried only when another call changed the
  // word (lock-free); at gate_limit the count stays put, so the saturated submission is one step
  // that changes nothing, never an add and an undo that another call could see between.
  std::uint64_t word = word_.load(std::memory_order_relaxed);
  do {
    if (count_of(word) == gate_limit) return;
  } while (!word_.compare_exchange_weak(word, word + 1, std::memory_order_relaxed));
}

void gate::note_done() noexcept {
  std::uint64_t word = word_.load(std::memory_order_relaxed);
  do {
    if ((word & count_mask) == 0) return;  // the floor: at zero it stays zero
  } while (!word_.compare_exchange_weak(word, word - 1,
                                        std::memory_order_release,    // (1)
                                        std::memory_order_relaxed));
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
  while (!word_.compare_exchange_weak(word, cap_bits | (word & count_mask),
                                      std::memory_order_relaxed)) {
  }
}

void gate::adjust(pressure p, std::int64_t max_cap) noexcept {
  std::uint64_t word = word_.load(std::memory_order_relaxed);
  while (!word_.compare_exchange_weak(
      word, pack(next_cap(cap_of(word), p, max_cap), word & count_mask),
      std::memory_order_relaxed)) {
  }
}

// ---- mutex_gate ------------------------------------------------------------------------------

mutex_gate::mutex_gate(std::int64_t cap) noexcept : cap_(clamp_cap(cap)) {}

void mutex_gate::note_submitted() noexcept {
  std::lock_guard lock(mutex_);
  in_flight_ = std::min(in_flight_ + 1, gate_limit);
}

void mutex_gate::note_done() noexcept {
  std::lock_guard lock(mutex_);
  if (in_flight_ > 0) --in_flight_;
}

bool mutex_gate::try_admit() noexcept {
  std::lock_guard lock(mutex_);
  if (in_flight_ >= cap_) return false;
  ++in_flight_;
  return true;
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
  std::lock_guard lock(mutex_);
  cap_ = clamp_cap(cap);
}

void mutex_gate::adjust(pressure p, std::int64_t max_cap) noexcept {
  std::lock_guard lock(mutex_);
  cap_ = next_cap(cap_, p, max_cap);
}

}  // namespace sluice
