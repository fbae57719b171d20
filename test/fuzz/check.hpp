// The fuzz target's limits, and how a difference is reported (SAME, ENSURE) and calls traced.
// A part of the differential fuzz target (differential.cpp, its only includer).
#pragma once

#include <cstddef>
#include <cstdio>
#include <cstdlib>

namespace fuzz {

constexpr std::size_t max_alloc = std::size_t{8} << 20;  // the largest size ever allocated
constexpr std::size_t budget = std::size_t{24} << 20;    // per pool: retained + held bytes
constexpr std::size_t max_ops = 400;
constexpr std::size_t max_held = 48;
constexpr std::size_t max_permits = 16;

inline bool tracing() {
  static const bool on = [] {
    const char* v = std::getenv("SLUICE_FUZZ_TRACE");
    return v != nullptr && *v != '\0' && *v != '0';
  }();
  return on;
}

#define TRACE(...)                            \
  do {                                        \
    if (tracing()) std::printf(__VA_ARGS__);  \
  } while (0)

inline std::size_t op_index = 0;  // the call being checked, for the report

[[noreturn]] inline void fail(const char* what, unsigned long long a, unsigned long long b, const char* file, int line) {
  std::fprintf(stderr, "differential: DIFFERENCE at op %zu, %s:%d: %s (%llu vs %llu)\n", op_index, file,
               line, what, a, b);
  std::fflush(stderr);
  std::abort();
}

#define SAME(a, b)                                                                   \
  do {                                                                               \
    const auto x_ = (a);                                                             \
    const auto y_ = (b);                                                             \
    if (!(x_ == y_)) {                                                               \
      fail(#a " == " #b, static_cast<unsigned long long>(x_),                        \
           static_cast<unsigned long long>(y_), __FILE__, __LINE__);                         \
    }                                                                                \
  } while (0)
#define ENSURE(c) \
  do {            \
    if (!(c)) fail(#c, 0, 0, __FILE__, __LINE__); \
  } while (0)

}  // namespace fuzz
