"""What the attempts of one drive of a run share: what stays (``RunContext``, frozen), what
changes while the drive goes on (``DriveState``, the engine's), and what the parts of one
attempt share (``AttemptFacts``, frozen).

Nothing run-wide changes through the context: a signal handler, an attempt's end and its hang
watch write the drive's state, an object the engine makes, names and hands to each attempt.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any

from nodus.errors import UsageError
from nodus.runner.attempt.role import AttemptRole
from nodus.runner.catalog.attempt_context import AttemptContext
from nodus.runner.catalog.core import Catalog
from nodus.runner.processes.containment import attempt_token
from nodus.runner.recovery.decisions import Restore
from nodus.runner.upkeep.lineage import Parent
from nodus.runner.workspace.launch import Launch
from nodus.runner.workspace.layout import Workspace
from nodus.schemas.backends import drive_options
from nodus.schemas.resolved import ResolvedStage

if TYPE_CHECKING:
    from nodus.store.store import SnapshotStore

__all__ = ["HERE", "AttemptFacts", "AttemptPlan", "DriveState", "Placement", "RunContext"]


@dataclass(frozen=True)
class Placement:
    """Where a drive runs attempts: ``--backend`` (None: each stage's own) and the drive
    options given for the backends (``--ray-address``: by flag), carried to them as they are
    (:mod:`nodus.runner.backends.base`). Options of a drive, never stored with the run."""

    backend: str | None = None
    options: tuple[tuple[str, str], ...] = ()  # (flag, value), in the order given

    @classmethod
    def given(cls, backend: str | None, values: Mapping[str, str | None]) -> Placement:
        """The placement of ``--backend`` and the drive options' values by flag (None: not
        given); UsageError for a flag no backend of the registry takes."""
        known = [option.flag for option in drive_options()]
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise UsageError(
                f"no backend takes the option {', '.join(unknown)}; the backends' options are: "
                f"{', '.join(known) or 'none'}"
            )
        return cls(backend, tuple((flag, v) for flag, v in values.items() if v is not None))

    def option(self, flag: str) -> str | None:
        """The value given for ``flag`` (``--ray-address``), or None."""
        return dict(self.options).get(flag)

    def argv(self) -> list[str]:
        """The same placement as the background runner's options (``runner/submit/detach.py``)."""
        argv = ["--backend", self.backend] if self.backend else []
        for flag, value in self.options:
            argv += [flag, value]
        return argv


HERE = Placement()
"""No ``--backend`` and no drive option: each stage's own backend."""


@dataclass(frozen=True)
class RunContext:
    """What every attempt of a drive of a run shares, unchanged while it lasts."""

    home: str
    catalog: Catalog
    store: SnapshotStore
    run_id: str
    terminal: IO[str]
    launches: Mapping[str, Launch] = field(default_factory=dict)  # by stage; empty: an old run
    qualifying: bool = False  # `nodus qualify` only: see protocol.Settings.qualifying
    # `--backend` of this drive (None: each stage's own) and its backends' drive options
    placement: Placement = HERE

    def event(
        self,
        type_: str,
        details: dict[str, Any],
        stage: str | None = None,
        attempt: int | None = None,
    ) -> None:
        self.catalog.add_event(self.run_id, type_, details, stage=stage, attempt=attempt)

    def attempt_context(self, stage: ResolvedStage, number: int) -> AttemptContext:
        """What the workers of attempt ``number`` of ``stage`` share."""
        return AttemptContext(self.store, self.catalog, self.run_id, stage, number)


@dataclass(frozen=True)
class AttemptPlan:
    """What the engine asks of one attempt, whichever backend runs it: the stage, the run's
    source snapshot for it, the earlier stages' outputs laid over it (``overlays``), what to
    restore, whether it recovers (the run stays RECOVERING until the program runs again), and
    the run's parent when this stage continues it (:mod:`nodus.runner.upkeep.lineage`)."""

    stage: ResolvedStage
    source: str
    restore: Restore
    overlays: tuple[str, ...] = ()
    recovering: bool = False
    inherited: Parent | None = None

    @classmethod
    def of(
        cls,
        stage: ResolvedStage,
        source: str,
        restore: Restore,
        overlays: Sequence[str] = (),
        recovering: bool = False,
        inherited: Parent | None = None,
    ) -> AttemptPlan:
        return cls(stage, source, restore, tuple(overlays), recovering, inherited)


@dataclass
class DriveState:
    """What changes while one drive goes on: made by the engine (``Runner.state``) and handed
    to each attempt, the one place attempts leave something for the next."""

    # The preemption notice: the signal the runner got (SIGTERM, SIGINT), set by its handler.
    notice: int | None = None
    # The last attempt's supervisor saw its whole tree end, or no attempt of the run ever
    # started: no sweep can find anything of it.
    tree_gone: bool = False
    # By stage: the longest interval between progress signals its training has shown in this
    # drive (ms), so a recovered attempt's hang timeout starts from it (recovery.hangs).
    longest_progress_ms: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class AttemptFacts:
    """What the parts of one attempt (prepare, launch, supervise) share: the drive's context,
    the attempt's number and workers' context (``context``), its workspace and its role."""

    ctx: RunContext
    context: AttemptContext
    ws: Workspace
    role: AttemptRole

    @property
    def stage(self) -> ResolvedStage:
        return self.context.stage

    @property
    def number(self) -> int:
        return self.context.attempt

    @property
    def token(self) -> str:
        """The token every process of this attempt carries (containment)."""
        return attempt_token(self.role.scope(self.ctx.run_id), self.stage.name, self.number)
