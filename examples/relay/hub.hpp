// relay/hub.hpp: the hub. Every connection gets a pump, a thread that reads its frames into pool
// buffers and queues each in the destination's mailbox; every rank connection also gets a
// drain, a thread that writes its mailbox out and retires each buffer the moment its write
// completes. A sluice::gate bounds the frames in flight (read, not yet written): a pump that
// finds no capacity stops reading its connection, so a slow receiver slows the senders instead
// of growing memory. A controller moves the gate's cap by the bytes the hub holds against a
// budget.
//
// Written once for both pool types: Pool is sluice::pool or sluice::mutex_pool.
//
// Shutdown needs no timing: a pump ends at its peer's EOF (or at bad input); when the last of
// the expected connections' pumps has ended, every mailbox closes; a drain ends when its mailbox
// is closed and empty, and shuts down its socket's write side, which the rank reads as EOF.
#pragma once

#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
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
  std::uint32_t ranks = 3;
  std::uint32_t guests = 0;  // extra connections to accept: ids ranks .. ranks + guests - 1
  std::size_t budget = std::size_t{16} << 20;  // bytes in flight at which pressure turns hard
  std::int64_t max_in_flight = 64;              // the gate's cap never rises above this
  std::chrono::microseconds tick{1000};         // how often the controller adjusts the cap
  fault inject = fault::none;
  std::uint64_t inject_at = 0;  // the fault hits this forwarded non-empty data frame (from 0)
};

enum class conn_error_kind {
  bad_hello, duplicate_rank, truncated_header, bad_magic, bad_kind, bad_source, bad_destination,
  oversize, truncated_payload, reset, read_error, out_of_memory, write_failed, internal
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
    case conn_error_kind::out_of_memory: return "out of memory";
    case conn_error_kind::write_failed: return "write failed";
    case conn_error_kind::internal: return "internal";
  }
  return "?";
}

struct conn_error {
  std::size_t connection;  // accept order, from 0
  std::int64_t id;         // the id its hello claimed; -1 when there was no valid hello
  conn_error_kind kind;
  std::string message;
};

struct hub_stats {
  std::uint64_t frames = 0;  // data frames written out
  std::uint64_t bytes = 0;   // their payload bytes
  std::int64_t peak_in_flight = 0;
  std::int64_t cap = 0;
  std::int64_t min_cap = 0;  // the lowest cap a soft or hard tick left (max_in_flight if none)
  std::int64_t held = 0;       // payload buffer bytes (capacities) in flight now
  std::int64_t peak_held = 0;
  std::uint64_t admit_waits = 0;  // frames whose pump had to wait for the gate
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
        pool_(pool_options),
        gate_(1),  // slow start: ok ticks raise the cap, so the budget holds from the first frame
        mailboxes_(options.ranks),
        rank_connected_(options.ranks, false),
        open_pumps_(options.ranks + options.guests),
        min_cap_(options.max_in_flight) {
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

  // Returns once every expected connection has been served and closed.
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
    hub_stats s;
    s.frames = frames_.load(std::memory_order_relaxed);
    s.bytes = bytes_.load(std::memory_order_relaxed);
    s.peak_in_flight = peak_in_flight_.load(std::memory_order_relaxed);
    s.cap = gate_.cap();
    s.min_cap = min_cap_.load(std::memory_order_relaxed);
    s.held = held_.load(std::memory_order_relaxed);
    s.peak_held = peak_held_.load(std::memory_order_relaxed);
    s.admit_waits = admit_waits_.load(std::memory_order_relaxed);
    s.ticks_ok = ticks_[0].load(std::memory_order_relaxed);
    s.ticks_soft = ticks_[1].load(std::memory_order_relaxed);
    s.ticks_hard = ticks_[2].load(std::memory_order_relaxed);
    return s;
  }

  [[nodiscard]] std::vector<conn_error> errors() const {
    std::lock_guard lk(errors_mu_);
    return errors_;
  }

 private:
  // One frame in flight: it holds one admission of the gate and the frame's pool buffer. It
  // gives both back exactly once, when released or destroyed, whichever path it took (written,
  // dropped, or abandoned because its connection failed mid-frame).
  class parcel {
   public:
    parcel(hub& h, const header& head) noexcept : head(head), hub_(&h) {}
    parcel(parcel&& other) noexcept
        : head(other.head), body(std::move(other.body)), hub_(std::exchange(other.hub_, nullptr)) {}
    parcel& operator=(parcel&&) = delete;
    ~parcel() { release(); }

    void hold(sluice::buffer b) noexcept {
      body = std::move(b);
      hub_->note_held(static_cast<std::int64_t>(body.capacity()));
    }
    void release() noexcept {
      if (hub_ != nullptr) std::exchange(hub_, nullptr)->give_back(std::move(body));
    }

    header head;
    sluice::buffer body;

   private:
    hub* hub_;
  };

  // The queue between the pumps and one destination's drain.
  class mailbox {
   public:
    void push(parcel&& p) {
      {
        std::lock_guard lk(mu_);
        queue_.push_back(std::move(p));
      }
      cv_.notify_one();
    }
    // The next parcel, or nothing once the mailbox is closed and empty.
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

   private:
    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<parcel> queue_;
    bool closed_ = false;
  };

  // ---- the gate and the bytes held ----

  // Blocks the calling pump until the gate admits one more frame.
  void admit() {
    if (!gate_.try_admit()) {
      admit_waits_.fetch_add(1, std::memory_order_relaxed);
      gate_.admit();  // woken by give_back's note_done, or by the control loop raising the cap
    }
    detail::raise_to(peak_in_flight_, gate_.in_flight());
  }

  void note_held(std::int64_t bytes) noexcept {
    detail::raise_to(peak_held_, held_.fetch_add(bytes, std::memory_order_relaxed) + bytes);
  }

  // The buffer goes back to the pool before the admission does, so the pump that the admission
  // wakes finds it there.
  void give_back(sluice::buffer&& b) noexcept {
    held_.fetch_sub(static_cast<std::int64_t>(b.capacity()), std::memory_order_relaxed);
    pool_.retire(std::move(b));
    gate_.note_done();
  }

  void control_loop() {
    std::unique_lock lk(control_mu_);
    const auto budget = static_cast<std::int64_t>(options_.budget);
    while (!control_cv_.wait_for(lk, options_.tick, [&] { return stopping_; })) {
      const std::int64_t held = held_.load(std::memory_order_relaxed);
      const sluice::pressure p = held >= budget           ? sluice::pressure::hard
                                 : held >= budget / 4 * 3 ? sluice::pressure::soft
                                                          : sluice::pressure::ok;
      ticks_[static_cast<int>(p)].fetch_add(1, std::memory_order_relaxed);
      gate_.adjust(p, options_.max_in_flight);
      const std::int64_t after = gate_.cap();
      if (p != sluice::pressure::ok) detail::lower_to(min_cap_, after);
    }
  }

  // ---- connections ----

  void accept_loop() {
    std::vector<std::thread> served;
    const std::size_t expected = std::size_t{options_.ranks} + options_.guests;
    for (std::size_t index = 0; index < expected; ++index) {
      int fd = -1;
      do {
        fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      } while (fd < 0 && errno == EINTR);
      if (fd < 0) {
        fail(index, -1, conn_error_kind::internal,
             std::string("accept failed: ") + std::strerror(errno));
        for (; index < expected; ++index) pump_finished();  // they will never come
        break;
      }
      set_nodelay(fd);
      try {
        served.emplace_back([this, fd, index] { serve(fd, index); });
      } catch (const std::exception& e) {
        fail(index, -1, conn_error_kind::internal, std::string("no thread: ") + e.what());
        ::close(fd);
        pump_finished();
      }
    }
    ::close(listen_fd_);
    listen_fd_ = -1;
    for (auto& t : served) t.join();
  }

  void serve(int fd, std::size_t index) {
    std::int64_t id = -1;
    std::thread drain_thread;
    try {
      std::array<std::byte, hello_bytes> raw;
      const io_result r = read_exact(fd, raw.data(), raw.size());
      std::uint32_t claimed = 0;
      if (r.done < raw.size()) {
        fail(index, -1, conn_error_kind::bad_hello,
             "the peer sent " + std::to_string(r.done) + " of the hello's " +
                 std::to_string(hello_bytes) + " bytes");
      } else if (!decode_hello(raw.data(), claimed) ||
                 claimed >= options_.ranks + options_.guests) {
        fail(index, -1, conn_error_kind::bad_hello, "the hello is not a relay hello");
      } else if (claimed < options_.ranks && !claim_rank(claimed)) {
        fail(index, claimed, conn_error_kind::duplicate_rank,
             "rank " + std::to_string(claimed) + " is already connected");
      } else {
        id = claimed;
        if (claimed < options_.ranks) {
          drain_thread = std::thread([this, fd, index, claimed] { drain(fd, index, claimed); });
        }
        pump(fd, index, claimed);
      }
    } catch (const std::exception& e) {
      fail(index, id, conn_error_kind::internal, e.what());
    }
    pump_finished();
    if (drain_thread.joinable()) drain_thread.join();
    ::close(fd);
  }

  bool claim_rank(std::uint32_t r) {
    std::lock_guard lk(errors_mu_);
    if (rank_connected_[r]) return false;
    rank_connected_[r] = true;
    return true;
  }

  void pump_finished() {
    bool last = false;
    {
      std::lock_guard lk(errors_mu_);
      last = --open_pumps_ == 0;
    }
    if (last) {
      for (auto& m : mailboxes_) m.close();
    }
  }

  // Reads frames from one connection until its peer closes (the normal end) or sends something
  // the hub will not route; then the connection is closed and the others go on.
  void pump(int fd, std::size_t index, std::uint32_t id) {
    const auto bad = [&](conn_error_kind kind, std::uint64_t frame, const std::string& what) {
      fail(index, id, kind, "frame " + std::to_string(frame) + ": " + what);
    };
    for (std::uint64_t n = 0;; ++n) {
      std::array<std::byte, header_bytes> raw;
      io_result r = read_exact(fd, raw.data(), raw.size());
      if (r.error != 0) {
        bad(r.error == ECONNRESET ? conn_error_kind::reset : conn_error_kind::read_error, n,
            std::string(std::strerror(r.error)) + " after " + std::to_string(r.done) + " of " +
                std::to_string(header_bytes) + " header bytes");
        return;
      }
      if (r.done == 0) return;  // the peer closed between frames: the normal end
      if (r.done < raw.size()) {
        bad(conn_error_kind::truncated_header, n,
            "the peer closed after " + std::to_string(r.done) + " of " +
                std::to_string(header_bytes) + " header bytes");
        return;
      }
      const header h = decode(raw.data());
      if (h.magic != frame_magic) {
        char hex[16];
        std::snprintf(hex, sizeof hex, "0x%08x", static_cast<unsigned>(h.magic));
        bad(conn_error_kind::bad_magic, n, std::string("magic ") + hex + " is not a relay frame's");
        return;
      }
      if (!h.is(frame_kind::data) && !(h.is(frame_kind::end) && h.length == 0)) {
        bad(conn_error_kind::bad_kind, n,
            "kind " + std::to_string(h.kind) + " with length " + std::to_string(h.length));
        return;
      }
      if (h.source != id) {
        bad(conn_error_kind::bad_source, n,
            "source " + std::to_string(h.source) + " on the connection of " + std::to_string(id));
        return;
      }
      if (h.destination >= options_.ranks || h.destination == id) {
        bad(conn_error_kind::bad_destination, n,
            "destination " + std::to_string(h.destination) + " is not another rank");
        return;
      }
      if (h.length > ceiling_) {
        bad(conn_error_kind::oversize, n,
            "announces " + std::to_string(h.length) + " payload bytes, above the ceiling of " +
                std::to_string(ceiling_));
        return;
      }
      admit();  // stops reading this connection while the gate has no capacity
      parcel p(*this, h);
      if (h.length != 0) {
        try {
          p.hold(pool_.acquire(h.length));
        } catch (const std::bad_alloc&) {
          bad(conn_error_kind::out_of_memory, n,
              "no memory for " + std::to_string(h.length) + " payload bytes");
          return;
        }
        r = read_exact(fd, p.body.data(), h.length);
        if (r.done < h.length) {  // p gives its buffer and admission back as it goes
          const std::string where = " after " + std::to_string(r.done) + " of " +
                                    std::to_string(h.length) + " payload bytes (serial " +
                                    std::to_string(h.serial) + ")";
          if (r.error == 0) {
            bad(conn_error_kind::truncated_payload, n, "the peer closed" + where);
          } else {
            bad(r.error == ECONNRESET ? conn_error_kind::reset : conn_error_kind::read_error, n,
                std::strerror(r.error) + where);
          }
          return;
        }
      }
      mailboxes_[h.destination].push(std::move(p));
    }
  }

  // Writes one rank's mailbox to its connection until the mailbox closes.
  void drain(int fd, std::size_t index, std::uint32_t rank) {
    bool broken = false;
    while (std::optional<parcel> p = mailboxes_[rank].pop()) {
      int copies = 1;
      if (options_.inject != fault::none && p->head.is(frame_kind::data) && p->head.length != 0 &&
          injected_.fetch_add(1, std::memory_order_relaxed) == options_.inject_at) {
        copies = inject(*p);
      }
      for (int c = 0; c < copies && !broken; ++c) {
        std::array<std::byte, header_bytes> raw;
        encode(p->head, raw.data());
        if (const int err = write_all(fd, raw, p->body.bytes()); err != 0) {
          fail(index, rank, conn_error_kind::write_failed,
               std::string("writing to rank ") + std::to_string(rank) + ": " + std::strerror(err));
          broken = true;  // keep emptying the mailbox so that admissions come back
        } else if (p->head.is(frame_kind::data)) {
          frames_.fetch_add(1, std::memory_order_relaxed);
          bytes_.fetch_add(p->head.length, std::memory_order_relaxed);
        }
      }
      p->release();  // the write is complete: the buffer goes back to the pool now
    }
    ::shutdown(fd, SHUT_WR);  // the rank reads EOF: everything for it has been written
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

  void fail(std::size_t index, std::int64_t id, conn_error_kind kind, std::string message) {
    std::string who = id < 0                 ? std::string("unidentified")
                      : id < options_.ranks  ? "rank " + std::to_string(id)
                                             : "guest " + std::to_string(id);
    std::fprintf(stderr, "hub: connection %zu (%s): %s: %s; closing this connection\n", index,
                 who.c_str(), to_string(kind), message.c_str());
    std::lock_guard lk(errors_mu_);
    errors_.push_back({index, id, kind, std::move(message)});
  }

  const hub_options options_;
  const std::size_t ceiling_;
  Pool pool_;  // declared before the mailboxes: parcels still queued retire into it
  sluice::gate gate_;
  std::vector<mailbox> mailboxes_;

  mutable std::mutex errors_mu_;  // guards errors_, rank_connected_, open_pumps_
  std::vector<conn_error> errors_;
  std::vector<bool> rank_connected_;
  std::size_t open_pumps_;

  std::mutex control_mu_;
  std::condition_variable control_cv_;
  bool stopping_ = false;

  std::atomic<std::int64_t> held_{0}, peak_held_{0}, peak_in_flight_{0}, min_cap_;
  std::atomic<std::uint64_t> frames_{0}, bytes_{0}, admit_waits_{0}, injected_{0};
  std::array<std::atomic<std::uint64_t>, 3> ticks_{};

  int listen_fd_ = -1;
  std::uint16_t port_ = 0;
  std::thread acceptor_, controller_;
};

}  // namespace relay
