"""sluice from Python against what a Python program uses without it, in one run.

- The gate: try_admit + note_done on sluice.Gate and sluice.MutexGate, against a counter under a
  threading.Lock and one under a threading.Condition (the kinds of gate a Python scheduler keeps).
- The pool: acquire(n) + retire on sluice.Pool and sluice.MutexPool, against bytearray(n).

Each on 1 and 8 Python threads (all calls of all threads counted), best of REPEATS runs, the
contenders interleaved run by run so that they share the machine's moments alike. Prints a
Markdown table: nanoseconds per pair, and each contender's ratio to the first row of its group.

    PYTHONPATH=<build>/python python3 bench/python_bench.py [--calls N] [--repeats R]
"""
import argparse
import platform
import threading
import time

import sluice


class LockGate:
    """A gate under a threading.Lock: what a Python scheduler writes without sluice."""

    def __init__(self, cap):
        self.cap, self.in_flight, self._lock = cap, 0, threading.Lock()

    def try_admit(self):
        with self._lock:
            if self.in_flight < self.cap:
                self.in_flight += 1
                return True
            return False

    def note_done(self):
        with self._lock:
            if self.in_flight > 0:
                self.in_flight -= 1


class ConditionGate(LockGate):
    """The same under a threading.Condition, which can also wake waiters."""

    def __init__(self, cap):
        super().__init__(cap)
        self._lock = threading.Condition()

    def note_done(self):
        with self._lock:
            if self.in_flight > 0:
                self.in_flight -= 1
                self._lock.notify()


def gate_work(gate, calls):
    def work():
        try_admit, note_done = gate.try_admit, gate.note_done
        for _ in range(calls):
            if try_admit():
                note_done()
    return work


def pool_work(pool, size, calls):
    def work():
        acquire, retire = pool.acquire, pool.retire
        for _ in range(calls):
            retire(acquire(size))
    return work


def bytearray_work(size, calls):
    def work():
        for _ in range(calls):
            b = bytearray(size)
            del b
    return work


def timed(make_work, threads):
    """Seconds for `threads` threads each running one work function, started together."""
    works = [make_work() for _ in range(threads)]
    start_line = threading.Barrier(threads + 1)

    def run(work):
        start_line.wait()
        work()

    pool = [threading.Thread(target=run, args=(w,)) for w in works]
    for t in pool:
        t.start()
    start_line.wait()
    begin = time.perf_counter()
    for t in pool:
        t.join()
    return time.perf_counter() - begin


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=100_000, help="pairs per thread")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    calls = args.calls

    groups = []
    gates = [("sluice.Gate", lambda: sluice.Gate(64)), ("sluice.MutexGate", lambda: sluice.MutexGate(64)),
             ("threading.Lock counter", lambda: LockGate(64)),
             ("threading.Condition counter", lambda: ConditionGate(64))]
    for threads in (1, 8):
        rows = []
        for name, make in gates:
            g = make()  # one gate shared by the threads
            rows.append((name, lambda g=g: gate_work(g, calls)))
        groups.append((f"gate: try_admit + note_done, {threads} thread(s)", threads, rows))
    for size in (1 << 10, 64 << 10, 1 << 20):
        for threads in (1, 8):
            p, mp = sluice.Pool(bound=1024), sluice.MutexPool(bound=1024)
            rows = [("bytearray(n)", lambda size=size: bytearray_work(size, calls // 10)),
                    ("sluice.Pool acquire + retire", lambda p=p, size=size: pool_work(p, size, calls // 10)),
                    ("sluice.MutexPool acquire + retire",
                     lambda mp=mp, size=size: pool_work(mp, size, calls // 10))]
            groups.append((f"pool: {size >> 10} KiB, {threads} thread(s)", threads, rows))

    print(f"Python {platform.python_version()}, {calls:,} gate pairs / {calls // 10:,} pool pairs per "
          f"thread, best of {args.repeats}\n")
    print("| workload | contender | ns per pair | ratio to the first |")
    print("|---|---|---|---|")
    for title, threads, rows in groups:
        best = {name: float("inf") for name, _ in rows}
        for _ in range(args.repeats):
            for name, make in rows:
                best[name] = min(best[name], timed(make, threads))
        pairs = threads * (calls // 10 if title.startswith("pool") else calls)
        first = best[rows[0][0]]
        for name, _ in rows:
            print(f"| {title} | {name} | {best[name] / pairs * 1e9:,.0f} | {best[name] / first:.2f} |")


if __name__ == "__main__":
    main()
