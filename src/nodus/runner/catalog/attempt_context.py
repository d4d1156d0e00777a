"""What one attempt's workers share: its store, catalog, run, stage and number.

An attempt's capture loop (:mod:`nodus.runner.capture.capturer`), its rotation
(:mod:`nodus.runner.upkeep.rotation`) and its uploads (:mod:`nodus.runner.remote.uploads`) each
record events in the attempt's name and fence their commits by its number. They take one
:class:`AttemptContext` for that, instead of the same five arguments each and a copy of the
same ``_event`` each.

It lives in the catalog room, the runner's bottom one, so that every room above may take it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nodus.errors import StaleAttemptError
from nodus.runner.catalog.core import Catalog
from nodus.schemas.resolved import ResolvedStage

if TYPE_CHECKING:
    from nodus.store.store import SnapshotStore

__all__ = ["AttemptContext"]


@dataclass(frozen=True)
class AttemptContext:
    """One attempt (``attempt``: its number, the fencing token) of ``stage`` of ``run_id``."""

    store: SnapshotStore  # the run's store (a remote one: where uploads go)
    catalog: Catalog
    run_id: str
    stage: ResolvedStage
    attempt: int

    def event(self, type_: str, details: dict[str, Any]) -> None:
        """Record ``type_`` in the run's event log, as this attempt's."""
        self.catalog.add_event(
            self.run_id, type_, details, stage=self.stage.name, attempt=self.attempt
        )

    def fence(self) -> None:
        """Attempt fencing before a commit into the run's store: StaleAttemptError unless this
        attempt is still the stage's current one, here and in the store's run record."""
        self.fence_here()
        # the store's record and lease, when driven
        self.catalog.check_fences(self.run_id, self.stage.name, self.attempt)

    def fence_here(self) -> None:
        """The catalog's part of :meth:`fence`, which needs no store (nor the network)."""
        current = self.catalog.current_attempt(self.run_id, self.stage.name)
        if current != self.attempt:
            raise StaleAttemptError(
                f"attempt {self.attempt} of {self.run_id}/{self.stage.name} was superseded by "
                f"attempt {current}; its snapshot is not committed"
            )
