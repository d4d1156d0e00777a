"""The runner's supervisors between attempts: the spare and those on their way out.

A recovery should not wait for a supervisor's interpreter to start, nor for the previous one
to exit. So the runner keeps one *spare* supervisor, started once an attempt's program has run
for a poll and taken by the next attempt, and it never waits on a recovery's path for a
supervisor that reported its attempt's end: that one is reaped later. Both are the runner's own
children carrying a run token, so its sweeps must leave them alone (:meth:`Standby.kept_pids`);
at the drive's end nothing of either may outlive it (:meth:`Standby.close`).
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


class Standby:
    """One runner's spare supervisor and its supervisors still exiting (one run's drive)."""

    def __init__(self, run_id: str) -> None:
        self._token = spare_token(run_id)
        self._spare: Supervisor | None = None
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
