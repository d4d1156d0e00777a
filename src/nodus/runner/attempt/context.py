"""What every attempt of one drive of a run shares."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING

from nodus.runner.catalog.attempt_context import AttemptContext
from nodus.runner.catalog.core import Catalog
from nodus.runner.workspace.launch import Launch
from nodus.schemas.resolved import ResolvedStage

if TYPE_CHECKING:
    from nodus.store.store import SnapshotStore

__all__ = ["RunContext"]


@dataclass
class RunContext:
    """What every attempt of a run shares; ``notice`` is set by the runner's signal handler."""

    home: str
    catalog: Catalog
    store: SnapshotStore
    run_id: str
    terminal: IO[str]
    notice: int | None = None
    launches: dict[str, Launch] = field(default_factory=dict)  # by stage; empty: an old run
    qualifying: bool = False  # `nodus qualify` only: see protocol.Settings.qualifying
    backend: str | None = None  # `--backend` of this drive; None: each stage's own
    ray_address: str | None = None  # `--ray-address`; None: RAY_ADDRESS, else Ray's own lookup
    # The last attempt's supervisor saw its whole tree end: no sweep can find anything of it.
    tree_gone: bool = False
    # By stage: the longest interval between progress signals its training has shown in this
    # drive (ms), so a recovered attempt's hang timeout starts from it (recovery.hangs).
    longest_progress_ms: dict[str, int] = field(default_factory=dict)

    def event(
        self, type_: str, details: dict, stage: str | None = None, attempt: int | None = None
    ) -> None:
        self.catalog.add_event(self.run_id, type_, details, stage=stage, attempt=attempt)

    def attempt_context(self, stage: ResolvedStage, number: int) -> AttemptContext:
        """What the workers of attempt ``number`` of ``stage`` share."""
        return AttemptContext(self.store, self.catalog, self.run_id, stage, number)
