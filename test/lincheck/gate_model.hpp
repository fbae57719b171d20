// The gate's calls as the checker sees them, and the sequential gate they are checked against,
// written from the contract in docs/gate.md (not from lib/gate.cpp, which it checks).
#pragma once

#include <chrono>
#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "lincheck.hpp"
#include "sluice/gate.hpp"

namespace lincheck {

// admit_for is try_admit_for with a short timeout (wait_timeout): a waiting call, which may sleep
// until another worker makes room. Sequentially it is try_admit: true and counted when there is
// room at its linearization point, false and nothing counted when it gave up (the room a wait
// finds is taken by the same CAS as try_admit's).
enum class gate_op : std::uint8_t {
  note_submitted, note_done, try_admit, admit_for, has_capacity, in_flight, cap, set_cap, adjust, close, closed
};

// admit_for's answer when it threw gate_closed.
inline constexpr std::int64_t closed_answer = 2;

inline constexpr std::chrono::microseconds wait_timeout{300};

struct gate_call {
  gate_op op = gate_op::in_flight;
  std::int64_t arg = 0;                       // set_cap's cap, adjust's max_cap
  std::int64_t units = 1;                     // the weight of the counting calls; 1: the unit forms
  sluice::pressure p = sluice::pressure::ok;  // adjust's
  std::int64_t answer = 0;                    // try_admit, has_capacity: 0 or 1; in_flight, cap: the value
};

// Makes the call on g and records its answer.
template <class Gate>
void perform(Gate& g, gate_call& c) {
  switch (c.op) {
    case gate_op::note_submitted: c.units == 1 ? g.note_submitted() : g.note_submitted(c.units); break;
    case gate_op::note_done: c.units == 1 ? g.note_done() : g.note_done(c.units); break;
    case gate_op::try_admit: c.answer = c.units == 1 ? g.try_admit() : g.try_admit(c.units); break;
    case gate_op::admit_for:
      try {
        c.answer = c.units == 1 ? g.try_admit_for(wait_timeout) : g.try_admit_for(c.units, wait_timeout);
      } catch (const sluice::gate_closed&) {
        c.answer = closed_answer;
      }
      break;
    case gate_op::close: g.close(); break;
    case gate_op::closed: c.answer = g.closed(); break;
    case gate_op::has_capacity: c.answer = g.has_capacity(); break;
    case gate_op::in_flight: c.answer = g.in_flight(); break;
    case gate_op::cap: c.answer = g.cap(); break;
    case gate_op::set_cap: g.set_cap(c.arg); break;
    case gate_op::adjust: g.adjust(c.p, c.arg); break;
  }
}

// State: {cap, in_flight}, cap 0 once closed (as the gate keeps it). Deterministic: each call has
// one successor or none.
class gate_model final : public model {
 public:
  gate_model(std::int64_t cap, std::span<const gate_call> calls) : cap_(clamp(cap)), calls_(calls) {}

  state initial() const override { return {cap_, 0}; }

  void step(const state& s, std::size_t i, std::vector<state>& next) const override {
    const gate_call& c = calls_[i];
    std::int64_t cap = s[0], count = s[1];
    const std::int64_t n = std::max<std::int64_t>(c.units, 0);  // a weight below zero counts as zero
    switch (c.op) {
      case gate_op::note_submitted: count = std::min(count + n, sluice::gate_limit); break;  // saturates
      case gate_op::note_done: count = std::max<std::int64_t>(count - n, 0); break;       // the floor
      case gate_op::try_admit:
      case gate_op::admit_for: {
        // closed: refused (a waiting form throws); else all n or nothing, zero at once
        const bool closed = cap == 0;
        if (c.op == gate_op::admit_for && closed) {
          if (c.answer != closed_answer) return;
          break;
        }
        if (c.answer != (!closed && (n == 0 || (n <= sluice::gate_limit && count + n <= cap)))) return;
        count += c.answer * n;
        break;
      }
      case gate_op::close: cap = 0; break;
      case gate_op::closed:
        if (c.answer != (cap == 0)) return;
        break;
      case gate_op::has_capacity:
        if (c.answer != (count < cap)) return;
        break;
      case gate_op::in_flight:
        if (c.answer != count) return;
        break;
      case gate_op::cap:
        if (c.answer != cap) return;
        break;
      case gate_op::set_cap:
        if (cap != 0) cap = clamp(c.arg);  // never reopens
        break;
      case gate_op::adjust:
        if (cap == 0) break;  // never reopens
        // ok: one up, never above max_cap (so a cap already above it comes down to it);
        // soft and hard: one down; both kept in [1, gate_limit].
        cap = c.p == sluice::pressure::ok ? clamp(std::min(cap + 1, c.arg)) : clamp(cap - 1);
        break;
    }
    next.push_back({cap, count});
  }

  std::string show(std::size_t i) const override {
    const gate_call& c = calls_[i];
    const std::string n = std::to_string(c.answer);
    const std::string w = c.units == 1 ? "" : std::to_string(c.units);
    const std::string wc = c.units == 1 ? "" : w + ", ";
    switch (c.op) {
      case gate_op::note_submitted: return "note_submitted(" + w + ")";
      case gate_op::note_done: return "note_done(" + w + ")";
      case gate_op::try_admit: return "try_admit(" + w + ") -> " + (c.answer ? "true" : "false");
      case gate_op::admit_for:
        return "try_admit_for(" + wc + "300us) -> " +
               (c.answer == closed_answer ? "gate_closed" : c.answer ? "true" : "false");
      case gate_op::close: return "close()";
      case gate_op::closed: return std::string("closed() -> ") + (c.answer ? "true" : "false");
      case gate_op::has_capacity: return std::string("has_capacity() -> ") + (c.answer ? "true" : "false");
      case gate_op::in_flight: return "in_flight() -> " + n;
      case gate_op::cap: return "cap() -> " + n;
      case gate_op::set_cap: return "set_cap(" + std::to_string(c.arg) + ")";
      case gate_op::adjust: {
        const char* p = c.p == sluice::pressure::ok ? "ok" : c.p == sluice::pressure::soft ? "soft" : "hard";
        return std::string("adjust(") + p + ", " + std::to_string(c.arg) + ")";
      }
    }
    return "?";
  }

  std::string show_state(const state& s) const override {
    return "cap " + std::to_string(s[0]) + ", in_flight " + std::to_string(s[1]);
  }

 private:
  static std::int64_t clamp(std::int64_t cap) { return std::clamp<std::int64_t>(cap, 1, sluice::gate_limit); }

  std::int64_t cap_;
  std::span<const gate_call> calls_;
};

}  // namespace lincheck
