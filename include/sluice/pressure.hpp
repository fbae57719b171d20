// sluice/pressure.hpp: the kernel's memory pressure, read as ok, soft or hard.
//
// A pressure_monitor reads Linux's pressure stall information for memory (PSI): the system's
// (/proc/pressure/memory) or a cgroup v2's (memory.pressure), and, for a cgroup, how full it is
// (memory.current against memory.max). Each poll() reads the files again and answers a level
// that gates, limiters and pools follow:
//
//   pressure_monitor m({.psi = ..., .soft_some = 10, .hard_full = 10, .cgroup = ...})
//   m.poll()       reads now: hard when "full" avg10 >= hard_full % or usage >= hard_usage,
//                  soft when "some" avg10 >= soft_some % or usage >= soft_usage, else ok;
//                  throws std::system_error when a file cannot be read, std::runtime_error
//                  when one does not hold what the kernel writes there
//   m.level(), m.reading()   the last poll's answer and what it read (ok and zeros before one)
//
// Following it:  gate.adjust(p, max), limiter.adjust(p); a pool: trim(share) under soft, trim()
//                 under hard.
// The program calls poll() at the pace it chooses (PSI's shortest average spans 10 s; once a
// second is plenty); nothing runs behind its back. One thread at a time may use a monitor.
// The rules, the thresholds' defaults and what a poll costs: docs/pressure.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "sluice/gate.hpp"  // sluice::pressure

namespace sluice {

struct pressure_options {
  // A PSI file: the system's, or a cgroup v2's memory.pressure.
  std::string psi = "/proc/pressure/memory";
  double soft_some = 10;  // % of the last 10 s that some task stalled on memory: soft from here
  double hard_full = 10;  // % of the last 10 s that every task stalled on memory: hard from here
  // A cgroup v2 directory (e.g. /sys/fs/cgroup/app.slice): its memory.current and memory.max are
  // read too. Empty: none. A memory.max of "max" (no limit) gives no usage.
  std::string cgroup{};
  double soft_usage = 0.85;  // memory.current / memory.max from which: soft
  double hard_usage = 0.95;  // and hard
};

// What one poll read. Averages in percent, totals in microseconds stalled since boot.
struct pressure_reading {
  double some_avg10 = 0, some_avg60 = 0, some_avg300 = 0;
  std::uint64_t some_total = 0;
  double full_avg10 = 0, full_avg60 = 0, full_avg300 = 0;  // 0 when the file has no "full" line
  std::uint64_t full_total = 0;
  std::optional<double> usage{};  // memory.current / memory.max, when a cgroup with a limit is read
};

class pressure_monitor {
 public:
  // Thresholds clamped: the percentages into [0, 100], the usages into [0, 1]; NaN: the default.
  // Reads nothing yet.
  explicit pressure_monitor(pressure_options options = {});

  pressure poll();  // reads the files now (see above); on a throw, level() and reading() stay
  [[nodiscard]] pressure level() const noexcept { return level_; }
  [[nodiscard]] const pressure_reading& reading() const noexcept { return reading_; }
  [[nodiscard]] const pressure_options& options() const noexcept { return options_; }

  // The level a reading gives under these options: what poll() answers, for a reading in hand.
  [[nodiscard]] pressure level_of(const pressure_reading& r) const noexcept;

 private:
  pressure_options options_;
  pressure level_ = pressure::ok;
  pressure_reading reading_;
};

// The text of a PSI file ("some avg10=... avg60=... avg300=... total=...", and "full ..."),
// parsed; std::nullopt when it is not one (no "some" line, a field missing or not a number).
std::optional<pressure_reading> parse_psi(const std::string& text);

}  // namespace sluice
