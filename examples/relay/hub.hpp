// relay/hub.hpp: the hub, on Asio; README.md describes the design and why. A fixed set of
// threads runs one io_context. Each connection is a reader coroutine (reads frames into pool
// buffers, waits with sluice::async_admit until the destination's window admits a frame's units
// in one step, queues them in the destination's outbox); each rank connection also has a writer
// coroutine (gathered writes of its outbox, each buffer retired as its last byte goes) and every
// connection a watcher (one steady_timer for all its deadlines). A connection's three run on its
// strand. A controller coroutine adjusts the windows and trims the pool every tick. The hub ends
// once every rank has connected and its reader has ended: the windows close and the others' read
// sides are shut down, the outboxes close once no reader is left, the writers write out what is
// queued and shut down their write sides.
//
// Written once for both pool types: Pool is sluice::pool or sluice::mutex_pool.
#pragma once

#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include <asio.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/experimental/concurrent_channel.hpp>
#include <sluice/asio.hpp>
#include <sluice/sluice.hpp>

#include "latency.hpp"
#include "wire.hpp"

namespace relay {

// A fault the hub injects on purpose, to show that the receivers catch it.
enum class fault { none, flip, drop, dup };

// What owns each window's cap: the pressure alone (none), or a sluice::limiter whose latency
// limit comes from one of its algorithms, and whose pressure cap the pressure moves.
enum class limit_kind { none, aimd, vegas, gradient2 };

inline const char* to_string(limit_kind k) noexcept {
  static constexpr const char* names[] = {"none", "aimd", "vegas", "gradient2"};
  return names[static_cast<int>(k)];
}

struct hub_options {
  std::uint32_t ranks = 3;                      // ids 0..ranks-1; any id past them is a guest
  std::size_t budget = std::size_t{16} << 20;   // bytes of buffers at which pressure is hard
  std::chrono::microseconds tick{1000};         // how often the controller adjusts the windows
  std::chrono::milliseconds io_timeout{10000};  // the hello; a frame from its first byte; a write
  std::size_t max_connections = 16384;          // served at once; more wait to be accepted
  unsigned threads = 0;                         // running the io_context; 0: one per core
  fault inject = fault::none;
  std::uint64_t inject_at = 0;  // the fault hits this forwarded non-empty data frame (from 0)
  limit_kind limit = limit_kind::none;  // a latency limit on every window
  std::int64_t limit_window = 1;        // samples its algorithm takes as one (limiter_options)
};

// A gate's unit: a frame takes one per 64 KiB of its buffer's capacity, and at least one.
inline constexpr std::size_t admission_unit = std::size_t{64} << 10;
inline std::int64_t units_for(std::size_t capacity) noexcept {
  return static_cast<std::int64_t>(std::max<std::size_t>(1, (capacity + admission_unit - 1) / admission_unit));
}
// A body is read into a buffer of at most this much at first, which grows (four times at a
// step) as bytes arrive: a sender holds about what it has sent, not what it announced.
inline constexpr std::size_t first_read = admission_unit;

// hard from the budget on, soft from exactly three quarters of it (no rounding), ok below.
inline sluice::pressure pressure_at(std::int64_t bytes, std::int64_t budget) noexcept {
  if (bytes >= budget) return sluice::pressure::hard;
  // 4 * bytes >= 3 * budget, computed without overflow for any budget up to 2^62.
  if (bytes >= budget / 4 * 3 + (budget % 4 * 3 + 3) / 4) return sluice::pressure::soft;
  return sluice::pressure::ok;
}

enum class conn_error_kind {
  bad_hello, duplicate_rank, truncated_header, bad_magic, bad_kind, bad_source, bad_destination,
  oversize, truncated_payload, reset, read_error, timeout, out_of_memory, write_failed, internal
};

inline const char* to_string(conn_error_kind k) noexcept {
  static constexpr const char* names[] = {
      "bad hello", "duplicate rank", "truncated header", "bad magic", "bad kind", "bad source",
      "bad destination", "oversize", "truncated payload", "reset", "read error", "timeout",
      "out of memory", "write failed", "internal"};
  return names[static_cast<int>(k)];
}

struct conn_error {
  std::size_t connection;  // accept order, from 0
  std::int64_t id;         // its rank's or guest's id; -1 before it is one (no valid hello yet,
                           // or a hello naming a rank already connected)
  conn_error_kind kind;
  std::string message;
};

struct hub_stats {
  std::uint64_t connections = 0;   // accepted
  std::uint64_t open = 0;          // being read now (accepted, not yet ended)
  std::uint64_t frames_in = 0;     // data frames read whole and queued
  std::uint64_t frames = 0;        // data frames from ranks written out
  std::uint64_t bytes = 0;         // their payload bytes
  std::uint64_t guest_frames = 0;  // data frames from guests written out
  std::int64_t held = 0;           // admitted buffer bytes (capacities) now: queued or being written
  std::int64_t peak_held = 0;
  std::int64_t peak_destination = 0;  // the most any one destination's admitted bytes reached
  std::int64_t largest_frame = 0;     // the largest buffer capacity admitted
  std::int64_t share = 0;             // each destination's share of the budget
  std::int64_t reading = 0;           // buffer bytes of frames read but not yet admitted
  std::int64_t peak_reading = 0;
  std::int64_t peak_footprint = 0;    // the most held + reading + retained a tick saw
  std::uint64_t trims = 0;            // ticks that trimmed the pool
  std::uint64_t dropped = 0;          // data frames for a rank the hub had cut off
  std::int64_t window_max = 0;        // each window's highest cap, in units
  std::int64_t min_window = 0;        // the lowest cap a soft or hard tick left
  std::uint64_t admit_waits = 0;      // frames that had to wait for their window
  std::uint64_t ticks_ok = 0, ticks_soft = 0, ticks_hard = 0;
  // With a latency limit: the windows' limiters' caps, averaged over the ticks (the lowest and
  // highest window's, and all windows'), the lowest any reached, their samples, and the ticks
  // that opened a starved window on its gate, past its limiter.
  double limit_mean_low = 0, limit_mean_high = 0, limit_mean = 0;
  std::int64_t limit_lowest = 0;
  std::uint64_t limit_applied = 0, limit_skipped = 0, limit_ignored = 0;
  std::uint64_t starved_opened = 0;
  std::uint64_t cap_put_back = 0;  // ticks that set a gate's cap back to its limiter's
};

namespace detail {
inline void raise_to(std::atomic<std::int64_t>& max, std::int64_t v) noexcept {
  std::int64_t seen = max.load(std::memory_order_relaxed);
  while (seen < v && !max.compare_exchange_weak(seen, v, std::memory_order_relaxed)) {
  }
}
}  // namespace detail

template <class Pool>
class hub {
  using clock = std::chrono::steady_clock;
  static constexpr clock::time_point no_deadline = clock::time_point::max();
  // A doorbell: a channel that holds at most one token. (A token carries a bool: Asio 1.22's
  // channel_traits find void(error_code) ambiguous.)
  using token_channel = asio::experimental::concurrent_channel<void(std::error_code, bool)>;
  static auto as_tuple() { return asio::experimental::as_tuple(asio::use_awaitable); }

 public:
  hub(const hub_options& options, const sluice::pool_options& pool_options)
      : options_(options),
        ceiling_(pool_options.ceiling),
        share_(static_cast<std::int64_t>(options.budget / options.ranks)),
        window_max_(std::max<std::int64_t>(1, share_ / static_cast<std::int64_t>(admission_unit))),
        write_check_(std::max<clock::duration>(options.io_timeout / 8, std::chrono::milliseconds(1))),
        timeout_text_(std::to_string(options.io_timeout.count()) + " ms"),
        threads_wanted_(options.threads != 0 ? options.threads
                                             : std::max(1u, std::thread::hardware_concurrency())),
        pool_(pool_options),
        io_(static_cast<int>(threads_wanted_)),
        accept_strand_(asio::make_strand(io_)),
        acceptor_(accept_strand_, {asio::ip::address_v4::loopback(), 0}),
        port_(acceptor_.local_endpoint().port()),
        place_freed_(io_.get_executor(), 1),
        rank_connected_(options.ranks, false),
        min_window_(window_max_) {
    for (std::uint32_t r = 0; r < options.ranks; ++r) {
      outbox& o = outboxes_.emplace_back(io_.get_executor());
      if (options.limit != limit_kind::none) {
        // Limits in the gate's own units (64 KiB), from 1 to the share: unit 1.
        o.limiter.emplace(o.window, algorithm(r),
                          sluice::limiter_options{.min = 1, .max = window_max_,
                                                  .window = options.limit_window, .unit = 1});
      }
    }
  }

  ~hub() { join(); }

  [[nodiscard]] std::uint16_t port() const noexcept { return port_; }
  [[nodiscard]] std::size_t ceiling() const noexcept { return ceiling_; }
  [[nodiscard]] Pool& pool() noexcept { return pool_; }

  void start() {
    asio::co_spawn(accept_strand_, accept_loop(), asio::detached);
    asio::co_spawn(io_, control_loop(), asio::detached);
    for (unsigned i = 0; i < threads_wanted_; ++i) threads_.emplace_back([this] { io_.run(); });
  }

  // Returns once every rank has been served and every connection closed.
  void join() {
    for (auto& t : threads_) t.join();
    threads_.clear();
    // Only a hub that stopped accepting before every rank came has outboxes without a writer:
    // their parcels give back now, while everything they touch is alive.
    for (auto& o : outboxes_) o.clear();
  }

  [[nodiscard]] hub_stats stats() const noexcept {
    const auto get = [](const auto& a) { return a.load(std::memory_order_relaxed); };
    hub_stats s{.connections = get(connections_), .open = get(open_), .frames_in = get(frames_in_),
            .frames = get(frames_), .bytes = get(bytes_), .guest_frames = get(guest_frames_),
            .held = get(held_.now), .peak_held = get(held_.peak),
            .peak_destination = get(peak_destination_), .largest_frame = get(largest_frame_),
            .share = share_, .reading = get(reading_.now), .peak_reading = get(reading_.peak),
            .peak_footprint = get(peak_footprint_), .trims = get(trims_), .dropped = get(dropped_),
            .window_max = window_max_, .min_window = get(min_window_),
            .admit_waits = get(admit_waits_), .ticks_ok = get(ticks_[0]),
            .ticks_soft = get(ticks_[1]), .ticks_hard = get(ticks_[2])};
    if (options_.limit == limit_kind::none) return s;
    const auto ticks = static_cast<double>(std::max<std::uint64_t>(get(limit_ticks_), 1));
    double sum = 0;
    s.limit_mean_low = static_cast<double>(window_max_);
    s.limit_lowest = get(limit_lowest_);
    s.starved_opened = get(starved_opened_);
    s.cap_put_back = get(cap_put_back_);
    for (const outbox& o : outboxes_) {
      const double mean = static_cast<double>(get(o.cap_ticks)) / ticks;
      sum += mean;
      s.limit_mean_low = std::min(s.limit_mean_low, mean);
      s.limit_mean_high = std::max(s.limit_mean_high, mean);
      const sluice::limiter_stats l = o.limiter->stats();
      s.limit_applied += l.applied;
      s.limit_skipped += l.skipped;
      s.limit_ignored += l.ignored;
    }
    s.limit_mean = sum / static_cast<double>(outboxes_.size());
    return s;
  }

  // The frames' latencies, from their last byte read (read whole) or from their admission to
  // their last byte written; data frames only, those written.
  [[nodiscard]] const latency_histogram& read_to_written() const noexcept { return read_to_written_; }
  [[nodiscard]] const latency_histogram& admitted_to_written() const noexcept { return admitted_to_written_; }

  // The windows' gate statistics, summed over the destinations; peak_in_flight is the highest
  // one window reached, in units.
  [[nodiscard]] sluice::gate_stats windows() const noexcept {
    sluice::gate_stats sum;
    for (const outbox& o : outboxes_) {
      const sluice::gate_stats w = o.window.stats();
      sum.admitted += w.admitted;
      sum.admitted_after_wait += w.admitted_after_wait;
      sum.refused += w.refused;
      sum.timed_out += w.timed_out;
      sum.cancelled += w.cancelled;
      sum.closed += w.closed;
      sum.waiting += w.waiting;
      sum.in_flight += w.in_flight;
      sum.peak_in_flight = std::max(sum.peak_in_flight, w.peak_in_flight);
    }
    return sum;
  }

  [[nodiscard]] std::vector<conn_error> errors() const {
    std::lock_guard lk(mu_);
    return errors_;
  }

 private:
  // One accepted connection. Its socket's executor is the connection's strand, on which its
  // reader, writer and watcher run: every field but `rank` is theirs alone. The socket closes
  // when the last of them lets go.
  struct conn {
    conn(asio::ip::tcp::socket s, std::size_t index)
        : socket(std::move(s)), timer(socket.get_executor()), fd(socket.native_handle()),
          index(index) {}

    asio::ip::tcp::socket socket;
    asio::steady_timer timer;  // the watcher's
    const int fd;              // for the hub's ending, which shuts it down from another thread
    const std::size_t index;   // accept order
    std::int64_t id = -1;      // set once its hello is valid
    bool rank = false;         // written under mu_, which the hub's ending reads it under
    bool failed = false;       // reported and closed
    bool reading = true, writing = false;  // its reader and its writer run
    bool read_timed_out = false;
    clock::time_point read_deadline = no_deadline, write_deadline = no_deadline;
    int queued_mark = -1;  // the socket's unacknowledged bytes at the watcher's last look

    // Its reader or writer is done: the watcher ends with the last of them.
    void done(bool& part) {
      part = false;
      if (!reading && !writing) timer.cancel();
    }
  };

  // A counter of bytes with its peak.
  struct gauge {
    std::atomic<std::int64_t> now{0}, peak{0};
    std::int64_t add(std::int64_t n) noexcept {
      const std::int64_t v = now.fetch_add(n, std::memory_order_relaxed) + n;
      detail::raise_to(peak, v);
      return v;
    }
  };

  // When a frame was read whole and admitted, and (for a limiter's sample) its window's count
  // just after its admission, in the gate's units.
  struct frame_times {
    clock::time_point read, admitted;
    std::int64_t in_flight = 0;
  };

  // One frame in flight: its header, its body, and its admission to its destination's window
  // (all its units, one permit). It gives the buffer and the units back exactly once, when
  // released or destroyed, whichever path it took (written, dropped, or abandoned).
  class parcel {
   public:
    parcel(hub& h, const header& head, sluice::buffer body, sluice::permit<sluice::gate> admission,
           const frame_times& times) noexcept
        : head(head), body(std::move(body)), hub_(&h), admission_(std::move(admission)), times_(times) {}
    parcel(parcel&& other) noexcept
        : head(other.head), body(std::move(other.body)), hub_(std::exchange(other.hub_, nullptr)),
          admission_(std::move(other.admission_)), times_(other.times_) {}
    parcel& operator=(parcel&&) = delete;
    ~parcel() { release(sluice::outcome::ignored, clock::time_point{}); }  // unwritten at the hub's end

    // How it ended: done (written, at `now`), dropped (its rank's connection failed) or ignored
    // (nothing learnt of its destination's latency). The buffer goes back to the pool before the
    // units do, so the reader they admit finds it; the frame is timed before, as a limiter does.
    void release(sluice::outcome how, clock::time_point now) noexcept {
      if (hub_ == nullptr) return;
      hub* h = std::exchange(hub_, nullptr);
      h->give_back(head.destination, std::move(body));
      h->finished(head, times_, how, now);
      admission_.release();
    }

    header head;
    sluice::buffer body;

   private:
    hub* hub_;
    sluice::permit<sluice::gate> admission_;
    frame_times times_;
  };

  // What the readers hand one destination's writer: a queue, and the window that bounds it.
  class outbox {
   public:
    explicit outbox(const asio::io_context::executor_type& ex)
        : window(1), doorbell_(ex, 1) {}  // slow start: ok ticks open the window

    void push(parcel&& p) {
      bool ring = false;
      {
        std::lock_guard lk(mu_);
        queue_.push_back(std::move(p));
        ring = std::exchange(writer_waits_, false);
      }
      if (ring) doorbell_.try_send(std::error_code{}, true);
    }
    // Moves up to `most` parcels into `out`, waiting while there are none; false once the
    // outbox is closed and empty.
    asio::awaitable<bool> take(std::vector<parcel>& out, std::size_t most) {
      for (;;) {
        {
          std::lock_guard lk(mu_);
          if (!queue_.empty()) {
            while (!queue_.empty() && out.size() < most) {
              out.push_back(std::move(queue_.front()));
              queue_.pop_front();
            }
            co_return true;
          }
          if (closed_) co_return false;
          writer_waits_ = true;
        }
        co_await doorbell_.async_receive(asio::use_awaitable);  // a token may be stale: look again
      }
    }
    void close() {
      {
        std::lock_guard lk(mu_);
        closed_ = true;
      }
      doorbell_.try_send(std::error_code{}, true);
    }
    void clear() {
      std::deque<parcel> left;
      std::lock_guard lk(mu_);
      left.swap(queue_);
    }

    sluice::gate window;  // units of admission_unit admitted for this destination
    std::optional<sluice::limiter<sluice::gate>> limiter;  // owns the window's cap with --limit
    std::atomic<std::int64_t> cap_ticks{0};  // the limiter's cap summed over the ticks (a mean)
    // With a limiter, the units of the frames waiting for this window, oldest first: what a
    // starved window must open to for the frame at the head of its queue.
    std::mutex waits_mu;
    std::deque<std::int64_t> waits;
    gauge held;           // the capacities of its parcels
    std::atomic<bool> cut_off{false};  // its rank's connection failed: nothing more is queued

   private:
    std::mutex mu_;
    std::deque<parcel> queue_;
    bool writer_waits_ = false;
    bool closed_ = false;
    token_channel doorbell_;  // rung when a waiting writer has something to take
  };

  // ---- admission and the bytes held ----

  // Waits (without blocking a thread) until the frame's destination admits all its units in one
  // step, so a window never passes its cap. A frame larger than the whole window counts as the
  // whole window (its units cut to window_max_): it goes alone, once the window is empty and
  // open (control_loop opens an empty window that a wait is queued on, whatever the pressure).
  // Waits are served first come first served: a large frame is not starved by small ones.
  // Nothing once the windows are closed: the hub is ending, and the frame goes nowhere.
  // With a latency limit the units are cut the same way, to the share, never to the limit of the
  // moment: a frame counted for less than its bytes would break the memory bound once the limit
  // rose. A frame above the limit waits for it; control_loop opens its window if it starves.
  asio::awaitable<std::optional<parcel>> admit(const header& h, sluice::buffer body,
                                               clock::time_point read_at) {
    outbox& to = outboxes_[h.destination];
    const std::int64_t units = std::min(units_for(body.capacity()), window_max_);
    frame_times times{.read = read_at, .admitted = read_at};  // admitted at once: as good as read
    // A try first: async_admit completes through the io_context even when there is room.
    sluice::permit<sluice::gate> admission(to.window, units);
    if (!admission) {
      // Counted as it begins to wait, so that a wait that never ends shows too.
      admit_waits_.fetch_add(1, std::memory_order_relaxed);
      // Woken by a parcel's release, or by the controller opening the window.
      std::error_code ec;
      if (to.limiter) {
        std::lock_guard lk(to.waits_mu);
        to.waits.push_back(units);
      }
      std::tie(ec, admission) = co_await sluice::async_admit(to.window, units, as_tuple());
      if (to.limiter) {
        std::lock_guard lk(to.waits_mu);
        // One entry of these units, whichever: entries of the same units are alike.
        if (const auto it = std::find(to.waits.begin(), to.waits.end(), units); it != to.waits.end()) to.waits.erase(it);
      }
      if (ec) {  // gate_errc::closed: nothing here cancels a wait, and no weight passes gate_limit
        pool_.retire(std::move(body));
        co_return std::nullopt;
      }
      times.admitted = clock::now();
    }
    if (to.limiter) times.in_flight = to.window.in_flight();  // its own units and those before
    const auto capacity = static_cast<std::int64_t>(body.capacity());
    detail::raise_to(peak_destination_, to.held.add(capacity));
    held_.add(capacity);
    detail::raise_to(largest_frame_, capacity);
    co_return std::optional<parcel>(std::in_place, *this, h, std::move(body), std::move(admission), times);
  }

  void give_back(std::uint32_t destination, sluice::buffer&& b) noexcept {
    const auto capacity = static_cast<std::int64_t>(b.capacity());
    outboxes_[destination].held.add(-capacity);
    held_.add(-capacity);
    pool_.retire(std::move(b));
  }

  // A frame's end, before its units go back: a written data frame's latencies, and the
  // limiter's sample (the RTT from admission to the last byte written).
  void finished(const header& h, const frame_times& t, sluice::outcome how, clock::time_point now) noexcept {
    if (how == sluice::outcome::done && h.is(frame_kind::data)) {
      read_to_written_.record(now - t.read);
      admitted_to_written_.record(now - t.admitted);
    }
    if (auto& limiter = outboxes_[h.destination].limiter) {
      limiter->sample(how == sluice::outcome::ignored ? std::chrono::nanoseconds{0} : now - t.admitted,
                      t.in_flight, how);
    }
  }

  sluice::limit_algorithm algorithm(std::uint32_t destination) const {
    // Each algorithm's published defaults, in 64 KiB units, with its bounds the window's: from
    // one unit (Gradient2's default floor of 20 would keep a window at 1.25 MiB) to the share.
    switch (options_.limit) {
      case limit_kind::aimd:
        return sluice::aimd_limit({.initial_limit = std::min<std::int64_t>(10, window_max_),
                                   .min_limit = 1, .max_limit = window_max_});
      case limit_kind::vegas:
        return sluice::vegas_limit({.initial_limit = std::min<std::int64_t>(20, window_max_),
                                    .max_limit = window_max_, .seed = destination + 1u});
      default:
        return sluice::gradient2_limit({.initial_limit = std::min<std::int64_t>(20, window_max_),
                                        .min_limit = 1, .max_limit = window_max_});
    }
  }

  asio::awaitable<void> control_loop() {
    asio::steady_timer tick(co_await asio::this_coro::executor);
    const auto budget = static_cast<std::int64_t>(options_.budget);
    // Set once every outbox is closed: nothing is admitted any more.
    while (!controller_done_.load(std::memory_order_relaxed)) {
      tick.expires_after(options_.tick);
      co_await tick.async_wait(as_tuple());
      // The traffic's bytes move the windows; what the pool keeps is given up first, trimmed
      // whenever it would take the whole footprint to the budget.
      const std::int64_t traffic = held_.now.load(std::memory_order_relaxed) +
                                   reading_.now.load(std::memory_order_relaxed);
      const std::int64_t footprint =
          traffic + static_cast<std::int64_t>(pool_.stats().retained_bytes);
      detail::raise_to(peak_footprint_, footprint);
      if (footprint >= budget) {
        pool_.trim();
        trims_.fetch_add(1, std::memory_order_relaxed);
      }
      const sluice::pressure p = pressure_at(traffic, budget);
      ticks_[static_cast<int>(p)].fetch_add(1, std::memory_order_relaxed);
      if (options_.limit != limit_kind::none) limit_ticks_.fetch_add(1, std::memory_order_relaxed);
      for (outbox& o : outboxes_) {
        // A window with nothing in flight that admits nothing has a wait queued whose weight
        // (at most window_max_) is above its cap: it is starved, and a pressure held up by the
        // frames waiting for admission would keep it so. It opens, a unit a tick, whatever the
        // pressure: what it admits was read already (and counted in reading_).
        const bool starved = o.window.in_flight() == 0 && !o.window.has_capacity();
        if (!o.limiter) {
          o.window.adjust(starved ? sluice::pressure::ok : p, window_max_);
        } else if (starved) {
          // A latency limit moves only on samples, which come from frames written: with none in
          // flight it stays below the waiting frame for ever. So the gate itself opens, past the
          // limiter: at once to what the oldest waiting frame needs, as far as the pressure cap
          // allows (it goes alone, as a frame larger than the window does), and past that by a
          // unit a tick whatever the pressure, as without a limiter. (Two readers that begin to
          // wait at once may be queued in the other order: then the unit a tick ends it.)
          std::int64_t head = 0;
          {
            std::lock_guard lk(o.waits_mu);
            if (!o.waits.empty()) head = o.waits.front();
          }
          const std::int64_t cap = o.window.cap();
          const std::int64_t open = std::min(head, o.limiter->pressure_cap());
          if (open > cap + 1) {
            o.window.set_cap(open);
          } else {
            o.window.adjust(sluice::pressure::ok, window_max_);
          }
          starved_opened_.fetch_add(1, std::memory_order_relaxed);
        } else {
          o.limiter->adjust(p);
          // The limiter sets the gate's cap only when its own cap moves: an opening would last
          // until then. Once the frame it was for is in, the limiter's cap goes back (refresh: in
          // the limiter's turn, so no sample's change comes between).
          if (o.window.cap() != o.limiter->cap() && !o.window.closed()) {  // unit 1: the same units
            o.limiter->refresh();
            cap_put_back_.fetch_add(1, std::memory_order_relaxed);
          }
        }
        if (o.limiter) {
          const std::int64_t c = o.limiter->cap();
          o.cap_ticks.fetch_add(c, std::memory_order_relaxed);
          if (c < limit_lowest_.load(std::memory_order_relaxed)) limit_lowest_.store(c, std::memory_order_relaxed);
        }
        // Relaxed, a statistic; written by this coroutine alone. A closed window's cap reads 0.
        const std::int64_t cap = o.window.cap();
        if (p != sluice::pressure::ok && !starved && cap > 0 &&
            cap < min_window_.load(std::memory_order_relaxed)) {
          min_window_.store(cap, std::memory_order_relaxed);
        }
      }
    }
  }

  // ---- connections ----

  asio::awaitable<void> accept_loop() {
    for (std::size_t index = 0;; ++index) {
      if (!co_await place_for_one()) break;
      auto [ec, socket] = co_await acceptor_.async_accept(asio::make_strand(io_), as_tuple());
      if (ec == asio::error::no_descriptors || ec == asio::error::no_buffer_space ||
          ec == asio::error::no_memory || ec == asio::error::connection_aborted || ec.value() == ENFILE) {
        // Out of files or memory for now: the next waits in the backlog while others end.
        asio::steady_timer pause(co_await asio::this_coro::executor, std::chrono::milliseconds(10));
        co_await pause.async_wait(as_tuple());
        --index;
        continue;
      }
      if (ec) {
        if (!ending()) {  // not the hub's own cancel
          report(index, -1, conn_error_kind::internal,
                 "accept failed, accepting no more: " + ec.message());
        }
        break;
      }
      connections_.fetch_add(1, std::memory_order_relaxed);
      try {
        auto c = std::make_shared<conn>(std::move(socket), index);
        {
          std::lock_guard lk(mu_);
          if (ending_) continue;  // came after the ranks were done: nothing to serve it for
          links_.push_back(c);
        }
        open_.fetch_add(1, std::memory_order_relaxed);
        c->socket.set_option(asio::ip::tcp::no_delay(true), ec);
        c->socket.non_blocking(true, ec);  // read_full and write_out try without waiting first
        asio::co_spawn(c->socket.get_executor(), serve(c), asio::detached);
      } catch (const std::exception& e) {
        report(index, -1, conn_error_kind::internal, std::string("not served: ") + e.what());
      }
    }
    std::error_code ignored;
    acceptor_.close(ignored);  // later connections are refused
    std::lock_guard lk(mu_);
    accepting_ = false;
    close_outboxes_if_done();
  }

  // Waits while max_connections are read (the next waits in the listen backlog meanwhile: an
  // idle one holds its place only until its hello's deadline); false once the hub is ending.
  asio::awaitable<bool> place_for_one() {
    for (;;) {
      {
        std::lock_guard lk(mu_);
        if (ending_) co_return false;
        if (links_.size() < options_.max_connections) co_return true;
        waiting_for_place_ = true;
      }
      co_await place_freed_.async_receive(asio::use_awaitable);
    }
  }

  asio::awaitable<void> serve(std::shared_ptr<conn> c) {
    asio::co_spawn(c->socket.get_executor(), watch(c), asio::detached);
    try {
      std::array<std::byte, hello_bytes> raw;
      c->read_deadline = clock::now() + options_.io_timeout;
      const auto [ec, got] = co_await asio::async_read(c->socket, asio::buffer(raw), as_tuple());
      c->read_deadline = no_deadline;
      std::uint32_t claimed = 0;
      if (got < raw.size()) {
        if (!c->failed && !ending()) {
          fail(*c, c->read_timed_out ? conn_error_kind::timeout : conn_error_kind::bad_hello,
               "the peer sent " + std::to_string(got) + " of the hello's " +
                   std::to_string(hello_bytes) + " bytes" + (c->read_timed_out ? " in " + timeout_text_ : ""));
        }
      } else if (!decode_hello(raw.data(), claimed)) {
        fail(*c, conn_error_kind::bad_hello, "the hello is not a relay hello");
      } else if (claimed < options_.ranks && !claim_rank(c, claimed)) {
        fail(*c, conn_error_kind::duplicate_rank,
             "rank " + std::to_string(claimed) + " is already connected");
      } else {
        if (claimed >= options_.ranks) c->id = claimed;  // a rank's is set by claim_rank
        co_await pump(*c);
      }
    } catch (const std::exception& e) {
      fail(*c, conn_error_kind::internal, e.what());
    }
    c->done(c->reading);
    unlink(*c);
  }

  // Records a rank's connection and starts its writer; false if the rank is already connected.
  bool claim_rank(const std::shared_ptr<conn>& c, std::uint32_t r) {
    {
      std::lock_guard lk(mu_);
      if (rank_connected_[r]) return false;
      rank_connected_[r] = true;
      c->rank = true;
    }
    c->id = r;
    c->writing = true;
    asio::co_spawn(c->socket.get_executor(), write_out(c, r), asio::detached);
    return true;
  }

  // The reader is done with this connection (a rank's socket stays open for its writer). The
  // last rank's reader ending ends the hub (see the file's head).
  void unlink(conn& c) {
    open_.fetch_sub(1, std::memory_order_relaxed);
    std::lock_guard lk(mu_);
    std::erase_if(links_, [&](const std::shared_ptr<conn>& p) { return p.get() == &c; });
    if (std::exchange(waiting_for_place_, false)) place_freed_.try_send(std::error_code{}, true);
    if (c.rank && ++ranks_done_ == options_.ranks) {
      ending_ = true;
      // No rank sends any more. The windows close: a guest's reader waiting for admission ends
      // at once (gate_errc::closed) and drops its frame, as a frame cut off mid-read is; what
      // was admitted still goes out (a closed gate still counts note_done down).
      for (auto& o : outboxes_) o.window.close();
      asio::post(accept_strand_, [this] {
        std::error_code ignored;
        acceptor_.cancel(ignored);  // ends a pending accept; the loop sees ending_ before another
      });
      place_freed_.try_send(std::error_code{}, true);  // or its wait for a place
      for (const auto& p : links_) {
        if (!p->rank) ::shutdown(p->fd, SHUT_RD);  // its reader reads EOF
      }
    }
    close_outboxes_if_done();
  }

  // No reader is left and none will come (mu_ held): what is queued is all there is.
  void close_outboxes_if_done() {
    if (accepting_ || !links_.empty() || outboxes_closed_) return;
    outboxes_closed_ = true;
    for (auto& o : outboxes_) o.close();
    controller_done_.store(true, std::memory_order_relaxed);
  }

  bool ending() const {
    std::lock_guard lk(mu_);
    return ending_;
  }

  // Watches a connection's deadlines with its timer, until its reader and writer are done. A
  // read past its deadline is ended by shutting down the read side (the reader reads EOF and,
  // seeing read_timed_out, reports it); a write that has made no progress for io_timeout fails
  // the connection. Progress is the peer taking bytes: the write completing, or the socket's
  // queue of unacknowledged bytes (SIOCOUTQ) shrinking, which can happen long before the socket
  // polls writable (a third of its buffer free), so the watcher looks every io_timeout / 8.
  asio::awaitable<void> watch(std::shared_ptr<conn> c) {
    while (c->reading || c->writing) {
      const auto now = clock::now();
      if (c->read_deadline <= now) {
        c->read_deadline = no_deadline;
        c->read_timed_out = true;
        ::shutdown(c->fd, SHUT_RD);
      }
      auto next = c->read_deadline;
      if (c->write_deadline != no_deadline) {
        int queued = 0;
        if (::ioctl(c->fd, SIOCOUTQ, &queued) == 0) {
          if (c->queued_mark >= 0 && queued < c->queued_mark) c->write_deadline = now + options_.io_timeout;
          c->queued_mark = queued;
        }
        if (c->write_deadline <= now) {
          c->write_deadline = no_deadline;
          fail(*c, conn_error_kind::write_failed,
               "writing to rank " + std::to_string(c->id) + ": it took no byte in " +
                   timeout_text_);
        } else {
          next = std::min({next, c->write_deadline, now + write_check_});
        }
      }
      // With nothing due, look again in io_timeout: a deadline set meanwhile is later than that.
      c->timer.expires_at(next != no_deadline ? next : now + options_.io_timeout);
      co_await c->timer.async_wait(as_tuple());  // cancelled early by conn::done
    }
  }

  // Reads frames from one connection until its peer closes (the normal end) or sends something
  // the hub will not route; then the connection is closed and the others go on.
  asio::awaitable<void> pump(conn& c) {
    const auto id = static_cast<std::uint32_t>(c.id);
    std::array<std::byte, header_bytes> raw;
    for (std::uint64_t n = 0;; ++n) {
      const auto bad = [&](conn_error_kind kind, const std::string& what) {
        fail(c, kind, "frame " + std::to_string(n) + ": " + what);
      };
      // A rank may be quiet between frames as long as it likes; a guest for io_timeout, so that
      // quiet guests cannot hold the hub's connections (max_connections) from the ranks.
      c.read_deadline = c.rank ? no_deadline : clock::now() + options_.io_timeout;
      std::error_code ec;
      std::size_t got = c.socket.read_some(asio::buffer(raw), ec);
      if (ec == asio::error::would_block) {
        std::tie(ec, got) = co_await c.socket.async_read_some(asio::buffer(raw), as_tuple());
      }
      c.read_deadline = clock::now() + options_.io_timeout;  // the frame is due whole by then
      if (!ec && got < raw.size()) {
        const auto [rest_ec, rest] = co_await read_full(c, asio::buffer(raw) + got);
        got += rest;
        ec = rest_ec;
      }
      if (got < raw.size()) {
        const std::string where =
            std::to_string(got) + " of " + std::to_string(header_bytes) + " header bytes";
        if (c.failed || (got == 0 && !c.read_timed_out && (ec == asio::error::eof || ending()))) {
          co_return;  // reported, or the peer or the hub ended it
        }
        if (c.read_timed_out) {
          bad(conn_error_kind::timeout, got == 0 ? "a guest quiet for " + timeout_text_
                                                 : "not whole in " + timeout_text_ + ": " + where);
        } else if (ec != asio::error::eof) {
          bad(read_error_kind(ec), ec.message() + " after " + where);
        } else if (!ending()) {
          bad(conn_error_kind::truncated_header, "the peer closed after " + where);
        }
        co_return;
      }
      const header h = decode(raw.data());
      if (h.magic != frame_magic) {
        char hex[16];
        std::snprintf(hex, sizeof hex, "0x%08x", static_cast<unsigned>(h.magic));
        co_return bad(conn_error_kind::bad_magic,
                      std::string("magic ") + hex + " is not a relay frame's");
      }
      if (!h.is(frame_kind::data) && !(h.is(frame_kind::end) && h.length == 0)) {
        co_return bad(conn_error_kind::bad_kind,
                      "kind " + std::to_string(h.kind) + " with length " + std::to_string(h.length));
      }
      if (h.source != id) {
        co_return bad(conn_error_kind::bad_source, "source " + std::to_string(h.source) +
                                                       " on the connection of " + std::to_string(id));
      }
      if (h.destination >= options_.ranks || h.destination == id) {
        co_return bad(conn_error_kind::bad_destination,
                      "destination " + std::to_string(h.destination) + " is not another rank");
      }
      // A destination the hub has cut off: a guest that sends to it is closed; a rank's frame
      // for it is read and dropped (counted), and the rank served on, so that one failed rank
      // does not take down every rank that sends to it.
      const bool cut_off = outboxes_[h.destination].cut_off.load(std::memory_order_relaxed);
      if (cut_off && !c.rank) {
        co_return bad(conn_error_kind::bad_destination,
                      "rank " + std::to_string(h.destination) + "'s connection has been closed");
      }
      if (h.length > ceiling_) {
        co_return bad(conn_error_kind::oversize, "announces " + std::to_string(h.length) +
                                                     " payload bytes, above the ceiling of " +
                                                     std::to_string(ceiling_));
      }
      // The frame's buffer counts as being read until its destination has admitted it.
      reading_bytes counted{reading_};
      std::optional<sluice::buffer> body;
      try {
        body = co_await read_body(c, h, counted);
      } catch (const std::bad_alloc&) {
        bad(conn_error_kind::out_of_memory,
            "no memory for " + std::to_string(h.length) + " payload bytes");
        co_return;
      }
      c.read_deadline = no_deadline;  // waiting for admission is not reading
      if (!body) co_return;  // reported
      if (cut_off) {
        dropped_.fetch_add(h.is(frame_kind::data), std::memory_order_relaxed);
        pool_.retire(std::move(*body));
        continue;
      }
      std::optional<parcel> p = co_await admit(h, std::move(*body), clock::now());
      if (!p) co_return;  // the windows are closed: every rank is done, and so is this reader
      counted.set(0);  // held now, by the parcel
      frames_in_.fetch_add(h.is(frame_kind::data), std::memory_order_relaxed);
      outboxes_[h.destination].push(std::move(*p));
    }
  }

  // The bytes of the buffer a reader holds outside any window, in reading_.
  struct reading_bytes {
    gauge& g;
    std::int64_t n = 0;
    void set(std::int64_t v) noexcept { g.add(v - std::exchange(n, v)); }
    ~reading_bytes() { g.add(-n); }
  };

  // Reads a frame's body whole by the read deadline, into a buffer that grows as bytes arrive.
  // Nothing (the failure reported) if the peer stops short, the read fails or the deadline passes.
  asio::awaitable<std::optional<sluice::buffer>> read_body(conn& c, const header& h,
                                                          reading_bytes& counted) {
    sluice::buffer body;
    std::size_t got = 0;
    while (got < h.length) {
      if (got == body.size()) {  // full (or not yet there): a larger buffer, the bytes carried
        sluice::buffer larger = pool_.acquire(std::min<std::size_t>(
            h.length, std::max(first_read, 4 * body.size())));
        if (got != 0) std::memcpy(larger.data(), body.data(), got);
        counted.set(static_cast<std::int64_t>(larger.capacity()));
        pool_.retire(std::exchange(body, std::move(larger)));
      }
      const auto [ec, n] = co_await read_full(c, asio::buffer(body.data() + got, body.size() - got));
      got += n;
      if (!ec) continue;
      const std::string where = " after " + std::to_string(got) + " of " +
                                std::to_string(h.length) + " payload bytes (serial " +
                                std::to_string(h.serial) + ")";
      if (c.failed) {
        // Reported.
      } else if (c.read_timed_out) {
        fail(c, conn_error_kind::timeout, "not whole in " + timeout_text_ + where);
      } else if (ec == asio::error::eof) {
        if (!ending()) fail(c, conn_error_kind::truncated_payload, "the peer closed" + where);
      } else {
        fail(c, read_error_kind(ec), ec.message() + where);
      }
      pool_.retire(std::move(body));
      co_return std::nullopt;
    }
    co_return std::optional<sluice::buffer>(std::move(body));
  }

  // Fills b: with what the socket holds now, without a trip through the io_context, and
  // asynchronously for the rest. The bytes read, and the error that stopped it short.
  asio::awaitable<std::tuple<std::error_code, std::size_t>> read_full(conn& c, asio::mutable_buffer b) {
    std::error_code ec;
    std::size_t got = 0;
    while (got < b.size() && !ec) got += c.socket.read_some(b + got, ec);
    if (ec != asio::error::would_block) co_return std::tuple(ec, got);
    const auto [rest_ec, rest] = co_await asio::async_read(c.socket, b + got, as_tuple());
    co_return std::tuple(rest_ec, got + rest);
  }

  static conn_error_kind read_error_kind(const std::error_code& ec) noexcept {
    return ec == asio::error::connection_reset ? conn_error_kind::reset : conn_error_kind::read_error;
  }

  // Writes one rank's outbox to its connection until the outbox closes: up to max_batch frames
  // in one gathered write, each retired the moment its last byte is written. After a failed
  // write it keeps emptying the outbox, dropping, so that admissions come back.
  static constexpr std::size_t max_batch = 16;  // 2 pieces a frame, 4 for a duplicate: <= 64
  asio::awaitable<void> write_out(std::shared_ptr<conn> c, std::uint32_t rank) {
    outbox& box = outboxes_[rank];
    std::vector<parcel> batch;
    std::vector<asio::const_buffer> pieces;
    std::array<std::array<std::byte, header_bytes>, max_batch> heads;
    std::array<std::size_t, max_batch> ends{};  // where each parcel's bytes end in the batch
    std::array<int, max_batch> copies{};
    bool broken = false;
    try {
      while (co_await box.take(batch, max_batch)) {
        pieces.clear();
        std::size_t total = 0;
        for (std::size_t i = 0; i < batch.size(); ++i) {
          parcel& p = batch[i];
          copies[i] = broken ? 0 : 1;
          if (broken && p.head.is(frame_kind::data)) dropped_.fetch_add(1, std::memory_order_relaxed);
          if (!broken && options_.inject != fault::none && p.head.is(frame_kind::data) &&
              p.head.length != 0 &&
              injected_.fetch_add(1, std::memory_order_relaxed) == options_.inject_at) {
            copies[i] = inject(p);
          }
          encode(p.head, heads[i].data());
          for (int k = 0; k < copies[i]; ++k) {
            pieces.emplace_back(heads[i].data(), header_bytes);
            pieces.emplace_back(p.body.data(), p.head.length);
            total += header_bytes + p.head.length;
          }
          ends[i] = total;
        }
        std::size_t retired = 0;
        const auto retire_through = [&](std::size_t written) {
          if (retired == batch.size() || ends[retired] > written) return;
          const auto now = clock::now();  // one reading for the frames this write completed
          for (; retired < batch.size() && ends[retired] <= written; ++retired) {
            const header& h = batch[retired].head;
            if (copies[retired] > 0 && h.is(frame_kind::data)) {
              (h.source < options_.ranks ? frames_ : guest_frames_)
                  .fetch_add(static_cast<std::uint64_t>(copies[retired]), std::memory_order_relaxed);
              if (h.source < options_.ranks) bytes_.fetch_add(h.length, std::memory_order_relaxed);
            }
            // Its write is complete: the buffer goes back now. Not written: dropped after a failed
            // write; left out by --inject=drop, which says nothing of the rank's latency.
            batch[retired].release(copies[retired] > 0 ? sluice::outcome::done
                                   : broken             ? sluice::outcome::dropped
                                                        : sluice::outcome::ignored,
                                   now);
          }
        };
        // What the socket takes at once, without a trip through the io_context; then the rest.
        std::error_code ec;
        const std::size_t at_once = c->socket.write_some(pieces, ec);
        retire_through(at_once);
        if (at_once < total && (!ec || ec == asio::error::would_block)) {
          std::size_t left = at_once, whole = 0;  // step past what was written
          for (; whole < pieces.size() && left >= pieces[whole].size(); ++whole) left -= pieces[whole].size();
          pieces.erase(pieces.begin(), pieces.begin() + static_cast<std::ptrdiff_t>(whole));
          if (!pieces.empty()) pieces.front() += left;
          // Called as each write_some completes (and first with 0): progress restarts the deadline.
          const auto progress = [&](const std::error_code& e, std::size_t written) -> std::size_t {
            retire_through(at_once + written);
            // The watcher may be asleep for up to io_timeout: the first call wakes it to plan
            // from this write's start, so that what the peer takes from now on counts.
            if (std::exchange(c->write_deadline, clock::now() + options_.io_timeout) == no_deadline) c->timer.cancel();
            c->queued_mark = -1;
            return e ? 0 : total;
          };
          std::size_t n = 0;
          std::tie(ec, n) = co_await asio::async_write(c->socket, pieces, progress, as_tuple());
          c->write_deadline = no_deadline;
          retire_through(at_once + n);
        }
        if (ec) {
          if (!c->failed) {
            fail(*c, conn_error_kind::write_failed,
                 "writing to rank " + std::to_string(rank) + ": " + ec.message());
          }
          broken = true;
          box.cut_off.store(true, std::memory_order_relaxed);
          const auto now = clock::now();
          for (; retired < batch.size(); ++retired) batch[retired].release(sluice::outcome::dropped, now);
        }
        batch.clear();
      }
    } catch (const std::exception& e) {
      fail(*c, conn_error_kind::internal, e.what());
    }
    ::shutdown(c->fd, SHUT_WR);  // the rank reads EOF: everything for it has been written
    c->done(c->writing);
  }

  // Applies the --inject fault to this frame; returns how many times to write it.
  int inject(parcel& p) const {
    const header& h = p.head;
    if (options_.inject == fault::flip) p.body.data()[h.length / 2] ^= std::byte{0x20};
    const int copies = options_.inject == fault::drop ? 0 : options_.inject == fault::dup ? 2 : 1;
    const std::string what = options_.inject == fault::flip
                                 ? "flipped a bit of byte " + std::to_string(h.length / 2) + " of"
                                 : copies == 0 ? "dropped" : "duplicated";
    std::fprintf(stderr, "hub: injected fault: %s frame (source %u, serial %llu) to rank %u\n",
                 what.c_str(), h.source, static_cast<unsigned long long>(h.serial),
                 h.destination);
    return copies;
  }

  // Reports a connection's failure, once, and closes it both ways: its reader reads no more,
  // and a rank's writer finds its writes failing (and empties its outbox without writing).
  void fail(conn& c, conn_error_kind kind, std::string message) {
    if (std::exchange(c.failed, true)) return;  // the reader, writer and watcher share a strand
    ::shutdown(c.fd, SHUT_RDWR);
    std::error_code ignored;
    c.socket.cancel(ignored);
    report(c.index, c.id, kind, std::move(message));
  }
  void report(std::size_t index, std::int64_t id, conn_error_kind kind, std::string message) {
    std::string who = id < 0                 ? std::string("unidentified")
                      : id < options_.ranks  ? "rank " + std::to_string(id)
                                             : "guest " + std::to_string(id);
    std::fprintf(stderr, "hub: connection %zu (%s): %s: %s; closing this connection\n", index,
                 who.c_str(), to_string(kind), message.c_str());
    std::lock_guard lk(mu_);
    errors_.push_back({index, id, kind, std::move(message)});
  }

  const hub_options options_;
  const std::size_t ceiling_;
  const std::int64_t share_;       // each destination's share of the budget, in bytes
  const std::int64_t window_max_;  // the share in units: every window's highest cap
  const clock::duration write_check_;
  const std::string timeout_text_;  // io_timeout, for messages
  const unsigned threads_wanted_;
  Pool pool_;  // declared before the outboxes: parcels still queued retire into it
  asio::io_context io_;
  asio::strand<asio::io_context::executor_type> accept_strand_;
  asio::ip::tcp::acceptor acceptor_;
  const std::uint16_t port_;
  token_channel place_freed_;   // rung when a reader ends while the acceptor waits for a place
  std::deque<outbox> outboxes_;  // one per rank

  mutable std::mutex mu_;  // guards everything below up to outboxes_closed_
  std::vector<conn_error> errors_;
  std::vector<std::shared_ptr<conn>> links_;  // connections whose reader runs
  std::vector<bool> rank_connected_;
  std::uint32_t ranks_done_ = 0;  // ranks whose reader has ended
  bool ending_ = false;           // every rank is done: accept no more, end the other readers
  bool accepting_ = true;
  bool waiting_for_place_ = false;
  bool outboxes_closed_ = false;

  // Every atomic below, and cut_off above, is a counter or a flag that publishes no data
  // (parcels travel through the outboxes under their mutex, connections under mu_): relaxed,
  // synchronizing with nothing. A reader that reads cut_off late queues a frame that the broken
  // writer then drops and counts; the controller that reads controller_done_ late ticks once more.
  std::atomic<std::int64_t> peak_destination_{0}, largest_frame_{0}, peak_footprint_{0}, min_window_;
  std::atomic<std::int64_t> limit_lowest_{window_max_};  // the lowest cap a limiter set at a tick
  std::atomic<std::uint64_t> limit_ticks_{0}, starved_opened_{0}, cap_put_back_{0};
  latency_histogram read_to_written_, admitted_to_written_;
  gauge held_, reading_;  // buffer bytes admitted; buffer bytes being read, not yet admitted
  std::atomic<std::uint64_t> connections_{0}, open_{0}, frames_in_{0}, frames_{0}, bytes_{0},
      guest_frames_{0}, admit_waits_{0}, injected_{0}, trims_{0}, dropped_{0};
  std::array<std::atomic<std::uint64_t>, 3> ticks_{};
  std::atomic<bool> controller_done_{false};

  std::vector<std::thread> threads_;
};

}  // namespace relay
