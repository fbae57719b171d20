// async_admit (<sluice/asio.hpp>) against what an Asio program would write without sluice:
//
// channel:       asio::experimental::channel<void()> with a buffer of `cap` as a
//                counting semaphore: async_send acquires (it completes at once while the buffer
//                has room and waits while `cap` are out), try_receive releases (it frees a place
//                and hands it to the first waiting send). The other way round (receive to
//                acquire from a channel filled beforehand) needs the filling and a send that can
//                find the buffer full. On 2 threads: concurrent_channel, which has a mutex
//                (channel itself must not be touched by two threads at once). The message
//                carries nothing: Asio 1.22 cannot instantiate channel<void(error_code)> (two
//                of its channel_traits specializations match it), and a semaphore needs none.
// strand:        a counter and a FIFO of waiting handlers, touched only on a strand: acquire
//                and release dispatch onto it, a waiter's completion is posted to its executor.
//
// Families asio.CASE.capN, each at 1 and 2 threads running one io_context:
//   room_await / room_callback: `cap` lanes (coroutines, or chains of callbacks), each acquiring
//       and releasing in a loop: never more than cap holders, so every acquire finds room (and
//       still completes posted, as an Asio operation does);
//   wait_await: 2 x cap coroutines on cap places: at cap 1 two coroutines ping-pong, one holding
//       while the other waits and each release wakes the other, so (on 1 thread) every acquire
//       after the first waits.
// An iteration is a batch of pairs (acquire + release) on the io_context's threads, which live
// for the whole benchmark; the counter pairs_per_iteration lets bench/report.py give ns per pair.
#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <asio/experimental/channel.hpp>
#include <asio/experimental/concurrent_channel.hpp>

#include "bench_main.hpp"
#include "sluice/asio.hpp"

namespace {

constexpr int batch = 8192;  // pairs per iteration, over all lanes

// The io_context and `threads` threads that run it until the benchmark ends; run() starts a
// batch (through start, which must call done() once per lane at its end) and waits for it.
class runner {
 public:
  explicit runner(int threads) : guard_(asio::make_work_guard(io_)) {
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { io_.run(); });
  }
  ~runner() {
    guard_.reset();
    for (auto& t : threads_) t.join();
  }
  asio::io_context& io() { return io_; }

  template <class Start>
  void run(int lanes, Start start) {
    left_.store(lanes);
    for (int i = 0; i < lanes; ++i) start();
    for (int n = left_.load(); n != 0; n = left_.load()) left_.wait(n);
  }
  void done() {
    if (left_.fetch_sub(1) == 1) left_.notify_one();
  }

 private:
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> guard_;
  std::vector<std::thread> threads_;
  std::atomic<int> left_{0};
};

// The strand-guarded counter. Waiters are kept type-erased (a handler is move-only), allocated
// one per wait, as async_admit allocates its waiting node.
class strand_semaphore {
 public:
  strand_semaphore(asio::io_context& io, int cap) : strand_(asio::make_strand(io)), free_(cap) {}

  template <class Token>
  auto async_acquire(Token&& token) {
    return asio::async_initiate<Token, void(std::error_code)>(
        [this](auto handler) {
          asio::dispatch(strand_, [this, h = std::move(handler)]() mutable {
            if (free_ > 0) {
              --free_;
              complete(std::move(h));
            } else {
              waiters_.push_back(std::make_unique<waiter<decltype(h)>>(std::move(h)));
            }
          });
        },
        token);
  }
  void release() {
    asio::dispatch(strand_, [this] {
      if (waiters_.empty()) {
        ++free_;
      } else {  // the place passes to the first waiter
        std::unique_ptr<waiter_base> w = std::move(waiters_.front());
        waiters_.pop_front();
        w->complete();
      }
    });
  }

 private:
  template <class Handler>
  static void complete(Handler h) {
    auto ex = asio::get_associated_executor(h);
    asio::post(ex, [h = std::move(h)]() mutable { std::move(h)(std::error_code()); });
  }
  struct waiter_base {
    virtual ~waiter_base() = default;
    virtual void complete() = 0;
  };
  template <class Handler>
  struct waiter final : waiter_base {
    explicit waiter(Handler&& h) : handler(std::move(h)) {}
    Handler handler;
    void complete() override { strand_semaphore::complete(std::move(handler)); }
  };

  asio::strand<asio::io_context::executor_type> strand_;
  int free_;  // guarded by the strand, as is waiters_
  std::deque<std::unique_ptr<waiter_base>> waiters_;
};

template <class Channel>
void release_channel(Channel& ch) {
  // The buffer holds this acquirer's message, so there is one to take.
  [[maybe_unused]] const bool took = ch.try_receive([](auto...) {});
}

enum class kind { gate, channel, strand };

// One contender on one io_context: acquire (asynchronously) and release.
template <kind K, bool Concurrent>
struct contender;

template <bool Concurrent>
struct contender<kind::gate, Concurrent> {
  contender(asio::io_context&, int cap) : g(cap) {}
  sluice::gate g;
  asio::awaitable<void> pair() { auto p = co_await sluice::async_admit(g, asio::use_awaitable); }
  template <class Next>
  void pair(asio::io_context& io, Next next) {
    sluice::async_admit(g, asio::bind_executor(io, [next = std::move(next)](std::error_code, sluice::permit<sluice::gate> p) mutable {
                          p.release();
                          next();
                        }));
  }
};

template <bool Concurrent>
struct contender<kind::channel, Concurrent> {
  using channel_type = std::conditional_t<Concurrent, asio::experimental::concurrent_channel<void()>,
                                          asio::experimental::channel<void()>>;
  contender(asio::io_context& io, int cap) : ch(io, cap) {}
  channel_type ch;
  asio::awaitable<void> pair() {
    co_await ch.async_send(asio::use_awaitable);
    release_channel(ch);
  }
  template <class Next>
  void pair(asio::io_context& io, Next next) {
    ch.async_send(asio::bind_executor(io, [this, next = std::move(next)](std::error_code) mutable {
                    release_channel(ch);
                    next();
                  }));
  }
};

template <bool Concurrent>
struct contender<kind::strand, Concurrent> {
  contender(asio::io_context& io, int cap) : s(io, cap) {}
  strand_semaphore s;
  asio::awaitable<void> pair() {
    co_await s.async_acquire(asio::use_awaitable);
    s.release();
  }
  template <class Next>
  void pair(asio::io_context& io, Next next) {
    s.async_acquire(asio::bind_executor(io, [this, next = std::move(next)](std::error_code) mutable {
      s.release();
      next();
    }));
  }
};

// A lane of callbacks: each completion releases and starts the next acquire, `left` times.
template <class C>
struct callback_lane {
  C* c;
  asio::io_context* io;
  runner* r;
  int left;
  void operator()() {
    if (left-- == 0) {
      r->done();
      return;
    }
    c->pair(*io, *this);
  }
};

template <kind K, bool Await>
void run_case(benchmark::State& state, int threads, int cap, int lanes) {
  runner r(threads);
  // Two threads need the thread-safe channel; one takes the plain one, as its user would.
  auto body = [&]<bool Concurrent>(std::bool_constant<Concurrent>) {
    contender<K, Concurrent> c(r.io(), cap);
    const int per_lane = batch / lanes;
    for (auto _ : state) {
      r.run(lanes, [&] {
        if constexpr (Await) {
          asio::co_spawn(r.io(), [&]() -> asio::awaitable<void> {
            for (int i = 0; i < per_lane; ++i) co_await c.pair();
            r.done();
          }, asio::detached);
        } else {
          asio::post(r.io(), callback_lane<contender<K, Concurrent>>{&c, &r.io(), &r, per_lane});
        }
      });
    }
    state.counters["pairs_per_iteration"] = per_lane * lanes;
  };
  if (threads > 1) {
    body(std::true_type{});
  } else {
    body(std::false_type{});
  }
}

void register_all() {
  struct variant {
    const char* name;
    void (*room_await)(benchmark::State&, int, int, int);
    void (*room_callback)(benchmark::State&, int, int, int);
  };
  const variant variants[] = {
      {"async_admit", run_case<kind::gate, true>, run_case<kind::gate, false>},
      {"channel", run_case<kind::channel, true>, run_case<kind::channel, false>},
      {"strand_counter", run_case<kind::strand, true>, run_case<kind::strand, false>},
  };
  for (const int cap : {1, 8}) {
    const std::string c = ".cap" + std::to_string(cap);
    for (const char* which : {"room_await", "room_callback", "wait_await"}) {
      const std::string w = which;
      for (const variant& v : variants) {
        for (const int threads : {1, 2}) {
          auto fn = w == "room_callback" ? v.room_callback : v.room_await;
          const int lanes = w == "wait_await" ? 2 * cap : cap;
          benchmark::RegisterBenchmark(("asio." + w + c + "/" + v.name + "/threads:" + std::to_string(threads)).c_str(),
                                       [=](benchmark::State& s) { fn(s, threads, cap, lanes); })
              ->UseRealTime();
        }
      }
    }
  }
}

}  // namespace

SLUICE_BENCH_MAIN(register_all)
