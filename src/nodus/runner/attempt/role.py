"""What varies between attempts that are otherwise done alike: the attempt's role.

An attempt on this machine and one on a Ray node (:mod:`nodus.runner.backends.node`) prepare,
launch and supervise their program the same way; what differs is handed to the attempt as an
:class:`AttemptRole` instead of overridden in a subclass: what its processes' tokens carry and
what an earlier attempt left (``scope``, ``sweep``), whether retention runs beside it
(``rotation``), whether it captures at all (``captures``: snapshots, outputs, uploads), the
hang timeout it applies and the node of a multi-node stage it is (``node``). :data:`LOCAL_ROLE`
is this machine's.
"""

from __future__ import annotations

from typing import Protocol

from nodus.protocol import NodePlace
from nodus.runner.catalog.attempt_context import AttemptContext
from nodus.runner.catalog.core import Catalog
from nodus.runner.processes.containment import kill_survivors
from nodus.runner.upkeep.rotation import Rotation
from nodus.schemas.resolved import ResolvedStage

__all__ = ["LOCAL_ROLE", "AttemptRole", "CaptureLoop", "LocalRole", "NoCapture"]


class AttemptRole(Protocol):
    """The parts of an attempt that depend on where and as what it runs."""

    @property
    def captures(self) -> bool:
        """Whether it captures snapshots and outputs (and uploads them to a remote store)."""
        ...

    def scope(self, run_id: str) -> str:
        """What the tokens of its processes start with (containment): the run, or more."""
        ...

    def sweep(self, catalog: Catalog, run_id: str) -> None:
        """Kill whatever an earlier attempt in this scope left running."""
        ...

    def rotation(self, context: AttemptContext) -> Rotation | None:
        """Retention beside the capture loop, or None where another process runs it."""
        ...

    def hang_timeout(self, stage: ResolvedStage) -> float | str:
        """The stage's ``hang_timeout`` as this attempt applies it."""
        ...

    def node(self, stage: ResolvedStage) -> NodePlace | None:
        """The node of a multi-node stage it runs on; None for an attempt on one machine."""
        ...


class LocalRole:
    """An attempt of this runner: its run's scope, retention here, captures, the stage's hang
    timeout."""

    @property
    def captures(self) -> bool:
        return True

    def scope(self, run_id: str) -> str:
        return run_id

    def sweep(self, catalog: Catalog, run_id: str) -> None:
        kill_survivors(catalog, run_id)

    def rotation(self, context: AttemptContext) -> Rotation | None:
        return Rotation(context)

    def hang_timeout(self, stage: ResolvedStage) -> float | str:
        return stage.execution.hang_timeout

    def node(self, stage: ResolvedStage) -> NodePlace | None:
        return None


LOCAL_ROLE = LocalRole()


class CaptureLoop(Protocol):
    """What the poll loop, the hang watch and a pause ask of the capture loop
    (:class:`nodus.runner.capture.capturer.Capturer`, or :class:`NoCapture`)."""

    watch_folders: bool  # False: an integration publishes whole folders (and saves on request)
    answered: set[int]  # save requests fulfilled by a committed capture
    commits: int
    records_read: int
    last_step: int | None

    @property
    def committed_id(self) -> str | None: ...

    def tick(self) -> None: ...

    def final_capture(self, died_at: float | None = None) -> None: ...

    def finish_uploads(self) -> None: ...

    def reported(self, step: int) -> None: ...


class NoCapture:
    """The capture loop of an attempt that captures nothing (another one captures for the
    stage): a preemption notice is still forwarded to its program as SIGTERM."""

    watch_folders = True

    def __init__(self) -> None:
        self.answered: set[int] = set()
        self.commits = 0
        self.records_read = 0
        self.last_step: int | None = None

    @property
    def committed_id(self) -> str | None:
        return None

    def tick(self) -> None:
        pass

    def final_capture(self, died_at: float | None = None) -> None:
        pass

    def finish_uploads(self) -> None:
        pass

    def reported(self, step: int) -> None:
        pass
