// The memory-pressure monitor (sluice/pressure.hpp, docs/pressure.md): reads PSI and a cgroup's
// usage from their files, and their numbers without the C library's locale.
#include "sluice/pressure.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <stdexcept>
#include <string_view>
#include <system_error>

namespace sluice {

namespace {

constexpr std::size_t most_text = std::size_t{1} << 16;  // PSI and cgroup files are a line or two

[[noreturn]] void not_what_the_kernel_writes(const std::string& path) {
  throw std::runtime_error("sluice::pressure_monitor: " + path + " does not read as the kernel writes it");
}

// The whole of a small file; throws as poll() says. O_NONBLOCK: a FIFO given by mistake fails
// its read rather than hanging the poll in open(); the kernel's files are never FIFOs.
std::string read_file(const std::string& path) {
  if (path.find('\0') != std::string::npos) {  // open() would take the name up to it
    throw std::system_error(EINVAL, std::generic_category(), "sluice::pressure_monitor: a path with a NUL");
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "sluice::pressure_monitor: " + path);
  std::string text;
  char chunk[512];
  for (;;) {
    const ssize_t got = ::read(fd, chunk, sizeof chunk);
    if (got < 0) {
      if (errno == EINTR) continue;  // EAGAIN (a FIFO with no data) throws below
      const int error = errno;
      ::close(fd);
      throw std::system_error(error, std::generic_category(), "sluice::pressure_monitor: " + path);
    }
    if (got == 0) break;
    text.append(chunk, static_cast<std::size_t>(got));
    if (text.size() > most_text) {
      ::close(fd);
      not_what_the_kernel_writes(path);
    }
  }
  ::close(fd);
  return text;
}

// Digits, or digits, a point and digits ("12.34", as the kernel writes "%lu.%02lu"), at most 15
// in all: the value is their integer over a power of ten, both exact in a double, so the one
// division rounds correctly and a figure read equals the same figure written as a threshold.
std::optional<double> decimal(std::string_view s) {
  std::uint64_t mantissa = 0;
  int digits = 0, fraction = 0;
  std::size_t i = 0;
  for (; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i, ++digits) mantissa = mantissa * 10 + static_cast<std::uint64_t>(s[i] - '0');
  if (digits == 0) return std::nullopt;
  if (i < s.size() && s[i] == '.') {
    for (++i; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i, ++digits, ++fraction) {
      mantissa = mantissa * 10 + static_cast<std::uint64_t>(s[i] - '0');
      if (digits >= 15) return std::nullopt;
    }
    if (fraction == 0) return std::nullopt;
  }
  if (i != s.size() || digits > 15) return std::nullopt;
  double scale = 1;
  for (int k = 0; k < fraction; ++k) scale *= 10;  // exact: 10^14 at most
  return static_cast<double>(mantissa) / scale;
}

std::optional<std::uint64_t> whole(std::string_view s) {
  if (s.empty()) return std::nullopt;
  std::uint64_t value = 0;
  for (const char ch : s) {
    if (ch < '0' || ch > '9') return std::nullopt;
    const auto digit = static_cast<std::uint64_t>(ch - '0');
    if (value > (UINT64_MAX - digit) / 10) return std::nullopt;  // past 64 bits: not the kernel's
    value = value * 10 + digit;
  }
  return value;
}

std::string_view trimmed(std::string_view s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.remove_suffix(1);
  return s;
}

// One line's "avg10=.. avg60=.. avg300=.. total=..": each of the four once; other keys ignored.
bool parse_line(std::string_view fields, double (&avg)[3], std::uint64_t& total) {
  bool seen[4] = {};
  while (!fields.empty()) {
    const std::size_t space = fields.find(' ');
    const std::string_view field = fields.substr(0, space);
    fields = space == std::string_view::npos ? std::string_view{} : fields.substr(space + 1);
    if (field.empty()) continue;
    const std::size_t eq = field.find('=');
    if (eq == std::string_view::npos) return false;
    const std::string_view key = field.substr(0, eq), value = field.substr(eq + 1);
    // A key the kernel may add later matches none below, and is ignored.
    constexpr std::string_view avgs[] = {"avg10", "avg60", "avg300"};
    for (int k = 0; k < 3; ++k) {
      if (key != avgs[k]) continue;
      const auto v = decimal(value);
      if (!v || seen[k]) return false;
      avg[k] = *v;
      seen[k] = true;
    }
    if (key == "total") {
      const auto v = whole(value);
      if (!v || seen[3]) return false;
      total = *v;
      seen[3] = true;
    }
  }
  return seen[0] && seen[1] && seen[2] && seen[3];
}

double clamped(double v, double lo, double hi, double fallback) noexcept {
  return std::isnan(v) ? fallback : std::clamp(v, lo, hi);
}

}  // namespace

std::optional<pressure_reading> parse_psi(const std::string& text) {
  pressure_reading r;
  bool some = false, full = false;
  std::string_view rest = text;
  while (!rest.empty()) {
    const std::size_t end = rest.find('\n');
    const std::string_view line = trimmed(rest.substr(0, end));
    rest = end == std::string_view::npos ? std::string_view{} : rest.substr(end + 1);
    if (line.empty()) continue;
    const std::size_t space = line.find(' ');
    const std::string_view kind = line.substr(0, space);
    const std::string_view fields = space == std::string_view::npos ? std::string_view{} : line.substr(space + 1);
    if (kind == "some" && !some) {
      double avg[3];
      if (!parse_line(fields, avg, r.some_total)) return std::nullopt;
      r.some_avg10 = avg[0], r.some_avg60 = avg[1], r.some_avg300 = avg[2];
      some = true;
    } else if (kind == "full" && !full) {
      double avg[3];
      if (!parse_line(fields, avg, r.full_total)) return std::nullopt;
      r.full_avg10 = avg[0], r.full_avg60 = avg[1], r.full_avg300 = avg[2];
      full = true;
    } else {
      return std::nullopt;  // a line twice, or one the kernel does not write
    }
  }
  if (!some) return std::nullopt;
  return r;
}

pressure_monitor::pressure_monitor(pressure_options o) : options_(std::move(o)) {
  const pressure_options defaults;
  options_.soft_some = clamped(options_.soft_some, 0, 100, defaults.soft_some);
  options_.hard_full = clamped(options_.hard_full, 0, 100, defaults.hard_full);
  options_.soft_usage = clamped(options_.soft_usage, 0, 1, defaults.soft_usage);
  options_.hard_usage = clamped(options_.hard_usage, 0, 1, defaults.hard_usage);
}

pressure pressure_monitor::level_of(const pressure_reading& r) const noexcept {
  const double usage = r.usage.value_or(-1);
  if (r.full_avg10 >= options_.hard_full || usage >= options_.hard_usage) return pressure::hard;
  if (r.some_avg10 >= options_.soft_some || usage >= options_.soft_usage) return pressure::soft;
  return pressure::ok;
}

pressure pressure_monitor::poll() {
  std::optional<pressure_reading> r = parse_psi(read_file(options_.psi));
  if (!r) not_what_the_kernel_writes(options_.psi);
  if (!options_.cgroup.empty()) {
    const std::string current_path = options_.cgroup + "/memory.current", max_path = options_.cgroup + "/memory.max";
    const auto current = whole(trimmed(read_file(current_path)));
    if (!current) not_what_the_kernel_writes(current_path);
    const std::string max_text = read_file(max_path);
    if (trimmed(max_text) != "max") {
      const auto max = whole(trimmed(max_text));
      if (!max) not_what_the_kernel_writes(max_path);
      // A limit of 0 holds nothing: full.
      r->usage = *max == 0 ? 1.0 : static_cast<double>(*current) / static_cast<double>(*max);
    }
  }
  reading_ = *r;
  level_ = level_of(reading_);
  return level_;
}

}  // namespace sluice
