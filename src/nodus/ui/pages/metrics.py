"""The metrics page (``/runs/RUN/metrics``): a run's logged metrics over steps, one line per
attempt, marks at its snapshots and recoveries, from :meth:`nodus.Client.metrics` (what
``nodus runs plot`` draws); ``?with=OTHER`` overlays another run."""

from __future__ import annotations

import bisect
import csv
import io
import itertools
import re
from typing import Any
from urllib.parse import urlencode

from nodus.client import Client
from nodus.ui.charts import ChartOptions, Line, Mark, curve_chart
from nodus.ui.html import Markup, join, tag
from nodus.ui.pages.layout import Page, run_href, seconds

__all__ = [
    "CSV_HEADER",
    "MAX_CHARTS",
    "NO_METRICS",
    "SMOOTHING",
    "chart_options",
    "chosen",
    "csv_text",
    "metrics_csv",
    "metrics_page",
    "step_time",
]

MAX_CHARTS = 6  # charts a page draws, unless more are always drawn; ?all=1 draws every one

NO_METRICS = (
    "No metrics logged that nodus can read. It reads TensorBoard event files under runs/ "
    "or lightning_logs/ (SummaryWriter, Lightning), Lightning's metrics.csv, JSON lines "
    '({"step": 10, "loss": 0.5}) in metrics.jsonl or state/metrics.jsonl, a Transformers '
    "Trainer's trainer_state.json, and the file or folder [continuity] metrics names in the "
    'workload file (docs/recovery.md, "Metrics").'
)


SMOOTHING = (0.0, 0.6, 0.8, 0.9, 0.95, 0.99)  # the weights the smoothing select offers


def chart_options(query: dict[str, str]) -> ChartOptions:
    """The reader's choices from the page's query (``smooth``, ``y=log``, ``x=time``); a value
    not offered is the default, never an error: the address came from the page's own form."""
    try:
        smoothing = float(query.get("smooth") or 0)
    except ValueError:
        smoothing = 0.0
    return ChartOptions(
        smoothing=smoothing if smoothing in SMOOTHING else 0.0,
        log=query.get("y") == "log",
        time=query.get("x") == "time",
    )


def metrics_page(
    client: Client,
    ref: str,
    other: str | None,
    every: bool = False,
    options: ChartOptions | None = None,
) -> Page:
    """A run's metric curves per step (per attempt), snapshot and recovery marks; with
    ``other``, that run's curves overlaid; with ``every``, every metric logged; ``options``:
    smoothing, a log scale, a time axis."""
    options = options or ChartOptions()
    runs = [client.get(ref)]
    if other:
        runs.append(client.get(other))
    series = [client.metrics(run["id"]) for run in runs]
    clocks: list[_Clock | None] = [None] * len(runs)
    if options.time:
        clocks = _clocks(client, runs)
    names: list[str] = []
    for one in series:
        for stage in one:
            names += [n for n in stage["curves"] if n not in names]
    drawn, left = chosen(names, every)
    charts = [_chart(name, runs, series, clocks, options) for name in drawn]
    if not charts:
        known = sum(len(s["snapshots"]) for s in series[0])
        charts.append(
            tag("p", {"class": "empty"}, f"{NO_METRICS} Only its {known} snapshot(s) are known.")
        )
    href = run_href(runs[0]["id"]) + "/metrics"
    back = tag("p", None, tag("a", {"href": run_href(runs[0]["id"])}, f"← {runs[0]['id']}"))
    title = f"Metrics · {runs[0]['name']}" + (f" vs {runs[1]['name']}" if other else "")
    changing = any(run["finished_at"] is None for run in runs)
    parts = [
        back,
        _controls(href, other, every, options),
        _downloads(runs),
        tag("div", {"class": "charts"}, *charts),
        _more(href, other, left),
    ]
    return Page(title, join(parts), changing, "runs")


def metrics_csv(client: Client, ref: str) -> tuple[str, str]:
    """Every series of a run as CSV (``/runs/RUN/metrics.csv``): one row per logged value,
    ``run,stage,attempt,metric,step,value``, the attempt being the one whose line draws it;
    and the file's name."""
    run = client.get(ref)
    rows = []
    for stage in client.metrics(run["id"]):
        for name in stage["curves"]:
            for number, line in _attempt_lines(run, stage, name, 0, False):
                rows += [(run["id"], stage["stage"], number, name, x, y) for x, y in line.points]
    return csv_text(rows), f"{run['id']}-metrics.csv"


CSV_HEADER = ("run", "stage", "attempt", "metric", "step", "value")


def csv_text(rows: list[tuple[str, str, int, str, float, float]]) -> str:
    """The rows under :data:`CSV_HEADER`, steps as whole numbers and values as Python's
    shortest exact decimal (``repr``), so a spreadsheet reads back what was logged."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_HEADER)
    for run, stage, attempt, name, step, value in rows:
        writer.writerow((run, stage, attempt, name, _whole(step), repr(value)))
    return out.getvalue()


def _whole(step: float) -> str:
    return str(int(step)) if float(step).is_integer() else repr(step)


def chosen(names: list[str], every: bool) -> tuple[list[str], list[str]]:
    """The metrics drawn and those left out. Always drawn, first: loss, the reward and each of
    its components (a GRPO run's ``rewards/NAME/mean``: which reward moved is what its
    author looks for), eval loss, learning rate and grad norm; then the others (by name, as
    :meth:`nodus.Client.metrics` orders them) up to :data:`MAX_CHARTS` charts."""
    ranked = [(rank, n) for n in names if (rank := _rank(n)) is not None]
    first = [n for _, n in sorted(ranked, key=lambda pair: pair[0])]  # stable: by name within
    rest = [n for n in names if n not in first]
    if every:
        return first + rest, []
    room = max(MAX_CHARTS - len(first), 0)
    return first + rest[:room], rest[room:]


_RANKS = {"loss": 0, "reward": 1, "eval_loss": 3, "learning_rate": 4, "grad_norm": 5}
_REWARD_COMPONENT = re.compile(r"rewards/.+/mean")  # TRL's GRPOTrainer: one per reward function


def _rank(name: str) -> int | None:
    """Where an always-drawn metric goes (a reward component right after the reward)."""
    return 2 if _REWARD_COMPONENT.fullmatch(name) else _RANKS.get(name)


def _chart(
    name: str,
    runs: list[dict[str, Any]],
    series: list[list[dict[str, Any]]],
    clocks: list[_Clock | None],
    options: ChartOptions,
) -> Markup:
    lines, marks = [], []
    for index, (run, stages, clock) in enumerate(zip(runs, series, clocks)):
        for stage in stages:
            for number, line in _attempt_lines(run, stage, name, index, len(runs) > 1):
                if clock is not None:
                    line = clock.line(stage["stage"], number, line)
                lines.append(line)
            if index == 0:
                marks += _marks(stage) if clock is None else clock.marks(stage)
    return curve_chart(name, lines, marks, options)


def _controls(href: str, other: str | None, every: bool, options: ChartOptions) -> Markup:
    """The overlay, smoothing, y scale and x axis: a plain GET form (the page's script applies
    a change at once; without it, the button does), so the choices live in the address and
    survive the page's live refresh."""
    smoothing = [
        tag(
            "option",
            {"value": _num_text(w), "selected": w == options.smoothing},
            "no smoothing" if w == 0 else f"smoothing {_num_text(w)}",
        )
        for w in SMOOTHING
    ]
    y_scale = [
        tag("option", {"value": "linear", "selected": not options.log}, "linear scale"),
        tag("option", {"value": "log", "selected": options.log}, "log scale"),
    ]
    x_axis = [
        tag("option", {"value": "step", "selected": not options.time}, "x: step"),
        tag("option", {"value": "time", "selected": options.time}, "x: time"),
    ]
    return tag(
        "form",
        {"class": "filters chart-controls", "method": "get", "action": href},
        tag(
            "input",
            {"name": "with", "value": other or "", "placeholder": "overlay a run: id or key"},
        ),
        tag("select", {"name": "smooth", "aria_label": "smoothing"}, *smoothing),
        tag("select", {"name": "y", "aria_label": "y scale"}, *y_scale),
        tag("select", {"name": "x", "aria_label": "x axis"}, *x_axis),
        tag("input", {"type": "hidden", "name": "all", "value": "1"}) if every else Markup(),
        tag("button", {"type": "submit"}, "Overlay / apply"),
    )


def _downloads(runs: list[dict[str, Any]]) -> Markup:
    links = [
        tag(
            "a",
            {"href": run_href(run["id"]) + "/metrics.csv", "download": True, "class": "csv"},
            f"{run['id']}: every series as CSV",
        )
        for run in runs
    ]
    return tag("p", {"class": "downloads"}, join(links, " · "))


def _num_text(weight: float) -> str:
    return "0" if weight == 0 else f"{weight:g}"


def _more(href: str, other: str | None, left: list[str]) -> Markup:
    """The metrics not drawn, by name, and a link that draws them all."""
    if not left:
        return Markup()
    query = urlencode({"all": "1", **({"with": other} if other else {})})
    return tag(
        "p",
        {"class": "more"},
        f"{len(left)} more metric(s): {', '.join(left)}. ",
        tag("a", {"href": f"{href}?{query}", "rel": "all"}, "Draw them all"),
    )


def _attempt_lines(
    run: dict[str, Any], stage: dict[str, Any], name: str, color: int, prefixed: bool
) -> list[tuple[int, Line]]:
    """The curve cut where each later attempt restored: one line per attempt, with its
    number."""
    points = [(float(s), float(v)) for s, v in stage["curves"].get(name, [])]
    cuts = [float(step) for step, _ in stage["restarts"]]
    prefix = f"{run['id']} " if prefixed else ""
    lines = []
    bounds = [float("-inf"), *cuts, float("inf")]
    for number, (low, high) in enumerate(itertools.pairwise(bounds), start=1):
        mine = [(s, v) for s, v in points if low < s <= high or (number == 1 and s == low)]
        if mine:
            label = f"{prefix}{stage['stage']} attempt {number}"
            # one colour per run and attempt: a run's later attempts dashed, in its next shade
            shade = 3 * color + min(number - 1, 2)
            lines.append((number, Line(label, shade, mine, dashed=number > 1)))
    return lines


def _marks(stage: dict[str, Any]) -> list[Mark]:
    marks = [
        Mark(float(step), "snapshot", f"snapshot at step {step}") for step, _ in stage["snapshots"]
    ]
    for step, label in stage["restarts"]:
        kind = "recovery" if label.startswith("recovery") else "resume"
        marks.append(Mark(float(step), kind, label))
    return marks


# --- the time axis ------------------------------------------------------------------------------


def step_time(anchors: list[tuple[float, float]], step: float) -> float:
    """The time of ``step`` from ``(step, seconds)`` anchors sorted by step (an attempt's start
    at the step it restored, each snapshot it committed): linear between the two around it,
    beyond the last at the last stretch's pace; one anchor alone gives its own time."""
    if len(anchors) == 1:
        return anchors[0][1]
    steps = [s for s, _ in anchors]
    at = min(max(bisect.bisect_right(steps, step), 1), len(anchors) - 1)
    (s0, t0), (s1, t1) = anchors[at - 1], anchors[at]
    if s1 == s0:
        return t1
    return t0 + (step - s0) * (t1 - t0) / (s1 - s0)


class _Clock:
    """One run's steps as seconds since its first attempt started, per attempt, from the
    times nodus knows: each attempt's start and each snapshot's commit. The logged points
    carry no time of their own, so a point between two saves is placed at the pace between
    them (the axis says so)."""

    def __init__(self, run: dict[str, Any], snapshots: dict[str, dict[str, Any]]) -> None:
        starts = [a["started_at"] for s in run["stages"] for a in s["attempts"]]
        self.zero = min((seconds(t) for t in starts), default=0.0)
        self.anchors: dict[tuple[str, int], list[tuple[float, float]]] = {}
        self.saves: dict[str, list[tuple[float, float]]] = {}
        for stage in run["stages"]:
            for attempt in stage["attempts"]:
                start = (float(attempt["restored_step"] or 0), seconds(attempt["started_at"]))
                self.anchors[(stage["name"], attempt["number"])] = [start]
        for snap in snapshots.values():
            if snap["step"] is None:
                continue
            point = (float(snap["step"]), float(snap["created"]))
            self.anchors.setdefault((snap["stage"], snap["attempt"]), []).append(point)
            self.saves.setdefault(snap["stage"], []).append(point)
        for points in self.anchors.values():
            points.sort()

    def line(self, stage: str, attempt: int, line: Line) -> Line:
        anchors = self.anchors.get((stage, attempt))
        if not anchors:
            return Line(line.label, line.color, [], line.dashed)
        moved = [(step_time(anchors, x) - self.zero, y) for x, y in line.points]
        return Line(line.label, line.color, moved, line.dashed)

    def marks(self, stage: dict[str, Any]) -> list[Mark]:
        """:func:`_marks` on the time axis: snapshots when committed, each later attempt
        when it started."""
        name = stage["stage"]
        marks = [
            Mark(at - self.zero, "snapshot", f"snapshot at step {_whole(step)}")
            for step, at in self.saves.get(name, [])
        ]
        for number, (_step, label) in enumerate(stage["restarts"], start=2):
            anchors = self.anchors.get((name, number))
            if anchors:
                kind = "recovery" if label.startswith("recovery") else "resume"
                marks.append(Mark(anchors[0][1] - self.zero, kind, label))
        return marks


def _clocks(client: Client, runs: list[dict[str, Any]]) -> list[_Clock | None]:
    found = client.run_metrics([run["id"] for run in runs])
    return [_Clock(run, found.get(run["id"], {}).get("snapshots", {})) for run in runs]
