// The input, decoded: bytes into sizes, ceilings, bounds, caps and options, from the tables.
// A part of the differential fuzz target (differential.cpp, its only includer).
#pragma once

#include <cstddef>
#include <cstdint>

#include "sluice/pool.hpp"
#include "tables.hpp"

namespace fuzz {

using namespace fuzz_tables;  // the value tables and where each kind of operation begins
using sluice::pool_options;

// ---- the input --------------------------------------------------------------------------------

class reader {
 public:
  reader(const std::uint8_t* data, std::size_t size) : p_(data), n_(size) {}
  bool empty() const { return n_ == 0; }
  std::uint8_t byte() {
    if (n_ == 0) return 0;
    --n_;
    return *p_++;
  }
  std::uint64_t bytes(int k) {
    std::uint64_t v = 0;
    for (int i = 0; i < k; ++i) v |= std::uint64_t{byte()} << (8 * i);
    return v;
  }

 private:
  const std::uint8_t* p_;
  std::size_t n_;
};

inline std::size_t pick_size(reader& r, std::size_t ceiling) {
  const std::uint8_t s = r.byte();
  if (s < size_table_count) return size_table[s];
  if (s < 150) return r.byte();
  if (s < 200) return static_cast<std::size_t>(r.bytes(2));
  if (s < 235) return ceiling + static_cast<std::size_t>(static_cast<int>(r.byte() % 9) - 4);  // wraps
  return static_cast<std::size_t>(r.bytes(3)) & ((std::size_t{1} << 20) - 1);  // below 1 MiB
}

inline std::size_t pick_ceiling(reader& r) {
  const std::uint8_t s = r.byte();
  if (s < std::size(ceiling_table)) return ceiling_table[s];
  if (s < 128) return r.byte();
  if (s < 192) return static_cast<std::size_t>(r.bytes(2));
  return static_cast<std::size_t>(r.bytes(3));
}

inline std::size_t pick_bound(reader& r) {
  const std::uint8_t s = r.byte();
  if (s < std::size(bound_table)) return bound_table[s];
  return static_cast<std::size_t>(r.bytes(2) % 4096);
}

inline std::int64_t pick_cap(reader& r) {
  const std::uint8_t s = r.byte();
  if (s < std::size(cap_table)) return cap_table[s];
  if (s < 128) return static_cast<std::int8_t>(r.byte());
  if (s < 192) return static_cast<std::int16_t>(r.bytes(2));
  return static_cast<std::int64_t>(r.bytes(8));
}

inline pool_options pick_options(reader& r) {
  pool_options o;
  o.bound = pick_bound(r);
  o.ceiling = pick_ceiling(r);
  o.enabled = r.byte() % 4 != 0;
  return o;
}

}  // namespace fuzz
