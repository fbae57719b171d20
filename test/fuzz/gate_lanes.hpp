// sluice::gate and mutex_gate, with permits of both, held to each other and to the contract.
// A part of the differential fuzz target (differential.cpp, its only includer).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <memory_resource>
#include <new>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "check.hpp"
#include "decoder.hpp"
#include "spec.hpp"
#include "sluice/gate.hpp"

namespace fuzz {

using sluice::gate_limit;
using sluice::pressure;

// ---- the gates ----------------------------------------------------------------------------

struct permits {
  sluice::permit<sluice::gate> g;
  sluice::permit<sluice::mutex_gate> m;
  bool spec = false;
  std::int64_t spec_units = 0;  // the weight it holds
};

// Weights around the small caps, zero and below, and past gate_limit.
inline std::int64_t pick_weight(reader& r) {
  static constexpr std::int64_t weights[] = {0, 1, 2, 3, 7, -1, gate_limit, gate_limit + 1,
                                             std::numeric_limits<std::int64_t>::max(),
                                             std::numeric_limits<std::int64_t>::min()};
  return weights[r.byte() % std::size(weights)];
}

struct gates {
  std::unique_ptr<sluice::gate> g;
  std::unique_ptr<sluice::mutex_gate> m;
  std::int64_t spec_cap = 1, spec_in = 0;
  bool spec_closed = false;
  sluice::gate_stats spec_stats;  // what stats() must say (docs/gate.md, STATISTICS)
  std::vector<permits> ps;  // destroyed before the gates they refer to (see build)

  void build(std::int64_t cap) {
    ps.clear();
    g = std::make_unique<sluice::gate>(cap);
    m = std::make_unique<sluice::mutex_gate>(cap);
    spec_cap = spec_clamp(cap);
    spec_in = 0;
    spec_closed = false;
    spec_stats = {};
  }
  ~gates() { ps.clear(); }

  // The contract's weights (docs/gate.md, WEIGHTS) and close (CLOSE).
  void spec_submit(std::int64_t n = 1) {
    spec_in += std::min(std::max<std::int64_t>(n, 0), gate_limit - spec_in);
    spec_stats.peak_in_flight = std::max(spec_stats.peak_in_flight, spec_in);
  }
  void spec_done(std::int64_t n = 1) { spec_in -= std::min(std::max<std::int64_t>(n, 0), spec_in); }
  // Every try form's answer, counted as stats() counts it.
  bool spec_admit(std::int64_t n = 1) {
    if (spec_closed) {
      ++spec_stats.closed;
      return false;
    }
    if (n > gate_limit || (n > 0 && spec_in + n > spec_cap)) {
      ++spec_stats.refused;
      return false;
    }
    ++spec_stats.admitted;
    if (n > 0) spec_submit(n);
    return true;
  }
  void spec_release(permits& p) {
    if (p.spec) spec_done(p.spec_units);
    p.spec = false;
    p.spec_units = 0;
  }

  void check() const {
    SAME(g->in_flight(), spec_in);
    SAME(m->in_flight(), spec_in);
    SAME(g->cap(), spec_closed ? 0 : spec_cap);
    SAME(m->cap(), spec_closed ? 0 : spec_cap);
    SAME(g->closed(), spec_closed);
    SAME(m->closed(), spec_closed);
    SAME(g->has_capacity(), !spec_closed && spec_in < spec_cap);
    SAME(m->has_capacity(), !spec_closed && spec_in < spec_cap);
    for (const sluice::gate_stats& s : {g->stats(), m->stats()}) {
      SAME(s.admitted, spec_stats.admitted);
      SAME(s.refused, spec_stats.refused);
      SAME(s.closed, spec_stats.closed);
      SAME(s.peak_in_flight, spec_stats.peak_in_flight);
      SAME(s.in_flight, spec_in);
      SAME(s.admitted_after_wait + s.timed_out + s.cancelled, std::uint64_t{0});  // no call here waits
      SAME(s.waiting, std::int64_t{0});
    }
    for (const permits& p : ps) {
      SAME(static_cast<bool>(p.g), p.spec);
      SAME(static_cast<bool>(p.m), p.spec);
      SAME(p.g.units(), p.spec_units);
      SAME(p.m.units(), p.spec_units);
    }
  }
};

inline void gate_op(gates& gs, reader& r, std::uint8_t op) {
  switch (op % 16) {
    case 0: {
      const int few = 1 + r.byte() % 8;
      const int k = r.byte() % 4 == 0 ? few * 100 : few;
      TRACE("gate: note_submitted x%d\n", k);
      for (int i = 0; i < k; ++i) {
        gs.g->note_submitted();
        gs.m->note_submitted();
        gs.spec_submit();
      }
      break;
    }
    case 1: {
      const int k = 1 + r.byte() % 8;
      TRACE("gate: note_done x%d\n", k);
      for (int i = 0; i < k; ++i) {
        gs.g->note_done();
        gs.m->note_done();
        gs.spec_done();
      }
      break;
    }
    case 2: {
      TRACE("gate: try_admit\n");
      const bool a = gs.g->try_admit(), b = gs.m->try_admit(), s = gs.spec_admit();
      SAME(a, s);
      SAME(b, s);
      break;
    }
    case 3: {
      TRACE("gate: has_capacity, in_flight, cap\n");
      SAME(gs.g->has_capacity(), gs.m->has_capacity());
      SAME(gs.g->in_flight(), gs.m->in_flight());
      SAME(gs.g->cap(), gs.m->cap());
      break;
    }
    case 4: {
      const std::int64_t c = pick_cap(r);
      TRACE("gate: set_cap(%lld)\n", static_cast<long long>(c));
      gs.g->set_cap(c);
      gs.m->set_cap(c);
      if (!gs.spec_closed) gs.spec_cap = spec_clamp(c);  // never reopens
      break;
    }
    case 5: {
      const auto p = static_cast<pressure>(r.byte() % 3);
      const std::int64_t max_cap = pick_cap(r);
      TRACE("gate: adjust(%d, %lld)\n", static_cast<int>(p), static_cast<long long>(max_cap));
      gs.g->adjust(p, max_cap);
      gs.m->adjust(p, max_cap);
      if (gs.spec_closed) break;  // never reopens
      gs.spec_cap = p == pressure::ok ? spec_clamp(std::min(gs.spec_cap + 1, max_cap))
                                      : spec_clamp(gs.spec_cap - 1);
      break;
    }
    case 6: {  // a permit by try_admit
      if (gs.ps.size() >= max_permits) break;
      TRACE("gate: permit{g}\n");
      permits p{sluice::permit<sluice::gate>{*gs.g}, sluice::permit<sluice::mutex_gate>{*gs.m}, false};
      p.spec = gs.spec_admit();
      p.spec_units = p.spec ? 1 : 0;
      gs.ps.push_back(std::move(p));
      break;
    }
    case 7: {  // a counted submission taken over by a permit
      if (gs.ps.size() >= max_permits) break;
      TRACE("gate: note_submitted + permit{g, adopt_lock}\n");
      gs.g->note_submitted();
      gs.m->note_submitted();
      gs.spec_submit();
      gs.ps.push_back({sluice::permit<sluice::gate>{*gs.g, std::adopt_lock},
                       sluice::permit<sluice::mutex_gate>{*gs.m, std::adopt_lock}, true, 1});
      break;
    }
    case 8: {  // release
      const std::uint8_t x = r.byte();
      if (gs.ps.empty()) break;
      permits& p = gs.ps[x % gs.ps.size()];
      TRACE("gate: permit.release()\n");
      p.g.release();
      p.m.release();
      gs.spec_release(p);
      break;
    }
    case 9: {  // move-assign, self-move included
      const std::uint8_t x = r.byte(), y = r.byte();
      if (gs.ps.empty()) break;
      const std::size_t i = x % gs.ps.size(), j = y % gs.ps.size();
      TRACE("gate: permit[%zu] = move(permit[%zu])\n", i, j);
      permits& a = gs.ps[i];
      permits& b = gs.ps[j];
      a.g = std::move(b.g);
      a.m = std::move(b.m);
      if (i != j) {
        gs.spec_release(a);
        a.spec = std::exchange(b.spec, false);
        a.spec_units = std::exchange(b.spec_units, 0);
      }
      break;
    }
    case 10: {  // destroy one
      const std::uint8_t x = r.byte();
      if (gs.ps.empty()) break;
      const std::size_t i = x % gs.ps.size();
      TRACE("gate: ~permit[%zu]\n", i);
      gs.spec_release(gs.ps[i]);
      gs.ps.erase(gs.ps.begin() + static_cast<std::ptrdiff_t>(i));
      break;
    }
    case 11: {
      const std::int64_t c = pick_cap(r);
      TRACE("gate: rebuild(%lld)\n", static_cast<long long>(c));
      gs.build(c);
      break;
    }
    case 12: {
      const std::int64_t n = pick_weight(r);
      TRACE("gate: try_admit(%lld)\n", static_cast<long long>(n));
      const bool a = gs.g->try_admit(n), b = gs.m->try_admit(n), s = gs.spec_admit(n);
      SAME(a, s);
      SAME(b, s);
      break;
    }
    case 13: {
      const std::int64_t n = pick_weight(r);
      const bool submit = r.byte() % 2 == 0;
      TRACE("gate: note_%s(%lld)\n", submit ? "submitted" : "done", static_cast<long long>(n));
      if (submit) {
        gs.g->note_submitted(n);
        gs.m->note_submitted(n);
        gs.spec_submit(n);
      } else {
        gs.g->note_done(n);
        gs.m->note_done(n);
        gs.spec_done(n);
      }
      break;
    }
    case 14: {  // a permit of weight n, by try_admit(n) or adopted
      if (gs.ps.size() >= max_permits) break;
      const std::int64_t n = pick_weight(r);
      const bool adopt = r.byte() % 2 == 0;
      TRACE("gate: permit{g, %lld%s}\n", static_cast<long long>(n), adopt ? ", adopt_lock" : "");
      if (adopt) {
        gs.g->note_submitted(n);
        gs.m->note_submitted(n);
        gs.spec_submit(n);
        gs.ps.push_back({sluice::permit<sluice::gate>{*gs.g, n, std::adopt_lock},
                         sluice::permit<sluice::mutex_gate>{*gs.m, n, std::adopt_lock}, true, std::max<std::int64_t>(n, 0)});
      } else {
        permits p{sluice::permit<sluice::gate>{*gs.g, n}, sluice::permit<sluice::mutex_gate>{*gs.m, n}, false};
        p.spec = gs.spec_admit(n);
        p.spec_units = p.spec ? std::max<std::int64_t>(n, 0) : 0;
        gs.ps.push_back(std::move(p));
      }
      break;
    }
    case 15: {
      TRACE("gate: close\n");
      gs.g->close();
      gs.m->close();
      gs.spec_closed = true;
      break;
    }
  }
  gs.check();
}

}  // namespace fuzz
