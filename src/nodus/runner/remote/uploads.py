"""The runner's side of the background upload to a remote store (:mod:`nodus.store.upload`).

With a non-local run store an attempt captures into the local staging store and hands each
staged snapshot to its :class:`Uploads`. What the run records follows the remote store, never
the staging one:

    snapshot_staged            {snapshot, step, reason}   the local capture (at disk speed)
    snapshot_committed         {snapshot, step, reason[, counted]}   the remote commit: it exists
    outputs_committed          {snapshot}                 the outputs' remote commit
    checkpoint_upload_skipped  {snapshot, step, reason}   overtaken while waiting to upload
    snapshot_unrecorded        {snapshot, step, role}     still not stored when the stage ended

``.nodus/committed.json``, which lets the integration prune older checkpoint folders, and the
rotation pass both follow the remote commit, so the program never deletes a folder whose
snapshot is not stored yet, and retention only ever counts stored snapshots.

The queue (what uploads, how far, what waits) is published in ``work/<run>/upload.json`` under
``$NODUS_HOME``, replaced atomically, so ``nodus runs get`` in another process can show it.
"""

from __future__ import annotations

import contextlib
import json
import os
from typing import TYPE_CHECKING, Any

from nodus import protocol
from nodus._atomic import private_folder, write_json_atomic
from nodus.runner.catalog.attempt_context import AttemptContext
from nodus.runner.catalog.unrecorded import UNRECORDED
from nodus.runner.upkeep.rotation import Rotation
from nodus.runner.workspace.layout import Workspace
from nodus.schemas import defaults

if TYPE_CHECKING:
    from nodus.store.manifest import Manifest

__all__ = [
    "Uploads",
    "read_upload_status",
    "upload_status_path",
]


class Uploads:
    """The uploads of one attempt: staging store, uploader, and what the run records."""

    def __init__(
        self, context: AttemptContext, *, home: str, ws: Workspace, rotation: Rotation | None
    ) -> None:
        from nodus.store.upload import Uploader, open_staging

        self.context = context
        self.ws = ws
        self.rotation = rotation
        self.status_path = upload_status_path(home, context.run_id)
        self.staging = open_staging(home, context.store.url)
        self._reasons: dict[str, str] = {}
        self._finished: list[Manifest] | None = None
        # The remote commit is fenced by the catalog and the store's run record and lease.
        self.uploader = Uploader(
            self.staging,
            context.store,
            guard=context.fence,
            on_commit=self._committed,
            on_skip=self._skipped,
            on_progress=self._publish,
        )

    def submit(self, manifest: Manifest, reason: str, *, keep: bool = False) -> None:
        """A snapshot committed into staging: record it and queue its upload."""
        self._reasons[manifest.id] = reason
        if manifest.role != "outputs":
            details = {"snapshot": manifest.id, "step": manifest.step, "reason": reason}
            self.context.event("snapshot_staged", details)
        self.uploader.submit(manifest, keep=keep)

    def finish(self) -> list[Manifest]:
        """Wait for every upload (retrying a failing store for ``unrecorded_retry``); the
        snapshots left unrecorded, each recorded as a ``snapshot_unrecorded`` event."""
        if self._finished is None:
            self._finished = self.uploader.finish(self.context.stage.execution.unrecorded_retry)
            for manifest in self._finished:
                details = {"snapshot": manifest.id, "step": manifest.step, "role": manifest.role}
                self.context.event(UNRECORDED, details)
        return self._finished

    # --- the uploader's callbacks (its threads) -----------------------------------------------

    def _committed(self, manifest: Manifest) -> None:
        if manifest.role == "outputs":
            self.context.event("outputs_committed", {"snapshot": manifest.id})
            return
        reason = self._reasons.get(manifest.id, "save")
        details: dict[str, Any] = {"snapshot": manifest.id, "step": manifest.step, "reason": reason}
        if manifest.counted:  # said "capture N", as the capture loop's own commit says
            details["counted"] = True
        self.context.event("snapshot_committed", details)
        assert manifest.step is not None  # a checkpoint's (outputs returned above)
        commit = protocol.CommitRecord(step=manifest.step, snapshot=manifest.id)
        write_json_atomic(self.ws.control.committed, commit.to_dict())
        if self.rotation is not None:
            self.rotation.request()

    def _skipped(self, manifest: Manifest, reason: str) -> None:
        details = {"snapshot": manifest.id, "step": manifest.step, "reason": reason}
        self.context.event("checkpoint_upload_skipped", details)

    def _publish(self, status: dict[str, Any]) -> None:
        with contextlib.suppress(OSError):  # only the progress display is at stake
            write_json_atomic(self.status_path, {**status, "stage": self.context.stage.name})


def upload_status_path(home: str, run_id: str) -> str:
    folder = os.path.join(home, defaults.WORK_DIR, run_id)
    private_folder(folder)
    return os.path.join(folder, "upload.json")


def read_upload_status(home: str, run_id: str) -> dict[str, Any] | None:
    """The run's upload queue as its runner last published it; None without a remote store."""
    path = os.path.join(home, defaults.WORK_DIR, run_id, "upload.json")
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
