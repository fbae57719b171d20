// The hub against hostile and unlucky clients: one case per defect an adversarial review found
// (issue 16), each driving the hub in this process over loopback with raw clients that misbehave
// on purpose. Every wait is for a condition, bounded by a deadline; a case that would hang on a
// broken hub fails at its deadline instead, and its clean-up (closing the clients) lets the hub
// end.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <functional>
#include <future>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "doctest.hpp"
#include "hub.hpp"
#include "rank.hpp"
#include "wire.hpp"

using namespace relay;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

namespace {

// The hub these cases run: the example's own, over sluice::pool, with its default deadlines
// (10 s), which no case reaches but the one that waits for them.
hub_options options(std::uint32_t ranks) {
  hub_options o;
  o.ranks = ranks;
  return o;
}

// A raw TCP client of the hub.
class client {
 public:
  explicit client(std::uint16_t port) : fd_(connect_loopback(port)) {}
  ~client() { close(); }
  client(const client&) = delete;
  client& operator=(const client&) = delete;

  void hello(std::uint32_t id) {
    std::array<std::byte, hello_bytes> raw;
    encode_hello(id, raw.data());
    REQUIRE(write_all(fd_, raw) == 0);
  }
  // A well-formed data frame: the payload is the pattern every receiver checks. 0 or an errno.
  int send(std::uint32_t source, std::uint32_t destination, std::uint64_t serial,
           std::size_t length) {
    std::vector<std::byte> frame(header_bytes + length);
    header h;
    h.source = source;
    h.destination = destination;
    h.serial = serial;
    h.length = length;
    encode(h, frame.data());
    fill_payload(source, serial, std::span(frame).subspan(header_bytes));
    return write_all(fd_, frame);
  }
  int send_raw(std::span<const std::byte> bytes) { return write_all(fd_, bytes); }

  // Waits until the socket is readable (data, EOF or an error) or the deadline passes.
  bool readable_by(clock_type::time_point deadline) const {
    for (;;) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - clock_type::now());
      pollfd p{fd_, POLLIN, 0};
      const int n = ::poll(&p, 1, static_cast<int>(std::max<std::int64_t>(left.count(), 0)));
      if (n > 0) return true;
      if (n == 0) return false;
    }
  }
  // The next frame's header, its payload checked against the pattern, or nothing at EOF, at an
  // error or at the deadline.
  std::optional<header> receive(clock_type::time_point deadline) {
    std::array<std::byte, header_bytes> raw;
    if (!readable_by(deadline)) return std::nullopt;
    if (read_exact(fd_, raw.data(), raw.size()).done != raw.size()) return std::nullopt;
    const header h = decode(raw.data());
    std::vector<std::byte> body(h.length);
    if (read_exact(fd_, body.data(), body.size()).done != body.size()) return std::nullopt;
    CHECK(check_payload(h.source, h.serial, body) == no_difference);
    return h;
  }
  // True when the hub has closed its side (EOF or a reset) by the deadline; data before that
  // is read and dropped.
  bool closed_by(clock_type::time_point deadline) {
    std::array<std::byte, 65536> scratch;
    while (readable_by(deadline)) {
      const ssize_t got = ::recv(fd_, scratch.data(), scratch.size(), 0);
      if (got == 0 || (got < 0 && errno != EINTR)) return true;
    }
    return false;
  }
  // True when a write fails by the deadline because the hub closed the connection (a reset or
  // a broken pipe), false if writes keep succeeding or would block on a full socket.
  bool refused_by(clock_type::time_point deadline) {
    const std::byte one{0};
    while (clock_type::now() < deadline) {
      if (::send(fd_, &one, 1, MSG_DONTWAIT | MSG_NOSIGNAL) < 0) {
        return errno == EPIPE || errno == ECONNRESET;
      }
      std::this_thread::yield();
    }
    return false;
  }
  void end_sending() { ::shutdown(fd_, SHUT_WR); }
  // Closes the connection with a TCP reset instead of a FIN.
  void reset() {
    const linger abort_on_close{1, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_LINGER, &abort_on_close, sizeof abort_on_close);
    close();
  }
  // Unblocks a thread sending or receiving on this client; close() then releases the socket.
  void cut() { ::shutdown(fd_, SHUT_RDWR); }
  void close() {
    if (fd_ >= 0) ::close(std::exchange(fd_, -1));
  }

 private:
  int fd_;
};

// Joins the hub on another thread: true when join() returned by the deadline. Otherwise the
// caller's clean-up (closing its clients) must let it end, and it is joined then.
class hub_ending {
 public:
  template <class Hub>
  explicit hub_ending(Hub& h) : done_(std::async(std::launch::async, [&h] { h.join(); })) {}
  bool by(clock_type::time_point deadline) {
    return done_.wait_until(deadline) == std::future_status::ready;
  }

 private:
  std::future<void> done_;
};

auto in(std::chrono::milliseconds d) { return clock_type::now() + d; }

// Sends 64 KiB frames from `source` to `destination` on a thread until a send fails (the test
// cuts the client to end it).
std::thread flood(client& c, std::uint32_t source, std::uint32_t destination) {
  return std::thread([&c, source, destination] {
    for (std::uint64_t s = 0; c.send(source, destination, s, 64 * 1024) == 0; ++s) {
    }
  });
}

// Waits until the hub holds `bytes` admitted: with a destination that never reads, its window
// is then full and its drain waits in a write.
template <class Hub>
void await_held(Hub& h, std::int64_t bytes) {
  const auto deadline = in(10000ms);
  while (h.stats().held < bytes && clock_type::now() < deadline) std::this_thread::yield();
  REQUIRE(h.stats().held >= bytes);
}

}  // namespace

TEST_CASE("1. a rank that never reads does not stall the frames of other destinations") {
  constexpr std::int64_t window = std::int64_t{4} << 20;
  hub_options o = options(3);
  o.budget = 3 * window;
  hub<sluice::pool> h(o, {});
  h.start();
  client never_reads(h.port()), busy(h.port()), sender(h.port());
  never_reads.hello(0);
  busy.hello(1);
  sender.hello(2);
  // Rank 1 floods rank 0, which never reads, with 64 KiB frames until the hub stops taking them.
  std::thread flooding = flood(busy, 1, 0);
  // Once the flood fills what the hub will hold for rank 0 (4 MiB, a third of the budget),
  // rank 2's 1000-byte frames to rank 1 must still arrive, all of them, in time.
  await_held(h, window);
  constexpr int frames = 200;
  std::thread small([&] {
    for (int s = 0; s < frames && sender.send(2, 1, static_cast<std::uint64_t>(s), 1000) == 0;
         ++s) {
    }
  });
  int got = 0;
  const auto deadline = in(4000ms);
  while (got < frames) {
    const std::optional<header> f = busy.receive(deadline);
    if (!f) break;
    CHECK(f->source == 2);
    CHECK(f->serial == static_cast<std::uint64_t>(got));
    ++got;
  }
  CHECK(got == frames);
  busy.cut();
  sender.cut();
  never_reads.cut();
  flooding.join();
  small.join();
}

TEST_CASE("2. senders that announce the ceiling and go quiet hold no one else's frames") {
  hub_options o = options(2);
  o.io_timeout = 2s;
  hub<sluice::pool> h(o, {});
  h.start();
  client a(h.port()), b(h.port());
  a.hello(0);
  b.hello(1);
  std::vector<std::unique_ptr<client>> slow;
  for (std::uint32_t g = 0; g < 3; ++g) {
    slow.push_back(std::make_unique<client>(h.port()));
    slow.back()->hello(2 + g);
    // A header for a frame of exactly the ceiling, 1000 of its bytes, then nothing.
    std::vector<std::byte> start(header_bytes + 1000);
    header head;
    head.source = 2 + g;
    head.destination = g % 2;
    head.length = h.ceiling();
    encode(head, start.data());
    REQUIRE(slow.back()->send_raw(start) == 0);
  }
  constexpr int frames = 300;
  std::thread traffic([&] {
    for (int s = 0; s < frames && a.send(0, 1, static_cast<std::uint64_t>(s), 1000) == 0; ++s) {
    }
  });
  int got = 0;
  const auto deadline = in(1500ms);  // before the read deadline cuts the slow senders off
  while (got < frames && b.receive(deadline)) ++got;
  CHECK(got == frames);
  // Then the read deadline closes each slow sender's connection, and reports it.
  for (auto& s : slow) CHECK(s->closed_by(in(5000ms)));
  a.end_sending();
  b.end_sending();
  traffic.join();
  hub_ending ending(h);
  CHECK(ending.by(in(3000ms)));
  int timeouts = 0;
  for (const conn_error& e : h.errors()) timeouts += e.kind == conn_error_kind::timeout;
  CHECK(timeouts == 3);
  for (auto& s : slow) s->cut();
  a.cut();
  b.cut();
}

TEST_CASE("3. an idle connection does not keep the hub from ending") {
  hub<sluice::pool> h(options(2), {});
  h.start();
  client idle(h.port());  // connects and sends nothing, not even a hello
  client a(h.port()), b(h.port());
  a.hello(0);
  b.hello(1);
  REQUIRE(a.send(0, 1, 0, 100) == 0);
  REQUIRE(b.send(1, 0, 0, 100) == 0);
  a.end_sending();
  b.end_sending();
  CHECK(b.receive(in(2000ms)).has_value());
  CHECK(a.receive(in(2000ms)).has_value());
  // Both ranks are done: the hub ends and each rank reads EOF, whatever the idle one does.
  CHECK(a.closed_by(in(3000ms)));
  CHECK(b.closed_by(in(3000ms)));
  hub_ending ending(h);
  CHECK(ending.by(in(3000ms)));
  idle.cut();
  a.cut();
  b.cut();
}

TEST_CASE("4. connections that come first and say nothing do not take the ranks' places") {
  hub<sluice::pool> h(options(2), {});
  h.start();
  client early1(h.port()), early2(h.port());
  // Both early connections reach the hub before any rank: wait until it has accepted them.
  const auto accepted = in(3000ms);
  while (h.stats().connections < 2 && clock_type::now() < accepted) std::this_thread::yield();
  REQUIRE(h.stats().connections == 2);
  client a(h.port()), b(h.port());
  a.hello(0);
  b.hello(1);
  CHECK(a.send(0, 1, 0, 100) == 0);
  CHECK(b.send(1, 0, 0, 100) == 0);
  CHECK(b.receive(in(3000ms)).has_value());
  CHECK(a.receive(in(3000ms)).has_value());
  a.end_sending();
  b.end_sending();
  hub_ending ending(h);
  CHECK(ending.by(in(3000ms)));
  // The silent ones did nothing wrong in time to be reported: the hub's end closed them.
  CHECK(early1.closed_by(in(1000ms)));
  CHECK(early2.closed_by(in(1000ms)));
  CHECK(h.errors().empty());
  early1.cut();
  early2.cut();
  a.cut();
  b.cut();
}

TEST_CASE("5. a guest's well-formed frame is delivered, and the receiver takes it as such") {
  hub<sluice::pool> h(options(2), {});
  h.start();
  {
    client guest(h.port());
    guest.hello(2);  // the first id past the ranks
    REQUIRE(guest.send(2, 1, 0, 500) == 0);
    guest.end_sending();
    // The hub has taken the guest's frame before the ranks run.
    const auto taken = in(3000ms);
    while (h.stats().frames_in < 1 && clock_type::now() < taken) std::this_thread::yield();
    REQUIRE(h.stats().frames_in == 1);
  }
  run_context ctx;
  ctx.ranks = 2;
  ctx.ceiling = h.ceiling();
  std::vector<std::unique_ptr<rank_node>> ranks;
  for (std::uint32_t r = 0; r < 2; ++r) {
    ranks.push_back(std::make_unique<rank_node>(ctx, r, 100));
    ranks.back()->start(h.port());
  }
  for (auto& r : ranks) r->join();
  hub_ending ending(h);
  CHECK(ending.by(in(5000ms)));
  CHECK_FALSE(ctx.failed.load());
  CHECK(ranks[1]->guest_frames() == 1);
  CHECK(ranks[1]->guest_frames_off_pattern() == 0);
  CHECK(ranks[0]->received()[1] == ranks[1]->sent()[0]);
  CHECK(ranks[1]->received()[0] == ranks[0]->sent()[1]);
}

TEST_CASE("6. a rank that sends a bad header is really closed") {
  hub<sluice::pool> h(options(2), {});
  h.start();
  client bad(h.port()), good(h.port());
  bad.hello(0);
  good.hello(1);
  static constexpr char request[] = "GET / HTTP/1.1\r\nHost: relays\r\n\r\n";
  static_assert(sizeof request - 1 == header_bytes);
  REQUIRE(bad.send_raw(std::as_bytes(std::span(request, header_bytes))) == 0);
  // The hub reports it, and the rank reads EOF (or a reset), though the other rank is still on.
  CHECK(bad.closed_by(in(3000ms)));
  // Its writes then fail: the hub has closed the socket, not merely stopped reading it.
  CHECK(bad.refused_by(in(3000ms)));
  good.end_sending();
  hub_ending ending(h);
  CHECK(ending.by(in(3000ms)));
  const std::vector<conn_error> errors = h.errors();
  REQUIRE(errors.size() == 1);
  CHECK(errors[0].id == 0);
  CHECK(errors[0].kind == conn_error_kind::bad_magic);
  good.cut();
  bad.cut();
}

TEST_CASE("8. pressure turns soft at exactly three quarters of the budget") {
  struct expect {
    std::int64_t held, budget;
    sluice::pressure p;
  };
  using sluice::pressure;
  for (const expect e : {expect{0, 3, pressure::ok}, {2, 3, pressure::ok}, {3, 3, pressure::hard},
                         {5, 7, pressure::ok}, {6, 7, pressure::soft}, {74, 100, pressure::ok},
                         {75, 100, pressure::soft}, {99, 100, pressure::soft},
                         {100, 100, pressure::hard}, {0, 1, pressure::ok}, {1, 1, pressure::hard},
                         {(std::int64_t{1} << 40) / 4 * 3, std::int64_t{1} << 40, pressure::soft},
                         {(std::int64_t{1} << 40) / 4 * 3 - 1, std::int64_t{1} << 40,
                          pressure::ok}}) {
    CAPTURE(e.held);
    CAPTURE(e.budget);
    CHECK(pressure_at(e.held, e.budget) == e.p);
  }
}

TEST_CASE("9. a burst of large frames after small ones stays within the budget's bound") {
  hub_options o = options(2);
  o.budget = std::size_t{1} << 20;
  hub<sluice::pool> h(o, {});
  h.start();
  client a(h.port()), b(h.port());
  a.hello(0);
  b.hello(1);
  // Small frames first, read as they come, long enough for a hundred calm ticks of the
  // controller: a cap counted in frames would have grown meanwhile.
  std::uint64_t serial = 0;
  while (h.stats().ticks_ok < 100) {
    for (int i = 0; i < 100; ++i) REQUIRE(a.send(0, 1, serial++, 100) == 0);
    for (int i = 0; i < 100; ++i) REQUIRE(b.receive(in(5000ms)).has_value());
  }
  // Then 1 MiB frames that rank 1 does not read, until one of them waits for admission.
  const std::uint64_t waits = h.stats().admit_waits;
  std::thread large([&] {
    for (std::uint64_t s = serial; a.send(0, 1, s, std::size_t{1} << 20) == 0; ++s) {
    }
  });
  const auto deadline = in(5000ms);
  while (h.stats().admit_waits == waits && clock_type::now() < deadline) {
    std::this_thread::yield();
  }
  CHECK(h.stats().admit_waits > waits);
  // What the README promises: each destination's admitted bytes stay within its window (its
  // share of the budget, 512 KiB), but for one frame larger than that, alone: 1 MiB.
  const hub_stats s = h.stats();
  CHECK(s.window_max * static_cast<std::int64_t>(admission_unit) == std::int64_t{512} << 10);
  CHECK(s.peak_held <= std::int64_t{1} << 20);
  a.cut();
  b.cut();
  large.join();
}

// ---- what a second review found in the hub rewritten for the cases above ----

// Six guests send eight 1 MiB frames each to rank 1 at once through a hub with options o; every
// frame must arrive. Answers the hub's statistics and its windows' peak in flight (cases 10, 18).
struct race {
  hub_stats stats;
  std::int64_t peak_in_flight;
};
race large_frames_race(const hub_options& o) {
  hub<sluice::pool> h(o, {});
  h.start();
  client a(h.port()), b(h.port());
  a.hello(0);
  b.hello(1);
  constexpr int guests = 6, frames = 8;
  std::vector<std::unique_ptr<client>> g;
  for (std::uint32_t i = 0; i < guests; ++i) {
    g.push_back(std::make_unique<client>(h.port()));
    g.back()->hello(2 + i);
  }
  std::vector<std::thread> senders;
  for (std::uint32_t i = 0; i < guests; ++i) {
    senders.emplace_back([&, i] {
      for (std::uint64_t s = 0; s < frames; ++s) {
        if (g[i]->send(2 + i, 1, s, std::size_t{1} << 20) != 0) break;
      }
    });
  }
  int got = 0;
  while (got < guests * frames && b.receive(in(10000ms))) ++got;
  CHECK(got == guests * frames);
  for (auto& t : senders) t.join();
  const hub_stats s = h.stats();
  const race r{s, h.windows().peak_in_flight};
  for (auto& c : g) c->cut();
  a.cut();
  b.cut();
  return r;
}

TEST_CASE("10. large frames that race for one destination never pass its bound together") {
  // A window of two units; six guests send 1 MiB frames to rank 1 at once. Each frame is larger
  // than the window, so it counts as the whole window and goes alone: one in flight at a time.
  // The frames waiting (6 MiB) keep the pressure hard, which takes the window down to one unit;
  // only the controller's opening of a starved window lets each next one in. The same with each
  // latency limit, which must not keep a starved window shut either (README, Latency limits).
  for (const limit_kind limit : {limit_kind::none, limit_kind::none, limit_kind::none, limit_kind::aimd,
                                 limit_kind::vegas, limit_kind::gradient2}) {
    const std::string limit_name = to_string(limit);
    CAPTURE(limit_name);
    hub_options o = options(2);
    o.budget = 2 * 2 * admission_unit;  // each destination's share: 2 units
    o.limit = limit;
    const race r = large_frames_race(o);
    CHECK(r.stats.window_max == 2);
    CHECK(r.peak_in_flight <= r.stats.window_max);
    CHECK(r.stats.peak_destination <= r.stats.largest_frame);  // 1 MiB: one frame at a time
  }
}

TEST_CASE("11. a connection that fails in its pump and its drain at once is reported once") {
  for (int round = 0; round < 10; ++round) {
    constexpr std::int64_t window = std::int64_t{1} << 20;
    hub_options o = options(2);
    o.budget = 2 * window;
    hub<sluice::pool> h(o, {});
    h.start();
    client a(h.port());
    auto b = std::make_unique<client>(h.port());
    a.hello(0);
    b->hello(1);
    // Rank 1 never reads: rank 0's flood fills its window, and its drain waits in a write.
    std::thread flooding = flood(a, 0, 1);
    await_held(h, window);
    // Then it resets the connection: its pump reads the reset as its drain's write fails.
    b->reset();
    b.reset();
    a.cut();
    flooding.join();
    hub_ending ending(h);
    CHECK(ending.by(in(5000ms)));
    int reports = 0;
    for (const conn_error& e : h.errors()) reports += e.id == 1;
    CHECK(reports == 1);
  }
}

TEST_CASE("12. a rank that stops reading is cut off when no byte has moved for the deadline") {
  constexpr std::int64_t window = std::int64_t{1} << 20;
  hub_options o = options(2);
  o.budget = 2 * window;
  o.io_timeout = 2s;
  hub<sluice::pool> h(o, {});
  h.start();
  client a(h.port()), b(h.port());
  a.hello(0);
  b.hello(1);
  std::thread flooding = flood(a, 0, 1);
  // Once the window is full the drain's write has stopped moving (it stopped a little before).
  await_held(h, window);
  const auto stalled = clock_type::now();
  const auto cut = [&] {
    for (const conn_error& e : h.errors()) {
      if (e.id == 1 && e.kind == conn_error_kind::write_failed) return true;
    }
    return false;
  };
  while (!cut() && clock_type::now() < stalled + 10s) std::this_thread::yield();
  REQUIRE(cut());
  // The deadline is 2 s of no progress; a write that waits the deadline out once per call would
  // take up to twice that.
  CHECK(clock_type::now() - stalled < 3s);
  a.cut();
  b.cut();
  flooding.join();
}

TEST_CASE("13. connections that come and go leave no threads behind") {
  hub<sluice::pool> h(options(2), {});
  h.start();
  const auto mappings = [] {
    std::ifstream maps("/proc/self/maps");
    return std::count(std::istreambuf_iterator<char>(maps), std::istreambuf_iterator<char>(), '\n');
  };
  const auto before = mappings();
  constexpr int connections = 400;
  for (int i = 0; i < connections; ++i) {
    client c(h.port());
    static constexpr char hello[] = "HELO hub";
    REQUIRE(c.send_raw(std::as_bytes(std::span(hello, hello_bytes))) == 0);
    CHECK(c.closed_by(in(3000ms)));  // refused: a bad hello
  }
  // Each thread the hub kept unjoined would keep its stack mapped (two mappings with its guard).
  CHECK(mappings() - before < connections / 4);
  client a(h.port()), b(h.port());
  a.hello(0);
  b.hello(1);
  a.end_sending();
  b.end_sending();
  hub_ending ending(h);
  CHECK(ending.by(in(3000ms)));
  a.cut();
  b.cut();
}

TEST_CASE("14. one rank's failure does not close the ranks that send to it") {
  hub<sluice::pool> h(options(3), {});
  h.start();
  client r0(h.port()), r1(h.port()), r2(h.port());
  r0.hello(0);
  r1.hello(1);
  r2.hello(2);
  static constexpr char request[] = "GET / HTTP/1.1\r\nHost: relays\r\n\r\n";
  REQUIRE(r2.send_raw(std::as_bytes(std::span(request, header_bytes))) == 0);
  REQUIRE(r2.closed_by(in(3000ms)));
  // Rank 2 is gone. Rank 1 sends it frames until the hub has cut it off (its writes fail), then
  // a frame to rank 0: that one must arrive, and rank 1 must still be served.
  const auto dropped = in(5000ms);
  for (std::uint64_t s = 0; h.stats().dropped == 0 && clock_type::now() < dropped; ++s) {
    REQUIRE(r1.send(1, 2, s, 1000) == 0);
  }
  REQUIRE(h.stats().dropped > 0);
  REQUIRE(r1.send(1, 0, 0, 1000) == 0);
  const std::optional<header> f = r0.receive(in(3000ms));
  REQUIRE(f.has_value());
  CHECK(f->source == 1);
  for (const conn_error& e : h.errors()) CHECK(e.id == 2);
  r0.end_sending();
  r1.end_sending();
  hub_ending ending(h);
  CHECK(ending.by(in(3000ms)));
  r0.cut();
  r1.cut();
}

TEST_CASE("15. frames that wait for their window count as bytes the hub holds") {
  constexpr std::int64_t window = std::int64_t{1} << 20;
  hub_options o = options(2);
  o.budget = 2 * window;
  hub<sluice::pool> h(o, {});
  h.start();
  client a(h.port()), b(h.port());
  a.hello(0);
  b.hello(1);
  // Rank 1 never reads: rank 0's flood fills its window, and its drain waits in a write.
  std::thread flooding = flood(a, 0, 1);
  await_held(h, window);
  // Three guests' 1 MiB frames for rank 1 are read whole and wait for its window: their 3 MiB
  // must show in what the pressure sees.
  std::vector<std::unique_ptr<client>> g;
  for (std::uint32_t i = 0; i < 3; ++i) {
    g.push_back(std::make_unique<client>(h.port()));
    g.back()->hello(2 + i);
    REQUIRE(g.back()->send(2 + i, 1, 0, std::size_t{1} << 20) == 0);
  }
  // Rank 0's flood frame, read and waiting for rank 1's window, counts too. The wait is long
  // because one run under ASan (CI-like, 2 cores) saw only two of the three guests' frames
  // counted after 5 s; the cause is not known yet (an open question for this test, noted in the
  // issue's closing note).
  const std::int64_t waiting = std::int64_t{3} << 20;
  const auto deadline = in(20000ms);
  while (h.stats().reading < waiting && clock_type::now() < deadline) std::this_thread::yield();
  CHECK(h.stats().reading >= waiting);
  for (auto& c : g) c->cut();
  a.cut();
  b.cut();
  flooding.join();
}

// ---- and what a third review found ----

TEST_CASE("16. guests that say hello and go quiet cannot keep the ranks out") {
  hub_options o = options(2);
  o.max_connections = 8;
  o.io_timeout = 1s;
  hub<sluice::pool> h(o, {});
  h.start();
  // Every place taken by a guest that never sends a frame.
  std::vector<std::unique_ptr<client>> quiet;
  for (std::uint32_t i = 0; i < o.max_connections; ++i) {
    quiet.push_back(std::make_unique<client>(h.port()));
    quiet.back()->hello(2 + i);
  }
  // The ranks wait in the backlog until the guests' quiet runs out; then they are served.
  client a(h.port()), b(h.port());
  a.hello(0);
  b.hello(1);
  REQUIRE(a.send(0, 1, 0, 100) == 0);
  const std::optional<header> f = b.receive(in(5000ms));
  CHECK(f.has_value());
  for (auto& q : quiet) CHECK(q->closed_by(in(3000ms)));
  a.end_sending();
  b.end_sending();
  hub_ending ending(h);
  CHECK(ending.by(in(3000ms)));
  for (auto& q : quiet) q->cut();
  a.cut();
  b.cut();
}

// ---- and what weighted admission changed (issue 34) ----

TEST_CASE("17. at the end, frames waiting for a window that will not open do not hold the hub") {
  // Rank 1 never reads. A guest's flood fills its window; then that guest and a second one each
  // wait with a frame for it. Once both ranks are done the windows close: the two waits end
  // (gate_errc::closed), and the guests' readers with them, while rank 1 still reads nothing.
  hub_options o = options(2);
  o.budget = std::size_t{2} << 20;  // each window 1 MiB
  hub<sluice::pool> h(o, {});
  h.start();
  client a(h.port()), b(h.port()), flooding_guest(h.port()), late_guest(h.port());
  a.hello(0);
  b.hello(1);
  flooding_guest.hello(2);
  late_guest.hello(3);
  std::thread flooding = flood(flooding_guest, 2, 1);
  await_held(h, std::int64_t{1} << 20);
  REQUIRE(late_guest.send(3, 1, 0, std::size_t{1} << 20) == 0);
  const auto queued = in(5000ms);
  while (h.windows().waiting < 2 && clock_type::now() < queued) std::this_thread::yield();
  REQUIRE(h.windows().waiting == 2);
  a.end_sending();
  b.end_sending();
  CHECK(late_guest.closed_by(in(3000ms)));
  const sluice::gate_stats w = h.windows();
  CHECK(w.waiting == 0);
  CHECK(w.closed >= 2);
  flooding_guest.cut();
  late_guest.cut();
  a.cut();
  b.cut();
  flooding.join();
}

// ---- and what latency limits changed (issue 36) ----

TEST_CASE("18. a latency limit below a waiting frame's units does not hold it for ever") {
  // Each window of 32 units (2 MiB) is owned by a limiter. Six guests send 1 MiB frames (16
  // units) to rank 1 at once: Vegas and Gradient2 read the frames queued behind each other as
  // queueing and take their limit below 16, and a limit moves only on the samples of frames
  // written. With nothing in flight the window starves; the controller must open it past the
  // limiter (the relay with --limit=vegas --ranks=8 --sizes=fixed:1M stopped without that).
  for (const limit_kind limit : {limit_kind::aimd, limit_kind::vegas, limit_kind::gradient2}) {
    const std::string limit_name = to_string(limit);
    CAPTURE(limit_name);
    hub_options o = options(2);
    o.budget = std::size_t{4} << 20;
    o.limit = limit;
    const race r = large_frames_race(o);
    CHECK(r.stats.window_max == 32);
    CHECK(r.peak_in_flight <= r.stats.window_max);
    CHECK(r.stats.limit_applied > 0);
  }
}
