"""Plots resident memory over time after a burst, decay off and on, from bench/decay_rss's output.

One column per burst (main, threads, sleepers, those given), two rows: the whole range (0 to
280 MiB) and the same near the baseline (2 to 6 MiB; higher is drawn at the top edge), where the
bands are. Decay off
(orange), on (blue, every run given), on with --warm (purple, dashed); the band from the
pre-burst figure of the first run with decay on to 10% above it (green), the deadline 1.1 D
(dashed green) and, for --warm, 1.1 times its pre-burst figure (dotted purple); for sleepers, the
workers' exit (grey). Drawn the way bench/limit_plot.py draws limit.svg: SVG written by hand, no
plotting library, the same styles.

Usage: python3 bench/decay_plot.py RUN.txt [...] [--svg PATH]   (PATH: docs/bench/decay.svg unless set)
RUN.txt: what one run of bench/decay_rss printed.
"""
import argparse
import re
from collections import defaultdict
from html import escape

PANEL_W, PANEL_H, ZOOM_H = 300, 150, 110  # the plot areas, in px
LEFT, TOP, GAP_X, GAP_Y = 46, 72, 34, 40
BURSTS = ("main", "threads", "sleepers")
FULL = (0.0, 280.0)  # MiB, the first row's y axis
ZOOM = (2.0, 6.0)    # the second row's


def load(path):
    """A run: its burst, kind (off, on, warm), decay, pre-burst MiB, exit ms or None, [(t ms, MiB)]."""
    run = {"samples": [], "exit": None}
    with open(path) as f:
        for line in f:
            if line.startswith("# decay_rss"):
                run["burst"] = re.search(r"--burst=(\w+)", line).group(1)
                mode = re.search(r"--mode=(\w+)", line).group(1)
                run["kind"] = "warm" if mode == "on" and "--warm" in line else mode
                run["decay"] = float(re.search(r"--decay-ms=(\d+)", line).group(1))
            elif line.startswith("# pre-burst"):
                run["pre"] = float(re.search(r"RSS ([\d.]+) MiB", line).group(1))
            elif line.startswith("# the workers exit"):
                run["exit"] = run["samples"][-1][0]  # after the last sample of the idle window
            elif not line.startswith("#") and line.split() and line.split()[0] != "t_ms":
                t, rss = line.split()[:2]
                run["samples"].append((float(t), float(rss)))
    return run


def points(coords):
    return " ".join(f"{x:.1f},{y:.1f}" for x, y in coords)


def panel(out, x0, y0, h, runs, y_span, t_end, title, ticks, bands):
    lo, hi = y_span

    def px(t):
        return x0 + PANEL_W * t / t_end

    def py(v):
        return y0 + h * (1 - (min(max(v, lo), hi) - lo) / (hi - lo))

    if title:
        out.append(f'<text x="{x0 + PANEL_W / 2}" y="{y0 - 8}" text-anchor="middle" class="title">{escape(title)}</text>')
    out.append(f'<rect x="{x0}" y="{y0}" width="{PANEL_W}" height="{h}" class="frame"/>')
    on = [r for r in runs if r["kind"] == "on"]
    warm = [r for r in runs if r["kind"] == "warm"]
    decay = runs[0]["decay"]
    if on and bands:
        pre = on[0]["pre"]
        out.append(f'<rect x="{x0}" y="{py(1.1 * pre):.1f}" width="{PANEL_W}" height="{max(py(pre) - py(1.1 * pre), 0.8):.1f}" class="band"/>')
    if warm and bands:
        y = py(1.1 * warm[0]["pre"])
        out.append(f'<line x1="{x0}" y1="{y:.1f}" x2="{x0 + PANEL_W}" y2="{y:.1f}" class="warmline"/>')
    x = px(1.1 * decay)
    out.append(f'<line x1="{x:.1f}" y1="{y0}" x2="{x:.1f}" y2="{y0 + h}" class="deadline"/>')
    for r in runs:
        if r["exit"] is not None:
            x = px(r["exit"])
            out.append(f'<line x1="{x:.1f}" y1="{y0}" x2="{x:.1f}" y2="{y0 + h}" class="exit"/>')
            out.append(f'<text x="{x + 3:.1f}" y="{y0 + 10}" class="tick">workers exit</text>')
            break
    for kind in ("off", "warm", "on"):
        for r in runs:
            if r["kind"] == kind:
                out.append(f'<polyline class="{kind}" points="{points([(px(t), py(v)) for t, v in r["samples"]])}"/>')
    for v in ticks:
        out.append(f'<text x="{x0 - 4}" y="{py(v) + 3:.1f}" text-anchor="end" class="tick">{v:g}</text>')
    for t in range(0, int(t_end) + 1, 1000):
        out.append(f'<text x="{px(t):.1f}" y="{y0 + h + 12}" text-anchor="middle" class="tick">{t // 1000} s</text>')


def plot(runs, path):
    by_burst = defaultdict(list)
    for r in runs:
        by_burst[r["burst"]].append(r)
    bursts = [b for b in BURSTS if b in by_burst]
    width = LEFT + len(bursts) * (PANEL_W + GAP_X)
    height = TOP + PANEL_H + GAP_Y + ZOOM_H + 30
    decay = runs[0]["decay"]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
           'font-family="sans-serif">',
           "<style>.frame{fill:none;stroke:#999}.band{fill:#2ca02c;fill-opacity:0.25;stroke:none}"
           ".deadline{stroke:#2ca02c;stroke-dasharray:4 3}.warmline{stroke:#9467bd;stroke-dasharray:1 2}"
           ".exit{stroke:#999;stroke-dasharray:2 2}.off{fill:none;stroke:#ff7f0e;stroke-width:1.2}"
           ".on{fill:none;stroke:#1f77b4;stroke-width:1.2}.warm{fill:none;stroke:#9467bd;stroke-width:1.2;stroke-dasharray:5 3}"
           ".title{font-size:11px}.tick{font-size:9px;fill:#555}.head{font-size:13px;font-weight:bold}</style>",
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{LEFT}" y="18" class="head">Resident memory (MiB) after a burst of 4,096 x 64 KiB into a pool, '
           f'then idle; decay {decay / 1000:g} s</text>',
           f'<text x="{LEFT}" y="34" class="tick">bench/decay_rss: decay off (orange), on (blue, each run), on after a '
           f'warm-up burst, --warm (purple dashed); time from the end of the retires; second row: 2 to 6 MiB, higher at the top edge</text>',
           f'<text x="{LEFT}" y="48" class="tick">green band: pre-burst to +10% (the first run with decay on); dashed '
           f'green: 1.1 x the decay, the deadline; dotted purple: 1.1 x the --warm run\'s pre-burst</text>']
    for col, burst in enumerate(bursts):
        rs = by_burst[burst]
        t_end = max(t for r in rs for t, _ in r["samples"])
        t_end = 1000 * round(t_end / 1000)
        x0 = LEFT + col * (PANEL_W + GAP_X)
        panel(out, x0, TOP, PANEL_H, rs, FULL, t_end, f"--burst={burst}", (0, 64, 128, 192, 256), False)
        panel(out, x0, TOP + PANEL_H + GAP_Y, ZOOM_H, rs, ZOOM, t_end,
              f"--burst={burst}, near the baseline", (2, 3, 4, 5, 6), True)
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+", help="the output of bench/decay_rss runs, a file each")
    parser.add_argument("--svg", default="docs/bench/decay.svg", help="where to write the plot")
    args = parser.parse_args()
    runs = [load(p) for p in args.runs]
    plot(runs, args.svg)
    print(f"wrote {args.svg}: {len(runs)} runs")


if __name__ == "__main__":
    main()
