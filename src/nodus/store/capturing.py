"""Capturing into a store: a live folder's files become blobs, then one manifest commits them.

:class:`SnapshotWriter` is the part of a :class:`nodus.store.store.SnapshotStore` that writes
snapshots. It remembers the hashes of the files it captured (so an unchanged file is neither
read nor stored again by the next capture) and the blobs it hashed itself (a restore may link
them unread), and gives the reader each manifest it commits. A snapshot exists only once its
manifest is written, and that write comes after every blob it names is stored: nothing else is
ever a commit.
"""

from __future__ import annotations

import enum
import json
import os
import stat
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal

from nodus._logging import Logger
from nodus.errors import StoreError, UsageError
from nodus.store import keys, run_index
from nodus.store.kinds import classify
from nodus.store.live_folder import Candidate, FileCache, ReadResult, read_consistently, select
from nodus.store.manifest import PERMISSIONS, FileEntry, Manifest, SnapshotInfo
from nodus.store.reading import SnapshotReader
from nodus.store.storage import Storage
from nodus.store.sweep import Intent, wait_for_sweep
from nodus.store.trust import VerifiedBlobs

__all__ = ["EventSink", "SnapshotWriter"]

log = Logger("nodus.store")
EventSink = Callable[[str, dict[str, Any]], None]


class SnapshotWriter:
    """Captures and commits of one store."""

    def __init__(
        self, storage: Storage, files: FileCache, verified: VerifiedBlobs, reader: SnapshotReader
    ) -> None:
        self._storage = storage
        self._files = files
        self._verified = verified
        self._reader = reader

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
                read: tuple[FileEntry, str | None] | Literal[_Copy.COPY] | None
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
    ) -> tuple[FileEntry, None] | Literal[_Copy.COPY] | None:
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

    def _commit(
        self,
        snapshot_id: str,
        info: SnapshotInfo,
        files: Sequence[FileEntry],
        guard: Callable[[], None] | None,
        intent: Intent,
    ) -> Manifest:
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
        self._reader.remember(manifest)
        run_index.record(self._storage, manifest)
        return manifest


class _Copy(enum.Enum):
    """The one value of ``_COPY`` (an enum member, so a type checker tells it from an entry)."""

    COPY = "copy"


_COPY = _Copy.COPY  # _link_one: this file is copied into the store after all
_WRITABLE = stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH


def _remove_spools(spools: Iterable[str | None]) -> None:
    for spool in spools:
        if spool is not None and os.path.exists(spool):
            os.unlink(spool)


def _log_event(kind: str, details: dict[str, Any]) -> None:
    log.warning("store: %s %s", kind, json.dumps(details, sort_keys=True))
