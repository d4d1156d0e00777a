"""The capture loop of one attempt: what becomes a snapshot, and when.

Three things trigger a capture while the program runs: a save record from the integration
(``.nodus/saves/<step>.json``, captured at once with its step, epoch and metrics), a directory
contract ``state/checkpoint-<step>`` folder that has settled (again whenever it changes), and the
program's exit (the selection once more). Each capture takes the stage's selection, with the
state folder narrowed to the one checkpoint folder of that step, so a restore never sees two
generations of state. Each commit asks the attempt's rotation (:mod:`nodus.runner.upkeep.rotation`)
for a pass, which runs beside this loop.

An integration publishes each folder whole. A directory-contract capture is committed only once
what it takes is whole too: a checkpoint folder has its layout's last-written file or the
``checkpoint_complete`` marker (:mod:`nodus.stages.layouts`), every file passes its format's
check and none is a temporary file (:mod:`nodus.stages.formats`), and after a death by signal
nothing changed within the settle window before it. A capture that fails is never a snapshot,
so it can never be a restore target; a ``checkpoint_incomplete`` event says what failed.

A directory-contract program's snapshots carry the metrics its own logs hold at their step
(TensorBoard, Lightning's ``metrics.csv``, JSON lines: :mod:`nodus.runner.capture.metrics`).

A selection without ``checkpoint-<step>`` folders (``ckpt.pt``, Accelerate's ``step_N``,
Lightning's ``*.ckpt``) is captured whole each time it settles in a new form, with the step its
names carry (:mod:`nodus.stages.step_names`), else the step its newest ``torch.save`` checkpoint
records inside (:mod:`nodus.stages.recorded_steps`), else the capture's count, which the
manifest marks (``step_source``) so that it is said as ``capture N``. A resume's save of the
state it restored is no progress: a selection whose bytes are the restored snapshot's is that
snapshot (no capture, no count), and one saved again at the restored step with other bytes (a
new best loss beside the same weights) is that step again, never a step of its own.

With a remote store each capture commits into the local staging store instead and is handed
to the attempt's :class:`~nodus.runner.remote.uploads.Uploads`: ``snapshot_staged`` is recorded now,
``snapshot_committed`` (with ``committed.json`` and the rotation pass) once it is uploaded.

A capture that fails (full disk, unreachable store) leaves that snapshot uncommitted, records a
``capture_failed`` event and lets the program train on; the next trigger tries again. Only a
stale attempt (another attempt now owns the stage) stops the attempt: it must never commit.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from nodus import protocol
from nodus._atomic import write_json_atomic
from nodus.errors import StaleAttemptError, StoreError
from nodus.protocol import checkpoint_folder, checkpoint_step, checkpoint_steps
from nodus.runner.capture.disk_guard import DiskGuard, stored_bytes
from nodus.runner.capture.metrics import MetricTap
from nodus.runner.capture.selection import appeared, fingerprint, narrowed
from nodus.runner.catalog.attempt_context import AttemptContext
from nodus.runner.remote.uploads import Uploads
from nodus.runner.upkeep.rotation import Rotation
from nodus.runner.workspace.layout import Workspace
from nodus.schemas import defaults
from nodus.stages import completeness, formats, layouts, recorded_steps, step_names
from nodus.stages.directory import DirectoryWatcher, Entry, signature, step_folders
from nodus.stages.layouts import Verdict
from nodus.store import live_folder
from nodus.store.manifest import COUNTED

if TYPE_CHECKING:
    from nodus.store.manifest import Manifest


class Capturer:
    """Captures one attempt's selection into the store, fenced by the attempt number."""

    def __init__(
        self,
        context: AttemptContext,
        ws: Workspace,
        *,
        restored_step: int | None = None,
        restored_snapshot: str | None = None,
        restored: Manifest | None = None,
        inherited_step: int | None = None,
        rotation: Rotation | None = None,
        disk_guard: DiskGuard | None = None,
        uploads: Uploads | None = None,
    ) -> None:
        self.context = context  # the store, catalog, run, stage and attempt number
        self.disk_guard = disk_guard  # asked before each periodic capture
        self.uploads = uploads  # a remote store: capture into staging, upload in the background
        self.rotation = rotation  # told after each commit; it runs beside this loop
        self.ws = ws
        self.last_step = restored_step
        self.restored_step = restored_step
        self.restore_ignored = False  # said once: the program saved below the restored step
        self.answered: set[int] = set()  # save requests fulfilled by a committed capture
        # Snapshots committed (staged, with a remote store) and save records read by this
        # capture loop: progress, as the attempt's hang watch counts it.
        self.commits = 0
        self.records_read = 0
        # A record is read again when it changes: the integration rewrites a step's record to
        # answer a request that arrives at a step it has already saved.
        self._seen_records: dict[int, tuple[int, int]] = {}
        # The restored selection is already committed: an attempt that ends before it saves
        # anything must not commit the same files again as a new snapshot.
        self._committed_id = restored_snapshot
        self._restored = restored  # its manifest, when the attempt has it (its files' hashes)
        self._committed_state: tuple[Entry, ...] | None = None
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
            ws.state, marker=context.stage.continuity.checkpoint_complete, seen=seen
        )
        self.template = context.stage.continuity.checkpoint_name
        # Only what this attempt's program wrote can be half written: what was laid out
        # (source, restore) keeps its captured mtime. A second of margin for coarse clocks.
        self._since_ns = time.time_ns() - 1_000_000_000
        # A selection without checkpoint folders, watched whole: its form pending since when,
        # the form last reported, and when it was last looked at (a walk of the selection).
        self._pending: tuple[tuple[Entry, ...], float] | None = None
        self._unsettled = 0
        self._reported: tuple[Entry, ...] | None = None
        self._looked = float("-inf")
        if self._committed_state:  # the restored Accelerate folders' registered objects
            self._count_custom(step_folders(self._committed_state, self.template))
        # With an integration the save records drive captures; the watcher only takes over
        # when the integration reports that it left the program unprepared.
        self.watch_folders = context.stage.integration is None
        # Such a program's own logs give its snapshots and curves their metrics.
        self.metrics = MetricTap(
            ws, context.stage.continuity.metrics, self.watcher.clock, self.event
        )

    # --- triggers ---------------------------------------------------------------------------

    def tick(self) -> None:
        """One pass of the poll loop: events, save records, settled folders."""
        self.ingest_events()
        self.capture_save_records()
        if self.watch_folders:
            self.metrics.poll()
            for step in self.watcher.poll():
                self.capture(step, reason="settled")
            if not self.watcher.folders:
                self._poll_selection()

    def _poll_selection(self) -> None:
        """Capture the selection once it settled in a form not captured before. A walk of it
        costs more than a listing of ``state/``: once per half settle time is enough."""
        now = self.watcher.clock()
        if now - self._looked < max(defaults.POLL_S, self.watcher.settle_s / 2):
            return
        self._looked = now
        current = self._selection_entries()
        if not current or current in (self._committed_state, self._reported):
            return
        if self._pending is None or self._pending[0] != current:
            self._unsettled += self._pending is not None  # changed again before it settled
            self._pending = (current, now)
        elif now - self._pending[1] >= self.watcher.settle_s:
            self._reported, self._pending = current, None
            self.capture_selection("settled", entries=current)

    def capture_save_records(self) -> None:
        for number, path in protocol.numbered_records(self.ws.control.saves):
            version = _version(path)
            if version is None or self._seen_records.get(number) == version:
                continue
            data = _read_json(path)
            if data is None:
                continue  # being written: read it at the next tick
            self._seen_records[number] = version
            self.records_read += 1
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

    def final_capture(self, died_at: float | None = None) -> None:
        """The selection once more after the program exited (skipped if nothing changed).

        It holds the newest whole checkpoint folder; newer ones the program left half written
        (it was killed in the middle of a save) are left out, and with no whole one there is
        nothing to capture that a restore could continue from. ``died_at`` (wall clock): the
        program, or a process of its tree, died by a signal then; what changed within the
        settle window before it may be half written and is not taken.
        """
        self.ingest_events()
        self.capture_save_records()
        if self.watch_folders:
            self.metrics.read(final=True)
        self._said_unsettled()
        steps = [step for step in checkpoint_steps(self.ws.state) if not self._laid_out(step)]
        if self.watch_folders and not steps:
            self.capture_selection("exit", died_at)
            return
        whole = self._newest_whole(steps, died_at)
        if steps and whole is None:
            return
        step = whole if whole is not None else (self.last_step or 0)
        if whole is None and self._committed_id is None and not self._selection(step):
            return  # nothing saved, restored or selected: an empty snapshot restores nothing
        self.capture(step, reason="exit", died_at=died_at)

    def _said_unsettled(self) -> None:
        """Nothing was captured while the program trained although its selection kept
        changing: its saves came closer together than the settle time (protection says so)."""
        changes = self.watcher.unsettled + self._unsettled
        if self.watch_folders and not self.commits and changes >= 2:
            self.event("capture_unsettled", {"changes": changes, "settle_s": self.watcher.settle_s})

    def _laid_out(self, step: int) -> bool:
        """``step`` is the warm start's folder, as it was laid out (the program left it)."""
        if self._inherited is None or self._inherited[0] != step:
            return False
        return signature(self.watcher.folder(step)) == self._inherited[1]

    def _newest_whole(self, steps: list[int], died_at: float | None) -> int | None:
        for step in reversed(steps):
            if not self.watch_folders:
                # the integration publishes whole folders only, each with every rank's part
                folder = self.watcher.folder(step)
                lacking = _ranks(folder, signature(folder) or ())
                if lacking is None:
                    return step
                self._incomplete(step, lacking, "exit")
                continue
            entries = signature(self.watcher.folder(step)) or ()
            verdict = self.watcher.verdict(step, entries)
            if verdict.complete:
                verdict = _ranks(self.watcher.folder(step), entries) or verdict
            if not verdict.complete:
                self._incomplete(step, verdict, "exit")
                continue
            inside = f"{protocol.STATE_DIR}/{checkpoint_folder(step)}"
            problems = self._problems(
                [(f"{inside}/{path}", size, mtime) for path, size, mtime in entries], died_at
            )
            if not problems:
                return step
            self._torn(step, problems, "exit")
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
        died_at: float | None = None,
    ) -> str | None:
        """Commit one snapshot at ``step`` (``requested``: a save the runner asked for).

        Returns the id of the snapshot that holds the selection now (the newest one when
        nothing changed since it), or None when the capture failed or the disk guard turned
        periodic captures off.
        """
        periodic = reason == "settled" or (reason == "save" and not requested)
        if self.disk_guard is not None and not self.disk_guard.admits(
            periodic, lambda: stored_bytes(self.ws.copy, self._selection(step))
        ):
            return None
        # As often as a changing file is read again (live_folder.CAPTURE_READ_ATTEMPTS).
        for _ in range(live_folder.CAPTURE_READ_ATTEMPTS):
            try:
                return self._capture_once(step, epoch, metrics, reason, died_at)
            except _NewerCheckpoint:
                continue  # it may be in this copy: take the selection again, excluding it
        self.event("capture_skipped", {"step": step, "reason": "newer checkpoints kept coming"})
        return None

    def _capture_once(
        self,
        step: int,
        epoch: float | None,
        metrics: dict[str, Any] | None,
        reason: str,
        died_at: float | None,
    ) -> str | None:
        paths, excludes, listed = narrowed(
            self.ws.copy, self.context.stage.continuity.checkpoint_paths, step
        )
        state = fingerprint(self.ws.copy, paths, excludes)
        if state == self._committed_state:
            return self._committed_id  # the newest snapshot already holds exactly this
        folder = os.path.join(self.ws.state, checkpoint_folder(step))
        before = _folder_state(folder)
        if not before and reason in ("settled", "save"):
            self.event("capture_skipped", {"step": step, "reason": f"{folder} is gone"})
            return None
        lacking = _ranks(folder, before)
        if lacking is not None:  # a world's checkpoint without some rank's part: never whole
            self._incomplete(step, lacking, reason)
            return None
        if reason != "save" and self.watch_folders:
            verdict = self.watcher.verdict(step, before)
            if not verdict.complete:
                self._incomplete(step, verdict, reason)
                return None
            problems = self._problems(state, died_at)
            if problems:
                self._torn(step, problems, reason)
                return None
        # An integration publishes each folder whole and never writes into it again, so the
        # store may take its files as they lie (hard links): the save is written once.
        immutable = (
            () if self.watch_folders else (f"{protocol.STATE_DIR}/{checkpoint_folder(step)}",)
        )
        manifest = self._commit(
            step,
            paths,
            excludes,
            guard=lambda: self._guard_folder(folder, before, listed),
            epoch=epoch,
            metrics=metrics,
            reason=reason,
            immutable=immutable,
        )
        if manifest is None:
            return None
        self.watcher.handled(step, before)
        return self._committed(manifest, step, state, reason)

    def capture_selection(
        self, reason: str, died_at: float | None = None, entries: tuple[Entry, ...] | None = None
    ) -> str | None:
        """Commit the selection whole (it holds no checkpoint folders), with the step its names
        carry, else its checkpoint records, else the capture's count (``_step_of``); None when
        nothing was committed.
        ``entries``: the selection's fingerprint when the caller has just taken it."""
        paths = list(self.context.stage.continuity.checkpoint_paths)
        entries = self._selection_entries() if entries is None else entries
        if not entries:
            return None
        if entries == self._committed_state:
            return self._committed_id
        folders = step_folders(entries, self.template)
        problems = self._problems(entries, died_at) + self._folder_problems(entries, folders)
        if problems:
            self._torn(None, problems, reason)
            return None
        if self._written_back(entries):
            self._committed_state = entries  # the restored snapshot holds these bytes
            return self._committed_id
        step, epoch, source = self._step_of(entries)
        periodic = reason == "settled"
        if self.disk_guard is not None and not self.disk_guard.admits(
            periodic, lambda: stored_bytes(self.ws.copy, entries)
        ):
            return None
        manifest = self._commit(
            step,
            paths,
            [],
            guard=lambda: self._guard_selection(entries),
            reason=reason,
            epoch=epoch,
            step_source=source,
        )
        if manifest is None:
            return None
        self._count_custom(folders)
        return self._committed(manifest, step, entries, reason)

    def _step_of(self, entries: tuple[Entry, ...]) -> tuple[int, float | None, str]:
        """A whole selection's step, its epoch, and where the step came from (one of
        ``STEP_SOURCES``): the names, else the newest checkpoint's record, else the count."""
        named = step_names.step_of((path for path, _size, _mtime in entries), self.template)
        if named is not None:
            return named.step, named.epoch, "name"
        recorded = self._recorded(entries)
        if recorded is not None and recorded.step is not None:
            return recorded.step, recorded.epoch, "checkpoint"
        epoch = recorded.epoch if recorded is not None else None
        return (self.last_step or 0) + 1, epoch, COUNTED

    def _recorded(self, entries: tuple[Entry, ...]) -> recorded_steps.Recorded | None:
        """What the newest of the selection's checkpoint files records (the highest step of
        the few newest: Lightning's ``last.ckpt`` beside an older ``best.ckpt``)."""
        files = sorted(
            (entry for entry in entries if entry[0].endswith(recorded_steps.SUFFIXES)),
            key=lambda entry: entry[2],
            reverse=True,
        )[: recorded_steps.MOST_FILES]
        key = self.context.stage.continuity.step_key
        found = [recorded_steps.read(os.path.join(self.ws.copy, path), key) for path, *_ in files]
        with_step = [r for r in found if r is not None and r.step is not None]
        if with_step:
            return max(with_step, key=lambda r: r.step or 0)
        return next((r for r in found if r is not None), None)

    def _written_back(self, entries: tuple[Entry, ...]) -> bool:
        """Before this attempt committed anything, the selection holds the restored
        snapshot's bytes, file for file: the program saved what it had just loaded."""
        restored = self._restored
        if restored is None or self._committed_id != restored.id:
            return False
        files = {entry.path: entry for entry in restored.files}
        if {path: size for path, size, _mtime in entries} != {
            path: entry.size for path, entry in files.items()
        }:
            return False
        from nodus.store.restore import holds_bytes

        return all(
            files[path].is_link or holds_bytes(os.path.join(self.ws.copy, path), files[path])
            for path, _size, _mtime in entries
        )

    def _commit(
        self,
        step: int,
        paths: list[str],
        excludes: list[str],
        *,
        guard: Callable[[], None],
        reason: str,
        epoch: float | None = None,
        metrics: dict[str, Any] | None = None,
        immutable: tuple[str, ...] = (),
        step_source: str | None = None,
    ) -> Manifest | None:
        """The store's capture of ``paths`` at ``step``: its manifest, or None (an event says
        why) when the files changed meanwhile or the store failed."""
        from nodus.store.manifest import SnapshotInfo

        info = SnapshotInfo(
            run=self.context.run_id,
            stage=self.context.stage.name,
            attempt=self.context.attempt,
            step=step,
            epoch=epoch,
            metrics=metrics or (self._logged(step, step_source) if self.watch_folders else {}),
            role="checkpoint",
            step_source=step_source,
        )
        into = self.context.store if self.uploads is None else self.uploads.staging
        try:
            return into.capture(
                self.ws.copy,
                paths,
                info=info,
                guard=guard,
                excludes=excludes,
                on_event=self.event,
                immutable=immutable,
            )
        except StaleAttemptError:
            raise
        except _FolderChanged as changed:
            # The program removed (pruned) or rewrote what was copied: the copy may be missing
            # files, so it is never committed; a newer save follows.
            self.event("capture_skipped", {"step": step, "reason": f"{changed} changed"})
            return None
        except (StoreError, OSError) as error:
            self.event("capture_failed", {"step": step, "reason": reason, "error": str(error)})
            return None

    def _logged(self, step: int, step_source: str | None) -> dict[str, float]:
        """The metrics the program's own logs hold for a snapshot at ``step``: at or before
        it, or the newest ones where ``step`` is the capture's count."""
        return self.metrics.at(None if step_source == COUNTED else step)

    def _committed(
        self, manifest: Manifest, step: int, state: tuple[Entry, ...], reason: str
    ) -> str:
        """What follows a commit: the run's record of it, retention, the program's notice."""
        self._committed_state = state
        self._committed_id = manifest.id
        self.last_step = step
        self.commits += 1
        self._check_resumed(step, manifest.id)
        if self.uploads is not None:
            # The final save is never skipped for a newer one, and the attempt waits for it.
            self.uploads.submit(manifest, reason, keep=reason == "exit")
            return manifest.id
        details: dict[str, Any] = {"snapshot": manifest.id, "step": step, "reason": reason}
        if manifest.counted:  # said "capture N" (docs/recovery.md, "The step of a snapshot")
            details["counted"] = True
        self.event("snapshot_committed", details)
        commit = protocol.CommitRecord(step=step, snapshot=manifest.id)
        write_json_atomic(self.ws.control.committed, commit.to_dict())
        if self.rotation is not None:
            self.rotation.request()
        return manifest.id

    def reported(self, step: int) -> None:
        """The program reported training ``step`` (``progress.json``): below the restored step
        it started over, as a save below it says (0 is a report before training began)."""
        if step > 0:
            self._check_resumed(step, None)

    def _check_resumed(self, step: int, snapshot: str | None) -> None:
        """A restored attempt whose program saves (or reports) a step below the restored one
        started over (it never read the checkpoint laid out for it): said once, as
        ``restore_ignored``."""
        if self.restored_step is None or self.restore_ignored or step >= self.restored_step:
            return
        self.restore_ignored = True
        self.event(
            "restore_ignored",
            {"restored_step": self.restored_step, "step": step, "snapshot": snapshot},
        )

    def _incomplete(self, step: int, verdict: Verdict, reason: str) -> None:
        """A folder that settled (or was left at exit) without being whole: not committed."""
        details = {
            "step": step,
            "reason": reason,
            "path": f"{protocol.STATE_DIR}/{checkpoint_folder(step)}",
            "why": f"lacks {verdict.missing}",
            "layout": verdict.layout,
            "missing": verdict.missing,
        }
        if self.watcher.marker is None:  # a layout of its own may look like a known one
            details["hint"] = (
                "a program with a layout of its own names the file it writes last with "
                "[continuity] checkpoint_complete"
            )
        self.event("checkpoint_incomplete", details)

    def _torn(self, step: int | None, problems: list[tuple[str, str]], reason: str) -> None:
        """A capture left out because what it would take is not whole: the first file or
        folder that failed, and how many did."""
        path, why = problems[0]
        details: dict[str, Any] = {"step": step, "reason": reason, "path": path, "why": why}
        if len(problems) > 1:
            details["others"] = len(problems) - 1
        self.event("checkpoint_incomplete", details)

    def _problems(self, entries: Iterable[Entry], died_at: float | None) -> list[tuple[str, str]]:
        """The files of ``entries`` (relative to the copy) that fail their format's check or,
        after a death by signal at ``died_at``, changed within the settle window before it."""
        if not self.watch_folders:
            return []  # an integration publishes whole folders only
        # The death is seen up to a poll after it happened.
        entries = list(entries)
        since = None if died_at is None else died_at - self.watcher.settle_s - defaults.POLL_S
        recent = {
            path
            for path, _size, mtime in entries
            if since is not None and mtime >= self._since_ns and mtime / 1e9 >= since
        }
        # What proves itself whole is taken however close to the death it was written.
        proven = self._proven(entries, recent) if recent else set()
        problems: list[tuple[str, str]] = []
        for path, _size, mtime in entries:
            if mtime < self._since_ns:
                continue
            why = formats.torn(os.path.join(self.ws.copy, path), path)
            if why is None and died_at is not None and path in recent and path not in proven:
                ago = max(0.0, died_at - mtime / 1e9)
                why = f"written {ago:.1f} s before the program died by a signal: maybe cut off"
            if why is not None:
                problems.append((path, why))
        return problems

    def _proven(self, entries: list[Entry], recent: set[str]) -> set[str]:
        """The ``recent`` files of ``entries`` whose checkpoint proves itself whole
        (:mod:`nodus.stages.completeness`): those of a folder whose name carries a step, by
        the folder's proof; the others by their own, where each is a whole checkpoint (the
        selection's only file outside such folders, or Lightning's ``.ckpt`` files, each a
        whole training state)."""
        folders = sorted(set(step_folders(entries, self.template)) | _checkpoint_folders(entries))
        units: dict[str, list[Entry]] = {}
        loose: list[str] = []
        for path, size, mtime in entries:
            folder = next((f for f in folders if path.startswith(f"{f}/")), None)
            if folder is None:
                loose.append(path)
            else:
                units.setdefault(folder, []).append((path[len(folder) + 1 :], size, mtime))
        marker = self.context.stage.continuity.checkpoint_complete
        custom = self.watcher.custom if self.watcher.counted else None
        proven: set[str] = set()
        for folder, inside in units.items():
            paths = {f"{folder}/{path}" for path, _size, _mtime in inside}
            if (
                paths & recent
                and completeness.of_folder(
                    os.path.join(self.ws.copy, folder), inside, marker, custom
                ).whole
            ):
                proven |= paths
        # Any other file next to a fresh one may be a part of the same save the kill cut
        # between (`model.pt`, then `optimizer.pt`): each whole, the pair not.
        fresh = [path for path in loose if path in recent]
        if len(loose) == 1 or all(path.endswith(".ckpt") for path in loose):
            proven.update(
                path
                for path in fresh
                if completeness.of_file(os.path.join(self.ws.copy, path), path).whole
            )
        return proven

    def _folder_problems(
        self, entries: Iterable[Entry], folders: dict[str, list[str]]
    ) -> list[tuple[str, str]]:
        """``folders`` of the selection ``entries`` (their names carry a step) that are not
        whole checkpoints (:func:`nodus.stages.layouts.judge`), and torch distributed
        checkpoints anywhere in it without their metadata."""
        marker = self.context.stage.continuity.checkpoint_complete
        # A folder laid out whole and left as it was (the source's, a restored one) is whole.
        written = {path for path, _size, mtime in entries if mtime >= self._since_ns}
        problems = []
        for folder, files in folders.items():
            if not any(f"{folder}/{name}" in written for name in files):
                continue
            verdict = layouts.judge(files, marker, custom=self.watcher.custom)
            if not verdict.complete:
                problems.append((folder, f"lacks {verdict.missing}"))
        dcp = layouts.distributed([path for path, _size, _mtime in entries])
        if written and dcp is not None and not dcp.complete:
            problems.append((str(dcp.missing), "a torch distributed checkpoint, not finished"))
        return problems

    def _count_custom(self, folders: dict[str, list[str]]) -> None:
        """Remember how many registered objects the run's Accelerate folders hold (the
        watcher's count, which its ``checkpoint-<step>`` folders keep too)."""
        for files in folders.values():
            self.watcher.custom = max(self.watcher.custom, layouts.custom_objects(files))
            self.watcher.counted = self.watcher.counted or layouts.accelerate_folder(files)

    @property
    def committed_id(self) -> str | None:
        """The snapshot that holds the selection as last committed (or restored), if any."""
        return self._committed_id

    def _selection_entries(self) -> tuple[Entry, ...]:
        """Names, sizes and mtimes of the whole selection now."""
        return fingerprint(self.ws.copy, list(self.context.stage.continuity.checkpoint_paths), [])

    def _guard_selection(self, entries: tuple[Entry, ...]) -> None:
        """Fencing, then: the selection is as it was when its files were checked."""
        self.guard()
        if self._selection_entries() != entries:
            raise _FolderChanged("the selection")

    def guard(self) -> None:
        """Attempt fencing: called by the store just before the commit.

        A capture into staging is fenced by this catalog alone: it must never wait on the
        network. The store's own fences (its run record and lease) guard the remote commit,
        which the uploader makes later (:mod:`nodus.runner.remote.uploads`)."""
        if self.uploads is not None:
            self.context.fence_here()
        else:
            self.context.fence()

    def finish_uploads(self) -> None:
        """Wait until what was captured is stored (remote store); a no-op for a local one."""
        if self.uploads is not None:
            self.uploads.finish()

    def _guard_folder(self, folder: str, before: tuple[Entry, ...], listed: frozenset[str]) -> None:
        """Fencing, then: the step's checkpoint folder is still whole, as it was at the start,
        and no checkpoint folder appeared since ``state/`` was ``listed`` (the selection,
        narrowed then, could hold it)."""
        self.guard()
        if _folder_state(folder) != before:
            raise _FolderChanged(folder)
        if appeared(self.ws.copy, listed):
            raise _NewerCheckpoint()

    def _selection(self, step: int) -> tuple[Entry, ...]:
        """The fingerprint of what a capture at ``step`` would take."""
        paths, excludes, _ = narrowed(
            self.ws.copy, self.context.stage.continuity.checkpoint_paths, step
        )
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
        self.context.event(type_, details)


class _FolderChanged(Exception):
    """A checkpoint folder changed or vanished while it was being captured."""


class _NewerCheckpoint(Exception):
    """A checkpoint folder was published while the selection was read: it may be in the copy."""


def _checkpoint_folders(entries: Iterable[Entry]) -> set[str]:
    """The ``state/checkpoint-<step>`` folders among ``entries``' paths."""
    found = set()
    for path, _size, _mtime in entries:
        parts = path.split("/")
        if (
            len(parts) > 2
            and parts[0] == protocol.STATE_DIR
            and checkpoint_step(parts[1]) is not None
        ):
            found.add(f"{parts[0]}/{parts[1]}")
    return found


def _folder_state(folder: str) -> tuple[Entry, ...]:
    """Fingerprint of one checkpoint folder (the watcher's signature); empty when it is gone."""
    return signature(folder) or ()


def _ranks(folder: str, entries: tuple[Entry, ...]) -> Verdict | None:
    """What a checkpoint folder of a world of several processes lacks of its ranks' parts
    (:func:`nodus.stages.layouts.ranks`), by the world size its identity record names; None
    when it lacks nothing, or records no world."""
    names = [path for path, _size, _mtime in entries]
    if defaults.HF_IDENTITY_FILE not in names:
        return None
    recorded = _read_json(os.path.join(folder, defaults.HF_IDENTITY_FILE)) or {}
    try:
        world = int(recorded.get("processes") or 1)
    except (TypeError, ValueError):
        return None
    return layouts.ranks(names, world)


def _version(path: str) -> tuple[int, int] | None:
    """What tells one write of a record from the next: (mtime_ns, size)."""
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return stat.st_mtime_ns, stat.st_size


def _read_json(path: str) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
