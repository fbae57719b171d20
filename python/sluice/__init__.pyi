"""Type stubs of sluice: a lock-free admission gate, its latency limiter, a bounded buffer pool and a
memory-pressure monitor."""

import os
from types import TracebackType
from typing import ClassVar, Literal, Optional, Protocol, Self, SupportsFloat, SupportsIndex, Type, Union

GATE_LIMIT: int  # 2**31 - 1: the largest cap and count

class GateClosed(RuntimeError):
    """Raised by a closed gate's waits (admit, permit, admit_async); nothing counted."""

class Pressure:
    """What Gate.adjust is told of memory (a pybind11 enum: not iterable, not made from a str)."""

    OK: ClassVar["Pressure"]
    SOFT: ClassVar["Pressure"]
    HARD: ClassVar["Pressure"]
    @property
    def name(self) -> str: ...
    @property
    def value(self) -> int: ...
    def __int__(self) -> int: ...

_Level = Union[Pressure, Literal["ok", "soft", "hard"]]
_Timeout = Optional[SupportsFloat]  # seconds; None or inf: for ever

class _PermitCalls:  # what GatePermit and MutexGatePermit both have (not a class at run time)
    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> bool: ...

class GatePermit(_PermitCalls):
    """An admission of n of a Gate, held for a with block (Gate.permit); one block at a time."""

class MutexGatePermit(_PermitCalls):
    """An admission of n of a MutexGate, held for a with block (MutexGate.permit); one block at a time."""

class _GateCalls:  # what Gate and MutexGate both have (not a class at run time)
    def __init__(self, cap: SupportsIndex) -> None: ...
    @property
    def cap(self) -> int: ...
    @property
    def in_flight(self) -> int: ...
    @property
    def has_capacity(self) -> bool: ...
    def note_submitted(self, n: SupportsIndex = 1) -> None: ...
    def note_done(self, n: SupportsIndex = 1) -> None: ...
    def try_admit(self, n: SupportsIndex = 1) -> bool: ...
    def admit(self, timeout: _Timeout = None, *, n: SupportsIndex = 1) -> bool: ...
    def set_cap(self, cap: SupportsIndex) -> None: ...
    def adjust(self, pressure: _Level, max_cap: SupportsIndex) -> None: ...
    def permit(self, timeout: _Timeout = None, *, n: SupportsIndex = 1) -> Union[GatePermit, MutexGatePermit]: ...
    async def admit_async(self, timeout: _Timeout = None, *, n: SupportsIndex = 1) -> bool: ...
    def close(self) -> None: ...
    @property
    def closed(self) -> bool: ...
    def stats(self) -> GateStats: ...

class GateStats:
    """What a gate has done (Gate.stats()): counts of calls, not of units; waiting and in_flight now."""

    @property
    def admitted(self) -> int: ...
    @property
    def admitted_after_wait(self) -> int: ...
    @property
    def refused(self) -> int: ...
    @property
    def timed_out(self) -> int: ...
    @property
    def cancelled(self) -> int: ...
    @property
    def closed(self) -> int: ...
    @property
    def waiting(self) -> int: ...
    @property
    def in_flight(self) -> int: ...
    @property
    def peak_in_flight(self) -> int: ...

class Gate(_GateCalls):
    """A non-blocking admission counter whose cap moves under memory pressure."""

class MutexGate(_GateCalls):
    """Gate's twin over a mutex: the same calls and answers."""

class Outcome:
    """How an admitted piece of work ended (TimedPermit.release, Limiter.sample); a pybind11 enum."""

    DONE: ClassVar["Outcome"]
    DROPPED: ClassVar["Outcome"]
    IGNORED: ClassVar["Outcome"]
    @property
    def name(self) -> str: ...
    @property
    def value(self) -> int: ...
    def __int__(self) -> int: ...

_Ending = Union[Outcome, Literal["done", "dropped", "ignored"]]

class _AlgorithmCalls:  # what AIMD, Vegas and Gradient2 have (not a class at run time)
    @property
    def limit(self) -> int: ...
    def update(self, rtt: SupportsFloat, in_flight: SupportsIndex, dropped: bool = False) -> int: ...

class AIMD(_AlgorithmCalls):
    """Additive increase, multiplicative decrease on a drop or an RTT past timeout."""

    def __init__(
        self,
        *,
        initial_limit: SupportsIndex = 10,
        backoff_ratio: SupportsFloat = 0.9,
        timeout: SupportsFloat = 5.0,
        min_limit: SupportsIndex = 1,
        max_limit: SupportsIndex = 200,
    ) -> None: ...

class Vegas(_AlgorithmCalls):
    """TCP Vegas' queue estimate from the lowest RTT seen, against log10 thresholds."""

    def __init__(
        self,
        *,
        initial_limit: SupportsIndex = 20,
        max_limit: SupportsIndex = 1000,
        smoothing: SupportsFloat = 1.0,
        probe_multiplier: SupportsFloat = 30.0,
        seed: SupportsIndex = 0,
        alpha: SupportsIndex = 3,
        beta: SupportsIndex = 6,
        threshold: SupportsIndex = 1,
    ) -> None: ...
    @property
    def rtt_noload(self) -> float: ...

class Gradient2(_AlgorithmCalls):
    """A long average RTT against the sample's; drops are not read."""

    def __init__(
        self,
        *,
        initial_limit: SupportsIndex = 20,
        min_limit: SupportsIndex = 20,
        max_limit: SupportsIndex = 200,
        smoothing: SupportsFloat = 0.2,
        queue_size: SupportsFloat = 4.0,
        long_window: SupportsIndex = 600,
        rtt_tolerance: SupportsFloat = 1.5,
    ) -> None: ...
    @property
    def long_rtt(self) -> float: ...

class LimiterStats:
    """A limiter's counts of samples (Limiter.stats())."""

    @property
    def applied(self) -> int: ...
    @property
    def skipped(self) -> int: ...
    @property
    def ignored(self) -> int: ...

class TimedPermit:
    """An admission through a Limiter; release(outcome) gives its units back and samples its latency.
    As a context manager: DONE, DROPPED when the block raised an Exception, IGNORED for another
    BaseException."""

    def release(self, outcome: _Ending = ...) -> None: ...
    @property
    def units(self) -> int: ...
    @property
    def held(self) -> bool: ...
    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> bool: ...

class Limiter:
    """Owns a Gate's cap: min(latency limit, pressure cap) within [min, max]."""

    def __init__(
        self,
        gate: Gate,
        algorithm: Union[AIMD, Vegas, Gradient2],
        *,
        min: SupportsIndex = 1,
        max: SupportsIndex = ...,  # GATE_LIMIT
        window: SupportsIndex = 1,
        unit: SupportsIndex = 1,
        sample_every: SupportsIndex = 1,
    ) -> None: ...
    def try_admit(self, n: SupportsIndex = 1) -> Optional[TimedPermit]: ...
    def admit(self, timeout: _Timeout = None, *, n: SupportsIndex = 1) -> Optional[TimedPermit]: ...
    def sample(self, rtt: SupportsFloat, in_flight: SupportsIndex, outcome: _Ending = ...) -> None: ...
    def adjust(self, pressure: _Level) -> None: ...
    def refresh(self) -> None: ...
    @property
    def limit(self) -> int: ...
    @property
    def pressure_cap(self) -> int: ...
    @property
    def cap(self) -> int: ...
    @property
    def gate(self) -> Gate: ...
    def stats(self) -> LimiterStats: ...

class PoolStats:
    @property
    def hits(self) -> int: ...
    @property
    def misses(self) -> int: ...
    @property
    def retired(self) -> int: ...
    @property
    def dropped(self) -> int: ...
    @property
    def retained(self) -> int: ...
    @property
    def retained_bytes(self) -> int: ...

class PoolClassStats:
    """One size class's statistics (Pool.class_stats()): a row per class, smallest first, then one
    for requests and retires above the ceiling, whose capacity is None."""

    @property
    def capacity(self) -> Optional[int]: ...
    @property
    def retained(self) -> int: ...
    @property
    def hits(self) -> int: ...
    @property
    def misses(self) -> int: ...
    @property
    def fresh(self) -> int: ...
    @property
    def retired(self) -> int: ...
    @property
    def dropped_at_bound(self) -> int: ...
    @property
    def dropped_over_ceiling(self) -> int: ...
    @property
    def dropped_off(self) -> int: ...
    @property
    def trimmed(self) -> int: ...
    @property
    def decayed(self) -> int: ...

class Buffer:
    """Bytes from a pool, through the buffer protocol: memoryview(b) is writable and copies
    nothing. Made by Pool.take and Pool.acquire only."""

    def __len__(self) -> int: ...
    @property
    def capacity(self) -> int: ...

class _PoolCalls:  # what Pool and MutexPool both have (not a class at run time)
    def __init__(
        self,
        bound: SupportsIndex = 1024,
        ceiling: SupportsIndex = 4 << 20,
        enabled: bool = True,
        thread_cache: bool = True,
        *,
        decay: Optional[SupportsFloat] = None,  # seconds; None, 0 or less: off
    ) -> None: ...
    def take(self, size: SupportsIndex) -> Optional[Buffer]: ...
    def acquire(self, size: SupportsIndex) -> Buffer: ...
    def retire(self, buffer: Buffer) -> None: ...
    def trim(self, share: Optional[SupportsFloat] = None) -> None: ...
    def decay(self, now: Optional[SupportsFloat] = None) -> bool: ...  # now: seconds, time.monotonic()'s clock
    def stats(self) -> PoolStats: ...
    def class_stats(self) -> list[PoolClassStats]: ...
    @property
    def retained(self) -> int: ...
    @property
    def enabled(self) -> bool: ...
    @enabled.setter
    def enabled(self, on: bool) -> None: ...

class Pool(_PoolCalls):
    """A bounded pool of byte buffers: lock-free, with per-thread caches."""

    @property
    def released_idle_bytes(self) -> int: ...  # pages sleeping threads gave back (set_decay_signal)

class _SetDecaySignal(Protocol):  # set_decay_signal's signature (a function: named below as test_stubs reads names)
    def __call__(self, signo: SupportsIndex) -> None: ...

set_decay_signal: _SetDecaySignal  # a real-time signal that lets decay reach sleeping threads' caches; 0: off

class MutexPool(_PoolCalls):
    """Pool's twin over one mutex: the same calls and answers."""

class PressureReading:
    """What one poll read (PressureMonitor.reading, parse_psi): a read-only snapshot. Averages in
    percent, totals in microseconds stalled since boot; usage memory.current / memory.max or None."""

    def __init__(
        self,
        *,
        some_avg10: SupportsFloat = 0.0,
        some_avg60: SupportsFloat = 0.0,
        some_avg300: SupportsFloat = 0.0,
        some_total: SupportsIndex = 0,
        full_avg10: SupportsFloat = 0.0,
        full_avg60: SupportsFloat = 0.0,
        full_avg300: SupportsFloat = 0.0,
        full_total: SupportsIndex = 0,
        usage: Optional[SupportsFloat] = None,
    ) -> None: ...
    @property
    def some_avg10(self) -> float: ...
    @property
    def some_avg60(self) -> float: ...
    @property
    def some_avg300(self) -> float: ...
    @property
    def some_total(self) -> int: ...
    @property
    def full_avg10(self) -> float: ...
    @property
    def full_avg60(self) -> float: ...
    @property
    def full_avg300(self) -> float: ...
    @property
    def full_total(self) -> int: ...
    @property
    def usage(self) -> Optional[float]: ...

_Path = Union[str, bytes, os.PathLike[str], os.PathLike[bytes]]

class PressureMonitor:
    """Linux's memory pressure (PSI), the system's or a cgroup v2's, and a cgroup's usage, read as
    Pressure.OK, SOFT or HARD each time poll() is called."""

    def __init__(
        self,
        psi: _Path = "/proc/pressure/memory",
        *,
        soft_some: SupportsFloat = 10.0,
        hard_full: SupportsFloat = 10.0,
        cgroup: Optional[_Path] = None,
        soft_usage: SupportsFloat = 0.85,
        hard_usage: SupportsFloat = 0.95,
    ) -> None: ...
    def poll(self) -> Pressure: ...
    @property
    def level(self) -> Pressure: ...
    @property
    def reading(self) -> PressureReading: ...
    def level_of(self, reading: PressureReading) -> Pressure: ...
    @property
    def psi(self) -> str: ...
    @property
    def cgroup(self) -> Optional[str]: ...
    @property
    def soft_some(self) -> float: ...
    @property
    def hard_full(self) -> float: ...
    @property
    def soft_usage(self) -> float: ...
    @property
    def hard_usage(self) -> float: ...

class _ParsePsi(Protocol):  # parse_psi's signature (a function: named below as test_stubs reads names)
    def __call__(self, text: str) -> Optional[PressureReading]: ...

parse_psi: _ParsePsi  # a PSI file's text parsed: a PressureReading (usage None), or None when it is not one
