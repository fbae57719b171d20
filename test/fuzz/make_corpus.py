#!/usr/bin/env python3
"""Writes the seed corpus of the differential fuzz target (test/fuzz/corpus/), one file per area.

The encoding is differential.cpp's decoder: a header (bound, ceiling, enabled, gate cap), then one
byte per call and its arguments. Values come from the decoder's tables by index, or raw. Run it
again after changing the decoder's tables, and commit what it writes.
"""
import os
import struct
import sys

SIZE_MAX = 2**64 - 1
PTRDIFF_MAX = 2**63 - 1
GATE_LIMIT = 2**31 - 1
I64_MIN, I64_MAX = -2**63, 2**63 - 1

# The decoder's tables, in its order.
SIZES = [0, 1, 2, 15, 16, 17, 19, 20, 21, 28, 29, 32, 33, 100, 112, 127, 128, 129, 980, 1000,
         1023, 1024, 1025, 4095, 4096, 4097, 16384, 16385, 65536, 131072, 2**20 - 1, 2**20,
         2**20 + 1, 4 * 2**20 - 1, 4 * 2**20, 4 * 2**20 + 1, 5 * 2**20, 2**32, 2**40, 2**47, 2**62,
         PTRDIFF_MAX, PTRDIFF_MAX + 1, 7 * 2**61, 7 * 2**61 + 1, SIZE_MAX - 1, SIZE_MAX]
CEILINGS = [0, 1, 5, 15, 16, 17, 20, 21, 100, 1000, 1024, 4096, 65536, 2**20, 3000000, 4 * 2**20,
            4 * 2**20 + 1, 2**32, 2**40, PTRDIFF_MAX, PTRDIFF_MAX + 1, 7 * 2**61, SIZE_MAX - 1,
            SIZE_MAX]
BOUNDS = [0, 1, 2, 3, 15, 16, 17, 31, 32, 33, 48, 63, 64, 65, 95, 96, 127, 128, 1023, 1024, 2048,
          2**20, SIZE_MAX // 2, SIZE_MAX - 1, SIZE_MAX]
CAPS = [I64_MIN, I64_MIN + 1, -2**32, -GATE_LIMIT - 1, -GATE_LIMIT, -2, -1, 0, 1, 2, 3, 4, 5, 8,
        10, 100, 1000, GATE_LIMIT - 2, GATE_LIMIT - 1, GATE_LIMIT, GATE_LIMIT + 1, 2**31,
        2**32 - 1, 2**32, 2**32 + 1, 2**32 + 5, 2**33, 2**62, I64_MAX - 1, I64_MAX]


def size(v):
    if v in SIZES:
        return [SIZES.index(v)]
    if v < 256:
        return [100, v]
    if v < 65536:
        return [160, v & 0xFF, v >> 8]
    assert v < 2**20  # the decoder keeps raw sizes below 1 MiB
    return [240, v & 0xFF, (v >> 8) & 0xFF, v >> 16]


def near_ceiling(delta):  # a size: the pool's ceiling + delta, delta in [-4, 4]
    return [210, delta + 4]


def ceiling(v):
    if v in CEILINGS:
        return [CEILINGS.index(v)]
    if v < 256:
        return [100, v]
    if v < 65536:
        return [150, v & 0xFF, v >> 8]
    return [200, v & 0xFF, (v >> 8) & 0xFF, v >> 16]


def bound(v):
    if v in BOUNDS:
        return [BOUNDS.index(v)]
    assert v < 4096
    return [255, v & 0xFF, v >> 8]


def cap(v):
    if v in CAPS:
        return [CAPS.index(v)]
    if -128 <= v < 128:
        return [100, v & 0xFF]
    if -32768 <= v < 32768:
        return [150] + list(struct.pack('<h', v))
    return [200] + list(struct.pack('<q', v))


def header(b, c, enabled=True, gate_cap=4):
    return bound(b) + ceiling(c) + [1 if enabled else 0] + cap(gate_cap)


# Pool calls.
def take(n): return [0] + size(n)
def acquire(n): return [1] + size(n)
def take_near_ceiling(delta): return [0] + near_ceiling(delta)
def acquire_near_ceiling(delta): return [1] + near_ceiling(delta)
def retire_held(i=0): return [3, i]
def retire_fresh(s, c=0): return [5] + size(s) + size(c)
def retire_moved_from(i=0): return [6, 0, i]
def retire_empty(): return [6, 1, 0]
def enable(on): return [7, 1 if on else 0]
def trim(): return [8]
def stats(): return [9]
def drop(i=0): return [10, i]
def self_move(i=0): return [11, i]
def rebuild(b, c, enabled=True): return [12] + bound(b) + ceiling(c) + [1 if enabled else 0]


# Gate calls.
def submit(k=1, hundreds=False): return [192, k - 1, 0 if hundreds else 1]
def done(k=1): return [193, k - 1]
def admit(): return [194]
def read(): return [195]
def set_cap(v): return [196] + cap(v)
def adjust(p, max_cap): return [197, {'ok': 0, 'soft': 1, 'hard': 2}[p]] + cap(max_cap)
def permit(): return [198]
def adopt(): return [199]
def release(i=0): return [200, i]
def move_permit(i, j): return [201, i, j]
def destroy_permit(i=0): return [202, i]
def new_gate(v): return [203] + cap(v)


# The resources (pool_resource and mutex_pool_resource over the same options), ops 176-191.
def allocate(n, align=8): return [176] + size(n) + [align.bit_length() - 1]
def deallocate(i=0): return [178, i]
def resource_trim(): return [179]


def seq(*parts):
    return bytes(b for p in parts for b in p)


SEEDS = {
    # The bound where thread caches begin (64: four buffers cached, places taken two at a time) and
    # where they are largest (1024: 64 buffers, places 16 at a time); small bounds, 0 and SIZE_MAX.
    'bounds': seq(header(64, 4 * 2**20),
                  *[retire_fresh(4096) for _ in range(66)], stats(),
                  *[take(4096) for _ in range(66)], *[retire_held(0) for _ in range(48)],
                  rebuild(1024, 4 * 2**20), *[retire_fresh(1024) for _ in range(66)],
                  *[take(1024) for _ in range(66)], *[acquire(1000) for _ in range(40)],
                  *[retire_held(0) for _ in range(48)], *[take(1000) for _ in range(34)], trim(),
                  rebuild(17, 65536), *[retire_fresh(100) for _ in range(18)], take(100),
                  rebuild(0, 4 * 2**20), acquire(16), retire_held(0), take(16),
                  rebuild(SIZE_MAX, SIZE_MAX), *[retire_fresh(100 + i) for i in range(5)],
                  take(0), take(SIZE_MAX), take(101), trim(), stats()),
    # Ceilings that are not class sizes, 0 and SIZE_MAX; sizes on both sides of each.
    'ceilings': seq(header(64, 1000),
                    acquire(999), acquire(1000), acquire(1001), retire_held(0), retire_held(0),
                    retire_held(0), take(1000), take(1001), acquire(0), retire_fresh(1000),
                    take_near_ceiling(0), acquire_near_ceiling(1), take_near_ceiling(-1),
                    rebuild(64, 0), retire_fresh(0), retire_fresh(1), take(0), take(1),
                    acquire(0), acquire(17), retire_held(0), retire_held(0),
                    rebuild(64, SIZE_MAX), acquire(SIZE_MAX), acquire(PTRDIFF_MAX + 1),
                    acquire(7 * 2**61 + 1), take(SIZE_MAX), acquire(4 * 2**20 + 1),
                    retire_held(0), take(4 * 2**20), take(4 * 2**20 + 1),
                    rebuild(64, PTRDIFF_MAX + 1), acquire(PTRDIFF_MAX + 1), retire_fresh(20),
                    take_near_ceiling(0), acquire_near_ceiling(1), take(17),
                    rebuild(64, 5), retire_fresh(3), retire_fresh(5), take(4), take(1), take(1)),
    # Off-class buffers beside on-class ones: the smallest that serves, across classes.
    'off_class': seq(header(1024, 4 * 2**20),
                     retire_fresh(1000), retire_fresh(1024), retire_fresh(980),
                     retire_fresh(17, 21), retire_fresh(0, 19), retire_fresh(4095, 4097),
                     take(990), take(10), take(1), take(18), take(4096), take(17), stats(),
                     retire_held(0), retire_held(1), retire_held(2), acquire(900),
                     retire_fresh(5, 4 * 2**20), take(4 * 2**20), retire_fresh(0, 4 * 2**20 + 1),
                     self_move(0), retire_moved_from(0), retire_empty(), retire_held(0)),
    # Switching off and on, trims, and buffers that outlive their pool.
    'switch': seq(header(48, 65536, enabled=False),
                  retire_fresh(4096), take(4096), acquire(4096), enable(True), enable(True),
                  retire_held(0), acquire(4096), acquire(100), enable(False), enable(False),
                  retire_held(0), enable(True), retire_held(0), trim(), trim(), acquire(28),
                  rebuild(1, 1024), retire_held(0), drop(0), acquire(29), acquire(30),
                  retire_held(1), retire_held(0), stats()),
    # The resources: pooled or upstream by size and alignment, each block back into its own
    # class (a larger retained block never answers), every alignment up to 4096, a zero bound.
    'resource': seq(header(64, 65536),
                    allocate(1000), deallocate(0), allocate(100), allocate(1024, 1),
                    allocate(97, 4), deallocate(0), deallocate(0), deallocate(0), allocate(112, 16),
                    *[allocate(64, 2**k) for k in range(13)], *[deallocate(0) for _ in range(13)],
                    allocate(0, 1), allocate(65536), allocate(65537), allocate(2**20, 32),
                    deallocate(1), deallocate(0), resource_trim(), allocate(0, 1), deallocate(0),
                    allocate(SIZE_MAX), allocate(PTRDIFF_MAX + 1, 4096),
                    rebuild(0, 4096), allocate(16), deallocate(0), allocate(16), deallocate(0),
                    rebuild(64, SIZE_MAX), allocate(SIZE_MAX, 1), allocate(2**20 + 1), deallocate(0)),
    # The gate's clamps and the packing's edges, and permits moved onto themselves.
    'gate_limits': seq(header(16, 4096, gate_cap=I64_MIN),
                       admit(), admit(), read(), set_cap(I64_MAX), read(),
                       adjust('ok', I64_MAX), adjust('hard', I64_MIN), adjust('ok', I64_MIN),
                       set_cap(2**32 + 5), submit(8, hundreds=True), set_cap(GATE_LIMIT + 1),
                       adjust('soft', 0), set_cap(2**32), admit(), done(8), new_gate(I64_MAX),
                       permit(), adopt(), permit(), move_permit(0, 0), move_permit(0, 1),
                       move_permit(2, 2), release(1), destroy_permit(0), set_cap(-1),
                       permit(), admit(), done(3), new_gate(-2**32), adjust('ok', 2),
                       adjust('ok', 2), adjust('ok', 2), submit(3), admit(), done(8),
                       new_gate(GATE_LIMIT), submit(5), set_cap(3), admit(), adjust('ok', 4),
                       admit(), admit(), new_gate(2**33), read()),
}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), 'corpus')
    os.makedirs(out, exist_ok=True)
    for name, data in SEEDS.items():
        with open(os.path.join(out, name), 'wb') as f:
            f.write(data)
        print(f'{name}: {len(data)} bytes')


if __name__ == '__main__':
    main()
