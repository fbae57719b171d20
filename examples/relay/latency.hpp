// relay/latency.hpp: a histogram of durations that any thread records into without a lock, and
// its percentiles, for the frame latencies every run reports. Logarithmic buckets, 32 to each
// power of two, so a percentile is within 1/32 (about 3%) of the true value, and the histogram
// is a fixed 9 KiB however many frames a run takes.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>

namespace relay {

class latency_histogram {
 public:
  void record(std::chrono::nanoseconds d) noexcept {
    const auto v = static_cast<std::uint64_t>(std::max<std::int64_t>(d.count(), 0));
    // Relaxed: counters, read once the run is over (after the threads that wrote them joined).
    buckets_[index(v)].fetch_add(1, std::memory_order_relaxed);
    std::uint64_t seen = max_.load(std::memory_order_relaxed);
    while (seen < v && !max_.compare_exchange_weak(seen, v, std::memory_order_relaxed)) {
    }
  }

  [[nodiscard]] std::uint64_t count() const noexcept {
    std::uint64_t n = 0;
    for (const auto& b : buckets_) n += b.load(std::memory_order_relaxed);
    return n;
  }

  // The p-th percentile (0 < p <= 100): the upper edge of the bucket that holds it, so never
  // below the true value; 0 when nothing was recorded.
  [[nodiscard]] std::chrono::nanoseconds percentile(double p) const noexcept {
    const std::uint64_t n = count();
    if (n == 0) return std::chrono::nanoseconds{0};
    const auto rank = std::max<std::uint64_t>(1, static_cast<std::uint64_t>(std::ceil(p / 100.0 * static_cast<double>(n))));
    std::uint64_t seen = 0;
    for (std::size_t i = 0; i < buckets_.size(); ++i) {
      seen += buckets_[i].load(std::memory_order_relaxed);
      if (seen >= rank) return std::chrono::nanoseconds{static_cast<std::int64_t>(std::min(upper_edge(i), max()))};
    }
    return std::chrono::nanoseconds{static_cast<std::int64_t>(max())};
  }

  [[nodiscard]] std::uint64_t max() const noexcept { return max_.load(std::memory_order_relaxed); }

 private:
  static constexpr int sub_bits = 5;                    // 32 buckets to a power of two
  static constexpr std::uint64_t sub = std::uint64_t{1} << sub_bits;
  static constexpr int top_bits = 40;                   // 2^40 ns, 18 minutes: longer counts there
  static constexpr std::size_t bucket_count = sub + (top_bits - sub_bits) * sub;

  // Below 32 ns one bucket per ns; above, 32 to each power of two.
  static std::size_t index(std::uint64_t v) noexcept {
    v = std::min(v, (std::uint64_t{1} << top_bits) - 1);
    if (v < sub) return static_cast<std::size_t>(v);
    const int shift = std::bit_width(v) - 1 - sub_bits;
    return static_cast<std::size_t>(sub + static_cast<std::uint64_t>(shift) * sub + ((v >> shift) - sub));
  }
  static std::uint64_t upper_edge(std::size_t i) noexcept {
    if (i < sub) return i;
    const std::uint64_t shift = (i - sub) / sub, offset = (i - sub) % sub;
    return ((sub + offset + 1) << shift) - 1;
  }

  std::array<std::atomic<std::uint64_t>, bucket_count> buckets_{};
  std::atomic<std::uint64_t> max_{0};
};

}  // namespace relay
