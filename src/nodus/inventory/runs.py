"""Runs as users see them: the documented ``--json`` shapes, built here once.

``nodus runs get --json`` (and ``run``, ``runs wait``, ``runs cancel``, ``runs resume`` with
``--json``), ``runs list --json`` and ``runs pause --json`` print these, and :class:`nodus.Client`
returns them, so the command line and the SDK can never drift apart. docs/cli.md documents every
field; fields are only ever added.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from nodus import protocol
from nodus.errors import redacted
from nodus.inventory.protection import protection, protection_line
from nodus.runner.catalog.connection import stamp, stamp_seconds
from nodus.runner.catalog.core import Catalog, Run
from nodus.runner.catalog.phases import Phase
from nodus.runner.catalog.unrecorded import unrecorded
from nodus.runner.control.outside import continue_command, runner_gone
from nodus.runner.remote.uploads import read_upload_status
from nodus.schemas.units import human_duration
from nodus.store.manifest import step_label

__all__ = [
    "capture_failure_line",
    "capture_failures",
    "lineage_tree",
    "pause_json",
    "phase_line",
    "progress_json",
    "progress_line",
    "restored_text",
    "run_json",
    "run_model_json",
    "run_summary",
    "runner_json",
    "runner_line",
    "runner_state",
    "step_text",
]

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
    # the machine, or on Ray the node(s): "<address> (ray node <id>)", rank 0 first; on Slurm
    # "<nodes> (slurm job <id>)"
    "host",
    "started_at",
    "ended_at",
    "log_path",
    "pid",  # the program's process (its supervisor's child), while the attempt runs and after
)


def run_summary(run: Run, home: str) -> dict[str, Any]:
    """One row of ``runs list --json``; ``home`` is the catalog's, where its runner's lock is."""
    return {
        "id": run.id,
        "key": run.key,
        "name": run.name,
        "phase": run.phase.value,
        "exit_status": run.exit_status,
        "created_at": run.created_at,
        "parent": run.parent,  # {run, snapshot, step, stage, mode}, or None
        "runner": runner_state(home, run),
    }


def runner_state(home: str, run: Run) -> str | None:
    """``driving``, ``queued`` (waiting for its background runner), ``gone`` (its runner died
    and nothing moves the run until :func:`runner_json`'s ``continue_with`` is run), or None
    once the run stopped. Read from the run's lock, which the kernel drops when its holder
    dies, never from a pid alone (pids are reused)."""
    if run.phase.stopped:
        return None
    if runner_gone(home, run):
        return "gone"
    return "queued" if run.phase == Phase.QUEUED else "driving"


def runner_json(home: str, run: Run) -> dict[str, Any]:
    """``runs get``'s ``runner``: pid and host (the last runner's, kept after it died), its
    state, and for a runner that is gone the command that continues the run."""
    state = runner_state(home, run)
    data: dict[str, Any] = {"pid": run.runner_pid, "host": run.runner_host, "state": state}
    if state == "gone":
        data["continue_with"] = continue_command(run)
    return data


def runner_line(runner: dict[str, Any]) -> str | None:
    """``runner gone (pid 4242 on host gpu1): `nodus run FILE --key nightly` continues it``;
    None while a runner drives the run or once it stopped."""
    if runner.get("state") != "gone":
        return None
    last = f" (pid {runner['pid']} on host {runner['host']})" if runner["pid"] else ""
    return f"runner gone{last}: `{runner['continue_with']}` continues it"


def run_json(catalog: Catalog, run: Run) -> dict[str, Any]:
    """The ``runs get --json`` shape: summary, stages with attempts, the newest pause, events."""
    data = run_summary(run, catalog.home)
    data.update(
        message=run.message,
        store=redacted(run.store),  # a password in the URL is never shown
        updated_at=run.updated_at,
        finished_at=run.finished_at,
        runner=runner_json(catalog.home, run),
        pause=pause_json(catalog.latest_pause(run.id)),
        upload=read_upload_status(catalog.home, run.id),
        unrecorded=unrecorded(catalog, run.id),
        children=[_child(child) for child in catalog.children(run.id)],
        model=run_model_json(catalog, run.id),
    )
    events = catalog.events(run.id)
    counted = counted_snapshots(events)
    data["stages"] = [
        {
            "name": s["name"],
            "phase": s["phase"],
            "recoveries": s["recoveries"],
            "source_snapshot": s["source_snapshot"],
            "launch": (run.launch or {}).get(s["name"]),
            "attempts": [_attempt(a, counted) for a in s["attempts"]],
        }
        for s in run.stages
    ]
    data["progress"] = progress_json(catalog.home, run, events)
    data["capture_failures"] = capture_failures(events)
    data["events"] = [
        {
            **event["details"],
            "type": event["type"],
            "at": event["at"],
            "stage": event["stage"],
            "attempt": event["attempt"],
        }
        for event in events
    ]
    data["protection"] = protection(run.workload.get("stages") or [], run.stages, data["events"])
    return data


def counted_snapshots(events: list[dict[str, Any]]) -> set[str]:
    """The snapshots among ``events``' commits whose step is the capture's count."""
    return {
        e["details"].get("snapshot")
        for e in events
        if e["type"] == "snapshot_committed" and e["details"].get("counted")
    }


def _attempt(attempt: dict[str, Any], counted: set[str]) -> dict[str, Any]:
    """An attempt of ``runs get``: a restored step that was counted is ``restored_capture``."""
    data = {key: attempt[key] for key in _ATTEMPT_FIELDS}
    # on Slurm, its job: {"scheduler": "slurm", "id", "nodes", "state"}; else None
    data["job"] = attempt.get("job")
    data["restored_capture"] = None
    if attempt["restored_snapshot"] in counted:
        data["restored_capture"], data["restored_step"] = attempt["restored_step"], None
    return data


def progress_json(home: str, run: Run, events: list[dict[str, Any]]) -> dict[str, Any] | None:
    """``runs get``'s ``progress``: where a run that goes on stands; None once it stopped.

    The step, the step training ends at, the last loss and the speed come from the program's
    ``progress.json`` (an integration writes it about every second; a directory-contract
    program has none: its step is then its newest committed snapshot's); the time left is
    estimated from them. The newest committed snapshot comes from the run's events.
    """
    if Phase(run.phase).stopped:
        return None
    current = [(s["name"], a) for s in run.stages for a in s["attempts"] if a["outcome"] is None]
    committed = [e for e in events if e["type"] == "snapshot_committed"]
    newest = committed[-1] if committed else None
    snapshot = None
    if newest is not None:
        counted = bool(newest["details"].get("counted"))
        snapshot = {
            "id": newest["details"]["snapshot"],
            "step": None if counted else newest["details"]["step"],
            "capture": newest["details"]["step"] if counted else None,
            "age_seconds": round(time.time() - stamp_seconds(newest["at"]), 1),
        }
    if not current:
        return {"stage": None, "attempt": None, **_NO_PROGRESS, "newest_snapshot": snapshot}
    stage, attempt = current[-1]
    read = read_progress(home, run.id, stage, stamp_seconds(attempt["started_at"]))
    data = dict(_NO_PROGRESS)
    if read is not None:
        left = None
        if read.max_steps and read.steps_per_second:
            left = round(max(read.max_steps - read.step, 0) / read.steps_per_second, 1)
        data = {
            "step": read.step,
            "total_steps": read.max_steps,
            "loss": read.loss,
            "steps_per_second": read.steps_per_second,
            "eta_seconds": left,
            "updated_at": _iso(read.at),
        }
    elif snapshot is not None:
        data["step"] = snapshot["step"]
    return {"stage": stage, "attempt": attempt["number"], **data, "newest_snapshot": snapshot}


def progress_line(progress: dict[str, Any]) -> str:
    """``step 30 of 48, loss 2.902, 6.9 steps/s, about 3 s left; newest snapshot: step 30
    (ckpt_…), 2 s ago``: the ``progress`` object in words, only what is known."""
    parts = []
    if progress["step"] is not None:
        total = progress["total_steps"]
        parts.append(f"step {progress['step']}" + (f" of {total}" if total else ""))
    if progress["loss"] is not None:
        parts.append(f"loss {progress['loss']:.4g}")
    if progress["steps_per_second"]:
        parts.append(f"{progress['steps_per_second']:.3g} steps/s")
    if progress["eta_seconds"] is not None:
        parts.append(f"about {human_duration(progress['eta_seconds'])} left")
    line = ", ".join(parts) or "no step yet"
    newest = progress["newest_snapshot"]
    if newest is None:
        return line + "; no snapshot committed yet"
    age = human_duration(newest["age_seconds"])
    said = step_text(newest)
    return line + f"; newest snapshot: {said} ({newest['id']}), {age} ago"


def restored_text(attempt: dict[str, Any]) -> str | None:
    """What a ``runs get`` attempt restored, as said (``step 80``, ``capture 3``); None for an
    attempt that restored nothing."""
    if attempt.get("restored_capture") is not None:
        return step_label(attempt["restored_capture"], True)
    step = attempt["restored_step"]
    return None if step is None else step_label(step, False)


def host_text(attempt: dict[str, Any]) -> str | None:
    """Where a ``runs get`` attempt ran, as said: its host, and on a cluster job the job's
    state as its scheduler last said it (``n[1-2] (slurm job 12), COMPLETED``)."""
    host, job = attempt.get("host"), attempt.get("job")
    return f"{host}, {job['state']}" if host and job and job.get("state") else host


def step_text(data: dict[str, Any]) -> str:
    """A JSON row's step as said (a ``runs snapshots`` row, a newest snapshot): ``step 30``,
    or ``capture 3`` where ``capture`` is set (the step was counted)."""
    counted = data.get("capture") is not None
    return step_label(data["capture"] if counted else data["step"], counted)


_NO_PROGRESS: dict[str, Any] = {
    "step": None,
    "total_steps": None,
    "loss": None,
    "steps_per_second": None,
    "eta_seconds": None,
    "updated_at": None,
}


def read_progress(home: str, run_id: str, stage: str, since: float) -> protocol.Progress | None:
    """The attempt's progress.json; None without one, or one left by an earlier attempt."""
    from nodus.runner.workspace.layout import Workspace

    path = Workspace.of(home, run_id, stage).control.progress
    try:
        with open(path, encoding="utf-8") as handle:
            progress = protocol.Progress.from_dict(json.load(handle))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return progress if progress.at >= since else None


def _iso(seconds: float) -> str:
    """As the catalog writes its times (``2026-12-04T07:31:38.683Z``)."""
    return stamp(datetime.fromtimestamp(seconds, UTC))


def _child(run: Run) -> dict[str, Any]:
    """One of ``runs get``'s ``children``: a run started from one of this run's snapshots."""
    parent = run.parent or {}
    return {
        "id": run.id,
        "name": run.name,
        "phase": run.phase.value,
        "snapshot": parent.get("snapshot"),
        "step": parent.get("step"),
        "mode": parent.get("mode"),
    }


def lineage_tree(runs: list[dict[str, Any]]) -> list[tuple[int, dict[str, Any]]]:
    """``runs list --tree``: (depth, run) with each run under its parent (newest first among
    siblings); a run whose parent is not in ``runs`` is a root."""
    ids = {run["id"] for run in runs}
    children: dict[str | None, list[dict[str, Any]]] = {}
    for run in runs:
        parent = (run.get("parent") or {}).get("run")
        children.setdefault(parent if parent in ids else None, []).append(run)
    ordered: list[tuple[int, dict[str, Any]]] = []
    stack = [(0, run) for run in reversed(children.get(None, []))]
    while stack:
        depth, run = stack.pop()
        ordered.append((depth, run))
        stack += [(depth + 1, child) for child in reversed(children.get(run["id"], []))]
    return ordered


def run_model_json(catalog: Catalog, run_id: str) -> dict[str, Any] | None:
    """The ``model`` object of ``runs get --json``: the run's model by its exact version
    (``ref`` = ``NAME:VERSION``), or None until it is registered (the run has not succeeded)."""
    from nodus.registry import Registry

    version = Registry(catalog.models).run_model(run_id)
    if version is None:
        return None
    data = version.summary()
    return {key: data[key] for key in ("ref", "name", "version", "snapshot", "step", "epoch")}


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


# --- failed captures ---------------------------------------------------------------------------

_FAILED = ("capture_failed", "outputs_failed")
_STORED = ("snapshot_committed", "outputs_committed")
_ERRNO_TEXT = re.compile(r"\[Errno \d+\] ([^:]+)")


def capture_failures(events: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The ``capture_failures`` object of ``runs get --json``, from the run's events.

    ``count`` failed captures (checkpoints and outputs), their distinct ``reasons`` in the order
    they first happened, the ``newest_committed_step`` (None before any commit), and whether
    the ``final_state_stored``: False when a stage's newest capture failed, which for a stopped
    run means its final state (or its outputs) is not in the store.
    """
    count = 0
    reasons: list[str] = []
    newest: int | None = None
    last_by_stage: dict[tuple[Any, str], str] = {}  # (stage, checkpoint|outputs) -> event type
    for event in events:
        kind = event["type"]
        if kind not in _FAILED and kind not in _STORED:
            continue
        what = "outputs" if kind.startswith("outputs") else "checkpoint"
        last_by_stage[(event["stage"], what)] = kind
        if kind == "snapshot_committed" and event["details"].get("step") is not None:
            newest = event["details"]["step"]
        if kind in _FAILED:
            count += 1
            reason = failure_reason(str(event["details"].get("error", "")))
            if reason not in reasons:
                reasons.append(reason)
    return {
        "count": count,
        "reasons": reasons,
        "newest_committed_step": newest,
        "final_state_stored": not any(kind in _FAILED for kind in last_by_stage.values()),
    }


def failure_reason(error: str) -> str:
    """What went wrong, without paths: an OS error's own words ("No space left on device")."""
    found = _ERRNO_TEXT.search(error)
    return found.group(1).strip() if found else (error.strip() or "unknown error")


def phase_line(data: dict[str, Any]) -> str:
    """``run_… SUCCEEDED`` (with the run's message): the line a run ends with; a run that can
    be resumed ends it with the command that continues it.

    A run that succeeded while its final state was not stored says so on this very line, so a
    failed final capture never reads as a clean success.
    """
    line = f"{data['id']} {data['phase']}"
    failures = data["capture_failures"]
    if data["phase"] == Phase.SUCCEEDED and not failures["final_state_stored"]:
        line += f", but its final state was not stored ({'; '.join(failures['reasons'])})"
    weak = protection_line(data.get("protection"), stopped=True)
    if weak:  # never a bare green line for a run nothing could have continued
        line += f", {weak}" if data["phase"] == Phase.SUCCEEDED else f" ({weak})"
    line += f": {data['message']}" if data["message"] else ""
    if Phase(data["phase"]).resumable:  # INTERRUPTED, PAUSED: end with what continues it
        line += f"; `nodus runs resume {data['id']}` continues it"
    return line


def capture_failure_line(failures: dict[str, Any]) -> str | None:
    """``6 captures failed (No space left on device); the newest committed step is 30``."""
    count = failures["count"]
    if not count:
        return None
    newest = failures["newest_committed_step"]
    committed = (
        "no snapshot was committed" if newest is None else f"the newest committed step is {newest}"
    )
    noun = "capture" if count == 1 else "captures"
    return f"{count} {noun} failed ({'; '.join(failures['reasons'])}); {committed}"
