"""Validation curves of several runs against wall time, as one SVG (for docs/experiments.md).

Each argument is LABEL=RUN_DIR; the curve is RUN_DIR/metrics.csv's val_loss (the 20 fixed
batches) against its elapsed_s. Standard library only:

    python bench/plot_curves.py --out docs/figures/default-study-curves.svg \
        "3 layers, dropout 0.1, β2 0.95=checkpoints/nd-tied" "new default=checkpoints/l2-d05-12k"

Not part of the tests or CI.
"""
import argparse
import csv
import os
import sys
from xml.sax.saxutils import escape

# In every drawing of this script: the one kind of file it writes over.
MARK = "<!-- drawn by bench/plot_curves.py -->"
COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"]
WIDTH, HEIGHT, LEFT, RIGHT, TOP, BOTTOM = 800, 500, 70, 20, 40, 50


def read(run):
    with open(f"{run}/metrics.csv", newline="") as f:
        return [(float(r["elapsed_s"]), float(r["val_loss"])) for r in csv.DictReader(f)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--title", default="validation loss (20 fixed batches) against wall time")
    ap.add_argument("--min-loss", type=float, default=4.3)
    ap.add_argument("--max-loss", type=float, default=5.0)
    ap.add_argument("runs", nargs="+", help="LABEL=RUN_DIR")
    args = ap.parse_args()
    if os.path.exists(args.out) and MARK not in open(args.out, encoding="utf-8", errors="replace").read(4096):
        sys.exit(f"plot_curves.py: {args.out} exists and is no drawing of this script: it is left as it is; choose another --out")
    curves = [(label, read(run)) for label, run in (a.rsplit("=", 1) for a in args.runs)]
    max_t = max(t for _, points in curves for t, _ in points)
    lo, hi = args.min_loss, args.max_loss
    x = lambda t: LEFT + (WIDTH - LEFT - RIGHT) * t / max_t
    y = lambda v: TOP + (HEIGHT - TOP - BOTTOM) * (hi - min(max(v, lo), hi)) / (hi - lo)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" font-family="sans-serif">',
           MARK,
           f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
           f'<text x="{WIDTH / 2}" y="24" text-anchor="middle" font-size="18">{escape(args.title)}</text>']
    for minute in range(0, int(max_t // 60) + 1):
        px = x(minute * 60)
        out.append(f'<line x1="{px:.1f}" y1="{TOP}" x2="{px:.1f}" y2="{HEIGHT - BOTTOM}" stroke="#ddd"/>')
        out.append(f'<text x="{px:.1f}" y="{HEIGHT - BOTTOM + 18}" text-anchor="middle" font-size="12">{minute}</text>')
    steps = round((hi - lo) / 0.1)
    for i in range(steps + 1):
        v = lo + i * 0.1
        out.append(f'<line x1="{LEFT}" y1="{y(v):.1f}" x2="{WIDTH - RIGHT}" y2="{y(v):.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{LEFT - 6}" y="{y(v) + 4:.1f}" text-anchor="end" font-size="12">{v:.1f}</text>')
    out.append(f'<text x="{WIDTH / 2}" y="{HEIGHT - 12}" text-anchor="middle" font-size="13">minutes of training</text>')
    for i, (label, points) in enumerate(curves):
        colour = COLOURS[i % len(COLOURS)]
        path = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in points)
        out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
        ly = TOP + 14 + 18 * i
        out.append(f'<line x1="{WIDTH - 330}" y1="{ly}" x2="{WIDTH - 305}" y2="{ly}" stroke="{colour}" stroke-width="2"/>')
        out.append(f'<text x="{WIDTH - 300}" y="{ly + 4}" font-size="12">{escape(label)}</text>')
    out.append("</svg>")
    with open(args.out, "w", encoding="utf-8") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
