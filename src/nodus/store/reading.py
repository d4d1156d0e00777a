"""Reading a store: listings, manifests, verified restores and reads, checks and ``verify``.

:class:`SnapshotReader` is the part of a :class:`nodus.store.store.SnapshotStore` that reads.
It keeps the manifests it read (a committed manifest never changes) and each snapshot's blobs
by kind (the sweep's mark is a union of those), and gives the store's other parts what they
read through it: the capture remembers the manifest it commits here, deletion and the sweep
read and forget snapshots through it.
"""

from __future__ import annotations

import builtins
import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Any, BinaryIO

from nodus._logging import Logger
from nodus.errors import NotFoundError, SnapshotDamagedError
from nodus.protocol import content_hasher
from nodus.store import keys, run_index
from nodus.store._io import hash_stream
from nodus.store.internals import Verdict
from nodus.store.kinds import KINDS
from nodus.store.live_folder import FileCache
from nodus.store.manifest import FileEntry, Manifest
from nodus.store.model_records import ModelRecords
from nodus.store.restore import Sources, unsafe_reason, write_verified
from nodus.store.restore import restore as _restore
from nodus.store.storage import Storage
from nodus.store.trust import VerifiedBlobs
from nodus.store.verify import MISSING, VerifyReport, verify_store

__all__ = ["SnapshotReader"]

log = Logger("nodus.store")


class SnapshotReader:
    """Listings, manifests, restores and checks of one store."""

    def __init__(
        self, storage: Storage, files: FileCache, verified: VerifiedBlobs, models: ModelRecords
    ) -> None:
        self._storage = storage
        self._files = files  # the capture's hashes: a restore takes unchanged files from them
        self._verified = verified  # blobs hashed here: a restore may link them unread
        self._models = models
        self._manifests: dict[str, Manifest] = {}  # manifests never change once committed
        self._blobs: dict[str, dict[str, frozenset[str]]] = {}  # id -> kind -> its blobs
        self._runs: dict[str, set[str]] = {}  # id -> its runs, as the index named them

    @property
    def url(self) -> str:
        return self._storage.url

    @property
    def storage(self) -> Storage:
        return self._storage

    @property
    def model_records(self) -> ModelRecords:
        return self._models

    def list(
        self, run: str | None = None, stage: str | None = None, role: str | None = "checkpoint"
    ) -> list[Manifest]:
        """Committed snapshots, oldest first (by step, then commit time); None = any value.
        With ``run``, a manifest not yet read here is read only when the index does not name
        another run for it (:mod:`.run_index`)."""
        deleting = self.tombstones()
        found = []
        for snapshot_id in self._candidates(run):
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

    def _candidates(self, run: str | None) -> builtins.list[str]:
        """The ids whose manifests may be ``run``'s: every committed one but those the index
        names for other runs only (an id keeps its run: what the index said is kept)."""
        ids = self.ids()
        if run is None:
            return ids
        if any(i not in self._manifests and i not in self._runs for i in ids):
            self._runs.update(run_index.runs_by_snapshot(self._storage))
        return [i for i in ids if i in self._manifests or run in self._runs.get(i, (run,))]

    def get(self, snapshot_id: str) -> Manifest:
        """The committed snapshot ``snapshot_id``; NotFoundError if there is none (any more)."""
        manifest = self.stored(snapshot_id)
        if manifest.emptied:
            raise NotFoundError(f"snapshot {snapshot_id} is being deleted (no kind is left)")
        return manifest

    def stored(self, snapshot_id: str) -> Manifest:
        """The manifest with its tombstones applied, even when no kind is left."""
        deleting = frozenset(
            kind for kind in KINDS if self._storage.exists(keys.tombstone_key(snapshot_id, kind))
        )
        if snapshot_id in self._manifests and not self._storage.exists(
            keys.manifest_key(snapshot_id)
        ):
            self.forget(snapshot_id)  # deleted since we read it (by another gc)
        return self._load(snapshot_id, deleting)

    def ids(self) -> builtins.list[str]:
        ids = (keys.snapshot_id_of_key(info.key) for info in self._storage.list(keys.SNAPSHOTS))
        return [snapshot_id for snapshot_id in ids if snapshot_id]

    def tombstones(self) -> dict[str, frozenset[str]]:
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
            manifest = self.stored(snapshot_id)
        except SnapshotDamagedError as error:
            return [str(error)]
        verdicts = {} if _verdicts is None else _verdicts
        problems = []
        for entry in manifest.held_files():
            reason = unsafe_reason(entry)
            if reason is not None:
                problems.append(f"{entry.path}: path {reason}")
            elif not entry.is_link:
                verdict = self.blob_verdict(entry.hash, verdicts)
                size = verdicts[entry.hash][1]
                if verdict is not None:
                    problems.append(f"{entry.path}: blob {entry.hash} {verdict}")
                elif size != entry.size:  # a restore would refuse it: so must verify
                    problems.append(
                        f"{entry.path}: {entry.size} bytes in the manifest, its blob holds {size}"
                    )
        return problems

    def blob_verdict(self, digest: str, verdicts: dict[str, Verdict]) -> str | None:
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

    def remember(self, manifest: Manifest) -> None:
        """A manifest this store object has just committed (no need to read it back)."""
        self._manifests[manifest.id] = manifest

    def blobs_by_kind(self, snapshot_id: str) -> dict[str, frozenset[str]]:
        """The blobs each stored kind of a snapshot names (tombstones not applied)."""
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

    def forget(self, snapshot_id: str) -> None:
        """Drop what this object remembers of a snapshot that no longer exists."""
        self._manifests.pop(snapshot_id, None)
        self._blobs.pop(snapshot_id, None)


def _read_at_most(source: BinaryIO, limit: int) -> bytes:
    """Up to ``limit`` bytes of ``source``, fewer only at its end (raw reads may be short)."""
    parts, got = [], 0
    while got < limit and (chunk := source.read(limit - got)):
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)
