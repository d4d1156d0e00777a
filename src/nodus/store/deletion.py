"""Crash-safe deletion: mark a kind as deleting, free its blobs, then finish the mark.

A tombstone (``tombstones/<id>.<kind>``) records the deletion of one kind of a snapshot::

    {"state": "deleting", "reason": "retention", "at": 1767225600.0}        written first
    {"state": "deleted", "reason": ..., "at": ..., "freed_bytes": 123}      once its blobs are freed

From the moment the first is written the kind is left out of listings, totals and restores, so
a kill at any later step leaves nothing that a reader could reach half deleted. The steps:

- ``delete_kind``: mark the kind; free its blobs that no held file shares; finish the mark
  (and any other mark of the snapshot still ``deleting``); if the snapshot holds no kind any
  more, remove it instead of finishing its marks.
- ``delete`` (a whole snapshot): mark every kind it holds; free its blobs; remove it.
- removing a snapshot: its manifest first (from then on it does not exist), then its
  tombstones, its hold records and its index entry, which without a manifest are only
  leftovers.
- ``finish_deletions``: finish every mark still ``deleting`` (a kill or a deferred sweep left
  it), remove snapshots that hold no kind any more, and remove tombstones, hold records and
  index entries whose manifest is gone (and index what was committed without an entry:
  :mod:`.run_index`).

A mark is finished (``deleted``) only on a snapshot that stays, where it tells listings what
retention took; a snapshot that goes takes its marks with it.

Blobs are freed while the manifest still names them, so a free that was deferred (a capture was
running) or killed is completed exactly by the next ``finish_deletions``; no blob has to wait
for the grace period of a full sweep. Every step can be repeated; a crash point (``_faults``)
sits between each two, named ``<operation>.<step>``.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from nodus._logging import Logger
from nodus.errors import NotFoundError, SnapshotDamagedError, UsageError
from nodus.store import keys, run_index
from nodus.store._faults import crash_point
from nodus.store.kinds import KINDS
from nodus.store.manifest import Manifest
from nodus.store.sweep import GcReport

if TYPE_CHECKING:
    from nodus.store.internals import DeleteInternals
    from nodus.store.storage import Storage

__all__ = [
    "DELETED",
    "DELETING",
    "delete_kind",
    "delete_snapshot",
    "finish_deletions",
    "pending",
    "records",
]

log = Logger("nodus.store")

DELETING = "deleting"
DELETED = "deleted"

Mark = tuple[Manifest, str, dict[str, Any]]  # a snapshot, one of its kinds, that kind's record


def records(storage: Storage, snapshot_id: str) -> dict[str, dict[str, Any]]:
    """The tombstone record of each kind of ``snapshot_id`` whose deletion has begun."""
    found = {}
    for kind in KINDS:
        record = _read(storage, snapshot_id, kind)
        if record is not None:
            found[kind] = record
    return found


def pending(storage: Storage) -> list[tuple[str, str]]:
    """(snapshot id, kind) of every deletion begun and not finished, sorted."""
    return sorted(
        (snapshot_id, kind)
        for snapshot_id, found in _all_records(storage).items()
        for kind, record in found.items()
        if record["state"] == DELETING
    )


def delete_kind(store: DeleteInternals, snapshot_id: str, kind: str, reason: str) -> GcReport:
    manifest = store.reader.stored(snapshot_id)
    if manifest.role != "checkpoint":
        raise UsageError(
            f"snapshot {snapshot_id} is a run's {manifest.role}: it is deleted only with its "
            "whole run, never one kind at a time"
        )
    if kind not in manifest.stored_kinds:
        return GcReport()
    found = records(store.storage, snapshot_id)
    if kind not in found:
        found[kind] = _mark(store, snapshot_id, kind, reason)
        crash_point("delete_kind.marked")
    return _complete(store, manifest, found, "delete_kind")


def delete_snapshot(store: DeleteInternals, snapshot_id: str, reason: str) -> GcReport:
    manifest = store.reader.stored(snapshot_id)
    found = records(store.storage, snapshot_id)
    for kind in manifest.stored_kinds:
        if kind not in found:
            found[kind] = _mark(store, snapshot_id, kind, reason)
            crash_point("delete.marked")
    return _complete(store, manifest, found, "delete")


def finish_deletions(store: DeleteInternals, retry_s: float) -> GcReport:
    # Tombstones and holds are listed before the manifests: a tombstone or a hold is only ever
    # written for a committed snapshot, so one whose manifest is missing from the later listing
    # belongs to a snapshot that is gone, never to one being committed meanwhile.
    listed = _all_records(store.storage)
    held = store.hold_records.names()
    indexed = run_index.runs_by_snapshot(store.storage)  # before the manifests, as the records
    existing = set(store.reader.ids())
    going = []
    for snapshot_id in sorted(listed.keys() & existing):
        try:
            manifest = store.reader.stored(snapshot_id)
        except (NotFoundError, SnapshotDamagedError):
            continue  # deleted meanwhile; or damaged, which the sweep refuses to guess about
        going.append((_tombstoned(manifest, listed[snapshot_id]), listed[snapshot_id]))
    marks = [mark for manifest, found in going for mark in _marks(manifest, found)]
    report = _finish(store, marks, "finish", retry_s)
    for manifest, found in going:
        done = all(record["state"] == DELETED for record in found.values())
        if manifest.emptied and (done or not report.deferred):
            _remove(store, manifest, found, "finish")
            report.removed_snapshots += 1
    for snapshot_id in sorted((listed.keys() | held.keys()) - existing):
        report.removed_records += _remove_records(store, snapshot_id, listed.get(snapshot_id, {}))
        crash_point("finish.orphan-removed")
    run_index.tidy(store.storage, store.reader.stored, indexed, existing)
    return report


# --- the steps ---------------------------------------------------------------------------------


def _complete(
    store: DeleteInternals, manifest: Manifest, found: dict[str, dict[str, Any]], step: str
) -> GcReport:
    """Finish the snapshot's marks still deleting; remove it once it holds no kind."""
    manifest = _tombstoned(manifest, found)
    report = _finish(store, _marks(manifest, found), step, retry_s=0.0)
    if not report.deferred and not manifest.kinds:
        _remove(store, manifest, found, step)
        report.removed_snapshots += 1
    return report


def _finish(store: DeleteInternals, marks: list[Mark], step: str, retry_s: float) -> GcReport:
    """Free the blobs of the marked kinds that nothing held shares, then mark them deleted
    (those of a snapshot left with no kind need not be: it is removed next, marks and all)."""
    if not marks:
        return GcReport()
    candidates = {
        entry.hash: entry.size
        for manifest, kind, _record in marks
        for entry in manifest.files
        if entry.kind == kind and not entry.is_link
    }
    report = store.free(candidates, min_age_s=0.0, retry_s=retry_s)
    if report.deferred:
        report.pending_deletions = len(marks)
        return report
    crash_point(f"{step}.freed")
    freed = {keys.hash_of_blob_key(key) for key in report.deleted}
    for manifest, kind, record in marks:
        if not manifest.kinds:
            continue
        sizes = {e.hash: e.size for e in manifest.files if e.kind == kind and e.hash in freed}
        record.update(state=DELETED, freed_bytes=sum(sizes.values()))
        _write(store, manifest.id, kind, record)
        report.finished_deletions += 1
        log.info("store: deleted %s of %s (%s)", kind, manifest.id, record.get("reason"))
        crash_point(f"{step}.finished")
    return report


def _remove(
    store: DeleteInternals, manifest: Manifest, found: dict[str, dict[str, Any]], step: str
) -> None:
    store.storage.delete(keys.manifest_key(manifest.id))
    store.reader.forget(manifest.id)
    log.info("store: removed snapshot %s", manifest.id)
    crash_point(f"{step}.manifest-removed")
    for kind in found:
        store.storage.delete(keys.tombstone_key(manifest.id, kind))
    crash_point(f"{step}.tombstones-removed")
    store.hold_records.delete_all(manifest.id)
    run_index.forget(store.storage, manifest)


def _remove_records(store: DeleteInternals, snapshot_id: str, kinds: Collection[str]) -> int:
    """Remove the tombstones and hold records left by a snapshot that no longer exists."""
    for kind in kinds:
        store.storage.delete(keys.tombstone_key(snapshot_id, kind))
    return len(kinds) + store.hold_records.delete_all(snapshot_id)


# --- tombstone records -------------------------------------------------------------------------


def _marks(manifest: Manifest, found: dict[str, dict[str, Any]]) -> list[Mark]:
    return [(manifest, kind, rec) for kind, rec in found.items() if rec["state"] == DELETING]


def _tombstoned(manifest: Manifest, found: dict[str, dict[str, Any]]) -> Manifest:
    return dataclasses.replace(manifest, deleting=frozenset(found))


def _mark(store: DeleteInternals, snapshot_id: str, kind: str, reason: str) -> dict[str, Any]:
    record = {"state": DELETING, "reason": reason, "at": time.time()}
    _write(store, snapshot_id, kind, record)
    log.info("store: deleting %s of %s (%s)", kind, snapshot_id, reason)
    return record


def _write(store: DeleteInternals, snapshot_id: str, kind: str, record: dict[str, Any]) -> None:
    data = json.dumps(record, sort_keys=True).encode()
    store.storage.write(keys.tombstone_key(snapshot_id, kind), data)


def _read(storage: Storage, snapshot_id: str, kind: str) -> dict[str, Any] | None:
    """The record, or None when there is no tombstone. One that cannot be read (or an empty
    one, as nodus wrote before tombstones had states) counts as a deletion not yet finished:
    finishing it again is harmless, taking it for finished could leak its blobs."""
    try:
        raw = storage.read(keys.tombstone_key(snapshot_id, kind))
    except FileNotFoundError:
        return None
    try:
        record = json.loads(raw)
    except (ValueError, RecursionError):
        record = None
    if not isinstance(record, dict) or record.get("state") not in (DELETING, DELETED):
        return {"state": DELETING, "reason": "", "at": None}
    # Listings show these: a value of another type than nodus writes is shown as none.
    checks = {"reason": str, "at": int | float, "freed_bytes": int}
    return {
        key: value
        for key, value in record.items()
        if key not in checks or (isinstance(value, checks[key]) and not isinstance(value, bool))
    }


def _all_records(storage: Storage) -> dict[str, dict[str, dict[str, Any]]]:
    listed = (info.key for info in storage.list(keys.TOMBSTONES))
    return {
        snapshot_id: {
            kind: record for kind in kinds if (record := _read(storage, snapshot_id, kind))
        }
        for snapshot_id, kinds in keys.names_by_snapshot(listed, keys.tombstone_of_key).items()
    }
