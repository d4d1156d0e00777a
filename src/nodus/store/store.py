"""The snapshot store: one store's parts, opened over one storage.

:class:`SnapshotStore` keeps only what the store is (its storage and URL) and the parts that do
the work, each a class of its own module: :attr:`~SnapshotStore.writer` (capture,
:mod:`nodus.store.capturing`), :attr:`~SnapshotStore.reader` (listing, restore, check, verify,
:mod:`nodus.store.reading`), :attr:`~SnapshotStore.deleter` (deletion and the blob sweep,
:mod:`nodus.store.deleting`) and :attr:`~SnapshotStore.records` (holds, model versions, runs,
:mod:`nodus.store.records`). The parts share what this object remembers (the capture's hashes,
the blobs hashed here, the manifests read), so keep one store object per attempt.

Its calls (``store.capture``, ``store.list``, ``store.delete_kind``, …, docs/internals.md) are
the parts' own methods, bound here once: a caller needing one part may take it instead.
"""

from __future__ import annotations

from typing import Any

from nodus.schemas import defaults
from nodus.store.capturing import SnapshotWriter
from nodus.store.deleting import SnapshotDeleter
from nodus.store.hold_records import HoldRecords
from nodus.store.live_folder import FileCache
from nodus.store.model_records import ModelRecords
from nodus.store.opening import open_storage
from nodus.store.reading import SnapshotReader
from nodus.store.records import StoreRecords
from nodus.store.storage import Storage
from nodus.store.trust import VerifiedBlobs

__all__ = ["SnapshotStore", "open_store"]


def open_store(url: str | None = None, **storage_options: Any) -> SnapshotStore:
    """The store at ``url`` (``file://``, ``memory://``, ``s3://``, … or a bare absolute path).

    Without a URL: ``$NODUS_STORE``, else ``file://$NODUS_HOME/store``. ``storage_options`` go
    to fsspec (for example ``endpoint_url`` for an S3-compatible server).
    """
    return SnapshotStore(open_storage(url or defaults.store_url(), **storage_options))


class SnapshotStore:
    """Immutable, content-addressed, verified snapshots in one store, in four parts."""

    def __init__(self, storage: Storage) -> None:
        self._storage = storage
        files = FileCache()  # the capture's hashes; a restore takes unchanged files by them
        verified = VerifiedBlobs()  # blobs hashed here: a restore may link them unread
        self.records = StoreRecords(storage)
        self.reader = SnapshotReader(storage, files, verified, self.records.models)
        self.writer = SnapshotWriter(storage, files, verified, self.reader)
        self.deleter = SnapshotDeleter(storage, self.reader, self.records)
        # capture
        self.capture = self.writer.capture
        # reading
        self.list = self.reader.list
        self.get = self.reader.get
        self.restore = self.reader.restore
        self.restore_files = self.reader.restore_files
        self.read_file = self.reader.read_file
        self.check = self.reader.check
        self.verify = self.reader.verify
        # deletion and the sweep
        self.delete_kind = self.deleter.delete_kind
        self.delete = self.deleter.delete
        self.finish_deletions = self.deleter.finish_deletions
        self.pending_deletions = self.deleter.pending_deletions
        self.deletions = self.deleter.deletions
        self.unreferenced_blobs = self.deleter.unreferenced_blobs
        self.gc_blobs = self.deleter.gc_blobs
        self.delete_model_version = self.deleter.delete_model_version
        # records
        self.add_model_version = self.records.add_model_version

    @property
    def url(self) -> str:
        return self._storage.url

    @property
    def storage(self) -> Storage:
        """Where the store keeps its objects, by the keys of :mod:`nodus.store.keys`."""
        return self._storage

    @property
    def hold_records(self) -> HoldRecords:
        """The stored holds (pins, released epoch holds) next to this store's snapshots."""
        return self.records.holds

    @property
    def model_records(self) -> ModelRecords:
        """The model-registry versions kept in this store (their own references to blobs)."""
        return self.records.models
