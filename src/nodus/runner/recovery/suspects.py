"""Stepping past a snapshot the program cannot continue from.

Every check before a commit (settle time, layouts, formats, the time rule) judges bytes; only
the program can say whether it loads them. So a restored attempt whose program exits non-zero
before it committed a snapshot of its own makes the snapshot it restored **suspect**: an event
``snapshot_suspect {snapshot, step, error}`` names it and the last line the program wrote, restores
pass over it, and the next attempt starts from the next older snapshot (a recovery, counted
against ``max_recoveries``).

The bound: a program that fails for another reason (a bug, bad data, a full disk) fails the
same way from every snapshot, and must not walk back through a whole history. At most
:data:`~nodus.schemas.MAX_STEP_BACK` snapshots are stepped past in a row (a row ends
when an attempt commits a snapshot); the next failure ends the run, naming every snapshot
tried. A failure the integration reported (a refused resume) or a command that could not start
says nothing about the snapshot and is never a reason to step back.

:func:`decide` is the pure decision; the runner records what it says.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from nodus.store.restorable import newest_first

__all__ = [
    "EVENT",
    "ROW_EVENTS",
    "StepBack",
    "decide",
    "last_error_line",
    "suspected",
    "usable",
]

MAX_STEP_BACK = 2
"""Snapshots a stage steps past in a row when restored attempts fail before committing
anything (nodus.runner.recovery.suspects); the next such failure ends the run."""

EVENT = "snapshot_suspect"
_COMMITTED = "snapshot_committed"
ROW_EVENTS = (EVENT, _COMMITTED)
"""The events :func:`decide` reads."""
_LAST_LINE_BYTES = 8192
_LINE_CHARS = 300


@dataclass(frozen=True)
class StepBack:
    """What follows a restored attempt whose program failed before it committed anything."""

    tried: tuple[dict[str, Any], ...]  # the suspects of this row, oldest first, this one last
    go_on: bool  # restore the next older snapshot; otherwise the run fails
    why: str  # in words: what was tried, and why not further when it stops


def suspected(
    events: Iterable[dict[str, Any]], stage: str | None = None
) -> dict[str, dict[str, Any]]:
    """Each suspect snapshot of a run's ``events`` (of ``stage``, or any): its event details."""
    return {
        event["details"]["snapshot"]: event["details"]
        for event in events
        if event["type"] == EVENT and (stage is None or event["stage"] == stage)
    }


def usable(
    manifests: Iterable[Any],
    events: Iterable[dict[str, Any]],
    stage: str,
    older_than: str | None = None,
) -> list[Any]:
    """The restorable snapshots of ``stage`` newest first, suspects passed over (what an
    automatic recovery, ``runs resume`` and ``runs pause --checkpoint latest`` may use); with
    ``older_than`` (a suspect's id) only those a restore ranks below it: a step back never
    steps forward (after ``runs resume --step 10`` failed, a step 30 is no way back)."""
    passed = suspected(events, stage)
    ranked = newest_first(manifests)
    order = [m.id for m in ranked]
    below = order.index(older_than) + 1 if older_than in order else 0
    return [m for m in ranked[below:] if m.id not in passed and m.id != older_than]


def decide(
    events: Sequence[dict[str, Any]],
    stage: str,
    suspect: dict[str, Any],
    older: Sequence[Any],
    recoveries: int,
    max_recoveries: int,
) -> StepBack:
    """Whether to restore the newest of ``older`` (restorable snapshots not suspected) after
    ``suspect`` (the new event's details) failed, given the run's ``events`` so far."""
    tried = (*_row(events, stage), suspect)
    named = ", ".join(f"{d['snapshot']} (step {d['step']})" for d in tried)
    if len(tried) > MAX_STEP_BACK:
        why = f"restores of {named} all failed; at most {MAX_STEP_BACK} are stepped past"
        return StepBack(tried, False, why)
    if not older:
        return StepBack(tried, False, f"restores of {named} failed and no older snapshot is left")
    if recoveries >= max_recoveries:
        why = (
            f"restores of {named} failed; max_recoveries = {max_recoveries} automatic "
            "recoveries are used up"
        )
        return StepBack(tried, False, why)
    why = f"restores of {named} failed: stepping back to step {older[0].step}"
    return StepBack(tried, True, why)


def _row(events: Sequence[dict[str, Any]], stage: str) -> list[dict[str, Any]]:
    """The stage's suspects since its last commit, oldest first."""
    row: list[dict[str, Any]] = []
    for event in events:
        if event["stage"] != stage:
            continue
        if event["type"] == _COMMITTED:
            row = []
        elif event["type"] == EVENT:
            row.append(event["details"])
    return row


def last_error_line(log_path: str | None) -> str:
    """The last non-empty line the program wrote (a traceback's last line says what failed)."""
    if not log_path:
        return ""
    try:
        with open(log_path, "rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            handle.seek(max(0, size - _LAST_LINE_BYTES))
            tail = handle.read().decode("utf-8", "replace")
    except OSError:
        return ""
    lines = [line.strip() for line in tail.splitlines() if line.strip()]
    return lines[-1][:_LINE_CHARS] if lines else ""
