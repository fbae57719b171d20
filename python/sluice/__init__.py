"""sluice: a lock-free admission gate and a bounded buffer pool, from Python.

    g = sluice.Gate(cap=4)                 # sluice.MutexGate alike
    g.note_submitted(); g.note_done()      # never block; done never goes below zero
    g.try_admit()                          # -> bool
    g.admit(timeout=None)                  # -> bool; waits with the GIL released
    with g.permit(timeout=None): ...       # one admission for the block
    await g.admit_async(timeout=None)      # asyncio: waits without blocking the loop

    p = sluice.Pool(bound=1024, ceiling=4 << 20)   # sluice.MutexPool alike
    b = p.acquire(n); memoryview(b)[:] = ...; p.retire(b)

The gates and pools are sluice's C++ ones (sluice._sluice); admit_async is written here.
"""

import asyncio
import collections
import os
import threading
import weakref

from sluice import _sluice
from sluice._sluice import GATE_LIMIT, Buffer, GatePermit, MutexGatePermit, MutexPool, Pool, PoolStats, Pressure

__all__ = ["GATE_LIMIT", "Buffer", "Gate", "GatePermit", "MutexGate", "MutexGatePermit", "MutexPool", "Pool",
           "PoolStats", "Pressure"]


class _Handoff:
    """One admission on its way to an asyncio future, delivered on the future's loop.

    The serving thread admitted it; it reaches the future unless the future is done (cancelled or
    timed out) by then, or the loop never runs the callback (closed): then it goes back to the
    gate, so that no admission is ever lost.
    """

    __slots__ = ("gate", "future", "delivered")

    def __init__(self, gate, future):
        self.gate = gate
        self.future = future
        self.delivered = False

    def __call__(self):  # on the future's loop
        self.delivered = True
        if self.future.done():
            self.gate.note_done()
        else:
            self.future.set_result(True)

    def __del__(self):
        if not self.delivered:
            self.gate.note_done()


_exiting = False  # the main thread has ended: waiters whose loop no longer runs are let go
_all_waiters = weakref.WeakSet()


def _exit():
    global _exiting
    _exiting = True


def _after_fork_in_child():
    """The child has none of the parent's threads, and no loop of the parent's runs there (asyncio
    forgets the running loop in a child): each gate's waiters start afresh, with a lock of their
    own and none waiting."""
    for waiters in list(_all_waiters):
        waiters._lock = threading.Lock()
        waiters._serving = False
        waiters._queue = collections.deque()


# Serving threads are not daemons, so that none is inside Python when the interpreter finalizes.
# threading runs this hook when the main thread ends, before it joins the others; a serving
# thread then lets go of the waiters whose thread has ended or is a daemon (which the interpreter
# does not wait for), and goes on serving those of the threads it waits for.
threading._register_atexit(_exit)
os.register_at_fork(after_in_child=_after_fork_in_child)


class _AsyncWaiters:
    """A gate's asyncio waiters, first come first served, by one thread while any wait.

    The thread waits on the gate as a thread does (admit, GIL released), hands each admission to
    the oldest waiter still waiting, and ends when none is left. Its wait is cut into slices only
    to notice waiters that went (cancelled, their loop closed); room wakes it at once.
    """

    def __init__(self, gate):
        self._gate = gate
        self._lock = threading.Lock()
        self._queue = collections.deque()  # (loop, future, the thread that waits), oldest first
        self._serving = False
        _all_waiters.add(self)

    def __bool__(self):
        return bool(self._queue)

    def wait(self, loop):
        future = loop.create_future()
        with self._lock:
            self._queue.append((loop, future, threading.current_thread()))
            if not self._serving:
                self._start()
        return future

    def _start(self):  # under _lock
        self._serving = True
        threading.Thread(target=self._serve, name="sluice-admit-async", daemon=False).start()

    def _drop_gone(self):
        """Drops the oldest waiters that no admission can reach any more (under _lock)."""
        while self._queue:
            loop, future, thread = self._queue[0]
            if not (future.done() or loop.is_closed() or (_exiting and (thread.daemon or not thread.is_alive()))):
                return
            self._queue.popleft()

    def _next(self):
        """The oldest waiter still waiting, or None (and the thread stops serving)."""
        with self._lock:
            self._drop_gone()
            if not self._queue:
                self._serving = False
                return None
            return self._queue.popleft()

    def _serve(self):
        gate = self._gate
        while True:
            with self._lock:
                self._drop_gone()
                if not self._queue:
                    self._serving = False
                    return
            if not gate.admit(0.1):
                continue
            waiter = self._next()
            if waiter is None:
                gate.note_done()
                return
            loop, future, _ = waiter
            handoff = _Handoff(gate, future)
            try:
                loop.call_soon_threadsafe(handoff)
            except RuntimeError:  # the loop is closed: handoff gives the admission back
                pass
            del handoff


async def _admit_async(gate, waiters, timeout):
    timeout = _sluice._seconds(timeout)  # None: for ever
    if not waiters and gate.try_admit():  # no jumping ahead of the gate's async waiters
        return True
    loop = asyncio.get_running_loop()
    future = waiters.wait(loop)
    expired = False

    def expire():
        nonlocal expired
        expired = True
        future.cancel()

    timer = None
    if timeout is not None:
        timer = loop.call_later(timeout, expire)
    try:
        await future
        return True
    except asyncio.CancelledError:
        if future.done() and not future.cancelled():
            gate.note_done()  # admitted, but the task was cancelled on its way back: give it back
            raise
        task = asyncio.current_task()
        if expired and not (task is not None and task.cancelling()):
            return False
        raise
    finally:
        if timer is not None:
            timer.cancel()


class _AsyncMixin:
    __slots__ = ()

    async def admit_async(self, timeout=None):
        """Waits for an admission without blocking the event loop: True, or False when timeout
        (seconds) passed first, with nothing counted. The gate's async waiters are served first
        come, first served (a newcomer waits behind them), by a thread that waits on the gate
        for them, as threads in admit() do. A waiter cancelled (or timed out)
        keeps nothing: an admission already on its way to it goes back to the gate at once, so
        that in_flight may count it for that moment."""
        waiters = self.__dict__.get("_waiters")
        if waiters is None:
            waiters = self.__dict__.setdefault("_waiters", _AsyncWaiters(self))
        return await _admit_async(self, waiters, timeout)


class Gate(_AsyncMixin, _sluice.Gate):
    __doc__ = _sluice.Gate.__doc__


class MutexGate(_AsyncMixin, _sluice.MutexGate):
    __doc__ = _sluice.MutexGate.__doc__
