"""sluice.Pool from Python: the frame pool's semantics (exact lengths, the smallest class that
fits, the oversized refused, the bound, the switch, flat over rounds), the memoryview rules, and
bad arguments. Buffers of a chosen capacity come fresh from a pool that keeps nothing."""
import math
import os
import queue
import threading

import pytest

import sluice

CEILING = 1 << 20
fresh = sluice.MutexPool(bound=0, ceiling=CEILING)  # acquire answers fresh memory, always


def test_take_answers_exact_lengths(pool_type):
    p = pool_type(bound=64, ceiling=CEILING)
    assert p.take(1000) is None
    p.retire(fresh.acquire(1000))
    b = p.take(600)
    assert b is not None and len(b) == 600 and b.capacity >= 1000
    assert p.take(600) is None  # never answered twice


def test_take_answers_the_smallest_that_fits(pool_type):
    p = pool_type(bound=64, ceiling=CEILING)
    large, small = fresh.acquire(5000), fresh.acquire(900)
    large_capacity, small_capacity = large.capacity, small.capacity
    p.retire(large)
    p.retire(small)
    assert p.take(800).capacity == small_capacity
    assert p.take(800).capacity == large_capacity


def test_the_oversized_are_refused(pool_type):
    p = pool_type(bound=64, ceiling=CEILING)
    assert p.take(CEILING + 1) is None
    assert p.take(2**100) is None
    p.retire(fresh.acquire(CEILING + 1))
    assert p.retained == 0
    p.retire(fresh.acquire(CEILING))
    assert p.retained == 1
    assert len(p.take(CEILING)) == CEILING
    big = p.acquire(CEILING + 5)  # above the ceiling: exactly what was asked
    assert len(big) == big.capacity == CEILING + 5


def test_the_pool_holds_its_bound(pool_type):
    p = pool_type(bound=8, ceiling=CEILING)
    for _ in range(8 + 5):
        p.retire(fresh.acquire(1000))
    assert p.retained == 8
    s = p.stats()
    assert (s.retired, s.dropped, s.retained) == (8, 5, 8) and s.retained_bytes >= 8 * 1000
    assert p.take(1000) is not None


def test_the_switch(pool_type):
    p = pool_type(bound=64, ceiling=CEILING, enabled=False)
    assert p.enabled is False
    p.retire(fresh.acquire(1000))
    assert p.retained == 0 and p.take(1000) is None
    p.enabled = True
    p.retire(fresh.acquire(1000))
    assert p.retained == 1
    p.enabled = False  # off: frees what it retains
    assert p.retained == 0
    p.enabled = True
    p.retire(fresh.acquire(1000))
    p.trim()
    assert p.retained == 0


def test_trim_a_share_frees_the_largest_first(pool_type):
    p = pool_type(bound=64, thread_cache=False)
    held = [p.acquire(64 << 10) for _ in range(4)] + [p.acquire(1024) for _ in range(8)]
    for b in held:
        p.retire(b)
    p.trim(0.0)
    p.trim(math.nan)
    assert p.retained == 12
    p.trim(0.5)  # at least half of 270,336 bytes: three of the 64 KiB buffers
    assert p.retained == 9 and p.stats().retained_bytes == 65536 + 8 * 1024
    p.trim(share=2)  # 1 or more: all
    assert p.retained == 0
    with pytest.raises(TypeError):
        p.trim("0.5")


def test_flat_over_rounds(pool_type):
    """The bound's proof from Python: once warm, rounds of the same work allocate nothing new."""
    p = pool_type(bound=64, ceiling=CEILING)
    sizes = [64 << 10, 256 << 10, CEILING]

    def round_():
        for n in sizes:
            b = p.acquire(n)
            memoryview(b)[:] = bytes(range(256)) * (n // 256)
            p.retire(b)

    for _ in range(50):
        round_()
    warm = p.stats()
    for _ in range(200):
        round_()
    after = p.stats()
    assert after.misses == warm.misses  # not one fresh allocation in 200 rounds
    assert after.retained_bytes == warm.retained_bytes


def test_memoryview_is_writable_and_zero_copy(pool_type):
    p = pool_type(bound=64, ceiling=CEILING)
    b = p.acquire(100)
    m = memoryview(b)
    assert len(m) == 100 and not m.readonly and m.format == "B"
    m[:5] = b"hello"
    assert bytes(memoryview(b)[:5]) == b"hello"
    m.release()
    p.retire(b)
    assert len(b) == 0 and b.capacity == 0  # empty after retire
    again = p.take(100)
    assert bytes(memoryview(again)[:5]) == b"hello"  # the same memory came back


def test_retire_refuses_a_buffer_with_views_alive(pool_type):
    p = pool_type(bound=64, ceiling=CEILING)
    b = p.acquire(64)
    m = memoryview(b)
    m2 = m[10:20]  # a slice keeps the export too
    with pytest.raises(BufferError):
        p.retire(b)
    m.release()
    with pytest.raises(BufferError):
        p.retire(b)
    m2.release()
    p.retire(b)
    assert p.retained == 1
    with memoryview(b) as empty:  # an empty buffer exports zero bytes
        assert len(empty) == 0


def resident_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_a_dropped_buffer_frees_its_memory(pool_type):
    """A thousand buffers of 1 MiB, each written and dropped without retire: were one kept, the
    process would hold a gigabyte more."""
    p = pool_type(bound=64, ceiling=CEILING)
    before = resident_bytes()
    for _ in range(1000):
        b = p.acquire(1 << 20)
        memoryview(b)[::4096] = b"x" * (len(b) // 4096)  # every page touched
        del b
    assert resident_bytes() - before < 400 << 20  # (AddressSanitizer quarantines 256 MiB)
    assert p.retained == 0


def test_threads_take_what_others_retire(pool_type):
    """One thread acquires and hands frames on, another retires them: they recycle."""
    p = pool_type(bound=256, ceiling=CEILING)
    frames = queue.Queue(maxsize=32)

    def producer():
        for i in range(2000):
            b = p.acquire(1024)
            memoryview(b)[0] = i % 256
            frames.put(b)
        frames.put(None)

    def consumer():
        while (b := frames.get()) is not None:
            p.retire(b)

    threads = [threading.Thread(target=producer), threading.Thread(target=consumer)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    s = p.stats()
    assert s.hits + s.misses == 2000 and s.misses <= 256 + 32


def test_bad_arguments_raise_clear_errors(pool_type):
    with pytest.raises(ValueError, match="bound"):
        pool_type(bound=-1)
    with pytest.raises(ValueError, match="ceiling"):
        pool_type(ceiling=-1)
    with pytest.raises(TypeError):
        pool_type(bound="8")
    p = pool_type(bound=8, ceiling=CEILING)
    with pytest.raises(ValueError, match="size"):
        p.take(-1)
    with pytest.raises(ValueError, match="size"):
        p.acquire(-1)
    with pytest.raises(TypeError):
        p.acquire(1.5)
    with pytest.raises(TypeError):
        p.retire(b"bytes")
    with pytest.raises(TypeError):
        p.retire(None)
    with pytest.raises(MemoryError):
        p.acquire(2**62)  # above the ceiling, fresh, and more than any machine has
    with pytest.raises(TypeError):
        sluice.Buffer()
    assert p.retained == 0


def test_objects_made_by_new_alone_refuse_every_call(pool_type):
    p = pool_type.__new__(pool_type)
    for call in (lambda: p.acquire(10), lambda: p.take(10), lambda: p.retained, lambda: p.stats(), lambda: p.trim()):
        with pytest.raises(TypeError, match="not initialised"):
            call()
    for cls in (sluice.Buffer, sluice.PoolStats):
        with pytest.raises(TypeError):
            cls()
        with pytest.raises(TypeError):
            cls.__new__(cls)


def test_sizes_by_index(pool_type):
    class Hundred:
        def __index__(self):
            return 100

    p = pool_type(bound=Hundred())
    assert len(p.acquire(Hundred())) == 100
