"""sluice.Gate from Python: the counter's semantics against MutexGate, waiting threads, permits,
signals, and bad arguments."""
import random
import signal
import threading
import time

import pytest

import sluice


def test_the_twins_answer_alike_call_for_call():
    rng = random.Random(7)
    for _ in range(200):
        cap = rng.randint(1, 6)
        a, b = sluice.Gate(cap), sluice.MutexGate(cap)
        for _ in range(60):
            op = rng.choice(["sub", "done", "try", "cap", "ok", "soft", "hard"])
            n = rng.randint(-3, 9)
            answers = []
            for g in (a, b):
                if op == "sub":
                    answers.append(g.note_submitted())
                elif op == "done":
                    answers.append(g.note_done())
                elif op == "try":
                    answers.append(g.try_admit())
                elif op == "cap":
                    answers.append(g.set_cap(n))
                else:
                    answers.append(g.adjust(op, n))
            assert answers[0] == answers[1]
            assert (a.in_flight, a.cap, a.has_capacity) == (b.in_flight, b.cap, b.has_capacity)


def test_counts_floor_and_caps(gate_type):
    g = gate_type(cap=2)
    g.note_done()
    assert g.in_flight == 0
    g.note_submitted(), g.note_submitted(), g.note_submitted()  # past the cap, never refused
    assert g.in_flight == 3 and g.has_capacity is False
    assert g.try_admit() is False
    g.note_done(), g.note_done()
    assert g.has_capacity is True and g.try_admit() is True and g.in_flight == 2


@pytest.mark.parametrize("asked, cap", [(0, 1), (-5, 1), (7, 7), (2**31 - 1, 2**31 - 1),
                                        (2**31, 2**31 - 1), (10**40, 2**31 - 1), (-(10**40), 1)])
def test_caps_are_clamped_whatever_the_int(gate_type, asked, cap):
    assert gate_type(cap=asked).cap == cap
    g = gate_type(cap=3)
    g.set_cap(asked)
    assert g.cap == cap
    assert sluice.GATE_LIMIT == 2**31 - 1


def test_adjust_moves_the_cap_by_one(gate_type):
    g = gate_type(cap=4)
    g.adjust("ok", 5)
    assert g.cap == 5
    g.adjust(sluice.Pressure.OK, 5)
    assert g.cap == 5
    g.adjust("soft", 5), g.adjust(sluice.Pressure.HARD, 5)
    assert g.cap == 3
    g.adjust("ok", 2)  # a cap above max_cap drops to it
    assert g.cap == 2
    for _ in range(5):
        g.adjust("hard", 8)
    assert g.cap == 1


def test_admit_with_room_and_with_a_timeout(gate_type):
    g = gate_type(cap=1)
    assert g.admit() is True and g.in_flight == 1
    start = time.monotonic()
    assert g.admit(timeout=0.05) is False
    assert time.monotonic() - start >= 0.05
    assert g.admit(timeout=0) is False
    assert g.in_flight == 1


def waiters(g, n):
    """n threads each waiting in g.admit(); answers the threads and a semaphore each releases
    once admitted."""
    admitted = threading.Semaphore(0)
    seen = []

    def wait():
        assert g.admit()
        seen.append(g.in_flight)
        admitted.release()

    threads = [threading.Thread(target=wait) for _ in range(n)]
    for t in threads:
        t.start()
    return threads, admitted, seen


def test_note_done_wakes_waiting_threads_one_by_one(gate_type):
    g = gate_type(cap=2)
    g.note_submitted(), g.note_submitted()
    threads, admitted, seen = waiters(g, 8)
    for _ in range(8):
        g.note_done()
        assert admitted.acquire(timeout=10), "a note_done woke no waiter"
        assert g.in_flight <= g.cap
    for t in threads:
        t.join()
    assert g.in_flight == 2 and max(seen) <= 2


def test_raising_the_cap_wakes_waiting_threads(gate_type):
    g = gate_type(cap=1)
    g.note_submitted()
    threads, admitted, _ = waiters(g, 5)
    g.set_cap(3)
    for _ in range(2):
        assert admitted.acquire(timeout=10)
    g.adjust("ok", 10)
    assert admitted.acquire(timeout=10)
    g.set_cap(6)
    for _ in range(2):
        assert admitted.acquire(timeout=10)
    for t in threads:
        t.join()
    assert g.in_flight == 6


def test_contention_nets_to_zero_and_never_passes_the_cap(gate_type):
    g = gate_type(cap=3)
    over = []

    def worker():
        for _ in range(2000):
            if g.try_admit():
                if g.in_flight > 3:
                    over.append(g.in_flight)
                g.note_done()
            with g.permit(timeout=5):
                if g.in_flight > 3:
                    over.append(g.in_flight)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert over == [] and g.in_flight == 0


def test_a_permit_holds_one_admission_for_its_block(gate_type):
    g = gate_type(cap=1)
    with g.permit():
        assert g.in_flight == 1
        with pytest.raises(TimeoutError):
            with g.permit(timeout=0.01):
                pass
        assert g.in_flight == 1
    assert g.in_flight == 0
    with pytest.raises(KeyError):
        with g.permit():
            raise KeyError("the block's error passes, and the admission goes back")
    assert g.in_flight == 0


class Interrupted(Exception):
    pass


def test_a_signal_reaches_a_thread_waiting_in_admit(gate_type):
    g = gate_type(cap=1)
    g.note_submitted()

    def handler(signum, frame):
        raise Interrupted

    old = signal.signal(signal.SIGUSR1, handler)
    main = threading.main_thread().ident
    sender = threading.Timer(0.05, signal.pthread_kill, (main, signal.SIGUSR1))
    try:
        start = time.monotonic()
        sender.start()
        with pytest.raises(Interrupted):
            g.admit()  # for ever, but for the signal
        assert time.monotonic() - start < 2
    finally:
        sender.join()
        signal.signal(signal.SIGUSR1, old)
    assert g.in_flight == 1  # the interrupted wait counted nothing
    s = g.stats()
    assert (s.cancelled, s.waiting, s.admitted) == (1, 0, 0)  # counted as a wait cancelled


def test_bad_arguments_raise_clear_errors(gate_type):
    g = gate_type(cap=2)
    with pytest.raises(TypeError):
        gate_type(cap="4")
    with pytest.raises(TypeError):
        g.set_cap(2.5)
    with pytest.raises(ValueError, match="pressure"):
        g.adjust("medium", 4)
    with pytest.raises(TypeError):
        g.adjust(3, 4)
    with pytest.raises(TypeError):
        g.adjust("ok", "4")
    for bad in (-1, float("nan")):
        with pytest.raises(ValueError, match="timeout"):
            g.admit(timeout=bad)
        with pytest.raises(ValueError, match="timeout"):
            g.permit(timeout=bad)
    with pytest.raises(TypeError):
        g.admit(timeout="1")
    with pytest.raises(AttributeError):
        g.cap = 3
    assert g.in_flight == 0 and g.cap == 2


def test_it_reads_well_in_help():
    assert "cap" in sluice.Gate.__doc__
    assert "GIL" in sluice.Gate.admit.__doc__
    assert "Gate" in repr(sluice.Gate(3))


def test_integers_by_index_and_timeouts_read_alike(gate_type):
    class Three:
        def __index__(self):
            return 3

    g = gate_type(cap=Three())
    assert g.cap == 3
    g.set_cap(Three())
    g.adjust("ok", Three())
    assert g.cap == 3
    for bad in (True, "1", b"1", [1]):
        with pytest.raises(TypeError, match="timeout"):
            g.admit(timeout=bad)
    assert g.admit(timeout=2**1100) is True  # beyond a float: for ever, and there is room
    with pytest.raises(ValueError):
        g.admit(timeout=-(2**1100))


def test_objects_made_by_new_alone_refuse_every_call(gate_type):
    g = gate_type.__new__(gate_type)
    for call in (lambda: g.try_admit(), lambda: g.cap, lambda: g.admit(0), lambda: g.permit(), lambda: repr(g)):
        with pytest.raises(TypeError, match="not initialised"):
            call()
    with pytest.raises(TypeError):
        type(gate_type(1).permit())()


def test_one_permit_serves_one_with_block_at_a_time(gate_type):
    g = gate_type(cap=1)
    g.note_submitted()
    p = g.permit()
    entered = threading.Event()
    errors = []

    def enter():
        entered.set()
        with p:
            pass

    t = threading.Thread(target=enter)
    t.start()
    entered.wait()
    while True:  # until the thread is inside __enter__, waiting for room
        try:
            with p:
                pass
        except ValueError as e:
            errors.append(e)
            break
    g.note_done()  # room: the thread's block runs and gives it back
    t.join()
    assert errors and g.in_flight == 0


def test_no_object_changes_class_and_no_class_mixes_a_buffer_in(gate_type):
    from sluice import _sluice

    g = gate_type(3)
    for other in (_sluice.Pool, _sluice.Buffer, _sluice.Gate, _sluice.MutexGate):
        with pytest.raises(TypeError, match="cannot be changed"):
            g.__class__ = other
    assert type(g) is gate_type and g.__class__ is gate_type
    for base in (_sluice.Buffer, _sluice.Pool, _sluice.PoolStats):
        with pytest.raises(TypeError):
            type("Mixed", (_sluice.Gate, base), {})


def test_weights_admit_all_or_nothing_and_count_back(gate_type):
    g = gate_type(10)
    assert g.try_admit(7) is True and g.in_flight == 7
    assert g.try_admit(4) is False and g.in_flight == 7  # 11 > 10: nothing counted
    assert g.try_admit(n=3) is True and g.in_flight == 10
    g.note_done(6)
    assert g.in_flight == 4
    g.note_submitted(20)  # past the cap: never refuses
    assert g.in_flight == 24
    g.note_done(100)  # the floor
    assert g.in_flight == 0
    assert g.try_admit(0) is True and g.in_flight == 0  # zero: at once, nothing counted
    assert g.try_admit(11) is False  # above the cap: refused at once
    assert g.try_admit(sluice.GATE_LIMIT + 1) is False and g.try_admit(2**80) is False
    g.note_submitted(2**80)  # saturates
    assert g.in_flight == sluice.GATE_LIMIT
    g.note_done(2**80)
    assert g.in_flight == 0


def test_weighted_waits_permits_and_their_bad_arguments(gate_type):
    g = gate_type(4)
    assert g.admit(timeout=1, n=3) is True
    assert g.admit(0.01, n=2) is False and g.in_flight == 3  # 5 > 4: gave up, nothing counted
    with pytest.raises(TimeoutError):
        with g.permit(0.01, n=2):
            pass
    g.note_done(3)
    with g.permit(n=4) as p:
        assert p is not None and g.in_flight == 4
    assert g.in_flight == 0
    for bad in (-1, -(2**80)):
        with pytest.raises(ValueError):
            g.try_admit(bad)
        with pytest.raises(ValueError):
            g.note_done(bad)
    for bad in (1.5, "2", True, None):
        with pytest.raises(TypeError):
            g.try_admit(bad)
    for call in (lambda: g.admit(n=sluice.GATE_LIMIT + 1), lambda: g.permit(n=2**80)):
        with pytest.raises(ValueError):
            call()
    assert g.in_flight == 0


def test_a_thread_waiting_for_more_than_the_cap_is_admitted_when_it_grows(gate_type):
    g = gate_type(2)
    result = []
    t = threading.Thread(target=lambda: result.append(g.admit(timeout=30, n=5)))
    t.start()
    g.try_admit(2)  # a smaller request that fits goes ahead of the waiting one
    g.note_done(2)
    g.set_cap(5)
    t.join(30)
    assert result == [True] and g.in_flight == 5


def test_the_twins_answer_alike_with_weights():
    rng = random.Random(11)
    for _ in range(200):
        cap = rng.randint(1, 8)
        a, b = sluice.Gate(cap), sluice.MutexGate(cap)
        for _ in range(60):
            op = rng.choice(["sub", "done", "try", "cap"])
            n = rng.choice([0, 1, 2, 3, 5, 9, sluice.GATE_LIMIT, sluice.GATE_LIMIT + 1])
            answers = []
            for g in (a, b):
                if op == "sub":
                    answers.append(g.note_submitted(n))
                elif op == "done":
                    answers.append(g.note_done(n))
                elif op == "try":
                    answers.append(g.try_admit(n))
                else:
                    answers.append(g.set_cap(rng.randint(1, 8)) if g is a else None)
                    if g is a:
                        b.set_cap(a.cap)
            assert answers[0] == answers[1]
            assert (a.in_flight, a.cap, a.has_capacity) == (b.in_flight, b.cap, b.has_capacity)


def test_close_refuses_for_good_and_wakes_waiting_threads_with_gate_closed(gate_type):
    g = gate_type(2)
    assert g.try_admit(2)
    outcomes = []

    def wait():
        try:
            outcomes.append(g.admit(timeout=60))
        except sluice.GateClosed:
            outcomes.append("closed")

    threads = [threading.Thread(target=wait) for _ in range(3)]
    for t in threads:
        t.start()
    start = time.monotonic()
    g.close()
    for t in threads:
        t.join(30)
    assert outcomes == ["closed"] * 3 and time.monotonic() - start < 30  # not a timeout
    assert g.closed and g.cap == 0 and "closed" in repr(g)
    assert g.try_admit() is False and g.try_admit(0) is False
    with pytest.raises(sluice.GateClosed):
        g.admit(timeout=0)
    with pytest.raises(sluice.GateClosed):
        with g.permit(n=1):
            pass
    assert issubclass(sluice.GateClosed, RuntimeError)
    g.set_cap(10)
    g.adjust("ok", max_cap=10)
    assert g.closed and g.cap == 0  # never reopened
    g.note_done(2)  # the drain counts down
    assert g.in_flight == 0


def test_stats_count_tries_waits_and_the_peak(gate_type):
    g = gate_type(2)
    s = g.stats()
    assert (s.admitted, s.refused, s.closed, s.waiting, s.in_flight, s.peak_in_flight) == (0, 0, 0, 0, 0, 0)
    assert g.try_admit(2) and not g.try_admit() and g.try_admit(0)
    assert g.admit(timeout=0) is False  # a wait that timed out, not a refusal
    with pytest.raises(TimeoutError):
        with g.permit(timeout=0.001):
            pass
    g.note_submitted(3)
    g.note_done(5)
    with g.permit(timeout=1, n=2):
        pass
    g.close()
    assert not g.try_admit()
    with pytest.raises(sluice.GateClosed):
        g.admit()
    s = g.stats()
    assert (s.admitted, s.admitted_after_wait, s.refused, s.timed_out, s.cancelled, s.closed) == (3, 0, 1, 2, 0, 2)
    assert (s.waiting, s.in_flight, s.peak_in_flight) == (0, 0, 5)
    assert isinstance(s, sluice.GateStats) and "admitted=3" in repr(s)


def test_stats_count_a_waiting_thread(gate_type):
    g = gate_type(1)
    assert g.try_admit()
    results = []
    waiter = threading.Thread(target=lambda: results.append(g.admit(timeout=30)))
    waiter.start()
    while g.stats().waiting != 1:  # a condition: the thread waits
        time.sleep(0.001)
    g.note_done()
    waiter.join()
    assert results == [True]
    s = g.stats()
    assert (s.admitted, s.admitted_after_wait, s.waiting) == (2, 1, 0)
