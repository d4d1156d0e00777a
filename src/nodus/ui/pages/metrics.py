"""The metrics page (``/runs/RUN/metrics``): a run's logged metrics over steps, one line per
attempt, marks at its snapshots and recoveries, from :meth:`nodus.Client.metrics` (what
``nodus runs plot`` draws); ``?with=OTHER`` overlays another run."""

from __future__ import annotations

import itertools
import re
from typing import Any
from urllib.parse import urlencode

from nodus.client import Client
from nodus.ui.charts import Line, Mark, curve_chart
from nodus.ui.html import Markup, join, tag
from nodus.ui.pages.layout import Page, run_href

__all__ = ["MAX_CHARTS", "NO_METRICS", "chosen", "metrics_page"]

MAX_CHARTS = 6  # charts a page draws, unless more are always drawn; ?all=1 draws every one

NO_METRICS = (
    "No metrics logged that nodus can read. It reads TensorBoard event files under runs/ "
    "or lightning_logs/ (SummaryWriter, Lightning), Lightning's metrics.csv, JSON lines "
    '({"step": 10, "loss": 0.5}) in metrics.jsonl or state/metrics.jsonl, a Transformers '
    "Trainer's trainer_state.json, and the file or folder [continuity] metrics names in the "
    'workload file (docs/recovery.md, "Metrics").'
)


def metrics_page(client: Client, ref: str, other: str | None, every: bool = False) -> Page:
    """A run's metric curves per step (per attempt), snapshot and recovery marks; with
    ``other``, that run's curves overlaid; with ``every``, every metric logged."""
    runs = [client.get(ref)]
    if other:
        runs.append(client.get(other))
    series = [client.metrics(run["id"]) for run in runs]
    names: list[str] = []
    for one in series:
        for stage in one:
            names += [n for n in stage["curves"] if n not in names]
    drawn, left = chosen(names, every)
    charts = [_chart(name, runs, series) for name in drawn]
    if not charts:
        known = sum(len(s["snapshots"]) for s in series[0])
        charts.append(
            tag("p", {"class": "empty"}, f"{NO_METRICS} Only its {known} snapshot(s) are known.")
        )
    href = run_href(runs[0]["id"]) + "/metrics"
    back = tag("p", None, tag("a", {"href": run_href(runs[0]["id"])}, f"← {runs[0]['id']}"))
    title = f"Metrics · {runs[0]['name']}" + (f" vs {runs[1]['name']}" if other else "")
    changing = any(run["finished_at"] is None for run in runs)
    parts = [back, _overlay(href, other), *charts, _more(href, other, left)]
    return Page(title, join(parts), changing, "runs")


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


def _chart(name: str, runs: list[dict[str, Any]], series: list[list[dict[str, Any]]]) -> Markup:
    lines, marks = [], []
    for index, (run, stages) in enumerate(zip(runs, series)):
        for stage in stages:
            lines += _attempt_lines(run, stage, name, index, len(runs) > 1)
            if index == 0:
                marks += _marks(stage)
    return curve_chart(name, lines, marks)


def _overlay(href: str, other: str | None) -> Markup:
    return tag(
        "form",
        {"class": "filters", "method": "get", "action": href},
        tag(
            "input",
            {"name": "with", "value": other or "", "placeholder": "overlay a run: id or key"},
        ),
        tag("button", {"type": "submit"}, "Overlay"),
    )


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
) -> list[Line]:
    """The curve cut where each later attempt restored: one line per attempt."""
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
            lines.append(Line(label, 3 * color + min(number - 1, 2), mine, dashed=number > 1))
    return lines


def _marks(stage: dict[str, Any]) -> list[Mark]:
    marks = [
        Mark(float(step), "snapshot", f"snapshot at step {step}") for step, _ in stage["snapshots"]
    ]
    for step, label in stage["restarts"]:
        kind = "recovery" if label.startswith("recovery") else "resume"
        marks.append(Mark(float(step), kind, label))
    return marks
