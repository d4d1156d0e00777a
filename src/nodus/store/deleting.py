"""Deleting from a store: a kind, a snapshot, a model version; finishing deletions; the sweep.

:class:`SnapshotDeleter` is the part of a :class:`nodus.store.store.SnapshotStore` that frees
space, the only executor of deletions (retention, expiry, ``nodus gc`` and ``runs delete``
decide what goes). The steps of a deletion are :mod:`nodus.store.deletion`'s, the blob sweep's
:mod:`nodus.store.sweep`'s; this part times and logs them and gives the sweep its mark
(:meth:`SnapshotDeleter.held_blobs`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from nodus._logging import Logger
from nodus.errors import NotFoundError, SnapshotDamagedError, StoreError, UsageError
from nodus.store import deletion
from nodus.store.hold_records import HoldRecords
from nodus.store.kinds import KINDS
from nodus.store.reading import SnapshotReader
from nodus.store.records import StoreRecords
from nodus.store.storage import Storage
from nodus.store.sweep import GcReport, sweep, unreferenced

__all__ = ["SnapshotDeleter"]

log = Logger("nodus.store")

BLOB_GC_GRACE_S = 3600.0
"""Unreferenced blobs younger than this survive blob GC (a capture may be about to commit them)."""

SWEEP_RETRY_S = 5.0
"""How long ``finish_deletions`` and ``gc_blobs`` keep retrying a sweep deferred by running
captures or by another gc before reporting it deferred: captures come and go between
checkpoints, so a sweep that tried only once could be put off forever by a busy store."""


class SnapshotDeleter:
    """Crash-safe deletion and the blob sweep of one store."""

    def __init__(self, storage: Storage, reader: SnapshotReader, records: StoreRecords) -> None:
        self._storage = storage
        self._reader = reader
        self._records = records

    @property
    def storage(self) -> Storage:
        return self._storage

    @property
    def reader(self) -> SnapshotReader:
        return self._reader

    @property
    def hold_records(self) -> HoldRecords:
        return self._records.holds

    def delete_kind(self, snapshot_id: str, kind: str, *, reason: str = "retention") -> GcReport:
        """Delete one kind of a checkpoint snapshot, keeping the others (see ``deletion.py``).

        The kind is marked ``deleting`` first: from then on it is left out of listings, totals
        and restores. Its blobs that nothing held shares are freed and the mark finished; when
        a capture is running the free is deferred (the report says so) and the next
        ``finish_deletions`` completes it. A snapshot left with no kind disappears. Deleting a
        kind already marked only finishes it; one the snapshot does not hold is a no-op.
        """
        if kind not in KINDS:
            raise UsageError(f"artifact kind {kind!r}: use one of {', '.join(KINDS)}")
        return self._timed(
            f"delete {kind} of {snapshot_id}",
            lambda: deletion.delete_kind(self, snapshot_id, kind, reason),
        )

    def delete(self, snapshot_id: str, *, reason: str = "expiry") -> GcReport:
        """Delete a whole snapshot of any role: every kind is marked, freed, then it goes."""
        return self._timed(
            f"delete {snapshot_id}", lambda: deletion.delete_snapshot(self, snapshot_id, reason)
        )

    def finish_deletions(self) -> GcReport:
        """Complete every interrupted or deferred deletion; remove snapshots with no kind left
        and the tombstones and hold records of snapshots that are gone. Idempotent, and safe
        beside captures and other gc processes; a sweep deferred by them is retried for up to
        ``SWEEP_RETRY_S`` before the report says deferred."""
        retry_s = SWEEP_RETRY_S
        return self._timed("finish deletions", lambda: deletion.finish_deletions(self, retry_s))

    def pending_deletions(self) -> list[tuple[str, str]]:
        """(snapshot id, kind) of every deletion begun and not yet finished."""
        return deletion.pending(self._storage)

    def deletions(self, snapshot_id: str) -> dict[str, dict[str, Any]]:
        """Kind -> its tombstone record (``state``, ``reason``, ``at``[, ``freed_bytes``]) for
        each kind of the snapshot whose deletion has begun."""
        return deletion.records(self._storage, snapshot_id)

    def unreferenced_blobs(self, grace_s: float = BLOB_GC_GRACE_S) -> list[tuple[str, int]]:
        """(key, size) of each blob a sweep would delete now; reads only (``gc --dry-run``)."""
        doomed, _kept = unreferenced(self._storage, self.held_blobs(), grace_s)
        return doomed

    def gc_blobs(self, grace_s: float = BLOB_GC_GRACE_S) -> GcReport:
        """Delete blobs no committed snapshot holds that are older than ``grace_s``; idempotent.

        A sweep deferred by running captures or another gc is retried for up to
        ``SWEEP_RETRY_S``."""
        retry_s = SWEEP_RETRY_S
        return self._timed("blob sweep", lambda: self.free(None, grace_s, retry_s))

    def _timed(self, what: str, work: Callable[[], GcReport]) -> GcReport:
        started = time.monotonic()
        report = work()
        log.info(
            "store: %s: %d blobs (%d bytes) freed%s in %.2fs",
            what,
            report.deleted_blobs,
            report.freed_bytes,
            f", deferred: {report.reason}" if report.deferred else "",
            time.monotonic() - started,
        )
        return report

    def free(
        self, candidates: dict[str, int] | None, min_age_s: float, retry_s: float = 0.0
    ) -> GcReport:
        """Delete unheld blobs: the ``candidates`` (digest -> size), or any older than
        ``min_age_s`` when None; retried while deferred, for up to ``retry_s``."""
        return sweep(self._storage, self.held_blobs, candidates, min_age_s, retry_s)

    def held_blobs(self) -> set[str]:
        """The sweep's mark: every blob a registered version or a kind not being deleted names."""
        held = self._records.models.held_blobs()  # registered versions keep their weights' blobs
        deleting = self._reader.tombstones()
        for snapshot_id in self._reader.ids():
            try:
                by_kind = self._reader.blobs_by_kind(snapshot_id)
            except NotFoundError:
                continue  # deleted while we looked
            except SnapshotDamagedError as error:
                # Its blobs cannot be told apart from garbage; never sweep on a guess.
                raise StoreError(
                    f"{error}; blob GC stopped. Run `nodus store verify --repair` first."
                ) from None
            gone = deleting.get(snapshot_id, frozenset())
            for kind, digests in by_kind.items():
                if kind not in gone:
                    held |= digests
        return held

    def delete_model_version(self, name: str, version: int) -> GcReport:
        """Remove a version's record and free its blobs that nothing else references."""
        models = self._records.models
        record = models.read(name, version)
        if record is None:
            return GcReport()
        models.delete(name, version)
        candidates = {e.hash: e.size for e in record.files if not e.is_link}
        return self._timed(f"delete model {name}:{version}", lambda: self.free(candidates, 0.0))
