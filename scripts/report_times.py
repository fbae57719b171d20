"""Where a run of scripts/test.sh spent its time: each mode's set-up, build and tests, then the
slowest tests of all the modes that ran.

Usage: report_times.py [--slowest N] MODE...
For each MODE it reads build-test-MODE.times (lines that scripts/test.sh writes: `setup S`,
`build S`, `test S`, wall seconds; `build_cpu S`, `test_cpu S`, the CPU seconds those phases
used, which say how busy they kept the cores and vary less with other work on the machine; and
the load average at the mode's end) and
build-test-MODE/meson-logs/testlog.json (each test's duration). A mode without either is shown
with what it has. Prints a table; never fails the run.
"""
import json
import os
import sys

args = sys.argv[1:]
slowest = 10
if args[:1] == ["--slowest"]:
    slowest, args = int(args[1]), args[2:]


def times(mode):
    found = {}
    try:
        with open(f"build-test-{mode}.times") as f:
            for line in f:
                key, _, value = line.strip().partition(" ")
                found[key] = value
    except FileNotFoundError:
        pass
    return found


def tests(mode):
    try:
        with open(f"build-test-{mode}/meson-logs/testlog.json") as log:
            return [json.loads(line) for line in log if line.strip()]
    except FileNotFoundError:
        return []


rows, durations, total = [], [], 0
for mode in args:
    t = times(mode)
    seconds = [int(t[k]) if t.get(k, "").isdigit() else None
               for k in ("setup", "build", "test", "build_cpu", "test_cpu")]
    mode_total = sum(s for s in seconds[:3] if s is not None)
    total += mode_total
    rows.append((mode, *seconds, mode_total, t.get("load", "")))
    for entry in tests(mode):
        durations.append((entry.get("duration", 0.0), mode, entry["name"], entry["result"]))

show = lambda s: "-" if s is None else str(s)
col = lambda i: sum(r[i] or 0 for r in rows)
print(f"== where the time went, in seconds ({os.cpu_count()} cores): set-up (installs, meson setup), "
      "build and tests, wall and CPU, and the load average at each mode's end")
print(f"{'mode':<18} {'setup':>6} {'build':>6} {'tests':>6} {'total':>6} {'build CPU':>10} {'tests CPU':>10}  load")
for mode, setup, build, test, build_cpu, test_cpu, mode_total, load in rows:
    print(f"{mode:<18} {show(setup):>6} {show(build):>6} {show(test):>6} {mode_total:>6} "
          f"{show(build_cpu):>10} {show(test_cpu):>10}  {load}")
print(f"{'all':<18} {col(1):>6} {col(2):>6} {col(3):>6} {total:>6} {col(4):>10} {col(5):>10}  "
      f"({total / 60:.1f} minutes)")
if durations:
    print(f"the {min(slowest, len(durations))} slowest tests (a mode's tests run side by side, "
          "so they add up to more than its test time):")
    for duration, mode, name, result in sorted(durations, reverse=True)[:slowest]:
        note = "" if result == "OK" else f"  {result}"
        print(f"  {duration:7.1f}  {mode:<18} {name.split(':', 1)[-1]}{note}")
