"""Pool(decay=seconds) and Pool.decay(now) from Python: off unless asked for; a step every half the
decay, driven by explicit times on time.monotonic()'s clock; each step frees what has sat unused
since before the step before, counted in class_stats()'s `decayed`; the option's rounding and
saturation; bad arguments. Every case runs on the pool with its thread caches, on the pool without
them (the shared stacks alone) and on MutexPool. Buffers of a chosen capacity come fresh from a
pool that keeps nothing."""
import math
import random
import signal
import threading
import time

import pytest

import sluice

CEILING = 1 << 20
HOUR = 3600.0
fresh = sluice.MutexPool(bound=0, ceiling=CEILING)  # acquire answers fresh memory, always
# The top class cut at 1000 bytes: its buffers have a capacity no class has, and are shelved in
# the class above (1024) by a pool with a larger ceiling.
off_class = sluice.MutexPool(bound=0, ceiling=1000)

MAKERS = {
    "Pool": lambda **kw: sluice.Pool(**kw),
    "Pool-no-cache": lambda **kw: sluice.Pool(thread_cache=False, **kw),
    "MutexPool": lambda **kw: sluice.MutexPool(**kw),
}


@pytest.fixture(params=list(MAKERS), ids=list(MAKERS))
def make(request):
    return MAKERS[request.param]


def row(rows, n):
    """The row of a buffer of capacity n: the first whose capacity reaches it."""
    return next(r for r in rows if r.capacity is None or r.capacity >= n)


def check_rows(p):
    """Every row's buffers came in by its retires and left by its hits, trims and decay; the rows
    sum to stats(). Answers the rows."""
    rows, s = p.class_stats(), p.stats()
    for r in rows:
        assert r.retained == r.retired - r.hits - r.trimmed - r.decayed, r
    assert sum(r.retained for r in rows) == s.retained
    assert rows[-1].decayed == 0  # above the ceiling nothing is kept
    return rows


def decayed(p):
    return sum(r.decayed for r in p.class_stats())


def test_off_by_default(make):
    for off in ({}, {"decay": None}, {"decay": 0}, {"decay": 0.0}, {"decay": -1.5}, {"decay": -math.inf}):
        p = make(bound=64, ceiling=CEILING, **off)
        p.retire(fresh.acquire(1000))
        assert p.decay() is False
        for later in (HOUR, 1e6, 1e9):
            assert p.decay(now=time.monotonic() + later) is False
        assert p.retained == 1 and decayed(p) == 0


def test_steps_free_what_sat_unused(make):
    """decay=3600: steps fall due 1800 s apart from the pool's making. The first frees nothing (a
    buffer must sit through a whole step); the second frees what sat unused since before the first,
    but a buffer used in between survives until the third."""
    t0 = time.monotonic()
    p = make(bound=64, ceiling=CEILING, decay=HOUR)
    p.retire(fresh.acquire(1000))  # A: capacity 1024, never used again
    p.retire(off_class.acquire(1000))  # C: capacity 1000, shelved in the 1024 class, never used again
    p.retire(fresh.acquire(5000))  # B: capacity 5120, used between the first step and the second
    assert p.decay(now=t0) is False and p.decay(now=t0 + 1000) is False  # the first is due at 1800 s
    assert p.decay(now=t0 + 1860) is True
    rows = check_rows(p)
    assert p.retained == 3 and decayed(p) == 0
    assert p.decay(now=t0 + 1860) is False and p.decay(now=t0 + 3000) is False  # the next: at 3600 s

    b = p.take(5000)
    assert b.capacity == 5120
    p.retire(b)
    assert p.decay(now=t0 + 3660) is True
    rows = check_rows(p)
    assert (row(rows, 1024).decayed, row(rows, 1024).retained) == (2, 0)
    assert (row(rows, 5120).decayed, row(rows, 5120).retained) == (0, 1)
    assert (p.stats().retained, p.stats().retained_bytes) == (1, 5120)  # B alone

    assert p.decay(now=t0 + 5460) is True
    rows = check_rows(p)
    assert (row(rows, 5120).decayed, row(rows, 5120).retained) == (1, 0)
    s = p.stats()
    assert (s.retained, s.retained_bytes) == (0, 0)
    assert sum(r.decayed for r in rows) == 3 and sum(r.trimmed for r in rows) == 0
    assert p.decay(now=t0 + 7260) is True and decayed(p) == 3  # a step with nothing to free still runs


def test_a_late_call_takes_one_step_and_the_next_falls_due_half_after_it(make):
    t0 = time.monotonic()
    p = make(bound=64, ceiling=CEILING, decay=HOUR)
    p.retire(fresh.acquire(1000))
    late = t0 + 10 * HOUR
    assert p.decay(now=late) is True  # one step for the five that fell due: nothing is old enough
    assert p.decay(now=late) is False and p.decay(now=late + 1700) is False
    assert decayed(p) == 0
    assert p.decay(now=late + 1860) is True
    assert decayed(p) == 1 and p.retained == 0


def test_now_reads_time_monotonic(make):
    """Pool.decay(now) reads `now` on time.monotonic()'s clock, and the pool times its schedule on
    C++'s steady_clock: on Linux both are CLOCK_MONOTONIC. With decay=2 s the first step falls due
    1 s after the pool was made, between two readings of time.monotonic(); a clock of another
    origin would miss that window by far more than the millisecond each side allows."""
    assert time.get_clock_info("monotonic").implementation == "clock_gettime(CLOCK_MONOTONIC)"
    before = time.monotonic()
    p = make(decay=2.0)
    after = time.monotonic()
    assert p.decay(now=before + 0.999) is False
    assert p.decay(now=after + 1.001) is True


def test_now_defaults_to_the_clock(make):
    p = make(bound=64, ceiling=CEILING, decay=0.01)  # a step every 5 ms
    p.retire(fresh.acquire(1000))
    deadline = time.monotonic() + 30
    while decayed(p) == 0:
        assert time.monotonic() < deadline
        time.sleep(0.006)
        p.decay()
    assert p.retained == 0


def test_the_decay_is_rounded_up_to_milliseconds_and_saturates(make):
    before = time.monotonic()
    p = make(decay=1e-9)  # 1 ms, not off: a step every 0.5 ms
    after = time.monotonic()
    assert p.decay(now=before + 0.0004) is False and p.decay(now=after + 0.0006) is True
    half_of_most = 2.0**39 / 1000  # half of 2^40 ms, C++'s longest decay: about 17 years
    for longest in (2.0**40 / 1000, 1e12, 1e300, math.inf, 10**400):
        before = time.monotonic()
        p = make(decay=longest)
        after = time.monotonic()
        assert p.decay(now=before + half_of_most - 1) is False
        assert p.decay(now=after + half_of_most + 1) is True


def test_times_far_off_are_clamped(make):
    p = make(bound=64, ceiling=CEILING, decay=HOUR)
    p.retire(fresh.acquire(1000))
    assert p.decay(now=-1e300) is False and p.decay(now=-(2**80)) is False
    assert p.decay(now=1e300) is True  # clamped to 146 years on: a step, and none due for as long again
    assert p.decay(now=time.monotonic() + 10 * HOUR) is False
    assert p.retained == 1


def test_bad_arguments_raise_clear_errors(pool_type):
    with pytest.raises(ValueError, match="decay"):
        pool_type(decay=math.nan)
    for bad in ("60", True, 1j, [60]):
        with pytest.raises(TypeError, match="decay"):
            pool_type(decay=bad)
    with pytest.raises(TypeError):
        pool_type(64, CEILING, True, True, 60.0)  # decay is keyword-only
    p = pool_type(decay=HOUR)
    for bad in (math.nan, math.inf, -math.inf, 10**400):
        with pytest.raises(ValueError, match="now"):
            p.decay(now=bad)
    for bad in ("1", True, 1j, b"1"):
        with pytest.raises(TypeError, match="now"):
            p.decay(now=bad)
    with pytest.raises(TypeError, match="not initialised"):
        pool_type.__new__(pool_type).decay()
    assert decayed(p) == 0


def test_the_twins_decay_alike():
    """Pool without thread caches and MutexPool, given the same single-threaded run of traffic and
    steps, answer the same rows."""

    def run(p):
        rng = random.Random(5)
        sizes = [16, 100, 1000, 5000, 64 << 10, CEILING + 1]
        held, now = [], time.monotonic()
        for i in range(3000):
            op = rng.random()
            if op < 0.3:
                held.append(p.acquire(rng.choice(sizes)))
            elif op < 0.45:
                b = p.take(rng.choice(sizes))
                if b is not None:
                    held.append(b)
            elif op < 0.9 and held:
                p.retire(held.pop(rng.randrange(len(held))))
            elif op < 0.91:
                p.trim(rng.choice([None, 0.5]))
            if i % 50 == 0:
                now += 1860
                assert p.decay(now=now) is True
                check_rows(p)
        return [tuple(getattr(r, f) for f in ("capacity", "retained", "hits", "misses", "retired", "trimmed", "decayed"))
                for r in check_rows(p)]

    rows = [run(maker(bound=16, ceiling=CEILING, decay=HOUR)) for maker in (MAKERS["Pool-no-cache"], MAKERS["MutexPool"])]
    assert rows[0] == rows[1]
    assert sum(r[-1] for r in rows[0]) > 0  # none of it vacuous


def test_steps_race_other_threads_traffic(make):
    """Threads take and retire while the main thread steps decay (with the GIL released): the counts
    stay whole, and once the traffic ends two steps free what it left."""
    p = make(bound=256, ceiling=CEILING, decay=HOUR)
    # A buffer of a class below every size the traffic asks for, kept (in this thread's cache, or
    # shared) before the traffic starts: a take looks at its own class and larger ones only, so no
    # take reaches it (a 64 KiB one was: acquire(5000) looked past its empty class to it), and the
    # second step frees it, however the traffic is scheduled.
    p.retire(fresh.acquire(64))
    assert p.retained == 1
    stop = threading.Event()

    def traffic(seed):
        rng = random.Random(seed)
        held = []
        while not stop.is_set():
            if held and rng.random() < 0.5:
                p.retire(held.pop())
            else:
                held.append(p.acquire(rng.choice([100, 1000, 5000])))
        for b in held:
            p.retire(b)

    threads = [threading.Thread(target=traffic, args=(seed,)) for seed in range(3)]
    for t in threads:
        t.start()
    now = time.monotonic()
    try:
        for _ in range(50):  # each step lets the traffic run (the GIL released), and waits for it back
            now += 1860
            assert p.decay(now=now) is True
    finally:
        stop.set()
        for t in threads:
            t.join()
    check_rows(p)
    # join() returns before a thread's C++ thread-locals are destroyed: until then its cache holds
    # what it cached (a cache decays at its thread's next call, or gives its buffers up as the
    # thread exits), so the steps go on until the exits are done.
    deadline = time.monotonic() + 30
    while p.retained > 0:
        assert time.monotonic() < deadline
        now += 1860
        assert p.decay(now=now) is True
        time.sleep(0.01)
    rows = check_rows(p)
    assert row(rows, 64).decayed == 1


def test_a_decay_signal_reaches_a_sleeping_threads_cache():
    # With a decay signal, a step signals a thread whose cache of the Pool sat unused since before
    # the step before, and its handler gives back the pages of what the cache holds (the buffers
    # stay, retained). The thread sleeps on an Event, in a wait the signal does not end.
    size = 64 << 10
    sluice.set_decay_signal(signal.SIGRTMIN + 4)
    try:
        p = sluice.Pool(bound=1024, decay=HOUR)
        filled, wake, done = threading.Event(), threading.Event(), threading.Event()

        def sleeper():
            held = [p.acquire(size) for _ in range(8)]
            for b in held:
                memoryview(b)[:] = b"\x07" * size
            for b in held:
                p.retire(b)
            filled.set()
            wake.wait()
            again = [p.acquire(size) for _ in range(8)]
            for b in again:
                memoryview(b)[:] = b"\x08" * size
            assert all(bytes(memoryview(b)) == b"\x08" * size for b in again)
            for b in again:
                p.retire(b)
            done.set()

        t = threading.Thread(target=sleeper)
        t.start()
        assert filled.wait(60)
        now = time.monotonic()
        assert p.decay(now + 0.51 * HOUR)  # sees the cache used
        assert p.released_idle_bytes == 0
        assert p.decay(now + 1.01 * HOUR)  # unused since before the step before: asked
        deadline = time.monotonic() + 60
        while p.released_idle_bytes == 0 and time.monotonic() < deadline:
            time.sleep(0.001)
        cached = p.retained  # what the sleeper's cache holds: all but its top buffer without pages
        assert cached > 1
        assert (size - 4096) * (cached - 1) <= p.released_idle_bytes <= size * (cached - 1)
        wake.set()
        assert done.wait(60)
        t.join()
        assert p.retained == 8
    finally:
        sluice.set_decay_signal(0)


@pytest.mark.parametrize("signo", [0.5, "1", None])
def test_set_decay_signal_takes_an_int(signo):
    with pytest.raises(TypeError):
        sluice.set_decay_signal(signo)


@pytest.mark.parametrize("signo", [signal.SIGINT, -1, signal.SIGRTMAX + 1])
def test_set_decay_signal_refuses_what_is_not_a_real_time_signal(signo):
    with pytest.raises(ValueError):
        sluice.set_decay_signal(signo)
