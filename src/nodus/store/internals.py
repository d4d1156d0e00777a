"""What the store's helper modules (deletion, verify) use of a store's parts.

They work on a store's manifests and blobs through these narrow views rather than importing the
parts themselves, which import them: the dependency runs one way. :class:`ReadInternals` is
what :class:`nodus.store.reading.SnapshotReader` gives verify; :class:`DeleteInternals` what
:class:`nodus.store.deleting.SnapshotDeleter` gives deletion.
"""

from __future__ import annotations

from typing import Protocol

from nodus.store.hold_records import HoldRecords
from nodus.store.manifest import Manifest
from nodus.store.model_records import ModelRecords
from nodus.store.storage import Storage
from nodus.store.sweep import GcReport

__all__ = ["DeleteInternals", "ReadInternals", "Verdict"]

Verdict = tuple[str | None, int]  # a blob's problem (None: sound) and the bytes it holds


class ReadInternals(Protocol):
    """The reading part of a store, as verify and deletion use it."""

    @property
    def url(self) -> str: ...
    @property
    def storage(self) -> Storage: ...
    @property
    def model_records(self) -> ModelRecords: ...

    def check(self, snapshot_id: str, _verdicts: dict[str, Verdict] | None = None) -> list[str]: ...
    def stored(self, snapshot_id: str) -> Manifest: ...
    def ids(self) -> list[str]: ...
    def forget(self, snapshot_id: str) -> None: ...
    def blob_verdict(self, digest: str, verdicts: dict[str, Verdict]) -> str | None: ...


class DeleteInternals(Protocol):
    """The deleting part of a store, as deletion uses it."""

    @property
    def storage(self) -> Storage: ...
    @property
    def hold_records(self) -> HoldRecords: ...
    @property
    def reader(self) -> ReadInternals: ...

    def free(
        self, candidates: dict[str, int] | None, min_age_s: float, retry_s: float = 0.0
    ) -> GcReport: ...
