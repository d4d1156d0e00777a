"""The metrics a directory-contract program logs, as its attempt goes: read from its logs
(:mod:`nodus.stages.metric_logs`), kept beside the attempt's output, and given to each of its
snapshots.

The working copy is laid out again for every attempt, so whatever the logs held is gone once
the next attempt starts: each point read is appended at once to the attempt's
``metrics.jsonl`` (:func:`nodus.runner.workspace.layout.attempt_metrics`), one JSON line per
step, which ``nodus runs plot`` joins into the run's curves. A kill of the runner may cut that
file's last line; its readers pass over a torn line. A snapshot at a step carries the last
value of each name logged at or before it (:func:`nodus.stages.metric_logs.at_step`), of what
the program had written to its logs when the snapshot was taken.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import Any

from nodus._atomic import create_private, private_folder
from nodus.runner.workspace.layout import Workspace
from nodus.stages.metric_logs import PLACES, MetricLogs, Point, at_step

__all__ = ["MetricTap"]

METRICS_READ_S = 2.0
"""How often a directory-contract program's logs are read on while it trains
(:mod:`nodus.runner.capture.metrics`); always just before a snapshot, and once at its end."""


class MetricTap:
    """One attempt's logged metrics: read at most every ``METRICS_READ_S`` while it
    trains, at once before a snapshot, and one last time when the program has ended."""

    def __init__(
        self,
        ws: Workspace,
        place: str | None,
        clock: Callable[[], float],
        event: Callable[[str, dict[str, Any]], None],
    ) -> None:
        self.logs = MetricLogs(ws.copy, (place,) if place else PLACES)
        self.path = ws.metrics_path
        self.points: list[Point] = []
        self._clock = clock
        self._event = event  # the run's event log: what could not be read, said once
        self._read_at = float("-inf")
        self._noted = 0
        self._unkept = False

    def poll(self) -> None:
        """Read on, unless it was read within ``METRICS_READ_S``."""
        if self._clock() - self._read_at >= METRICS_READ_S:
            self.read()

    def read(self, final: bool = False) -> None:
        """Read the logs on from where they stopped, and keep what they held."""
        self._read_at = self._clock()
        new = self.logs.read(final)
        for why in self.logs.notes[self._noted :]:
            self._event("metrics_unread", {"why": why})
        self._noted = len(self.logs.notes)
        if not new:
            return
        self.points += new
        lines = "".join(json.dumps({"step": step, **values}) + "\n" for step, values in new)
        try:
            private_folder(os.path.dirname(self.path))
            with os.fdopen(create_private(self.path, os.O_WRONLY | os.O_APPEND), "a") as kept:
                kept.write(lines)
        except OSError as error:  # a full disk: the snapshots still get them, the curves not
            if not self._unkept:
                self._unkept = True
                self._event("metrics_unread", {"why": f"not kept in {self.path}: {error}"})

    def at(self, step: int | None) -> dict[str, float]:
        """What a snapshot at ``step`` carries: the logs read now, the last value of each
        name logged at or before it. ``None``: a snapshot numbered by its capture's count,
        whose step says nothing of the logs' steps: the last value of each name logged."""
        self.read()
        return at_step(self.points, sys.maxsize if step is None else step)
