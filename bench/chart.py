#!/usr/bin/env python3
"""bench/chart.py - messages per minute over time, as a dependency-free SVG.

Reads postal-style CSV files (header `time,messages,data(K),errors,
connections,SSL connections`, one row per interval) and draws one polyline
per file: x = minutes since the start (end of each interval), y = messages
per minute (messages of the row scaled by 60/interval).

Usage:
  python3 bench/chart.py --out chart.svg [--title T] [--interval 60]
      [--rows N] [--column C --raw --ylabel TEXT --unit TEXT]
      LABEL=FILE.csv [LABEL=FILE.csv ...]

--rows N keeps only the first N rows of every file (the full intervals;
a generator's last row may cover a partial interval).

Other series (e.g. spool disk use sampled every second, bench/pinning.sh):
--column C takes the values from column C (0-based; default 1, messages),
--raw plots them as they are (no per-minute scaling; the legend then shows
the peak instead of the average), --ylabel names the y axis and --unit is
appended to the legend's figure. Rows whose first field is `time` or
`secs` (headers) are skipped.
"""

import argparse
import csv
import html
import math
import sys

COLORS = ["#d62728", "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"]


def read_series(path, rows, column=1):
    ys = []
    with open(path, newline="") as f:
        for rec in csv.reader(f):
            if not rec or not rec[0] or rec[0] in ("time", "secs") or rec[0].startswith("BENCH"):
                continue
            try:
                ys.append(float(rec[column]))
            except (IndexError, ValueError):
                continue
    if rows is not None:
        ys = ys[:rows]
    return ys


def nice_step(span, target=6):
    """A round tick step (1, 2, 2.5 or 5 x 10^k) giving about `target` ticks."""
    if span <= 0:
        return 1
    raw = span / target
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        if raw <= m * mag:
            return m * mag
    return 10 * mag


def fmt_num(v):
    if v == int(v):
        return "{:,}".format(int(v))
    return "{:,.2f}".format(v).rstrip("0").rstrip(".")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--title", default="Messages per minute")
    ap.add_argument("--interval", type=float, default=60.0, help="seconds per CSV row")
    ap.add_argument("--rows", type=int, default=None)
    ap.add_argument("--column", type=int, default=1, help="0-based CSV column of the values")
    ap.add_argument("--raw", action="store_true", help="plot values as they are, not per minute")
    ap.add_argument("--ylabel", default="messages per minute (accepted)")
    ap.add_argument("--unit", default="/min", help="after the legend's figure")
    ap.add_argument("series", nargs="+", help="LABEL=FILE.csv")
    a = ap.parse_args()

    scale = 1.0 if a.raw else 60.0 / a.interval
    series = []
    for s in a.series:
        label, _, path = s.partition("=")
        if not path:
            sys.exit("chart.py: series must be LABEL=FILE, got %r" % s)
        ys = [y * scale for y in read_series(path, a.rows, a.column)]
        series.append((label, ys))

    W, H = 900, 520
    ml, mr, mt, mb = 90, 30, 50, 95  # margins: left, right, top, bottom
    pw, ph = W - ml - mr, H - mt - mb
    npts = max([len(ys) for _, ys in series] + [1])
    xmax = npts * a.interval / 60.0
    ymax = max([max(ys) for _, ys in series if ys] + [1])
    ystep = nice_step(ymax)
    ytop = math.ceil(ymax * 1.08 / ystep) * ystep
    xstep = nice_step(xmax, target=10)
    if a.interval >= 60:
        xstep = max(1, round(xstep))

    def X(m):
        return ml + pw * (m / xmax if xmax else 0)

    def Y(v):
        return mt + ph * (1 - v / ytop)

    out = []
    out.append('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
               'viewBox="0 0 %d %d" font-family="sans-serif" font-size="13">' % (W, H, W, H))
    out.append('<rect width="100%" height="100%" fill="white"/>')
    out.append('<text x="%d" y="28" text-anchor="middle" font-size="16" font-weight="bold">%s</text>'
               % (W // 2, html.escape(a.title)))
    # grid and y ticks
    v = 0.0
    while v <= ytop + 1e-9:
        y = Y(v)
        out.append('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#e0e0e0"/>' % (ml, y, ml + pw, y))
        out.append('<text x="%d" y="%.1f" text-anchor="end" dominant-baseline="middle">%s</text>'
                   % (ml - 8, y, fmt_num(v)))
        v += ystep
    # x ticks
    m = 0.0
    while m <= xmax + 1e-9:
        x = X(m)
        out.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#e0e0e0"/>' % (x, mt, x, mt + ph))
        out.append('<text x="%.1f" y="%d" text-anchor="middle">%s</text>' % (x, mt + ph + 20, fmt_num(m)))
        m += xstep
    # axes
    out.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>' % (ml, mt + ph, ml + pw, mt + ph))
    out.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>' % (ml, mt, ml, mt + ph))
    out.append('<text x="%d" y="%d" text-anchor="middle">minutes since start</text>'
               % (ml + pw // 2, mt + ph + 42))
    out.append('<text x="22" y="%d" text-anchor="middle" transform="rotate(-90 22 %d)">'
               '%s</text>' % (mt + ph // 2, mt + ph // 2, html.escape(a.ylabel)))
    # series
    for i, (label, ys) in enumerate(series):
        color = COLORS[i % len(COLORS)]
        pts = " ".join("%.1f,%.1f" % (X((k + 1) * a.interval / 60.0), Y(y)) for k, y in enumerate(ys))
        if len(ys) == 1:
            x, y = X(a.interval / 60.0), Y(ys[0])
            out.append('<circle cx="%.1f" cy="%.1f" r="4" fill="%s"/>' % (x, y, color))
        elif ys:
            out.append('<polyline fill="none" stroke="%s" stroke-width="2.5" points="%s"/>' % (color, pts))
            for k, y in enumerate(ys if len(ys) <= 120 else []):
                out.append('<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>'
                           % (X((k + 1) * a.interval / 60.0), Y(y), color))
    # legend: one row below the x-axis label, outside the plot area
    lx, ly = ml, H - 18
    for i, (label, ys) in enumerate(series):
        color = COLORS[i % len(COLORS)]
        if a.raw:
            what, fig = "peak", max(ys) if ys else 0
        else:
            what, fig = "avg", sum(ys) / len(ys) if ys else 0
        out.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="3"/>'
                   % (lx, ly, lx + 25, ly, color))
        out.append('<text x="%d" y="%d" dominant-baseline="middle">%s (%s %s%s)</text>'
                   % (lx + 32, ly, html.escape(label), what, fmt_num(round(fig)), html.escape(a.unit)))
        lx += 260
    out.append("</svg>")
    with open(a.out, "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
