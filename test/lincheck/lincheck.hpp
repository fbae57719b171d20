// A linearizability checker for short histories of concurrent calls.
//
// A history lists completed calls: the thread that made each, the tick of one clock that all
// threads share taken just before the call (invoked) and just after it returned (returned), and
// what the call did and answered. A call whose `returned` is below another's `invoked` finished
// first in real time. The history is linearizable (Herlihy and Wing, ACM TOPLAS 12(3), 1990) when
// its calls can be put in one sequence that keeps every such real-time order and that a
// sequential model accepts, answer for answer.
//
// The search is Wing and Gong's (J. Parallel Distrib. Comput. 17(1-2), 1993): grow a sequence one
// call at a time, trying only calls invoked before every call not yet placed has returned, and
// backtrack when none fits. Lowe's memoisation ("Testing for linearizability", Concurrency and
// Computation: Practice and Experience 29(4), 2017) prunes it: a configuration is the set of
// calls placed (a bitset) with the model state reached, and a configuration seen before is not
// explored again, since what can still be placed depends on nothing else. Exact: a history is
// rejected only when no sequence exists.
//
// Models may be nondeterministic: step() lists every state a call may lead to, given the answer
// it was recorded with (none: it cannot come next). That is how the pool's relaxations are
// written (pool_model.hpp).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace lincheck {

// A model state, flattened: a vector of integers is copyable, comparable and hashable as is.
using state = std::vector<std::int64_t>;

struct timing {
  std::uint32_t thread = 0;
  std::uint64_t invoked = 0;
  std::uint64_t returned = 0;
};

// A sequential specification of the calls of one history (the model holds the calls; index i
// names the i-th, in the order of the timings given to check()).
class model {
 public:
  virtual ~model() = default;
  virtual state initial() const = 0;
  // Appends to `next` every state that call i, answering as recorded, may lead to from s.
  virtual void step(const state& s, std::size_t i, std::vector<state>& next) const = 0;
  // The call and its answer, for reports: "take(1000) -> 1000#5".
  virtual std::string show(std::size_t i) const = 0;
  virtual std::string show_state(const state& s) const;
};

struct verdict {
  bool linearizable = false;
  std::size_t configurations = 0;  // distinct (placed set, state) pairs explored
  std::string report;              // for a rejected history: the history and where it got stuck
};

// The bitset of placed calls is one 64-bit word.
inline constexpr std::size_t max_calls = 64;

// Requires calls.size() <= max_calls and invoked < returned for every call.
verdict check(std::span<const timing> calls, const model& m);

// The shared clock. The ticks are sequentially consistent read-modify-writes, so a call that
// returned before another was invoked also happens before it: the history's real-time order is
// one that the memory model guarantees, not only one the scheduler happened to show.
class clock {
 public:
  std::uint64_t tick() noexcept { return now_.fetch_add(1, std::memory_order_seq_cst); }

 private:
  std::atomic<std::uint64_t> now_{0};
};

template <class Call>
struct history {
  std::vector<timing> when;
  std::vector<Call> what;

  std::size_t size() const noexcept { return when.size(); }
  void append(const history& other) {
    when.insert(when.end(), other.when.begin(), other.when.end());
    what.insert(what.end(), other.what.begin(), other.what.end());
  }
};

// One thread's log: run() ticks, makes the call, ticks again, and only then records (outside the
// call's interval, so the recording never widens it).
template <class Call>
class recorder {
 public:
  recorder(clock& c, std::uint32_t thread, std::size_t expected = 16) : clock_(&c), thread_(thread) {
    log_.when.reserve(expected);
    log_.what.reserve(expected);
  }

  // body(call) makes the call and stores its answer in `call`.
  template <class Body>
  void run(Call call, Body&& body) {
    const std::uint64_t invoked = clock_->tick();
    body(call);
    const std::uint64_t returned = clock_->tick();
    log_.when.push_back({thread_, invoked, returned});
    log_.what.push_back(std::move(call));
  }

  const history<Call>& log() const noexcept { return log_; }

 private:
  clock* clock_;
  std::uint32_t thread_;
  history<Call> log_;
};

}  // namespace lincheck
