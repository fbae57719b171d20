// The memory-pressure monitor (sluice/pressure.hpp, docs/pressure.md): reads PSI and a cgroup's
// usage from their files, with no locale and no allocation past the file's text.
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

// The whole of a small file (PSI and cgroup files are a line or two); throws as poll() says.
std::string read_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "sluice::pressure_monitor: " + path);
  std::string text;
  char chunk[512];
  for (;;) {
    const ssize_t got = ::read(fd, chunk, sizeof chunk);
    if (got < 0) {
      if (errno == EINTR) continue;
      const int error = errno;
      ::close(fd);
      throw std::system_error(error, std::generic_category(), "sluice::pressure_monitor: " + path);
    }
    if (got == 0) break;
    text.append(chunk, static_cast<std::size_t>(got));
    if (text.size() > (std::size_t{1} << 16)) break;  // not a PSI or cgroup file: the parse says so
  }
  ::close(fd);
  return text;
}

[[noreturn]] void not_what_the_kernel_writes(const std::string& path) {
  throw std::runtime_error("sluice::pressure_monitor: " + path + " does not read as the kernel writes it");
}

// Digits, with an optional fraction: "12.34". Locale-free (the kernel writes a point).
std::optional<double> decimal(std::string_view s) {
  double value = 0;
  std::size_t i = 0, digits = 0;
  for (; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i, ++digits) value = value * 10 + (s[i] - '0');
  if (i < s.size() && s[i] == '.') {
    double scale = 0.1;
    for (++i; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i, ++digits, scale /= 10) value += (s[i] - '0') * scale;
  }
  if (digits == 0 || i != s.size() || !std::isfinite(value)) return std::nullopt;
  return value;
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
    constexpr std::string_view avgs[] = {"avg10", "avg60", "avg300"};
    bool known = false;
    for (int k = 0; k < 3; ++k) {
      if (key != avgs[k]) continue;
      const auto v = decimal(value);
      if (!v || seen[k]) return false;
      avg[k] = *v;
      seen[k] = known = true;
    }
    if (key == "total") {
      const auto v = whole(value);
      if (!v || seen[3]) return false;
      total = *v;
      seen[3] = known = true;
    }
    (void)known;  // a key the kernel may add later: ignored
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
