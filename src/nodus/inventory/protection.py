"""Whether a run is protected: stated from what happened, never assumed.

A checkpointed stage is protected once it committed a snapshot an interruption can continue
from; until then, or if it never does, it is not, and the reason is said from the run's
events, first match wins:

    integration_unprepared       the integration ran the program unprepared (and why)
    checkpoint_incomplete        N checkpoints were incomplete (the first one's reason)
    capture_unsettled, or a      its saves came closer together than the settle time, so none
      capture_skipped "newer       settled while it trained
      checkpoints kept coming"
    capture_failed               its captures failed (the first reason)
    (none of these)              nothing was saved into its selection

A restored attempt whose program started over (``restore_ignored``) makes the stage "not
resuming": its snapshots are taken, but a recovery does not continue the training.

Pure over the stages' settings and rows and the run's events, so ``runs get``, the final line
of ``nodus run`` and ``nodus ui`` say the same words (tested as a table,
``tests/inventory/test_protection.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nodus import protocol

__all__ = ["NOT_RESUMING", "PROTECTED", "UNPROTECTED", "protection", "protection_line"]

PROTECTED = "protected"
UNPROTECTED = "unprotected"
NOT_RESUMING = "not resuming"
RESTARTABLE = "restartable"  # continuity mode restartable: its source is what it restarts from
_NEWER = "newer checkpoints kept coming"


def protection(
    stages: Sequence[dict[str, Any]], rows: Sequence[dict[str, Any]], events: Sequence[dict]
) -> dict[str, Any] | None:
    """``runs get``'s ``protection``: ``{state, stage, step, why}`` of the run's stage that
    matters now (the first checkpointed one that is not protected, else the newest started
    one), or None before any attempt started.

    ``stages``: the resolved workload's stage dicts; ``rows``: the catalog's stages with their
    attempts; ``events``: the run's events as ``runs get --json`` lists them (details merged).
    """
    settings = {stage["name"]: stage for stage in stages}
    judged = [
        _stage(settings[row["name"]], row, events)
        for row in rows
        if row["attempts"] and row["name"] in settings
    ]
    if not judged:
        return None
    weak = [j for j in judged if j["state"] in (UNPROTECTED, NOT_RESUMING)]
    return weak[0] if weak else judged[-1]


def _stage(setting: dict[str, Any], row: dict[str, Any], events: Sequence[dict]) -> dict:
    name = row["name"]
    mine = [e for e in events if e.get("stage") == name]
    committed = [e for e in mine if e["type"] == "snapshot_committed"]
    step = committed[-1]["step"] if committed else None
    if (setting.get("continuity") or {}).get("mode") != "checkpointed":
        return {"state": RESTARTABLE, "stage": name, "step": None, "why": None}
    ignored = [e for e in mine if e["type"] == "restore_ignored"]
    if ignored:
        last = ignored[-1]
        why = (
            f"attempt {last.get('attempt')} restored step {last['restored_step']} but its "
            f"program saved step {last['step']}: it started over instead of reading the "
            "restored checkpoint ($NODUS_RESTORED_CHECKPOINT, or [continuity] resume_args)"
        )
        return {"state": NOT_RESUMING, "stage": name, "step": step, "why": why}
    if committed:
        return {"state": PROTECTED, "stage": name, "step": step, "why": None}
    return {"state": UNPROTECTED, "stage": name, "step": None, "why": _why(setting, mine)}


def _why(setting: dict[str, Any], events: Sequence[dict]) -> str:
    def of(type_: str) -> list[dict]:
        return [e for e in events if e["type"] == type_]

    unprepared = of(protocol.EVENT_UNPREPARED)
    if unprepared:
        distinct = dict.fromkeys(r for e in unprepared for r in e.get("reasons") or ())
        reasons = "; ".join(distinct) or "outside its profile"
        return f"the integration ran the program unprepared ({reasons})"
    incomplete = of("checkpoint_incomplete")
    if incomplete:
        first = incomplete[0]
        noun = "checkpoint was" if len(incomplete) == 1 else "checkpoints were"
        return f"{len(incomplete)} {noun} incomplete, the first: {first.get('why') or '-'}"
    unsettled = of("capture_unsettled") + [
        e for e in of("capture_skipped") if e.get("reason") == _NEWER
    ]
    if unsettled:
        settle = next((e["settle_s"] for e in unsettled if "settle_s" in e), None)
        within = f" ({settle:g} s)" if settle is not None else ""
        return (
            f"its saves came closer together than the settle time{within}, so none settled "
            "while it trained"
        )
    failed = of("capture_failed")
    if failed:
        return f"its captures failed ({failed[0].get('error') or failed[0].get('reason')})"
    paths = ", ".join((setting.get("continuity") or {}).get("checkpoint_paths") or ())
    return f"nothing was saved into its selection ({paths})"


def protection_line(data: dict[str, Any] | None, stopped: bool) -> str | None:
    """``unprotected: stage 'main' has no snapshot to continue from (why)``, or None for a
    protected (or restartable) run; ``stopped``: the run's drive ended (past tense)."""
    if data is None or data["state"] in (PROTECTED, RESTARTABLE):
        return None
    stage = data["stage"]
    if data["state"] == NOT_RESUMING:
        return f"not resuming: stage {stage!r}: {data['why']}"
    has = "ended without a" if stopped else "has no"
    return f"unprotected: stage {stage!r} {has} snapshot to continue from: {data['why']}"
