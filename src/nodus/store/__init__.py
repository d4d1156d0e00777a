"""Immutable, content-addressed, verified snapshots over fsspec URLs.

``open_store(url)`` gives a :class:`SnapshotStore`; see ``docs/store.md`` for the layout and
the commit protocol, and ``docs/internals.md`` for the seam the runner codes against.
"""

from nodus.store.gc import GcReport
from nodus.store.kinds import KINDS, classify
from nodus.store.manifest import FileEntry, Manifest, SnapshotInfo
from nodus.store.store import SnapshotStore, open_store
from nodus.store.verify import VerifyReport

__all__ = [
    "KINDS",
    "FileEntry",
    "GcReport",
    "Manifest",
    "SnapshotInfo",
    "SnapshotStore",
    "VerifyReport",
    "classify",
    "open_store",
]
