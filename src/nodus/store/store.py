"""The snapshot store: capture, list, restore, check, per-kind deletion and blob GC.

Public methods carry the guards, logging and timing; the work is done by the modules next to
this one (live_folder, restore, deletion, gc, verify). A snapshot exists only once its manifest
is written, and that write comes after every blob it names is stored: nothing else is ever a
commit.
"""

from __future__ import annotations

import builtins
import dataclasses
import enum
import json
import logging
import os
import stat
import time
from collections.abc import Callable, Sequence
from typing import Any, BinaryIO, Literal

from nodus.errors import NotFoundError, SnapshotDamagedError, StoreError, UsageError
from nodus.protocol import content_hasher
from nodus.schemas import defaults
from nodus.store import deletion, keys
from nodus.store._io import hash_stream
from nodus.store.hold_records import HoldRecords
from nodus.store.internals import Verdict
from nodus.store.kinds import KIND_WEIGHTS, KINDS, classify
from nodus.store.live_folder import Candidate, FileCache, ReadResult, read_consistently, select
from nodus.store.manifest import PERMISSIONS, FileEntry, Manifest, SnapshotInfo
from nodus.store.model_records import ModelRecords, ModelVersion
from nodus.store.opening import open_storage
from nodus.store.restore import Sources, unsafe_reason, write_verified
from nodus.store.restore import restore as _restore
from nodus.store.storage import Storage
from nodus.store.sweep import GcReport, Intent, sweep, unreferenced, wait_for_sweep
from nodus.store.trust import VerifiedBlobs
from nodus.store.verify import MISSING, VerifyReport, verify_store

__all__ = ["SnapshotStore", "open_store"]

log = logging.getLogger("nodus.store")
EventSink = Callable[[str, dict], None]


def open_store(url: str | None = None, **storage_options) -> SnapshotStore:
    """The store at ``url`` (``file://``, ``memory://``, ``s3://``, … or a bare absolute path).

    Without a URL: ``$NODUS_STORE``, else ``file://$NODUS_HOME/store``. ``storage_options`` go
    to fsspec (for example ``endpoint_url`` for an S3-compatible server).
    """
    return SnapshotStore(open_storage(url or defaults.store_url(), **storage_options))


class SnapshotStore:
    """Immutable, content-addressed, verified snapshots in one store.

    Keep one object per attempt: it remembers the hashes of files it has captured, so an
    unchanged file is neither read nor stored again by the next capture.
    """

    def __init__(self, storage: Storage) -> None:
        self._storage = storage
        self._holds = HoldRecords(storage)
        self._models = ModelRecords(storage)
        self._files = FileCache()
        self._manifests: dict[str, Manifest] = {}  # manifests never change once committed
        self._blobs: dict[str, dict[str, frozenset[str]]] = {}  # id -> kind -> its blobs
        self._verified = VerifiedBlobs()  # blobs hashed here: a restore may link them unread

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
        return self._holds

    @property
    def model_records(self) -> ModelRecords:
        """The model-registry versions kept in this store (their own references to blobs)."""
        return self._models

    # --- model-registry versions ---------------------------------------------------------------

    def add_model_version(self, record: ModelVersion) -> None:
        """Store a version's record, so its blobs stay referenced whatever retention does.

        The record is written first, then the snapshot's weights are checked. A deletion writes
        its tombstone before it takes the sweep's mark of held blobs, so weights found without
        a tombstone now are freed, if ever, by a sweep whose mark holds this record; weights
        already being deleted refuse the version (NotFoundError).
        """
        self._models.write(record)
        if self._storage.exists(keys.tombstone_key(record.snapshot, KIND_WEIGHTS)) or not all(
            self._storage.exists(keys.blob_key(digest)) for digest in record.blobs
        ):
            self._models.delete(record.name, record.version)
            raise NotFoundError(
                f"snapshot {record.snapshot} no longer holds its weights (retention is deleting "
                "them); nothing to register"
            )

    def delete_model_version(self, name: str, version: int) -> GcReport:
        """Remove a version's record and free its blobs that nothing else references."""
        record = self._models.read(name, version)
        if record is None:
            return GcReport()
        self._models.delete(name, version)
        candidates = {e.hash: e.size for e in record.files if not e.is_link}
        return self._timed(f"delete model {name}:{version}", lambda: self._free(candidates, 0.0))

    # --- capture -------------------------------------------------------------------------------

    def capture(
        self,
        root: str,
        paths: Sequence[str],
        *,
        info: SnapshotInfo,
        guard: Callable[[], None] | None = None,
        excludes: Sequence[str] = (),
        on_event: EventSink | None = None,
        immutable: Sequence[str] = (),
    ) -> Manifest:
        """Capture ``paths`` of the live folder ``root`` and commit them as one snapshot.

        ``guard`` runs right before the commit and may raise (a stale attempt's fencing);
        then nothing is committed. ``on_event(type, details)`` hears about refused symlinks and
        skipped special files. ``immutable``: folders (relative, ``/``-separated) whose files
        are never modified in place once there (an integration's published checkpoint): a local
        store on their file system takes each as a blob by a hard link, hashed where it lies,
        instead of writing a copy; the files become read-only.
        """
        if info.role not in ("checkpoint", "source", "outputs"):
            raise UsageError(f"snapshot role {info.role!r}: use checkpoint, source or outputs")
        started = time.monotonic()
        snapshot_id = keys.new_snapshot_id(info.role)
        intent = Intent(self._storage, snapshot_id)
        intent.write()
        intent.start()  # renewed while the capture runs, however long one file takes
        copied: list[tuple[FileEntry, str | None]] = []
        try:
            wait_for_sweep(self._storage)  # only now may existing blobs be trusted (see sweep.py)
            for candidate in select(root, paths, excludes, on_event or _log_event):
                linkable = any(candidate.rel.startswith(f"{i}/") for i in immutable)
                read: tuple[FileEntry, str | None] | None | Literal[_Copy.COPY]
                read = self._link_one(candidate) if linkable else _COPY
                if read is _COPY:
                    read = self._read_one(candidate)
                if read is not None:
                    copied.append(read)
            # Blobs are made durable and named only after every file is copied, so the disk
            # writes back earlier copies while later ones are still being read (as `cp` + `sync`).
            for entry, spool in copied:
                if spool is not None:
                    self._adopt(entry, spool)
            files = [entry for entry, _spool in copied]
            manifest = self._commit(snapshot_id, info, files, guard, intent)
        finally:
            intent.close()
            _remove_spools(spool for _entry, spool in copied)  # left only by a failed capture
        log.info(
            "store: committed %s (%d files, %d bytes) in %.2fs",
            snapshot_id,
            len(files),
            manifest.total_bytes,
            time.monotonic() - started,
        )
        return manifest

    def _confirm_stored(self, intent: Intent, files: Sequence[FileEntry]) -> None:
        """Every blob the manifest will name is stored, and no sweep can free one before the
        commit. Only an intent that could not be renewed for half a lease (the store out of
        reach) needs looking at again: a sweep may have freed a blob this capture found."""
        if intent.held_throughout():
            return
        intent.reassert()
        missing = [
            entry.path
            for entry in files
            if not entry.is_link and not self._storage.exists(keys.blob_key(entry.hash))
        ]
        if missing:
            raise StoreError(
                f"{len(missing)} files' contents were deleted from the store while this capture "
                f"could not renew its intent (first: {missing[0]}); nothing was committed, and "
                "the next capture stores them again"
            )

    def _adopt(self, entry: FileEntry, spool: str) -> None:
        """Make a spool the entry's blob: read-only first (nothing writes a blob), and trusted
        by later restores while its file stays as it is (the spool's bytes are the hashed ones)."""
        os.chmod(spool, (entry.mode | stat.S_IRUSR) & ~_WRITABLE)
        info = os.stat(spool)
        if self._storage.adopt_file(spool, keys.blob_key(entry.hash)):
            self._note_verified(
                entry.hash, (info.st_size, info.st_mtime_ns, info.st_ino, info.st_dev)
            )

    def _read_one(self, candidate: Candidate) -> tuple[FileEntry, str | None] | None:
        """The entry for one candidate and its spool copy (None when the blob is already known)."""
        kind = classify(candidate.rel)
        if candidate.target is not None:
            return FileEntry(candidate.rel, 0, 0o777, "", kind, candidate.target), None
        new_spool = self._storage.spool_path
        # A local store keeps the spool as the blob itself; a remote one uploads and drops it.
        direct = self._storage.is_local
        read = read_consistently(
            candidate.full, candidate.rel, new_spool, self._files, direct=direct
        )
        if read is None:
            return None  # vanished while we looked: skipped like any missing path
        if read.data is not None:
            return self._entry(candidate, kind, read), self._spool_unless_stored(read)
        if read.spool is None and not self._storage.exists(keys.blob_key(read.digest)):
            # Known hash, but the blob went away (its snapshots were deleted): store it again.
            self._files.forget(candidate.full)
            read = read_consistently(
                candidate.full, candidate.rel, new_spool, self._files, direct=direct
            )
            if read is None:
                return None
        return self._entry(candidate, kind, read), read.spool

    def _link_one(
        self, candidate: Candidate
    ) -> tuple[FileEntry, None] | None | Literal[_Copy.COPY]:
        """The entry for a file stored as a link to itself (no copy written), None when it
        vanished, or ``_COPY`` when it must be copied after all (see ``Storage.link_file``)."""
        if candidate.target is not None or not self._storage.is_local:
            return _COPY
        for _ in range(2):  # a second time when the hash was known but its blob is gone
            # Published whole and never written again: no wait for the file to be quiet (the
            # link checks after the chmod that it is still the state hashed).
            read = read_consistently(candidate.full, candidate.rel, None, self._files, settled=True)
            if read is None:
                return None
            entry = self._entry(candidate, classify(candidate.rel), read)
            key = keys.blob_key(read.digest)
            if read.identity is None:  # known from an earlier capture: no read was made
                if self._storage.exists(key):
                    return entry, None
                self._files.forget(candidate.full)
                continue
            linked = self._storage.link_file(candidate.full, key, read.identity)
            if linked:
                self._note_verified(read.digest, read.identity)
            return _COPY if linked is None else (entry, None)
        return _COPY

    def _note_verified(self, digest: str, identity: tuple[int, ...]) -> None:
        """The blob just linked is the very file hashed to ``digest``: trusted while unchanged."""
        path = self._storage.local_file(keys.blob_key(digest))
        try:
            info = os.stat(path, follow_symlinks=False) if path is not None else None
        except FileNotFoundError:
            return
        if info is not None and (info.st_size, info.st_mtime_ns, info.st_ino, info.st_dev) == tuple(
            identity
        ):
            self._verified.note(digest, info)

    @staticmethod
    def _entry(candidate: Candidate, kind: str, read: ReadResult) -> FileEntry:
        # Permission bits only: a setuid or sticky bit is never stored, so never restored.
        mode = read.mode & PERMISSIONS
        return FileEntry(candidate.rel, read.size, mode, read.digest, kind, mtime_ns=read.mtime_ns)

    def _spool_unless_stored(self, read: ReadResult) -> str | None:
        """A spool holding a small file's content read in memory; None when the store has it."""
        if self._storage.exists(keys.blob_key(read.digest)):
            return None  # already stored (an unchanged source, a file no save changed)
        spool = self._storage.spool_path()
        with open(spool, "wb") as handle:
            handle.write(read.data or b"")
        return spool

    def _commit(self, snapshot_id, info, files, guard, intent: Intent) -> Manifest:
        manifest = Manifest(
            id=snapshot_id,
            run=info.run,
            stage=info.stage,
            attempt=info.attempt,
            step=info.step,
            epoch=info.epoch,
            metrics=dict(info.metrics),
            role=info.role,
            created=time.time(),
            files=tuple(files),
            step_source=info.step_source,
        )
        if guard is not None:
            guard()  # may raise StaleAttemptError: then there is no manifest, so no snapshot
        self._confirm_stored(intent, files)
        self._storage.write(keys.manifest_key(snapshot_id), manifest.to_json())
        self._manifests[snapshot_id] = manifest
        return manifest

    # --- reading -------------------------------------------------------------------------------

    def list(
        self, run: str | None = None, stage: str | None = None, role: str | None = "checkpoint"
    ) -> list[Manifest]:
        """Committed snapshots, oldest first (by step, then commit time); None = any value."""
        deleting = self._tombstones()
        found = []
        for snapshot_id in self._ids():
            try:
                manifest = self._load(snapshot_id, deleting.get(snapshot_id, frozenset()))
            except (NotFoundError, SnapshotDamagedError) as error:
                log.warning("store: leaving out %s: %s", snapshot_id, error)
                continue
            if run is not None and manifest.run != run:
                continue
            if stage is not None and manifest.stage != stage:
                continue
            if role is not None and manifest.role != role:
                continue
            if manifest.emptied:
                continue  # every kind is being deleted: the snapshot is going away
            found.append(manifest)
        return sorted(found, key=Manifest.sort_key)

    def get(self, snapshot_id: str) -> Manifest:
        """The committed snapshot ``snapshot_id``; NotFoundError if there is none (any more)."""
        manifest = self._stored(snapshot_id)
        if manifest.emptied:
            raise NotFoundError(f"snapshot {snapshot_id} is being deleted (no kind is left)")
        return manifest

    def _stored(self, snapshot_id: str) -> Manifest:
        """The manifest with its tombstones applied, even when no kind is left."""
        deleting = frozenset(
            kind for kind in KINDS if self._storage.exists(keys.tombstone_key(snapshot_id, kind))
        )
        if snapshot_id in self._manifests and not self._storage.exists(
            keys.manifest_key(snapshot_id)
        ):
            self._forget(snapshot_id)  # deleted since we read it (by another gc)
        return self._load(snapshot_id, deleting)

    def _ids(self) -> builtins.list[str]:
        ids = (keys.snapshot_id_of_key(info.key) for info in self._storage.list(keys.SNAPSHOTS))
        return [snapshot_id for snapshot_id in ids if snapshot_id]

    def _tombstones(self) -> dict[str, frozenset[str]]:
        listed = (info.key for info in self._storage.list(keys.TOMBSTONES))
        found = keys.names_by_snapshot(listed, keys.tombstone_of_key)
        return {snapshot_id: frozenset(kinds) for snapshot_id, kinds in found.items()}

    def _load(self, snapshot_id: str, deleting: frozenset[str]) -> Manifest:
        cached = self._manifests.get(snapshot_id)
        if cached is None:
            if not keys.is_snapshot_id(snapshot_id):
                raise NotFoundError(f"snapshot {snapshot_id!r} not found in {self.url}")
            cached = self._read_manifest(snapshot_id)
            self._manifests[snapshot_id] = cached
        return dataclasses.replace(cached, deleting=deleting)

    def _read_manifest(self, snapshot_id: str) -> Manifest:
        try:
            raw = self._storage.read(keys.manifest_key(snapshot_id))
        except FileNotFoundError:
            raise NotFoundError(f"snapshot {snapshot_id} not found in {self.url}") from None
        try:
            manifest = Manifest.from_json(raw)
        except (ValueError, KeyError, TypeError) as error:
            raise SnapshotDamagedError(
                f"snapshot {snapshot_id}: unreadable manifest ({error})"
            ) from None
        if manifest.id != snapshot_id:  # deletion goes by the id: it must be this key's
            raise SnapshotDamagedError(
                f"snapshot {snapshot_id}: unreadable manifest (its id is {manifest.id})"
            )
        return manifest

    # --- restore and check ---------------------------------------------------------------------

    def restore(
        self,
        snapshot_id: str,
        target: str,
        *,
        kinds: Sequence[str] | None = None,
        overlay: bool = False,
        reuse: str | None = None,
        link: Sequence[str] = (),
    ) -> None:
        """Restore into the empty folder ``target`` (or over it with ``overlay``), verified.

        Raises SnapshotDamagedError (missing or altered contents; the target is left as it
        was) or UnsafePathError; the caller falls back to the next newest snapshot.

        Written without a copy where possible (``nodus.store.restore``), always verified:
        ``reuse``, a folder set aside on the target's file system (the previous attempt's
        copy) whose file at an entry's path is moved in when it hashes to the entry (whatever
        is left there is the caller's to remove); ``link``, folders (relative,
        ``/``-separated) whose files are never written in place, laid out as hard links to
        their read-only blobs.
        """
        manifest = self.get(snapshot_id)
        wanted = tuple(kinds) if kinds is not None else manifest.kinds
        gone = [kind for kind in wanted if kind in manifest.deleting]
        if gone:
            raise NotFoundError(f"snapshot {snapshot_id} no longer holds {', '.join(gone)}")
        started = time.monotonic()
        sources = (
            Sources(self._verified, reuse, tuple(link), known=self._files)
            if reuse or link
            else None
        )
        _restore(self._storage, manifest, target, wanted, overlay, sources)
        log.info(
            "store: restored %s into %s in %.2fs", snapshot_id, target, time.monotonic() - started
        )

    def restore_files(
        self,
        snapshot_id: str,
        pairs: Sequence[tuple[FileEntry, str]],
        target: str,
        *,
        wrap: Callable[[BinaryIO], Any] | None = None,
    ) -> None:
        """Write each ``(entry, destination)`` of a snapshot under ``target``, verified.

        Nothing lands unless every file matched its manifest (a download lays files out its
        own way); ``wrap`` may wrap each file being written, for a progress counter.
        """
        write_verified(self._storage, snapshot_id, pairs, target, wrap=wrap)

    def read_file(self, manifest: Manifest, path: str) -> bytes:
        """The contents of the file ``path`` of a snapshot, checked against its hash.

        NotFoundError when the snapshot holds no such file (any more); SnapshotDamagedError
        when its contents are missing or altered.
        """
        entry = next((e for e in manifest.held_files() if e.path == path), None)
        if entry is None or entry.is_link:
            raise NotFoundError(f"snapshot {manifest.id} holds no file {path!r}")
        try:
            with self._storage.open(keys.blob_key(entry.hash)) as source:
                data = _read_at_most(source, entry.size + 1)  # one byte more: too long
        except FileNotFoundError:
            raise SnapshotDamagedError(
                f"snapshot {manifest.id}: {path}: its contents (blob {entry.hash}) are missing"
            ) from None
        digest = content_hasher()
        digest.update(data)
        if digest.hexdigest() != entry.hash or len(data) != entry.size:
            raise SnapshotDamagedError(
                f"snapshot {manifest.id}: {path}: contents do not match the manifest"
            )
        return data

    def check(
        self, snapshot_id: str, _verdicts: dict[str, Verdict] | None = None
    ) -> builtins.list[str]:
        """Every problem with a committed snapshot's held files; [] means it restores."""
        try:
            manifest = self._stored(snapshot_id)
        except SnapshotDamagedError as error:
            return [str(error)]
        verdicts = {} if _verdicts is None else _verdicts
        problems = []
        for entry in manifest.held_files():
            reason = unsafe_reason(entry)
            if reason is not None:
                problems.append(f"{entry.path}: path {reason}")
            elif not entry.is_link:
                verdict = self._blob_verdict(entry.hash, verdicts)
                size = verdicts[entry.hash][1]
                if verdict is not None:
                    problems.append(f"{entry.path}: blob {entry.hash} {verdict}")
                elif size != entry.size:  # a restore would refuse it: so must verify
                    problems.append(
                        f"{entry.path}: {entry.size} bytes in the manifest, its blob holds {size}"
                    )
        return problems

    def _blob_verdict(self, digest: str, verdicts: dict[str, Verdict]) -> str | None:
        """What is wrong with a blob (None: it hashes to its name); its size is remembered."""
        if digest not in verdicts:
            try:
                with self._storage.open(keys.blob_key(digest)) as source:
                    found, size = hash_stream(source)
                wrong = None if found == digest else f"is altered (hashes to {found})"
                verdicts[digest] = (wrong, size)
            except FileNotFoundError:
                verdicts[digest] = (MISSING, -1)
        return verdicts[digest][0]

    def verify(self, repair: bool = False) -> VerifyReport:
        """Check every manifest and blob of the store (``nodus store verify``)."""
        return verify_store(self, repair)

    # --- deletion and GC -----------------------------------------------------------------------

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
        retry_s = defaults.SWEEP_RETRY_S
        return self._timed("finish deletions", lambda: deletion.finish_deletions(self, retry_s))

    def pending_deletions(self) -> builtins.list[tuple[str, str]]:
        """(snapshot id, kind) of every deletion begun and not yet finished."""
        return deletion.pending(self)

    def deletions(self, snapshot_id: str) -> dict[str, dict[str, Any]]:
        """Kind -> its tombstone record (``state``, ``reason``, ``at``[, ``freed_bytes``]) for
        each kind of the snapshot whose deletion has begun."""
        return deletion.records(self, snapshot_id)

    def unreferenced_blobs(
        self, grace_s: float = defaults.BLOB_GC_GRACE_S
    ) -> builtins.list[tuple[str, int]]:
        """(key, size) of each blob a sweep would delete now; reads only (``gc --dry-run``)."""
        doomed, _kept = unreferenced(self._storage, self._held_blobs(), grace_s)
        return doomed

    def gc_blobs(self, grace_s: float = defaults.BLOB_GC_GRACE_S) -> GcReport:
        """Delete blobs no committed snapshot holds that are older than ``grace_s``; idempotent.

        A sweep deferred by running captures or another gc is retried for up to
        ``SWEEP_RETRY_S``."""
        retry_s = defaults.SWEEP_RETRY_S
        return self._timed("blob sweep", lambda: self._free(None, grace_s, retry_s))

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

    def _free(
        self, candidates: dict[str, int] | None, min_age_s: float, retry_s: float = 0.0
    ) -> GcReport:
        """Delete unheld blobs: the ``candidates`` (digest -> size), or any older than
        ``min_age_s`` when None; retried while deferred, for up to ``retry_s``."""
        return sweep(self._storage, self._held_blobs, candidates, min_age_s, retry_s)

    def _held_blobs(self) -> set[str]:
        held = self._models.held_blobs()  # registered versions keep their weights' blobs
        deleting = self._tombstones()
        for snapshot_id in self._ids():
            try:
                by_kind = self._blobs_by_kind(snapshot_id)
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

    def _blobs_by_kind(self, snapshot_id: str) -> dict[str, frozenset[str]]:
        # Kept per snapshot: rotation marks the store's every blob at each commit, and this
        # keeps that to a union of small sets instead of a walk over every file entry.
        found = self._blobs.get(snapshot_id)
        if found is None:
            manifest = self._load(snapshot_id, frozenset())
            found = {
                kind: frozenset(e.hash for e in manifest.files if e.kind == kind and not e.is_link)
                for kind in manifest.stored_kinds
            }
            self._blobs[snapshot_id] = found
        return found

    def _forget(self, snapshot_id: str) -> None:
        """Drop what this object remembers of a snapshot that no longer exists."""
        self._manifests.pop(snapshot_id, None)
        self._blobs.pop(snapshot_id, None)


class _Copy(enum.Enum):
    """The one value of ``_COPY`` (an enum member, so a type checker tells it from an entry)."""

    COPY = "copy"


_COPY = _Copy.COPY  # _link_one: this file is copied into the store after all
_WRITABLE = stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH


def _read_at_most(source: BinaryIO, limit: int) -> bytes:
    """Up to ``limit`` bytes of ``source``, fewer only at its end (raw reads may be short)."""
    parts, got = [], 0
    while got < limit and (chunk := source.read(limit - got)):
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


def _remove_spools(spools) -> None:
    for spool in spools:
        if spool is not None and os.path.exists(spool):
            os.unlink(spool)


def _log_event(kind: str, details: dict) -> None:
    log.warning("store: %s %s", kind, json.dumps(details, sort_keys=True))
