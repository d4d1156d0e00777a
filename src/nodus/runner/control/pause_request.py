"""The asking side of ``nodus runs pause``: check, record, and wait for the runner to take it up.

A pause is carried out by the run's runner (:mod:`nodus.runner.attempt.pausing`), never by the
process that asks, so asking only needs the catalog: the request is refused up front when nobody
could carry it out (the run has finished, its runner is gone) or when carrying it out would lose
training (``latest`` without any snapshot that holds training state).
"""

from __future__ import annotations

import time
from typing import Any

from nodus.errors import UsageError
from nodus.runner.catalog.core import Catalog, Run
from nodus.runner.catalog.locks import RunLock
from nodus.runner.catalog.phases import Phase
from nodus.schemas import defaults
from nodus.schemas.units import duration_seconds
from nodus.store import restorable

PAUSE_ACCEPT_WAIT_S = 10.0
"""How long ``nodus runs pause`` waits for the runner to take the request up before returning."""

POLICIES = ("save", "latest")
OPEN_PAUSE = ("requested", "pausing")
"""States of a pause its runner has not finished carrying out."""


def parse_duration(text: str) -> float:
    """``30s``, ``10m``, ``1h``, ``2d`` or plain seconds, as seconds; UsageError otherwise."""
    seconds = duration_seconds(text) or 0.0
    if seconds <= 0:
        raise UsageError(f"--deadline {text!r}: give a positive duration such as 30s, 10m or 1h")
    return seconds


def request_pause(home: str, ref: str, policy: str, deadline_s: float) -> dict[str, Any]:
    """Record a pause of run ``ref`` for its runner; the pause row (refusals raise UsageError)."""
    if policy not in POLICIES:
        raise UsageError(f"--checkpoint {policy!r}: use one of {', '.join(POLICIES)}")
    catalog = Catalog(home)
    run = catalog.get_run(ref)
    _check_pausable(catalog, home, run)
    if policy == "latest":
        _check_restorable(run)
    return catalog.request_pause(run.id, policy, deadline_s)


def wait_accepted(home: str, run_id: str, pause_id: int) -> dict[str, Any]:
    """The pause once the runner took it up (or the run stopped), or as it is after a while."""
    catalog = Catalog(home)
    deadline = time.monotonic() + PAUSE_ACCEPT_WAIT_S
    while True:
        pause = catalog.latest_pause(run_id)
        if pause is None or pause["id"] != pause_id:  # superseded: report the newest
            return pause or {}
        if pause["state"] != "requested" or catalog.get_run(run_id).finished:
            return pause
        if time.monotonic() > deadline:
            return pause
        time.sleep(defaults.POLL_S)


def _check_pausable(catalog: Catalog, home: str, run: Run) -> None:
    if run.phase == Phase.PAUSED:
        raise UsageError(f"{run.id} is already PAUSED; `nodus runs resume {run.id}` continues it")
    if run.finished:
        raise UsageError(f"{run.id} has already finished ({run.phase}); there is nothing to pause")
    pause = catalog.latest_pause(run.id)
    if pause is not None and pause["state"] in OPEN_PAUSE:
        raise UsageError(
            f"{run.id} already has a pause under way (--checkpoint "
            f"{pause['policy']}, requested at {pause['requested_at']})"
        )
    if not RunLock(home, run.lock_name, run.id).is_held_elsewhere():
        raise UsageError(
            f"{run.id} is {run.phase} but its runner is gone, so nobody can pause "
            f"it; `nodus runs resume {run.id}` continues it, `nodus runs cancel "
            f"{run.id}` ends it"
        )


def _check_restorable(run: Run) -> None:
    """``latest`` stops without saving: only sound when a resume has state to continue from."""
    from nodus.store import open_store

    stage = next((s["name"] for s in run.stages if s["phase"] != Phase.SUCCEEDED), None)
    manifests = open_store(run.store).list(run=run.id, stage=stage)
    if not restorable.newest_first(manifests):
        raise UsageError(
            f"{run.id} has trained without any restorable state: no committed "
            f"snapshot of stage {stage!r} holds training state, so pausing with "
            "--checkpoint latest would start it again from the beginning; use "
            "--checkpoint save"
        )
