"""The records a store keeps beside its snapshots: holds, model versions, runs.

:class:`StoreRecords` is the part of a :class:`nodus.store.store.SnapshotStore` that keeps
them: the stored holds (:mod:`nodus.store.hold_records`), the registry's version records
(:mod:`nodus.store.model_records`) and the runs' records and leases
(:mod:`nodus.store.run_records`). Freeing a deleted version's blobs is deletion's
(``SnapshotDeleter.delete_model_version``).
"""

from __future__ import annotations

from nodus.errors import NotFoundError
from nodus.store import keys
from nodus.store.hold_records import HoldRecords
from nodus.store.kinds import KIND_WEIGHTS
from nodus.store.model_records import ModelRecords, ModelVersion
from nodus.store.run_records import RunRecords
from nodus.store.storage import Storage

__all__ = ["StoreRecords"]


class StoreRecords:
    """Hold, model-version and run records of one store."""

    def __init__(self, storage: Storage) -> None:
        self._storage = storage
        self.holds = HoldRecords(storage)
        """The stored holds (pins, released epoch holds) next to the snapshots they hold."""
        self.models = ModelRecords(storage)
        """The model-registry versions kept here (their own references to blobs)."""
        self.runs = RunRecords(storage)
        """The runs' records, the ``--key`` index and the leases."""

    def add_model_version(self, record: ModelVersion) -> None:
        """Store a version's record, so its blobs stay referenced whatever retention does.

        The record is written first, then the snapshot's weights are checked. A deletion writes
        its tombstone before it takes the sweep's mark of held blobs, so weights found without
        a tombstone now are freed, if ever, by a sweep whose mark holds this record; weights
        already being deleted refuse the version (NotFoundError).
        """
        self.models.write(record)
        if self._storage.exists(keys.tombstone_key(record.snapshot, KIND_WEIGHTS)) or not all(
            self._storage.exists(keys.blob_key(digest)) for digest in record.blobs
        ):
            self.models.delete(record.name, record.version)
            raise NotFoundError(
                f"snapshot {record.snapshot} no longer holds its weights (retention is deleting "
                "them); nothing to register"
            )
