// The pool's lock-free layer (lib/pool/slots.hpp) under Relacy: the slot table's lock-free growth
// (C1, C2) and the tagged Treiber stacks (S1-S3) moving chains between threads. A buffer's bytes,
// written before its slot is pushed and read after it is popped, are an rl::var per slot; the
// slot's own buffer pointer is one too (detail::plain), so a missing release/acquire is a data
// race that Relacy reports. A slot that a stale link made the stack lose fails the count at the end.
#include <cstdio>
#include <optional>

#include "../doctest.hpp"
#include "check.hpp"
#include "pool/slots.hpp"

namespace {

using namespace sluice_relacy;
using sluice::detail::chain;
using sluice::detail::no_slot;
using sluice::detail::slot_index;
using sluice::detail::slot_table;
using sluice::detail::tagged_stack;

constexpr unsigned most_slots = 4;  // the checks claim at most this many

// Three threads: one claims two slots (making the table's first chunk, unless another thread's
// claim did), writes their buffers, pushes them as one chain, then pops two and pushes one back;
// one claims its own slot likewise and pushes it; the third pops chains (or, with pop_all,
// everything) and reads what it got, then pushes one back and pops again. At the end every
// claimed slot is on the stack or held, once.
template <bool take_all, bool after_push = false>
struct handoff : rl::test_suite<handoff<take_all, after_push>, 3> {
  std::optional<slot_table> slots;
  std::optional<tagged_stack> stack;
  rl::var<int> bytes[most_slots];     // each slot's buffer contents
  std::byte buffers[most_slots][1];   // what the slots' data pointers name
  rl::var<unsigned> held_by_first, held;  // thread 0's and thread 2's; summed in after()
  rl::atomic<int> pushed;                 // thread 0's chain is on the stack

  void before() {
    slots.emplace();
    stack.emplace();
    for (auto& b : bytes) b($) = 0;
    held_by_first($) = 0;
    held($) = 0;
    pushed($).store(0, rl::mo_relaxed);
  }

  // Fills a claimed chain's buffers and pushes it.
  void fill_and_push(const chain& c, int value) {
    slot_index i = c.first;
    for (std::uint32_t n = 0; n < c.count; ++n) {
      RL_ASSERT(i < most_slots);
      (*slots)[i].items[0] = buffers[i];
      bytes[i]($) = value;
      i = (*slots)[i].next.load(std::memory_order_relaxed);
    }
    stack->push_chain(*slots, c);
  }

  // Reads a popped chain's buffers, as a take does; answers how many slots it held.
  unsigned read(const chain& c) {
    slot_index i = c.first;
    for (std::uint32_t n = 0; n < c.count; ++n) {
      RL_ASSERT(i < most_slots);
      RL_ASSERT((*slots)[i].items[0] == buffers[i]);
      RL_ASSERT(bytes[i]($) != 0);
      if (n + 1 < c.count) i = (*slots)[i].next.load(std::memory_order_relaxed);
    }
    RL_ASSERT(i == c.last);
    return c.count;
  }

  void thread(unsigned index) {
    if (index == 0) {
      const chain c = slots->claim(2);
      RL_ASSERT(c.count == 2);
      fill_and_push(c, 1);
      pushed($).store(1, rl::mo_relaxed);  // relaxed: it orders nothing the check reads
      // A second popper, against thread 2's: it pops two and pushes the first back, keeping the
      // other. A popper that read (A, link B) before must then fail its CAS on the tag (ABA), or
      // it would make B the head while this thread holds B. With after_push, thread 2 pops only
      // once this chain is on the stack, so the two overlap: without the tags, that check fails.
      const chain two = stack->pop_chain(*slots, 2);
      if (two.count != 0) {
        read(two);
        const chain one{two.first, two.first, 1};
        bytes[one.first]($) = 4;
        stack->push_chain(*slots, one);
      }
      held_by_first($) = two.count == 0 ? 0 : two.count - 1;
    } else if (index == 1) {
      const chain c = slots->claim(1);
      RL_ASSERT(c.count == 1);
      fill_and_push(c, 2);
    } else {
      unsigned mine = 0;
      if (after_push) {
        // Spins until thread 0's chain is on the stack, so that the two poppers overlap (thread
        // 0 makes the slot table's first chunk, a hundred operations, before it pushes).
        while (pushed($).load(rl::mo_relaxed) == 0) {
        }
      }
      const chain first = take_all ? stack->pop_all(*slots) : stack->pop_chain(*slots, 2);
      if (first.count != 0) {
        read(first);
        // Back goes its first slot, rewritten: a popper that read the head before must not
        // succeed with a link it read then (ABA), and must see the new bytes.
        const chain one{first.first, first.first, 1};
        bytes[first.first]($) = 3;
        stack->push_chain(*slots, one);
        mine += first.count - 1;
      }
      const chain second = stack->pop_chain(*slots, 3);
      if (second.count != 0) mine += read(second);
      held($) = mine;
    }
  }

  void after() {
    const chain rest = stack->pop_all(*slots);
    unsigned on_stack = rest.count == 0 ? 0 : read(rest);
    RL_ASSERT(on_stack + held_by_first($) + held($) == 3);  // no slot lost, none twice
    stack.reset();
    slots.reset();
  }
};

}  // namespace

TEST_CASE("stacks: chains pushed and popped between threads, their bytes seen, no slot lost (S1, S2, C1, C2)") {
  expect_passes("stacks pop_chain, every schedule of <= 1 preemption", explore<handoff<false>>(every_schedule(1)));
  expect_passes("stacks pop_chain, random schedules", explore<handoff<false>>(random_schedules(100'000)));
}

TEST_CASE("stacks: two poppers overlapping, each pushing back what it popped (the ABA tag)") {
  expect_passes("stacks two poppers, random schedules", explore<handoff<false, true>>(random_schedules(200'000)));
}

TEST_CASE("stacks: pop_all takes every chain pushed before it (S3)") {
  expect_passes("stacks pop_all, every schedule of <= 1 preemption", explore<handoff<true>>(every_schedule(1)));
  expect_passes("stacks pop_all, random schedules", explore<handoff<true>>(random_schedules(100'000)));
}

TEST_CASE("stacks: each ordering that slots.hpp names, weakened, is reported") {
  struct site {
    ordering o;
    bool take_all;  // which handoff reaches it
  };
  const site sites[] = {
      {{"(S1) push_chain's release-CAS", "lib/pool/slots.hpp", "std::memory_order_release, std::memory_order_relaxed));", 2}, false},
      {{"(S2) pop_chain's acquire-load of the head", "lib/pool/slots.hpp", "std::uint64_t head = head_.load(std::memory_order_acquire);", 0}, false},
      {{"(S2) pop_chain's acquire-CAS, and its retry", "lib/pool/slots.hpp", "std::memory_order_acquire,    // (S2)", 1}, false},
      {{"(S3) pop_all's acquire-CAS", "lib/pool/slots.hpp", "!head_.compare_exchange_weak(head, pack(no_slot, tag_of(head) + 1), std::memory_order_acquire,", 0}, true},
      {{"(C1) a new chunk's release-CAS", "lib/pool/slots.hpp", "if (chunks_[k].compare_exchange_strong(base, mine, std::memory_order_release", 0}, false},
      {{"(C2) find's acquire-load of a chunk", "lib/pool/slots.hpp", "slot* base = chunks_[chunk].load(std::memory_order_acquire);", 0}, false},
  };
  // Not here: pop_chain's reload after a stale link, (S2) too. It runs only when a popper follows
  // a link into a chunk it cannot see yet, which needs a second chunk (64 slots and more) and a
  // slot popped and pushed back in between; these checks' few slots never reach it.
  for (const site& s : sites) {
    if (s.take_all) {
      expect_reported<handoff<true>>("stacks pop_all", s.o, every_schedule(1));
    } else {
      expect_reported<handoff<false>>("stacks pop_chain", s.o, every_schedule(1));
    }
  }
}
