// <sluice/asio.hpp> and <sluice/boost_asio.hpp> in one program, as their headers say they may be:
// each async_admit takes its own Asio's tokens (the other's are refused at compile time), a plain
// callback must be bound to say which, and one gate serves waiters of both Asios, in FIFO order.
#include <chrono>
#include <system_error>
#include <type_traits>
#include <vector>

#include <asio/experimental/deferred.hpp>
#include <boost/asio/deferred.hpp>

#include "doctest.hpp"
#include "kinds.hpp"
#include "sluice/asio.hpp"
#include "sluice/boost_asio.hpp"

using namespace std::chrono_literals;
using sluice::permit;

namespace {

template <class G, class Token>
concept admits_with = requires(G& g, Token&& t) { sluice::async_admit(g, std::forward<Token>(t)); };

struct plain_callback {
  void operator()(std::error_code, permit<sluice::gate>) const {}
  void operator()(boost::system::error_code, permit<sluice::gate>) const {}
};

// Each Asio's deferred token yields its own deferred operation type: the overload is its Asio's.
static_assert(std::is_same_v<decltype(sluice::async_admit(std::declval<sluice::gate&>(), asio::experimental::deferred)),
                             decltype(asio::async_initiate<const asio::experimental::deferred_t&,
                                                           void(std::error_code, permit<sluice::gate>)>(
                                 sluice::detail::asio_standalone::initiate_admit{}, asio::experimental::deferred,
                                 static_cast<sluice::gate*>(nullptr), std::int64_t{1}))>);
static_assert(admits_with<sluice::gate, decltype(asio::use_future)>);
static_assert(admits_with<sluice::gate, decltype(boost::asio::use_future)>);
static_assert(admits_with<sluice::gate, decltype(boost::asio::deferred)>);
// An unbound callback belongs to neither Asio: ambiguous, so refused.
static_assert(!admits_with<sluice::gate, plain_callback>);
static_assert(admits_with<sluice::gate, asio::executor_binder<plain_callback, asio::io_context::executor_type>>);
static_assert(
    admits_with<sluice::gate, boost::asio::executor_binder<plain_callback, boost::asio::io_context::executor_type>>);

}  // namespace

TEST_CASE_TEMPLATE("one gate serves waiters of both Asios, each completing on its own", G, GATES) {
  asio::io_context io;
  boost::asio::io_context boost_io;
  G g{1};
  REQUIRE(g.try_admit());
  std::vector<int> order;
  std::vector<permit<G>> held;
  for (int i = 0; i < 4; ++i) {
    if (i % 2 == 0) {
      sluice::async_admit(g, asio::bind_executor(io, [&, i](auto ec, permit<G> p) {
                            // A runtime check: a static_assert here would fire while the other
                            // Asio's overload is weighed (its constraint instantiates this body).
                            CHECK(std::is_same_v<decltype(ec), std::error_code>);
                            CHECK_FALSE(ec);
                            order.push_back(i);
                            held.push_back(std::move(p));
                          }));
    } else {
      sluice::async_admit(g, boost::asio::bind_executor(boost_io, [&, i](auto ec, permit<G> p) {
                            CHECK(std::is_same_v<decltype(ec), boost::system::error_code>);
                            CHECK_FALSE(ec);
                            order.push_back(i);
                            held.push_back(std::move(p));
                          }));
    }
  }
  g.note_done();
  // One room at a time: the next waiter in line is admitted and completes on its own context;
  // the other context has nothing to run.
  for (int i = 0; i < 4; ++i) {
    const std::size_t before = order.size();
    if (i % 2 == 0) {
      CHECK(boost_io.poll() == 0);
      io.run_one_for(60s);  // one handler: the context's later waiter keeps it from running out of work
    } else {
      CHECK(io.poll() == 0);
      boost_io.run_one_for(60s);
    }
    REQUIRE(order.size() == before + 1);
    CHECK(order.back() == i);
    CHECK(g.in_flight() == 1);
    held.clear();  // gives the room to the next
    io.restart();
    boost_io.restart();
  }
  CHECK(g.in_flight() == 0);
}

TEST_CASE("the two Asios' cancellations are each their own") {
  asio::io_context io;
  boost::asio::io_context boost_io;
  sluice::gate g{1};
  REQUIRE(g.try_admit());
  asio::cancellation_signal signal;
  boost::asio::cancellation_signal boost_signal;
  std::error_code got;
  boost::system::error_code boost_got;
  bool boost_admitted = false;
  sluice::async_admit(g, asio::bind_cancellation_slot(signal.slot(), asio::bind_executor(io, [&](std::error_code ec, permit<sluice::gate> p) {
                                                          got = ec;
                                                          CHECK_FALSE(p);
                                                        })));
  sluice::async_admit(g, boost::asio::bind_cancellation_slot(
                             boost_signal.slot(), boost::asio::bind_executor(boost_io, [&](boost::system::error_code ec, permit<sluice::gate> p) {
                               boost_got = ec;
                               boost_admitted = static_cast<bool>(p);
                             })));
  signal.emit(asio::cancellation_type::terminal);  // the first in line leaves
  io.run_for(60s);
  CHECK(got == asio::error::operation_aborted);
  g.note_done();  // the room goes to the Boost waiter, next in line
  boost_io.run_for(60s);
  CHECK_FALSE(boost_got);
  CHECK(boost_admitted);
  CHECK(g.in_flight() == 0);
}
