"""Runs as users see them: the documented ``--json`` shapes, built here once.

``nodus runs get --json`` (and ``run``, ``runs wait``, ``runs cancel``, ``runs resume`` with
``--json``), ``runs list --json`` and ``runs pause --json`` print these, and :class:`nodus.Client`
returns them, so the command line and the SDK can never drift apart. docs/cli.md documents every
field; fields are only ever added.
"""

from __future__ import annotations

from typing import Any

from nodus.runner.catalog import Catalog, Run
from nodus.runner.uploading import read_upload_status, unrecorded

__all__ = ["pause_json", "run_json", "run_summary"]

_PAUSE_FIELDS = (
    "policy",
    "state",
    "requested_at",
    "accepted_at",
    "deadline",
    "timed_out",
    "failure",
    "resources_released",
    "ended_at",
)
_ATTEMPT_FIELDS = (
    "number",
    "outcome",
    "detail",
    "restored_snapshot",
    "restored_step",
    "devices",
    "started_at",
    "ended_at",
    "log_path",
)


def run_summary(run: Run) -> dict[str, Any]:
    """One row of ``runs list --json``."""
    return {
        "id": run.id,
        "key": run.key,
        "name": run.name,
        "phase": run.phase.value,
        "exit_status": run.exit_status,
        "created_at": run.created_at,
    }


def run_json(catalog: Catalog, run: Run) -> dict[str, Any]:
    """The ``runs get --json`` shape: summary, stages with attempts, the newest pause, events."""
    data = run_summary(run)
    data.update(
        message=run.message,
        store=run.store,
        updated_at=run.updated_at,
        finished_at=run.finished_at,
        runner={"pid": run.runner_pid, "host": run.runner_host},
        pause=pause_json(catalog.latest_pause(run.id)),
        upload=read_upload_status(catalog.home, run.id),
        unrecorded=unrecorded(catalog, run.id),
    )
    data["stages"] = [
        {
            "name": s["name"],
            "phase": s["phase"],
            "recoveries": s["recoveries"],
            "source_snapshot": s["source_snapshot"],
            "launch": (run.launch or {}).get(s["name"]),
            "attempts": [{key: a[key] for key in _ATTEMPT_FIELDS} for a in s["attempts"]],
        }
        for s in run.stages
    ]
    data["events"] = [
        {
            **event["details"],
            "type": event["type"],
            "at": event["at"],
            "stage": event["stage"],
            "attempt": event["attempt"],
        }
        for event in catalog.events(run.id)
    ]
    return data


def pause_json(pause: dict[str, Any] | None) -> dict[str, Any] | None:
    """The ``pause`` object of ``runs get --json`` (and ``runs pause --json``), or None."""
    if pause is None:
        return None
    data = {key: pause[key] for key in _PAUSE_FIELDS}
    data["save"] = {
        "bytes": pause["save_bytes"],
        "snapshot": pause["snapshot"],
        "step": pause["step"],
    }
    return data
