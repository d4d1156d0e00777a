"""The recovery decisions, as pure functions over plain data.

After each attempt the engine asks :func:`decide` what follows how it ended:

    succeeded      NEXT_STAGE
    lost           RECOVER from the newest snapshot (a checkpointed stage) or the source, while
                   ``resume_on_interruption`` holds and ``max_recoveries`` is not used up;
                   else STOP (preempted: resumable by hand; failed: recoveries used up)
    failed         STOP, unless the program failed after restoring one of the stage's own
                   snapshots and committed nothing: that snapshot is suspect, and the stage
                   RECOVERs from an older one within the bounds of :mod:`.suspects`
    preempted, paused, cancelled
                   STOP (the phase of each: :mod:`nodus.runner.catalog.phases`)

Before an attempt lays its copy out, :func:`restore_candidates` says which snapshots it tries,
newest first; :func:`first_restore` says what the first attempt of a drive restores.

Nothing here reads the catalog, the store or a process: the engine and the attempt gather the
facts and carry out what the decision says (Ray Train's ``FailurePolicy.make_decision`` is the
model), so every branch is tested in milliseconds (``tests/runner/test_recovery_decisions.py``).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from nodus.runner.catalog.phases import AttemptOutcome
from nodus.runner.recovery import suspects
from nodus.schemas.resolved import ResolvedStage
from nodus.store import restorable

if TYPE_CHECKING:
    from nodus.store.manifest import Manifest

__all__ = [
    "Action",
    "Candidates",
    "Decision",
    "Ended",
    "Restore",
    "Restored",
    "checkpointed",
    "decide",
    "first_restore",
    "judges_restore",
    "restore_candidates",
]


class Action(enum.Enum):
    """What follows an attempt."""

    NEXT_STAGE = "next_stage"  # the stage succeeded
    RECOVER = "recover"  # a new attempt, restoring ``Decision.restore``: one recovery more
    STOP = "stop"  # the run stops, in the phase of ``Decision.kind``


@dataclass(frozen=True)
class Restore:
    """What to lay over the source: the newest checkpoint, one at a step, or nothing."""

    newest: bool = False
    step: int | None = None
    by_hand: bool = False  # ``nodus runs resume``: continue from the newest snapshot
    older_than: str | None = None  # newest only among those older than this suspect snapshot


class Ended(Protocol):
    """How an attempt ended, as a decision reads it
    (:class:`nodus.runner.attempt.outcome.Outcome`)."""

    @property
    def kind(self) -> AttemptOutcome: ...
    @property
    def detail(self) -> str: ...
    @property
    def program_failed(self) -> bool: ...


@dataclass(frozen=True)
class Restored:
    """What a decision reads of the snapshot an attempt whose program failed had restored."""

    snapshot: str | None = None  # its id; None: the attempt started from the source
    step: int | None = None
    from_parent: bool = False  # the run's parent's: another run's snapshot, not ours to judge
    committed: bool = False  # the attempt committed a snapshot of its own: it continued from it
    error: str = ""  # the last line its program wrote
    row: Sequence[dict[str, Any]] = ()  # the run's events of suspects.ROW_EVENTS so far
    older: Sequence[Manifest] = ()  # restorable snapshots below it, suspects passed over


@dataclass(frozen=True)
class Decision:
    """What follows an attempt, and why in words (the phase message, or how the run ends)."""

    action: Action
    detail: str
    kind: AttemptOutcome | None = None  # STOP: how the stage ends (its phase: kind.stops_run)
    restore: Restore | None = None  # RECOVER: what the next attempt restores
    suspect: dict[str, Any] | None = None  # a ``snapshot_suspect`` event to record first


@dataclass(frozen=True)
class Candidates:
    """The snapshots an attempt tries to restore, newest first."""

    own: tuple[Manifest, ...] = ()
    # The stage continues the run's parent and has nothing of its own: its snapshot is tried.
    parent: bool = False


def checkpointed(stage: ResolvedStage) -> bool:
    return stage.continuity.mode == "checkpointed"


def first_restore(stage: ResolvedStage, asked: Restore | None, attempted: bool) -> Restore:
    """What the first attempt of a drive restores: ``asked`` (a resume by hand), or where the
    stage stood (``attempted``: it has earlier attempts)."""
    if asked is None:
        return Restore(newest=attempted and checkpointed(stage))
    if asked.by_hand and asked.step is None:
        return Restore(newest=checkpointed(stage), by_hand=True)
    return asked


def judges_restore(stage: ResolvedStage, ended: Ended) -> bool:
    """Whether :func:`decide` judges the snapshot the attempt restored (it needs a
    :class:`Restored` then): the program itself failed, in a checkpointed stage."""
    return ended.kind == AttemptOutcome.FAILED and ended.program_failed and checkpointed(stage)


def decide(
    stage: ResolvedStage,
    ended: Ended,
    recoveries: int,
    run_id: str,
    restored: Restored | None = None,
) -> Decision:
    """What follows an attempt of ``stage`` that ``ended`` so, after ``recoveries`` automatic
    recoveries; ``restored`` when :func:`judges_restore` says so."""
    if ended.kind == AttemptOutcome.SUCCEEDED:
        return Decision(Action.NEXT_STAGE, ended.detail)
    if ended.kind == AttemptOutcome.LOST:
        return _after_interruption(stage, ended, recoveries, run_id)
    if restored is None or not judges_restore(stage, ended):
        return _stop(ended.kind, ended.detail)
    return _step_back(stage, ended, recoveries, restored)


def _after_interruption(
    stage: ResolvedStage, ended: Ended, recoveries: int, run_id: str
) -> Decision:
    """Continuity decides: recover with a new attempt, or stop."""
    if not stage.continuity.resume_on_interruption:
        return _stop(
            AttemptOutcome.PREEMPTED,
            f"{ended.detail}; resume_on_interruption is false: resume it with "
            f"`nodus runs resume {run_id}`",
        )
    limit = stage.execution.max_recoveries
    if recoveries >= limit:
        return _stop(
            AttemptOutcome.FAILED,
            f"stage {stage.name!r} was interrupted {recoveries + 1} times ({ended.detail}); "
            f"max_recoveries = {limit} automatic recoveries are used up",
        )
    return Decision(Action.RECOVER, ended.detail, restore=Restore(newest=checkpointed(stage)))


def _step_back(stage: ResolvedStage, ended: Ended, recoveries: int, restored: Restored) -> Decision:
    """After a restored attempt whose program failed before it committed anything: its
    snapshot is suspect, and an older one is restored while :func:`suspects.decide` allows."""
    if restored.snapshot is None or restored.from_parent or restored.committed:
        # a fresh start, another run's snapshot, or it continued from it and failed later
        return _stop(ended.kind, ended.detail)
    suspect = {
        "snapshot": restored.snapshot,
        "step": restored.step,
        "error": restored.error,
        "exit": ended.detail,
    }
    verdict = suspects.decide(
        restored.row,
        stage.name,
        suspect,
        restored.older,
        recoveries,
        stage.execution.max_recoveries,
    )
    if not verdict.go_on:
        detail = f"{ended.detail}; {verdict.why}"
        return Decision(Action.STOP, detail, kind=AttemptOutcome.FAILED, suspect=suspect)
    restore = Restore(newest=True, older_than=restored.snapshot)
    return Decision(Action.RECOVER, verdict.why, restore=restore, suspect=suspect)


def _stop(kind: AttemptOutcome, detail: str) -> Decision:
    assert kind.stops_run is not None, f"an attempt that {kind} does not stop the run"
    return Decision(Action.STOP, detail, kind=kind)


def restore_candidates(
    restore: Restore,
    manifests: Sequence[Manifest],
    events: Sequence[dict[str, Any]],
    stage: str,
    continues_parent: bool,
) -> Candidates:
    """Which of the stage's ``manifests`` an attempt tries to restore, newest first (only the
    asked step with ``restore.step``, even a suspect one: that is a resume by hand), given the
    run's ``snapshot_suspect`` ``events``. A stage that continues the run's parent restores
    the parent's snapshot until it has a restorable snapshot of its own
    (:mod:`nodus.runner.upkeep.lineage`)."""
    if restore.step is not None:
        return Candidates(tuple(restorable.at_step(manifests, restore.step)))
    if not (restore.newest or continues_parent):
        return Candidates()
    own = suspects.usable(manifests, events, stage, restore.older_than)
    if not continues_parent or own:
        return Candidates(tuple(own) if restore.newest else ())
    return Candidates(parent=True)
