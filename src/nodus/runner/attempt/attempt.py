"""One attempt: one process lifetime of one stage, in three parts.

    prepare     the working copy laid out again, the snapshot it continues from restored
                (:mod:`nodus.runner.attempt.prepare`)
    launch      the program started with its environment and command as accepted
                (:mod:`nodus.runner.attempt.launch`)
    supervise   the poll loop until the attempt ends, and how it ended
                (:mod:`nodus.runner.attempt.supervise`)

Around them the attempt sweeps what an earlier one left, runs retention and uploads beside the
capture loop, and records its end. What depends on where it runs is its role
(:mod:`nodus.runner.attempt.role`); what it leaves for the next attempt of the drive goes into
the drive's state (:class:`~nodus.runner.attempt.context.DriveState`).
"""

from __future__ import annotations

import socket
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from nodus.errors import StaleAttemptError
from nodus.runner.attempt.context import AttemptFacts, AttemptPlan, DriveState, RunContext
from nodus.runner.attempt.launch import launch
from nodus.runner.attempt.outcome import Outcome
from nodus.runner.attempt.prepare import NothingIntactError, Prepared, prepare
from nodus.runner.attempt.role import LOCAL_ROLE, AttemptRole
from nodus.runner.attempt.supervise import Supervision, capture_loop
from nodus.runner.catalog.phases import AttemptOutcome, Phase
from nodus.runner.catalog.unrecorded import unrecorded_note
from nodus.runner.processes.containment import record_survivors
from nodus.runner.processes.stage_process import (
    CannotStartError,
    StageProcess,
    Supervisor,
    spawn_supervisor,
)
from nodus.runner.recovery.decisions import Restore
from nodus.runner.remote.uploads import Uploads
from nodus.runner.upkeep.rotation import Rotation
from nodus.runner.workspace.launch import device_count
from nodus.runner.workspace.layout import MissingSecretError, Workspace

if TYPE_CHECKING:
    from nodus.store.manifest import Manifest

__all__ = ["Attempt", "NothingIntactError", "Restore", "record_end"]


class Attempt:
    """One process lifetime of a stage; its number (allocated at once) is its fencing token."""

    def __init__(
        self,
        ctx: RunContext,
        state: DriveState,
        plan: AttemptPlan,
        role: AttemptRole = LOCAL_ROLE,
    ) -> None:
        self.ctx = ctx
        self.state = state  # the drive's: what the last attempt left, the preemption notice
        stage = self.stage = plan.stage
        self.source = plan.source  # the run's source snapshot id for this stage
        self.restore = plan.restore
        self.overlays = plan.overlays  # outputs of earlier stages
        self.recovering = plan.recovering  # the run stays RECOVERING until it runs again
        # The run's parent, when this stage continues it (nodus.runner.upkeep.lineage).
        self.inherited = plan.inherited
        # The device count is recorded so a resume can insist on the same allocation.
        self.number = ctx.catalog.start_attempt(
            ctx.run_id, stage.name, host=socket.gethostname(), devices=device_count()
        )
        ws = Workspace.of(ctx.home, ctx.run_id, stage.name, self.number)
        # What its parts and workers (capture, rotation, uploads) share.
        self.facts = AttemptFacts(ctx, ctx.attempt_context(stage, self.number), ws, role)
        self.process: StageProcess | None = None

    def run(self) -> Outcome:
        # Nothing of an earlier attempt runs, nor writes into the copy this one lays out again.
        # After an attempt of this runner whose supervisor reported its tree gone, nothing
        # can (a subreaper outlives every process below it), and a recovery skips the scan.
        if not self.state.tree_gone:
            self.facts.role.sweep(self.ctx.catalog, self.ctx.run_id)
        self.state.tree_gone = False
        # The supervisor's interpreter starts while the phase is written and the copy laid out
        # (after the sweep, which would take it for a survivor: it carries this attempt's
        # token); one that could not start is tried again at the launch, which then fails as
        # it should.
        supervisor = self._supervisor()
        try:
            if not self.recovering:
                self.ctx.catalog.lifecycle.move(
                    self.ctx.run_id, Phase.PREPARING, stage=self.stage.name
                )
            return self._prepare_and_run(supervisor)
        finally:
            if supervisor is not None:
                supervisor.discard()  # never handed a start (the program did not start)

    def _supervisor(self) -> Supervisor | None:
        try:
            return spawn_supervisor(self.facts.token)
        except CannotStartError:
            return None

    def _prepare_and_run(self, supervisor: Supervisor | None) -> Outcome:
        try:
            prepared = prepare(self.facts, self.source, self.overlays, self.restore, self.inherited)
        except BaseException as error:
            self.facts.ws.discard_previous()  # what the restore did not take
            if isinstance(error, NothingIntactError):
                return self._end(Outcome(AttemptOutcome.FAILED, str(error)))
            raise
        rotation = self.facts.role.rotation(self.facts.context)
        uploads = self._uploads(rotation)
        unrecorded: list[Manifest] = []
        outcome = None
        try:
            outcome = self._launch_and_supervise(prepared, rotation, uploads, supervisor)
        finally:
            if uploads is not None:  # its remote commits still ask rotation for passes
                unrecorded = uploads.finish()
            # While the attempt lasts, the run is unfinished: holds stay. A recovery may
            # follow at once: it need not wait for an idle worker to go.
            interrupted = outcome is not None and outcome.kind == AttemptOutcome.LOST
            if rotation is not None:
                rotation.close(hurry=interrupted)
        return self._end(_with_unrecorded(outcome, unrecorded))

    def _uploads(self, rotation: Rotation | None) -> Uploads | None:
        """With a remote store: captures go to staging first and upload in the background."""
        if self.ctx.store.storage.is_local or not self.facts.role.captures:
            return None
        return Uploads(self.facts.context, home=self.ctx.home, ws=self.facts.ws, rotation=rotation)

    def _launch_and_supervise(
        self,
        prepared: Prepared,
        rotation: Rotation | None,
        uploads: Uploads | None,
        supervisor: Supervisor | None,
    ) -> Outcome:
        """Start the program (under a supervisor of its own), supervise it and capture; how
        it ended."""
        capture = capture_loop(self.facts, prepared, rotation, uploads)
        # The row and what the restore did not take of the last copy wait until the program is
        # on its way: its start waits on neither (docs/benchmarks.md, "Recovery").
        row = {"log_path": self.facts.ws.log_path, **prepared.row()}
        try:
            self.process = process = launch(self.facts, prepared, supervisor)
        except (CannotStartError, MissingSecretError) as error:
            self.ctx.catalog.update_attempt(self.ctx.run_id, self.stage.name, self.number, **row)
            return Outcome(AttemptOutcome.FAILED, str(error))
        finally:
            self.facts.ws.discard_previous()
        self.ctx.catalog.update_attempt(
            self.ctx.run_id, self.stage.name, self.number, pid=process.pid, **row
        )
        self.ctx.catalog.lifecycle.move(self.ctx.run_id, Phase.RUNNING, stage=self.stage.name)
        try:
            outcome = Supervision(self.facts, self.state, process, capture, uploads).run()
        except StaleAttemptError as error:
            process.kill()
            outcome = Outcome(AttemptOutcome.FAILED, str(error))
        except BaseException:
            process.kill()  # whatever went wrong here, the program must not outlive it
            raise
        process.finish_output()
        return outcome

    def _end(self, outcome: Outcome) -> Outcome:
        if self.process is not None:  # what a lost supervisor left behind, killed by token
            record_survivors(self.ctx.catalog, self.ctx.run_id, self.process.survivors)
            self.state.tree_gone = self.process.tree_gone
        return record_end(self.ctx, self.stage.name, self.number, outcome)


def _with_unrecorded(outcome: Outcome | None, unrecorded: list[Any]) -> Outcome:
    """An attempt that left saves unrecorded (the manifests its uploads never stored) says so;
    what training reached stays its kind."""
    assert outcome is not None  # an attempt that raised never gets here
    if not unrecorded:
        return outcome
    return replace(outcome, detail=f"{outcome.detail}; {unrecorded_note(unrecorded)}")


def record_end(ctx: RunContext, stage: str, number: int, outcome: Outcome) -> Outcome:
    """An attempt's end in the catalog and its ``attempt_ended`` event, wherever it ran."""
    ctx.catalog.end_attempt(ctx.run_id, stage, number, outcome.kind, outcome.detail, announce=True)
    return outcome
