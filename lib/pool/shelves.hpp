// Buffers kept by class on sorted shelves, under the caller's lock: all of mutex_pool's buffers,
// and sluice::pool's off-class ones (a capacity that is not a class size).
//
// Shelf c holds capacities in (size(c - 1), size(c)], sorted largest first, so the smallest is
// at the back and the common case (all of one capacity) pushes and pops at the back. Each buffer
// carries the decay step it was shelved in (decay.hpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "decay.hpp"
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

  // Files h under class c, stamped with decay step `step`. Throws std::bad_alloc, leaving the
  // shelves as they were.
  void put(std::size_t c, held h, std::uint32_t step) {
    auto& shelf = shelves_[c];
    const auto at = std::partition_point(shelf.begin(), shelf.end(),
                                         [&](const entry& x) { return x.h.capacity >= h.capacity; });
    shelf.insert(at, entry{h, step});  // after its equals: the newest of a capacity is answered first
  }

  // The smallest buffer on shelf c whose capacity is at least n, taken off it.
  std::optional<held> take(std::size_t c, std::size_t n) noexcept {
    auto& shelf = shelves_[c];
    const auto end = std::partition_point(shelf.begin(), shelf.end(),
                                          [&](const entry& x) { return x.h.capacity >= n; });
    if (end == shelf.begin()) return std::nullopt;
    const held h = (end - 1)->h;
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
      for (const entry& e : shelf) bytes += e.h.capacity;
    }
    return {count, bytes};
  }

  // Frees buffers of shelf c, the largest first and the newest of a capacity first (as sluice::pool
  // frees its stacks' own-size buffers, from the top), until their bytes reach `bytes` or it is
  // empty; answers how many and their bytes.
  std::pair<std::size_t, std::size_t> free_largest_of(std::size_t c, std::size_t bytes) noexcept {
    auto& shelf = shelves_[c];
    std::size_t count = 0, freed = 0;
    while (!shelf.empty() && freed < bytes) {
      const std::size_t capacity = shelf.front().h.capacity;  // the largest run: [0, end)
      const auto end = std::partition_point(shelf.begin(), shelf.end(),
                                            [&](const entry& x) { return x.h.capacity >= capacity; });
      auto from = end;
      while (from != shelf.begin() && freed < bytes) {  // its newest first
        --from;
        freed += capacity;
        free_bytes(from->h.data);
        ++count;
      }
      shelf.erase(from, end);
    }
    return {count, freed};
  }

  // Frees the buffers of shelf c that sat unused since before the decay step before `step`
  // (decay_schedule::stale); answers how many and their bytes.
  std::pair<std::size_t, std::size_t> free_stale_of(std::size_t c, std::uint32_t step) noexcept {
    std::size_t count = 0, bytes = 0;
    std::erase_if(shelves_[c], [&](const entry& e) {
      if (!decay_schedule::stale(e.step, step)) return false;
      ++count;
      bytes += e.h.capacity;
      free_bytes(e.h.data);
      return true;
    });
    return {count, bytes};
  }

  // Frees every buffer; answers how many and their bytes.
  std::pair<std::size_t, std::size_t> free_all() noexcept {
    std::size_t count = 0, bytes = 0;
    for (auto& shelf : shelves_) {
      for (const entry& e : shelf) {
        ++count;
        bytes += e.h.capacity;
        free_bytes(e.h.data);
      }
      shelf.clear();
    }
    return {count, bytes};
  }

 private:
  struct entry {
    held h;
    std::uint32_t step;  // the decay step it was shelved in
  };
  std::vector<std::vector<entry>> shelves_;
};

}  // namespace sluice::detail
