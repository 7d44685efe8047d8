"""Small inline SVG charts for the dashboard: lines over time and labelled bars.

Server-rendered markup, no JavaScript and no chart library: a chart is a pure
function of its numbers, so it is tested without a browser and drawn by any.
Colours come from CSS classes (`series-0`, `series-1`, ...), never inline
styles, so the dashboard's Content-Security-Policy can forbid inline styles.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

from markupsafe import Markup, escape

WIDTH = 640
HEIGHT = 200
PAD_LEFT = 44
PAD_RIGHT = 12
PAD_TOP = 14
PAD_BOTTOM = 28

Point = tuple[float, float]


def _fmt(value: float) -> str:
    return f"{value:.1f}"


def _label(value: float) -> str:
    return f"{value:.3g}"


def _clock(epoch: float) -> str:
    return time.strftime("%H:%M", time.gmtime(epoch))


def line_chart(
    series: Mapping[str, Sequence[Point]],
    *,
    title: str,
    y_min: float | None = None,
    y_max: float | None = None,
    x_is_time: bool = True,
    hlines: Mapping[str, float] | None = None,
) -> Markup:
    """A line per named series of (x, y) points, with axes, a legend and reference lines.

    `hlines` draws dashed horizontal lines (a threshold, an alarm level) by label.
    An empty chart says so instead of drawing nothing.
    """
    points = [p for values in series.values() for p in values]
    hlines = dict(hlines or {})
    parts = [(f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
              f'aria-label="{escape(title)}" xmlns="http://www.w3.org/2000/svg">'),
             f"<title>{escape(title)}</title>"]
    if not points:
        parts.append(f'<text class="empty" x="{WIDTH / 2}" y="{HEIGHT / 2}" '
                     'text-anchor="middle">no data yet</text></svg>')
        return Markup("".join(parts))
    xs = [x for x, _ in points]
    ys = [y for _, y in points] + list(hlines.values())
    x0, x1 = min(xs), max(xs)
    lo = min(ys) if y_min is None else y_min
    hi = max(ys) if y_max is None else y_max
    if x1 == x0:
        x1 = x0 + 1.0
    if hi == lo:
        hi = lo + 1.0
    plot_w = WIDTH - PAD_LEFT - PAD_RIGHT
    plot_h = HEIGHT - PAD_TOP - PAD_BOTTOM

    def sx(x: float) -> float:
        return PAD_LEFT + (x - x0) / (x1 - x0) * plot_w

    def sy(y: float) -> float:
        return PAD_TOP + (1.0 - (y - lo) / (hi - lo)) * plot_h

    bottom = PAD_TOP + plot_h
    parts.append(f'<line class="axis" x1="{PAD_LEFT}" y1="{bottom}" x2="{WIDTH - PAD_RIGHT}" '
                 f'y2="{bottom}"/>')
    parts.append(f'<line class="axis" x1="{PAD_LEFT}" y1="{PAD_TOP}" x2="{PAD_LEFT}" '
                 f'y2="{bottom}"/>')
    for value in (lo, (lo + hi) / 2, hi):
        parts.append(f'<text class="tick" x="{PAD_LEFT - 4}" y="{_fmt(sy(value) + 4)}" '
                     f'text-anchor="end">{escape(_label(value))}</text>')
    for value, anchor in ((x0, "start"), (x1, "end")):
        text = _clock(value) if x_is_time else _label(value)
        parts.append(f'<text class="tick" x="{_fmt(sx(value))}" y="{HEIGHT - 8}" '
                     f'text-anchor="{anchor}">{escape(text)}</text>')
    for label, value in hlines.items():
        level = _fmt(sy(value))
        parts.append(f'<line class="hline" x1="{PAD_LEFT}" y1="{level}" x2="{WIDTH - PAD_RIGHT}" '
                     f'y2="{level}"/><text class="hline-label" x="{WIDTH - PAD_RIGHT - 2}" '
                     f'y="{_fmt(sy(value) - 3)}" text-anchor="end">{escape(label)}</text>')
    for index, (name, values) in enumerate(series.items()):
        cls = f"series-{index % 6}"
        if len(values) == 1:
            x, y = values[0]
            parts.append(f'<circle class="{cls}" cx="{_fmt(sx(x))}" cy="{_fmt(sy(y))}" r="3"/>')
        elif values:
            path = " ".join(f"{_fmt(sx(x))},{_fmt(sy(y))}" for x, y in values)
            parts.append(f'<polyline class="line {cls}" points="{path}"/>')
        parts.append(f'<rect class="{cls}" x="{PAD_LEFT + 8 + index * 120}" y="2" width="10" '
                     f'height="10"/><text class="legend" x="{PAD_LEFT + 22 + index * 120}" '
                     f'y="11">{escape(name)}</text>')
    parts.append("</svg>")
    return Markup("".join(parts))


def bar_chart(counts: Mapping[str, int | float], *, title: str) -> Markup:
    """Horizontal bars, one per label, each with its count written beside it."""
    rows = list(counts.items())
    bar_h = 22
    height = max(40, PAD_TOP + len(rows) * bar_h + 8)
    label_w = 150
    parts = [(f'<svg class="chart bars" viewBox="0 0 {WIDTH} {height}" role="img" '
              f'aria-label="{escape(title)}" xmlns="http://www.w3.org/2000/svg">'),
             f"<title>{escape(title)}</title>"]
    if not rows:
        parts.append(f'<text class="empty" x="{WIDTH / 2}" y="{height / 2}" '
                     'text-anchor="middle">no data yet</text></svg>')
        return Markup("".join(parts))
    top = max(float(v) for _, v in rows) or 1.0
    span = WIDTH - label_w - 60
    for index, (label, count) in enumerate(rows):
        y = PAD_TOP + index * bar_h
        width = float(count) / top * span
        parts.append(f'<text class="tick" x="{label_w - 6}" y="{y + 14}" '
                     f'text-anchor="end">{escape(label)}</text>')
        parts.append(f'<rect class="bar series-{index % 6}" x="{label_w}" y="{y + 3}" '
                     f'width="{_fmt(width)}" height="{bar_h - 8}"/>')
        parts.append(f'<text class="count" x="{_fmt(label_w + width + 6)}" y="{y + 14}">'
                     f"{escape(_label(float(count)))}</text>")
    parts.append("</svg>")
    return Markup("".join(parts))
