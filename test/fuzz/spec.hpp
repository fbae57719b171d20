// The contract's own arithmetic, written from the headers (no library code): the oracle.
// A part of the differential fuzz target (differential.cpp, its only includer).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "tables.hpp"

namespace fuzz {

using namespace fuzz_tables;

// ---- the contract's own arithmetic (no library code) ---------------------------------------

// The smallest size of the series 16, 20, 24, 28, 32, 40, ... that is at least n. Only called
// for n <= max_alloc.
inline std::size_t spec_class_size(std::size_t n) {
  for (std::size_t shift = 2;; ++shift) {
    for (std::size_t m = 4; m < 8; ++m) {
      if ((m << shift) >= n) return m << shift;
    }
  }
}

inline std::size_t spec_fresh_capacity(std::size_t n, std::size_t ceiling) {
  return n > ceiling ? n : std::min(spec_class_size(n), ceiling);
}

inline std::int64_t spec_clamp(std::int64_t c) { return c < 1 ? 1 : (c > gate_limit ? gate_limit : c); }

}  // namespace fuzz
