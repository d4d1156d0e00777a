"""A run at a glance, for ``nodus runs list``: how long it ran, its step and its newest loss.

Read for a whole page in three catalog statements (its stages with their attempts, and each
run's newest ``snapshot_committed`` event) and one small file per run: never a run's store,
so the listing stays as quick as the catalog (docs/benchmarks.md). The step and the loss come
from what the runner keeps of its newest attempt: the ``progress.json`` an integration's
program writes (its step and last logged loss), else the metrics the runner read from a
directory-contract program's logs (``metrics.jsonl`` beside its output, only its tail read);
without either, the step is the newest committed snapshot's (``capture N`` where the step was
counted, docs/recovery.md, "The step of a snapshot").
"""

from __future__ import annotations

import math
import os
import time
from typing import Any

from nodus.inventory.runs import read_progress
from nodus.runner.catalog.connection import stamp_seconds
from nodus.runner.catalog.core import Catalog, Run
from nodus.runner.catalog.phases import Phase
from nodus.runner.workspace.layout import attempt_metrics
from nodus.stages.metric_logs import read_jsonl

__all__ = ["LOSS", "glances", "newest_loss", "run_duration"]

LOSS = "loss"  # the logged metric the listing shows
_LOSS_KEY = f'"{LOSS}"'  # as JSON writes the key
_TAIL_BYTES = 64 * 1024  # of an attempt's metrics.jsonl: its newest lines, whatever its length


def glances(catalog: Catalog, runs: list[Run]) -> dict[str, dict[str, Any]]:
    """Per run id: ``{duration_seconds, step, capture, loss}`` (``runs list --json``'s), each
    None where it is not known (no attempt started, nothing logged or committed)."""
    ids = [run.id for run in runs]
    stages = catalog.stages_of(ids)
    newest = catalog.newest_events(ids, "snapshot_committed")
    return {
        run.id: _glance(catalog.home, run, stages.get(run.id, []), newest.get(run.id))
        for run in runs
    }


def _glance(home: str, run: Run, stages: list[dict], committed: dict | None) -> dict[str, Any]:
    attempts = [(s["name"], a) for s in stages for a in s["attempts"]]
    started = min((a["started_at"] for _, a in attempts), default=None)
    step, loss = _logged(home, run.id, attempts)
    capture = None
    if step is None and committed is not None:
        details = committed["details"]
        if details.get("counted"):  # a counted step is no step of the program's
            capture = details.get("step")
        else:
            step = details.get("step")
    return {
        "duration_seconds": None  # no attempt started yet
        if started is None
        else run_duration(started, run.finished_at, run.updated_at, run.phase),
        "step": step,
        "capture": capture,
        "loss": loss,
    }


def _logged(home: str, run_id: str, attempts: list[tuple[str, dict]]) -> tuple[Any, Any]:
    """The newest attempt's step and loss, from its progress or its logged metrics."""
    if not attempts:
        return None, None
    stage, attempt = max(attempts, key=lambda pair: pair[1]["started_at"] or "")
    progress = None
    if attempt["started_at"]:
        progress = read_progress(home, run_id, stage, stamp_seconds(attempt["started_at"]))
    step, loss = _newest_logged(_tail_lines(attempt["log_path"]))
    if progress is not None:
        step = progress.step
        loss = progress.loss if progress.loss is not None else loss
    return step, loss


def _newest_logged(lines: list[str]) -> tuple[int | None, float | None]:
    """The newest logged step and loss, the lines read from the newest back only as far as
    a loss: one line, mostly, whatever the file's length."""
    step = None
    for line in reversed(lines):
        if step is not None and _LOSS_KEY not in line:
            continue  # no loss in it: not worth parsing
        points = read_jsonl([line])
        if not points:
            continue  # torn by a kill, or no step: passed over
        if step is None:
            step = points[0][0]
        loss = newest_loss(points)
        if loss is not None:
            return step, loss
    return step, None


def newest_loss(points: list[tuple[int, dict[str, float]]]) -> float | None:
    """The value of the newest point that logged a finite loss."""
    for _, values in reversed(points):
        value = values.get(LOSS)
        if isinstance(value, (int, float)) and math.isfinite(value):
            return float(value)
    return None


def _tail_lines(log_path: str | None) -> list[str]:
    """The last lines of the attempt's ``metrics.jsonl`` (none without one)."""
    if not log_path:
        return []
    try:
        with open(attempt_metrics(log_path), "rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            handle.seek(max(size - _TAIL_BYTES, 0))
            text = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return []
    lines = text.splitlines()
    return lines[1:] if size > _TAIL_BYTES else lines  # the first, most likely a piece of one


def run_duration(started: str | None, finished: str | None, updated: str, phase: Any) -> float:
    """Seconds from the first attempt's start to the end (or to now, while it goes on)."""
    if started is None:
        return 0.0
    end = stamp_seconds(finished) if finished else None
    if end is None:
        end = time.time() if not Phase(phase).stopped else stamp_seconds(updated)
    return round(max(end - stamp_seconds(started), 0.0), 1)
