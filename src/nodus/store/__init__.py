"""Immutable, content-addressed, verified snapshots over a small storage protocol.

``open_store(url)`` gives a :class:`SnapshotStore` over the :class:`Storage` that
``open_storage(url)`` picks: local files for ``file://``, fsspec for ``memory://``, ``s3://``,
``gs://``, …. See ``docs/store.md`` for the layout and the commit protocol, and
``docs/internals.md`` for the seam the runner codes against. Modules whose names start with
``_`` are this package's own; nothing outside it imports them.
"""

from nodus.store.gc import GcReport
from nodus.store.hold_records import HoldRecords
from nodus.store.kinds import KINDS, classify
from nodus.store.manifest import FileEntry, Manifest, SnapshotInfo
from nodus.store.opening import open_storage
from nodus.store.storage import ObjectInfo, Storage
from nodus.store.store import SnapshotStore, open_store
from nodus.store.verify import VerifyReport

__all__ = [
    "KINDS",
    "FileEntry",
    "GcReport",
    "HoldRecords",
    "Manifest",
    "ObjectInfo",
    "SnapshotInfo",
    "SnapshotStore",
    "Storage",
    "VerifyReport",
    "classify",
    "open_storage",
    "open_store",
]
