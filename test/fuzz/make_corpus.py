#!/usr/bin/env python3
"""Writes the seed corpus of the differential fuzz target (test/fuzz/corpus/), one file per area.

The encoding is differential.cpp's decoder: a header (bound, ceiling, enabled, gate cap), then one
byte per call and its arguments. Values come from the decoder's tables by index, or raw; the
tables are read from tables.hpp (compiled with $CXX, default c++), never copied here. Run it
again after changing the decoder's tables, and commit what it writes.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

SIZE_MAX = 2**64 - 1
PTRDIFF_MAX = 2**63 - 1
GATE_LIMIT = 2**31 - 1
I64_MIN, I64_MAX = -2**63, 2**63 - 1

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def decoder_tables():
    """The decoder's tables, from tables.hpp itself: print_tables.cpp compiled and run."""
    cxx = os.environ.get('CXX', 'c++')
    with tempfile.TemporaryDirectory() as tmp:
        exe = os.path.join(tmp, 'print_tables')
        subprocess.run([cxx, '-std=c++20', '-I', os.path.join(ROOT, 'include'), '-I', HERE,
                        os.path.join(HERE, 'print_tables.cpp'), '-o', exe], check=True)
        return json.loads(subprocess.run([exe], check=True, capture_output=True, text=True).stdout)


TABLES = decoder_tables()
SIZES = [v % 2**64 for v in TABLES['sizes']]  # printed as signed 64-bit
CEILINGS = [v % 2**64 for v in TABLES['ceilings']]
BOUNDS = [v % 2**64 for v in TABLES['bounds']]
CAPS = TABLES['caps']
RESOURCE_OPS, GATE_OPS = TABLES['resource_ops'], TABLES['gate_ops']


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
def submit(k=1, hundreds=False): return [GATE_OPS, k - 1, 0 if hundreds else 1]
def done(k=1): return [GATE_OPS + 1, k - 1]
def admit(): return [GATE_OPS + 2]
def read(): return [GATE_OPS + 3]
def set_cap(v): return [GATE_OPS + 4] + cap(v)
def adjust(p, max_cap): return [GATE_OPS + 5, {'ok': 0, 'soft': 1, 'hard': 2}[p]] + cap(max_cap)
def permit(): return [GATE_OPS + 6]
def adopt(): return [GATE_OPS + 7]
def release(i=0): return [GATE_OPS + 8, i]
def move_permit(i, j): return [GATE_OPS + 9, i, j]
def destroy_permit(i=0): return [GATE_OPS + 10, i]
def new_gate(v): return [GATE_OPS + 11] + cap(v)


# The resources (pool_resource and mutex_pool_resource over the same options).
def allocate(n, align=8): return [RESOURCE_OPS] + size(n) + [align.bit_length() - 1]
def deallocate(i=0): return [RESOURCE_OPS + 2, i]
def resource_trim(): return [RESOURCE_OPS + 3]


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
