"""Preparing an attempt: its working copy laid out again, and the snapshot it continues from.

The copy is the run's source with the earlier stages' outputs laid over it, then the newest
restorable snapshot (:func:`~nodus.runner.recovery.decisions.restore_candidates`: a step asked
by hand, the newest one not suspect, or the run's parent when this stage continues it). A
damaged snapshot is passed over, never half-applied: the copy is rebuilt and the next older one
tried; when every one is damaged the attempt fails (:class:`NothingIntactError`) rather than
start over. The integration's settings and the restored commit are written into the copy; the
attempt's row says what it restored once the program is on its way (:meth:`Prepared.row`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nodus import protocol
from nodus._atomic import write_json_atomic
from nodus.errors import NotFoundError, StoreError
from nodus.runner.attempt.context import AttemptFacts
from nodus.runner.recovery import suspects
from nodus.runner.recovery.decisions import Restore, restore_candidates
from nodus.runner.upkeep.lineage import Parent
from nodus.runner.workspace.layout import write_integration

if TYPE_CHECKING:
    from nodus.store.manifest import Manifest

__all__ = ["NothingIntactError", "Prepared", "prepare"]


class NothingIntactError(Exception):
    """Every snapshot the attempt could continue from is damaged: it fails, never starts over."""


@dataclass(frozen=True)
class Prepared:
    """The copy laid out: the snapshot restored into it (None: from the source alone), and
    whether that was the parent's weights only (a warm start: training starts at step 0)."""

    restored: Manifest | None = None
    warm_start: bool = False

    @property
    def continued(self) -> Manifest | None:
        """The snapshot whose training this attempt continues (not a warm start's)."""
        return None if self.warm_start else self.restored

    def row(self) -> dict[str, Any]:
        """What the attempt's catalog row says of it."""
        continued = self.continued
        return {
            "restored_snapshot": self.restored.id if self.restored else None,
            "restored_step": continued.step if continued else None,
        }


def prepare(
    facts: AttemptFacts,
    source: str,
    overlays: Sequence[str],
    restore: Restore,
    inherited: Parent | None,
) -> Prepared:
    """Lay the attempt's copy out; what it restored. NothingIntactError when every snapshot
    it could continue from is damaged."""
    return _Preparation(facts, source, overlays, restore, inherited).run()


class _Preparation:
    def __init__(
        self,
        facts: AttemptFacts,
        source: str,
        overlays: Sequence[str],
        restore: Restore,
        inherited: Parent | None,
    ) -> None:
        self.facts = facts
        self.ctx, self.stage, self.ws = facts.ctx, facts.stage, facts.ws
        self.source = source  # the run's source snapshot id for this stage
        self.overlays = tuple(overlays)  # outputs of earlier stages
        self.restore = restore
        # The run's parent, when this stage continues it: restored while the stage has no
        # restorable snapshot of its own (nodus.runner.upkeep.lineage).
        self.inherited = inherited

    def run(self) -> Prepared:
        restored = self._restore()
        self.ws.make_private_folders()
        prepared = Prepared(restored, restored is not None and self._warm(restored))
        self._write_integration(prepared)
        if restored is not None and self._from_parent(restored) and self.inherited is not None:
            details = {**self.inherited.to_dict(), "warm_start": prepared.warm_start}
            self.facts.context.event("parent_restored", details)
        return prepared

    def _restore(self) -> Manifest | None:
        """The copy laid out again: source, earlier outputs, the newest intact candidate."""
        candidates = self._candidates()
        # What the last attempt left may serve the restore without a copy, once verified.
        previous = self.ws.set_aside_copy() if candidates else None
        damaged: list[tuple[Manifest, str]] = []
        for manifest in candidates:
            self._lay_source()
            try:
                self.ctx.store.restore(
                    manifest.id,
                    self.ws.copy,
                    kinds=self._kinds(manifest),
                    overlay=True,
                    reuse=previous,
                    link=self._linkable(manifest),
                )
            except (StoreError, OSError) as error:
                # A damaged snapshot is passed over, never half-applied: rebuild and try older.
                damaged.append((manifest, str(error)))
                self.facts.context.event(
                    "snapshot_damaged",
                    {"snapshot": manifest.id, "step": manifest.step, "error": str(error)},
                )
                continue
            return manifest
        if damaged:  # there was state to continue from, and none of it is intact
            raise NothingIntactError(self._nothing_intact(damaged))
        self._lay_source()
        return None

    def _write_integration(self, prepared: Prepared) -> None:
        """The integration's settings in the copy, and the commit it continues from."""
        restored, continued = prepared.restored, prepared.continued
        from_parent = restored is not None and self._from_parent(restored)
        step = continued.step if continued else None
        write_integration(
            self.ws,
            self.stage,
            self.ctx.run_id,
            self.facts.number,
            step,
            self.ctx.home,
            qualifying=self.ctx.qualifying,
            parent_mode=self.inherited.mode if from_parent and self.inherited else None,
            warm_start_step=restored.step if restored and prepared.warm_start else None,
            node=self.facts.role.node(self.stage),
        )
        if step is not None and continued is not None:
            commit = protocol.CommitRecord(step=step, snapshot=continued.id)
            write_json_atomic(self.ws.control.committed, commit.to_dict(), durable=False)

    def _nothing_intact(self, damaged: list[tuple[Manifest, str]]) -> str:
        """Why the attempt fails rather than start from the source: every snapshot, its damage."""
        each = "; ".join(
            f"{manifest.id} (step {manifest.step}): {error}" for manifest, error in damaged
        )
        return (
            f"no snapshot of stage {self.stage.name!r} could be restored, so it fails rather "
            f"than start again from the beginning: {each}"
        )

    def _candidates(self) -> list[Manifest]:
        """Restorable checkpoints to try, newest first
        (:func:`~nodus.runner.recovery.decisions.restore_candidates`)."""
        restore, continues = self.restore, self.inherited is not None
        if not (restore.newest or restore.step is not None or continues):
            return []  # nothing to restore: the store is not asked
        manifests = self.ctx.store.list(run=self.ctx.run_id, stage=self.stage.name)
        events: list[dict[str, Any]] = []
        if restore.step is None:  # suspects are passed over, unless a step was asked by hand
            events = self.ctx.catalog.events(self.ctx.run_id, types=(suspects.EVENT,))
        chosen = restore_candidates(restore, manifests, events, self.stage.name, continues)
        if not chosen.parent or self.inherited is None:
            return list(chosen.own)
        try:
            return [self.ctx.store.get(self.inherited.snapshot)]
        except NotFoundError:
            return []  # the runner fails the stage before the attempt (Runner._parent_gone)

    def _from_parent(self, manifest: Manifest) -> bool:
        return self.inherited is not None and manifest.id == self.inherited.snapshot

    def _warm(self, manifest: Manifest) -> bool:
        """The parent's snapshot restored as weights only: a warm start at step 0."""
        parent = self.inherited
        return (
            parent is not None
            and manifest.id == parent.snapshot
            and parent.mode == protocol.MODE_WEIGHTS
        )

    def _kinds(self, manifest: Manifest) -> list[str] | None:
        """What to restore: everything, or for a warm start everything but training state."""
        if self._warm(manifest):
            return [kind for kind in manifest.kinds if kind != "state"]
        return None

    def _linkable(self, manifest: Manifest) -> tuple[str, ...]:
        """Folders a restore may lay out as links to their blobs: an integration's checkpoint,
        which it never writes into (the directory contract allows writing in place)."""
        if self.stage.integration is None or manifest.step is None:
            return ()
        return (f"{protocol.STATE_DIR}/{protocol.checkpoint_folder(manifest.step)}",)

    def _lay_source(self) -> None:
        """The copy with the run's source, the earlier stages' outputs laid over it: the last
        attempt's files that are still as laid out kept, the rest written (``reuse_copy``)."""
        layers = [self.ctx.store.get(s) for s in (self.source, *self.overlays)]
        if not self.ws.reuse_copy(self.ctx.store.storage, layers):
            self.ws.reset_copy()
            self.ctx.store.restore(self.source, self.ws.copy)
            for snapshot in self.overlays:
                self.ctx.store.restore(snapshot, self.ws.copy, overlay=True)
        self.ws.note_copy(layers)
