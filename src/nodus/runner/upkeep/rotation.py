"""Rotation: retention applied to a stage after each commit, beside the capture loop.

Every committed snapshot asks the attempt's :class:`Rotation` for a pass. A pass lists the
run's committed checkpoints, asks :func:`nodus.retention.holds.run_holds` what holds them (the
run is unfinished, so the snapshot a retry would restore is held; pins and released epoch holds
come from the store's records; branches from the catalog), applies
:func:`nodus.retention.policy.rotation` with the stage's ``keep_recoverable`` and
``keep_adapters``, and has the store delete each kind it names (``store.delete_kind``, which
marks the kind first, so listings and restores leave it out at once). Each deletion is recorded
as a ``snapshot_kind_deleted`` event.

Passes run in one background thread of the attempt, one at a time: neither the program nor the
next capture waits on a deletion (docs/recovery.md). Requests that arrive during a pass are
coalesced into one more pass. At the end of the attempt the worker finishes what was asked, for
at most ``ROTATION_STOP_S``; anything left is completed by the next rotation or ``nodus gc``.

A failing pass records ``rotation_failed`` and never fails the run: training matters more than
disk. A deletion whose blobs the store could not free yet (a capture was running, so its sweep
deferred) is tried again by the next pass.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import TYPE_CHECKING

from nodus._logging import Logger
from nodus.errors import NodusError, NotFoundError
from nodus.registry import Registry
from nodus.retention.holds import HoldIndex, run_holds
from nodus.retention.policy import Deletion, rotation
from nodus.runner.catalog.attempt_context import AttemptContext
from nodus.runner.catalog.core import Run
from nodus.runner.catalog.phases import Phase
from nodus.runner.upkeep.lineage import referencing_runs
from nodus.runner.upkeep.registration import register_epoch_saves, version_event

if TYPE_CHECKING:
    from nodus.store.manifest import Manifest

__all__ = ["Rotation"]

log = Logger("nodus.runner")

ROTATION_STOP_S = 60.0
"""At the end of an attempt, how long the runner waits for its rotation (retention after each
commit) to finish; what it leaves undone, the next rotation or ``nodus gc`` completes."""

ROTATION_IDLE_S = 1.0
"""How often an idle rotation worker looks whether its attempt has ended; one that had nothing
left to do is not woken at the end (that would delay a recovery's next attempt)."""


class Rotation:
    """The rotation worker of one attempt of one stage."""

    def __init__(self, context: AttemptContext) -> None:
        from nodus.store import SnapshotStore

        self.context = context
        # Its own store object over the same storage: the capture's caches stay the capture's.
        self.store = SnapshotStore(context.store.storage)
        self._wake = threading.Condition()
        self._asked = False
        self._passing = False  # the worker is in a pass (set and read under ``_wake``)
        self._closing = False
        self._abandoned = False  # the attempt stopped waiting: stop before the next deletion
        self._thread: threading.Thread | None = None
        self._unfreed: set[tuple[str, str]] = set()  # marked, blobs not freed yet

    # --- the capture loop's side --------------------------------------------------------------

    def request(self) -> None:
        """Ask for a pass (after a commit); returns at once."""
        with self._wake:
            self._asked = True
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._work, name=f"rotation-{self.context.stage.name}", daemon=True
                )
                self._thread.start()
            self._wake.notify()

    def close(self, timeout: float = ROTATION_STOP_S, *, hurry: bool = False) -> None:
        """Finish what was asked (at most ``timeout`` seconds), then stop the worker.

        ``hurry``: a recovery's next attempt waits on this. An idle worker is then neither
        woken nor joined (its wake-up and teardown would cost that start most of a millisecond,
        the interpreter lock changing hands between cores): with nothing left to do, it sees
        the end at its next timed look (``ROTATION_IDLE_S``) and returns.
        """
        with self._wake:
            self._closing = True
            if self._unfreed:  # one more try at what a deferred sweep left
                self._asked = True
            if hurry and not (self._asked or self._passing):
                return
            self._wake.notify()
        if self._thread is None:
            return
        self._thread.join(timeout)
        if self._thread.is_alive():
            self._abandoned = True
            self.context.event("rotation_unfinished", {"waited_s": timeout})

    # --- the worker ---------------------------------------------------------------------------

    def _work(self) -> None:
        while True:
            with self._wake:
                while not (self._asked or self._closing):
                    self._wake.wait(ROTATION_IDLE_S)
                if not self._asked:
                    return  # closing, and nothing more was asked
                self._asked = False
                self._passing = True
            try:
                self._pass()
            finally:
                with self._wake:
                    self._passing = False

    def _pass(self) -> None:
        try:
            self._retry_unfreed()
            for deletion in self._decide():
                if self._abandoned:
                    return
                self._delete(deletion)
        except Exception as error:  # a failed pass must never fail the run
            log.warning(
                "rotation of %s/%s failed: %s", self.context.run_id, self.context.stage.name, error
            )
            self.context.event("rotation_failed", {"error": f"{type(error).__name__}: {error}"})

    def _decide(self) -> list[Deletion]:
        run = self.context.catalog.get_run(self.context.run_id)
        if run.phase.final:
            # This attempt is live, so the run is unfinished whatever the catalog says by
            # now: what a retry would restore stays held.
            run = dataclasses.replace(run, phase=Phase.RUNNING)
        manifests = self.store.list(run=self.context.run_id)
        self._register_epochs(run, manifests)
        holds = run_holds(
            run, manifests, HoldIndex(self.store), referencing_runs(self.context.catalog, run)
        )
        execution = self.context.stage.execution
        return rotation(
            [m for m in manifests if m.stage == self.context.stage.name],
            holds,
            keep_recoverable=execution.keep_recoverable,
            keep_adapters=execution.keep_adapters,
        )

    def _register_epochs(self, run: Run, manifests: list[Manifest]) -> None:
        """Each epoch-end save becomes a model version when it commits (docs/lineage.md); a failure
        is an event, and the next pass (or the run's end) tries again."""
        try:
            made = register_epoch_saves(
                Registry(self.context.catalog.models), self.store, run, manifests
            )
        except NodusError as error:
            self.context.event("model_registration_failed", {"error": str(error)})
            return
        for version in made:
            self.context.event("model_version_registered", version_event(version))

    def _delete(self, deletion: Deletion) -> None:
        try:
            report = self.store.delete_kind(
                deletion.snapshot_id, deletion.kind, reason=deletion.reason
            )
        except NotFoundError:
            return  # deleted meanwhile (`nodus gc`, a whole run's deletion): nothing left to do
        if report.deferred:
            self._unfreed.add((deletion.snapshot_id, deletion.kind))
        self.context.event(
            "snapshot_kind_deleted",
            {
                "snapshot": deletion.snapshot_id,
                "step": deletion.step,
                "kind": deletion.kind,
                "reason": deletion.reason,
            },
        )

    def _retry_unfreed(self) -> None:
        """Deleting a marked kind again frees what an earlier, deferred sweep left."""
        for snapshot_id, kind in sorted(self._unfreed):
            if self._abandoned:
                return
            try:
                deferred = self.store.delete_kind(snapshot_id, kind, reason="rotation").deferred
            except NotFoundError:
                # Removed meanwhile (its last kind went, or `nodus gc`, or `runs delete`), and
                # its blobs freed with it: left in the set, every later pass would fail here.
                deferred = False
            if not deferred:
                self._unfreed.discard((snapshot_id, kind))
