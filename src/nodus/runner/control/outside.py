"""Controlling a run from outside its runner: wait for it, pause it, cancel it.

No process signals another one: a request is a catalog row that the run's runner picks up at its
next look (:mod:`nodus.runner.attempt.supervise`). The run's lock tells whether a runner is there to
pick it up, because the kernel releases it when its runner dies. Only when no runner holds the lock
does the asking process act itself (:func:`cancel_runnerless`), holding the lock so that no runner
starts meanwhile.

A pause whose runner never carries it out ends with the run: cancelled by a cancel (which wins
over a pause), or settled by the runner when its drive ends first (:func:`settle_open_pause`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from nodus.errors import PausedError, UsageError, WaitTimeoutError
from nodus.runner.catalog.connection import stamp_seconds
from nodus.runner.catalog.core import Catalog, Run, now
from nodus.runner.catalog.locks import RunLock, lock_held
from nodus.runner.catalog.phases import Phase
from nodus.runner.control.pause_request import OPEN_PAUSE, request_pause, wait_accepted
from nodus.runner.processes.containment import KILL_WAIT_S

QUEUED_ORPHAN_S = 30.0
"""A QUEUED run no runner has picked up after this long counts as having lost its runner."""


__all__ = [
    "cancel",
    "cancel_open_pause",
    "cancel_runnerless",
    "continue_command",
    "pause",
    "runner_gone",
    "settle_open_pause",
    "wait",
]

WAIT_POLL_S = 0.5
"""How often ``nodus runs wait`` and ``runs logs --follow`` look at the catalog."""

Say = Callable[[str], None]

# Beyond the grace period and the kill wait, how long a cancel waits for the runner to record it.
_CANCEL_SLACK_S = 30


def runner_gone(home: str, run: Run) -> bool:
    """No process holds the run's lock (a QUEUED run gets a moment to be picked up). Creates
    nothing, so a read-only reader (``nodus ui``) asks too."""
    if lock_held(home, run.lock_name):
        return False
    if run.phase == Phase.QUEUED:  # since it was accepted, or handed to a background runner
        return time.time() - stamp_seconds(run.updated_at) > QUEUED_ORPHAN_S
    return True


def continue_command(run: Run) -> str:
    """The command that continues ``run`` (the one cron calls, for a keyed run)."""
    return f"nodus run FILE --key {run.key}" if run.key else f"nodus runs resume {run.id}"


# --- wait ---------------------------------------------------------------------------------------


def wait(home: str, catalog: Catalog, ref: str, timeout: float | None = None) -> Run:
    """The run once it stopped (waiting through RECOVERING and PAUSING).

    Raises PausedError when its runner is gone (nothing would ever move it) and
    WaitTimeoutError when ``timeout`` seconds pass first.
    """
    run = catalog.get_run(ref)
    deadline = None if timeout is None else time.monotonic() + timeout
    while not run.finished:
        if runner_gone(home, run):
            raise PausedError(
                f"{run.id} is {run.phase} but its runner is gone; `{continue_command(run)}` "
                "recovers it"
            )
        if deadline is not None and time.monotonic() >= deadline:
            raise WaitTimeoutError(
                f"{run.id} is still {run.phase} after {timeout:g}s of waiting; its runner "
                "goes on (wait again, or cancel it)"
            )
        time.sleep(WAIT_POLL_S)
        run = catalog.get_run(run.id)
    return run


# --- pause --------------------------------------------------------------------------------------


def pause(home: str, ref: str, policy: str, deadline_s: float) -> dict[str, Any]:
    """Ask the run's runner for a pause; the pause row once taken up (or after a while)."""
    asked = request_pause(home, ref, policy, deadline_s)
    return wait_accepted(home, asked["run_id"], asked["id"]) or asked


def settle_open_pause(catalog: Catalog, run_id: str) -> None:
    """A pause still open when the drive ends lost its chance: say how the run ended."""
    pause = catalog.latest_pause(run_id)
    if pause is None or pause["state"] not in OPEN_PAUSE:
        return
    phase = catalog.get_run(run_id).phase
    state = {Phase.SUCCEEDED: "completed", Phase.CANCELLED: "cancelled"}.get(phase, "failed")
    catalog.update_pause(
        pause["id"],
        state=state,
        ended_at=now(),
        failure=f"the run ended {phase} before it could pause",
    )
    for control in catalog.pending_controls(run_id):
        if control["id"] == pause["control_id"]:
            catalog.mark_handled(control["id"])


def cancel_open_pause(catalog: Catalog, run_id: str) -> None:
    """A pause its runner never carried out ends with the cancel (cancellation wins)."""
    pause = catalog.latest_pause(run_id)
    if pause is not None and pause["state"] in OPEN_PAUSE:
        catalog.update_pause(
            pause["id"],
            state="cancelled",
            ended_at=now(),
            failure="cancelled before the pause completed",
        )


# --- cancel -------------------------------------------------------------------------------------


def cancel(home: str, catalog: Catalog, ref: str, say: Say, end_left: Callable[[Run], None]) -> Run:
    """Cancel a run that has not stopped for good; the run as it is afterwards.

    With a live runner the runner stops the program and records CANCELLED; this waits for that
    up to the longest grace period and the kill wait. Without one it is cancelled here, and
    ``end_left`` ends what a dead runner's attempt left running on its own (a cluster job).
    """
    run = catalog.get_run(ref)
    if run.phase.final:
        raise UsageError(f"{run.id} has already finished ({run.phase}); nothing to cancel")
    if not RunLock(home, run.lock_name, run.id).is_held_elsewhere():
        cancel_runnerless(home, catalog, run, end_left)
        return catalog.get_run(run.id)
    catalog.request(run.id, "cancel")
    say(f"asked the runner of {run.id} to cancel it; waiting for it to stop")
    grace = max(s["execution"]["grace_period"] for s in run.workload["stages"])
    deadline = time.monotonic() + grace + KILL_WAIT_S + _CANCEL_SLACK_S
    while not run.finished and time.monotonic() < deadline:
        time.sleep(WAIT_POLL_S)
        run = catalog.get_run(run.id)
    return run


def cancel_runnerless(
    home: str, catalog: Catalog, run: Run, end_left: Callable[[Run], None]
) -> None:
    """No runner drives ``run``: record CANCELLED here, holding its lock so none starts.

    A dead runner's attempt may have left processes behind (its supervisor was killed too):
    they are ended first, found by the attempt token, never by a pid alone; a cluster job it
    runs as is ended by ``end_left``.
    """
    from nodus.runner.processes.containment import kill_survivors

    with RunLock(home, run.lock_name, run.id):
        end_left(run)
        kill_survivors(catalog, run.id)
        catalog.lifecycle.move(run.id, Phase.CANCELLED, message="cancelled by `nodus runs cancel`")
        cancel_open_pause(catalog, run.id)
