// The gate's async waiters under the deterministic scheduler: a fork at every switch point of a
// grant (docs/asio.md, Fork). The child is forked for real, from one of the scheduled threads,
// and checks what it inherited: each waiter queued, or handed over exactly once, never taken out
// but not handed over; in_flight() exactly the admissions counted; and every waiter still queued
// served there once its gate has room.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <vector>

#include "../doctest.hpp"
#include "parking.hpp"
#include "scheduler.hpp"
#include "sluice/detail/async_wait.hpp"
#include "sluice/gate.hpp"

using sluice_test::det::moment;
using sluice_test::det::scheduler;

namespace {

constexpr int waiters = 3;

struct waiter : sluice::detail::async_waiter {
  int handed = 0;  // hand-overs seen
  bool admitted = false;

  explicit waiter(sluice::gate& g) {
    gate = &g;
    hand_over = [](sluice::detail::async_waiter* w, bool ok) noexcept {
      auto& self = static_cast<waiter&>(*w);
      ++self.handed;
      self.admitted = ok;
      return true;
    };
  }
};

// In the child: whether it inherited each waiter whole and in_flight exact, and whether serving
// the gate (as an io_context's notify_fork does) then hands over every waiter left, once.
bool child_finds_it_whole(sluice::gate& g, std::vector<waiter>& ws) {
  std::int64_t admitted = 0;
  for (const waiter& w : ws) {
    if (w.queued ? w.handed != 0 : w.handed != 1 || !w.admitted) return false;
    admitted += w.handed;
  }
  if (g.in_flight() != 1 + admitted) return false;
  g.set_cap(waiters + 1);  // the parent's set_cap may have come after the fork
  for (const waiter& w : ws) {
    if (w.queued) sluice::detail::async_serve(w);
  }
  for (const waiter& w : ws) {
    if (w.queued || w.handed != 1 || !w.admitted) return false;
  }
  return g.in_flight() == 1 + waiters;
}

// The policy of the cases below: thread 0 runs its first k switch points, then stops while thread
// 1 runs on; thread 0 runs one more only when thread 1 has spun a thousand, as it does while it
// waits for a lock or a hand-over that thread 0 holds.
auto stop_after(std::size_t k) {
  return [k, spun = std::size_t{0}](const moment& m) mutable {
    const auto runnable = [&m](std::size_t t) { return std::find(m.runnable.begin(), m.runnable.end(), t) != m.runnable.end(); };
    if (!runnable(1) || (runnable(0) && (m.step < k || ++spun % 1000 == 0))) return m.runnable.front();
    return std::size_t{1};
  };
}

}  // namespace

TEST_CASE("a fork at any step of a grant finds every async waiter queued or handed over, once") {
  // The grant's switch points, counted with its thread alone.
  std::size_t grant_steps = 0;
  {
    sluice::gate g{1};
    g.note_submitted();
    std::vector<waiter> ws(waiters, waiter(g));
    for (waiter& w : ws) sluice::detail::async_wait(g, w);
    grant_steps = scheduler::run({[&] { g.set_cap(waiters + 1); }}, scheduler::random(0));
    REQUIRE(g.in_flight() == 1 + waiters);
  }
  std::size_t forks = 0;
  for (std::size_t k = 0; k <= grant_steps; ++k) {
    CAPTURE(k);
    sluice::gate g{1};
    g.note_submitted();
    std::vector<waiter> ws(waiters, waiter(g));
    for (waiter& w : ws) sluice::detail::async_wait(g, w);
    int status = -1;
    // The granting thread (0) runs its first k switch points, then stops while the forking
    // thread (1) goes on.
    auto policy = stop_after(k);
    scheduler::run({[&] { g.set_cap(waiters + 1); },
                    [&] {
                      const pid_t pid = fork();
                      if (pid == 0) {
                        scheduler::detach();
                        alarm(10);
                        _exit(child_finds_it_whole(g, ws) ? 0 : 1);
                      }
                      if (pid > 0) waitpid(pid, &status, 0);
                    }},
                   policy);
    ++forks;
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    for (const waiter& w : ws) CHECK((!w.queued && w.handed == 1 && w.admitted));
    CHECK(g.in_flight() == 1 + waiters);
  }
  MESSAGE("a grant of " << waiters << " waiters: " << grant_steps << " switch points, " << forks << " forks");
}

// close() racing the note_done that grants (docs/gate.md, CLOSE): one thread stops after each of
// its switch points while the other runs to its end, both ways round. Every waiter leaves once,
// admitted or closed, none is left queued on the closed gate, and in_flight() counts exactly the
// admissions granted.
TEST_CASE("close stopped at any step of a grant, or a grant at any step of close, loses and doubles nothing") {
  for (const bool close_first : {true, false}) {
    for (std::size_t k = 0; k < 64; ++k) {
      CAPTURE(close_first);
      CAPTURE(k);
      sluice::gate g{1};
      g.note_submitted();
      std::vector<waiter> ws(waiters, waiter(g));
      for (waiter& w : ws) sluice::detail::async_wait(g, w);
      const std::function<void()> closer = [&] { g.close(); };
      const std::function<void()> finisher = [&] { g.note_done(); };
      auto policy = stop_after(k);  // thread 0 stops after k switch points, thread 1 runs on
      const std::size_t steps = scheduler::run({close_first ? closer : finisher, close_first ? finisher : closer}, policy);
      std::int64_t admitted = 0;
      for (const waiter& w : ws) {
        CHECK(!w.queued);
        CHECK(w.handed == 1);
        CHECK((w.admitted || w.closed));
        admitted += w.admitted ? 1 : 0;
      }
      CHECK(admitted <= 1);
      CHECK(g.in_flight() == admitted);
      CHECK(g.closed());
      if (k > steps) break;  // every stop point taken
    }
  }
}

// A fork at every switch point of close(): the child inherits each waiter queued or handed over
// closed, and serving the gate there (an io_context's notify_fork) hands every one still queued
// over closed: none is stranded on the closed gate, none admitted.
TEST_CASE("a fork at any step of close finds every async waiter queued or handed over closed, and serves the rest closed") {
  std::size_t close_steps = 0;
  {
    sluice::gate g{1};
    g.note_submitted();
    std::vector<waiter> ws(waiters, waiter(g));
    for (waiter& w : ws) sluice::detail::async_wait(g, w);
    close_steps = scheduler::run({[&] { g.close(); }}, scheduler::random(0));
  }
  const auto child_ok = [](sluice::gate& g, std::vector<waiter>& ws) {
    for (const waiter& w : ws) {
      if (w.queued ? w.handed != 0 : w.handed != 1 || w.admitted || !w.closed) return false;
    }
    if (!g.closed()) {  // forked before close's CAS: all still queued, and the child closes it
      for (const waiter& w : ws) {
        if (!w.queued) return false;
      }
      g.close();
    }
    for (const waiter& w : ws) {
      if (w.queued) sluice::detail::async_serve(w);
    }
    for (const waiter& w : ws) {
      if (w.queued || w.handed != 1 || w.admitted || !w.closed) return false;
    }
    return g.closed() && g.in_flight() == 1;
  };
  for (std::size_t k = 0; k <= close_steps; ++k) {
    CAPTURE(k);
    sluice::gate g{1};
    g.note_submitted();
    std::vector<waiter> ws(waiters, waiter(g));
    for (waiter& w : ws) sluice::detail::async_wait(g, w);
    int status = -1;
    auto policy = stop_after(k);
    scheduler::run({[&] { g.close(); },
                    [&] {
                      const pid_t pid = fork();
                      if (pid == 0) {
                        scheduler::detach();
                        alarm(10);
                        _exit(child_ok(g, ws) ? 0 : 1);
                      }
                      if (pid > 0) waitpid(pid, &status, 0);
                    }},
                   policy);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    for (const waiter& w : ws) CHECK((!w.queued && w.handed == 1 && !w.admitted && w.closed));
  }
}
