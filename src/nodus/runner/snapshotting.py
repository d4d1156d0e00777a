"""The capture loop of one attempt: what becomes a snapshot, and when.

Three things trigger a capture while the program runs: a save record from the integration
(``.nodus/saves/<step>.json``, captured at once with its step, epoch and metrics), a directory
contract ``state/checkpoint-<step>`` folder that has settled, and the program's exit (the
selection once more). Each capture takes the stage's selection, with the state folder narrowed
to the one checkpoint folder of that step, so a restore never sees two generations of state.

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
from nodus.runner.workspace import Workspace
from nodus.schemas import defaults
from nodus.schemas.resolved import ResolvedStage
from nodus.stages.directory import DirectoryWatcher


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
    ) -> None:
        self.store = store
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
        self.watcher = DirectoryWatcher(
            ws.state, seen={restored_step} if restored_step is not None else set()
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
            self.watcher.mark_seen(record.step)
            saved = self.capture(
                record.step, epoch=record.epoch, metrics=record.metrics, reason="save"
            )
            if saved:
                self.answered.update(record.requests)

    def final_capture(self) -> None:
        """The selection once more after the program exited (skipped if nothing changed)."""
        self.ingest_events()
        self.capture_save_records()
        steps = checkpoint_steps(self.ws.state)
        newest = steps[-1] if steps else None
        step = newest if newest is not None else (self.last_step or 0)
        self.capture(step, reason="exit")

    # --- capture ----------------------------------------------------------------------------

    def capture(
        self,
        step: int,
        *,
        epoch: float | None = None,
        metrics: dict[str, Any] | None = None,
        reason: str,
    ) -> str | None:
        """Commit one snapshot at ``step``.

        Returns the id of the snapshot that holds the selection now (the newest one when
        nothing changed since it), or None when the capture failed.
        """
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

        present = set(checkpoint_steps(self.ws.state))
        excludes = self._other_checkpoints(step)
        state = self._selection(step)
        if state == self._committed_state:
            return self._committed_id  # the newest snapshot already holds exactly this
        folder = os.path.join(self.ws.state, checkpoint_folder(step))
        before = _folder_state(folder)
        if not before and reason in ("settled", "save"):
            self.event("capture_skipped", {"step": step, "reason": f"{folder} is gone"})
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
        try:
            manifest = self.store.capture(
                self.ws.copy,
                list(self.stage.continuity.checkpoint_paths),
                info=info,
                guard=lambda: self._guard_folder(folder, before, present),
                excludes=excludes,
                on_event=self.event,
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
        self.event("snapshot_committed", {"snapshot": manifest.id, "step": step, "reason": reason})
        commit = protocol.CommitRecord(step=step, snapshot=manifest.id)
        write_json_atomic(self.ws.control.committed, commit.to_dict())
        return manifest.id

    def guard(self) -> None:
        """Attempt fencing: called by the store just before the commit."""
        current = self.catalog.current_attempt(self.run_id, self.stage.name)
        if current != self.attempt:
            raise StaleAttemptError(
                f"attempt {self.attempt} of {self.run_id}/{self.stage.name} was superseded by "
                f"attempt {current}; its snapshot is not committed"
            )

    def _guard_folder(self, folder: str, before: tuple, present: set[int]) -> None:
        """Fencing, then: the step's checkpoint folder is still whole, as it was at the start,
        and no checkpoint folder appeared that the excludes, listed at the start, left in."""
        self.guard()
        if _folder_state(folder) != before:
            raise _FolderChanged(folder)
        if set(checkpoint_steps(self.ws.state)) - present:
            raise _NewerCheckpoint()

    def _selection(self, step: int) -> tuple:
        """The fingerprint of what a capture at ``step`` would take."""
        return _selection_state(
            self.ws.copy, self.stage.continuity.checkpoint_paths, self._other_checkpoints(step)
        )

    def _other_checkpoints(self, step: int) -> list[str]:
        return [
            f"{protocol.STATE_DIR}/{checkpoint_folder(other)}"
            for other in checkpoint_steps(self.ws.state)
            if other != step
        ]

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


class _FolderChanged(Exception):
    """A checkpoint folder changed or vanished while it was being captured."""


class _NewerCheckpoint(Exception):
    """A checkpoint folder was published while the selection was read: it may be in the copy."""


def _folder_state(folder: str) -> tuple:
    """Fingerprint of one checkpoint folder; empty when it does not exist."""
    if not os.path.isdir(folder):
        return ()
    return _selection_state(folder, (".",), [])


def _selection_state(root: str, paths: tuple[str, ...], excludes: list[str]) -> tuple:
    """A cheap fingerprint (names, sizes, mtimes) of what a capture would take."""
    entries = []
    for rel in paths:
        top = os.path.normpath(os.path.join(root, rel))
        for folder, dirs, files in os.walk(top) if os.path.isdir(top) else [("", [], [top])]:
            dirs[:] = sorted(d for d in dirs if d != protocol.CONTROL_DIR)
            for name in sorted(files):
                path = os.path.join(folder, name)
                relative = os.path.relpath(path, root)
                if any(relative == e or relative.startswith(e + "/") for e in excludes):
                    continue
                try:
                    stat = os.stat(path)
                except OSError:
                    continue
                entries.append((relative, stat.st_size, stat.st_mtime_ns))
    return tuple(entries)


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
