"""Server-rendered SVG charts for the console's stats page: no script, no
library, nothing fetched at run time. Every text in the SVG is escaped
(``markupsafe.escape``); numbers are formatted here.

``line_chart`` draws one polyline per series over shared x labels (None values
leave a gap); ``bar_chart`` one horizontal bar per label; ``timeline_chart`` a
person's valence and arousal per day on one axis from -1 to 1, with their
strongest memories as points. Each returns ``markupsafe.Markup`` for a Jinja2
template with autoescape on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape

__all__ = ["line_chart", "bar_chart", "timeline_chart", "TimelinePoint", "COLOURS"]

#: Series colours, in order (Okabe & Ito 2008, readable with colour blindness).
COLOURS = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000")
_W, _H, _L, _R, _T, _B = 640, 220, 48, 28, 14, 34


def _num(v: float) -> str:
    return f"{v:.0f}" if abs(v) >= 10 or v == int(v) else f"{v:.1f}"


def line_chart(series: Mapping[str, Sequence[float | None]], labels: Sequence[str], *, unit: str = "") -> Markup:
    """An SVG line chart (640×220 view box, scales to its container): one
    polyline and legend entry per series of ``series`` (values per x label of
    ``labels``; None: no value that day), y from 0 to the largest value.
    ``unit`` is appended to the y axis' top label. Raises ValueError when a
    series is not as long as ``labels``."""
    for name, values in series.items():
        if len(values) != len(labels):
            raise ValueError(f"series {name!r} has {len(values)} values for {len(labels)} labels")
    top = max([v for vs in series.values() for v in vs if v is not None] + [1.0])
    pw, ph = _W - _L - _R, _H - _T - _B
    n = max(len(labels), 1)

    def x(i: int) -> float:
        return _L + (pw * i / (n - 1) if n > 1 else pw / 2)

    def y(v: float) -> float:
        return _T + ph - ph * v / top

    parts = [f'<svg class="chart" viewBox="0 0 {_W} {_H}" role="img" xmlns="http://www.w3.org/2000/svg">',
             f'<line x1="{_L}" y1="{_T + ph}" x2="{_W - _R}" y2="{_T + ph}" class="axis"/>',
             f'<line x1="{_L}" y1="{_T}" x2="{_L}" y2="{_T + ph}" class="axis"/>',
             f'<text x="{_L - 4}" y="{_T + 4}" text-anchor="end">{escape(_num(top) + unit)}</text>',
             f'<text x="{_L - 4}" y="{_T + ph + 4}" text-anchor="end">0</text>']
    step = max(1, n // 7)
    for i, label in enumerate(labels):
        if i % step == 0 or i == n - 1:
            parts.append(f'<text x="{x(i):.1f}" y="{_H - _B + 16}" text-anchor="middle">{escape(label)}</text>')
    for k, (name, values) in enumerate(series.items()):
        colour = COLOURS[k % len(COLOURS)]
        run: list[str] = []
        runs: list[list[str]] = [run]
        for i, v in enumerate(values):
            if v is None:
                run = []
                runs.append(run)
                continue
            run.append(f"{x(i):.1f},{y(v):.1f}")
            parts.append(f'<circle cx="{x(i):.1f}" cy="{y(v):.1f}" r="2.5" fill="{colour}">'
                         f'<title>{escape(name)} {escape(labels[i])}: {escape(_num(v))}</title></circle>')
        for r in runs:
            if len(r) > 1:
                parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{" ".join(r)}"/>')
        lx = _L + 8 + k * 110
        parts.append(f'<rect x="{lx}" y="{_H - 12}" width="10" height="10" fill="{colour}"/>'
                     f'<text x="{lx + 14}" y="{_H - 3}">{escape(name)}</text>')
    parts.append("</svg>")
    return Markup("".join(parts))


def bar_chart(values: Mapping[str, float]) -> Markup:
    """An SVG chart of horizontal bars, one per label of ``values`` (≥ 0), longest
    at the largest value; an empty mapping draws an empty frame."""
    rows = list(values.items())
    h = 24 * max(len(rows), 1) + 8
    top = max([v for _, v in rows] + [1.0])
    parts = [f'<svg class="chart" viewBox="0 0 {_W} {h}" role="img" xmlns="http://www.w3.org/2000/svg">']
    for i, (label, v) in enumerate(rows):
        w = (_W - 260) * v / top
        yy = 6 + i * 24
        parts.append(f'<text x="196" y="{yy + 14}" text-anchor="end">{escape(label[:32])}</text>'
                     f'<rect x="200" y="{yy}" width="{w:.1f}" height="18" fill="{COLOURS[i % len(COLOURS)]}"/>'
                     f'<text x="{204 + w:.1f}" y="{yy + 14}">{escape(_num(v))}</text>')
    parts.append("</svg>")
    return Markup("".join(parts))


@dataclass(frozen=True, slots=True)
class TimelinePoint:
    """A memory drawn on the timeline: ``index`` of its day among the labels,
    ``valence`` in [-1, 1] (its height), ``arousal`` in [0, 1] (its size) and
    ``title`` (shown on hover: the day and the memory's text)."""

    index: int
    valence: float
    arousal: float
    title: str


def timeline_chart(labels: Sequence[str], valence: Sequence[float | None], arousal: Sequence[float | None],
                   points: Sequence[TimelinePoint] = (), *, names: tuple[str, str, str] = ("valence", "arousal",
                                                                                           "moments")) -> Markup:
    """An SVG timeline (640×240 view box, scales to its container): ``valence``
    (in [-1, 1]) and ``arousal`` (in [0, 1]) per day of ``labels`` as two lines on
    one axis from -1 to 1 with its zero marked (None: no value that day; each line
    joins the days that have one, each such day a dot),
    and ``points`` as circles at their day and valence, larger with more arousal.
    ``names``: the legend's words for the two lines and the points. Raises
    ValueError when a series is not as long as ``labels`` or a point's index is
    outside them."""
    if len(valence) != len(labels) or len(arousal) != len(labels):
        raise ValueError("valence and arousal need one value (or None) per label")
    n = max(len(labels), 1)
    if any(not 0 <= p.index < n for p in points):
        raise ValueError("a point's index is outside the labels")
    h, t, b = 240, 14, 34
    pw, ph = _W - _L - _R, h - t - b

    def x(i: int) -> float:
        return _L + (pw * i / (n - 1) if n > 1 else pw / 2)

    def y(v: float) -> float:
        return t + ph * (1 - (max(-1.0, min(1.0, v)) + 1) / 2)

    parts = [f'<svg class="chart timeline" viewBox="0 0 {_W} {h}" role="img" xmlns="http://www.w3.org/2000/svg">',
             f'<line x1="{_L}" y1="{t + ph}" x2="{_W - _R}" y2="{t + ph}" class="axis"/>',
             f'<line x1="{_L}" y1="{t}" x2="{_L}" y2="{t + ph}" class="axis"/>',
             f'<line x1="{_L}" y1="{y(0):.1f}" x2="{_W - _R}" y2="{y(0):.1f}" class="axis" stroke-dasharray="4 3"/>']
    for v in (1, 0, -1):
        parts.append(f'<text x="{_L - 4}" y="{y(v) + 4:.1f}" text-anchor="end">{v}</text>')
    step = max(1, n // 7)
    for i, label in enumerate(labels):
        if i % step == 0 or i == n - 1:
            parts.append(f'<text x="{x(i):.1f}" y="{h - b + 16}" text-anchor="middle">{escape(label)}</text>')
    for k, (name, values) in enumerate(zip(names[:2], (valence, arousal))):
        colour = COLOURS[k]
        # a mood is told on some days only: the line joins the days that have one, each day a dot
        run = [f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(values) if v is not None]
        for xy in run:
            cx, cy = xy.split(",")
            parts.append(f'<circle cx="{cx}" cy="{cy}" r="2" fill="{colour}"/>')
        if len(run) > 1:
            parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{" ".join(run)}"/>')
    for p in points:
        parts.append(f'<circle class="moment" cx="{x(p.index):.1f}" cy="{y(p.valence):.1f}" '
                     f'r="{3 + 4 * max(0.0, min(1.0, p.arousal)):.1f}" fill="{COLOURS[3]}" fill-opacity="0.7">'
                     f'<title>{escape(p.title)}</title></circle>')
    for k, name in enumerate(names):
        lx = _L + 8 + k * 130
        parts.append(f'<rect x="{lx}" y="{h - 12}" width="10" height="10" fill="{COLOURS[(0, 1, 3)[k]]}"/>'
                     f'<text x="{lx + 14}" y="{h - 3}">{escape(name)}</text>')
    parts.append("</svg>")
    return Markup("".join(parts))
