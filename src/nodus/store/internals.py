"""What the store's helper modules (deletion, verify) use of a :class:`SnapshotStore`.

They work on a store's manifests and blobs through this narrow view rather than importing the
store itself, which imports them: the dependency runs one way.
"""

from __future__ import annotations

from typing import Protocol

from nodus.store.hold_records import HoldRecords
from nodus.store.manifest import Manifest
from nodus.store.model_records import ModelRecords
from nodus.store.storage import Storage
from nodus.store.sweep import GcReport

__all__ = ["StoreInternals", "Verdict"]

Verdict = tuple[str | None, int]  # a blob's problem (None: sound) and the bytes it holds


class StoreInternals(Protocol):
    """The parts of :class:`nodus.store.store.SnapshotStore` that deletion and verify use."""

    @property
    def url(self) -> str: ...
    @property
    def storage(self) -> Storage: ...
    @property
    def hold_records(self) -> HoldRecords: ...
    @property
    def model_records(self) -> ModelRecords: ...

    def check(self, snapshot_id: str, _verdicts: dict[str, Verdict] | None = None) -> list[str]: ...
    def _stored(self, snapshot_id: str) -> Manifest: ...
    def _ids(self) -> list[str]: ...
    def _forget(self, snapshot_id: str) -> None: ...
    def _blob_verdict(self, digest: str, verdicts: dict[str, Verdict]) -> str | None: ...
    def _free(
        self, candidates: dict[str, int] | None, min_age_s: float, retry_s: float = 0.0
    ) -> GcReport: ...
