// What the tests share: the kinds each case runs against (POOLS, GATES), whether a sanitizer is
// on (the one place that asks), and byte patterns.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "sluice/gate.hpp"
#include "sluice/pool.hpp"

// SLUICE_TEST_SANITIZED: built with AddressSanitizer or ThreadSanitizer (GCC defines the
// __SANITIZE_* macros, Clang answers __has_feature). SLUICE_TEST_TSAN: ThreadSanitizer alone.
#if defined(__SANITIZE_THREAD__)
#define SLUICE_TEST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SLUICE_TEST_TSAN 1
#endif
#endif
#if defined(SLUICE_TEST_TSAN) || defined(__SANITIZE_ADDRESS__)
#define SLUICE_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SLUICE_TEST_SANITIZED 1
#endif
#endif

namespace sluice_test {

#ifdef SLUICE_TEST_SANITIZED
inline constexpr bool sanitized = true;  // slower by several times: cases scale down
#else
inline constexpr bool sanitized = false;
#endif
#ifdef SLUICE_TEST_TSAN
inline constexpr bool thread_sanitized = true;
#else
inline constexpr bool thread_sanitized = false;
#endif
// SLUICE_TEST_EMULATED: cross-built, to run under an emulator (test/meson.build defines it), which
// runs the suite's compute 5 to 20 times slower. Cases that scale down under a sanitizer scale
// down there too (`reduced`).
#ifdef SLUICE_TEST_EMULATED
inline constexpr bool emulated = true;
#else
inline constexpr bool emulated = false;
#endif
inline constexpr bool reduced = sanitized || emulated;

// sluice::pool with its thread caches off: the shared lock-free stacks alone.
struct uncached_pool : sluice::pool {
  explicit uncached_pool(sluice::pool_options o = {}) : sluice::pool(without_cache(o)) {}
  static sluice::pool_options without_cache(sluice::pool_options o) {
    o.thread_cache = false;
    return o;
  }
};

// Whether pool p, of bound `bound` whose classes reach `size` bytes, can be emptied and filled
// to its bound and emptied again, each counted exactly: what a forked child checks of a pool it
// inherits from a parent whose other threads were inside it.
template <class P>
bool keeps_whole_bound(P& p, std::size_t bound, std::size_t size) {
  p.trim();
  bool good = p.retained() == 0;
  for (std::size_t j = 0; j < bound; ++j) p.retire(sluice::buffer(size));
  good = good && p.retained() == bound && p.stats().retained_bytes == bound * size;
  std::size_t answered = 0;
  while (p.take(size)) ++answered;
  return good && answered == bound && p.retained() == 0;
}

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
#define GATES sluice::gate, sluice::mutex_gate
