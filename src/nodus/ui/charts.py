"""The page's charts, drawn on the server as SVG: metric curves and the attempts' timeline.

No charting library runs in the browser: a chart is a few hundred elements the server writes
once, so the page needs no script to draw, nothing is fetched at run time, and a test counts
what was drawn (one ``<circle class="pt">`` per point, one ``<polyline>`` per attempt).
Every label is escaped by :mod:`nodus.ui.html`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from nodus.ui.html import Markup, join, tag

__all__ = ["Bar", "Line", "Mark", "curve_chart", "timeline"]

WIDTH, HEIGHT = 760, 220
_LEFT, _RIGHT, _TOP, _BOTTOM = 64, 16, 14, 30
PALETTE = ("#2563eb", "#ea580c", "#16a34a", "#9333ea", "#0891b2", "#be123c")


@dataclass
class Line:
    """One attempt's stretch of one run's curve."""

    label: str
    color: int  # index into PALETTE: the run
    points: list[tuple[float, float]]
    dashed: bool = False  # a later attempt of the same run


@dataclass
class Mark:
    """A vertical line at a step: ``snapshot``, ``recovery`` or ``resume``."""

    x: float
    kind: str
    label: str


def curve_chart(title: str, lines: list[Line], marks: list[Mark]) -> Markup:
    """A metric over steps: a polyline and a circle per point for each line, vertical marks."""
    xs = [x for line in lines for x, _ in line.points] + [mark.x for mark in marks]
    ys = [y for line in lines for _, y in line.points]
    if not xs:
        xs = [0.0, 1.0]
    if not ys:
        ys = [0.0, 1.0]
    sx = _Scale(min(xs), max(xs), _LEFT, WIDTH - _RIGHT)
    sy = _Scale(min(ys), max(ys), HEIGHT - _BOTTOM, _TOP)
    parts: list[Markup] = [_axes(sx, sy)]
    for mark in marks:
        x = sx(mark.x)
        parts.append(
            tag(
                "line",
                {
                    "class": f"mark {mark.kind}",
                    "x1": x,
                    "x2": x,
                    "y1": _TOP,
                    "y2": HEIGHT - _BOTTOM,
                },
                tag("title", None, mark.label),
            )
        )
    for line in lines:
        parts.append(_line(line, sx, sy))
    return tag(
        "figure",
        {"class": "chart", "data_metric": title},
        tag("figcaption", None, title),
        tag(
            "svg",
            {
                "viewBox": f"0 0 {WIDTH} {HEIGHT}",
                "width": WIDTH,
                "height": HEIGHT,
                "role": "img",
                "aria_label": title,
            },
            *parts,
        ),
        _legend(lines),
    )


def _line(line: Line, sx: _Scale, sy: _Scale) -> Markup:
    color = PALETTE[line.color % len(PALETTE)]
    coords = " ".join(f"{sx(x)},{sy(y)}" for x, y in line.points)
    circles = [
        tag(
            "circle",
            {"class": "pt", "cx": sx(x), "cy": sy(y), "r": 2.5, "fill": color},
            tag("title", None, f"{line.label}: step {_num(x)}, {_num(y)}"),
        )
        for x, y in line.points
    ]
    polyline = tag(
        "polyline",
        {
            "points": coords,
            "fill": "none",
            "stroke": color,
            "stroke_width": 1.6,
            "stroke_dasharray": "5 3" if line.dashed else None,
            "data_label": line.label,
        },
    )
    return tag("g", {"class": "series"}, polyline, *circles)


def _legend(lines: list[Line]) -> Markup:
    items = []
    seen = set()
    for line in lines:
        if line.label in seen:
            continue
        seen.add(line.label)
        swatch = tag("span", {"class": f"swatch c{line.color % len(PALETTE)}"}, "")
        items.append(tag("li", None, swatch, line.label))
    marks = [
        tag("li", None, tag("span", {"class": "swatch snapshot"}, ""), "snapshot"),
        tag("li", None, tag("span", {"class": "swatch recovery"}, ""), "recovery / resume"),
    ]
    return tag("ul", {"class": "legend"}, *items, *marks)


def _axes(sx: _Scale, sy: _Scale) -> Markup:
    parts = [
        tag(
            "line",
            {
                "class": "axis",
                "x1": _LEFT,
                "x2": WIDTH - _RIGHT,
                "y1": HEIGHT - _BOTTOM,
                "y2": HEIGHT - _BOTTOM,
            },
        ),
        tag(
            "line", {"class": "axis", "x1": _LEFT, "x2": _LEFT, "y1": _TOP, "y2": HEIGHT - _BOTTOM}
        ),
    ]
    for value in _ticks(sy.low, sy.high):
        y = sy(value)
        parts.append(
            tag("line", {"class": "grid", "x1": _LEFT, "x2": WIDTH - _RIGHT, "y1": y, "y2": y})
        )
        parts.append(
            tag(
                "text",
                {"class": "tick", "x": _LEFT - 6, "y": y + 4, "text_anchor": "end"},
                _num(value),
            )
        )
    for value in _ticks(sx.low, sx.high):
        x = sx(value)
        parts.append(
            tag(
                "text",
                {"class": "tick", "x": x, "y": HEIGHT - 10, "text_anchor": "middle"},
                _num(value),
            )
        )
    return join(parts)


class _Scale:
    """Values ``low..high`` onto pixels ``start..end`` (a flat range is widened)."""

    def __init__(self, low: float, high: float, start: float, end: float) -> None:
        if high - low < 1e-12:
            low, high = low - 1, high + 1
        self.low, self.high, self.start, self.end = low, high, start, end

    def __call__(self, value: float) -> float:
        share = (value - self.low) / (self.high - self.low)
        return round(self.start + share * (self.end - self.start), 1)


def _ticks(low: float, high: float, count: int = 5) -> list[float]:
    """About ``count`` round values between low and high."""
    span = high - low
    raw = span / max(count - 1, 1)
    magnitude = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    first = math.ceil(low / step) * step
    ticks: list[float] = []
    value = first
    while value <= high + step * 1e-9 and len(ticks) < 12:
        ticks.append(round(value, 12))
        value += step
    return ticks


def _num(value: float) -> str:
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.4g}"


# --- the attempts' timeline --------------------------------------------------------------------


@dataclass
class Bar:
    """One attempt on the timeline: seconds since the run's first start."""

    row: str  # the stage
    start: float
    end: float
    outcome: str  # the attempt's outcome, or "running"
    label: str
    marks: list[tuple[float, str, str]] = field(default_factory=list)  # (at, kind, words)


def timeline(bars: list[Bar], total: float) -> Markup:
    """Stages as rows, attempts as bars coloured by how they ended, with pause and
    interruption marks."""
    rows = list(dict.fromkeys(bar.row for bar in bars))
    height = 26 * len(rows) + 30
    scale = _Scale(0.0, max(total, 1e-3), 110, WIDTH - _RIGHT)
    parts: list[Markup] = []
    for index, row in enumerate(rows):
        y = 8 + 26 * index
        parts.append(tag("text", {"class": "row", "x": 4, "y": y + 14}, row))
    for bar in bars:
        y = 8 + 26 * rows.index(bar.row)
        x1, x2 = scale(bar.start), scale(bar.end)
        parts.append(
            tag(
                "rect",
                {
                    "class": f"attempt {bar.outcome}",
                    "x": x1,
                    "y": y,
                    "width": max(x2 - x1, 2),
                    "height": 18,
                    "rx": 3,
                },
                tag("title", None, bar.label),
            )
        )
        parts.append(
            tag("text", {"class": "bar", "x": x1 + 4, "y": y + 13}, bar.label.split(":")[0])
        )
        for at, kind, words in bar.marks:
            x = scale(at)
            parts.append(
                tag(
                    "line",
                    {"class": f"mark {kind}", "x1": x, "x2": x, "y1": y - 3, "y2": y + 21},
                    tag("title", None, words),
                )
            )
    for value in _ticks(0.0, max(total, 1e-3)):
        parts.append(
            tag(
                "text",
                {"class": "tick", "x": scale(value), "y": height - 6, "text_anchor": "middle"},
                f"{_num(value)} s",
            )
        )
    return tag(
        "svg",
        {"class": "timeline", "viewBox": f"0 0 {WIDTH} {height}", "width": WIDTH, "height": height},
        *parts,
    )
