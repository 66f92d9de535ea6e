"""Line charts as SVG text, written by the benchmark suite itself: no plotting package to install
beside the build's dependencies (Debian's python3-matplotlib cannot be installed next to
libboost1.81-dev). One chart per call: numeric x, one or more named series, axes with ticks,
a title and a legend. Standard library only."""

import math
from xml.sax.saxutils import escape

WIDTH, HEIGHT = 640, 400
LEFT, RIGHT, TOP, BOTTOM = 70, 170, 40, 50  # margins: y labels, legend, title, x labels
COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2"]


def nice_ticks(lo, hi, count=5):
    """About `count` round tick values covering [lo, hi]."""
    if hi <= lo:
        hi = lo + 1
    raw = (hi - lo) / count
    step = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        if raw <= m * step:
            step *= m
            break
    first = math.floor(lo / step) * step
    ticks, t = [], first
    while t <= hi + step * 1e-9:
        ticks.append(round(t, 10))
        t += step
    if ticks[-1] < hi:
        ticks.append(round(ticks[-1] + step, 10))
    return ticks


def fmt(v):
    return f"{v:g}"


def line_chart(title, xlabel, ylabel, series):
    """series: [(name, [(x, y), ...]), ...]. Returns the SVG document as a string. The y axis
    starts at 0 (these are latencies and durations: a ratio between lines is read off it)."""
    points = [p for _, pts in series for p in pts]
    if not points:
        raise ValueError("no points to plot")
    xs = nice_ticks(min(x for x, _ in points), max(x for x, _ in points))
    ys = nice_ticks(0, max(y for _, y in points))
    pw, ph = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def px(x):
        return LEFT + (x - xs[0]) / (xs[-1] - xs[0]) * pw

    def py(y):
        return TOP + ph - (y - ys[0]) / (ys[-1] - ys[0]) * ph

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
           f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">',
           f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
           f'<text x="{LEFT + pw / 2:.1f}" y="22" text-anchor="middle" font-size="14">'
           f'{escape(title)}</text>']
    for t in ys:
        y = py(t)
        out.append(f'<line x1="{LEFT}" y1="{y:.1f}" x2="{LEFT + pw}" y2="{y:.1f}" '
                   'stroke="#ddd"/>')
        out.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{fmt(t)}</text>')
    for t in xs:
        x = px(t)
        out.append(f'<line x1="{x:.1f}" y1="{TOP + ph}" x2="{x:.1f}" y2="{TOP + ph + 5}" '
                   'stroke="black"/>')
        out.append(f'<text x="{x:.1f}" y="{TOP + ph + 18}" text-anchor="middle">{fmt(t)}</text>')
    out.append(f'<polyline points="{LEFT},{TOP} {LEFT},{TOP + ph} {LEFT + pw},{TOP + ph}" '
               'fill="none" stroke="black"/>')
    out.append(f'<text x="{LEFT + pw / 2:.1f}" y="{HEIGHT - 12}" text-anchor="middle">'
               f'{escape(xlabel)}</text>')
    out.append(f'<text x="16" y="{TOP + ph / 2:.1f}" text-anchor="middle" '
               f'transform="rotate(-90 16 {TOP + ph / 2:.1f})">{escape(ylabel)}</text>')
    for i, (name, pts) in enumerate(series):
        color = COLORS[i % len(COLORS)]
        coords = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in sorted(pts))
        out.append(f'<polyline class="series" data-name="{escape(name, {chr(34): "&quot;"})}" '
                   f'points="{coords}" fill="none" stroke="{color}" stroke-width="2"/>')
        for x, y in pts:
            out.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{color}"/>')
        ly = TOP + 10 + 18 * i
        out.append(f'<line x1="{LEFT + pw + 12}" y1="{ly}" x2="{LEFT + pw + 32}" y2="{ly}" '
                   f'stroke="{color}" stroke-width="2"/>')
        out.append(f'<text x="{LEFT + pw + 36}" y="{ly + 4}">{escape(name)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"
