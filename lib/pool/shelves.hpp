// Buffers kept by class on sorted shelves, under the caller's lock: all of mutex_pool's buffers,
// and sluice::pool's off-class ones (a capacity that is not a class size).
//
// Shelf c holds capacities in (size(c - 1), size(c)], sorted largest first, so the smallest is
// at the back and the common case (all of one capacity) pushes and pops at the back.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <optional>
#include <vector>

#include "memory.hpp"

namespace sluice::detail {

// What trim(share) frees: share (in (0, 1)) of bytes, rounded up.
inline std::size_t share_of(std::size_t bytes, double share) noexcept {
  const long double want = std::ceil(static_cast<long double>(bytes) * share);
  return want >= static_cast<long double>(bytes) ? bytes : static_cast<std::size_t>(want);
}

class shelves {
 public:
  explicit shelves(std::size_t classes) : shelves_(classes) {}

  // Files h under class c. Throws std::bad_alloc, leaving the shelves as they were.
  void put(std::size_t c, held h) {
    auto& shelf = shelves_[c];
    const auto at = std::partition_point(shelf.begin(), shelf.end(),
                                         [&](const held& x) { return x.capacity >= h.capacity; });
    shelf.insert(at, h);  // after its equals: the newest of a capacity is answered first
  }

  // The smallest buffer on shelf c whose capacity is at least n, taken off it.
  std::optional<held> take(std::size_t c, std::size_t n) noexcept {
    auto& shelf = shelves_[c];
    const auto end = std::partition_point(shelf.begin(), shelf.end(),
                                          [&](const held& x) { return x.capacity >= n; });
    if (end == shelf.begin()) return std::nullopt;
    const held h = *(end - 1);
    shelf.erase(end - 1);
    return h;
  }

  bool empty(std::size_t c) const noexcept { return shelves_[c].empty(); }
  std::size_t count(std::size_t c) const noexcept { return shelves_[c].size(); }

  // How many buffers the shelves hold, and their bytes.
  std::pair<std::size_t, std::size_t> tally() const noexcept {
    std::size_t count = 0, bytes = 0;
    for (const auto& shelf : shelves_) {
      count += shelf.size();
      for (const held& h : shelf) bytes += h.capacity;
    }
    return {count, bytes};
  }

  // Frees buffers of shelf c, the largest first, until their bytes reach `bytes` or it is empty;
  // answers how many and their bytes.
  std::pair<std::size_t, std::size_t> free_largest_of(std::size_t c, std::size_t bytes) noexcept {
    auto& shelf = shelves_[c];
    std::size_t count = 0, freed = 0;
    for (; count < shelf.size() && freed < bytes; ++count) {
      freed += shelf[count].capacity;
      free_bytes(shelf[count].data);
    }
    shelf.erase(shelf.begin(), shelf.begin() + static_cast<std::ptrdiff_t>(count));
    return {count, freed};
  }

  // Frees every buffer; answers how many and their bytes.
  std::pair<std::size_t, std::size_t> free_all() noexcept {
    std::size_t count = 0, bytes = 0;
    for (auto& shelf : shelves_) {
      for (const held& h : shelf) {
        ++count;
        bytes += h.capacity;
        free_bytes(h.data);
      }
      shelf.clear();
    }
    return {count, bytes};
  }

 private:
  std::vector<std::vector<held>> shelves_;
};

}  // namespace sluice::detail
