// The differential fuzz target's value tables: the one place they are written. differential.cpp
// decodes a table entry from its index; make_corpus.py compiles print_tables.cpp against this
// header to read them, so the seeds it writes cannot drift from the decoder.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <limits>

#include "sluice/gate.hpp"

namespace fuzz_tables {

using sluice::gate_limit;

inline constexpr std::size_t size_max = std::numeric_limits<std::size_t>::max();
inline constexpr std::size_t ptrdiff_max = static_cast<std::size_t>(PTRDIFF_MAX);
inline constexpr std::int64_t i64_min = std::numeric_limits<std::int64_t>::min();
inline constexpr std::int64_t i64_max = std::numeric_limits<std::int64_t>::max();

// Sizes: class sizes and their neighbours, off-class values, the default ceiling's edges, and
// huge values (only ever allocated where the allocation must throw).
inline constexpr std::size_t size_table[] = {
    0, 1, 2, 15, 16, 17, 19, 20, 21, 28, 29, 32, 33, 100, 112, 127, 128, 129, 980, 1000, 1023,
    1024, 1025, 4095, 4096, 4097, 16384, 16385, 65536, 131072, (1 << 20) - 1, 1 << 20,
    (1 << 20) + 1, (4 << 20) - 1, 4 << 20, (4 << 20) + 1, 5 << 20,
    std::size_t{1} << 32, std::size_t{1} << 40, std::size_t{1} << 47, std::size_t{1} << 62,
    ptrdiff_max, ptrdiff_max + 1, std::size_t{7} << 61, (std::size_t{7} << 61) + 1,
    size_max - 1, size_max};
inline constexpr std::size_t size_table_count = std::size(size_table);

inline constexpr std::size_t ceiling_table[] = {
    0, 1, 5, 15, 16, 17, 20, 21, 100, 1000, 1024, 4096, 65536, 1 << 20, 3000000, 4 << 20,
    (4 << 20) + 1, std::size_t{1} << 32, std::size_t{1} << 40, ptrdiff_max, ptrdiff_max + 1,
    std::size_t{7} << 61, size_max - 1, size_max};

// Bounds: 0, the sizes where thread caches begin (64) and grow (C = 2 * P places of the bound,
// taken P = bound / 32 at a time, up to 16), and the top.
inline constexpr std::size_t bound_table[] = {
    0, 1, 2, 3, 15, 16, 17, 31, 32, 33, 48, 63, 64, 65, 95, 96, 127, 128, 1023, 1024, 2048,
    1 << 20, size_max / 2, size_max - 1, size_max};

inline constexpr std::int64_t cap_table[] = {
    i64_min, i64_min + 1, -(std::int64_t{1} << 32), -gate_limit - 1, -gate_limit, -2, -1, 0, 1, 2,
    3, 4, 5, 8, 10, 100, 1000, gate_limit - 2, gate_limit - 1, gate_limit, gate_limit + 1,
    std::int64_t{1} << 31, (std::int64_t{1} << 32) - 1, std::int64_t{1} << 32,
    (std::int64_t{1} << 32) + 1, (std::int64_t{1} << 32) + 5, std::int64_t{1} << 33,
    std::int64_t{1} << 62, i64_max - 1, i64_max};

// Where the decoder's operations begin: below resource_ops a pool call (op % 13), from
// resource_ops a resource call, from gate_ops a gate call (op % 12).
inline constexpr std::uint8_t resource_ops = 176;
inline constexpr std::uint8_t gate_ops = 192;

}  // namespace fuzz_tables
