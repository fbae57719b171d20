// The pool's calls as the checker sees them, and the sequential pool they are checked against,
// written from the contract in docs/pool.md (not from lib/, which it checks).
//
// Buffers are told apart by a mark, a small number written into their first bytes before they
// are retired and read back when a take answers them: the pool never touches a buffer's bytes,
// so the model can follow each buffer, not only capacities, and a buffer answered twice, or one
// answered after it was dropped or trimmed, cannot pass.
//
// The exact model is the sequential pool: a set of buffers and four counters; take(n) answers
// one of the smallest capacity >= n (none when nothing serves or n > ceiling) and counts a hit
// or a miss (an exact take, pool_resource's, only one whose capacity is n's class size); retire keeps the buffer when its capacity <= ceiling and fewer than bound are
// retained, else drops it, and counts which; trim() frees every buffer (and counts nothing);
// retained() is the number of buffers; stats() is the four counters, that number and the
// buffers' capacities summed. Four relaxations can be switched on (pool_rules); each says what
// it admits and why.
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
#include "sluice/pool.hpp"

namespace lincheck {

enum class pool_op : std::uint8_t { take, retire, retained, trim, stats };

struct pool_call {
  pool_op op = pool_op::retained;
  std::size_t size = 0;         // take: the request; retire: the buffer's capacity
  bool exact = false;           // take: from size's own class only (what pool_resource asks)
  std::uint32_t id = 0;         // retire: the buffer's mark, 1 to 63, unique among a history's buffers
  std::size_t answer = 0;       // take: the answered capacity (0: none); retained: the count
  std::uint32_t answer_id = 0;  // take: the answered buffer's mark
  sluice::pool_stats stats{};   // stats: the answer

  // What the rest of the history says about this call (annotate()), for the relaxed rules.
  std::uint32_t overlapping = 0;          // take/retire calls of other workers whose intervals meet this one
  std::uint64_t overlapping_retires = 0;  // the marks those retires carried, one bit each
  std::uint32_t overlapping_trims = 0;    // trim calls of other workers whose intervals meet this one
  std::uint32_t others_started = 0;       // other workers that invoked a call before this one returned
};

// The size of the class that serves a request of n <= ceiling, as docs/pool.md describes the
// classes: the smallest of 16, 20, 24, 28, 32, 40, ... that is at least n, cut at the ceiling.
inline std::size_t class_size(std::size_t n, std::size_t ceiling) {
  std::size_t size = 16;
  while (size < n) size += std::bit_floor(size) / 4;
  return std::min(size, ceiling);
}

// Marks: the first 8 bytes of a buffer (every capacity the tests use is at least 8).
inline void put_mark(sluice::buffer& b, std::uint64_t id) { std::memcpy(b.data(), &id, sizeof id); }
inline std::uint32_t read_mark(const sluice::buffer& b) {
  std::uint64_t id = 0;
  std::memcpy(&id, b.data(), sizeof id);
  return static_cast<std::uint32_t>(id);
}

// Fills in each call's context. `observer` is the thread that calls only after every worker has
// finished (and exited, where the pool has thread caches); it has no context and is left out of
// everyone else's.
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
      if (!(b.invoked < a.returned && a.invoked < b.returned)) continue;
      switch (h.what[j].op) {
        case pool_op::retire: c.overlapping_retires |= std::uint64_t{1} << h.what[j].id; [[fallthrough]];
        case pool_op::take: ++c.overlapping; break;
        case pool_op::trim: ++c.overlapping_trims; break;
        case pool_op::retained:
        case pool_op::stats: break;
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
  // a place in one shared counter and is dropped when none is left"; "stats() and retained() are
  // exact when no call is in flight"). A place is held by a retire before its buffer can be taken and by a
  // take after its buffer is gone, so: retained() may be off the count by at most the number of
  // take/retire calls of other threads in flight during it, and a retire may be dropped when the
  // count plus that number reaches the bound. A trim in flight frees buffers before it gives
  // their places back, as many as the pool held: retained() during it may answer anything in
  // [0, bound], which is all that "clamped into its true range" promises during traffic.
  // stats() during traffic is "a sum of per-thread counters read one after another": each of
  // hits, misses, and retired + dropped lies between what the calls that returned before it was
  // invoked counted and what the calls invoked before it returned counted (a counter only
  // grows, and a call counts within its interval); its retained is held to retained()'s rule
  // and its retained_bytes is not checked. From the observer (no call in flight) all six are
  // exact.
  bool in_flight = false;

  // SCAN (take looks at one class after another, not at a snapshot of them all). A take may pass
  // over a buffer that serves, answering a larger one or none, when that buffer's retire
  // overlapped the take: it landed in a class the take had already looked at (docs/pool.md's
  // LINEARIZABILITY section states it). Real runs of sluice::pool do it: a take answered none
  // while at every instant of the call some retained buffer served it.
  bool scan = false;

  // CACHES (the THREAD CACHES section of docs/pool.md), read as follows:
  //  - "take on one thread may miss buffers that another live thread caches": each on-class
  //    buffer carries the set of threads whose cache may hold it. A thread's own retire puts the
  //    buffer in its own cache; a take pops a batch from the shared stacks, so every on-class
  //    buffer that could serve it may now sit in the taker's cache. A take may pass over (or miss)
  //    a buffer that some other thread may cache, never one only it or nobody may cache.
  //    Off-class buffers "live on a short locked list beside the lock-free stacks": never cached.
  //    The cache's limit (C = 2 * P, at most 32) is not modelled: missing any buffer another
  //    thread may cache is allowed, which covers it.
  //  - "a caching thread takes places of the bound P ... at a time and keeps at most 2 * P of them
  //    unused, so a retire on another thread can be dropped while retained() is up to 2 * P per
  //    live thread below bound": a retire may
  //    be dropped when count + 2 * P * (other workers that have called the pool) reaches the
  //    bound. Whether a place is held is not observable, so "have called" is the reading.
  //  - retained(), "clamped into its true range (retained() into [0, bound])" during traffic,
  //    counts cached buffers: any value in [0, bound] from a worker, the exact count from the
  //    observer, once "a thread that exits gives its cache back" has happened for every worker.
  //    stats() from a worker: as under IN FLIGHT, with retained anything in [0, bound].
  //  - trim(), "frees what the shared stacks and the off-class shelves hold, and what the calling
  //    thread caches", and "what another live thread caches at that thread's next call to the
  //    pool (any call), or at its exit". At the trim's place in the sequence, a buffer that nobody but the trimming
  //    thread T may cache is freed. One that another worker W may cache becomes DOOMED: it is
  //    either already freed (it was on a shared stack, or in T's cache) or in the cache of one
  //    of the workers D = (those that may cache it) - {T}, and it is freed when that worker
  //    next calls. "Next calls" is read in real time, as the sentence is written: W's next call
  //    is its first call invoked after the trim returned (the trim's return tick is the
  //    buffer's deadline; after further trims, the earliest of theirs). A call of W invoked
  //    before that (it overlapped the trim, and may have begun before the trim changed
  //    anything) may still be placed after the trim and answer the buffer from W's cache. So:
  //      * a doomed buffer can be answered only to a worker in D (never to another thread, and
  //        never to the observer; but see TRIM IN FLIGHT), and any take may pass over it (it
  //        may be gone);
  //      * when a call of worker W invoked after the deadline comes next, W leaves D (its cache
  //        is freed first); when D is empty, the buffer is gone; a later trim by W also takes W
  //        out of D (its own cache);
  //      * every doomed buffer is gone when the observer calls: each worker has exited since;
  //      * a doomed buffer may or may not still hold its place of the bound: a retire is
  //        keepable while the buffers not doomed are below the bound, and droppable when all of
  //        them reach it (both when between). Exits are not recorded, so a worker's cache is
  //        taken to live on after its last call until the observer; nothing else can see it.
  //    Buffers that enter W's cache after the trim (W's calls placed after the trim, the batch a
  //    take pops) are not doomed by it.
  bool caches = false;

  // TRIM IN FLIGHT (not in docs/pool.md, which names SCAN and IN FLIGHT as sluice::pool's only
  // departures from linearizability): a trim is not one step. lib/pool.cpp (at 8c28088) empties
  // one class's stack after another, then the off-class shelves, and gives each class's places
  // of the bound back after freeing its buffers. So, for calls that overlap a trim:
  //  - a take may pass over a buffer the trim frees (it looked at the class after the trim had
  //    emptied it) and answer another (it got there first). Written as: at the trim's place in
  //    the sequence, what it frees FADES rather than vanishes: until the trim's return tick (its
  //    deadline, as for CACHES' doomed buffers, which fade the same way), a take invoked before
  //    the deadline may answer it, any take may pass over it, and it is gone once a call invoked
  //    after the deadline comes next. It counts as retained for nobody.
  //  - a retire may be dropped: it can find the bound used up by buffers already freed, or (an
  //    off-class buffer whose retire began before the trim and reached the shelf lock after it)
  //    be freed and counted dropped, where the sequential pool with the retire placed before the
  //    trim would count it retired.
  //  - a retire may keep its buffer (counted retired) and the trim free it later, though the
  //    trim's classes it had passed already gave back their places, so that placed before the
  //    trim the retire would have met the bound. Written as: a retire placed after a trim and
  //    invoked before the latest return tick of the trims placed so far may keep its buffer as
  //    fading, with that tick as its deadline.
  // Kept apart from the other rules so that a test can count how often it is needed.
  bool trim_in_flight = false;

  bool relaxed() const noexcept { return in_flight || scan || caches || trim_in_flight; }
};

// State: the counters (hits, misses, retired, dropped) and the latest return tick of the trims
// placed so far (TRIM IN FLIGHT only; a function of the calls placed, so it costs the search
// nothing); then (capacity, mark, who, deadline) per buffer, sorted by capacity and mark, so that
// equal sets are equal states. deadline 0: a retained buffer, who the set of threads whose cache
// may hold it (CACHES only; none: the shared stacks or a shelf). deadline > 0: a buffer a trim
// has freed or doomed, who its D (none: it only fades); see pool_rules. Such a buffer is not
// counted as retained.
class pool_model final : public model {
 public:
  static constexpr std::size_t header = 5;  // hits, misses, retired, dropped, trims' latest return
  static constexpr std::size_t stride = 4;  // capacity, mark, who, deadline

  // The most spare places of the bound one caching thread keeps: 2 * P, where
  // P = clamp(bound / 32, 1, 16) (docs/pool.md, THREAD CACHES).
  static std::size_t spare_places(std::size_t bound) {
    return 2 * std::clamp<std::size_t>(bound / 32, 1, 16);
  }

  pool_model(pool_rules rules, std::span<const timing> when, std::span<const pool_call> calls,
             state initial = {})
      : rules_(rules), when_(when), calls_(calls), initial_(normal(std::move(initial))) {
    // The windows of stats() calls: what the calls that returned before each was invoked
    // counted (low), and what the calls invoked before it returned counted (high).
    windows_.resize(calls_.size());
    for (std::size_t i = 0; i < calls_.size(); ++i) {
      if (calls_[i].op != pool_op::stats) continue;
      window& w = windows_[i];
      const std::int64_t base[3] = {initial_[0], initial_[1], initial_[2] + initial_[3]};
      std::copy(base, base + 3, w.low);
      std::copy(base, base + 3, w.high);
      for (std::size_t j = 0; j < calls_.size(); ++j) {
        if (j == i) continue;
        const pool_call& c = calls_[j];
        std::size_t field = 3;
        if (c.op == pool_op::take) field = c.answer != 0 ? 0 : 1;
        if (c.op == pool_op::retire) field = 2;
        if (field == 3) continue;
        if (when_[j].returned < when_[i].invoked) ++w.low[field];
        if (when_[j].invoked < when_[i].returned) ++w.high[field];
      }
    }
  }

  // s with one more buffer, in no thread's cache: for initial states.
  static state with_buffer(const state& s, std::size_t capacity, std::uint32_t id) {
    return with(normal(s), capacity, id, 0, 0);
  }

  // s with its counters set: for initial states (the buffers retired before the history count).
  static state with_counts(const state& s, std::int64_t hits, std::int64_t misses, std::int64_t retired,
                           std::int64_t dropped) {
    state out = normal(s);
    out[0] = hits;
    out[1] = misses;
    out[2] = retired;
    out[3] = dropped;
    return out;
  }

  state initial() const override { return initial_; }

  void step(const state& s0, std::size_t i, std::vector<state>& next) const override {
    const pool_call& c = calls_[i];
    const std::uint32_t t = when_[i].thread;
    const bool worker = t != rules_.observer;
    state settled;
    const state& s = settle(s0, t, worker, when_[i].invoked, settled);
    const std::size_t count = (s.size() - header) / stride;
    std::size_t live = 0, bytes = 0;  // buffers not doomed, and their capacities
    for (std::size_t k = 0; k < count; ++k) {
      if (at(s, k)[3] != 0) continue;
      ++live;
      bytes += static_cast<std::size_t>(at(s, k)[0]);
    }
    switch (c.op) {
      case pool_op::retained: {
        if (retained_fits(c, c.answer, live, worker)) next.push_back(s);
        return;
      }
      case pool_op::stats: {
        const sluice::pool_stats& a = c.stats;
        if (!worker || !rules_.relaxed()) {
          const bool exact = a.hits == static_cast<std::uint64_t>(s[0]) &&
                             a.misses == static_cast<std::uint64_t>(s[1]) &&
                             a.retired == static_cast<std::uint64_t>(s[2]) &&
                             a.dropped == static_cast<std::uint64_t>(s[3]) && a.retained == live &&
                             a.retained_bytes == bytes;
          if (exact) next.push_back(s);
          return;
        }
        const window& w = windows_[i];
        const auto within = [](std::uint64_t v, std::int64_t low, std::int64_t high) {
          return static_cast<std::int64_t>(v) >= low && static_cast<std::int64_t>(v) <= high;
        };
        if (within(a.hits, w.low[0], w.high[0]) && within(a.misses, w.low[1], w.high[1]) &&
            within(a.retired + a.dropped, w.low[2], w.high[2]) && retained_fits(c, a.retained, live, worker)) {
          next.push_back(s);
        }
        return;
      }
      case pool_op::retire: {
        const bool keepable = c.size <= rules_.ceiling && live < rules_.bound;
        bool droppable = !keepable || count >= rules_.bound;
        if (rules_.in_flight && count + c.overlapping >= rules_.bound) droppable = true;
        if (rules_.caches && count + spare_places(rules_.bound) * c.others_started >= rules_.bound) droppable = true;
        if (rules_.trim_in_flight && c.overlapping_trims > 0) droppable = true;
        if (droppable) next.push_back(counted(s, 3));
        if (keepable) {
          const std::int64_t holders = rules_.caches && on_class(c.size) ? std::int64_t{1} << t : 0;
          next.push_back(with(counted(s, 2), c.size, c.id, holders, 0));
          if (rules_.trim_in_flight && worker && when_[i].invoked < static_cast<std::uint64_t>(s[4])) {
            next.push_back(with(counted(s, 2), c.size, c.id, 0, s[4]));  // kept, and fading
          }
        }
        return;
      }
      case pool_op::take: {
        if (c.answer != 0 && c.answer < c.size) return;  // too small, whatever else holds
        // An exact take answers only its class's own size: the only buffers that serve it.
        const std::size_t own = c.exact && c.size <= rules_.ceiling ? class_size(c.size) : 0;
        if (c.exact && c.answer != 0 && c.answer != own) return;
        const auto serves = [&](std::size_t capacity) { return c.exact ? capacity == own : capacity >= c.size; };
        if (c.size > rules_.ceiling) {
          if (c.answer == 0) next.push_back(counted(s, 1));
          return;
        }
        std::size_t answered = count;
        for (std::size_t k = 0; k < count; ++k) {
          const std::int64_t* b = at(s, k);
          const auto capacity = static_cast<std::size_t>(b[0]);
          if (c.answer != 0 && b[1] == c.answer_id) {
            if (capacity != c.answer) return;
            // A doomed buffer is only in its cachers' caches, if anywhere (and under TRIM IN
            // FLIGHT, on a stack the trim has not reached yet, until it returns). settle() has
            // taken t out of D if this call was invoked after the deadline.
            if (b[3] != 0 && !(worker && when_[i].invoked < static_cast<std::uint64_t>(b[3]) &&
                               ((b[2] >> t & 1) || rules_.trim_in_flight))) {
              return;
            }
            answered = k;
            continue;
          }
          // Smallest first: every buffer that serves and is smaller than the answer (any that
          // serves, for an empty answer) must be one this take may pass over.
          if (!serves(capacity) || (c.answer != 0 && capacity >= c.answer)) continue;
          if (!passable(b, c, t, worker)) return;
        }
        if (c.answer != 0 && answered == count) return;  // not retained (or never was)
        state out(s.begin(), s.begin() + header);
        out[c.answer != 0 ? 0 : 1] += 1;
        out.reserve(s.size());
        for (std::size_t k = 0; k < count; ++k) {
          if (k == answered) continue;
          const std::int64_t* b = at(s, k);
          std::int64_t who = b[2];
          // The batch this take may have popped: on-class buffers, not doomed, that could serve it.
          if (rules_.caches && worker && b[3] == 0 && on_class(static_cast<std::size_t>(b[0])) &&
              serves(static_cast<std::size_t>(b[0]))) {
            who |= std::int64_t{1} << t;
          }
          out.insert(out.end(), {b[0], b[1], who, b[3]});
        }
        next.push_back(std::move(out));
        return;
      }
      case pool_op::trim: {
        // Everything is freed, except (CACHES) what other workers may cache, which is doomed,
        // and (TRIM IN FLIGHT) what fades until the trim returns.
        state out(s.begin(), s.begin() + header);
        if (worker && (rules_.caches || rules_.trim_in_flight)) {
          const std::int64_t mine = std::int64_t{1} << t;
          const auto returned = static_cast<std::int64_t>(when_[i].returned);
          if (rules_.trim_in_flight) out[4] = std::max(out[4], returned);
          for (std::size_t k = 0; k < count; ++k) {
            const std::int64_t* b = at(s, k);
            const std::int64_t others = rules_.caches ? b[2] & ~mine : 0;
            if (others == 0 && !rules_.trim_in_flight) continue;  // freed
            out.insert(out.end(), {b[0], b[1], others, b[3] == 0 ? returned : std::min(b[3], returned)});
          }
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
        return std::string(c.exact ? "take_exact(" : "take(") + std::to_string(c.size) + ") -> " +
               (c.answer == 0 ? std::string("none")
                              : std::to_string(c.answer) + "#" + std::to_string(c.answer_id));
      case pool_op::retire: return "retire(" + std::to_string(c.size) + "#" + std::to_string(c.id) + ")";
      case pool_op::retained: return "retained() -> " + std::to_string(c.answer);
      case pool_op::trim: return "trim()";
      case pool_op::stats:
        return "stats() -> {hits " + std::to_string(c.stats.hits) + ", misses " + std::to_string(c.stats.misses) +
               ", retired " + std::to_string(c.stats.retired) + ", dropped " + std::to_string(c.stats.dropped) +
               ", retained " + std::to_string(c.stats.retained) + ", retained_bytes " +
               std::to_string(c.stats.retained_bytes) + "}";
    }
    return "?";
  }

  std::string show_state(const state& s) const override {
    std::string out = "hits " + std::to_string(s[0]) + ", misses " + std::to_string(s[1]) + ", retired " +
                      std::to_string(s[2]) + ", dropped " + std::to_string(s[3]) +
                      (s[4] != 0 ? ", trims until " + std::to_string(s[4] - origin()) : std::string()) + "; {";
    for (std::size_t k = 0; k < (s.size() - header) / stride; ++k) {
      const std::int64_t* b = at(s, k);
      out += (k ? ", " : "") + std::to_string(b[0]) + "#" + std::to_string(b[1]);
      std::string who;
      for (std::int64_t t = 0; t < 63; ++t) {
        if (b[2] >> t & 1) who += " t" + std::to_string(t);
      }
      if (b[3] == 0) {
        out += who;
      } else {
        out += (b[2] != 0 ? " doomed (gone, or cached by" + who + ")" : std::string(" fading (a trim in flight frees it)")) +
               " until " + std::to_string(b[3] - origin());
      }
    }
    return out + "}";
  }

  // A class size, as docs/pool.md describes them: four per power of two from 16 (16, 20, 24, 28,
  // 32, 40, ...), the top class cut at the ceiling.
  bool on_class(std::size_t capacity) const noexcept {
    if (capacity == rules_.ceiling) return true;
    if (capacity < 16) return false;
    const int b = std::bit_width(capacity) - 1;  // 2^b <= capacity < 2^(b+1)
    return capacity % (std::size_t{1} << (b - 2)) == 0;
  }

  std::size_t class_size(std::size_t n) const noexcept { return lincheck::class_size(n, rules_.ceiling); }

 private:
  struct window {
    std::int64_t low[3], high[3];  // hits, misses, retired + dropped
  };

  static const std::int64_t* at(const state& s, std::size_t k) { return s.data() + header + stride * k; }

  static state normal(state s) {
    if (s.size() < header) s.assign(header, 0);
    return s;
  }

  // s with counter `field` one up.
  static state counted(const state& s, std::size_t field) {
    state out = s;
    ++out[field];
    return out;
  }

  static state with(const state& s, std::size_t capacity, std::uint32_t id, std::int64_t who,
                    std::int64_t deadline) {
    state out(s.begin(), s.begin() + header);
    out.reserve(s.size() + stride);
    const auto cap = static_cast<std::int64_t>(capacity);
    bool placed = false;
    for (std::size_t k = header; k < s.size(); k += stride) {
      if (!placed && (s[k] > cap || (s[k] == cap && s[k + 1] > id))) {
        out.insert(out.end(), {cap, id, who, deadline});
        placed = true;
      }
      out.insert(out.end(), s.begin() + static_cast<std::ptrdiff_t>(k),
                 s.begin() + static_cast<std::ptrdiff_t>(k + stride));
    }
    if (!placed) out.insert(out.end(), {cap, id, who, deadline});
    return out;
  }

  // Before a call by thread t, invoked at `invoked`, comes next: if invoked after a doomed
  // buffer's deadline, t leaves its D (its cache is freed first), and the buffer is gone once D
  // is empty (at once, for one that only fades); for the observer, every doomed buffer is gone.
  // Answers s itself when nothing changes, else `out` filled in.
  const state& settle(const state& s, std::uint32_t t, bool worker, std::uint64_t invoked, state& out) const {
    const auto expires = [&](const std::int64_t* b) {
      return b[3] != 0 && (!worker || (static_cast<std::uint64_t>(b[3]) < invoked && (b[2] & ~(std::int64_t{1} << t)) == 0)) ;
    };
    const auto shrinks = [&](const std::int64_t* b) {
      return b[3] != 0 && worker && static_cast<std::uint64_t>(b[3]) < invoked && (b[2] >> t & 1);
    };
    bool change = false;
    for (std::size_t k = 0; k < (s.size() - header) / stride && !change; ++k) {
      change = expires(at(s, k)) || shrinks(at(s, k));
    }
    if (!change) return s;
    out.assign(s.begin(), s.begin() + header);
    for (std::size_t k = 0; k < (s.size() - header) / stride; ++k) {
      const std::int64_t* b = at(s, k);
      if (expires(b)) continue;
      const std::int64_t who = shrinks(b) ? b[2] & ~(std::int64_t{1} << t) : b[2];
      out.insert(out.end(), {b[0], b[1], who, b[3]});
    }
    return out;
  }

  // retained() (or stats().retained) answering n, with `count` buffers in the model.
  bool retained_fits(const pool_call& c, std::size_t n, std::size_t count, bool worker) const {
    if (rules_.caches && worker) return n <= rules_.bound;
    if (rules_.in_flight && c.overlapping_trims > 0) return n <= rules_.bound;
    const std::size_t slack = rules_.in_flight ? c.overlapping : 0;
    const std::size_t off = n > count ? n - count : count - n;
    return off <= slack;
  }

  bool passable(const std::int64_t* b, const pool_call& c, std::uint32_t t, bool worker) const {
    if (!worker) return false;
    if (b[3] != 0) return true;  // doomed: may be gone
    const std::int64_t others = b[2] & ~(std::int64_t{1} << t);
    if (rules_.caches && others != 0) return true;
    return rules_.scan && (c.overlapping_retires >> b[1] & 1) != 0;
  }

  // The first tick of the history, so that reports show deadlines as the history does.
  std::int64_t origin() const {
    std::uint64_t first = when_.empty() ? 0 : when_[0].invoked;
    for (const timing& w : when_) first = std::min(first, w.invoked);
    return static_cast<std::int64_t>(first);
  }

  pool_rules rules_;
  std::span<const timing> when_;
  std::span<const pool_call> calls_;
  state initial_;
  std::vector<window> windows_;
};

}  // namespace lincheck
