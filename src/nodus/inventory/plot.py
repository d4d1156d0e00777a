"""``nodus runs plot``: a run's logged metrics over steps, its snapshots and its recoveries.

Where the curves come from: every snapshot carries the metrics logged at its step, and an
integration checkpoint also holds the Trainer's ``trainer_state.json`` whose ``log_history``
has every logged step up to that save. The newest snapshot of each stage therefore gives the
full curve of the path that led to it (steps an interrupted attempt trained past its last save
were repeated by the next attempt and are drawn once). A directory-contract program's curves
are what its attempts logged (TensorBoard, Lightning's ``metrics.csv``, JSON lines: the
runner keeps each attempt's beside its output, :mod:`nodus.runner.capture.metrics`), joined
the same way: each attempt's points replace the earlier attempts' after the step it restored
(or from its first logged step, when lower). A program that logs none of these shows its
snapshots alone.

Every snapshot is a marker on the curves; every attempt after a stage's first is a vertical
line at the step it restored (a recovery after an interruption, or a resume by hand).
matplotlib is imported here only, with the Agg backend: no display is needed.
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from nodus.errors import NotFoundError, SnapshotDamagedError
from nodus.runner.catalog.phases import AttemptOutcome
from nodus.runner.workspace.layout import attempt_metrics
from nodus.stages.metric_logs import Point, read_jsonl
from nodus.store.restorable import current

if TYPE_CHECKING:
    from nodus.store import Manifest, SnapshotStore

__all__ = ["Series", "collect", "draw", "series_json"]

_SKIP = {"epoch", "step", "total_flos"}  # bookkeeping values, not curves
_PREFERRED = ("loss", "reward", "eval_loss", "learning_rate", "grad_norm")
MAX_PANELS = 4


@dataclass
class Series:
    """What one stage contributes: per-step curves, snapshot points and restart lines."""

    stage: str
    curves: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    snapshots: list[tuple[int, dict[str, float]]] = field(default_factory=list)
    restarts: list[tuple[int, str]] = field(default_factory=list)  # (step, label)


def collect(store: SnapshotStore, catalog: Any, run: Any) -> list[Series]:
    """One :class:`Series` per stage that has committed snapshots or attempts."""
    manifests = current(store.list(run=run.id))  # a step captured again: its newest capture
    out = []
    for stage in run.stages:
        series = Series(stage["name"])
        own = [m for m in manifests if m.stage == stage["name"]]
        # A snapshot numbered by its capture's count has no place on the steps' axis.
        series.snapshots = [
            (m.step, _numbers(m.metrics)) for m in own if m.step is not None and not m.counted
        ]
        if own:
            series.curves = _history(store, own[-1])
        if not series.curves:
            series.curves = _logged(stage["attempts"])
        for name, value_points in _snapshot_curves(series.snapshots).items():
            series.curves.setdefault(name, value_points)
        series.restarts = _restarts(stage["attempts"])
        if series.snapshots or series.restarts or series.curves:
            out.append(series)
    if not out:
        raise NotFoundError(f"{run.id} has no snapshots and no attempts yet; nothing to plot")
    return out


def series_json(series: list[Series]) -> list[dict[str, Any]]:
    """What :func:`draw` draws, as JSON (``nodus ui``'s charts): per stage, each curve's
    ``[step, value]`` points in step order, the snapshots' ``[step, metrics]`` and the
    ``[step, label]`` of each attempt after the first (a recovery or a resume)."""
    return [
        {
            "stage": one.stage,
            "curves": {
                name: [[step, value] for step, value in sorted(points)]
                for name, points in sorted(one.curves.items(), key=lambda item: _order(item[0]))
            },
            "snapshots": [[step, metrics] for step, metrics in one.snapshots],
            "restarts": [[step, label] for step, label in one.restarts],
        }
        for one in series
    ]


def _order(name: str) -> tuple[int, str]:
    """The preferred metrics first (loss, reward, …), then the others by name."""
    return (_PREFERRED.index(name) if name in _PREFERRED else len(_PREFERRED), name)


def _history(store: SnapshotStore, manifest: Manifest) -> dict[str, list[tuple[int, float]]]:
    """Per-step curves from the newest snapshot's ``trainer_state.json`` (verified read)."""
    paths = [
        e.path
        for e in manifest.held_files()
        if e.path.endswith("trainer_state.json") and not e.is_link
    ]
    if not paths:
        return {}
    try:
        raw = store.read_file(manifest, max(paths))
    except SnapshotDamagedError:
        return {}  # a damaged file draws nothing rather than a wrong curve
    try:
        history = json.loads(raw).get("log_history") or []
    except ValueError:
        return {}
    curves: dict[str, list[tuple[int, float]]] = {}
    for record in history:
        step = record.get("step")
        for name, value in _numbers(record).items():
            if isinstance(step, int) and not name.startswith("train_"):
                curves.setdefault(name, []).append((step, value))
    return curves


def _logged(attempts: list[dict[str, Any]]) -> dict[str, list[tuple[int, float]]]:
    """Per-step curves from what each attempt logged, along the path that led to the last
    one: an attempt's points replace the earlier ones after the step it restored (all of them
    when it restored nothing), or from its first point when that is lower."""
    path: list[Point] = []
    for index, attempt in enumerate(attempts):
        mine = _attempt_points(attempt)
        if index:
            restored = attempt["restored_step"]
            cut = min([0 if restored is None else restored + 1, *(step for step, _ in mine)])
            path = [point for point in path if point[0] < cut]
        path += mine
    curves: dict[str, dict[int, float]] = {}
    for step, values in path:
        for name, value in _numbers(values).items():
            curves.setdefault(name, {})[step] = value  # a step logged twice: its last value
    return {name: sorted(points.items()) for name, points in curves.items()}


def _attempt_points(attempt: dict[str, Any]) -> list[Point]:
    if not attempt.get("log_path"):
        return []
    try:
        with open(attempt_metrics(attempt["log_path"]), encoding="utf-8", errors="replace") as f:
            return read_jsonl(f)
    except OSError:
        return []


def _snapshot_curves(
    points: list[tuple[int, dict[str, float]]],
) -> dict[str, list[tuple[int, float]]]:
    curves: dict[str, list[tuple[int, float]]] = {}
    for step, metrics in points:
        for name, value in metrics.items():
            curves.setdefault(name, []).append((step, value))
    return curves


def _numbers(metrics: dict[str, Any]) -> dict[str, float]:
    return {
        name: float(value)
        for name, value in metrics.items()
        if name not in _SKIP
        and isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
    }


def _restarts(attempts: list[dict[str, Any]]) -> list[tuple[int, str]]:
    lines = []
    for before, attempt in itertools.pairwise(attempts):
        why = "recovery" if before["outcome"] == AttemptOutcome.LOST else "resume"
        step = attempt["restored_step"] or 0
        lines.append((step, f"{why}: attempt {attempt['number']} from step {step}"))
    return lines


def draw(run: Any, series: list[Series], out_path: str) -> list[str]:
    """Draw the figure into ``out_path`` (PNG by its extension); the metrics drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = _panels(series)
    fig, axes = plt.subplots(
        len(names) or 1, 1, sharex=True, squeeze=False, figsize=(8, 2.6 * max(len(names), 1) + 0.6)
    )
    panels = [ax for (ax,) in axes]
    for index, one in enumerate(series):
        color = f"C{index}"
        label = one.stage if len(series) > 1 else None
        for ax, name in zip(panels, names or ["snapshots"]):
            _draw_panel(ax, one, name, color, label)
    for ax, name in zip(panels, names or ["snapshot"]):
        ax.set_ylabel(name)
        ax.grid(alpha=0.3)
    panels[-1].set_xlabel("optimizer step")
    panels[0].set_title(f"{run.name} — {run.id} ({run.phase})")
    handles, labels = panels[0].get_legend_handles_labels()
    if handles:
        unique = dict(zip(labels, handles))
        panels[0].legend(unique.values(), unique.keys(), fontsize=8, loc="best")
    fig.tight_layout()
    fig.savefig(out_path, dpi=110)
    plt.close(fig)
    return names


def _panels(series: list[Series]) -> list[str]:
    found = {name for one in series for name in one.curves}
    ordered = [name for name in _PREFERRED if name in found]
    ordered += sorted(found - set(ordered))
    return ordered[:MAX_PANELS]


def _draw_panel(ax: Any, one: Series, name: str, color: str, label: str | None) -> None:
    curve = sorted(one.curves.get(name, []))
    if curve:
        ax.plot(
            [s for s, _ in curve], [v for _, v in curve], color=color, linewidth=1.2, label=label
        )
    points = [(step, metrics[name]) for step, metrics in one.snapshots if name in metrics]
    if not one.curves:  # nothing logged: show the snapshots on a plain row
        points = [(step, 0.0) for step, _ in one.snapshots]
        ax.set_yticks([])
    if points:
        ax.scatter(
            [s for s, _ in points],
            [v for _, v in points],
            marker="o",
            s=28,
            facecolors="white",
            edgecolors=color,
            zorder=3,
            label="snapshot",
        )
    for step, text in one.restarts:
        ax.axvline(step, color="crimson", linestyle="--", linewidth=1, label=text.split(":")[0])
