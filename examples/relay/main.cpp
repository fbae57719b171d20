// relay: frames routed between ranks through a hub over real TCP sockets on 127.0.0.1, the hub
// reading each frame into a sluice::pool buffer and admitting it through its destination's
// sluice::gate, a window counted in bytes whose cap follows the hub's memory pressure. Every
// receiver checks every byte and the order per source; the exit status is the verdict. See
// README.md for the options.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <sluice/sluice.hpp>

#include "bad_input.hpp"
#include "hostile.hpp"
#include "hub.hpp"
#include "rank.hpp"
#include "wire.hpp"

namespace {

using namespace relay;
using clock_type = std::chrono::steady_clock;

enum class pool_kind { lockfree, mutex, off };

struct options {
  std::uint32_t ranks = 3;
  size_spec sizes;            // mixed by default
  std::uint64_t frames = 3000;  // in all, split evenly over the ranks
  double duration = 0;        // seconds; 0: run until `frames` are sent
  pool_kind pool = pool_kind::lockfree;
  bool thread_cache = true;
  std::size_t pool_bound = sluice::pool_options{}.bound;
  std::uint64_t seed = 1;
  std::uint64_t slow_rate = 0;  // --slow-rank: rank 0's pace, payload bytes a second; 0: none
  double report_every = -1;  // seconds; -1: every 5 s with --duration, never without
  double timeout = -1;       // seconds; -1: 300, plus the duration
  bool selftest_bad_input = false;
  bool hostile = false;
  std::size_t hostile_connections = 0;  // 0: the eight of --hostile, made once the ranks run
  hub_options hub{.inject_at = 100};   // budget, io_timeout, threads, inject; ranks set per run
  double min_hit_rate = 0;   // percent of acquires the pool must answer from retired buffers
  int versus_mutex = -1;     // points sluice::pool's hit rate may trail mutex_pool's; -1: no second run
};

constexpr const char* usage_text =
    "usage: relay [options]\n"
    "  --ranks=N              ranks, 2..64 (default 3)\n"
    "  --sizes=mixed|fixed:N  payload sizes: mixed (1 B to 1 MiB, mostly small) or N bytes\n"
    "  --frames=N             data frames in all, split evenly over the ranks (default 3000)\n"
    "  --duration=S           send for S seconds instead of a count of frames\n"
    "  --pool=lockfree|mutex|off  sluice::pool, sluice::mutex_pool, or a disabled pool\n"
    "  --thread-cache=on|off  sluice::pool's per-thread caches (default on)\n"
    "  --pool-bound=N         the most buffers the pool retains (default 1024)\n"
    "  --budget=BYTES         the hub's buffer memory at which pressure is hard; each\n"
    "                         destination's window is its share (suffix K, M or G; default 16M)\n"
    "  --io-timeout=S         the hub's deadline for a hello, for a frame once it has begun,\n"
    "                         and for a write to make progress (default 10)\n"
    "  --seed=N               the traffic's seed (sizes and destinations)\n"
    "  --slow-rank=RATE       rank 0 reads at most RATE payload bytes a second (suffix K, M\n"
    "                         or G): a slow receiver that every sender also sends to\n"
    "  --report-every=S       print progress and resident memory every S seconds\n"
    "                         (default 5 with --duration)\n"
    "  --timeout=S            give up (exit 3) after S seconds (default 300 + duration)\n"
    "  --selftest-bad-input   also connect raw clients that send the hub bad input, and check\n"
    "                         that each is reported while the ranks' traffic completes intact\n"
    "  --hostile              also connect slow, idle, early and non-reading clients, which\n"
    "                         stay on throughout; the ranks' traffic must still complete\n"
    "  --hostile-connections=N  --hostile with N connections (8 to 16384) held at once, made\n"
    "                         before the ranks start; prints the hub process's resident memory\n"
    "                         per connection\n"
    "  --threads=N            threads running the hub's io_context (default: one per core)\n"
    "  --min-hit-rate=PCT     fail unless the pool answers at least PCT% of acquires\n"
    "  --versus-mutex=POINTS  run the traffic on sluice::mutex_pool, then again on\n"
    "                         sluice::pool, and fail unless sluice::pool's hit rate is at\n"
    "                         most POINTS below mutex_pool's\n"
    "  --limit=aimd|vegas|gradient2  a latency limit on each destination's window (a\n"
    "                         sluice::limiter; default none: the pressure alone)\n"
    "  --limit-window=N       samples the limit's algorithm takes as one (default 1)\n"
    "  --inject=flip|drop|dup[:K]  make the hub corrupt, lose or repeat its K-th forwarded\n"
    "                         frame (default 100), to see the receivers catch it\n";

[[noreturn]] void usage_error(const std::string& message) {
  std::fprintf(stderr, "relay: %s\n%s", message.c_str(), usage_text);
  std::exit(2);
}

std::uint64_t parse_count(std::string_view name, std::string_view text, std::uint64_t lo,
                          std::uint64_t hi, bool suffixes = false) {
  std::uint64_t v = 0;
  std::size_t i = 0;
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
    if (v > (UINT64_MAX - 9) / 10) usage_error(std::string(name) + ": too large");
    v = v * 10 + static_cast<std::uint64_t>(text[i] - '0');
  }
  if (i == 0) usage_error(std::string(name) + ": not a number: " + std::string(text));
  if (suffixes && i + 1 == text.size()) {
    const int shift = text[i] == 'K' ? 10 : text[i] == 'M' ? 20 : text[i] == 'G' ? 30 : -1;
    if (shift < 0 || v > (UINT64_MAX >> shift)) {
      usage_error(std::string(name) + ": bad value: " + std::string(text));
    }
    v <<= shift;
    ++i;
  }
  if (i != text.size()) usage_error(std::string(name) + ": not a number: " + std::string(text));
  if (v < lo || v > hi) {
    usage_error(std::string(name) + ": " + std::to_string(v) + " is outside " +
                std::to_string(lo) + ".." + std::to_string(hi));
  }
  return v;
}

double parse_seconds(std::string_view name, std::string_view text) {
  char* end = nullptr;
  const std::string s(text);
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0' || !(v > 0) || v > 1e6) {
    usage_error(std::string(name) + ": not a positive number of seconds: " + s);
  }
  return v;
}

// Which of the choices the value is, from 0; -1 if none.
int choice(std::string_view value, std::initializer_list<std::string_view> choices) {
  const auto it = std::find(choices.begin(), choices.end(), value);
  return it == choices.end() ? -1 : static_cast<int>(it - choices.begin());
}

options parse(int argc, char** argv, std::size_t ceiling) {
  options o;
  for (int a = 1; a < argc; ++a) {
    const std::string_view arg = argv[a];
    const std::size_t eq = arg.find('=');
    const std::string_view name = arg.substr(0, eq);
    const std::string_view value = eq == std::string_view::npos ? "" : arg.substr(eq + 1);
    const bool has_value = eq != std::string_view::npos;
    if (name == "--help" || name == "-h") {
      std::fputs(usage_text, stdout);
      std::exit(0);
    } else if (name == "--selftest-bad-input" && !has_value) {
      o.selftest_bad_input = true;
    } else if (name == "--hostile" && !has_value) {
      o.hostile = true;
    } else if (!has_value) {
      usage_error("unknown option or missing value: " + std::string(arg));
    } else if (name == "--hostile-connections") {
      o.hostile = true;
      o.hostile_connections = parse_count(name, value, 8, relay::hub_options{}.max_connections);
    } else if (name == "--threads") {
      o.hub.threads = static_cast<unsigned>(parse_count(name, value, 1, 1024));
    } else if (name == "--ranks") {
      o.ranks = static_cast<std::uint32_t>(parse_count(name, value, 2, 64));
    } else if (name == "--sizes") {
      if (value == "mixed") {
        o.sizes = {.mixed = true, .fixed = 0};
      } else if (value.starts_with("fixed:")) {
        o.sizes = {.mixed = false, .fixed = parse_count(name, value.substr(6), 0, ceiling, true)};
      } else {
        usage_error("--sizes: mixed or fixed:N, not " + std::string(value));
      }
    } else if (name == "--frames") {
      o.frames = parse_count(name, value, 1, std::uint64_t{1} << 40);
    } else if (name == "--duration") {
      o.duration = parse_seconds(name, value);
    } else if (name == "--pool") {
      const int k = choice(value, {"lockfree", "mutex", "off"});
      if (k < 0) usage_error("--pool: lockfree, mutex or off, not " + std::string(value));
      o.pool = static_cast<pool_kind>(k);
    } else if (name == "--thread-cache") {
      if (value != "on" && value != "off") usage_error("--thread-cache: on or off");
      o.thread_cache = value == "on";
    } else if (name == "--min-hit-rate") {
      o.min_hit_rate = static_cast<double>(parse_count(name, value, 0, 100));
    } else if (name == "--versus-mutex") {
      o.versus_mutex = static_cast<int>(parse_count(name, value, 0, 100));
    } else if (name == "--pool-bound") {
      o.pool_bound = parse_count(name, value, 0, std::uint64_t{1} << 24);
    } else if (name == "--budget") {
      o.hub.budget = parse_count(name, value, 1, std::uint64_t{1} << 40, true);
    } else if (name == "--io-timeout") {
      const double seconds = parse_seconds(name, value);
      if (seconds < 0.001) usage_error("--io-timeout: at least 0.001 (a millisecond)");
      o.hub.io_timeout = std::chrono::ceil<std::chrono::milliseconds>(
          std::chrono::duration<double>(seconds));
    } else if (name == "--slow-rank") {
      o.slow_rate = parse_count(name, value, 1, std::uint64_t{1} << 40, true);
    } else if (name == "--seed") {
      o.seed = parse_count(name, value, 0, UINT64_MAX);
    } else if (name == "--report-every") {
      o.report_every = std::max(parse_seconds(name, value), 0.001);  // a loop of prints below 1 ms
    } else if (name == "--timeout") {
      o.timeout = parse_seconds(name, value);
    } else if (name == "--limit") {
      const int k = choice(value, {"none", "aimd", "vegas", "gradient2"});
      if (k < 0) usage_error("--limit: aimd, vegas, gradient2 or none, not " + std::string(value));
      o.hub.limit = static_cast<limit_kind>(k);
    } else if (name == "--limit-window") {
      o.hub.limit_window = static_cast<std::int64_t>(parse_count(name, value, 1, std::uint64_t{1} << 20));
    } else if (name == "--inject") {
      const std::string_view kind = value.substr(0, value.find(':'));
      const int k = choice(kind, {"flip", "drop", "dup"});
      if (k < 0) usage_error("--inject: flip, drop or dup, not " + std::string(value));
      o.hub.inject = static_cast<fault>(k + 1);  // after fault::none
      if (kind.size() < value.size()) {
        o.hub.inject_at = parse_count(name, value.substr(kind.size() + 1), 0, UINT64_MAX);
      }
    } else {
      usage_error("unknown option: " + std::string(arg));
    }
  }
  if (o.hostile && o.selftest_bad_input) {
    usage_error("--hostile and --selftest-bad-input do not combine (both add guests)");
  }
  if (o.report_every < 0) o.report_every = o.duration > 0 ? 5 : 0;
  if (o.timeout < 0) o.timeout = 300 + o.duration;
  return o;
}

// ---- resident memory ----

// A field of /proc/self/status in KiB (VmRSS, VmHWM), or -1 where there is none.
long proc_status_kib(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const std::size_t n = std::strlen(field);
  while (std::getline(in, line)) {
    if (line.compare(0, n, field) == 0 && line.size() > n && line[n] == ':') {
      return std::strtol(line.c_str() + n + 1, nullptr, 10);
    }
  }
  return -1;
}

long peak_rss_kib() {
  rusage u{};
  return getrusage(RUSAGE_SELF, &u) == 0 ? u.ru_maxrss : -1;
}

double mib(auto bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }
using ll = long long;  // for printf's %lld
using ull = unsigned long long;  // and %llu

// ---- the watchdog: a run that stops making progress still ends ----

// SIGALRM's handler only writes a message made beforehand and exits: both async-signal-safe.
class watchdog {
 public:
  explicit watchdog(double seconds) {
    std::snprintf(message_, sizeof message_, "relay: FAIL: no verdict after %.0f s; giving up\n",
                  seconds);
    std::signal(SIGALRM, [](int) {
      (void)!::write(STDERR_FILENO, message_, std::strlen(message_));
      std::_Exit(3);
    });
    ::alarm(static_cast<unsigned>(std::ceil(seconds)));
  }
  ~watchdog() { ::alarm(0); }

 private:
  static inline char message_[96];
};

// A FAIL line on stderr; the verdict is then failure.
[[gnu::format(printf, 2, 3)]] void fail(bool& ok, const char* format, ...) {
  std::va_list args;
  va_start(args, format);
  std::fputs("relay: FAIL: ", stderr);
  std::vfprintf(stderr, format, args);
  va_end(args);
  ok = false;
}

std::string pool_name(const options& o) {
  if (o.pool == pool_kind::mutex) return "mutex (sluice::mutex_pool)";
  const char* caches = o.thread_cache ? "" : ", no thread caches";
  return std::string(o.pool == pool_kind::lockfree ? "lockfree (sluice::pool"
                                                   : "off (sluice::pool, disabled") +
         caches + ")";
}

// ---- the pool's statistics per size class ----

// A class's capacity as people read it: 48 B, 1.25 KiB, 64 KiB, 1 MiB; the last row (SIZE_MAX)
// is what lay above the ceiling.
std::string capacity_text(std::size_t capacity) {
  if (capacity == SIZE_MAX) return "above ceiling";
  if (capacity < 1024) return std::to_string(capacity) + " B";
  const char* const units[] = {"KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  std::size_t scale = 1024;
  while (u < 3 && capacity / scale >= 1024) {
    scale *= 1024;
    ++u;
  }
  if (capacity % scale == 0) return std::to_string(capacity / scale) + " " + units[u];
  // Four classes per power of two: two decimals are exact (1.25, 1.5, 1.75); trailing zeros go.
  char text[32];
  std::snprintf(text, sizeof text, "%.2f",
                static_cast<double>(capacity) / static_cast<double>(scale));
  std::string s = text;
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  return s + " " + units[u];
}

// A table of the classes that saw traffic, smallest first, each line "pool class" and its
// columns (README.md: the end of a run). "dropped" splits the retires freed by reason: at the
// bound (or for want of memory), over the ceiling, while switched off. The hub's pool has no
// decay, so "decayed" reads 0: printed all the same, so that every count class_stats() has shows.
void print_class_stats(const std::vector<sluice::pool_class_stats>& rows) {
  constexpr std::size_t columns = 9;
  using line = std::array<std::string, columns>;
  std::vector<line> lines{{"capacity", "hits", "misses", "fresh", "retired",
                           "dropped bound/ceiling/off", "trimmed", "decayed", "retained"}};
  for (const sluice::pool_class_stats& c : rows) {
    if (c.hits == 0 && c.misses == 0 && c.fresh == 0 && c.retired == 0 &&
        c.dropped_at_bound == 0 && c.dropped_over_ceiling == 0 && c.dropped_off == 0 &&
        c.trimmed == 0 && c.decayed == 0 && c.retained == 0) {
      continue;
    }
    lines.push_back({capacity_text(c.capacity), std::to_string(c.hits), std::to_string(c.misses),
                     std::to_string(c.fresh), std::to_string(c.retired),
                     std::to_string(c.dropped_at_bound) + "/" +
                         std::to_string(c.dropped_over_ceiling) + "/" +
                         std::to_string(c.dropped_off),
                     std::to_string(c.trimmed), std::to_string(c.decayed), std::to_string(c.retained)});
  }
  if (lines.size() == 1) {
    std::printf("pool class: none took or retired a buffer\n");
    return;
  }
  std::array<int, columns> width{};
  for (const line& l : lines) {
    for (std::size_t i = 0; i < columns; ++i) {
      width[i] = std::max(width[i], static_cast<int>(l[i].size()));
    }
  }
  for (const line& l : lines) {
    std::string text = "pool class";
    for (std::size_t i = 0; i < columns; ++i) {
      text.append(2 + static_cast<std::size_t>(width[i]) - l[i].size(), ' ');  // right-aligned
      text += l[i];
    }
    std::printf("%s\n", text.c_str());
  }
}

// ---- one run, written once for both pool types ----

// Runs the traffic on a Pool; answers the exit status, and the pool's hit rate in *hit_rate_out.
template <class Pool>
int run(const options& o, const sluice::pool_options& pool_options, double* hit_rate_out = nullptr) {
  // The hostile clients' process is forked first, while this one has no other thread.
  std::optional<hostile_clients> hostile;
  if (o.hostile) hostile.emplace(o.ranks, pool_options.ceiling, std::max<std::size_t>(o.hostile_connections, 8));
  const watchdog dog(o.timeout);
  const bool selftest = o.selftest_bad_input;
  const std::vector<bad_client> guests =
      selftest ? bad_clients(o.ranks) : std::vector<bad_client>{};

  hub_options ho = o.hub;
  ho.ranks = o.ranks + (o.hostile ? 1 : 0);  // --hostile: one more rank, which never reads
  hub<Pool> h(ho, pool_options);

  run_context ctx;
  ctx.ranks = o.ranks;
  ctx.sizes = o.sizes;
  ctx.seed = o.seed;
  ctx.slow_rate = static_cast<double>(o.slow_rate);
  ctx.ceiling = h.ceiling();
  // The bad clients go once a tenth of the frames (at most 200) have arrived, so that they
  // meet traffic in full flow.
  ctx.traffic_threshold =
      o.duration > 0 ? 200 : std::clamp<std::uint64_t>(o.frames / 10, 1, 200);
  // And the ranks hold their end markers (which end the hub) until every bad client is done.
  ctx.hold_end = selftest;
  ctx.time_frames();

  std::printf("relay: %u ranks via hub on 127.0.0.1:%u; sizes %s; pool %s; budget %zu bytes%s\n",
              o.ranks, h.port(),
              o.sizes.mixed ? "mixed (0 B .. 1 MiB, mostly small)"
                            : ("fixed " + std::to_string(o.sizes.fixed) + " B").c_str(),
              pool_name(o).c_str(), o.hub.budget,
              o.hostile ? "; with hostile clients (and a rank that never reads)" : "");
  if (o.slow_rate > 0) std::printf("relay: rank 0 reads at most %.2f MiB/s\n", mib(o.slow_rate));
  if (o.hub.limit != limit_kind::none) {
    std::printf("relay: each window's cap owned by a sluice::limiter, %s, a sample per %lld frame(s)\n",
                to_string(o.hub.limit), ll(o.hub.limit_window));
  }
  if (o.duration > 0) {
    std::printf("relay: running for %.0f s\n", o.duration);
  } else {
    std::printf("relay: %llu data frames in all, split over the ranks\n",
                ull(o.frames));
  }
  std::fflush(stdout);

  const auto start = clock_type::now();
  if (o.duration > 0) {
    ctx.deadline = start + std::chrono::duration_cast<clock_type::duration>(
                               std::chrono::duration<double>(o.duration));
  }
  std::vector<std::unique_ptr<rank_node>> ranks;
  std::vector<std::string> guest_outcomes(guests.size());
  std::thread guest_runner, hostile_runner;
  std::string hostile_summary;
  try {
    h.start();
    if (o.hostile) {
      hostile->start_early(h.port());
      // The early ones are the hub's first connections: wait until it has accepted both.
      while (h.stats().connections < 2) std::this_thread::yield();
    }
    if (o.hostile_connections > 0) {
      // All of them before the ranks, so that the memory they add is theirs alone.
      const long before = proc_status_kib("VmRSS");
      hostile->start();
      while (h.stats().open < o.hostile_connections) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));  // polls the count
      }
      const long held = proc_status_kib("VmRSS");
      std::printf("hostile: %zu connections held at once; resident %.1f MiB before them, %.1f MiB "
                  "with them: %.2f KiB per connection\n",
                  o.hostile_connections, before / 1024.0, held / 1024.0,
                  static_cast<double>(held - before) / static_cast<double>(o.hostile_connections));
      std::fflush(stdout);
    }
    for (std::uint32_t r = 0; r < o.ranks; ++r) {
      const std::uint64_t share = o.frames / o.ranks + (r < o.frames % o.ranks ? 1 : 0);
      ranks.push_back(std::make_unique<rank_node>(ctx, r, share));
      ranks.back()->start(h.port());
    }
    if (selftest) {
      guest_runner = std::thread([&] {
        {
          std::unique_lock lk(ctx.mu);
          ctx.cv.wait(lk, [&] { return ctx.traffic_flowing || ctx.senders_holding == o.ranks; });
        }
        std::vector<std::thread> clients;
        for (std::size_t i = 0; i < guests.size(); ++i) {
          clients.emplace_back([&, i] {
            try {
              guest_outcomes[i] = run_bad_client(guests[i], h.port(), h.ceiling());
            } catch (const std::exception& e) {
              guest_outcomes[i] = std::string("client failed: ") + e.what();
            }
          });
        }
        for (auto& t : clients) t.join();
        {
          std::lock_guard lk(ctx.mu);
          ctx.hold_end = false;
        }
        ctx.cv.notify_all();
      });
    }
    if (o.hostile) {
      if (o.hostile_connections == 0) hostile->start();
      // The hostile clients stay on until the ranks have sent everything; then the hub, whose
      // ranks include the non-reader, can end.
      hostile_runner = std::thread([&] {
        {
          std::unique_lock lk(ctx.mu);
          ctx.cv.wait(lk, [&] { return ctx.senders_done == o.ranks; });
        }
        try {
          hostile_summary = hostile->stop();
        } catch (const std::exception& e) {
          hostile_summary = e.what();
        }
      });
    }
  } catch (const std::exception& e) {
    // The hub is waiting for connections that will not come; no clean way back from here.
    std::fprintf(stderr, "relay: setup failed: %s\n", e.what());
    std::fflush(nullptr);
    std::_Exit(2);
  }

  // Wait for every receiver to reach its EOF, reporting progress meanwhile if asked.
  {
    std::unique_lock lk(ctx.mu);
    const auto all_received = [&] { return ctx.receivers_done == o.ranks; };
    if (o.report_every > 0) {
      const auto every = std::chrono::duration_cast<clock_type::duration>(
          std::chrono::duration<double>(o.report_every));
      auto next = start + every;
      std::uint64_t last_frames = 0;
      while (!ctx.cv.wait_until(lk, next, all_received)) {
        lk.unlock();
        const double t = std::chrono::duration<double>(clock_type::now() - start).count();
        const std::uint64_t frames = ctx.frames_received.load(std::memory_order_relaxed);
        const hub_stats hs = h.stats();
        const sluice::pool_stats ps = h.pool().stats();
        std::printf("  t=%5.0f s  frames %10llu (%8.0f/s)  resident %7.1f MiB (peak %7.1f)  "
                    "pool retains %5zu (%6.1f MiB)  admitted %6.1f MiB, reading %6.1f MiB\n",
                    t, ull(frames), static_cast<double>(frames - last_frames) / o.report_every,
                    proc_status_kib("VmRSS") / 1024.0, proc_status_kib("VmHWM") / 1024.0,
                    ps.retained, mib(ps.retained_bytes), mib(hs.held), mib(hs.reading));
        std::fflush(stdout);
        last_frames = frames;
        next += every;
        lk.lock();
      }
    } else {
      ctx.cv.wait(lk, all_received);
    }
  }
  const double seconds = std::chrono::duration<double>(clock_type::now() - start).count();
  for (auto& r : ranks) r->join();
  if (guest_runner.joinable()) guest_runner.join();
  if (hostile_runner.joinable()) hostile_runner.join();
  h.join();

  // ---- the verdict ----
  bool ok = !ctx.failed.load();
  // Every frame sent was received, per pair of ranks (the end markers said so too).
  std::uint64_t sent_total = 0;
  for (std::uint32_t s = 0; s < o.ranks; ++s) {
    for (std::uint32_t d = 0; d < o.ranks; ++d) {
      const std::uint64_t sent = ranks[s]->sent()[d];
      const std::uint64_t got = ranks[d]->received()[s];
      sent_total += sent;
      if (sent != got) {
        fail(ok, "rank %u sent %llu frames to rank %u, which got %llu\n", s, ull(sent), d, ull(got));
      }
    }
  }
  const hub_stats hs = h.stats();
  const std::vector<conn_error> errors = h.errors();
  const sluice::gate_stats ws = h.windows();
  // The memory bound the README states: a destination's admitted bytes never pass its window
  // (its share of the budget in whole units), but for one frame larger than that, alone.
  const std::int64_t bound =
      std::max(hs.window_max * static_cast<std::int64_t>(admission_unit), hs.largest_frame);

  for (const conn_error& e : errors) {
    if (e.id >= 0 && e.id < o.ranks) fail(ok, "the hub failed rank %lld's connection\n", ll(e.id));
  }
  if (selftest) {
    std::size_t reported = 0;
    for (std::size_t i = 0; i < guests.size(); ++i) {
      const bad_client& g = guests[i];
      const std::int64_t id =
          g.input == bad_input::bad_hello ? std::int64_t{-1} : std::int64_t{g.id};
      // std::count_if and std::find_if, not std::ranges: libc++ 14 has neither ranges form.
      const auto has_id = [id](const conn_error& e) { return e.id == id; };
      const auto reports = std::count_if(errors.begin(), errors.end(), has_id);
      const auto first = std::find_if(errors.begin(), errors.end(), has_id);
      const bool good = reports == 1 && first->kind == g.expected;
      reported += good;
      const std::string report = reports == 0 ? "(no report)"
                                              : std::string(to_string(first->kind)) + ": " + first->message;
      std::printf("selftest: %-16s %s: %s; client: %s\n", g.name,
                  good ? "reported" : "NOT REPORTED AS EXPECTED", report.c_str(),
                  guest_outcomes[i].c_str());
      if (!good) {
        fail(ok, "bad input '%s' was not reported as %s (%zu reports)\n", g.name,
             to_string(g.expected), static_cast<std::size_t>(reports));
      }
    }
    std::printf("selftest: %zu of %zu bad connections reported, each closed on its own\n",
                reported, guests.size());
  }
  if (hostile) {
    std::size_t cut = 0;
    for (const conn_error& e : errors) cut += e.id < 0 || e.id >= o.ranks;
    std::printf("hostile: %s; %zu of them cut off by the hub, the rest closed at the end\n",
                hostile_summary.c_str(), cut);
  }

  const std::uint64_t frames = ctx.frames_received.load();
  const std::uint64_t bytes = ctx.bytes_received.load();
  const sluice::pool_stats ps = h.pool().stats();
  const std::uint64_t takes = ps.hits + ps.misses;
  const double hit_rate =
      takes == 0 ? 0.0 : 100.0 * static_cast<double>(ps.hits) / static_cast<double>(takes);
  if (hit_rate_out != nullptr) *hit_rate_out = hit_rate;
  std::printf("relay: %llu frames, %.1f MiB in %.2f s: %.0f frames/s, %.1f MiB/s\n", ull(frames),
              mib(bytes), seconds, static_cast<double>(frames) / seconds, mib(bytes) / seconds);
  std::printf("pool: hit rate %.1f%% (%llu hits, %llu misses); %llu kept and %llu freed on "
              "retire; retains %zu buffers, %.1f MiB\n",
              hit_rate, ull(ps.hits), ull(ps.misses), ull(ps.retired), ull(ps.dropped),
              ps.retained, mib(ps.retained_bytes));
  print_class_stats(h.pool().class_stats());
  std::printf("gate: a window per destination of up to %lld units of 64 KiB (share %.2f MiB), "
              "%lld lowest under pressure; %llu frames waited for admission; pressure ticks ok "
              "%llu, soft %llu, hard %llu\n",
              ll(hs.window_max), mib(hs.share), ll(hs.min_window), ull(hs.admit_waits),
              ull(hs.ticks_ok), ull(hs.ticks_soft), ull(hs.ticks_hard));
  if (o.hub.limit != limit_kind::none) {
    std::printf("limit: %s; caps (units of 64 KiB, 1..%lld) averaged over the ticks %.1f in all "
                "windows, %.1f .. %.1f by window, lowest %lld; samples %llu applied, %llu skipped, "
                "%llu ignored; %llu ticks opened a starved window past its limiter, %llu put its cap back\n",
                to_string(o.hub.limit), ll(hs.window_max), hs.limit_mean, hs.limit_mean_low,
                hs.limit_mean_high, ll(hs.limit_lowest), ull(hs.limit_applied), ull(hs.limit_skipped),
                ull(hs.limit_ignored), ull(hs.starved_opened), ull(hs.cap_put_back));
  }
  std::printf("windows: %llu admitted, %llu of them after a wait; %llu refusals and waits ended "
              "by the close; peak in flight %lld of %lld units (one window)\n",
              ull(ws.admitted), ull(ws.admitted_after_wait), ull(ws.closed), ll(ws.peak_in_flight),
              ll(hs.window_max));
  std::printf("hub: peak admitted %.2f MiB in all, %.2f MiB for one destination (bound %.2f MiB); "
              "peak reading %.2f MiB; peak footprint %.2f MiB (admitted, reading and kept by the "
              "pool, per tick), %llu trims; %llu frames from guests written; %llu frames for a "
              "rank cut off, dropped\n",
              mib(hs.peak_held), mib(hs.peak_destination), mib(bound), mib(hs.peak_reading),
              mib(hs.peak_footprint), ull(hs.trims), ull(hs.guest_frames), ull(hs.dropped));
  {
    const auto ms = [](std::chrono::nanoseconds d) { return static_cast<double>(d.count()) / 1e6; };
    const latency_histogram &whole = ctx.sent_to_received, &read = h.read_to_written(),
                            &admitted = h.admitted_to_written();
    std::printf("latency: %llu data frames sent to received (first byte sent to last read) p50 "
                "%.3f ms, p99 %.3f ms, max %.3f ms; in the hub, read whole to written p50 %.3f ms, "
                "p99 %.3f ms; admitted to written p50 %.3f ms, p99 %.3f ms\n",
                ull(whole.count()), ms(whole.percentile(50)), ms(whole.percentile(99)),
                ms(std::chrono::nanoseconds(whole.max())), ms(read.percentile(50)),
                ms(read.percentile(99)), ms(admitted.percentile(50)), ms(admitted.percentile(99)));
    if (o.slow_rate > 0) {
      std::printf("latency: sent to received, to rank 0 (slow) p50 %.3f ms, p99 %.3f ms; to the "
                  "other ranks p50 %.3f ms, p99 %.3f ms\n",
                  ms(ctx.to_rank0.percentile(50)), ms(ctx.to_rank0.percentile(99)),
                  ms(ctx.to_others.percentile(50)), ms(ctx.to_others.percentile(99)));
    }
  }
  std::printf("memory: peak resident %.1f MiB (ru_maxrss), resident now %.1f MiB\n",
              peak_rss_kib() / 1024.0, proc_status_kib("VmRSS") / 1024.0);

  if (frames != sent_total || hs.frames != sent_total) {
    fail(ok, "%llu frames sent, %llu forwarded by the hub, %llu received\n", ull(sent_total),
         ull(hs.frames), ull(frames));
  }
  if (sent_total == 0) fail(ok, "no frame was sent\n");
  // The ownership chain must actually recycle: with a pool that keeps buffers and acquires
  // enough to turn the thread caches over, no hit at all means buffers never went round. A run
  // with no acquires (every frame empty) or a pool that keeps nothing has nothing to check.
  const bool recycles = o.pool != pool_kind::off && o.pool_bound > 0;
  if (recycles && ps.hits == 0 && takes >= 1000) {
    fail(ok, "the pool answered no acquire from a retired buffer\n");
  }
  // A rate over fewer than 1000 acquires says more about the cold start than the pool.
  if (o.min_hit_rate > 0) {
    if (!recycles || takes < 1000) {
      std::printf("pool: --min-hit-rate not checked: %s\n",
                  recycles ? "fewer than 1000 acquires" : "the pool keeps no buffer");
    } else if (hit_rate < o.min_hit_rate) {
      fail(ok, "the pool answered %.1f%% of acquires, below --min-hit-rate=%.0f\n", hit_rate,
           o.min_hit_rate);
    }
  }
  if (ws.peak_in_flight > hs.window_max) {
    fail(ok, "a window reached %lld units in flight, above its cap of %lld\n",
         ll(ws.peak_in_flight), ll(hs.window_max));
  }
  if (hs.peak_destination > bound) {
    fail(ok, "a destination's admitted bytes reached %lld, above the bound of %lld\n",
         ll(hs.peak_destination), ll(bound));
  }
  if (hs.held != 0) fail(ok, "the hub still holds %lld bytes after the run\n", ll(hs.held));
  std::printf("relay: %s\n", ok ? "OK: every frame arrived intact and in order" : "FAILED");
  std::fflush(stdout);
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::signal(SIGPIPE, SIG_IGN);  // a peer gone mid-write is an error to report, not a crash
  // Thousands of connections (--hostile-connections) need the open files the hard limit allows.
  if (rlimit files{}; getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    (void)setrlimit(RLIMIT_NOFILE, &files);
  }
  sluice::pool_options po;
  const options o = parse(argc, argv, po.ceiling);
  po.enabled = o.pool != pool_kind::off;
  po.thread_cache = o.thread_cache;
  po.bound = o.pool_bound;
  try {
    if (o.versus_mutex >= 0) {
      double mutex_rate = 0, pool_rate = 0;
      options twin = o, lockfree = o;
      twin.pool = pool_kind::mutex;
      lockfree.pool = pool_kind::lockfree;
      if (const int status = run<sluice::mutex_pool>(twin, po, &mutex_rate); status != 0) return status;
      if (const int status = run<sluice::pool>(lockfree, po, &pool_rate); status != 0) return status;
      const bool close = pool_rate >= mutex_rate - o.versus_mutex;
      std::printf("relay: sluice::pool's hit rate %.2f%%, mutex_pool's %.2f%%: %s\n", pool_rate, mutex_rate,
                  close ? "within --versus-mutex" : "FAIL: below --versus-mutex");
      return close ? 0 : 1;
    }
    return o.pool == pool_kind::mutex ? run<sluice::mutex_pool>(o, po) : run<sluice::pool>(o, po);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "relay: %s\n", e.what());
    return 2;
  }
}
