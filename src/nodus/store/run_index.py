"""Which run each snapshot is of, by key name alone: ``index/<snapshot id>.<run id>``.

Listing one run's snapshots (every recovery, a run's end, ``nodus snapshots list RUN``) would
otherwise read every manifest of the store: a fresh process pays for the whole store's history
(about 0.1 ms a manifest on a local disk, a request each on a remote store). An entry is
written right after its manifest is committed (a capture, an upload); a listing of run R
reads the manifests indexed under R and those indexed under no run, and leaves the others
unread.

An entry never decides what exists: the manifests' listing does. A manifest without an entry
(committed before the index existed, or whose entry a crash or a full disk lost) is read as
before, so an entry is never needed for a right answer, only for a fast one; ``nodus gc``
writes the missing ones. An entry whose manifest is gone names nothing; its deletion removes
it, and ``nodus gc`` removes what a crash left (written after the manifest, an entry whose
manifest a later listing misses belongs to a snapshot that is gone).
"""

from __future__ import annotations

from collections.abc import Callable

from nodus._logging import Logger
from nodus.errors import NotFoundError, SnapshotDamagedError, StoreError
from nodus.store import keys
from nodus.store.manifest import Manifest
from nodus.store.storage import Storage

__all__ = ["forget", "record", "runs_by_snapshot", "tidy"]

log = Logger("nodus.store")


def record(storage: Storage, manifest: Manifest) -> None:
    """Write ``manifest``'s entry, once it is committed. A failure is only logged: the snapshot
    is committed all the same and is found by reading its manifest."""
    key = keys.index_key(manifest.id, manifest.run)
    if key is None:
        return
    try:
        storage.write(key, b"")
    except (OSError, StoreError) as error:
        log.warning("store: %s is committed, its index entry not (%s)", manifest.id, error)


def forget(storage: Storage, manifest: Manifest) -> None:
    """Remove ``manifest``'s entry, once the manifest is gone."""
    key = keys.index_key(manifest.id, manifest.run)
    if key is not None:
        storage.delete(key)


def runs_by_snapshot(storage: Storage) -> dict[str, set[str]]:
    """Every entry of the index: snapshot id -> the runs named for it (one, in a sound store)."""
    listed = (info.key for info in storage.list(keys.INDEX))
    return keys.names_by_snapshot(listed, keys.index_of_key)


def tidy(
    storage: Storage,
    read: Callable[[str], Manifest],
    indexed: dict[str, set[str]],
    existing: set[str],
) -> None:
    """Entries of snapshots gone removed, snapshots committed without one given theirs (``nodus
    gc``); ``indexed`` listed before ``existing``, as gc lists every record of a snapshot."""
    for snapshot_id in sorted(indexed.keys() - existing):
        for run in indexed[snapshot_id]:
            key = keys.index_key(snapshot_id, run)
            if key is not None:
                storage.delete(key)
    for snapshot_id in sorted(existing - indexed.keys()):
        try:
            manifest = read(snapshot_id)
        except (NotFoundError, SnapshotDamagedError):
            continue  # removed meanwhile (or just now); a damaged one is verify's to judge
        record(storage, manifest)
