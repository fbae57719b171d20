// The pools' size classes: four per power of two from 16 bytes (16, 20, 24, 28, 32, 40, ...),
// so that rounding a request of 13 bytes or more up to its class wastes less than a fifth of the
// capacity (for 2^b < n <= 2^(b+1), the waste is under 2^(b-2) of at least 5 * 2^(b-2)). A pool's
// top class is cut at its ceiling. All arithmetic saturates: any std::size_t has a class.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "sluice/detail/pool_cache.hpp"  // class_of

namespace sluice::detail {

// The nominal size of class c: (4 + c % 4) << (c / 4 + 2), saturated at SIZE_MAX.
constexpr std::size_t nominal_class_size(std::size_t c) noexcept {
  const std::size_t shift = c / 4 + 2;
  if (shift >= 62) return std::numeric_limits<std::size_t>::max();  // 4 << 62 is 2^64
  return (4 + c % 4) << shift;
}

// The classes of a pool with this ceiling: the top one is cut at the ceiling.
class size_classes {
 public:
  explicit constexpr size_classes(std::size_t ceiling) noexcept
      : ceiling_(ceiling), count_(class_of(ceiling) + 1) {}

  constexpr std::size_t ceiling() const noexcept { return ceiling_; }
  constexpr std::size_t count() const noexcept { return count_; }
  constexpr std::size_t size(std::size_t c) const noexcept {
    return std::min(nominal_class_size(c), ceiling_);
  }
  // The class that serves a request of n (n <= ceiling). A buffer (capacity <= ceiling) is filed
  // under class of(capacity). It is on-class when its capacity is that class's size, and then
  // lives on the class's lock-free stack. Any other capacity lies strictly between size(c - 1)
  // and size(c): off-class, kept on the locked shelves, and smaller than every on-class buffer of
  // its class.
  constexpr std::size_t of(std::size_t n) const noexcept { return class_of(n); }

  // The capacity acquire() gives fresh memory for a request of n: n's class, or n itself above
  // the ceiling (such a buffer is never kept, so rounding it up would only waste memory).
  constexpr std::size_t fresh_capacity(std::size_t n) const noexcept {
    return n > ceiling_ ? n : size(of(n));
  }

 private:
  std::size_t ceiling_;
  std::size_t count_;
};

// How many buffers of a class move between a thread cache and the shared stack at once: 16 up
// to 16 KiB, then fewer as buffers grow (256 KiB / size, so a cache holds at most twice that of
// a class), down to 2 from the 96 KiB class, so that caches do not sit on much memory.
constexpr std::uint32_t magazine_batch(std::size_t class_size) noexcept {
  const std::size_t per_batch_bytes = std::size_t{256} << 10;
  return static_cast<std::uint32_t>(std::clamp<std::size_t>(per_batch_bytes / std::max<std::size_t>(class_size, 1), 2, 16));
}

static_assert(class_of(0) == 0 && class_of(16) == 0 && class_of(17) == 1 && class_of(20) == 1);
static_assert(magazine_batch(80 << 10) == 3 && magazine_batch(96 << 10) == 2 && magazine_batch(16 << 10) == 16);
static_assert(2 * magazine_batch(0) <= magazine::room);
static_assert(class_of(32) == 4 && class_of(33) == 5 && nominal_class_size(5) == 40);
static_assert(nominal_class_size(class_of(1000)) == 1024 && nominal_class_size(class_of(800)) == 896);
static_assert(class_of(std::numeric_limits<std::size_t>::max()) == 240);
static_assert(size_classes(1000).size(size_classes(1000).count() - 1) == 1000);
static_assert(size_classes(1000).size(size_classes(1000).of(1000)) == 1000 &&  // the top class, cut
              size_classes(4096).size(size_classes(4096).of(1000)) == 1024);   // off-class there
static_assert(size_classes(0).count() == 1 && size_classes(0).size(0) == 0);

}  // namespace sluice::detail
