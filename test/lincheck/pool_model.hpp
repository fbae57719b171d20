// The pool's calls as the checker sees them, and the sequential pool they are checked against,
// written from the contract in sluice/pool.hpp (not from lib/, which it checks).
//
// Buffers are told apart by a mark, a small number written into their first bytes before they
// are retired and read back when a take answers them: the pool never touches a buffer's bytes,
// so the model can follow each buffer, not only capacities, and a buffer answered twice, or one
// answered after it was dropped, cannot pass.
//
// The exact model is the sequential pool: a set of buffers; take(n) answers one of the smallest
// capacity >= n (none when nothing serves or n > ceiling); retire keeps the buffer when its
// capacity <= ceiling and fewer than bound are retained, else drops it; retained() is the count.
// Three relaxations can be switched on (pool_rules); each says what it admits and why.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "lincheck.hpp"
#include "sluice/buffer.hpp"

namespace lincheck {

enum class pool_op : std::uint8_t { take, retire, retained };

struct pool_call {
  pool_op op = pool_op::retained;
  std::size_t size = 0;         // take: the request; retire: the buffer's capacity
  std::uint32_t id = 0;         // retire: the buffer's mark, 1 to 63, unique among a history's buffers
  std::size_t answer = 0;       // take: the answered capacity (0: none); retained: the count
  std::uint32_t answer_id = 0;  // take: the answered buffer's mark

  // What the rest of the history says about this call (annotate()), for the relaxed rules.
  std::uint32_t overlapping = 0;          // take/retire calls of other workers whose intervals meet this one
  std::uint64_t overlapping_retires = 0;  // the marks those retires carried, one bit each
  std::uint32_t others_started = 0;       // other workers that invoked a call before this one returned
};

// Marks: the first 8 bytes of a buffer (every capacity the tests use is at least 8).
inline void put_mark(sluice::buffer& b, std::uint64_t id) { std::memcpy(b.data(), &id, sizeof id); }
inline std::uint32_t read_mark(const sluice::buffer& b) {
  std::uint64_t id = 0;
  std::memcpy(&id, b.data(), sizeof id);
  return static_cast<std::uint32_t>(id);
}

// Fills in each call's context. `observer` is the thread that calls only after every worker has
// exited; it has no context and is left out of everyone else's.
template <class History>
void annotate(History& h, std::uint32_t observer) {
  for (std::size_t i = 0; i < h.size(); ++i) {
    const timing& a = h.when[i];
    if (a.thread == observer) continue;
    pool_call& c = h.what[i];
    std::uint64_t started = 0;
    for (std::size_t j = 0; j < h.size(); ++j) {
      const timing& b = h.when[j];
      if (b.thread == a.thread || b.thread == observer) continue;
      if (b.invoked < a.returned) started |= std::uint64_t{1} << b.thread;
      const bool meet = b.invoked < a.returned && a.invoked < b.returned;
      if (meet && h.what[j].op != pool_op::retained) {
        ++c.overlapping;
        if (h.what[j].op == pool_op::retire) c.overlapping_retires |= std::uint64_t{1} << h.what[j].id;
      }
    }
    c.others_started = static_cast<std::uint32_t>(std::popcount(started));
  }
}

struct pool_rules {
  std::size_t bound = 0;
  std::size_t ceiling = 0;
  std::uint32_t observer = 0;  // see annotate()

  // IN FLIGHT (the lock-free pool's reservation of a place of the bound: "a retire first reserves
  // a place in one shared counter and is dropped when none is left"; "retained() [is] exact when
  // no call is in flight"). A place is held by a retire before its buffer can be taken and by a
  // take after its buffer is gone, so: retained() may be off the count by at most the number of
  // take/retire calls of other threads in flight during it, and a retire may be dropped when the
  // count plus that number reaches the bound.
  bool in_flight = false;

  // SCAN (take looks at one class after another, not at a snapshot of them all). A take may pass
  // over a buffer that serves, answering a larger one or none, when that buffer's retire
  // overlapped the take: it landed in a class the take had already looked at. pool.hpp does not
  // say so, but real runs of sluice::pool do it: a take answered none while at every instant of
  // the call some retained buffer served it.
  bool scan = false;

  // CACHES (the THREAD CACHES section of pool.hpp), read as follows:
  //  - "take on one thread may miss buffers another live thread holds in its cache": each on-class
  //    buffer carries the set of threads whose cache may hold it. A thread's own retire puts the
  //    buffer in its own cache; a take pops a batch from the shared stacks, so every on-class
  //    buffer that could serve it may now sit in the taker's cache. A take may pass over (or miss)
  //    a buffer that some other thread may cache, never one only it or nobody may cache.
  //    Off-class buffers "live on a short locked list beside the lock-free stacks": never cached.
  //    The cache's limit (L = bound / 32, at least 1) is not modelled: missing any buffer another
  //    thread may cache is allowed, which covers it.
  //  - "a caching thread ... keeps at most 2 * P [places] unused, so a retire on another thread
  //    can be dropped while retained() is up to 2 * P per live thread below bound": a retire may
  //    be dropped when count + 2 * P * (other workers that have called the pool) reaches the
  //    bound. Whether a place is held is not observable, so "have called" is the reading.
  //  - retained(), "clamped into its true range (retained() into [0, bound])" during traffic,
  //    counts cached buffers: any value in [0, bound] from a worker, the exact count from the
  //    observer, once "a thread that exits gives its cache back" has happened for every worker.
  bool caches = false;
};

// State: (capacity, mark, holders) per retained buffer, sorted, so that equal sets are equal
// states. holders is the set of threads whose cache may hold the buffer (CACHES only).
class pool_model final : public model {
 public:
  // The most spare places of the bound one caching thread keeps: 2 * P, where
  // P = clamp(L / 2, 1, 16) and L = clamp(bound / 32, 1, 32) (pool.hpp, THREAD CACHES).
  static std::size_t spare_places(std::size_t bound) {
    const std::size_t limit = std::clamp<std::size_t>(bound / 32, 1, 32);
    return 2 * std::clamp<std::size_t>(limit / 2, 1, 16);
  }

  pool_model(pool_rules rules, std::span<const timing> when, std::span<const pool_call> calls,
             state initial = {})
      : rules_(rules), when_(when), calls_(calls), initial_(std::move(initial)) {}

  // s with one more buffer, in no thread's cache: for initial states.
  static state with_buffer(const state& s, std::size_t capacity, std::uint32_t id) {
    return with(s, capacity, id, 0);
  }

  state initial() const override { return initial_; }

  void step(const state& s, std::size_t i, std::vector<state>& next) const override {
    const pool_call& c = calls_[i];
    const std::uint32_t t = when_[i].thread;
    const bool worker = t != rules_.observer;
    const std::size_t count = s.size() / 3;
    switch (c.op) {
      case pool_op::retained: {
        if (rules_.caches && worker) {
          if (c.answer <= rules_.bound) next.push_back(s);
          return;
        }
        const std::size_t slack = rules_.in_flight ? c.overlapping : 0;
        const std::size_t off = c.answer > count ? c.answer - count : count - c.answer;
        if (off <= slack) next.push_back(s);
        return;
      }
      case pool_op::retire: {
        const bool keepable = c.size <= rules_.ceiling && count < rules_.bound;
        bool droppable = !keepable;
        if (rules_.in_flight && count + c.overlapping >= rules_.bound) droppable = true;
        if (rules_.caches && count + spare_places(rules_.bound) * c.others_started >= rules_.bound) droppable = true;
        if (droppable) next.push_back(s);
        if (keepable) {
          const std::int64_t holders = rules_.caches && on_class(c.size) ? std::int64_t{1} << t : 0;
          next.push_back(with(s, c.size, c.id, holders));
        }
        return;
      }
      case pool_op::take: {
        if (c.answer != 0 && c.answer < c.size) return;  // too small, whatever else holds
        if (c.size > rules_.ceiling) {
          if (c.answer == 0) next.push_back(s);
          return;
        }
        std::size_t answered = count;
        for (std::size_t k = 0; k < count; ++k) {
          const auto capacity = static_cast<std::size_t>(s[3 * k]);
          if (c.answer != 0 && s[3 * k + 1] == c.answer_id) {
            if (capacity != c.answer) return;
            answered = k;
            continue;
          }
          // Smallest first: every buffer that serves and is smaller than the answer (any that
          // serves, for an empty answer) must be one this take may pass over.
          if (capacity < c.size || (c.answer != 0 && capacity >= c.answer)) continue;
          if (!passable(s, k, c, t, worker)) return;
        }
        if (c.answer != 0 && answered == count) return;  // not retained (or never was)
        state out;
        out.reserve(s.size());
        for (std::size_t k = 0; k < count; ++k) {
          if (k == answered) continue;
          std::int64_t holders = s[3 * k + 2];
          // The batch this take may have popped: on-class buffers that could serve it.
          if (rules_.caches && worker && on_class(static_cast<std::size_t>(s[3 * k])) &&
              static_cast<std::size_t>(s[3 * k]) >= c.size) {
            holders |= std::int64_t{1} << t;
          }
          out.insert(out.end(), {s[3 * k], s[3 * k + 1], holders});
        }
        next.push_back(std::move(out));
        return;
      }
    }
  }

  std::string show(std::size_t i) const override {
    const pool_call& c = calls_[i];
    switch (c.op) {
      case pool_op::take:
        return "take(" + std::to_string(c.size) + ") -> " +
               (c.answer == 0 ? std::string("none")
                              : std::to_string(c.answer) + "#" + std::to_string(c.answer_id));
      case pool_op::retire: return "retire(" + std::to_string(c.size) + "#" + std::to_string(c.id) + ")";
      case pool_op::retained: return "retained() -> " + std::to_string(c.answer);
    }
    return "?";
  }

  std::string show_state(const state& s) const override {
    std::string out = "{";
    for (std::size_t k = 0; k < s.size() / 3; ++k) {
      out += (k ? ", " : "") + std::to_string(s[3 * k]) + "#" + std::to_string(s[3 * k + 1]);
      for (std::int64_t t = 0; t < 63; ++t) {
        if (s[3 * k + 2] >> t & 1) out += " t" + std::to_string(t);
      }
    }
    return out + "}";
  }

  // A class size, as pool.hpp describes them: four per power of two from 16 (16, 20, 24, 28,
  // 32, 40, ...), the top class cut at the ceiling.
  bool on_class(std::size_t capacity) const noexcept {
    if (capacity == rules_.ceiling) return true;
    if (capacity < 16) return false;
    const int b = std::bit_width(capacity) - 1;  // 2^b <= capacity < 2^(b+1)
    return capacity % (std::size_t{1} << (b - 2)) == 0;
  }

 private:
  static state with(const state& s, std::size_t capacity, std::uint32_t id, std::int64_t holders) {
    state out;
    out.reserve(s.size() + 3);
    bool placed = false;
    for (std::size_t k = 0; k < s.size(); k += 3) {
      if (!placed && (s[k] > static_cast<std::int64_t>(capacity) ||
                      (s[k] == static_cast<std::int64_t>(capacity) && s[k + 1] > id))) {
        out.insert(out.end(), {static_cast<std::int64_t>(capacity), id, holders});
        placed = true;
      }
      out.insert(out.end(), {s[k], s[k + 1], s[k + 2]});
    }
    if (!placed) out.insert(out.end(), {static_cast<std::int64_t>(capacity), id, holders});
    return out;
  }

  bool passable(const state& s, std::size_t k, const pool_call& c, std::uint32_t t, bool worker) const {
    if (!worker) return false;
    const std::int64_t others = s[3 * k + 2] & ~(std::int64_t{1} << t);
    if (rules_.caches && others != 0) return true;
    return rules_.scan && (c.overlapping_retires >> s[3 * k + 1] & 1) != 0;
  }

  pool_rules rules_;
  std::span<const timing> when_;
  std::span<const pool_call> calls_;
  state initial_;
};

}  // namespace lincheck
