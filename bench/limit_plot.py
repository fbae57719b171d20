"""Plots the limiter's cap over time against c, from the CSV that bench/limit_sim writes.

One panel per algorithm (a row) and per c and load (a column: 2x and 4x the initial capacity, the
loads the targets are about): the cap (a line) and its lowest and highest (a shaded envelope, so
that a swing between two ticks shows), three ticks of 100 ms to a point; c (dashed) and the band
of ±20% of c (green). The y axis runs to 3c; a cap above that is drawn at the top edge. The fixed caps are left
out: their cap is a constant. The SVG is written by hand: no plotting library is needed.

Usage: python3 bench/limit_plot.py LIMIT.csv [--svg PATH]   (PATH: docs/bench/limit.svg unless set)
"""
import argparse
import csv
from collections import defaultdict
from html import escape

PANEL_W, PANEL_H = 260, 110  # the plot area of one panel, in px
LEFT, TOP, GAP_X, GAP_Y = 46, 58, 34, 44
LOADS = ("2", "4")
FIXED = ("cap ", "unlimited")
Y_SPAN = 3  # the y axis runs from 0 to this times c
BIN = 3  # ticks of 100 ms drawn as one point: 0.3 s, under a pixel of a panel


def load(path):
    """(initial c, policy, load) -> [(t, c, cap, low, high)], in time order; the policies in file order."""
    traces = defaultdict(list)
    policies = []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            if row["policy"].startswith(FIXED) or row["load"] not in LOADS:
                continue
            if row["policy"] not in policies:
                policies.append(row["policy"])
            key = (int(row["initial_c"]), row["policy"], row["load"])
            traces[key].append((float(row["t_s"]), int(row["c"]), int(row["cap"]), int(row["cap_low"]), int(row["cap_high"])))
    return traces, policies


def flat(points):
    """The points less those inside a horizontal run (a steady cap), which draw nothing new."""
    kept = [p for i, p in enumerate(points)
            if i == 0 or i == len(points) - 1 or not (points[i - 1][1] == p[1] == points[i + 1][1])]
    return " ".join(f"{x:.1f},{y:.1f}" for x, y in kept)


def panel(out, x0, y0, trace, initial_c, title):
    top = Y_SPAN * initial_c
    t_end = trace[-1][0]

    def px(t):
        return x0 + PANEL_W * t / t_end

    def py(v):
        return y0 + PANEL_H * (1 - min(v, top) / top)

    # A title too long for the panel goes on two lines, split at the space nearest its middle.
    lines = [title]
    if len(title) > 52:
        middle = min((i for i, ch in enumerate(title) if ch == " "), key=lambda i: abs(i - len(title) / 2))
        lines = [title[:middle], title[middle + 1:]]
    for k, line in enumerate(lines):
        y = y0 - 6 - 13 * (len(lines) - 1 - k)
        out.append(f'<text x="{x0 + PANEL_W / 2}" y="{y}" text-anchor="middle" class="title">{escape(line)}</text>')
    out.append(f'<rect x="{x0}" y="{y0}" width="{PANEL_W}" height="{PANEL_H}" class="frame"/>')
    # c and its band, step by step: each tick's c holds over the 100 ms that end at it.
    steps = []
    previous_t = 0.0
    for t, c, *_ in trace:
        steps += [(previous_t, c), (t, c)]
        previous_t = t
    upper = flat([(px(t), py(1.2 * c)) for t, c in steps])
    lower = flat([(px(t), py(0.8 * c)) for t, c in reversed(steps)])
    out.append(f'<polygon class="band" points="{upper} {lower}"/>')
    out.append(f'<polyline class="c" points="{flat([(px(t), py(c)) for t, c in steps])}"/>')
    # The cap and its envelope, by bins of BIN ticks (under a pixel each): the cap at a bin's end,
    # the highest and the lowest in it.
    bins = [trace[i:i + BIN] for i in range(0, len(trace), BIN)]
    highs = flat([(px(b[-1][0]), py(max(high for *_, high in b))) for b in bins])
    lows = flat([(px(b[-1][0]), py(min(low for *_, low, _ in b))) for b in reversed(bins)])
    out.append(f'<polygon class="envelope" points="{highs} {lows}"/>')
    out.append(f'<polyline class="cap" points="{flat([(px(b[-1][0]), py(b[-1][2])) for b in bins])}"/>')
    # Axes: 0, c, 2c, 3c on y; every 30 s on x.
    for k in range(Y_SPAN + 1):
        label = "0" if k == 0 else f"{k * initial_c}"
        out.append(f'<text x="{x0 - 4}" y="{py(k * initial_c) + 3:.1f}" text-anchor="end" class="tick">{label}</text>')
    for t in range(0, int(t_end) + 1, 30):
        out.append(f'<text x="{px(t):.1f}" y="{y0 + PANEL_H + 12}" text-anchor="middle" class="tick">{t} s</text>')


def plot(traces, policies, path):
    columns = [(c, l) for c in sorted({c for c, _, _ in traces}) for l in LOADS]
    width = LEFT + len(columns) * (PANEL_W + GAP_X)
    height = TOP + len(policies) * (PANEL_H + GAP_Y) + 10
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
           'font-family="sans-serif">',
           "<style>.frame{fill:none;stroke:#999}.band{fill:#2ca02c;fill-opacity:0.15;stroke:none}"
           ".c{fill:none;stroke:#2ca02c;stroke-dasharray:4 3}.envelope{fill:#1f77b4;fill-opacity:0.25;stroke:none}"
           ".cap{fill:none;stroke:#1f77b4;stroke-width:1.2}.title{font-size:11px}.tick{font-size:9px;fill:#555}"
           ".head{font-size:13px;font-weight:bold}</style>",
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{LEFT}" y="18" class="head">The limiter\'s cap over time (blue: at each 100 ms, shaded: its range '
           f'within them) against c (dashed green, ±20% shaded); y to 3c, clipped</text>',
           f'<text x="{LEFT}" y="34" class="tick">bench/limit_sim: c workers, c/2 from 30 s, c from 60 s; '
           f'open-loop arrivals at 2x and 4x the initial capacity</text>']
    for row, policy in enumerate(policies):
        for col, (c, l) in enumerate(columns):
            trace = traces.get((c, policy, l))
            if not trace:
                continue
            panel(out, LEFT + col * (PANEL_W + GAP_X), TOP + row * (PANEL_H + GAP_Y), trace, c, f"{policy}, c={c}, {l}x")
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("csv", help="the CSV of bench/limit_sim --csv")
    parser.add_argument("--svg", default="docs/bench/limit.svg", help="where to write the plot")
    args = parser.parse_args()
    traces, policies = load(args.csv)
    plot(traces, policies, args.svg)
    print(f"wrote {args.svg}: {len(policies)} algorithms and settings")


if __name__ == "__main__":
    main()
