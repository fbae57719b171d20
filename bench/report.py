"""Turns Google Benchmark JSON from sluice's suite into ratio tables (Markdown), and a plot.

Benchmark names are FAMILY/VARIANT/real_time/threads:N; the JSON of several executables
(pool_bench, the alloc_bench_* allocators, gate_bench, asio_bench) merges into one table per family.

A cell is wall-clock nanoseconds per operation pair: the run's wall-clock time divided by the
pairs that all its threads completed together, i.e. the reciprocal of the throughput. The
many-thread patterns (pool.handoff, pool.own, pool.churn, pool.idle) give ns per block taken, and
three more tables each from their counters: a pool's hit rate and fresh allocations per block,
and every source's peak resident memory above the cell's start. (Google
Benchmark runs the same number of iterations on each thread and divides by their sum.) A pool
pair is one acquire and one retire (or malloc and free); in pool.flow the two halves of a pair
run on two threads, producer and consumer, each counting an iteration, so its times are doubled
here to stay per pair (per frame). A pool_resource pair is one allocate and one deallocate;
pool_resource.strings counts one build and drop of a vector of 32 strings.

For each family there are up to three tables, one row per variant and one column per thread
count: the times, the times against the baseline (the variant whose name starts with 'mutex_'),
and against the family's anchor (ANCHORS: what one would use without sluice). Every ratio
'A vs B' is B's time / A's time: above 1.00x A is faster, below 1.00x A is slower. A last line
names every cell where sluice's own variant (the family's first word: 'pool', 'gate') is slower
than some rival (a variant that is not one of sluice's: gate_permit is not a rival of gate, nor
pool of pool_resource). A benchmark's own arguments (gate.serve's work_loops:256) make a family of
their own, and a benchmark that counts ns_per_admission is timed by it.

Repetitions (--benchmark_repetitions=R): a time is the median of the R runs with their range
beside it, a counter and a ratio are of the medians, and a cell counts as won only where sluice's
variant is faster in every run (run k against the other's run k): the last line names the cells
it loses on the medians, and apart from them those it wins on the medians but not in every run.

Usage: python3 bench/report.py [--markdown PATH] [--svg PATH] [--threads-svg PATH] RESULT.json [...]
"""
import argparse
import json
import re
from collections import defaultdict

ANCHORS = {"gate.note_pair": "bare_atomic", "gate.admit_pair": "counting_semaphore"}
ANCHOR_BY_PREFIX = {"pool.": "malloc", "pool_resource.": "pmr_sync", "asio.": "channel"}
ITERATIONS_PER_PAIR = {"pool.flow.": 2}  # producer and consumer each count one iteration
NAME = re.compile(r"^(?P<family>[^/]+)/(?P<variant>[^/]+)/(?P<rest>.*)")
THREADS = re.compile(r"(^|/)threads:(?P<threads>\d+)")
# Name parts that are not a benchmark's argument.
NOT_ARGUMENTS = re.compile(r"^(real_time|manual_time|iterations:\d+|threads:\d+)$")
SCALE = {"ns": 1, "us": 1e3, "ms": 1e6, "s": 1e9}
PATTERNS = ("pool.handoff", "pool.own", "pool.churn", "pool.idle")
# The patterns' counters: (key in the JSON, table title, format).
COUNTERS = (("hit_rate", "hit rate, %", "{:.2f}"), ("fresh_per_buffer", "fresh allocations per block", "{:.4f}"),
            ("peak_rss_mib", "peak resident MiB above the start", "{:.1f}"))


def by_prefix(table, family, default=None):
    return next((v for k, v in table.items() if family.startswith(k)), default)


def anchor_of(family):
    return ANCHORS.get(family) or by_prefix(ANCHOR_BY_PREFIX, family)


def median(values):
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def load(paths):
    """family -> {(variant, threads): [ns per pair, one per repetition]}, counter -> family ->
    {(variant, threads): [value, ...]} (the patterns' counters), and each file's context."""
    runs = defaultdict(lambda: defaultdict(list))
    counters = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    contexts = []
    order = {}  # family -> where its first benchmark was registered: (file, family_index)
    for file_no, path in enumerate(paths):
        with open(path) as f:
            data = json.load(f)
        contexts.append(data.get("context", {}))
        for b in data["benchmarks"]:
            m = NAME.match(b["name"])
            t = THREADS.search(m["rest"]) if m else None
            if not t or b.get("run_type", "iteration") != "iteration" or b.get("error_occurred"):
                continue
            # A benchmark's own arguments (gate.serve's work_loops:256) make a family of their own.
            family = "/".join([m["family"]] + [a for a in m["rest"].split("/") if not NOT_ARGUMENTS.match(a)])
            # gate.serve times an iteration of many admissions and counts the time of one.
            ns = b["ns_per_admission"] if "ns_per_admission" in b else b["real_time"] * SCALE[b.get("time_unit", "ns")]
            key = (m["variant"], int(t["threads"]))
            # Random interleaving shuffles the runs: the tables follow the registration order, the
            # lowest index among the family's variants (each variant is a family of its own there).
            here = (file_no, b.get("family_index", 0))
            order[family] = min(order.get(family, here), here)
            # asio_bench's iteration is a batch of pairs, which it counts in the JSON.
            runs[family][key].append(ns * by_prefix(ITERATIONS_PER_PAIR, family, 1) / b.get("pairs_per_iteration", 1))
            for counter, _, _ in COUNTERS:
                if counter in b:
                    counters[counter][family][key].append(b[counter])
    runs = {f: runs[f] for f in sorted(runs, key=order.get)}
    return runs, counters, contexts


def medians(cells):
    return {k: median(v) for k, v in cells.items()}


def speedup(cells, a, b, t):
    """How many times faster a is than b at t threads: b's time / a's time."""
    if (a, t) not in cells or (b, t) not in cells:
        return "–"
    return f"{cells[(b, t)] / cells[(a, t)]:.2f}x"


def grid(title, variants, threads, cell):
    lines = [f"| {title} | " + " | ".join(f"{t} thr" for t in threads) + " |",
             "|---|" + "---:|" * len(threads)]
    lines += ["| " + v + " | " + " | ".join(cell(v, t) for t in threads) + " |" for v in variants]
    return lines


def variants_of(family, cells):
    """The family's variants in the order the files gave them, sluice's own first."""
    variants = list(dict.fromkeys(v for v, _ in cells))
    subject = family.split(".")[0]
    return sorted(variants, key=lambda v: v != subject)


def family_report(family, runs_of_cells, counters):
    cells = medians(runs_of_cells)
    variants = variants_of(family, cells)
    threads = sorted({t for _, t in cells})
    base = next((v for v in variants if v.startswith("mutex_")), None)
    anchor = anchor_of(family)
    anchor = anchor if anchor in variants else None

    def ns(v, t):
        if (v, t) not in cells:
            return "–"
        runs = runs_of_cells[(v, t)]
        spread = f" ({min(runs):.1f}–{max(runs):.1f})" if len(runs) > 1 else ""
        return f"{cells[(v, t)]:.1f}{spread}"

    lines = grid("ns per block" if family in PATTERNS else "ns per pair", variants, threads, ns)
    for counter, title, fmt in COUNTERS:
        values = counters[counter].get(family, {})
        if values:
            rows = [v for v in variants if any((v, t) in values for t in threads)]
            lines += [""] + grid(title, rows, threads,
                                 lambda v, t, vs=values, f=fmt: f.format(median(vs[(v, t)])) if (v, t) in vs else "–")
    for ref in (base, anchor):
        if ref:
            others = [v for v in variants if v != ref]
            lines += [""] + grid(f"vs {ref}", others, threads, lambda v, t, r=ref: speedup(cells, v, r, t))

    subject = family.split(".")[0]
    if subject in variants:
        # sluice's other variants of the call (gate_permit, pool_uncached, pool under pool_resource)
        # are not rivals.
        rivals = [v for v in variants if v.split("_")[0] != subject.split("_")[0]]
        losses, contested = [], []
        for t in threads:
            if (subject, t) not in cells:
                continue
            own = cells[(subject, t)]
            others = [v for v in rivals if (v, t) in cells]
            faster = sorted((cells[(v, t)], v) for v in others if cells[(v, t)] < own)
            # Ahead on the medians, but some run k of the other beat the subject's run k.
            close = sorted((cells[(v, t)], v) for v in others if cells[(v, t)] >= own and any(
                o < s for o, s in zip(runs_of_cells[(v, t)], runs_of_cells[(subject, t)])))
            for found, out in ((faster, losses), (close, contested)):
                if found:
                    out.append(f"at {t} thr to " + ", ".join(f"{v} ({x:.1f} vs {own:.1f} ns)" for x, v in found))
        lines.append("")
        lines.append(f"Where `{subject}` loses: " + ("; ".join(losses) + "." if losses
                                                    else f"nowhere; `{subject}` is fastest in every cell."))
        if contested:
            lines.append("")
            lines.append(f"Where `{subject}` wins the median but not every run: " + "; ".join(contested) + ".")
    return lines


def report(runs, counters, contexts):
    c = contexts[0] if contexts else {}
    lines = [f"Machine: {c.get('host_name', '?')}, {c.get('num_cpus', '?')} CPUs at "
             f"{c.get('mhz_per_cpu', '?')} MHz; run {c.get('date', '?')}.",
             "",
             "Cells: wall-clock ns per operation pair, all threads' pairs together (the reciprocal "
             "of throughput; pool.flow counts a frame, acquired by the producer and retired by the "
             "consumer, as one pair; pool_resource.strings, one build and drop of its vector of strings). 'vs B' tables give B's time / the row's time: above 1.00x "
             "the row is faster than B."]
    repetitions = max((len(v) for cells in runs.values() for v in cells.values()), default=1)
    if repetitions > 1:
        lines += ["", f"Each time is the median of {repetitions} runs, interleaved at random, with their range "
                      "beside it; ratios and counters are of the medians."]
    runs_of = []
    for ctx in contexts:
        facts = []
        if "malloc_from" in ctx:
            facts.append("malloc from " + ctx["malloc_from"].rsplit("/", 1)[-1])
        if ctx.get("load_avg"):
            facts.append(f"load average {ctx['load_avg'][0]:.1f} at its start")
        runs_of.append(f"{ctx.get('executable', '?').rsplit('/', 1)[-1]} ({', '.join(facts)})")
    if runs_of:
        lines += ["", "Executables: " + "; ".join(runs_of) + "."]
    for family, cells in runs.items():
        lines += ["", f"### {family}", ""] + family_report(family, cells, counters)
    return lines


def plot(runs, path, counters=None):
    try:
        import matplotlib
    except ImportError:
        print(f"skipped: {path} (python3-matplotlib not installed)")
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # Panels: each family's times; with counters (the patterns), each family's hit rate too.
    panels = [(family, runs[family], "ns per pair (log)" if family not in PATTERNS else "ns per block (log)", True)
              for family in runs]
    if counters is not None:
        panels += [(family, counters["hit_rate"][family], "pool hit rate, %", False)
                   for family in runs if counters["hit_rate"].get(family)]
    families = [f for f, _, _, _ in panels]
    cols = 2 if len(families) > 1 else 1
    if counters is not None:
        cols = max(1, len(runs))
    rows = (len(families) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(6.5 * cols, 4.2 * rows), squeeze=False)
    colors = {}  # one colour per variant across the panels of each kind (pool., gate.)
    for family, cell_runs in runs.items():
        kind = family.split(".")[0]
        for v in variants_of(family, cell_runs):
            if (kind, v) not in colors:
                colors[(kind, v)] = plt.get_cmap("tab10")(sum(k == kind for k, _ in colors) % 10)
    for ax, (family, cell_runs, ylabel, log) in zip(axes.flat, panels):
        cells = medians(cell_runs)
        threads = sorted({t for _, t in cells})
        for v in variants_of(family, cells):
            ts = [t for t in threads if (v, t) in cells]
            subject = v == family.split(".")[0]
            ax.plot(ts, [cells[(v, t)] for t in ts], marker="o", label=v, color=colors[(family.split(".")[0], v)],
                    linewidth=2.5 if subject else 1.2, linestyle="-" if subject or v.startswith("mutex_") else "--")
        ax.set_title(family)
        ax.set_xscale("log", base=2)
        ax.set_xticks(threads, [str(t) for t in threads])
        ax.minorticks_off()
        if log:
            ax.set_yscale("log")
        else:  # a hit rate: the scale from 100% down to a little below the lowest, at most 95%
            lowest = min(cells.values())
            ax.set_ylim(min(95.0, lowest - 0.5), 100.2)
            ax.ticklabel_format(axis="y", useOffset=False)
        ax.set_xlabel("threads")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(families):]:
        ax.set_visible(False)
    fig.tight_layout()
    fig.savefig(path)  # the format follows the extension: .svg, .png
    plt.close(fig)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("results", nargs="+", help="Google Benchmark JSON files")
    parser.add_argument("--markdown", metavar="PATH", help="also write the tables to PATH")
    parser.add_argument("--svg", metavar="PATH", help="plot ns per pair against threads to PATH")
    parser.add_argument("--threads-svg", metavar="PATH",
                        help="plot the many-thread patterns (ns per block, hit rate) to PATH")
    args = parser.parse_args()

    runs, counters, contexts = load(args.results)
    text = "\n".join(report(runs, counters, contexts)) + "\n"
    print(text, end="")
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text)
    if args.svg:
        plot({f: c for f, c in runs.items() if f not in PATTERNS}, args.svg)
    if args.threads_svg:
        plot({f: c for f, c in runs.items() if f in PATTERNS}, args.threads_svg, counters)


if __name__ == "__main__":
    main()
