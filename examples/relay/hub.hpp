// relay/hub.hpp: the hub. Every connection gets a pump, a thread that reads its frames into pool
// buffers and queues each in its destination's outbox; every rank connection also gets a drain,
// a thread that writes its outbox out and retires each buffer the moment its write completes.
//
// Admission is per destination and counted in bytes. Each destination has its own sluice::gate,
// a window counted in units of 64 KiB whose cap grows to the destination's share of the budget
// (budget / ranks). A pump reads a frame whole, then waits until the destination's window has
// room (admit() takes one unit, note_submitted() counts the frame's other units, which may pass
// the cap), then queues it. So a destination that reads slowly, or not at all, stops only the
// pumps with frames for it; every other destination goes on. A controller moves every window's
// cap by the pressure of the traffic's bytes (admitted or being read) against the budget, and
// trims the pool whenever what it keeps would take the hub's buffers to the budget.
//
// Deadlines: a connection must send its hello within io_timeout, a frame must arrive whole
// within io_timeout of its first byte, and a guest may be quiet between frames for io_timeout
// (a rank for as long as it likes); a rank whose socket takes no byte for io_timeout is cut off,
// and frames for it are then dropped. A connection that fails any check is closed (both
// directions) and reported once; the others are served on. At most max_connections are served
// at once; more wait in the listen backlog.
//
// Written once for both pool types: Pool is sluice::pool or sluice::mutex_pool.
//
// Shutdown needs no timing: the hub ends when every rank has connected and its pump has ended
// (the rank sent EOF, or failed). It then stops accepting, ends the other connections' pumps
// (their read sides are shut down), closes every outbox, and each drain writes out what its
// outbox holds and shuts down its socket's write side, which the rank reads as EOF.
#pragma once

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <sluice/sluice.hpp>

#include "wire.hpp"

namespace relay {

// A fault the hub injects on purpose, to show that the receivers catch it.
enum class fault { none, flip, drop, dup };

struct hub_options {
  std::uint32_t ranks = 3;                      // ids 0..ranks-1; any id past them is a guest
  std::size_t budget = std::size_t{16} << 20;   // bytes of buffers at which pressure is hard
  std::chrono::microseconds tick{1000};         // how often the controller adjusts the windows
  std::chrono::milliseconds io_timeout{10000};  // the hello; a frame from its first byte; a write
  std::size_t max_connections = 1024;           // served at once; more wait to be accepted
  fault inject = fault::none;
  std::uint64_t inject_at = 0;  // the fault hits this forwarded non-empty data frame (from 0)
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
  switch (k) {
    case conn_error_kind::bad_hello: return "bad hello";
    case conn_error_kind::duplicate_rank: return "duplicate rank";
    case conn_error_kind::truncated_header: return "truncated header";
    case conn_error_kind::bad_magic: return "bad magic";
    case conn_error_kind::bad_kind: return "bad kind";
    case conn_error_kind::bad_source: return "bad source";
    case conn_error_kind::bad_destination: return "bad destination";
    case conn_error_kind::oversize: return "oversize";
    case conn_error_kind::truncated_payload: return "truncated payload";
    case conn_error_kind::reset: return "reset";
    case conn_error_kind::read_error: return "read error";
    case conn_error_kind::timeout: return "timeout";
    case conn_error_kind::out_of_memory: return "out of memory";
    case conn_error_kind::write_failed: return "write failed";
    case conn_error_kind::internal: return "internal";
  }
  return "?";
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
  std::uint64_t admit_waits = 0;      // frames whose pump had to wait for their window
  std::uint64_t ticks_ok = 0, ticks_soft = 0, ticks_hard = 0;
};

namespace detail {
inline void raise_to(std::atomic<std::int64_t>& max, std::int64_t v) noexcept {
  std::int64_t seen = max.load(std::memory_order_relaxed);
  while (seen < v && !max.compare_exchange_weak(seen, v, std::memory_order_relaxed)) {
  }
}
inline void lower_to(std::atomic<std::int64_t>& min, std::int64_t v) noexcept {
  std::int64_t seen = min.load(std::memory_order_relaxed);
  while (seen > v && !min.compare_exchange_weak(seen, v, std::memory_order_relaxed)) {
  }
}
}  // namespace detail

template <class Pool>
class hub {
 public:
  hub(const hub_options& options, const sluice::pool_options& pool_options)
      : options_(options),
        ceiling_(pool_options.ceiling),
        share_(static_cast<std::int64_t>(options.budget / options.ranks)),
        window_max_(std::max<std::int64_t>(1, share_ / static_cast<std::int64_t>(admission_unit))),
        pool_(pool_options),
        outboxes_(options.ranks),
        rank_connected_(options.ranks, false),
        min_window_(window_max_) {
    listen_fd_ = listen_loopback(port_);
  }

  ~hub() {
    join();
    if (listen_fd_ >= 0) ::close(listen_fd_);
  }

  hub(const hub&) = delete;
  hub& operator=(const hub&) = delete;

  [[nodiscard]] std::uint16_t port() const noexcept { return port_; }
  [[nodiscard]] std::size_t ceiling() const noexcept { return ceiling_; }
  [[nodiscard]] Pool& pool() noexcept { return pool_; }

  void start() {
    acceptor_ = std::thread([this] { accept_loop(); });
    controller_ = std::thread([this] { control_loop(); });
  }

  // Returns once every rank has been served and every connection closed.
  void join() {
    if (acceptor_.joinable()) acceptor_.join();
    {
      std::lock_guard lk(control_mu_);
      stopping_ = true;
    }
    control_cv_.notify_all();
    if (controller_.joinable()) controller_.join();
  }

  [[nodiscard]] hub_stats stats() const noexcept {
    constexpr auto r = std::memory_order_relaxed;
    hub_stats s;
    s.connections = connections_.load(r);
    s.frames_in = frames_in_.load(r);
    s.frames = frames_.load(r);
    s.bytes = bytes_.load(r);
    s.guest_frames = guest_frames_.load(r);
    s.held = held_.load(r);
    s.peak_held = peak_held_.load(r);
    s.peak_destination = peak_destination_.load(r);
    s.largest_frame = largest_frame_.load(r);
    s.share = share_;
    s.reading = reading_.now.load(r);
    s.peak_reading = reading_.peak.load(r);
    s.peak_footprint = peak_footprint_.load(r);
    s.window_max = window_max_;
    s.min_window = min_window_.load(r);
    s.admit_waits = admit_waits_.load(r);
    s.trims = trims_.load(r);
    s.dropped = dropped_.load(r);
    s.ticks_ok = ticks_[0].load(r);
    s.ticks_soft = ticks_[1].load(r);
    s.ticks_hard = ticks_[2].load(r);
    return s;
  }

  [[nodiscard]] std::vector<conn_error> errors() const {
    std::lock_guard lk(mu_);
    return errors_;
  }

 private:
  // One accepted connection, as the pump, the drain and the hub's ending see it. The socket
  // closes when the last of them lets go.
  struct link {
    link(int fd, std::size_t index) noexcept : fd(fd), index(index) {}
    link(const link&) = delete;
    link& operator=(const link&) = delete;
    ~link() { ::close(fd); }

    const int fd;
    const std::size_t index;       // accept order
    std::int64_t id = -1;          // set once its hello is valid
    bool rank = false;             // guarded by mu_
    std::atomic<bool> failed{false};  // reported and closed: the drain reports no more
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

  // One frame in flight: its header, its body, and the units of its destination's window it
  // holds. It gives the buffer and the units back exactly once, when released or destroyed,
  // whichever path it took (written, dropped, or abandoned).
  class parcel {
   public:
    parcel(hub& h, const header& head, sluice::buffer body, std::int64_t units) noexcept
        : head(head), body(std::move(body)), hub_(&h), units_(units) {}
    parcel(parcel&& other) noexcept
        : head(other.head), body(std::move(other.body)), hub_(std::exchange(other.hub_, nullptr)),
          units_(other.units_) {}
    parcel& operator=(parcel&&) = delete;
    ~parcel() { release(); }

    void release() noexcept {
      if (hub_ != nullptr) std::exchange(hub_, nullptr)->give_back(head.destination, std::move(body), units_);
    }

    header head;
    sluice::buffer body;

   private:
    hub* hub_;
    std::int64_t units_;
  };

  // What the pumps hand one destination's drain: a queue, and the window that bounds it.
  class outbox {
   public:
    outbox() : window(1) {}  // slow start: ok ticks open the window to its share

    void push(parcel&& p) {
      {
        std::lock_guard lk(mu_);
        queue_.push_back(std::move(p));
      }
      cv_.notify_one();
    }
    // The next parcel, or nothing once the outbox is closed and empty.
    std::optional<parcel> pop() {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [&] { return !queue_.empty() || closed_; });
      if (queue_.empty()) return std::nullopt;
      std::optional<parcel> p{std::move(queue_.front())};
      queue_.pop_front();
      return p;
    }
    void close() {
      {
        std::lock_guard lk(mu_);
        closed_ = true;
      }
      cv_.notify_all();
    }

    std::mutex admitting;  // one pump at a time counts a frame's units (see admit())
    sluice::gate window;   // units of admission_unit admitted for this destination
    gauge held;           // the capacities of its parcels
    std::atomic<bool> cut_off{false};  // its rank's connection failed: nothing more is queued

   private:
    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<parcel> queue_;
    bool closed_ = false;
  };

  // ---- admission and the bytes held ----

  // Blocks the calling pump until the frame's destination has room, then counts all the
  // frame's units there: one through admit(), which waits while the window is full, the rest
  // through note_submitted(), which never refuses. So a window passes its cap by at most one
  // frame, and a frame larger than the whole window still goes, alone. The destination's
  // admitting mutex makes the two steps one for the other pumps: without it, a second pump could
  // take its first unit between the first pump's admit() and its note_submitted()s, and two
  // large frames would pass the cap.
  parcel admit(const header& h, sluice::buffer body) {
    outbox& to = outboxes_[h.destination];
    const std::int64_t units = units_for(body.capacity());
    {
      // A frame that waits is counted as it begins to wait (once), so that a wait that never
      // ends shows too.
      bool waits = false;
      const auto note_wait = [&] {
        if (!std::exchange(waits, true)) admit_waits_.fetch_add(1, std::memory_order_relaxed);
      };
      std::unique_lock lk(to.admitting, std::try_to_lock);
      if (!lk.owns_lock()) {  // another pump is admitting: this one waits behind it
        note_wait();
        lk.lock();
      }
      if (!to.window.try_admit()) {
        note_wait();
        to.window.admit();  // woken by give_back's note_done, or by the controller opening it
      }
      for (std::int64_t u = 1; u < units; ++u) to.window.note_submitted();
    }
    const auto capacity = static_cast<std::int64_t>(body.capacity());
    detail::raise_to(peak_destination_, to.held.add(capacity));
    detail::raise_to(peak_held_, held_.fetch_add(capacity, std::memory_order_relaxed) + capacity);
    detail::raise_to(largest_frame_, capacity);
    return parcel(*this, h, std::move(body), units);
  }

  // The buffer goes back to the pool before the units do, so the pump that they wake finds it
  // there.
  void give_back(std::uint32_t destination, sluice::buffer&& b, std::int64_t units) noexcept {
    const auto capacity = static_cast<std::int64_t>(b.capacity());
    outboxes_[destination].held.add(-capacity);
    held_.fetch_sub(capacity, std::memory_order_relaxed);
    pool_.retire(std::move(b));
    for (std::int64_t u = 0; u < units; ++u) outboxes_[destination].window.note_done();
  }

  void control_loop() {
    std::unique_lock lk(control_mu_);
    const auto budget = static_cast<std::int64_t>(options_.budget);
    while (!control_cv_.wait_for(lk, options_.tick, [&] { return stopping_; })) {
      // The traffic's bytes move the windows; what the pool keeps is given up first, trimmed
      // whenever it would take the whole footprint to the budget.
      const std::int64_t traffic = held_.load(std::memory_order_relaxed) +
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
      for (outbox& o : outboxes_) {
        o.window.adjust(p, window_max_);
        if (p != sluice::pressure::ok) detail::lower_to(min_window_, o.window.cap());
      }
    }
  }

  // ---- connections ----

  void accept_loop() {
    std::map<std::size_t, std::thread> served;  // by accept index
    // Joins the threads whose connections have ended, so that connections that come and go do
    // not pile up finished threads.
    const auto reap = [&](std::vector<std::size_t> done) {
      for (const std::size_t i : done) {
        served.at(i).join();
        served.erase(i);
      }
    };
    for (std::size_t index = 0;; ++index) {
      {
        // At most max_connections at once: the next waits in the listen backlog meanwhile (an
        // idle one holds its place only until its hello's deadline).
        std::unique_lock lk(mu_);
        slots_.wait(lk, [&] { return links_.size() < options_.max_connections || ending_; });
        if (ending_) break;
        std::vector<std::size_t> done = std::exchange(finished_, {});
        lk.unlock();
        reap(std::move(done));
      }
      int fd = -1;
      do {
        fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      } while (fd < 0 && (errno == EINTR || errno == ECONNABORTED));
      if (fd < 0) {
        std::unique_lock lk(mu_);
        if (!ending_) {  // not the hub's own shutdown of the listening socket
          const int e = errno;
          lk.unlock();
          fail_unlinked(index, conn_error_kind::internal,
                        std::string("accept failed, accepting no more: ") + std::strerror(e));
        }
        break;
      }
      connections_.fetch_add(1, std::memory_order_relaxed);
      auto l = std::make_shared<link>(fd, index);
      {
        std::lock_guard lk(mu_);
        if (ending_) continue;  // came after the ranks were done: nothing to serve it for
        links_.push_back(l);
      }
      set_nodelay(fd);
      try {
        served.emplace(index, std::thread([this, l] { serve(*l); }));
      } catch (const std::exception& e) {
        fail(*l, conn_error_kind::internal, std::string("no thread: ") + e.what());
        unlink(*l);
        std::lock_guard lk(mu_);
        std::erase(finished_, index);
      }
    }
    for (auto& [index, t] : served) t.join();
    for (auto& o : outboxes_) o.close();  // no pump is left: what is queued is all there is
    for (auto& t : drains_) t.join();
    // Only a hub that stopped accepting before every rank came has outboxes without a drain:
    // their parcels give back now, while everything they touch is alive.
    for (auto& o : outboxes_) {
      while (o.pop()) {
      }
    }
  }

  void serve(link& l) {
    try {
      std::array<std::byte, hello_bytes> raw;
      const io_result r = read_exact_until(l.fd, raw.data(), raw.size(),
                                           std::chrono::steady_clock::now() + options_.io_timeout);
      std::uint32_t claimed = 0;
      if (r.done < raw.size()) {
        if (!ending()) {
          fail(l, r.error == ETIMEDOUT ? conn_error_kind::timeout : conn_error_kind::bad_hello,
               "the peer sent " + std::to_string(r.done) + " of the hello's " +
                   std::to_string(hello_bytes) + " bytes" +
                   (r.error == ETIMEDOUT ? " in " + std::to_string(options_.io_timeout.count()) + " ms"
                                         : std::string()));
        }
      } else if (!decode_hello(raw.data(), claimed)) {
        fail(l, conn_error_kind::bad_hello, "the hello is not a relay hello");
      } else if (claimed < options_.ranks && !claim_rank(l, claimed)) {
        fail(l, conn_error_kind::duplicate_rank,
             "rank " + std::to_string(claimed) + " is already connected");
      } else {
        if (claimed >= options_.ranks) l.id = claimed;  // a rank's is set by claim_rank
        pump(l);
      }
    } catch (const std::exception& e) {
      fail(l, conn_error_kind::internal, e.what());
    }
    unlink(l);
  }

  // Records a rank's connection and starts its drain; false if the rank is already connected.
  // Throws (the rank left unclaimed) if the drain's thread cannot start.
  bool claim_rank(link& l, std::uint32_t r) {
    std::lock_guard lk(mu_);
    if (rank_connected_[r]) return false;
    l.id = r;  // before the drain, which reads it, starts
    try {
      // The drain keeps the link (and so the socket) until it ends.
      drains_.emplace_back([this, keep = find(l), r] { drain(*keep, r); });
    } catch (...) {
      l.id = -1;
      throw;
    }
    rank_connected_[r] = true;
    l.rank = true;
    return true;
  }

  std::shared_ptr<link> find(const link& l) const {  // mu_ held
    for (const auto& p : links_) {
      if (p.get() == &l) return p;
    }
    return nullptr;
  }

  // The pump is done with this connection (a rank's socket stays open for its drain). The
  // last rank's pump ending ends the hub (see the file's head).
  void unlink(link& l) {
    std::lock_guard lk(mu_);
    std::erase_if(links_, [&](const std::shared_ptr<link>& p) { return p.get() == &l; });
    finished_.push_back(l.index);
    slots_.notify_one();
    if (l.rank && ++ranks_done_ == options_.ranks) {
      ending_ = true;
      ::shutdown(listen_fd_, SHUT_RDWR);  // wakes the accept loop
      slots_.notify_one();                // or its wait for a place
      for (const auto& p : links_) {
        if (!p->rank) ::shutdown(p->fd, SHUT_RD);  // its pump reads EOF
      }
    }
  }

  bool ending() const {
    std::lock_guard lk(mu_);
    return ending_;
  }

  // Reads frames from one connection until its peer closes (the normal end) or sends something
  // the hub will not route; then the connection is closed and the others go on.
  void pump(link& l) {
    const auto id = static_cast<std::uint32_t>(l.id);
    for (std::uint64_t n = 0;; ++n) {
      const auto bad = [&](conn_error_kind kind, const std::string& what) {
        fail(l, kind, "frame " + std::to_string(n) + ": " + what);
      };
      std::array<std::byte, header_bytes> raw;
      // A rank may be quiet between frames as long as it likes; a guest for io_timeout, so that
      // quiet guests cannot hold the hub's connections (max_connections) from the ranks.
      io_result r = l.rank ? read_exact(l.fd, raw.data(), 1)
                           : read_exact_until(l.fd, raw.data(), 1,
                                              std::chrono::steady_clock::now() + options_.io_timeout);
      const auto deadline = std::chrono::steady_clock::now() + options_.io_timeout;
      if (r.done == 1) {
        const io_result rest = read_exact_until(l.fd, raw.data() + 1, raw.size() - 1, deadline);
        r = {1 + rest.done, rest.error};
      }
      if (r.done == 0 && (r.error == 0 || ending())) return;  // the peer or the hub ended it
      if (r.done == 0 && r.error == ETIMEDOUT) {
        bad(conn_error_kind::timeout, "a guest quiet for " +
                                          std::to_string(options_.io_timeout.count()) + " ms");
        return;
      }
      if (r.done < raw.size()) {
        if (r.error == 0 && ending()) return;  // the hub cut it short: nothing to report
        if (r.error == 0) {
          bad(conn_error_kind::truncated_header,
              "the peer closed after " + std::to_string(r.done) + " of " +
                  std::to_string(header_bytes) + " header bytes");
        } else {
          bad(read_error_kind(r.error), std::string(std::strerror(r.error)) + " after " +
                                            std::to_string(r.done) + " of " +
                                            std::to_string(header_bytes) + " header bytes");
        }
        return;
      }
      const header h = decode(raw.data());
      if (h.magic != frame_magic) {
        char hex[16];
        std::snprintf(hex, sizeof hex, "0x%08x", static_cast<unsigned>(h.magic));
        bad(conn_error_kind::bad_magic, std::string("magic ") + hex + " is not a relay frame's");
        return;
      }
      if (!h.is(frame_kind::data) && !(h.is(frame_kind::end) && h.length == 0)) {
        bad(conn_error_kind::bad_kind,
            "kind " + std::to_string(h.kind) + " with length " + std::to_string(h.length));
        return;
      }
      if (h.source != id) {
        bad(conn_error_kind::bad_source,
            "source " + std::to_string(h.source) + " on the connection of " + std::to_string(id));
        return;
      }
      if (h.destination >= options_.ranks || h.destination == id) {
        bad(conn_error_kind::bad_destination,
            "destination " + std::to_string(h.destination) + " is not another rank");
        return;
      }
      // A destination the hub has cut off: a guest that sends to it is closed; a rank's frame
      // for it is read and dropped (counted), and the rank served on, so that one failed rank
      // does not take down every rank that sends to it.
      const bool cut_off = outboxes_[h.destination].cut_off.load(std::memory_order_relaxed);
      if (cut_off && !l.rank) {
        bad(conn_error_kind::bad_destination, "rank " + std::to_string(h.destination) +
                                                  "'s connection has been closed");
        return;
      }
      if (h.length > ceiling_) {
        bad(conn_error_kind::oversize, "announces " + std::to_string(h.length) +
                                           " payload bytes, above the ceiling of " +
                                           std::to_string(ceiling_));
        return;
      }
      // The frame's buffer counts as being read until its destination has admitted it.
      reading_bytes counted{reading_};
      std::optional<sluice::buffer> body;
      try {
        body = read_body(l, h, deadline, counted);
      } catch (const std::bad_alloc&) {
        bad(conn_error_kind::out_of_memory,
            "no memory for " + std::to_string(h.length) + " payload bytes");
        return;
      }
      if (!body) return;  // reported
      if (cut_off) {
        dropped_.fetch_add(h.is(frame_kind::data), std::memory_order_relaxed);
        pool_.retire(std::move(*body));
        continue;
      }
      frames_in_.fetch_add(h.is(frame_kind::data), std::memory_order_relaxed);
      parcel p = admit(h, std::move(*body));
      counted.set(0);  // held now, by the parcel
      outboxes_[h.destination].push(std::move(p));
    }
  }

  // The bytes of the buffer a pump holds outside any window, in reading_.
  struct reading_bytes {
    gauge& g;
    std::int64_t n = 0;
    void set(std::int64_t v) noexcept { g.add(v - std::exchange(n, v)); }
    ~reading_bytes() { g.add(-n); }
  };

  // Reads a frame's body whole by the deadline, into a buffer that grows as bytes arrive. Nothing
  // (the failure reported) if the peer stops short, the read fails or the deadline passes.
  std::optional<sluice::buffer> read_body(link& l, const header& h,
                                          std::chrono::steady_clock::time_point deadline,
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
      const io_result r = read_exact_until(l.fd, body.data() + got, body.size() - got, deadline);
      got += r.done;
      if (got == body.size()) continue;
      const std::string where = " after " + std::to_string(got) + " of " +
                                std::to_string(h.length) + " payload bytes (serial " +
                                std::to_string(h.serial) + ")";
      if (r.error == 0 && ending()) {
        // The hub cut it short: nothing to report.
      } else if (r.error == 0) {
        fail(l, conn_error_kind::truncated_payload, "the peer closed" + where);
      } else {
        fail(l, read_error_kind(r.error), std::strerror(r.error) + where);
      }
      pool_.retire(std::move(body));
      return std::nullopt;
    }
    return body;
  }

  static conn_error_kind read_error_kind(int error) noexcept {
    return error == ETIMEDOUT    ? conn_error_kind::timeout
           : error == ECONNRESET ? conn_error_kind::reset
                                 : conn_error_kind::read_error;
  }

  // Writes one rank's outbox to its connection until the outbox closes.
  void drain(link& l, std::uint32_t rank) {
    bool broken = false;
    while (std::optional<parcel> p = outboxes_[rank].pop()) {
      int copies = broken ? 0 : 1;
      if (broken && p->head.is(frame_kind::data)) dropped_.fetch_add(1, std::memory_order_relaxed);
      if (!broken && options_.inject != fault::none && p->head.is(frame_kind::data) &&
          p->head.length != 0 &&
          injected_.fetch_add(1, std::memory_order_relaxed) == options_.inject_at) {
        copies = inject(*p);
      }
      for (int c = 0; c < copies; ++c) {
        std::array<std::byte, header_bytes> raw;
        encode(p->head, raw.data());
        if (const int err = write_all(l.fd, raw, p->body.bytes(), options_.io_timeout); err != 0) {
          fail(l, conn_error_kind::write_failed,
               std::string("writing to rank ") + std::to_string(rank) + ": " +
                   (err == ETIMEDOUT
                        ? "it took no byte in " + std::to_string(options_.io_timeout.count()) + " ms"
                        : std::string(std::strerror(err))));
          broken = true;  // keep emptying the outbox so that admissions come back
          outboxes_[rank].cut_off.store(true, std::memory_order_relaxed);
          break;
        }
        if (p->head.is(frame_kind::data)) {
          (p->head.source < options_.ranks ? frames_ : guest_frames_)
              .fetch_add(1, std::memory_order_relaxed);
          if (p->head.source < options_.ranks) {
            bytes_.fetch_add(p->head.length, std::memory_order_relaxed);
          }
        }
      }
      p->release();  // the write is complete: the buffer goes back to the pool now
    }
    ::shutdown(l.fd, SHUT_WR);  // the rank reads EOF: everything for it has been written
  }

  // Applies the --inject fault to this frame; returns how many times to write it.
  int inject(parcel& p) const {
    const header& h = p.head;
    int copies = 1;
    std::string what;
    switch (options_.inject) {
      case fault::flip:
        p.body.data()[h.length / 2] ^= std::byte{0x20};
        what = "flipped a bit of byte " + std::to_string(h.length / 2) + " of";
        break;
      case fault::drop:
        copies = 0;
        what = "dropped";
        break;
      case fault::dup:
        copies = 2;
        what = "duplicated";
        break;
      case fault::none:
        break;
    }
    std::fprintf(stderr, "hub: injected fault: %s frame (source %u, serial %llu) to rank %u\n",
                 what.c_str(), h.source, static_cast<unsigned long long>(h.serial),
                 h.destination);
    return copies;
  }

  // Reports a connection's failure, once, and closes it both ways: its pump reads no more, and
  // a rank's drain finds its writes failing (and empties its outbox without writing).
  void fail(link& l, conn_error_kind kind, std::string message) {
    // The pump and the drain may both find the connection broken: the first reports it.
    if (l.failed.exchange(true, std::memory_order_relaxed)) return;
    ::shutdown(l.fd, SHUT_RDWR);
    report(l.index, l.id, kind, std::move(message));
  }
  void fail_unlinked(std::size_t index, conn_error_kind kind, std::string message) {
    report(index, -1, kind, std::move(message));
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
  Pool pool_;  // declared before the outboxes: parcels still queued retire into it
  std::vector<outbox> outboxes_;   // one per rank

  mutable std::mutex mu_;  // guards everything below up to ending_
  std::vector<conn_error> errors_;
  std::vector<std::shared_ptr<link>> links_;  // connections whose pump runs
  std::vector<std::size_t> finished_;         // accept indices whose serve() is ending
  std::condition_variable slots_;             // links_ shrank, or the hub is ending
  std::vector<bool> rank_connected_;
  std::vector<std::thread> drains_;
  std::uint32_t ranks_done_ = 0;  // ranks whose pump has ended
  bool ending_ = false;           // every rank is done: accept no more, end the other pumps

  std::mutex control_mu_;
  std::condition_variable control_cv_;
  bool stopping_ = false;

  // Every atomic below, and cut_off and failed above, is a counter or a flag that publishes no
  // data (parcels travel through the outboxes under their mutex, links under mu_): relaxed,
  // synchronizing with nothing. A pump that reads cut_off late queues a frame that the broken
  // drain then drops and counts.
  std::atomic<std::int64_t> held_{0}, peak_held_{0}, peak_destination_{0}, largest_frame_{0},
      peak_footprint_{0}, min_window_;
  gauge reading_;
  std::atomic<std::uint64_t> connections_{0}, frames_in_{0}, frames_{0}, bytes_{0},
      guest_frames_{0}, admit_waits_{0}, injected_{0}, trims_{0}, dropped_{0};
  std::array<std::atomic<std::uint64_t>, 3> ticks_{};

  int listen_fd_ = -1;
  std::uint16_t port_ = 0;
  std::thread acceptor_, controller_;
};

}  // namespace relay
