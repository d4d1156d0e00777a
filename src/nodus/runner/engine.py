"""Driving a run: stages in order, attempts within a stage, and recovery between attempts.

The runner holds the run's lock for as long as it drives it. For each stage that has not yet
succeeded it starts attempts until one ends the stage:

    succeeded    → next stage (its outputs are laid over the next stage's copy)
    failed       → run FAILED, exit 1 (after a restore that failed: an older snapshot first)
    preempted    → run INTERRUPTED, exit 3 (resumable by hand)
    paused       → run PAUSED, exit 3 (``nodus runs resume``)
    cancelled    → run CANCELLED, exit 4
    lost         → continuity decides: resume_on_interruption false → INTERRUPTED (exit 3);
                   otherwise RECOVERING and a new attempt (checkpointed: newest committed
                   snapshot, restartable: the source alone), at most ``max_recoveries`` times.

The phase and exit status of each come from :mod:`nodus.runner.catalog.phases`; what follows
an attempt is decided by :func:`nodus.runner.recovery.decisions.decide`, a pure function over
what the engine gathers, and carried out here.

A runner that finds an attempt still marked running (its runner died) treats it as an
interruption of that attempt, after making sure nothing of it is left alive.

A restored attempt whose program fails before it commits anything marks the snapshot it
restored suspect, and the stage continues from the next older one, within a bound
(:mod:`nodus.runner.recovery.suspects`).

A checkpointed stage never quietly starts over: when it committed snapshots but none holds
training state any more, the run fails naming why instead of restarting from the source
(:func:`nodus.runner.recovery.continuing.start_point`, the rule ``run --key`` and ``runs resume``
say before they drive); so does an attempt that finds every snapshot it could restore damaged
(``attempt.prepare.NothingIntactError``). A stage that never committed a snapshot starts again
from the beginning, as its automatic recoveries do: nothing kept is thrown away.
"""

from __future__ import annotations

import os
import signal
import socket
from types import FrameType
from typing import IO, Any

from nodus.errors import NotFoundError, StoreError
from nodus.protocol import MODE_WEIGHTS
from nodus.runner.attempt.context import HERE, AttemptPlan, DriveState, Placement, RunContext
from nodus.runner.attempt.outcome import Outcome
from nodus.runner.backends import AttemptBackend, new_attempt
from nodus.runner.backends.base import attach_left
from nodus.runner.catalog.core import Catalog, Run
from nodus.runner.catalog.phases import AttemptOutcome, Phase
from nodus.runner.catalog.unrecorded import unrecorded, unrecorded_note
from nodus.runner.control.outside import settle_open_pause
from nodus.runner.processes.containment import kill_survivors
from nodus.runner.recovery import continuing, decisions, suspects
from nodus.runner.recovery.decisions import Action, Decision, Restore, Restored, checkpointed
from nodus.runner.upkeep.lineage import Parent, inherited_stages
from nodus.runner.workspace.launch import stored
from nodus.schemas.resolved import ResolvedStage, ResolvedWorkload
from nodus.store.manifest import step_label
from nodus.store.restorable import holds_training_state, newest_first


class Runner:
    """Drives one run to a phase where it stops; ``drive`` returns the exit status."""

    def __init__(
        self,
        *,
        home: str,
        catalog: Catalog,
        store: Any,
        run: Run,
        terminal: IO[str],
        qualifying: bool = False,
        placement: Placement = HERE,
    ) -> None:
        self.catalog = catalog
        self.run = run
        self.workload = ResolvedWorkload.from_dict(run.workload)
        self.parent = Parent.from_dict(run.parent)  # the snapshot the run started from
        # ``qualifying`` is an option of the caller (`nodus qualify`), never of a workload file.
        self.ctx = RunContext(
            home=home,
            catalog=catalog,
            store=store,
            run_id=run.id,
            terminal=terminal,
            launches=stored(run.launch),
            qualifying=qualifying,
            placement=placement,
        )
        # What changes while this drive goes on (the notice, what an attempt leaves the next).
        self.state = DriveState()

    def drive(self, restore: Restore | None = None) -> int:
        """Run every unfinished stage; ``restore`` overrides the first attempt's restore."""
        previous = self._install_notice_handlers()
        self.catalog.set_runner(self.run.id, os.getpid(), socket.gethostname())
        try:
            status = self._drive(restore)
            settle_open_pause(self.catalog, self.run.id)
            return status
        except StoreError as error:
            # The source or an earlier stage's outputs cannot be laid out: no attempt can run.
            self.catalog.lifecycle.move(self.run.id, Phase.FAILED, message=str(error))
            raise
        finally:
            self.catalog.set_runner(self.run.id, None, None)
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    def _drive(self, restore: Restore | None) -> int:
        stages = {row["name"]: row for row in self.catalog.stages(self.run.id)}
        # A run none of whose attempts ever started: no process can carry its token (an
        # attempt's row is written before its supervisor gets one), so neither the reaping of
        # lost attempts nor the first attempt's sweep reads every process's environment.
        self.state.tree_gone = not any(row["attempts"] for row in stages.values())
        overlays: list[str] = []
        for stage in self.workload.stages:
            row = stages[stage.name]
            if row["phase"] == Phase.SUCCEEDED:
                overlays += self._outputs_of(stage)
                continue
            status = self._run_stage(stage, row, restore, overlays)
            if status != 0:
                return status
            overlays += self._outputs_of(stage)
            restore = None
        # Training finished; saves a failing remote store never received are said, not hidden.
        missing = unrecorded(self.catalog, self.run.id)
        message = unrecorded_note(missing) if missing else None
        self.catalog.lifecycle.move(self.run.id, Phase.SUCCEEDED, message=message)
        self._register_model()
        return _status(Phase.SUCCEEDED)

    def _register_model(self) -> None:
        """The run's model becomes a version of its model (once; docs/lineage.md). A runner killed
        before this is caught up by `nodus gc` or adoption
        (:mod:`nodus.runner.upkeep.registration`)."""
        from nodus.runner.upkeep.registration import register_model

        register_model(self.catalog, self.ctx.store, self.run.id)

    def _run_stage(
        self,
        stage: ResolvedStage,
        row: dict[str, Any],
        restore: Restore | None,
        overlays: list[str],
    ) -> int:
        recoveries = row["recoveries"]
        first = decisions.first_restore(stage, restore, attempted=bool(row["attempts"]))
        attached = self._attach(stage, row, first, overlays)
        if attached is not None:  # a dead runner's attempt still runs: supervised again
            return self._attempts(stage, row, first, overlays, None, recoveries, attached)
        lost = self._reap_lost_attempts(stage, row)
        # Not a resume by hand: the attempts its dead runner left count as lost.
        decision = None
        if lost and restore is None:
            died = Outcome(AttemptOutcome.LOST, "its runner died")
            decision = decisions.decide(stage, died, recoveries, self.run.id)
        return self._attempts(stage, row, first, overlays, decision, recoveries)

    def _attach(
        self, stage: ResolvedStage, row: dict[str, Any], restore: Restore, overlays: list[str]
    ) -> AttemptBackend | None:
        """The attempt a dead runner left running where its backend runs it on its own (a
        Slurm job), to supervise again rather than start a second one; None if there is none."""
        running = [a for a in row["attempts"] if a["outcome"] is None]
        if not running:
            return None
        plan = AttemptPlan.of(stage, row["source_snapshot"], restore, overlays, recovering=True)
        return attach_left(self.ctx, self.state, plan, running[-1])

    def _attempts(
        self,
        stage: ResolvedStage,
        row: dict[str, Any],
        restore: Restore,
        overlays: list[str],
        decision: Decision | None,
        recoveries: int,
        attached: AttemptBackend | None = None,
    ) -> int:
        """Attempts of ``stage`` until one ends it, each followed by what
        :func:`~nodus.runner.recovery.decisions.decide` says: recovered while continuity
        allows, stepped back past a snapshot the program could not continue from (suspects).
        ``attached``: the first is an attempt a dead runner left running, supervised again."""
        recovering = decision is not None
        while True:
            if decision is not None:
                if decision.action is not Action.RECOVER:
                    return self._carry_out(stage, decision)
                self._recover(stage, decision, recoveries)
                recoveries += 1
                assert decision.restore is not None
                restore, recovering = decision.restore, True
            attempt = attached or self._new_attempt(stage, row, restore, overlays, recovering)
            attached = None
            if isinstance(attempt, str):
                return self._stop(stage, AttemptOutcome.FAILED, attempt)
            outcome = attempt.run()
            self._discard_older_attempts(stage, attempt.number)
            restored = None
            if decisions.judges_restore(stage, outcome):
                restored = self._restored(stage, attempt.number)
            decision = decisions.decide(stage, outcome, recoveries, self.run.id, restored)
            if decision.suspect is not None:
                self.ctx.event(suspects.EVENT, decision.suspect, stage.name, attempt.number)

    def _new_attempt(
        self,
        stage: ResolvedStage,
        row: dict[str, Any],
        restore: Restore,
        overlays: list[str],
        recovering: bool,
    ) -> AttemptBackend | str:
        """The stage's next attempt on its backend, or why it must not start."""
        lost_state = self._lost_training_state(stage, restore) or self._parent_gone(stage)
        if lost_state:
            return lost_state
        plan = AttemptPlan.of(
            stage,
            row["source_snapshot"],
            restore,
            overlays,
            recovering=recovering,
            inherited=self._inherited(stage),
        )
        return new_attempt(self.ctx, self.state, plan)

    def _carry_out(self, stage: ResolvedStage, decision: Decision) -> int:
        """The end of the stage's attempts: the next stage, or the run stops; its status."""
        if decision.action is Action.NEXT_STAGE:
            self.catalog.set_stage(self.run.id, stage.name, phase=Phase.SUCCEEDED)
            return _status(Phase.SUCCEEDED)
        assert decision.kind is not None
        return self._stop(stage, decision.kind, decision.detail)

    def _recover(self, stage: ResolvedStage, decision: Decision, recoveries: int) -> None:
        """The run records a recovery before its next attempt starts."""
        self.catalog.set_stage(self.run.id, stage.name, recoveries=recoveries + 1)
        self.catalog.lifecycle.move(
            self.run.id, Phase.RECOVERING, message=decision.detail, stage=stage.name
        )

    def _restored(self, stage: ResolvedStage, number: int) -> Restored:
        """What the decision reads of the snapshot attempt ``number`` restored before its
        program failed (:mod:`nodus.runner.recovery.suspects`)."""
        attempts = self.catalog.attempts(self.run.id, stage.name)
        attempt = next(a for a in attempts if a["number"] == number)
        snapshot, step = attempt["restored_snapshot"], attempt["restored_step"]
        parent = self._inherited(stage)
        from_parent = parent is not None and snapshot == parent.snapshot
        if snapshot is None or from_parent:
            return Restored(snapshot, step, from_parent=from_parent)  # nothing of ours to judge
        manifests = self.ctx.store.list(run=self.run.id, stage=stage.name)
        events = self.catalog.events(self.run.id, types=suspects.ROW_EVENTS)
        return Restored(
            snapshot,
            step,
            committed=any(m.attempt == number for m in manifests),
            error=suspects.last_error_line(attempt["log_path"]),
            row=events,
            older=suspects.usable(manifests, events, stage.name, older_than=snapshot),
        )

    def _reap_lost_attempts(self, stage: ResolvedStage, row: dict[str, Any]) -> bool:
        """Attempts still marked running belong to a dead runner: kill leftovers, end them."""
        # before anything is recorded or restarted
        if not self.state.tree_gone:
            kill_survivors(self.catalog, self.run.id)
        lost = [a for a in row["attempts"] if a["outcome"] is None]
        for attempt in lost:
            self.catalog.end_attempt(
                self.run.id,
                stage.name,
                attempt["number"],
                AttemptOutcome.LOST,
                "its runner died",
            )
            self.ctx.event("runner_lost", {"attempt": attempt["number"]}, stage.name)
        return bool(lost)

    def _stop(self, stage: ResolvedStage, kind: AttemptOutcome, detail: str) -> int:
        """Stop the run in the phase an attempt that ended as ``kind`` calls for; its exit
        status."""
        phase = kind.stops_run
        assert phase is not None, f"an attempt that {kind} does not stop the run"
        self.catalog.lifecycle.move(self.run.id, phase, message=detail, stage=stage.name)
        return _status(phase)

    def _lost_training_state(self, stage: ResolvedStage, restore: Restore) -> str | None:
        """Why a checkpointed stage must not start again from its source, or None if it may:
        it committed snapshots but none holds training state any more
        (:func:`~nodus.runner.recovery.continuing.start_point`, which ``run --key`` and ``runs
        resume`` say before they drive)."""
        if not (checkpointed(stage) and restore.newest):
            return None
        start, _, committed = where_it_starts(
            self.ctx.store, self.run.id, stage, self._inherited(stage)
        )
        if start is not continuing.Start.LOST:
            return None
        return (
            f"stage {stage.name!r} of {self.run.id} committed {committed} snapshot(s) but "
            "no committed snapshot holds its training state; it fails rather than start again "
            "from the beginning (start a new run with `nodus run`)"
        )

    def _inherited(self, stage: ResolvedStage) -> Parent | None:
        """The run's parent when ``stage`` is the one that continues it."""
        return self.parent if self.parent and self.parent.stage == stage.name else None

    def _parent_gone(self, stage: ResolvedStage) -> str | None:
        """Why a stage that continues the parent cannot start, or None if it can.

        The branch hold keeps the parent's snapshot while this run is unfinished; only a
        snapshot deleted by hand (or a damaged store) lands here, and the stage then fails
        rather than start from nothing.
        """
        parent = self._inherited(stage)
        if parent is None:
            return None
        own = self.ctx.store.list(run=self.run.id, stage=stage.name)
        if newest_first(own):
            return None
        try:
            manifest = self.ctx.store.get(parent.snapshot)
        except NotFoundError:
            manifest = None
        if manifest is not None and (parent.mode == MODE_WEIGHTS or holds_training_state(manifest)):
            return None
        return (
            f"stage {stage.name!r} of {self.run.id} starts from {parent.snapshot} (step "
            f"{parent.step} of {parent.run}, --from {parent.mode}), which no longer holds what "
            "it needs; it fails rather than start from the beginning"
        )

    def _outputs_of(self, stage: ResolvedStage) -> list[str]:
        # The last stage's outputs are laid over nothing: the store (perhaps a remote one
        # that just became unreachable) is not asked.
        if not stage.outputs or stage is self.workload.stages[-1]:
            return []
        # A stage taken as done from the parent has the parent's outputs.
        owner = self.run.id
        if self.parent and stage.name in inherited_stages(self.run.workload, self.parent):
            owner = self.parent.run
        manifests = self.ctx.store.list(run=owner, stage=stage.name, role="outputs")
        return [manifests[-1].id] if manifests else []

    def _discard_older_attempts(self, stage: ResolvedStage, keep_from: int) -> None:
        """Only the newest attempt's temp folder stays; logs and the stage's caches always do.

        The working copy is the stage's: it keeps what the newest attempt left, for inspection,
        until the next attempt lays it out again.
        """
        from nodus.runner.workspace.layout import Workspace

        for number in range(1, keep_from):
            Workspace.of(self.ctx.home, self.run.id, stage.name, number).discard_tmp()

    def _install_notice_handlers(self) -> dict[int, Any]:
        """SIGTERM/SIGINT to the runner are a preemption notice, handled by the poll loop."""

        def notice(signum: int, _frame: FrameType | None) -> None:
            self.state.notice = signum

        return {signum: signal.signal(signum, notice) for signum in (signal.SIGTERM, signal.SIGINT)}


def where_it_starts(
    store: Any, run_id: str, stage: ResolvedStage, parent: Parent | None
) -> tuple[continuing.Start, str | None, int]:
    """Where ``stage`` of ``run_id`` continues (:func:`continuing.start_point` over what it
    committed), its newest restorable snapshot's step as said (``step 40``, ``capture 3``),
    and how many snapshots holding files it committed. ``parent``: the run's parent when this
    stage continues it."""
    # An empty capture (the program exited before writing anything) is no progress.
    manifests = [m for m in store.list(run=run_id, stage=stage.name) if m.files]
    newest = newest_first(manifests)
    start = continuing.start_point(
        checkpointed=checkpointed(stage),
        committed=len(manifests),
        restorable=len(newest),
        continues_parent=parent is not None,
    )
    at = step_label(newest[0].step, newest[0].counted) if newest else None
    return start, at, len(manifests)


def _status(phase: Phase) -> int:
    """The exit status of a phase the run's drive ends in (each of them has one)."""
    assert phase.exit_status is not None, f"a run does not stop {phase}"
    return phase.exit_status
