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

A runner keeps one *spare* supervisor started ahead of the attempt that will use it (its
interpreter's start is then off the path from a kill to the restored program). Its environment
was fixed before its attempt was known, so it carries the run's spare token
``<run>/~spare/0``: a sweep after the runner's death finds it like any other, and the runner's
own sweeps leave the spare it holds alone (``keep``), as they do its supervisors still exiting
after their end report. The program a spare starts carries the token of its attempt, which
comes with the start request.
"""

from __future__ import annotations

import os
import select
import signal
import time
from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING

from nodus import protocol
from nodus.runner.processes import procfs
from nodus.schemas import defaults

if TYPE_CHECKING:
    from nodus.runner.catalog.core import Catalog

TOKEN_VAR = protocol.ENV_ATTEMPT_TOKEN


def attempt_token(run_id: str, stage: str, attempt: int) -> str:
    return f"{run_id}/{stage}/{attempt}"


SPARE = "~spare"  # never a stage name: those are identifiers


def spare_token(run_id: str) -> str:
    """The token of a supervisor started before its attempt was known."""
    return attempt_token(run_id, SPARE, 0)


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
    def stage(self) -> str | None:
        stage = self.token.split("/")[1]
        return None if stage == SPARE else stage  # a spare supervisor is no attempt's

    @property
    def attempt(self) -> int | None:
        return None if self.stage is None else int(self.token.rsplit("/", 1)[1])


def carriers(prefix: str, keep: Collection[int] = ()) -> list[Survivor]:
    """Living processes whose token starts with ``prefix``; never this process, nor one of
    ``keep`` (the caller's own children, whose pids cannot be reused while it has not reaped
    them) or a child of one (a spare supervisor's forked child, :mod:`.prefork`)."""
    found = []
    for pid in procfs.pids():
        if pid == os.getpid() or pid in keep:
            continue
        token = procfs.environ_value(pid, TOKEN_VAR)
        if token is None or not token.startswith(prefix) or _child_of(pid, keep):
            continue
        if procfs.living(pid):
            found.append(Survivor(pid, token, procfs.command_line(pid)))
    return found


def _child_of(pid: int, parents: Collection[int]) -> bool:
    entry = procfs.stat(pid) if parents else None
    return entry is not None and entry.ppid in parents


def kill_carriers(prefix: str, keep: Collection[int] = ()) -> list[Survivor]:
    """SIGKILL every process carrying a token with ``prefix`` and wait until all are gone.

    Scans again until one finds none, so a child forked between a scan and its parent's kill
    is caught too. Each kill goes through a pidfd opened *before* the token is read again, so a
    reused pid is never signalled.
    """
    killed: list[Survivor] = []
    deadline = time.monotonic() + defaults.KILL_WAIT_S
    while time.monotonic() < deadline:
        found = carriers(prefix, keep)
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


def kill_survivors(catalog: Catalog, run_id: str, keep: Collection[int] = ()) -> list[Survivor]:
    """Kill what is left of any attempt of the run; each one is an event ``survivor_killed``.

    ``keep``: this runner's own supervisors that are no survivors (its spare, and those still
    exiting after their end report)."""
    survivors = kill_carriers(run_prefix(run_id), keep)
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
