"""Pool.class_stats() from Python: a row per size class (four per power of two, the top one cut at
the ceiling) and a last row, capacity None, for what lies above the ceiling; each take, acquire and
retire counted in its class, each drop with its reason (the bound, the ceiling, the switch), trims
counted, and the rows summing to stats(). Single-threaded: the counts are exact. Buffers of a
chosen capacity come fresh from a pool that keeps nothing."""
import random

import pytest

import sluice

CEILING = 1 << 20
fresh = sluice.MutexPool(bound=0, ceiling=CEILING)  # acquire answers fresh memory, always
COUNTS = ("retained", "hits", "misses", "fresh", "retired", "dropped_at_bound", "dropped_over_ceiling", "dropped_off",
          "trimmed", "decayed")


def class_sizes(ceiling):
    """The classes' sizes as include/sluice/pool.hpp gives them: 16, 20, 24, 28, 32, 40, ..., the
    top one cut at the ceiling."""
    sizes, c = [], 0
    while True:
        nominal = (4 + c % 4) << (c // 4 + 2)
        sizes.append(min(nominal, ceiling))
        if nominal >= ceiling:
            return sizes
        c += 1


def row(rows, n):
    """The row of a request of n bytes, or of a buffer of capacity n: the first whose capacity
    reaches n; the last one above the ceiling."""
    return next(r for r in rows if r.capacity is None or r.capacity >= n)


def counts(r):
    return {name: getattr(r, name) for name in COUNTS}


def check_rows(p):
    """What holds of the rows at any quiet moment: their sums are stats()'s; each row's buffers came
    in by its retires and left by its hits and trims; the last row keeps nothing and alone drops
    for the ceiling. Answers the rows."""
    rows, s = p.class_stats(), p.stats()
    assert sum(r.hits for r in rows) == s.hits
    assert sum(r.misses for r in rows) == s.misses
    assert sum(r.retired for r in rows) == s.retired
    assert sum(r.dropped_at_bound + r.dropped_over_ceiling + r.dropped_off for r in rows) == s.dropped
    assert sum(r.retained for r in rows) == s.retained
    for r in rows:
        assert r.fresh <= r.misses, r
        assert r.retained == r.retired - r.hits - r.trimmed - r.decayed, r
    last = rows[-1]
    assert last.capacity is None
    assert (last.retained, last.retired, last.hits, last.trimmed, last.decayed) == (0, 0, 0, 0, 0)
    assert all(r.dropped_over_ceiling == 0 for r in rows[:-1])
    return rows


def test_a_row_per_class_then_one_above_the_ceiling(pool_type):
    for ceiling in (0, 1000, CEILING, 4 << 20):
        p = pool_type(ceiling=ceiling)
        rows = p.class_stats()
        assert isinstance(rows, list) and all(type(r) is sluice.PoolClassStats for r in rows)
        assert [r.capacity for r in rows] == class_sizes(ceiling) + [None]
        assert all(v == 0 for r in rows for v in counts(r).values())
    assert [r.capacity for r in pool_type().class_stats()][-2:] == [4 << 20, None]  # the default ceiling
    assert [r.capacity for r in pool_type(ceiling=1000).class_stats()][:8] == [16, 20, 24, 28, 32, 40, 48, 56]
    # The last row is known by its place: with the largest ceiling, the top class's size is 2**64 - 1 too.
    assert [r.capacity for r in pool_type(ceiling=2**64).class_stats()][-2:] == [2**64 - 1, None]


def test_the_rows_are_a_snapshot_made_by_the_module_only(pool_type):
    p = pool_type(bound=64, ceiling=CEILING)
    before = p.class_stats()
    p.retire(fresh.acquire(1000))
    assert row(before, 1000).retired == 0 and row(p.class_stats(), 1000).retired == 1  # a copy, not a view
    r = row(p.class_stats(), 1000)
    for name in ("capacity",) + COUNTS:
        with pytest.raises(AttributeError):
            setattr(r, name, 5)
    assert repr(r) == ("PoolClassStats(capacity=1024, retained=1, hits=0, misses=0, fresh=0, retired=1, "
                       "dropped_at_bound=0, dropped_over_ceiling=0, dropped_off=0, trimmed=0, decayed=0)")
    assert repr(p.class_stats()[-1]).startswith("PoolClassStats(capacity=None, ")
    with pytest.raises(TypeError):
        sluice.PoolClassStats()
    with pytest.raises(TypeError):
        sluice.PoolClassStats.__new__(sluice.PoolClassStats)
    with pytest.raises(TypeError, match="not initialised"):
        pool_type.__new__(pool_type).class_stats()


def test_retires_of_two_sizes_land_in_their_classes(pool_type):
    p = pool_type(bound=64, ceiling=CEILING)
    for n in (1000, 5000, 1000, 5000, 1000):
        p.retire(fresh.acquire(n))  # capacities 1024 and 5120
    rows = check_rows(p)
    assert (row(rows, 1024).retired, row(rows, 1024).retained) == (3, 3)
    assert (row(rows, 5120).retired, row(rows, 5120).retained) == (2, 2)
    assert row(rows, 1024).capacity == 1024 and row(rows, 5120).capacity == 5120
    others = [r for r in rows if r.capacity not in (1024, 5120)]
    assert all(r.retired == 0 and r.retained == 0 for r in others)
    s = p.stats()
    assert (s.retired, s.retained) == (5, 5)
    assert sum(r.capacity * r.retained for r in rows[:-1]) == s.retained_bytes  # all of them on-class


def test_a_take_is_a_hit_of_the_class_that_answers(pool_type):
    p = pool_type(bound=64, ceiling=CEILING)
    p.retire(fresh.acquire(1000))
    b = p.take(600)  # 600's class is 640, empty: the take looks on and the 1024 class answers
    assert b is not None and b.capacity == 1024
    rows = check_rows(p)
    assert row(rows, 640).capacity == 640
    assert (row(rows, 1024).hits, row(rows, 640).hits, row(rows, 640).misses) == (1, 0, 0)
    assert p.take(600) is None  # a miss of 640's class, no acquire: nothing fresh
    rows = check_rows(p)
    assert (row(rows, 640).misses, row(rows, 640).fresh, row(rows, 1024).misses) == (1, 0, 0)
    c = p.acquire(600)  # misses again, and allocates 640's size
    assert c.capacity == 640
    rows = check_rows(p)
    assert (row(rows, 640).misses, row(rows, 640).fresh) == (2, 1)
    p.retire(b)
    p.retire(c)
    assert p.take(600).capacity == 640  # now 640's own class answers
    rows = check_rows(p)
    assert (row(rows, 640).retired, row(rows, 640).hits, row(rows, 640).retained) == (1, 1, 0)
    assert (row(rows, 1024).retired, row(rows, 1024).hits, row(rows, 1024).retained) == (2, 1, 1)


def test_an_acquire_that_misses_is_fresh(pool_type):
    p = pool_type(bound=64, ceiling=CEILING)
    b = p.acquire(1000)
    rows = check_rows(p)
    assert counts(row(rows, 1000)) == dict.fromkeys(COUNTS, 0) | {"misses": 1, "fresh": 1}
    p.retire(b)
    p.acquire(1000)  # a hit: nothing fresh
    rows = check_rows(p)
    assert counts(row(rows, 1000)) == dict.fromkeys(COUNTS, 0) | {"misses": 1, "fresh": 1, "retired": 1, "hits": 1}
    p.acquire(0)  # the smallest class
    rows = check_rows(p)
    assert (rows[0].capacity, rows[0].misses, rows[0].fresh) == (16, 1, 1)


def test_a_shelved_buffer_counts_in_the_class_above(pool_type):
    """A capacity that is no class size (1000, from a pool whose top class is cut there) is kept
    on the shelves of the class above it, 1024, and counted there."""
    p = pool_type(bound=64, ceiling=CEILING)
    b = sluice.MutexPool(bound=0, ceiling=1000).acquire(1000)
    assert b.capacity == 1000
    p.retire(b)
    rows = check_rows(p)
    assert (row(rows, 1000).capacity, row(rows, 1000).retired, row(rows, 1000).retained) == (1024, 1, 1)
    assert row(rows, 896).retained == 0
    assert p.take(900).capacity == 1000
    rows = check_rows(p)
    assert (row(rows, 1024).hits, row(rows, 1024).retained) == (1, 0)


def test_above_the_ceiling_is_the_last_row(pool_type):
    p = pool_type(bound=64, ceiling=CEILING)
    p.retire(fresh.acquire(CEILING + 1))  # too large: freed
    p.retire(fresh.acquire(CEILING))  # exactly the ceiling: kept, in the top class
    rows = check_rows(p)
    assert counts(rows[-1]) == dict.fromkeys(COUNTS, 0) | {"dropped_over_ceiling": 1}
    assert (rows[-2].capacity, rows[-2].retired, rows[-2].retained) == (CEILING, 1, 1)
    assert p.take(CEILING + 1) is None
    big = p.acquire(CEILING + 5)  # fresh, of exactly that size
    p.retire(big)
    assert p.take(2**100) is None  # any size above the ceiling: the last row
    rows = check_rows(p)
    assert counts(rows[-1]) == dict.fromkeys(COUNTS, 0) | {"misses": 3, "fresh": 1, "dropped_over_ceiling": 2}
    assert rows[-2].misses == 0
    assert p.stats().dropped == 2


def test_the_bound_drops_count_at_bound(pool_type):
    p = pool_type(bound=4, ceiling=CEILING)
    for _ in range(6):
        p.retire(fresh.acquire(1000))
    rows = check_rows(p)
    r = row(rows, 1000)
    assert (r.retired, r.dropped_at_bound, r.retained, r.dropped_off, r.dropped_over_ceiling) == (4, 2, 4, 0, 0)
    none_kept = pool_type(bound=0, ceiling=CEILING)
    none_kept.retire(fresh.acquire(5000))
    rows = check_rows(none_kept)
    assert (row(rows, 5000).dropped_at_bound, row(rows, 5000).retired) == (1, 0)


def test_trim_moves_retained_to_trimmed(pool_type):
    p = pool_type(bound=64, ceiling=CEILING)
    for n in (1000, 5000, 1000, 5000, 1000):
        p.retire(fresh.acquire(n))
    p.trim()
    rows = check_rows(p)
    assert (row(rows, 1024).retained, row(rows, 1024).trimmed, row(rows, 1024).retired) == (0, 3, 3)
    assert (row(rows, 5120).retained, row(rows, 5120).trimmed, row(rows, 5120).retired) == (0, 2, 2)
    assert sum(r.trimmed for r in rows) == 5 and p.stats().retained == 0


def test_trim_a_share_counts_what_it_freed(pool_type):
    p = pool_type(bound=64, thread_cache=False)  # test_pool's trim(share) case: the default ceiling
    held = [p.acquire(64 << 10) for _ in range(4)] + [p.acquire(1024) for _ in range(8)]
    for b in held:
        p.retire(b)
    p.trim(0.5)  # at least half of 270,336 bytes: three of the 64 KiB buffers
    rows = check_rows(p)
    assert (row(rows, 64 << 10).misses, row(rows, 64 << 10).fresh) == (4, 4)
    assert (row(rows, 64 << 10).retained, row(rows, 64 << 10).trimmed) == (1, 3)
    assert (row(rows, 1024).retained, row(rows, 1024).trimmed) == (8, 0)


def test_the_switch_trims_and_then_drops_off(pool_type):
    p = pool_type(bound=64, ceiling=CEILING)
    p.retire(fresh.acquire(1000))
    p.retire(fresh.acquire(1000))
    p.enabled = False  # frees what it retains: trimmed
    rows = check_rows(p)
    assert (row(rows, 1024).retained, row(rows, 1024).trimmed) == (0, 2)
    p.retire(fresh.acquire(1000))
    p.retire(fresh.acquire(5000))
    assert p.take(1000) is None  # off: a miss of its class
    p.acquire(1000)  # and fresh
    rows = check_rows(p)
    r = row(rows, 1024)
    assert (r.dropped_off, r.dropped_at_bound, r.retired, r.retained, r.misses, r.fresh) == (1, 0, 2, 0, 2, 1)
    assert (row(rows, 5120).dropped_off, row(rows, 5120).retired) == (1, 0)
    off_from_the_start = pool_type(bound=64, ceiling=CEILING, enabled=False)
    off_from_the_start.retire(fresh.acquire(1000))
    rows = check_rows(off_from_the_start)
    assert (row(rows, 1024).dropped_off, row(rows, 1024).trimmed) == (1, 0)


def run_mixed(p, seed):
    """A fixed, mixed run of takes, acquires, retires (some above the ceiling), trims and switches,
    checking the rows as it goes."""
    rng = random.Random(seed)
    sizes = [0, 16, 17, 100, 600, 1000, 1024, 5000, 64 << 10, CEILING, CEILING + 1]
    held = []
    for i in range(1500):
        op = rng.random()
        if op < 0.35:
            held.append(p.acquire(rng.choice(sizes)))
        elif op < 0.5:
            b = p.take(rng.choice(sizes))
            if b is not None:
                held.append(b)
        elif op < 0.9 and held:
            p.retire(held.pop(rng.randrange(len(held))))
        elif op < 0.92:
            p.trim(rng.choice([None, 0.25, 0.5]))
        elif op < 0.94:
            p.enabled = not p.enabled
        if i % 100 == 0:
            check_rows(p)
    return check_rows(p)


@pytest.mark.parametrize("bound", [8, 64], ids=["shared-stacks", "thread-cache"])  # 64: the least bound that caches
def test_the_rows_sum_to_stats_over_a_mixed_run(pool_type, bound):
    rows = run_mixed(pool_type(bound=bound, ceiling=CEILING), seed=7)
    assert sum(r.hits for r in rows) > 0 and sum(r.trimmed for r in rows) > 0  # none of it vacuous
    assert sum(r.fresh for r in rows) > 0 and sum(r.dropped_off for r in rows) > 0
    assert rows[-1].misses > 0 and rows[-1].dropped_over_ceiling + rows[-1].dropped_off > 0
    if bound == 8:
        assert sum(r.dropped_at_bound for r in rows) > 0


def test_the_twins_count_alike():
    """Pool without thread caches and MutexPool, given the same single-threaded run, answer the
    same rows."""
    as_rows = [[(r.capacity, *counts(r).values()) for r in run_mixed(cls(bound=8, ceiling=CEILING, thread_cache=False), 11)]
               for cls in (sluice.Pool, sluice.MutexPool)]
    assert as_rows[0] == as_rows[1]
