"""Immutable, content-addressed, verified snapshots over a small storage protocol.

``open_store(url)`` gives a :class:`SnapshotStore` over the :class:`Storage` that
``open_storage(url)`` picks: local files for ``file://``, fsspec for ``memory://``, ``s3://``,
``gs://``, …. See ``docs/store.md`` for the layout and the commit protocol, and
``docs/internals.md`` for the seam the runner codes against. Modules whose names start with
``_`` are this package's own; nothing outside it imports them.

    store.py            ``SnapshotStore``: one store's storage and its four parts
    capturing.py        ``SnapshotWriter``: capture, the commit
    reading.py          ``SnapshotReader``: listings, manifests, restore, check, verify
    deleting.py         ``SnapshotDeleter``: deletion of a kind, a snapshot, a version; the sweep
    records.py          ``StoreRecords``: hold, model-version and run records
    storage.py          the storage protocol: a handful of operations on ``str`` keys
    opening.py          which storage a URL opens
    local_storage.py    ``file://``: a folder on this machine, with the POSIX fast paths
    fsspec_storage.py   object stores over one fsspec filesystem
    keys.py             snapshot ids and store keys, each built and parsed by one function
    manifest.py         what a snapshot is: the manifest, written last to commit it
    fields.py           typed reads of the JSON objects a store holds
    names.py            what a path in a snapshot may be
    kinds.py            whether a file is weights, state or plain files
    live_folder.py      a live folder captured consistently
    trust.py            blobs this store object hashed itself, trusted while unchanged
    restore.py          verified restore
    restorable.py       which snapshots a new attempt may restore, newest first
    deletion.py         crash-safe deletion of a kind
    sweep.py            the blob sweep (the mechanics of gc), safe beside captures and sweeps
    owners.py           who wrote a coordination flag, and whether it still runs
    hold_records.py     stored holds, next to the snapshot they hold
    run_records.py      run records and leases: a run recoverable from the store alone
    run_index.py        which run each snapshot is of, by key name: a run's listing reads its own
    model_records.py    the registry's versions: each one's reference to its weights' blobs
    upload.py           background upload of staged snapshots to a remote store
    verify.py           ``nodus store verify``: every manifest and blob, optionally repaired
    internals.py        what deletion and verify use of the store's parts
    _io.py              one pass that copies and hashes (capture and restore)
    _direct.py          direct I/O for large blobs, past the page cache
    _faults.py          crash injection for the store's tests, never set in normal use
"""

from nodus.store.hold_records import HoldRecords
from nodus.store.kinds import KINDS, classify
from nodus.store.manifest import FileEntry, Manifest, SnapshotInfo
from nodus.store.opening import open_storage
from nodus.store.storage import ObjectInfo, Storage
from nodus.store.store import SnapshotStore, open_store
from nodus.store.sweep import GcReport
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
