"""Turns Google Benchmark JSON from sluice's suite into ratio tables (Markdown).

Benchmark names are FAMILY/VARIANT/real_time/threads:N. For each family the baseline is the
variant whose name starts with 'mutex_' (the mutex twin); the anchor, if the family has one, is
named in ANCHORS. Each cell is the wall-clock time of one operation pair per thread, with the
baseline's time divided by it ('x faster than the mutex twin'; below 1 means slower).

Usage: python3 bench/report.py RESULT.json [...]
"""
import json
import re
import sys
from collections import defaultdict

ANCHORS = {"gate.note_pair": "bare_atomic", "gate.admit_pair": "counting_semaphore"}
NAME = re.compile(r"^(?P<family>[^/]+)/(?P<variant>[^/]+)/.*threads:(?P<threads>\d+)")


def load(paths):
    runs = defaultdict(dict)  # family -> {(variant, threads): ns}
    context = None
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        context = context or data.get("context", {})
        for b in data["benchmarks"]:
            m = NAME.match(b["name"])
            if not m or b.get("run_type", "iteration") != "iteration":
                continue
            scale = {"ns": 1, "us": 1e3, "ms": 1e6, "s": 1e9}[b.get("time_unit", "ns")]
            key = (m["variant"], int(m["threads"]))
            runs[m["family"]][key] = b["real_time"] * scale
    return runs, context


def table(family, cells):
    variants = list(dict.fromkeys(v for v, _ in cells))
    threads = sorted({t for _, t in cells})
    base = next((v for v in variants if v.startswith("mutex_")), None)
    anchor = ANCHORS.get(family)
    head = ["threads"] + variants
    if base:
        head += [f"{v} vs {base}" for v in variants if v != base]
    if anchor in variants:
        head += [f"{v} vs {anchor}" for v in variants if v not in (anchor, base)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for t in threads:
        row = [str(t)]
        row += [f"{cells[(v, t)]:.1f} ns" if (v, t) in cells else "–" for v in variants]
        if base:
            row += [ratio(cells, base, v, t) for v in variants if v != base]
        if anchor in variants:
            row += [ratio(cells, v, anchor, t, inverse=True) for v in variants if v not in (anchor, base)]
        lines.append("| " + " | ".join(row) + " |")
    return lines


def ratio(cells, base, v, t, inverse=False):
    if (base, t) not in cells or (v, t) not in cells:
        return "–"
    r = cells[(base, t)] / cells[(v, t)]
    return f"{r:.2f}x" if not inverse else f"{r:.2f}x"


def main():
    runs, context = load(sys.argv[1:])
    print(f"Machine: {context.get('host_name', '?')}, {context.get('num_cpus', '?')} CPUs at "
          f"{context.get('mhz_per_cpu', '?')} MHz; run {context.get('date', '?')}")
    print("Cells: wall-clock ns per operation pair per thread. 'A vs B' is B's time / A's time "
          "for 'vs mutex' (higher is better for A) and A's time / B's time for 'vs anchor' "
          "(the overhead over the anchor; 1.00x is parity).")
    for family, cells in runs.items():
        print(f"\n### {family}\n")
        print("\n".join(table(family, cells)))


if __name__ == "__main__":
    main()
