"""Background upload of staged snapshots to a remote store, one snapshot at a time.

With a remote store (``s3://``, ``gs://``, …) a capture commits into a local *staging* store
first (``$NODUS_HOME/staging/<hash of the remote URL>``, the same content-addressed format), at
disk speed, and hands the staged manifest to the attempt's :class:`Uploader`. Nothing the
program or the capture loop does ever waits on the network.

The uploader sends one snapshot at a time: its blobs first (only those the remote store does
not hold yet, ``UPLOAD_THREADS`` at once), then its manifest, last: writing the
manifest is the remote commit, so a snapshot is listed, restorable and counted for retention
only once every file is stored there. The attempt-fencing guard runs right before that write,
as before a local commit. While one snapshot uploads, later ones wait; of the waiting
checkpoints only the newest is kept, so an older one is *skipped* (``on_skip``) instead of
making the queue, and the staging disk, grow without bound when saves outpace the link. A
snapshot submitted with ``keep`` (the final save, the outputs) is never skipped.

Every request is retried with jittered exponential backoff for as long as the stage runs.
:meth:`Uploader.finish` then lets it go on retrying for at most ``retry_s`` (the stage's
``unrecorded_retry``); what is still not stored after that is *unrecorded*. An upload that is
slow but not failing is never cut short.

A remote commit drops the staged copy (its manifest, and the blobs no other staged snapshot
holds), so staging holds at most the snapshot uploading, the one waiting, the final save and
the outputs, plus whatever a failed store left unrecorded. Blobs the remote store already
holds are not uploaded again; a later capture of an unchanged file copies it into staging
again (a local copy, at disk speed) and its upload is skipped.

The remote store's blob GC sees an upload as a capture: an intent is written before any
existing blob is trusted, exactly as :meth:`SnapshotStore.capture` does.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from nodus._logging import Logger
from nodus.errors import SnapshotDamagedError, StaleAttemptError, StoreError
from nodus.schemas import defaults
from nodus.store import keys, run_index
from nodus.store.local_storage import LocalStorage
from nodus.store.manifest import Manifest
from nodus.store.store import SnapshotStore, open_store
from nodus.store.sweep import Intent, wait_for_sweep

__all__ = ["Uploader", "open_staging"]

log = Logger("nodus.store")

UPLOAD_THREADS = 4
"""Blobs of one snapshot uploaded at once to a remote store."""

UPLOAD_RETRY_FIRST_S = 0.5
UPLOAD_RETRY_MAX_S = 10.0
"""A failed upload request is retried after ``UPLOAD_RETRY_FIRST_S``, doubling (with jitter)
up to ``UPLOAD_RETRY_MAX_S`` between tries, for as long as the stage runs (and then for
``unrecorded_retry``)."""

UPLOAD_PROGRESS_S = 0.5
"""How often the upload queue a run's ``runs get`` shows is rewritten while bytes move."""
T = TypeVar("T")


def open_staging(home: str, remote_url: str) -> SnapshotStore:
    """The staging store of ``remote_url`` under ``home``: one folder per remote store."""
    digest = hashlib.sha256(remote_url.rstrip("/").encode()).hexdigest()[:16]
    return open_store("file://" + os.path.join(home, defaults.STAGING_DIR, digest))


@dataclass(frozen=True)
class _Job:
    manifest: Manifest
    keep: bool  # never skipped: the final save, the outputs


class _GaveUp(Exception):
    """The retry time after the stage ended ran out while the store kept failing."""


class Uploader:
    """Uploads the snapshots staged by one attempt to the remote store, in the background.

    ``on_commit(manifest)`` runs after each remote commit, ``on_skip(manifest, reason)`` for a
    waiting snapshot overtaken by a newer one, ``on_progress(status)`` whenever the queue
    changes (and every ``UPLOAD_PROGRESS_S`` while bytes move); all run in the uploader's
    threads. ``guard()`` runs right before each remote commit and may raise
    ``StaleAttemptError`` (attempt fencing): then that snapshot, and every later one, is
    dropped uncommitted.
    """

    def __init__(
        self,
        staging: SnapshotStore,
        remote: SnapshotStore,
        *,
        guard: Callable[[], None] | None = None,
        on_commit: Callable[[Manifest], None] | None = None,
        on_skip: Callable[[Manifest, str], None] | None = None,
        on_progress: Callable[[dict[str, Any]], None] | None = None,
        threads: int = UPLOAD_THREADS,
    ) -> None:
        if not isinstance(staging.storage, LocalStorage):
            raise StoreError(f"a staging store must be local, not {staging.url}")
        # Its own store object over the staging folder: the capture's caches stay the capture's.
        self._staging = SnapshotStore(staging.storage)
        self._staged_files: LocalStorage = staging.storage
        self._remote = remote.storage
        self._guard = guard
        self._on_commit = on_commit
        self._on_skip = on_skip
        self._on_progress = on_progress
        self._threads = threads
        self._cond = threading.Condition()
        self._waiting: list[_Job] = []
        self._current: _Job | None = None
        self._done = 0
        self._total = 0
        self._skipped = 0
        self._uploaded = 0
        self._unrecorded: list[Manifest] = []
        self._error: str | None = None
        self._deadline: float | None = None  # monotonic; set by finish()
        self._closing = False
        self._stale = False
        self._thread: threading.Thread | None = None
        self._published = 0.0
        self._publishing = threading.Lock()  # one status write at a time, the newest last

    # --- the capture loop's side --------------------------------------------------------------

    def submit(self, manifest: Manifest, *, keep: bool = False) -> None:
        """Queue a staged snapshot; returns at once. An older waiting checkpoint is skipped."""
        overtaken: list[_Job] = []
        with self._cond:
            if manifest.role == "checkpoint":
                overtaken = [job for job in self._waiting if _overtaken_by(job, manifest)]
                self._waiting = [job for job in self._waiting if job not in overtaken]
            self._waiting.append(_Job(manifest, keep))
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name="upload", daemon=True)
                self._thread.start()
            self._cond.notify_all()
        for job in overtaken:
            self._skip(job, f"overtaken by step {manifest.step} while waiting to upload")
        self._publish(force=True)

    def finish(self, retry_s: float) -> list[Manifest]:
        """Wait for every queued snapshot; the store failing, retry for at most ``retry_s``.

        Returns the snapshots still not stored (unrecorded), oldest first; their staged copies
        stay in staging.
        """
        with self._cond:
            self._closing = True
            self._deadline = time.monotonic() + retry_s
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()
        try:
            self._staging.finish_deletions()  # staged copies whose free a capture deferred
        except (StoreError, OSError) as error:
            log.warning("upload: staging cleanup failed: %s", error)
        self._publish(force=True)
        return list(self._unrecorded)

    def status(self) -> dict[str, Any]:
        """The queue as ``runs get`` shows it (``upload`` in its JSON)."""
        with self._cond:
            current = self._current
            uploading = None
            if current is not None:
                uploading = {
                    "step": current.manifest.step,
                    "snapshot": current.manifest.id,
                    "role": current.manifest.role,
                    "bytes_done": self._done,
                    "bytes_total": self._total,
                }
            return {
                "uploading": uploading,
                "waiting": len(self._waiting),
                "skipped": self._skipped,
                "uploaded": self._uploaded,
                "unrecorded": [_brief(m) for m in self._unrecorded],
                "error": self._error,
                "retrying_until": None if self._deadline is None else _wall(self._deadline),
                "updated_at": time.time(),
            }

    # --- the worker ---------------------------------------------------------------------------

    def _work(self) -> None:
        with ThreadPoolExecutor(self._threads, thread_name_prefix="upload-blob") as pool:
            while True:
                with self._cond:
                    while not (self._waiting or self._closing):
                        self._cond.wait()
                    if not self._waiting:
                        self._current = None
                        return
                    job = self._current = self._waiting.pop(0)
                    self._done = self._total = 0
                self._publish(force=True)
                self._upload_job(job, pool)
                with self._cond:
                    self._current = None

    def _upload_job(self, job: _Job, pool: ThreadPoolExecutor) -> None:
        if self._stale:
            self._skip(job, "its attempt was superseded")
            return
        try:
            self._upload(job.manifest, pool)
        except StaleAttemptError as error:
            self._stale = True
            self._skip(job, str(error))
            return
        except _GaveUp:
            with self._cond:
                self._unrecorded.append(job.manifest)
            log.warning("upload: %s (step %s) is unrecorded", job.manifest.id, job.manifest.step)
            return
        except SnapshotDamagedError as error:
            self._skip(job, str(error))
            return
        with self._cond:
            self._uploaded += 1
            self._error = None
        if self._on_commit is not None:
            self._on_commit(job.manifest)
        self._drop_staged(job.manifest)

    def _upload(self, manifest: Manifest, pool: ThreadPoolExecutor) -> None:
        """Blobs, then the manifest (the commit), under an intent that holds off blob GC."""
        blobs = {e.hash: e.size for e in manifest.files if not e.is_link}
        with self._cond:
            self._total = sum(blobs.values())
        started = time.monotonic()
        intent = Intent(self._remote, manifest.id)
        self._retrying(intent.write)
        intent.start()  # renewed while blobs go up, however long that takes
        try:
            self._retrying(lambda: wait_for_sweep(self._remote))  # as a capture does (sweep.py)
            uploaded = self._send_blobs(blobs, pool)
            if self._guard is not None:
                self._guard()  # a stale attempt must not commit remotely either
            while not intent.held_throughout():
                # Renewals failed for half a lease (the store out of reach): a sweep may have
                # freed a blob found stored. Live again, every blob is looked at once more.
                self._retrying(intent.reassert)
                uploaded += self._send_blobs(blobs, pool)
            key = keys.manifest_key(manifest.id)
            self._retrying(lambda: self._remote.write(key, manifest.to_json()))
            run_index.record(self._remote, manifest)
        finally:
            try:
                intent.close()
            except Exception as error:  # it expires after its lease; never fail for it
                log.info("upload: intent of %s left behind: %s", manifest.id, error)
        log.info(
            "upload: committed %s (step %s, %d of %d bytes sent) in %.2fs",
            manifest.id,
            manifest.step,
            uploaded,
            manifest.total_bytes,
            time.monotonic() - started,
        )

    def _send_blobs(self, blobs: dict[str, int], pool: ThreadPoolExecutor) -> int:
        """Upload the blobs the remote store lacks (four at a time); the bytes sent."""
        with self._cond:
            self._done = 0  # a second look counts the bytes again from none
        sent = pool.map(lambda item: self._send_blob(*item), blobs.items())
        return sum(sent)  # waits for every blob; the first failure is raised here

    def _send_blob(self, digest: str, size: int) -> int:
        """Upload one staged blob unless the remote store holds it; the bytes sent."""
        key = keys.blob_key(digest)
        if self._retrying(lambda: self._remote.exists(key)):
            self._advance(size)
            return 0
        path = self._staged_files.path(key)
        if not os.path.exists(path):
            raise SnapshotDamagedError(f"staged blob {digest} is missing from {path}")
        counted = [0]

        def count(sent: int) -> None:
            counted[0] += sent
            self._advance(sent)

        def put() -> None:
            self._advance(-counted[0])  # a retried PUT starts again from its first byte
            counted[0] = 0
            self._remote.put_file(path, key, count)

        self._retrying(put)
        self._advance(size - counted[0])  # a storage that reports no progress: all at once
        return size

    def _retrying(self, request: Callable[[], T]) -> T:
        """``request()``, retried with backoff; _GaveUp once the retry time after the stage
        ended is spent. Any failure is retried: a network or a store fails in many ways
        (connection refused, timeouts, 5xx), and each means only "not stored yet"."""
        delay = UPLOAD_RETRY_FIRST_S
        while True:
            try:
                return request()
            except (StaleAttemptError, SnapshotDamagedError, _GaveUp):
                raise
            except Exception as error:
                with self._cond:
                    self._error = f"{type(error).__name__}: {error}"
                    if self._past_deadline():
                        raise _GaveUp() from error
                    # Woken early by finish(): its deadline may already have passed.
                    self._cond.wait(delay * _jitter())
                    if self._past_deadline():
                        raise _GaveUp() from error
                self._publish(force=True)
                delay = min(delay * 2, UPLOAD_RETRY_MAX_S)

    def _past_deadline(self) -> bool:
        return self._deadline is not None and time.monotonic() >= self._deadline

    # --- bookkeeping --------------------------------------------------------------------------

    def _advance(self, sent: int) -> None:
        with self._cond:
            self._done += sent
        self._publish()

    def _skip(self, job: _Job, reason: str) -> None:
        with self._cond:
            self._skipped += 1
        if self._on_skip is not None:
            self._on_skip(job.manifest, reason)
        self._drop_staged(job.manifest)

    def _drop_staged(self, manifest: Manifest) -> None:
        """The staged copy is not needed any more: remove it, freeing its unshared blobs."""
        try:
            self._staging.delete(manifest.id, reason="uploaded")
        except (StoreError, OSError) as error:  # only disk space is at stake
            log.warning("upload: could not drop staged %s: %s", manifest.id, error)

    def _publish(self, force: bool = False) -> None:
        if self._on_progress is None:
            return
        now = time.monotonic()
        with self._cond:
            if not force and now - self._published < UPLOAD_PROGRESS_S:
                return
            self._published = now
        with self._publishing:
            self._on_progress(self.status())


def _overtaken_by(job: _Job, newer: Manifest) -> bool:
    old = job.manifest
    return not job.keep and old.role == "checkpoint" and old.stage == newer.stage


def _brief(manifest: Manifest) -> dict[str, Any]:
    return {"step": manifest.step, "snapshot": manifest.id, "role": manifest.role}


def _wall(deadline: float) -> float:
    """A monotonic deadline as seconds since the epoch (for another process to read)."""
    return time.time() + (deadline - time.monotonic())


def _jitter() -> float:
    """A retry delay's factor, 0.75-1.25 (``random`` imported here: only a retry needs it)."""
    import random

    return random.uniform(0.75, 1.25)
