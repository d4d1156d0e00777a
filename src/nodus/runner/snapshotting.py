"""The capture loop of one attempt: what becomes a snapshot, and when.

Three things trigger a capture while the program runs: a save record from the integration
(``.nodus/saves/<step>.json``, captured at once with its step, epoch and metrics), a directory
contract ``state/checkpoint-<step>`` folder that has settled (again whenever it changes), and the
program's exit (the selection once more). Each capture takes the stage's selection, with the
state folder narrowed to the one checkpoint folder of that step, so a restore never sees two
generations of state. Each commit asks the attempt's rotation (:mod:`nodus.runner.rotation`)
for a pass, which runs beside this loop.

An integration publishes each folder whole. A directory-contract folder is committed only once
it is whole too (:mod:`nodus.stages.layouts`: a known layout's last-written file, or the
``checkpoint_complete`` marker): a folder still being written is never a snapshot, so it can
never be a restore target; a ``checkpoint_incomplete`` event says what it lacks.

With a remote store each capture commits into the local staging store instead and is handed
to the attempt's :class:`~nodus.runner.uploading.Uploads`: ``snapshot_staged`` is recorded now,
``snapshot_committed`` (with ``committed.json`` and the rotation pass) once it is uploaded.

A capture that fails (full disk, unreachable store) leaves that snapshot uncommitted, records a
``capture_failed`` event and lets the program train on; the next trigger tries again. Only a
stale attempt (another attempt now owns the stage) stops the attempt: it must never commit.
"""

from __future__ import annotations

import json
import os
from typing import Any

from nodus import protocol
from nodus._atomic import write_json_atomic
from nodus.errors import StaleAttemptError, StoreError
from nodus.protocol import checkpoint_folder, checkpoint_steps
from nodus.runner.catalog import Catalog
from nodus.runner.disk_guard import DiskGuard
from nodus.runner.rotation import Rotation
from nodus.runner.selection import appeared, fingerprint, narrowed
from nodus.runner.uploading import Uploads
from nodus.runner.workspace import Workspace
from nodus.schemas import defaults
from nodus.schemas.resolved import ResolvedStage
from nodus.stages.directory import DirectoryWatcher, signature
from nodus.stages.layouts import Verdict


class Capturer:
    """Captures one attempt's selection into the store, fenced by the attempt number."""

    def __init__(
        self,
        *,
        store: Any,
        catalog: Catalog,
        run_id: str,
        stage: ResolvedStage,
        attempt: int,
        ws: Workspace,
        restored_step: int | None,
        restored_snapshot: str | None = None,
        inherited_step: int | None = None,
        rotation: Rotation | None = None,
        disk_guard: DiskGuard | None = None,
        uploads: Uploads | None = None,
    ) -> None:
        self.store = store
        self.disk_guard = disk_guard  # asked before each periodic capture
        self.uploads = uploads  # a remote store: capture into staging, upload in the background
        self.rotation = rotation  # told after each commit; it runs beside this loop
        self.catalog = catalog
        self.run_id = run_id
        self.stage = stage
        self.attempt = attempt
        self.ws = ws
        self.last_step = restored_step
        self.answered: set[int] = set()  # save requests fulfilled by a committed capture
        # A record is read again when it changes: the integration rewrites a step's record to
        # answer a request that arrives at a step it has already saved.
        self._seen_records: dict[int, tuple[int, int]] = {}
        # The restored selection is already committed: an attempt that ends before it saves
        # anything must not commit the same files again as a new snapshot.
        self._committed_id = restored_snapshot
        self._committed_state: tuple | None = None
        if restored_step is not None:
            self._committed_state = self._selection(restored_step)
        # A warm start's folder (another run's weights, laid out before the program started)
        # is never this run's checkpoint, unless the program writes that step itself.
        self._inherited = (
            None
            if inherited_step is None
            else (
                inherited_step,
                signature(os.path.join(ws.state, checkpoint_folder(inherited_step))),
            )
        )
        seen = [step for step in (restored_step, inherited_step) if step is not None]
        self.watcher = DirectoryWatcher(
            ws.state, marker=stage.continuity.checkpoint_complete, seen=seen
        )
        # With an integration the save records drive captures; the watcher only takes over
        # when the integration reports that it left the program unprepared.
        self.watch_folders = stage.integration is None

    # --- triggers ---------------------------------------------------------------------------

    def tick(self) -> None:
        """One pass of the poll loop: events, save records, settled folders."""
        self.ingest_events()
        self.capture_save_records()
        if self.watch_folders:
            for step in self.watcher.poll():
                self.capture(step, reason="settled")

    def capture_save_records(self) -> None:
        for number, path in protocol.numbered_records(self.ws.control.saves):
            version = _version(path)
            if version is None or self._seen_records.get(number) == version:
                continue
            data = _read_json(path)
            if data is None:
                continue  # being written: read it at the next tick
            self._seen_records[number] = version
            record = protocol.SaveRecord.from_dict(data)
            self.watcher.handled(record.step)
            saved = self.capture(
                record.step,
                epoch=record.epoch,
                metrics=record.metrics,
                reason="save",
                requested=bool(record.requests),
            )
            if saved:
                self.answered.update(record.requests)

    def final_capture(self) -> None:
        """The selection once more after the program exited (skipped if nothing changed).

        It holds the newest whole checkpoint folder; newer ones the program left half written
        (it was killed in the middle of a save) are left out, and with no whole one there is
        nothing to capture that a restore could continue from.
        """
        self.ingest_events()
        self.capture_save_records()
        steps = [step for step in checkpoint_steps(self.ws.state) if not self._laid_out(step)]
        whole = self._newest_whole(steps)
        if steps and whole is None:
            return
        step = whole if whole is not None else (self.last_step or 0)
        if whole is None and self._committed_id is None and not self._selection(step):
            return  # nothing saved, restored or selected: an empty snapshot restores nothing
        self.capture(step, reason="exit")

    def _laid_out(self, step: int) -> bool:
        """``step`` is the warm start's folder, as it was laid out (the program left it)."""
        if self._inherited is None or self._inherited[0] != step:
            return False
        return signature(self.watcher.folder(step)) == self._inherited[1]

    def _newest_whole(self, steps: list[int]) -> int | None:
        for step in reversed(steps):
            if not self.watch_folders:
                return step  # the integration publishes whole folders only
            verdict = self.watcher.verdict(step, signature(self.watcher.folder(step)) or ())
            if verdict.complete:
                return step
            self._incomplete(step, verdict, "exit")
        return None

    # --- capture ----------------------------------------------------------------------------

    def capture(
        self,
        step: int,
        *,
        epoch: float | None = None,
        metrics: dict[str, Any] | None = None,
        reason: str,
        requested: bool = False,
    ) -> str | None:
        """Commit one snapshot at ``step`` (``requested``: a save the runner asked for).

        Returns the id of the snapshot that holds the selection now (the newest one when
        nothing changed since it), or None when the capture failed or the disk guard turned
        periodic captures off.
        """
        periodic = reason == "settled" or (reason == "save" and not requested)
        if self.disk_guard is not None and not self.disk_guard.admits(
            periodic, lambda: sum(entry[1] for entry in self._selection(step))
        ):
            return None
        # As often as a changing file is read again (defaults.CAPTURE_READ_ATTEMPTS).
        for _ in range(defaults.CAPTURE_READ_ATTEMPTS):
            try:
                return self._capture_once(step, epoch, metrics, reason)
            except _NewerCheckpoint:
                continue  # it may be in this copy: take the selection again, excluding it
        self.event("capture_skipped", {"step": step, "reason": "newer checkpoints kept coming"})
        return None

    def _capture_once(
        self, step: int, epoch: float | None, metrics: dict[str, Any] | None, reason: str
    ) -> str | None:
        from nodus.store.manifest import SnapshotInfo

        paths, excludes, listed = narrowed(
            self.ws.copy, self.stage.continuity.checkpoint_paths, step
        )
        state = fingerprint(self.ws.copy, paths, excludes)
        if state == self._committed_state:
            return self._committed_id  # the newest snapshot already holds exactly this
        folder = os.path.join(self.ws.state, checkpoint_folder(step))
        before = _folder_state(folder)
        if not before and reason in ("settled", "save"):
            self.event("capture_skipped", {"step": step, "reason": f"{folder} is gone"})
            return None
        if reason != "save" and self.watch_folders:
            verdict = self.watcher.verdict(step, before)
            if not verdict.complete:
                self._incomplete(step, verdict, reason)
                return None
        info = SnapshotInfo(
            run=self.run_id,
            stage=self.stage.name,
            attempt=self.attempt,
            step=step,
            epoch=epoch,
            metrics=metrics or {},
            role="checkpoint",
        )
        into = self.store if self.uploads is None else self.uploads.staging
        # An integration publishes each folder whole and never writes into it again, so the
        # store may take its files as they lie (hard links): the save is written once.
        immutable = (
            () if self.watch_folders else (f"{protocol.STATE_DIR}/{checkpoint_folder(step)}",)
        )
        try:
            manifest = into.capture(
                self.ws.copy,
                paths,
                info=info,
                guard=lambda: self._guard_folder(folder, before, listed),
                excludes=excludes,
                on_event=self.event,
                immutable=immutable,
            )
        except StaleAttemptError:
            raise
        except _FolderChanged:
            # The program removed (pruned) or rewrote the checkpoint while it was copied: the
            # copy may be missing files, so it is never committed; a newer save follows.
            self.event("capture_skipped", {"step": step, "reason": f"{folder} changed"})
            return None
        except (StoreError, OSError) as error:
            self.event("capture_failed", {"step": step, "reason": reason, "error": str(error)})
            return None
        self._committed_state = state
        self._committed_id = manifest.id
        self.last_step = step
        self.watcher.handled(step, before)
        if self.uploads is not None:
            # The final save is never skipped for a newer one, and the attempt waits for it.
            self.uploads.submit(manifest, reason, keep=reason == "exit")
            return manifest.id
        self.event("snapshot_committed", {"snapshot": manifest.id, "step": step, "reason": reason})
        commit = protocol.CommitRecord(step=step, snapshot=manifest.id)
        write_json_atomic(self.ws.control.committed, commit.to_dict())
        if self.rotation is not None:
            self.rotation.request()
        return manifest.id

    def _incomplete(self, step: int, verdict: Verdict, reason: str) -> None:
        """A folder that settled (or was left at exit) without being whole: not committed."""
        details = {
            "step": step,
            "reason": reason,
            "layout": verdict.layout,
            "missing": verdict.missing,
        }
        if self.watcher.marker is None:  # a layout of its own may look like a known one
            details["hint"] = (
                "a program with a layout of its own names the file it writes last with "
                "[continuity] checkpoint_complete"
            )
        self.event("checkpoint_incomplete", details)

    def guard(self) -> None:
        """Attempt fencing: called by the store just before the commit.

        A capture into staging is fenced by this catalog alone: it must never wait on the
        network. The store's own fences (its run record and lease) guard the remote commit,
        which the uploader makes later (:mod:`nodus.runner.uploading`)."""
        if self.uploads is not None:
            fence_here(self.catalog, self.run_id, self.stage.name, self.attempt)
        else:
            fence(self.catalog, self.run_id, self.stage.name, self.attempt)

    def finish_uploads(self) -> None:
        """Wait until what was captured is stored (remote store); a no-op for a local one."""
        if self.uploads is not None:
            self.uploads.finish()

    def _guard_folder(self, folder: str, before: tuple, listed: frozenset[str]) -> None:
        """Fencing, then: the step's checkpoint folder is still whole, as it was at the start,
        and no checkpoint folder appeared since ``state/`` was ``listed`` (the selection,
        narrowed then, could hold it)."""
        self.guard()
        if _folder_state(folder) != before:
            raise _FolderChanged(folder)
        if appeared(self.ws.copy, listed):
            raise _NewerCheckpoint()

    def _selection(self, step: int) -> tuple:
        """The fingerprint of what a capture at ``step`` would take."""
        paths, excludes, _ = narrowed(self.ws.copy, self.stage.continuity.checkpoint_paths, step)
        return fingerprint(self.ws.copy, paths, excludes)

    # --- events -----------------------------------------------------------------------------

    def ingest_events(self) -> None:
        """Move the program's ``.nodus/events/<n>.json`` into the run's event log."""
        for _number, path in protocol.numbered_records(self.ws.control.events):
            data = _read_json(path)
            if data is None:
                continue
            event = protocol.EventRecord.from_dict(data)
            self.event(event.type, event.details)
            if event.type == protocol.EVENT_UNPREPARED:
                self.watch_folders = True  # the program saves on its own, if at all
            os.remove(path)

    def event(self, type_: str, details: dict[str, Any]) -> None:
        self.catalog.add_event(
            self.run_id, type_, details, stage=self.stage.name, attempt=self.attempt
        )


def fence(catalog: Catalog, run_id: str, stage: str, attempt: int) -> None:
    """Attempt fencing before a commit into the run's store: StaleAttemptError unless
    ``attempt`` is still the stage's current one, here and in the store's run record."""
    fence_here(catalog, run_id, stage, attempt)
    catalog.check_fences(run_id, stage, attempt)  # the store's record and lease, when driven


def fence_here(catalog: Catalog, run_id: str, stage: str, attempt: int) -> None:
    """The catalog's part of :func:`fence`, which needs no store."""
    current = catalog.current_attempt(run_id, stage)
    if current != attempt:
        raise StaleAttemptError(
            f"attempt {attempt} of {run_id}/{stage} was superseded by "
            f"attempt {current}; its snapshot is not committed"
        )


class _FolderChanged(Exception):
    """A checkpoint folder changed or vanished while it was being captured."""


class _NewerCheckpoint(Exception):
    """A checkpoint folder was published while the selection was read: it may be in the copy."""


def _folder_state(folder: str) -> tuple:
    """Fingerprint of one checkpoint folder (the watcher's signature); empty when it is gone."""
    return signature(folder) or ()


def _version(path: str) -> tuple[int, int] | None:
    """What tells one write of a record from the next: (mtime_ns, size)."""
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return stat.st_mtime_ns, stat.st_size


def _read_json(path: str) -> dict | None:
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
