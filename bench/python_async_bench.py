"""admit_async with many gates, each with one pending wait: what the waiting costs the process.

For each count of gates (cap 1, full), one task per gate waits in admit_async, and the script
measures, in a fresh interpreter per count:
- the time to start the waits (every task created and run up to its wait);
- the process's threads while they wait (the kernel's count, /proc/self/task);
- the CPU the idle process uses over --idle seconds (resource.getrusage: all its threads), as a
  share of one core;
- the event loop's timekeeping: of 200 `await asyncio.sleep(0.01)`, how many return within 20 ms
  of their due time, and the worst overshoot;
- the time to admit them all: note_done on each gate, until every task has its True.

An interpreter that has not started its waits within --limit seconds is killed, and the row says
so, with its threads and CPU share at that moment (read from /proc/PID).

    PYTHONPATH=<build>/python python3 bench/python_async_bench.py [--gates 100,1000,2000,10000]
        [--package DIR ...] [--idle 3] [--limit 60]

--package DIR (repeatable) runs the same measurements against the sluice package in DIR (a
folder holding sluice/), labelled by DIR; without it, the one that PYTHONPATH finds. Prints a
Markdown table.
"""
import argparse
import asyncio
import json
import os
import platform
import resource
import subprocess
import sys
import threading
import time


def cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def os_threads():
    return len(os.listdir("/proc/self/task"))


def report(**fields):
    print(json.dumps(fields), flush=True)


async def measure(count, idle):
    import sluice

    gates = [sluice.Gate(1) for _ in range(count)]
    for g in gates:
        g.note_submitted()
    report(phase="starting")
    begin = time.perf_counter()
    tasks = [asyncio.create_task(g.admit_async()) for g in gates]
    await asyncio.sleep(0)  # each task runs up to its wait
    start = time.perf_counter() - begin
    assert not any(t.done() for t in tasks)
    threads = os_threads()
    report(phase="started", start=start, threads=threads)

    cpu, wall = cpu_seconds(), time.perf_counter()
    await asyncio.sleep(idle)
    idle_cpu = (cpu_seconds() - cpu) / (time.perf_counter() - wall)

    overshoots = []
    for _ in range(200):
        due = time.perf_counter() + 0.01
        await asyncio.sleep(0.01)
        overshoots.append(time.perf_counter() - due)
    on_time = sum(1 for o in overshoots if o <= 0.020)

    begin = time.perf_counter()
    for g in gates:
        g.note_done()
    results = await asyncio.gather(*tasks)
    admit = time.perf_counter() - begin
    assert all(results) and all(g.in_flight == 1 for g in gates)
    report(phase="done", start=start, threads=threads, idle_cpu=idle_cpu, on_time=on_time,
           worst=max(overshoots), admit=admit)


def proc_sample(pid):
    """Threads and total CPU seconds of a running process, from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
    threads = int(fields[17])
    return threads, cpu


def run_child(package, count, idle, limit):
    env = dict(os.environ)
    if package is not None:
        env["PYTHONPATH"] = package
    child = subprocess.Popen([sys.executable, __file__, "--child", str(count), "--idle", str(idle)],
                             stdout=subprocess.PIPE, text=True, env=env)
    lines = []

    def read():
        for line in child.stdout:
            lines.append(json.loads(line))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    begin = time.perf_counter()
    last = (0, 0.0, begin)
    while child.poll() is None:
        time.sleep(0.5)
        started = any(line["phase"] != "starting" for line in lines)
        if not started:
            try:
                threads, cpu = proc_sample(child.pid)
                now = time.perf_counter()
                share = (cpu - last[1]) / (now - last[2])
                last = (threads, cpu, now)
            except (OSError, IndexError, ValueError):
                continue
            if now - begin > limit:
                child.kill()
                child.wait()
                return {"phase": "killed", "after": now - begin, "threads": threads, "cpu_share": share}
    reader.join(5)
    done = [line for line in lines if line["phase"] == "done"]
    if child.returncode != 0 or not done:
        return {"phase": "failed", "returncode": child.returncode}
    return done[0]


def row(label, count, r):
    if r["phase"] == "killed":
        return (f"| {label} | {count:,} | {r['threads']:,} (still starting) | "
                f"{r['cpu_share']:.0%} (while starting) | - | - | not started after {r['after']:.0f} s: killed | - |")
    if r["phase"] == "failed":
        return f"| {label} | {count:,} | - | - | - | - | failed (exit {r['returncode']}) | - |"
    return (f"| {label} | {count:,} | {r['threads']:,} | {r['idle_cpu']:.2%} | {r['on_time']} / 200 | "
            f"{r['worst'] * 1e3:.1f} ms | {span(r['start'])} | {span(r['admit'])} |")


def span(seconds):
    return f"{seconds * 1e3:.0f} ms" if seconds < 1 else f"{seconds:.1f} s"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--gates", default="100,1000,2000,10000")
    parser.add_argument("--package", action="append", help="a folder holding a sluice package")
    parser.add_argument("--idle", type=float, default=3.0, help="seconds of idle CPU measured")
    parser.add_argument("--limit", type=float, default=60.0, help="seconds allowed to start the waits")
    args = parser.parse_args()
    if args.child is not None:
        asyncio.run(measure(args.child, args.idle))
        return

    counts = [int(c) for c in args.gates.split(",")]
    packages = args.package or [None]
    print(f"Python {platform.python_version()}, {os.cpu_count()} CPUs, idle CPU over {args.idle:g} s, "
          f"200 ticks of sleep(0.01) (on time: within 20 ms of due)\n")
    print("| package | gates | threads | idle CPU (of a core) | ticks on time | worst overshoot | "
          "start the waits | admit them all |")
    print("|---|---|---|---|---|---|---|---|")
    for count in counts:
        for package in packages:
            label = package if package is not None else "PYTHONPATH"
            print(row(label, count, run_child(package, count, args.idle, args.limit)), flush=True)


if __name__ == "__main__":
    main()
