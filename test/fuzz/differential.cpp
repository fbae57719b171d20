// Differential fuzzing: one byte string, decoded into a sequence of calls, is applied to
// sluice::pool (thread caches on), sluice::pool (caches off) and the reference model
// sluice::mutex_pool, and to sluice::gate and sluice::mutex_gate (with permits of both). On one
// thread the pools must answer exactly as the model does: whether a buffer was answered, its
// size and capacity, whether acquire threw, retained(), enabled() and every field of stats(),
// after every call. The gates must agree on every answer and on in_flight(), cap() and
// has_capacity() after every call. Beyond agreeing with each other, everything is also checked
// against the contract itself (an oracle written here from the headers, sharing no code with
// the library): take answers the smallest retained capacity that serves, retire keeps exactly
// when the contract says, acquire's fresh capacity fills the class, the gate clamps and steps.
// A pool must never answer memory it does not hold (each pool's buffers are tracked by address).
//
// The same calls' pools also stand behind sluice::pool_resource (caches on and off) and
// mutex_pool_resource, where the resource adds rules of its own: which allocate goes to the pool
// (alignment at most max_align_t, size within the ceiling) and which upstream, that a pooled
// block comes only from its size's own class, and that every block goes back to where it came
// from with the size and alignment it was allocated with.
//
// Any difference prints what differed and aborts, which libFuzzer reports as a crash and saves
// the input. SLUICE_FUZZ_TRACE=1 prints every decoded call (run the binary on one input).
//
// Real allocations stay small: sizes that would allocate come from a table whose entries above
// a few MiB are only ever passed where nothing is allocated (take) or where the allocation must
// fail at once (above PTRDIFF_MAX, which buffer refuses before asking the allocator), and the
// bytes a pool holds plus those the harness holds are kept under a budget.
//
// The parts: tables.hpp (the decoder's values), decoder.hpp (bytes into arguments), spec.hpp
// (the contract's arithmetic), check.hpp (how a difference is reported), and one file per
// primitive holding its lanes, its oracle's state and its calls: pool_lanes.hpp,
// resource_lanes.hpp, gate_lanes.hpp. This file runs the sequence.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "check.hpp"
#include "decoder.hpp"
#include "gate_lanes.hpp"
#include "pool_lanes.hpp"
#include "resource_lanes.hpp"

namespace {

using namespace fuzz;

void run(reader& r) {
  pools ps;
  std::vector<held> hs;
  gates gs;
  resources rs;
  {
    const pool_options o = pick_options(r);
    TRACE("pools: bound %zu, ceiling %zu, enabled %d\n", o.bound, o.ceiling, o.enabled);
    ps.build(o);
    rs.build(o);
  }
  gs.build(pick_cap(r));
  TRACE("gate: cap %lld\n", static_cast<long long>(gs.spec_cap));
  check_pools(ps);
  gs.check();

  for (op_index = 0; op_index < max_ops && !r.empty(); ++op_index) {
    const std::uint8_t op = r.byte();
    if (op >= gate_ops) {
      gate_op(gs, r, op);
      continue;
    }
    if (op >= resource_ops) {
      resource_op(rs, r, op);
      continue;
    }
    if (op % 13 == 12) {  // new pools and resources (held buffers outlive the old pools)
      const pool_options o = pick_options(r);
      TRACE("rebuild: bound %zu, ceiling %zu, enabled %d\n", o.bound, o.ceiling, o.enabled);
      ps.build(o);
      rs.build(o);
      check_pools(ps);
      continue;
    }
    pool_op(ps, hs, r, op);
  }
}

}  // namespace

// Every input runs on the calling thread. Its pools' thread caches outlive them in this
// thread's cache directory until the next input's first call lets them go, so each input frees
// about what it allocates and libFuzzer's per-input leak check rarely needs to run it twice.
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  reader r(data, size);
  run(r);
  return 0;
}
