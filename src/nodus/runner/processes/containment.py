"""Which processes belong to an attempt, and killing what is left of a run's attempts.

Every process an attempt starts carries ``NODUS_ATTEMPT_TOKEN=<run>/<stage>/<attempt>`` in its
environment (the supervisor puts it there and everything below inherits it). While the attempt
runs, its supervisor (:mod:`.supervisor`) holds the whole tree; a process found
later belongs to the attempt only by that token, never by a pid (pids are reused). The sweep
here is for what a dead supervisor left behind: it runs before any new attempt of a run starts
(recovery, ``runs resume``, a ``--key`` rerun), when a runner-less run is cancelled, and when a
runner finds its attempt's supervisor gone.

A process that clears its own environment before ``exec`` drops the token; only its live
supervisor can still end it.
"""

from __future__ import annotations

import os
import select
import signal
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from nodus import protocol
from nodus.runner.processes import procfs

if TYPE_CHECKING:
    from nodus.runner.catalog.core import Catalog


KILL_WAIT_S = 10.0
"""After SIGKILL, how long the runner waits for an attempt's processes to be reaped."""

TOKEN_VAR = protocol.ENV_ATTEMPT_TOKEN


def attempt_token(run_id: str, stage: str, attempt: int) -> str:
    return f"{run_id}/{stage}/{attempt}"


def run_prefix(run_id: str) -> str:
    """What every token of the run starts with (a run id never contains ``/``)."""
    return f"{run_id}/"


@dataclass(frozen=True)
class Survivor:
    """A process that carried an attempt's token after its supervisor was gone."""

    pid: int
    token: str
    command: str

    @property
    def stage(self) -> str:
        return self.token.split("/")[1]

    @property
    def attempt(self) -> int:
        return int(self.token.rsplit("/", 1)[1])


def carriers(prefix: str) -> list[Survivor]:
    """Living processes whose token starts with ``prefix``; never this process."""
    found = []
    for pid in procfs.pids():
        if pid == os.getpid():
            continue
        token = procfs.environ_value(pid, TOKEN_VAR)
        if token is None or not token.startswith(prefix):
            continue
        if procfs.living(pid):
            found.append(Survivor(pid, token, procfs.command_line(pid)))
    return found


def kill_carriers(prefix: str) -> list[Survivor]:
    """SIGKILL every process carrying a token with ``prefix`` and wait until all are gone.

    Scans again until one finds none, so a child forked between a scan and its parent's kill
    is caught too. Each kill goes through a pidfd opened *before* the token is read again, so a
    reused pid is never signalled.
    """
    killed: list[Survivor] = []
    deadline = time.monotonic() + KILL_WAIT_S
    while time.monotonic() < deadline:
        found = carriers(prefix)
        if not found:
            break
        pidfds = []
        for survivor in found:
            fd = _kill(survivor, prefix)
            if fd is not None:
                pidfds.append(fd)
                killed.append(survivor)
        _wait_exited(pidfds, deadline)
    return killed


def kill_survivors(catalog: Catalog, run_id: str) -> list[Survivor]:
    """Kill what is left of any attempt of the run; each one is an event ``survivor_killed``."""
    survivors = kill_carriers(run_prefix(run_id))
    record_survivors(catalog, run_id, survivors)
    return survivors


def record_survivors(catalog: Catalog, run_id: str, survivors: list[Survivor]) -> None:
    for survivor in survivors:
        catalog.add_event(
            run_id,
            "survivor_killed",
            {"pid": survivor.pid, "command": survivor.command},
            stage=survivor.stage,
            attempt=survivor.attempt,
        )


def _kill(survivor: Survivor, prefix: str) -> int | None:
    try:
        fd = os.pidfd_open(survivor.pid)
    except OSError:
        return None
    token = procfs.environ_value(survivor.pid, TOKEN_VAR)
    if token is None or not token.startswith(prefix):  # gone, and the pid taken by another
        os.close(fd)
        return None
    procfs.signal_pidfd(fd, signal.SIGKILL)
    return fd


def _wait_exited(pidfds: list[int], deadline: float) -> None:
    """Wait until every pidfd reports its process ended (a zombie is dead enough)."""
    try:
        for fd in pidfds:
            left = deadline - time.monotonic()
            if left > 0:
                select.select([fd], [], [], left)
    finally:
        for fd in pidfds:
            os.close(fd)
