// What the pool tests share: the pool kinds each case runs against, and byte patterns.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "sluice/pool.hpp"

namespace sluice_test {

// sluice::pool with its thread caches off: the shared lock-free stacks alone.
struct uncached_pool : sluice::pool {
  explicit uncached_pool(sluice::pool_options o = {}) : sluice::pool(without_cache(o)) {}
  static sluice::pool_options without_cache(sluice::pool_options o) {
    o.thread_cache = false;
    return o;
  }
};

// Writes a pattern that depends on every byte's position and on a seed, so that two holders of
// one buffer, or a frame delivered in the wrong place, cannot go unnoticed.
inline void fill(std::span<std::byte> bytes, std::uint64_t seed) {
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    bytes[i] = static_cast<std::byte>((seed * 131 + i * 7 + (i >> 8)) & 0xFF);
  }
}

// The index of the first byte that differs from fill(bytes, seed), or bytes.size().
inline std::size_t first_difference(std::span<const std::byte> bytes, std::uint64_t seed) {
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    if (bytes[i] != static_cast<std::byte>((seed * 131 + i * 7 + (i >> 8)) & 0xFF)) return i;
  }
  return bytes.size();
}

}  // namespace sluice_test

#define POOLS sluice::pool, sluice_test::uncached_pool, sluice::mutex_pool
