"""The runner's supervisors between attempts: the spare and those on their way out.

A recovery should not wait for a supervisor's interpreter to start, nor for the previous one
to exit. So the runner keeps one *spare* supervisor, started once an attempt's program has run
for a poll and taken by the next attempt, and it never waits on a recovery's path for a
supervisor that reported its attempt's end: that one is reaped later. Both are the runner's own
children carrying a run token, so its sweeps must leave them alone (:meth:`Standby.kept_pids`);
at the drive's end nothing of either may outlive it (:meth:`Standby.close`).

A ``nodus run`` starts its first spare before anything else (:func:`start_early`): the
supervisor's interpreter then starts while the runner imports itself and accepts the run,
instead of after. The run's id is chosen for it first (acceptance takes it), so that spare
carries the run's spare token like any other; the run's :class:`Standby` takes it, and one no
run took (a ``--key`` that named an existing run, a refused workload) is discarded
(:func:`discard_early`).
"""

from __future__ import annotations

import subprocess

from nodus.runner.processes.containment import spare_token
from nodus.runner.processes.stage_process import (
    CannotStartError,
    Supervisor,
    reap_supervisor,
    spawn_supervisor,
)

_early: tuple[str, Supervisor] | None = None  # (the run it was started for, the spare)


def start_early(run_id: str) -> None:
    """Start the spare of the run this process is about to accept as ``run_id`` (from the main
    thread, before the runner's imports); none when it cannot start."""
    global _early
    discard_early()
    try:
        _early = (run_id, spawn_supervisor(spare_token(run_id)))
    except CannotStartError:
        pass  # the first attempt starts its own, or says why it cannot


def discard_early() -> None:
    """The early spare, unless a run took it, ends (reaped)."""
    global _early
    early, _early = _early, None
    if early is not None:
        early[1].discard()


def _take_early(run_id: str) -> Supervisor | None:
    """The early spare if it was started for ``run_id`` (its token names its run)."""
    global _early
    if _early is None or _early[0] != run_id:
        return None
    spare = _early[1]
    _early = None
    return spare


class Standby:
    """One runner's spare supervisor and its supervisors still exiting (one run's drive)."""

    def __init__(self, run_id: str) -> None:
        self._token = spare_token(run_id)
        self._spare: Supervisor | None = _take_early(run_id)
        self._leaving: list[subprocess.Popen] = []

    def start_spare(self) -> None:
        """Start a supervisor for the next attempt now (from the main thread), unless one
        waits already; none when it cannot start (the attempt then starts its own, or says
        why it cannot)."""
        if self._spare is None or self._spare.taken:
            try:
                self._spare = spawn_supervisor(self._token)
            except CannotStartError:
                self._spare = None

    def take_spare(self) -> Supervisor | None:
        """The spare, if it is still there to take (one killed while it waited is not)."""
        spare, self._spare = self._spare, None
        if spare is None or spare.taken:
            return None
        if spare.process.poll() is not None:
            spare.discard()
            return None
        return spare

    def leave(self, process: subprocess.Popen) -> None:
        """A supervisor that reported its attempt's end and is exiting: reaped later."""
        if process.poll() is None:
            self._leaving.append(process)

    def kept_pids(self) -> tuple[int, ...]:
        """The spare and the supervisors still exiting (the rest reaped now): no sweep may take
        them for survivors of their attempt."""
        self._leaving = [process for process in self._leaving if process.poll() is None]
        spare = () if self._spare is None else (self._spare.process.pid,)
        return spare + tuple(process.pid for process in self._leaving)

    def close(self) -> None:
        """The drive ends: the spare goes, and the supervisors still exiting are reaped."""
        if self._spare is not None:
            self._spare.discard()
            self._spare = None
        for process in self._leaving:
            reap_supervisor(process)
        self._leaving.clear()
