// async_admit on standalone Asio (<sluice/asio.hpp>, docs/asio.md), and with
// SLUICE_TEST_BOOST_ASIO defined the same cases on Boost.Asio (<sluice/boost_asio.hpp>): each
// completion token, the executor and allocator rules, thousands of coroutines against the cap,
// cancellation racing a wake-up, timeouts, threads and coroutines on one gate, FIFO, and an
// io_context destroyed with waits pending. Waits that must end are bounded (run_for, wait_for)
// far beyond what they need, so a lost wake-up fails a check instead of hanging the test.
#include <pthread.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "../lib/parking.hpp"  // the fairness case holds a gate's parking spot
#include "doctest.hpp"
#include "kinds.hpp"
#include "threads.hpp"

// One body for both Asios: `net` is the Asio under test, `error_code` its error code. The
// coroutine cases need its awaitable, which it offers where the compiler and its library agree
// on coroutines (meson.build tells it so for Clang 14 over libstdc++).
#ifdef SLUICE_TEST_BOOST_ASIO
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_allocator.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/use_future.hpp>

#include "sluice/boost_asio.hpp"
namespace net = boost::asio;
using error_code = boost::system::error_code;
using boost::asio::as_tuple;  // Boost 1.80 moved these two out of experimental
using boost::asio::deferred;
#ifdef BOOST_ASIO_HAS_CO_AWAIT
#define SLUICE_TEST_CO_AWAIT
#endif
#else
#include <asio/bind_allocator.hpp>
#include <asio/bind_cancellation_slot.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/experimental/deferred.hpp>
#include <asio/use_future.hpp>

#include "sluice/asio.hpp"
namespace net = asio;
using error_code = std::error_code;
using asio::experimental::as_tuple;
using asio::experimental::deferred;
#ifdef ASIO_HAS_CO_AWAIT
#define SLUICE_TEST_CO_AWAIT
#endif
#endif

#ifdef SLUICE_TEST_CO_AWAIT
#ifdef SLUICE_TEST_BOOST_ASIO
#include <boost/asio/experimental/awaitable_operators.hpp>
#else
#include <asio/experimental/awaitable_operators.hpp>
#endif
constexpr int coroutine_handlers = 20;
#else
constexpr int coroutine_handlers = 0;
#endif

using namespace std::chrono_literals;
using sluice::permit;

namespace {

constexpr auto long_enough = 60s;

// Runs io on `n` threads until its work runs out (or long_enough), then joins them.
[[maybe_unused]] void run_on(net::io_context& io, int n) {
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) threads.emplace_back([&] { io.run_for(long_enough); });
  for (auto& t : threads) t.join();
}

// Counts the handlers destroyed, to show that a destroyed context destroys them.
struct destruction_counter {
  std::atomic<int>* count;
  explicit destruction_counter(std::atomic<int>* c) : count(c) {}
  destruction_counter(destruction_counter&& o) noexcept : count(std::exchange(o.count, nullptr)) {}
  ~destruction_counter() {
    if (count != nullptr) count->fetch_add(1);
  }
};

// An allocator that counts what it allocates.
template <class T>
struct counting_allocator {
  using value_type = T;
  std::atomic<int>* allocations;
  explicit counting_allocator(std::atomic<int>* a) : allocations(a) {}
  template <class U>
  counting_allocator(const counting_allocator<U>& o) : allocations(o.allocations) {}
  T* allocate(std::size_t n) {
    allocations->fetch_add(1);
    return std::allocator<T>().allocate(n);
  }
  void deallocate(T* p, std::size_t n) { std::allocator<T>().deallocate(p, n); }
  template <class U>
  bool operator==(const counting_allocator<U>& o) const { return allocations == o.allocations; }
};

}  // namespace

TEST_CASE_TEMPLATE("a callback runs on its executor, posted, never inside async_admit", G, GATES) {
  net::io_context io;
  G g{1};
  bool ran = false;
  error_code got;
  sluice::async_admit(g, net::bind_executor(io, [&](error_code ec, permit<G> p) {
                        got = ec;
                        ran = static_cast<bool>(p);
                        CHECK(g.in_flight() == 1);
                      }));
  CHECK_FALSE(ran);  // room was there at once, and still the handler waits for run()
  CHECK(g.in_flight() == 1);  // counted at once, for the waiter
  io.run_for(long_enough);
  CHECK(ran);
  CHECK_FALSE(got);
  CHECK(g.in_flight() == 0);  // the permit went out of scope in the handler
}

TEST_CASE_TEMPLATE("each completion token", G, GATES) {
  net::io_context io;
  G g{1};
#ifdef SLUICE_TEST_CO_AWAIT
  SUBCASE("use_awaitable") {
    bool admitted = false;
    net::co_spawn(io, [&]() -> net::awaitable<void> {
      auto p = co_await sluice::async_admit(g, net::use_awaitable);
      admitted = static_cast<bool>(p) && g.in_flight() == 1;
    }, net::detached);
    io.run_for(long_enough);
    CHECK(admitted);
  }
  SUBCASE("as_tuple(use_awaitable)") {
    bool admitted = false;
    net::co_spawn(io, [&]() -> net::awaitable<void> {
      auto [ec, p] = co_await sluice::async_admit(g, as_tuple(net::use_awaitable));
      admitted = !ec && static_cast<bool>(p);
    }, net::detached);
    io.run_for(long_enough);
    CHECK(admitted);
  }
#endif
  SUBCASE("deferred: nothing happens until the deferred operation is started") {
    auto op = sluice::async_admit(g, deferred);
    CHECK(g.in_flight() == 0);
    bool admitted = false;
    std::move(op)(net::bind_executor(io, [&](error_code ec, permit<G> p) { admitted = !ec && p; }));
    io.run_for(long_enough);
    CHECK(admitted);
  }
  SUBCASE("use_future, on the system executor") {
    REQUIRE(g.try_admit());
    std::future<permit<G>> f = sluice::async_admit(g, net::use_future);
    CHECK(f.wait_for(20ms) == std::future_status::timeout);  // no room yet
    g.note_done();
    REQUIRE(f.wait_for(long_enough) == std::future_status::ready);
    permit<G> p = f.get();
    CHECK(p);
    CHECK(g.in_flight() == 1);
  }
  SUBCASE("the associated allocator holds the wait") {
    std::atomic<int> allocations{0};
    REQUIRE(g.try_admit());
    bool admitted = false;
    sluice::async_admit(g, net::bind_allocator(counting_allocator<void>(&allocations),
                                                net::bind_executor(io, [&](error_code, permit<G> p) {
                                                  admitted = static_cast<bool>(p);
                                                })));
    CHECK(allocations.load() >= 1);  // the waiting node
    g.note_done();
    io.run_for(long_enough);
    CHECK(admitted);
  }
  CHECK(g.in_flight() == 0);
}

#ifdef SLUICE_TEST_CO_AWAIT
TEST_CASE_TEMPLATE("thousands of coroutines on one gate never pass its cap", G, GATES) {
  const int coroutines = sluice_test::reduced ? 1000 : 4000;
  for (int cap = 1; cap <= 8; ++cap) {
    CAPTURE(cap);
    net::io_context io;
    G g{cap};
    std::atomic<int> holders{0}, admitted{0}, over{0};
    for (int i = 0; i < coroutines; ++i) {
      net::co_spawn(io, [&]() -> net::awaitable<void> {
        auto p = co_await sluice::async_admit(g, net::use_awaitable);
        const int now = holders.fetch_add(1) + 1;
        if (now > cap || g.in_flight() > g.cap() || !p) over.fetch_add(1);  // checked at every admission
        co_await net::post(co_await net::this_coro::executor, net::use_awaitable);  // hold it a while
        holders.fetch_sub(1);
        admitted.fetch_add(1);
      }, net::detached);
    }
    run_on(io, 4);
    CHECK(over.load() == 0);
    CHECK(admitted.load() == coroutines);
    CHECK(g.in_flight() == 0);
  }
}

#endif
TEST_CASE_TEMPLATE("FIFO among the async waiters of one gate", G, GATES) {
  net::io_context io;
  G g{1};
  REQUIRE(g.try_admit());
  std::vector<int> order;
  std::vector<permit<G>> held;
  for (int i = 0; i < 50; ++i) {
    sluice::async_admit(g, net::bind_executor(io, [&, i](error_code, permit<G> p) {
                          order.push_back(i);
                          held.push_back(std::move(p));
                        }));
  }
  g.note_done();
  while (order.size() < 50) {
    const std::size_t before = order.size();
    io.run_for(5ms);
    REQUIRE(order.size() == before + 1);  // one room, one waiter
    held.clear();                          // its note_done admits the next
  }
  for (int i = 0; i < 50; ++i) CHECK(order[i] == i);
}

TEST_CASE_TEMPLATE("set_cap and adjust raising the cap wake async waiters", G, GATES) {
  net::io_context io;
  G g{1};
  REQUIRE(g.try_admit());
  std::vector<permit<G>> held;
  for (int i = 0; i < 4; ++i) {
    sluice::async_admit(g, net::bind_executor(io, [&](error_code, permit<G> p) { held.push_back(std::move(p)); }));
  }
  g.set_cap(3);
  io.run_for(20ms);
  CHECK(held.size() == 2);
  g.adjust(sluice::pressure::ok, 10);
  io.run_for(20ms);
  CHECK(held.size() == 3);
  CHECK(g.in_flight() == 4);
  g.note_done();
  io.run_for(long_enough);
  CHECK(held.size() == 4);
  CHECK(g.in_flight() == 4);
  held.clear();
  CHECK(g.in_flight() == 0);
}

TEST_CASE_TEMPLATE("a cancelled wait completes with operation_aborted and counts nothing", G, GATES) {
  net::io_context io;
  G g{1};
  REQUIRE(g.try_admit());
  net::cancellation_signal signal;
  error_code got;
  bool empty = false, ran = false;
  sluice::async_admit(g, net::bind_cancellation_slot(signal.slot(), net::bind_executor(io, [&](error_code ec, permit<G> p) {
                                                          ran = true;
                                                          got = ec;
                                                          empty = !p;
                                                        })));
  signal.emit(net::cancellation_type::terminal);
  CHECK_FALSE(ran);
  io.run_for(long_enough);
  CHECK(ran);
  CHECK(got == net::error::operation_aborted);
  CHECK(empty);
  g.note_done();
  CHECK(g.in_flight() == 0);  // the cancelled waiter took nothing
  signal.emit(net::cancellation_type::terminal);  // a late emit is harmless
  CHECK(g.try_admit());
  g.note_done();
}

TEST_CASE_TEMPLATE("cancellation racing note_done never consumes an admission", G, GATES) {
  const int rounds = sluice_test::reduced ? 500 : 3000;
  int aborted = 0, admitted = 0;
  for (int round = 0; round < rounds; ++round) {
    net::io_context io;
    G g{1};
    REQUIRE(g.try_admit());
    net::cancellation_signal signal;
    std::atomic<int> outcome{0};  // 1 admitted, 2 aborted
    sluice::async_admit(g, net::bind_cancellation_slot(
                               signal.slot(), net::bind_executor(io, [&](error_code ec, permit<G> p) {
                                 if (ec) {
                                   CHECK(ec == net::error::operation_aborted);
                                   CHECK_FALSE(p);
                                   outcome = 2;
                                 } else {
                                   CHECK(p);
                                   outcome = 1;
                                 }
                               })));
    // The emit on the io_context's thread (a signal is not thread-safe), the note_done on another,
    // released together, one of them a few spins late (a different number each round).
    // Every fourth round, the note_done comes first on the same thread: the emit then finds the
    // waiter already taken, and the wait completes admitted (the late side of the race, for sure).
    const bool late_emit = round % 4 == 0;
    std::atomic<bool> go{false};
    std::thread releaser([&] {
      while (!go.load()) {
      }
      for (int i = 0; i < round % 32; ++i) asm volatile("");
      if (!late_emit) g.note_done();
    });
    net::post(io, [&] {
      go = true;
      if (late_emit) g.note_done();
      for (int i = 0; i < round % 64 * 64; ++i) asm volatile("");  // up to a few microseconds
      signal.emit(net::cancellation_type::terminal);
    });
    io.run_for(long_enough);
    releaser.join();
    REQUIRE(outcome.load() != 0);
    if (late_emit) CHECK(outcome.load() == 1);
    (outcome.load() == 1 ? admitted : aborted) += 1;
    CHECK(g.in_flight() == 0);  // aborted: nothing taken; admitted: its permit gave it back
  }
  MESSAGE("admitted ", admitted, ", aborted ", aborted);
}

#ifdef SLUICE_TEST_CO_AWAIT
namespace readme {
// The README's example, as it is there.
net::awaitable<void> serve(sluice::gate& g, net::steady_timer& timer) {
  using namespace net::experimental::awaitable_operators;
  sluice::permit p = co_await sluice::async_admit(g, net::use_awaitable);  // waits for room
  // ...work, holding p (the end of its scope gives the admission back)...
  timer.expires_after(std::chrono::milliseconds(50));
  auto r = co_await (sluice::async_admit(g, net::use_awaitable) || timer.async_wait(net::use_awaitable));
  if (r.index() == 0) { /* admitted: std::get<0>(r) is its permit */ } else { /* timed out, nothing counted */ }
}
}  // namespace readme

TEST_CASE("the README's example") {
  net::io_context io;
  sluice::gate g{1};
  net::steady_timer timer(io);
  bool done = false;
  net::co_spawn(io, readme::serve(g, timer), [&](std::exception_ptr e) { done = !e; });
  io.run_for(long_enough);
  CHECK(done);
  CHECK(g.in_flight() == 0);
}

TEST_CASE_TEMPLATE("timeouts through || with a steady_timer", G, GATES) {
  using namespace net::experimental::awaitable_operators;
  net::io_context io;
  G g{2};
  SUBCASE("the timer wins: nothing counted, and the gate serves the next waiter") {
    REQUIRE(g.try_admit());
    REQUIRE(g.try_admit());
    bool timed_out = false, later = false;
    net::co_spawn(io, [&]() -> net::awaitable<void> {
      net::steady_timer timer(co_await net::this_coro::executor, 10ms);
      auto r = co_await (sluice::async_admit(g, net::use_awaitable) || timer.async_wait(net::use_awaitable));
      timed_out = r.index() == 1;
      CHECK(g.in_flight() == 2);
      g.note_done();
      auto p = co_await sluice::async_admit(g, net::use_awaitable);
      later = static_cast<bool>(p);
    }, net::detached);
    io.run_for(long_enough);
    CHECK(timed_out);
    CHECK(later);
    CHECK(g.in_flight() == 1);
  }
  SUBCASE("many short timeouts racing admissions") {
    const int coroutines = sluice_test::reduced ? 200 : 1000;
    std::atomic<int> in{0}, out{0}, holders{0}, over{0};
    // Each on a strand: || completes one branch and cancels the other through its slot, which
    // must not race that branch's own completion (Asio's rule for cancellation slots, whatever
    // the operation) on a context that two threads run.
    for (int i = 0; i < coroutines; ++i) {
      net::co_spawn(net::make_strand(io), [&, i]() -> net::awaitable<void> {
        net::steady_timer timer(co_await net::this_coro::executor, std::chrono::microseconds(50 + i % 200));
        auto r = co_await (sluice::async_admit(g, net::use_awaitable) || timer.async_wait(net::use_awaitable));
        if (r.index() == 0) {
          if (holders.fetch_add(1) + 1 > 2) over.fetch_add(1);
          co_await net::post(co_await net::this_coro::executor, net::use_awaitable);
          holders.fetch_sub(1);
          in.fetch_add(1);
        } else {
          out.fetch_add(1);
        }
      }, net::detached);
    }
    run_on(io, 2);
    CHECK(in.load() + out.load() == coroutines);
    CHECK(in.load() > 0);
    CHECK(over.load() == 0);
    CHECK(g.in_flight() == 0);
  }
}

TEST_CASE_TEMPLATE("threads and coroutines wait on one gate together", G, GATES) {
  const int each = sluice_test::reduced ? 300 : 2000;
  net::io_context io;
  G g{2};
  std::atomic<int> holders{0}, over{0}, done{0};
  auto hold = [&] {
    if (holders.fetch_add(1) + 1 > 2) over.fetch_add(1);
    holders.fetch_sub(1);
    done.fetch_add(1);
  };
  for (int i = 0; i < each; ++i) {
    net::co_spawn(io, [&]() -> net::awaitable<void> {
      auto p = co_await sluice::async_admit(g, net::use_awaitable);
      hold();
    }, net::detached);
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < each / 2; ++i) {
        permit<G> p{g, sluice::until_admitted};
        hold();
      }
    });
  }
  run_on(io, 2);
  for (auto& t : threads) t.join();
  CHECK(over.load() == 0);
  CHECK(done.load() == 2 * each);
  CHECK(g.in_flight() == 0);
}

TEST_CASE_TEMPLATE("a stream of try_admit callers does not starve a waiting coroutine", G, GATES) {
  net::io_context io;
  G g{2};
  std::atomic<bool> stop{false};
  std::vector<std::thread> stream;
  for (int t = 0; t < 2; ++t) {
    stream.emplace_back([&] {
      while (!stop.load()) {
        if (permit<G> p{g}) std::this_thread::yield();  // holds its admission a moment
      }
    });
  }
  std::atomic<int> admitted{0};
  for (int i = 0; i < 100; ++i) {
    net::co_spawn(io, [&]() -> net::awaitable<void> {
      auto p = co_await sluice::async_admit(g, net::use_awaitable);
      admitted.fetch_add(1);
    }, net::detached);
  }
  std::thread runner([&] { io.run_for(long_enough); });
  runner.join();
  stop = true;
  for (auto& t : stream) t.join();
  CHECK(admitted.load() == 100);
  CHECK(g.in_flight() == 0);
}

#endif
// The fairness rule (docs/asio.md, Fairness): while an async waiter is queued, try_admit and
// has_capacity refuse, even in the moment between a note_done that made room and the grant loop
// that hands the room to the waiter. The test holds that moment open: it holds the gate's parking
// spot, so a note_done on another thread makes its room and then stops at the spot's mutex.
TEST_CASE_TEMPLATE("no try_admit overtakes a queued async waiter", G, GATES) {
  net::io_context io;
  G g{1};
  REQUIRE(g.try_admit());
  bool admitted = false;
  sluice::async_admit(g, net::bind_executor(io, [&](error_code ec, permit<G> p) { admitted = !ec && p; }));
  sluice::detail::parking_spot& spot = sluice::detail::parking_for(&g);
  std::thread finisher;
  {
    std::unique_lock hold(spot.mutex);
    finisher = std::thread([&] { g.note_done(); });
    while (g.in_flight() != 0) std::this_thread::yield();  // its room is made; it waits for the spot
    CHECK_FALSE(g.has_capacity());
    CHECK_FALSE(g.try_admit());
  }
  finisher.join();  // its grant loop admits the waiter
  CHECK(g.in_flight() == 1);
  io.run_for(long_enough);
  CHECK(admitted);
  CHECK(g.in_flight() == 0);
  CHECK(g.try_admit());  // the queue served, try_admit admits again
  g.note_done();
}

// gate.md: the thread that a note_done admits may destroy the gate at once. So a note_done whose
// wake-up finds only another gate's async waiters on the shared parking spot must touch nothing
// of its own gate. The spot is held so that the note_done stops between its room and its wake-up
// while the gate is destroyed and its memory reused.
TEST_CASE("a wake-up that finds only another gate's waiters leaves its destroyed gate alone") {
  net::io_context io;
  alignas(sluice::gate) unsigned char storage[sizeof(sluice::gate)];
  auto* g = new (storage) sluice::gate(1);
  sluice::detail::parking_spot& spot = sluice::detail::parking_for(g);
  std::vector<std::unique_ptr<sluice::gate>> others;  // until one shares g's spot (64 spots)
  do {
    others.push_back(std::make_unique<sluice::gate>(1));
  } while (&sluice::detail::parking_for(others.back().get()) != &spot);
  sluice::gate& h = *others.back();
  REQUIRE(h.try_admit());
  bool h_admitted = false;
  sluice::async_admit(h, net::bind_executor(io, [&](error_code ec, permit<sluice::gate> p) { h_admitted = !ec && p; }));
  REQUIRE(g->try_admit());
  REQUIRE_FALSE(g->try_admit_for(1ms));  // a wait that gave up: g's waiting bit stays set
  std::thread finisher;
  std::uint64_t* reused = nullptr;
  {
    std::unique_lock hold(spot.mutex);
    finisher = std::thread([&] { g->note_done(); });
    while (!g->try_admit()) std::this_thread::yield();  // admitted by that note_done: its room is made
    g->~gate();
    reused = new (storage) std::uint64_t(~std::uint64_t{0});
  }
  finisher.join();
  CHECK(*reused == ~std::uint64_t{0});
  h.note_done();
  io.run_for(long_enough);
  CHECK(h_admitted);
}

// A cancelled waiter leaves the queue, and the room goes to the thread that waited behind it.
TEST_CASE_TEMPLATE("a thread waiting behind a cancelled async waiter is admitted", G, GATES) {
  net::io_context io;
  G g{1};
  REQUIRE(g.try_admit());
  net::cancellation_signal cancel;
  bool aborted = false;
  sluice::async_admit(g, net::bind_cancellation_slot(cancel.slot(), net::bind_executor(io,
      [&](error_code ec, permit<G> p) { aborted = ec == net::error::operation_aborted && !p; })));
  std::atomic<bool> thread_admitted{false};
  std::thread waiter([&] {
    permit<G> p{g, long_enough};
    thread_admitted = static_cast<bool>(p);
  });
  cancel.emit(net::cancellation_type::terminal);
  g.note_done();
  waiter.join();
  io.run_for(long_enough);
  CHECK(aborted);
  CHECK(thread_admitted.load());
  CHECK(g.in_flight() == 0);
}

TEST_CASE_TEMPLATE("an io_context destroyed with waits pending destroys their handlers, uninvoked", G, GATES) {
  G g{1};
  REQUIRE(g.try_admit());
  std::atomic<int> destroyed{0}, invoked{0};
  {
    net::io_context io;
    for (int i = 0; i < 20; ++i) {
      sluice::async_admit(g, net::bind_executor(io, [&, c = destruction_counter(&destroyed)](error_code, permit<G>) {
                            invoked.fetch_add(1);
                          }));
    }
#ifdef SLUICE_TEST_CO_AWAIT
    for (int i = 0; i < 20; ++i) {
      net::co_spawn(io, [&, c = std::make_shared<destruction_counter>(&destroyed)]() -> net::awaitable<void> {
        auto keep = c;  // in the frame: destroyed with it
        auto p = co_await sluice::async_admit(g, net::use_awaitable);
        invoked.fetch_add(1);
      }, net::detached);
    }
#endif
    io.run_for(10ms);  // the coroutines reach their waits
  }
  CHECK(invoked.load() == 0);
  CHECK(destroyed.load() >= 20 + coroutine_handlers);  // 20 handlers, and the coroutines' frames
  CHECK(g.in_flight() == 1);      // the count is the one admission held here
  g.note_done();                  // wakes no one: the waits are gone
  CHECK(g.in_flight() == 0);
  net::io_context io;  // the gate serves a new context as before
  bool admitted = false;
  sluice::async_admit(g, net::bind_executor(io, [&](error_code ec, permit<G> p) { admitted = !ec && p; }));
  io.run_for(long_enough);
  CHECK(admitted);
  CHECK(g.in_flight() == 0);
}

TEST_CASE_TEMPLATE("a context destroyed with an admitted wait still posted gives the admission back", G, GATES) {
  G g{1};
  bool invoked = false;
  {
    net::io_context io;
    sluice::async_admit(g, net::bind_executor(io, [&](error_code, permit<G>) { invoked = true; }));
    CHECK(g.in_flight() == 1);  // admitted at once, its handler posted but never run
  }
  CHECK_FALSE(invoked);
  CHECK(g.in_flight() == 0);
}

// docs/gate.md, LIFETIME: a gate destroyed with waits queued completes them at once with
// operation_aborted and an empty permit; nothing of the gate is touched after (ASan watches),
// and a cancellation emitted after that does nothing.
// A context shut down while room comes for thousands of its waits: each wait the grant takes is
// refused by the shut-down context and its admission given back, and the note_done in that
// grants the next. Discarded in place, each nested one call deeper, and a thread of 256 KiB
// overflowed its stack. Here the shutdown is held at its first withdrawal (another gate's wait,
// whose spot this thread holds; the shutdown thread is asleep on it) while the note_done runs.
TEST_CASE_TEMPLATE("room for a shut-down context's waits gives each back without nesting", G, GATES) {
  constexpr int waits = 20'000;
  G g{1};
  REQUIRE(g.try_admit());
  std::vector<std::unique_ptr<G>> others;
  do {
    others.push_back(std::make_unique<G>(1));
  } while (&sluice::detail::parking_for(others.back().get()) == &sluice::detail::parking_for(&g));
  G& other = *others.back();
  REQUIRE(other.try_admit());
  auto io = std::make_unique<net::io_context>();
  const auto ignore = [](error_code, permit<G>) {};
  for (int i = 0; i < waits; ++i) sluice::async_admit(g, net::bind_executor(*io, ignore));
  sluice::async_admit(other, net::bind_executor(*io, ignore));  // the newest: withdrawn first
  sluice::detail::parking_spot& held = sluice::detail::parking_for(&other);
  held.mutex.lock();
  std::atomic<long> tid{0};
  std::thread shut([&] {
    tid = sluice_test::this_tid();
    io.reset();
  });
  while (tid.load() == 0 || !sluice_test::asleep(tid.load())) std::this_thread::yield();
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 256 * 1024);
  pthread_t room;
  REQUIRE(pthread_create(&room, &attr, [](void* gate) -> void* {
    static_cast<G*>(gate)->note_done();
    return nullptr;
  }, &g) == 0);
  pthread_join(room, nullptr);
  pthread_attr_destroy(&attr);
  held.mutex.unlock();
  shut.join();
  CHECK(g.in_flight() == 0);
  CHECK(other.in_flight() == 1);
}

TEST_CASE_TEMPLATE("a gate destroyed with waits pending completes them with operation_aborted", G, GATES) {
  net::io_context io;
  int aborted = 0, other = 0;
  const auto count = [&](error_code ec, permit<G> p) { ++(ec == net::error::operation_aborted && !p ? aborted : other); };
  net::cancellation_signal cancel;
  {
    auto g = std::make_unique<G>(1);
    REQUIRE(g->try_admit());
    for (int i = 0; i < 10; ++i) sluice::async_admit(*g, net::bind_executor(io, count));
    sluice::async_admit(*g, net::bind_cancellation_slot(cancel.slot(), net::bind_executor(io, count)));
  }
  cancel.emit(net::cancellation_type::terminal);  // too late: the wait has left
  io.run_for(long_enough);
  CHECK(aborted == 11);
  CHECK(other == 0);
}

#if !defined(SLUICE_TEST_TSAN)
// docs/gate.md, FORK: a fork while another thread's set_cap grants thousands of waits (and posts
// their handlers) leaves the child each wait queued or posted, never between: the child can
// destroy its io_context (every wait withdrawn or destroyed, each admission given back) or run it
// (every wait completes once), and in_flight() is exact either way. A child that hangs is ended
// by SIGALRM. Not under ThreadSanitizer, whose runtime a child forked from a process with
// other threads running may find locked.
TEST_CASE("a fork during a grant leaves the child every wait queued or posted") {
  constexpr int waits = sluice_test::sanitized ? 500 : 2000;
  for (int round = 0; round < 12; ++round) {
    const bool run_child = round % 2 == 1;
    sluice::gate g{1};
    REQUIRE(g.try_admit());
    auto io = std::make_unique<net::io_context>();
    std::vector<permit<sluice::gate>> kept;  // the handlers' admissions, held; on io's one thread
    kept.reserve(waits);
    for (int i = 0; i < waits; ++i) {
      sluice::async_admit(g, net::bind_executor(*io, [&kept](error_code ec, permit<sluice::gate> p) {
                            if (!ec) kept.push_back(std::move(p));
                          }));
    }
    std::atomic<bool> started{false};
    std::thread granter([&] {
      started = true;
      g.set_cap(waits + 1);  // admits every wait, posting each handler
    });
    // The fork comes at once, once the grant has begun to count admissions, or once it has
    // counted them all and is posting their handlers.
    const std::int64_t forks_at = round % 3 == 0 ? 0 : round % 3 == 1 ? 2 : waits + 1;
    while (!started.load() || g.in_flight() < forks_at) std::this_thread::yield();
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      alarm(30);
      io->notify_fork(net::execution_context::fork_child);
      bool exact = false;
      if (run_child) {
        g.set_cap(waits + 1);  // the child's own room, if the parent's came after the fork
        io->run();
        exact = kept.size() == static_cast<std::size_t>(waits) && g.in_flight() == waits + 1;
      } else {
        io.reset();  // withdraws the queued waits, destroys the posted handlers with their permits
        exact = g.in_flight() == 1;
      }
      _exit(exact ? 0 : 1);
    }
    granter.join();
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    INFO("round " << round << std::string(run_child ? ": the child runs its io_context" : ": the child destroys it"));
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    io->run_for(long_enough);
    CHECK(kept.size() == static_cast<std::size_t>(waits));
    kept.clear();
    CHECK(g.in_flight() == 1);
  }
}

// The io_context's shutdown, a hand-over and a fork, together: the shutdown withdraws thousands
// of queued waits while a set_cap admits them one at a time (each hand-over reaching the
// context's list of waits) and another thread forks again and again (each fork waiting, with
// every parking spot's mutex held, for the hand-overs in flight). When the shutdown held the
// list's mutex while it withdrew (which takes the spot's mutex), a hand-over waiting for the
// list kept the fork waiting, and the fork kept the shutdown from the spot: all three for good.
// Each round runs in a child of its own, ended by SIGALRM if it hangs. Natively only: the child
// starts threads after a fork from a multi-threaded process, and under qemu-user (the cross
// modes) such a child failed every round.
TEST_CASE("an io_context shut down while a fork waits for a hand-over completes" *
          doctest::skip(sluice_test::emulated)) {
  constexpr int waits = sluice_test::sanitized ? 5000 : 20000;
  for (int round = 0; round < 4; ++round) {
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      alarm(30);
      sluice::gate g{1};
      if (!g.try_admit()) _exit(2);
      auto io = std::make_unique<net::io_context>();
      for (int i = 0; i < waits; ++i) {
        sluice::async_admit(g, net::bind_executor(*io, [](error_code, permit<sluice::gate>) {}));
      }
      std::atomic<bool> go{false};
      std::atomic<bool> done{false};
      std::thread granter([&] {
        while (!go.load()) std::this_thread::yield();
        for (int cap = 2; cap <= waits + 1 && !done.load(); ++cap) g.set_cap(cap);
      });
      std::thread forker([&] {
        while (!go.load()) std::this_thread::yield();
        while (!done.load()) {
          const pid_t child = fork();
          if (child == 0) _exit(0);
          if (child > 0) waitpid(child, nullptr, 0);
        }
      });
      go = true;
      io.reset();  // withdraws what is queued; what set_cap took is destroyed with its admission
      done = true;
      granter.join();
      forker.join();
      _exit(g.in_flight() == 1 ? 0 : 1);
    }
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    INFO("round " << round);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
}
#endif

namespace {
// Pages that a test makes unreadable once the waits it allocates there are queued, and an
// allocator that hands them out (and frees nothing: the test unmaps them at its end).
struct region {
  std::size_t size;
  char* base;
  std::size_t used = 0;
  explicit region(std::size_t bytes)
      : size(bytes),
        base(static_cast<char*>(mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0))) {}
  ~region() { munmap(base, size); }
  bool readable(bool on) { return mprotect(base, size, on ? PROT_READ | PROT_WRITE : PROT_NONE) == 0; }
};

template <class T>
struct region_allocator {
  using value_type = T;
  region* r;
  explicit region_allocator(region* where) : r(where) {}
  template <class U>
  region_allocator(const region_allocator<U>& o) : r(o.r) {}
  T* allocate(std::size_t n) {
    const std::size_t bytes = (n * sizeof(T) + alignof(std::max_align_t) - 1) / alignof(std::max_align_t) * alignof(std::max_align_t);
    if (r->used + bytes > r->size) throw std::bad_alloc();
    T* p = reinterpret_cast<T*>(r->base + r->used);
    r->used += bytes;
    return p;
  }
  void deallocate(T*, std::size_t) {}
  template <class U>
  bool operator==(const region_allocator<U>& o) const { return r == o.r; }
};
}  // namespace

// docs/asio.md, Where async waiters live: each gate has its own queue, so queueing on a gate,
// cancelling one of its waits, waking it (for an async waiter or a thread) never reads another
// gate's waiters on the same parking spot. Gate a's waits but its first are allocated on pages
// made unreadable while gate d, on a's spot, is used: a read of one of them ends the test with
// SIGSEGV. (d's waits run on a context of their own: a context's list of its waits links each
// new one to the last.)
TEST_CASE_TEMPLATE("a gate's waits, wake-ups and cancellations never read another gate's waiters", G, GATES) {
  net::io_context io, d_io;
  G a{1};
  REQUIRE(a.try_admit());
  std::vector<std::unique_ptr<G>> others;  // until one shares a's spot (64 spots)
  do {
    others.push_back(std::make_unique<G>(1));
  } while (&sluice::detail::parking_for(others.back().get()) != &sluice::detail::parking_for(&a));
  G& d = *others.back();
  REQUIRE(d.try_admit());
  constexpr int a_waits = 1000;
  region pages(std::size_t{1} << 20);
  int a_admitted = 0;
  const auto count_a = [&a_admitted](error_code ec, permit<G> p) { a_admitted += !ec && p; };
  sluice::async_admit(a, net::bind_executor(io, count_a));  // a's head: the table holds it
  for (int i = 1; i < a_waits; ++i) {
    sluice::async_admit(a, net::bind_allocator(region_allocator<int>(&pages), net::bind_executor(io, count_a)));
  }
  REQUIRE(pages.readable(false));
  net::cancellation_signal cancel;
  bool d_aborted = false, d_admitted = false;
  sluice::async_admit(d, net::bind_cancellation_slot(cancel.slot(), net::bind_executor(d_io, [&](error_code ec, permit<G>) {
                        d_aborted = ec == net::error::operation_aborted;
                      })));
  sluice::async_admit(d, net::bind_executor(d_io, [&](error_code ec, permit<G> p) { d_admitted = !ec && p; }));
  cancel.emit(net::cancellation_type::terminal);
  d.note_done();  // admits d's second wait
  std::atomic<bool> thread_admitted{false};
  std::thread waiter([&] { thread_admitted = d.try_admit_for(long_enough); });
  d.set_cap(2);  // wakes the thread, wherever it is
  waiter.join();
  CHECK(thread_admitted.load());
  d.note_done();
  REQUIRE(pages.readable(true));
  a.set_cap(a_waits + 1);
  io.run_for(long_enough);
  d_io.run_for(long_enough);
  CHECK(d_aborted);
  CHECK(d_admitted);
  CHECK(a_admitted == a_waits);
  CHECK(a.in_flight() == 1);
  CHECK(d.in_flight() == 0);
}

// ---- weights (docs/gate.md, WEIGHTS) ----------------------------------------------------------

TEST_CASE_TEMPLATE("a queued async wait for n holds back the smaller ones queued after it", G, GATES) {
  net::io_context io;
  G g{4};
  REQUIRE(g.try_admit(3));
  std::vector<std::pair<int, std::int64_t>> done;  // (which, units held)
  std::vector<permit<G>> held;
  const auto wait = [&](int which, std::int64_t n) {
    sluice::async_admit(g, n, net::bind_executor(io, [&, which](error_code ec, permit<G> p) {
                          REQUIRE_FALSE(ec);
                          done.emplace_back(which, p.units());
                          held.push_back(std::move(p));
                        }));
  };
  wait(0, 3);  // 3 + 3 > 4: queued
  wait(1, 1);  // would fit, but waits behind 0 (FIFO)
  io.poll();
  CHECK(done.empty());
  CHECK_FALSE(g.try_admit(1));  // nor does a try overtake them
  CHECK(g.in_flight() == 3);
  g.note_done(2);  // 1 + 3 fits: 0 in, then 1 no longer fits
  io.poll();
  REQUIRE(done.size() == 1);
  CHECK(done[0] == std::pair<int, std::int64_t>{0, 3});
  CHECK(g.in_flight() == 4);
  g.note_done(1);  // 3 + 1: 1 in
  io.poll();
  REQUIRE(done.size() == 2);
  CHECK(done[1] == std::pair<int, std::int64_t>{1, 1});
  CHECK(g.in_flight() == 4);
  held.clear();  // each permit gives back its own weight
  CHECK(g.in_flight() == 0);
}

TEST_CASE_TEMPLATE("an async wait larger than the cap waits for the cap; one above gate_limit fails at once", G, GATES) {
  net::io_context io;
  G g{2};
  std::vector<permit<G>> held;
  std::vector<error_code> codes;
  const auto wait = [&](std::int64_t n) {
    sluice::async_admit(g, n, net::bind_executor(io, [&](error_code ec, permit<G> p) {
                          codes.push_back(ec);
                          held.push_back(std::move(p));
                        }));
  };
  wait(sluice::gate_limit + 1);
  io.poll();
  REQUIRE(codes.size() == 1);
  CHECK(codes[0] == net::error::invalid_argument);
  CHECK_FALSE(static_cast<bool>(held[0]));
  io.restart();  // the poll ran out of work, which stopped the context
  wait(5);
  io.poll();
  CHECK(codes.size() == 1);
  g.set_cap(5);
  io.poll();
  REQUIRE(codes.size() == 2);
  CHECK_FALSE(codes[1]);
  CHECK(held[1].units() == 5);
  CHECK(g.in_flight() == 5);
  held.clear();
  CHECK(g.in_flight() == 0);
}

TEST_CASE_TEMPLATE("a head wait that does not fit, cancelled or withdrawn, lets the waits behind it in", G, GATES) {
  net::io_context io;
  G g{10};
  REQUIRE(g.try_admit(9));
  std::vector<error_code> codes;
  std::vector<permit<G>> held;
  const auto record = [&](error_code ec, permit<G> p) {
    codes.push_back(ec);
    held.push_back(std::move(p));
  };
  SUBCASE("cancelled") {
    net::cancellation_signal signal;
    sluice::async_admit(g, 5, net::bind_cancellation_slot(signal.slot(), net::bind_executor(io, record)));
    sluice::async_admit(g, 1, net::bind_executor(io, record));  // fits, but queued behind the 5
    io.poll();
    CHECK(codes.empty());
    signal.emit(net::cancellation_type::terminal);
    io.poll();
    REQUIRE(codes.size() == 2);
    CHECK(codes[0] == net::error::operation_aborted);
    CHECK_FALSE(codes[1]);
    CHECK(held[1].units() == 1);
    CHECK(g.in_flight() == 10);
  }
  SUBCASE("withdrawn: its context destroyed") {
    {
      net::io_context other;
      sluice::async_admit(g, 5, net::bind_executor(other, record));
      sluice::async_admit(g, 1, net::bind_executor(io, record));
      io.poll();
      CHECK(codes.empty());
    }  // the 5's context shuts down: its wait is withdrawn
    io.poll();
    REQUIRE(codes.size() == 1);
    CHECK_FALSE(codes[0]);
    CHECK(g.in_flight() == 10);
  }
  held.clear();
  g.note_done(9);
  CHECK(g.in_flight() == 0);
}

// ---- close (docs/gate.md, CLOSE) ------------------------------------------------------------

TEST_CASE_TEMPLATE("close completes every queued async wait, and every later one, with gate_errc::closed", G, GATES) {
  net::io_context io;
  G g{2};
  REQUIRE(g.try_admit(2));
  std::vector<error_code> codes;
  std::vector<permit<G>> held;
  const auto record = [&](error_code ec, permit<G> p) {
    codes.push_back(ec);
    held.push_back(std::move(p));
  };
  for (int i = 0; i < 5; ++i) sluice::async_admit(g, 1 + i % 2, net::bind_executor(io, record));
  io.poll();
  CHECK(codes.empty());
  g.close();
  io.poll();
  REQUIRE(codes.size() == 5);
  for (const error_code& ec : codes) CHECK(std::error_code(ec) == sluice::gate_errc::closed);
  for (const auto& p : held) CHECK_FALSE(static_cast<bool>(p));
  CHECK(g.in_flight() == 2);  // what was admitted before stays counted
  io.restart();
  sluice::async_admit(g, net::bind_executor(io, record));  // after the close
  sluice::async_admit(g, 0, net::bind_executor(io, record));
  io.poll();
  REQUIRE(codes.size() == 7);
  CHECK(std::error_code(codes[5]) == sluice::gate_errc::closed);
  CHECK(std::error_code(codes[6]) == sluice::gate_errc::closed);
  CHECK(std::string(std::error_code(sluice::gate_errc::closed).category().name()) == "sluice.gate");
  g.note_done(2);  // the drain still counts down
  CHECK(g.in_flight() == 0);
}

TEST_CASE_TEMPLATE("stats count async waits: admitted at once or after a wait, cancelled, closed, queued", G, GATES) {
  net::io_context io;
  G g{1};
  std::vector<error_code> codes;
  std::vector<permit<G>> held;
  const auto record = [&](error_code ec, permit<G> p) {
    codes.push_back(ec);
    held.push_back(std::move(p));
  };
  sluice::async_admit(g, net::bind_executor(io, record));  // room: admitted at once, not queued
  io.poll();
  REQUIRE(codes.size() == 1);
  net::cancellation_signal signal;
  sluice::async_admit(g, net::bind_executor(io, record));  // these three are queued
  sluice::async_admit(g, net::bind_cancellation_slot(signal.slot(), net::bind_executor(io, record)));
  sluice::async_admit(g, net::bind_executor(io, record));
  sluice::gate_stats s = g.stats();
  CHECK(s.admitted == 1);
  CHECK(s.waiting == 3);
  CHECK(s.refused == 0);  // a wait that queues is not refused
  signal.emit(net::cancellation_type::terminal);
  CHECK(g.stats().cancelled == 1);
  CHECK(g.stats().waiting == 2);
  held.clear();  // the first admission goes back: the head of the queue is granted
  io.restart();  // the first poll ran out of work
  io.poll();
  s = g.stats();
  CHECK(s.admitted == 2);
  CHECK(s.admitted_after_wait == 1);
  CHECK(s.waiting == 1);
  g.close();  // the last one completes closed
  io.poll();
  REQUIRE(codes.size() == 4);
  s = g.stats();
  CHECK(s.closed == 1);
  CHECK(s.waiting == 0);
  CHECK(s.cancelled == 1);
  CHECK(s.timed_out == 0);
  CHECK(s.peak_in_flight == 1);
}

TEST_CASE_TEMPLATE("close racing grants, cancellations and note_done never loses or double-counts", G, GATES) {
  const int rounds = sluice_test::reduced ? 200 : 1000;
  for (int round = 0; round < rounds; ++round) {
    net::io_context io;
    G g{3};
    REQUIRE(g.try_admit(3));
    std::atomic<std::int64_t> granted{0};
    std::atomic<int> completed{0};
    std::vector<permit<G>> held;
    std::mutex held_mutex;
    net::cancellation_signal signals[4];
    for (int i = 0; i < 4; ++i) {
      sluice::async_admit(g, 1 + i % 2, net::bind_cancellation_slot(signals[i].slot(),
                                                                    net::bind_executor(io, [&](error_code ec, permit<G> p) {
        if (!ec) granted.fetch_add(p.units());
        completed.fetch_add(1);
        std::lock_guard lock(held_mutex);
        held.push_back(std::move(p));
      })));
    }
    std::thread closer([&] { g.close(); });
    std::thread finisher([&] { g.note_done(3); });
    signals[round % 4].emit(net::cancellation_type::terminal);  // on this thread, io not running
    closer.join();
    finisher.join();
    io.run_for(long_enough);
    REQUIRE(completed.load() == 4);  // every wait completed: admitted, aborted or closed
    CHECK(g.in_flight() == granted.load());  // exactly the admissions granted, once each
    held.clear();
    CHECK(g.in_flight() == 0);
    CHECK(g.closed());
  }
}
