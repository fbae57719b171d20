"""sluice: a lock-free admission gate, its latency limiter, a bounded buffer pool and a memory-pressure
monitor, from Python.

    g = sluice.Gate(cap=4)                 # sluice.MutexGate alike
    g.note_submitted(); g.note_done()      # never block; done never goes below zero
    g.try_admit()                          # -> bool
    g.admit(timeout=None)                  # -> bool; waits with the GIL released
    with g.permit(timeout=None): ...       # one admission for the block
    await g.admit_async(timeout=None)      # asyncio: waits without blocking the loop
    g.try_admit(n); g.admit(timeout, n=n); g.permit(timeout, n=n); g.admit_async(timeout, n=n)
    g.note_submitted(n); g.note_done(n)    # each call with a weight n (default 1)
    g.close()                              # for good: waits raise sluice.GateClosed

    lim = sluice.Limiter(g, sluice.Vegas(), min=1, max=64)   # owns g's cap (sluice.AIMD, sluice.Gradient2)
    with lim.admit(timeout=None) as p: ...   # a TimedPermit; its release samples the latency:
                                           # Outcome.DONE, DROPPED if the block raised an Exception
    p = lim.try_admit(n)                   # -> TimedPermit or None; p.release(sluice.Outcome.DROPPED)
    lim.adjust("soft"); lim.limit, lim.pressure_cap, lim.cap, lim.stats()

    p = sluice.Pool(bound=1024, ceiling=4 << 20)   # sluice.MutexPool alike
    b = p.acquire(n); memoryview(b)[:] = ...; p.retire(b)
    p = sluice.Pool(decay=2.0); p.decay()  # a timer's step frees what sat unused about that long
    sluice.set_decay_signal(signal.SIGRTMIN)  # steps reach sleeping threads' caches too (Linux)

    m = sluice.PressureMonitor("/proc/pressure/memory", cgroup=None)   # Linux's PSI, a cgroup's usage
    level = m.poll()                       # -> sluice.Pressure.OK, SOFT or HARD; m.level, m.reading
    g.adjust(level, 64)                    # a gate follows it (or lim.adjust(level): a limiter)

The gates, the limiter, the pools and the monitor are sluice's C++ ones (sluice._sluice); admit_async is written
here, on the gates' own async waiters: no thread is started (the module's thread count is zero).
"""

import asyncio
import itertools
import os
import weakref

from sluice import _sluice
from sluice._sluice import (AIMD, GATE_LIMIT, Buffer, GateClosed, GatePermit, GateStats, Gradient2, Limiter,
                            LimiterStats, MutexGatePermit, MutexPool, Outcome, Pool, PoolClassStats, PoolStats,
                            Pressure, PressureMonitor, PressureReading, TimedPermit, Vegas, parse_psi,
                            set_decay_signal)

__all__ = ["AIMD", "GATE_LIMIT", "Buffer", "Gate", "GateClosed", "GatePermit", "GateStats", "Gradient2", "Limiter",
           "LimiterStats", "MutexGate", "MutexGatePermit", "MutexPool", "Outcome", "Pool", "PoolClassStats",
           "PoolStats", "Pressure", "PressureMonitor", "PressureReading", "TimedPermit", "Vegas", "parse_psi",
           "set_decay_signal"]

# admit_async waits on the gate's own queue of async waiters, as <sluice/asio.hpp> does, with an
# event loop where Asio has an executor; it starts no thread. Each event loop that waits gets a
# channel (_sluice._Channel: an eventfd and the outcomes on their way, python/module.cpp), which
# the loop watches with add_reader. The grant that admits a wait (inside the note_done, set_cap
# or adjust that made room, on whatever thread) queues its outcome on the channel and writes the
# eventfd; the loop then drains the channel and resolves the waits' futures. A channel lives as
# long as its loop's reader: the loop's close() drops the reader, whose finalizer closes the
# channel (the waits still queued are withdrawn, the admissions not yet delivered go back).


class _LoopChannel:
    """One event loop's channel: the C++ side, and the futures of its waits by id."""

    __slots__ = ("native", "futures", "ids", "loop", "closed", "settled", "__weakref__")

    def __init__(self, native, loop):
        self.native = native  # _sluice._Channel
        self.futures = {}  # id -> future, for each wait still waiting
        self.ids = itertools.count()
        self.loop = weakref.ref(loop)
        self.closed = False
        self.settled = []  # futures of _settled() callers

    def drain(self):
        try:
            self.native.drain(self.futures)
        finally:
            self.wake_settled()

    def stop(self, wait_id, timed_out):
        """The wait stopped waiting (timed_out: its timeout passed): its admission, if one came or
        is on its way, goes back."""
        self.futures.pop(wait_id, None)
        self.native.cancel(wait_id, timed_out)
        self.wake_settled()

    def close(self):
        self.closed = True
        self.native.close()
        self.futures.clear()
        self.wake_settled()

    def on_its_way(self):
        """Waits that stopped waiting while their admission was being handed over on another
        thread: the drain gives it back when it arrives."""
        return len(self.native) - len(self.futures)

    def wake_settled(self):
        if self.settled and (self.closed or self.on_its_way() <= 0):
            settled, self.settled = self.settled, []
            for f in settled:
                if not f.done():
                    try:
                        f.set_result(None)
                    except RuntimeError:  # its loop is closed
                        pass


class _Reader:
    """The callback the loop runs when the channel's eventfd is readable. The loop holds the only
    reference to it: when the loop closes (its selector drops its readers) or is collected, the
    finalizer closes the channel."""

    __slots__ = ("channel",)

    def __init__(self, channel):
        self.channel = channel

    def __call__(self):
        self.channel.drain()

    def __del__(self):
        self.channel.close()


# id(loop) -> weakref to its _LoopChannel (held by the loop's reader alone), checked against the
# loop itself: an id may come back for a new loop once the old one is gone.
_channels = {}
_all_channels = weakref.WeakSet()


def _find_channel(loop):
    ref = _channels.get(id(loop))
    channel = ref() if ref is not None else None
    if channel is not None and channel.loop() is loop and not channel.closed:
        return channel
    return None


def _channel_for(loop):
    """The running loop's channel, made on its first wait: OSError when its eventfd cannot be
    made or the loop cannot watch it (then nothing is left behind)."""
    channel = _find_channel(loop)
    if channel is not None:
        return channel
    for other in list(_all_channels):  # loops closed or gone, whose reader's finalizer has not run
        other_loop = other.loop()
        if other_loop is None or other_loop.is_closed():
            other.close()
    for key, ref in list(_channels.items()):
        if ref() is None or ref().closed:
            del _channels[key]
    native = _sluice._Channel()
    channel = _LoopChannel(native, loop)
    try:
        loop.add_reader(native.fileno(), _Reader(channel))
        try:
            _channels[id(loop)] = weakref.ref(channel)
            _all_channels.add(channel)
        except BaseException:
            loop.remove_reader(native.fileno())
            raise
    except BaseException:
        channel.close()
        raise
    return channel


def _after_fork_in_child():
    """The child runs none of the parent's loops (asyncio forgets the running loop in a child):
    each inherited channel is closed: its queued waits are withdrawn (nothing counted) and the
    admissions delivered to it go back, without a write to the eventfd, which the parent shares.
    A loop of the child's own makes its own channel."""
    for channel in list(_all_channels):
        channel.close()


os.register_at_fork(after_in_child=_after_fork_in_child)


async def _settled():
    """For tests: returns once no admission is on its way to a wait of the running loop that
    stopped waiting (each has gone back to its gate). A condition, not a delay: the drain that
    gives the last one back wakes it."""
    loop = asyncio.get_running_loop()
    channel = _find_channel(loop)
    while channel is not None and not channel.closed and channel.on_its_way() > 0:
        done = loop.create_future()
        channel.settled.append(done)
        await done


class _AsyncMixin:
    __slots__ = ()

    async def admit_async(self, timeout=None, *, n=1):
        """Waits for an admission of n without blocking the event loop: True, or False when timeout
        (seconds) passed first, with nothing counted. A queued wait for n holds back the smaller
        waits queued after it (first come, first served); n = 0 is admitted at once, n above
        GATE_LIMIT raises ValueError. The gate's async waiters are served first
        come, first served (a newcomer waits behind them; try_admit and admit() refuse while one
        is queued), by the gate's own queue: the note_done (set_cap, adjust) that makes room
        hands the admission to the loop, through a channel (an eventfd) per loop. No thread is
        started: the module's thread count is zero, however many gates and waits. A waiter
        cancelled (or timed out) keeps nothing: an admission that reached it goes back before
        the task resumes, and one still being handed over on another thread goes back when it
        arrives. When the loop closes, the waits still queued are withdrawn. OSError when the
        loop's channel cannot be made (no file descriptor left), MemoryError when the wait
        cannot be: nothing is queued then."""
        timeout = _sluice._seconds(timeout)  # None: for ever
        # _admit_first checks n (TypeError; ValueError below zero or above GATE_LIMIT, before
        # GateClosed), refuses while a waiter of the gate is queued (none is overtaken), and counts
        # no refusal in the gate's statistics: this call waits instead
        if self._admit_first(n):
            return True
        loop = asyncio.get_running_loop()
        channel = _channel_for(loop)
        future = loop.create_future()
        expired = False
        timer = None
        wait_id = next(channel.ids)
        try:
            if timeout is not None:
                def expire():
                    nonlocal expired
                    expired = True
                    future.cancel()

                timer = loop.call_later(timeout, expire)
            channel.futures[wait_id] = future
            self._wait_async(channel.native, wait_id, n)  # may be admitted at once: the drain resolves it
        except BaseException:  # nothing queued
            channel.futures.pop(wait_id, None)
            if timer is not None:
                timer.cancel()
            raise
        try:
            await future
            return True
        except BaseException as e:
            if future.done() and not future.cancelled() and future.exception() is None:
                self.note_done(n)  # admitted, but the task was cancelled (or closed) on its way back
                raise
            if expired and isinstance(e, asyncio.CancelledError):
                task = asyncio.current_task()
                if not (task is not None and task.cancelling()):
                    return False
            raise
        finally:
            if timer is not None:
                timer.cancel()
            if not future.done() or future.cancelled():
                channel.stop(wait_id, expired)  # before the task goes on: the count is exact then


class Gate(_AsyncMixin, _sluice.Gate):
    __doc__ = _sluice.Gate.__doc__


class MutexGate(_AsyncMixin, _sluice.MutexGate):
    __doc__ = _sluice.MutexGate.__doc__
