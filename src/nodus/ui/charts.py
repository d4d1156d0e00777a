"""The page's charts, drawn on the server as SVG: metric curves and the attempts' timeline.

No charting library runs in the browser: a chart is a few hundred elements the server writes
once, so the page needs no script to draw, nothing is fetched at run time, and a test counts
what was drawn (one ``<circle class="pt">`` per point, one ``<polyline>`` per attempt).
Every label is escaped by :mod:`nodus.ui.html`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from nodus.ui.html import Markup, join, tag

__all__ = [
    "Bar",
    "ChartOptions",
    "Line",
    "Mark",
    "curve_chart",
    "duration_text",
    "ema",
    "log_ticks",
    "timeline",
]

WIDTH = 760  # the attempts' timeline
# A curve chart's drawing box: CSS stretches it to its column (two columns on a wide window,
# one on a narrow one), so text is drawn near its size on a common screen.
CHART_WIDTH, CHART_HEIGHT = 640, 260
_LEFT, _RIGHT, _TOP, _BOTTOM = 76, 16, 12, 44
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


@dataclass(frozen=True)
class ChartOptions:
    """How a reader asked the curves drawn (the metrics page's controls, kept in its query)."""

    smoothing: float = 0.0  # the EMA's weight on the past, 0 (off) to below 1
    log: bool = False  # the value axis in powers of ten; points at or below 0 left out
    time: bool = False  # x is seconds since the run started, not the step


def ema(values: list[float], weight: float) -> list[float]:
    """Exponential moving average, debiased as TensorBoard's smoothing is: the first values
    are not pulled towards 0. ``weight`` 0 gives the values back."""
    if weight <= 0:
        return list(values)
    out, last = [], 0.0
    for count, value in enumerate(values, start=1):
        last = last * weight + (1 - weight) * value
        out.append(last / (1 - weight**count))
    return out


def curve_chart(
    title: str, lines: list[Line], marks: list[Mark], options: ChartOptions | None = None
) -> Markup:
    """A metric over steps (or time): for each line a polyline and a circle per point (with
    ``smoothing``, the smoothed line and the raw one faint behind it), vertical marks, axis
    labels; each circle carries the words the page's script shows on hover."""
    options = options or ChartOptions()
    shown, dropped = _for_axis(lines, options.log)
    xs = [x for line in shown for x, _ in line.points] + [mark.x for mark in marks]
    ys = [y for line in shown for _, y in line.points]
    sx = _Scale(min(xs or [0.0]), max(xs or [1.0]), _LEFT, CHART_WIDTH - _RIGHT)
    sy = _Scale(min(ys or [0.0]), max(ys or [1.0]), CHART_HEIGHT - _BOTTOM, _TOP)
    parts: list[Markup] = [_axes(sx, sy, title, options)]
    parts += [_mark(mark, sx) for mark in marks]
    for line in shown:
        parts.append(_line(line, sx, sy, options))
    caption: list[Any] = [title]
    if dropped:
        caption.append(tag("span", {"class": "note"}, f" · {dropped} point(s) ≤ 0 not drawn"))
    return tag(
        "figure",
        {"class": "chart", "data_metric": title},
        tag("figcaption", None, *caption),
        tag(
            "svg",
            {
                "class": "curves",
                "viewBox": f"0 0 {CHART_WIDTH} {CHART_HEIGHT}",
                "width": "100%",
                "role": "img",
                "aria_label": title,
                "data_log": "1" if options.log else None,
            },
            *parts,
        ),
        tag("div", {"class": "hover", "hidden": True}, ""),
        _legend(lines),
    )


def _for_axis(lines: list[Line], log: bool) -> tuple[list[Line], int]:
    """The lines as the value axis holds them: on a log axis, log10 of the positive values
    (and how many points at or below 0 were left out)."""
    if not log:
        return lines, 0
    out, dropped = [], 0
    for line in lines:
        kept = [(x, math.log10(y)) for x, y in line.points if y > 0]
        dropped += len(line.points) - len(kept)
        if kept:
            out.append(Line(line.label, line.color, kept, line.dashed))
    return out, dropped


def _mark(mark: Mark, sx: _Scale) -> Markup:
    x = sx(mark.x)
    return tag(
        "line",
        {"class": f"mark {mark.kind}", "x1": x, "x2": x, "y1": _TOP, "y2": CHART_HEIGHT - _BOTTOM},
        tag("title", None, mark.label),
    )


def _line(line: Line, sx: _Scale, sy: _Scale, options: ChartOptions) -> Markup:
    color = PALETTE[line.color % len(PALETTE)]
    raw = [y for _, y in line.points]
    drawn = ema(raw, options.smoothing) if not options.log else _log_ema(raw, options.smoothing)
    points = [(x, y) for (x, _), y in zip(line.points, drawn)]
    parts = []
    if options.smoothing > 0:  # the raw values stay, faint, behind the smoothed line
        parts.append(_polyline(line, line.points, sx, sy, color, "raw"))
    parts.append(_polyline(line, points, sx, sy, color, None))
    for (x, y), value in zip(points, raw):
        shown = _num(10**y if options.log else y)
        said = f"{line.label}: {shown}"
        if options.smoothing > 0:
            said += f" (raw {_num(10**value if options.log else value)})"
        where = _x_text(x, options)
        parts.append(
            tag(
                "circle",
                {
                    "class": "pt",
                    "cx": sx(x),
                    "cy": sy(y),
                    "r": 2.5,
                    "fill": color,
                    "data_at": where,
                    "data_value": said,
                },
                tag("title", None, f"{said} at {where}"),
            )
        )
    return tag("g", {"class": "series"}, *parts)


def _log_ema(logged: list[float], weight: float) -> list[float]:
    """On a log axis the average is taken of the values, then drawn as their log."""
    smoothed = ema([10**y for y in logged], weight)
    return [math.log10(v) if v > 0 else y for v, y in zip(smoothed, logged)]


def _polyline(
    line: Line,
    points: list[tuple[float, float]],
    sx: _Scale,
    sy: _Scale,
    color: str,
    kind: str | None,
) -> Markup:
    return tag(
        "polyline",
        {
            "class": kind,
            "points": " ".join(f"{sx(x)},{sy(y)}" for x, y in points),
            "fill": "none",
            "stroke": color,
            "stroke_width": 1.6,
            "stroke_dasharray": "5 3" if line.dashed else None,
            "data_label": None if kind else line.label,
        },
    )


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


def _axes(sx: _Scale, sy: _Scale, title: str, options: ChartOptions) -> Markup:
    right, bottom = CHART_WIDTH - _RIGHT, CHART_HEIGHT - _BOTTOM
    parts = [
        tag("line", {"class": "axis", "x1": _LEFT, "x2": right, "y1": bottom, "y2": bottom}),
        tag("line", {"class": "axis", "x1": _LEFT, "x2": _LEFT, "y1": _TOP, "y2": bottom}),
    ]
    y_ticks = log_ticks(sy.low, sy.high) if options.log else _ticks(sy.low, sy.high)
    for value in y_ticks:
        y = sy(value)
        parts.append(tag("line", {"class": "grid", "x1": _LEFT, "x2": right, "y1": y, "y2": y}))
        text = _num(10**value) if options.log else _num(value)
        attrs = {"class": "tick y", "x": _LEFT - 6, "y": y + 4, "text_anchor": "end"}
        parts.append(tag("text", attrs, text))
    for value in _ticks(sx.low, sx.high):
        attrs = {"class": "tick x", "x": sx(value), "y": bottom + 16, "text_anchor": "middle"}
        parts.append(tag("text", attrs, _x_tick(value, sx, options)))
    x_label = "time since the run started (from its snapshots' times)" if options.time else "step"
    parts.append(
        tag(
            "text",
            {
                "class": "label x",
                "x": (_LEFT + right) / 2,
                "y": CHART_HEIGHT - 6,
                "text_anchor": "middle",
            },
            x_label,
        )
    )
    y_label = f"{title} (log scale)" if options.log else title
    parts.append(
        tag(
            "text",
            {
                "class": "label y",
                "x": -(_TOP + bottom) / 2,
                "y": 14,
                "text_anchor": "middle",
                "transform": "rotate(-90)",
            },
            y_label,
        )
    )
    return join(parts)


def log_ticks(low: float, high: float) -> list[float]:
    """Ticks for a log axis whose ends are ``low`` and ``high`` (log10 of values): the powers
    of ten between them, with 2 and 5 times them when fewer than three powers fit; as log10."""
    first, last = math.floor(low), math.ceil(high)
    powers = [float(p) for p in range(first, last + 1) if low - 1e-9 <= p <= high + 1e-9]
    if len(powers) >= 3:
        return powers
    ticks = [
        math.log10(m * 10.0**p)
        for p in range(first, last + 1)
        for m in (1, 2, 5)
        if low - 1e-9 <= math.log10(m * 10.0**p) <= high + 1e-9
    ]
    return ticks if len(ticks) >= 2 else [low, high]


def _x_text(x: float, options: ChartOptions) -> str:
    """Where a point lies, as hover says it: ``step 40`` or ``12.5 s``."""
    return duration_text(x) if options.time else f"step {_num(x)}"


def _x_tick(value: float, sx: _Scale, options: ChartOptions) -> str:
    return duration_text(value, sx.high - sx.low) if options.time else _num(value)


def duration_text(seconds: float, span: float | None = None) -> str:
    """Seconds in the unit the span reads best in (s, min, h): ``90 s``, ``2.5 min``."""
    span = seconds if span is None else span
    if span >= 7200:
        return f"{_num(round(seconds / 3600, 2))} h"
    if span >= 120:
        return f"{_num(round(seconds / 60, 2))} min"
    return f"{_num(round(seconds, 2))} s"


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
