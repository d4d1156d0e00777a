"""Supervising an attempt's running program: the poll loop, and how the attempt ended.

The poll loop is the runner's only loop: every ``POLL_S`` it ingests the program's events and
save records, captures settled checkpoint folders, looks for a preemption notice (a signal to the
runner) and for control requests other nodus processes wrote into the catalog, and checks
whether the program ended. Nothing else ever blocks it except a capture.

How an attempt ends (:class:`~nodus.runner.catalog.phases.AttemptOutcome`; the program's end is
told by :func:`nodus.runner.attempt.outcome.classify`):

    succeeded    exit 0 (outputs captured)
    failed       non-zero exit, or the command could not start
    lost         killed by a signal nodus did not send; or a process of its tree was, and the
                 program (a launcher: ``sh -c``, ``torchrun``) then exited non-zero
    preempted    the runner got SIGTERM/SIGINT: the program was stopped and captured
    lost         (hung) no progress for ``hang_timeout``: the tree ended, then recovered like any
                 interruption (:mod:`nodus.runner.attempt.watch`); succeeded when the
                 integration had reported training ended and its final snapshot was committed
    paused       ``nodus runs pause`` (carried out by :mod:`nodus.runner.attempt.pausing`)
    cancelled    ``nodus runs cancel``, which wins over a pending pause
"""

from __future__ import annotations

import signal
import time
from typing import Any, NoReturn

from nodus import protocol
from nodus._atomic import write_json_atomic
from nodus.errors import CatalogError, StoreError, redacted
from nodus.runner.attempt.context import AttemptFacts, DriveState
from nodus.runner.attempt.outcome import Exit, Outcome, classify
from nodus.runner.attempt.prepare import Prepared
from nodus.runner.attempt.role import CaptureLoop, NoCapture
from nodus.runner.attempt.watch import Watch
from nodus.runner.capture.capturer import Capturer
from nodus.runner.capture.disk_guard import DiskGuard, staging_disk, stored_bytes
from nodus.runner.catalog.phases import AttemptOutcome
from nodus.runner.processes.messages import Loss
from nodus.runner.processes.stage_process import StageProcess, signal_name
from nodus.runner.recovery.hangs import Hang
from nodus.runner.remote.uploads import Uploads
from nodus.runner.upkeep.rotation import Rotation
from nodus.schemas import defaults

__all__ = ["Supervision", "capture_loop"]


def capture_loop(
    facts: AttemptFacts, prepared: Prepared, rotation: Rotation | None, uploads: Uploads | None
) -> CaptureLoop:
    """The attempt's capture loop: a :class:`Capturer` that continues what was restored, or
    nothing where its role captures nothing."""
    if not facts.role.captures:
        return NoCapture()
    restored, continued = prepared.restored, prepared.continued
    return Capturer(
        facts.context,
        facts.ws,
        restored_step=continued.step if continued else None,
        restored_snapshot=continued.id if continued else None,
        restored=continued,
        inherited_step=restored.step if restored and prepared.warm_start else None,
        rotation=rotation,
        disk_guard=_disk_guard(facts, prepared),
        uploads=uploads,
    )


def _disk_guard(facts: AttemptFacts, prepared: Prepared) -> DiskGuard:
    """The attempt's disk guard, checked before saves begin with the restored size."""
    ctx, ws = facts.ctx, facts.ws
    guard = DiskGuard(staging_disk(ctx.store, ctx.home), ws.control, facts.context.event)
    restored = prepared.restored
    if restored is not None:  # restored into the copy: a sparse file counts what it holds
        files = [(e.path, e.size, 0) for e in restored.held_files() if not e.is_link]
        guard.check(stored_bytes(ws.copy, files))
    return guard


class Supervision:
    """The running program of one attempt, from its start to how the attempt ended."""

    def __init__(
        self,
        facts: AttemptFacts,
        state: DriveState,
        process: StageProcess,
        capture: CaptureLoop,
        uploads: Uploads | None,
    ) -> None:
        self.facts = facts
        self.ctx, self.context, self.ws = facts.ctx, facts.context, facts.ws
        self.stage, self.number = facts.stage, facts.number
        self.state = state  # the drive's: its preemption notice, the progress it saw
        self.process = process
        self.capture = capture
        self.uploads = uploads  # a remote store: the background uploads
        self._save_request = 0

    def run(self) -> Outcome:
        """Poll until the attempt ends; how it ended."""
        watch = Watch(
            self.facts.role.hang_timeout(self.stage),
            self.ws,
            list(self.stage.continuity.checkpoint_paths),
            self.capture,
            self.process,
            self.state.longest_progress_ms.get(self.stage.name),
        )
        try:
            return self._poll(watch)
        finally:
            if watch.longest_ms is not None:  # what a recovered attempt's timeout starts from
                self.state.longest_progress_ms[self.stage.name] = watch.longest_ms

    def _poll(self, watch: Watch) -> Outcome:
        while True:
            if self.state.notice is not None:
                return self._preempt()
            if self.take_cancel():
                self.process.stop(signal.SIGTERM, self.stage.execution.grace_period)
                return Outcome(AttemptOutcome.CANCELLED, "cancelled by `nodus runs cancel`")
            paused = self._take_pause()
            if paused is not None:
                return paused
            lost = self.ctx.catalog.lost()
            if lost is not None:
                self._catalog_lost(lost)
            self.capture.tick()
            status = self.process.poll()
            if status is None:
                status = self.process.wait(defaults.POLL_S)  # returns when the program ends
            if status is not None:  # straight on: the next attempt may be waiting for this
                if status != 0 and self.state.notice is not None:
                    return self._stopped_with_the_notice(status)
                died_at = self.died_at(status)
                self.process.finish_output()
                self.capture.final_capture(died_at)
                return self.classify(status)
            hang = watch.look()
            if hang is not None:
                return self._hung(watch, hang)

    def _catalog_lost(self, lost: str) -> NoReturn:
        """The run catalog was deleted or replaced under the runner: nothing it records would
        be read again, and no other nodus command could find the run. The program is stopped
        as a cancel stops it, its final state captured into the store (whose record of the run
        stays current), and the runner stops, saying what happened and what continues it."""
        self._say(f"{lost}: stopping the program")
        status = self.process.stop(signal.SIGTERM, self.stage.execution.grace_period)
        self.process.finish_output()
        self.capture.final_capture(self.died_at(status))
        store = f" --store {redacted(self.ctx.store.url)}"
        raise CatalogError(
            f"{lost} while run {self.ctx.run_id} trained; its program was stopped and its last "
            f"state captured into its store, which keeps the run's record: `nodus runs resume "
            f"{self.ctx.run_id}{store}` continues it"
        )

    def _hung(self, watch: Watch, hang: Hang) -> Outcome:
        """No progress for the stage's ``hang_timeout``: say so, end the whole tree (SIGTERM,
        the grace period, SIGKILL), capture what it left. An interruption, recovered from the
        newest snapshot; after its final snapshot (the integration reported that training
        ended, and that snapshot is committed) the stage has finished: it succeeds."""
        final = watch.final_snapshot()
        seconds = round(hang.quiet_ms / 1000)
        self.context.event(
            "hang_detected",
            {
                "seconds_without_progress": seconds,
                "last_progress": hang.last,
                "timeout_seconds": hang.timeout_ms / 1000,
                "final_snapshot_step": final,
            },
        )
        if final is None:
            said = f"no progress for {seconds} s (last: {hang.last}): ending it as hung"
        else:
            said = (
                f"no progress for {seconds} s after its final snapshot (step {final}): ending "
                "it; training had finished, so the stage succeeds"
            )
        self._say(said)
        status = self.process.stop(signal.SIGTERM, self.stage.execution.grace_period)
        self.process.finish_output()
        self.capture.final_capture(self.died_at(status))
        if final is not None:
            self._capture_outputs()
            return Outcome(
                AttemptOutcome.SUCCEEDED,
                f"hung after its final snapshot (step {final}): ended after {seconds} s "
                "without progress",
            )
        return Outcome(
            AttemptOutcome.LOST, f"hung: no progress for {seconds} s (last: {hang.last})"
        )

    def _say(self, text: str) -> None:
        """A line of the runner's own on the terminal, among the program's ``[stage]`` lines."""
        try:
            self.ctx.terminal.write(f"[{self.stage.name}] nodus: {text}\n")
            self.ctx.terminal.flush()
        except (OSError, ValueError):
            pass  # a closed terminal changes nothing

    def died_at(self, status: int) -> float | None:
        """Now, when the program that just ended with ``status`` died by a signal, or a process
        of its tree did; None after an exit of its own (what it wrote is all taken)."""
        if status < 0 or (status > 0 and self.process.interruption() is not None):
            return time.time()
        return None

    # --- requests from other nodus processes ----------------------------------------------

    def take_cancel(self) -> bool:
        """True (and the request marked handled) if a cancel is pending: it wins over a pause."""
        return self._take_control("cancel") is not None

    def _take_pause(self) -> Outcome | None:
        """Carry out a pending pause; None when there is none or it was refused."""
        control = self._take_control("pause")
        if control is None:
            return None
        # Imported only here: a run that is never paused never loads the pause driver.
        from nodus.runner.attempt.pausing import PauseDriver

        pause = self.ctx.catalog.pause_for_control(control["id"])
        if pause is None:  # a control row without its pause: written by a foreign tool
            return None
        return PauseDriver(self, self.capture, pause).run()

    def _take_control(self, action: str) -> dict[str, Any] | None:
        """The oldest pending request of ``action``; other actions are left for their turn."""
        for control in self.ctx.catalog.pending_controls(self.ctx.run_id):
            if control["action"] == action:
                self.ctx.catalog.mark_handled(control["id"])
                return dict(control)
        return None

    def request_save(self, then: str) -> int:
        """Ask the integration for a save at its next optimizer boundary; the request id."""
        self._save_request += 1
        request = protocol.SaveRequest(id=self._save_request, then=then)
        write_json_atomic(self.ws.control.request(request.id), request.to_dict())
        return request.id

    # --- the end ----------------------------------------------------------------------------

    def _preempt(self) -> Outcome:
        """A preemption notice: save (integration) or forward SIGTERM, wait, capture, stop."""
        grace = self.stage.execution.grace_period
        signame = signal_name(self.state.notice or signal.SIGTERM)
        self.context.event("preemption_notice", {"signal": signame, "grace_period": grace})
        self.process.reached_by(self.state.notice or signal.SIGTERM)
        died_at = None
        if self.stage.integration is not None and not self.facts.role.captures:
            died_at = self.died_at(self._await_the_world(grace))
        elif self.stage.integration is not None and self.capture.watch_folders is False:
            self._await_stop_save(grace)
            self.process.kill()
        else:
            died_at = self.died_at(self.process.stop(signal.SIGTERM, grace))
        self.process.finish_output()
        self.capture.final_capture(died_at)
        return Outcome(AttemptOutcome.PREEMPTED, f"runner received {signame} (preemption notice)")

    def _stopped_with_the_notice(self, status: int) -> Outcome:
        """The program ended as the notice came: the signal reached it too (a machine, a
        systemd unit or a Slurm job going down signals every process), and it stopped at it,
        having saved if it saves on SIGTERM. Interrupted, as if nodus had passed the notice on."""
        notice = self.state.notice or signal.SIGTERM
        signame = signal_name(notice)
        grace = self.stage.execution.grace_period
        self.context.event("preemption_notice", {"signal": signame, "grace_period": grace})
        self.process.reached_by(notice)
        self.process.finish_output()
        self.capture.final_capture(self.died_at(status))
        return Outcome(
            AttemptOutcome.PREEMPTED,
            f"runner received {signame} (preemption notice) as its program ended with status "
            f"{status}: the signal reached both",
        )

    def _await_the_world(self, grace: float) -> int:
        """A follower node of a multi-node integration stage under a notice: its program is one
        rank of a world whose rank 0 (on node 0, which got the notice too) decides the stop save,
        a collective every rank takes part in. A SIGTERM here would end this rank in the middle
        of it and lose the save; so the program is left to end with its world (node 0's attempt
        ends rank 0 once its save is captured, the cluster attempt then the job), and is killed
        only when the grace period is over."""
        status = self.process.wait(grace)
        return status if status is not None else self.process.kill()

    def _await_stop_save(self, grace: float) -> None:
        """Ask the integration for a save then=stop and capture it, within the grace period."""
        request = self.request_save(protocol.THEN_STOP)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and request not in self.capture.answered:
            if self.process.poll() is not None:
                break
            self.capture.tick()
            time.sleep(defaults.POLL_S)

    def classify(self, status: int) -> Outcome:
        """How an attempt whose program exited with ``status`` ended
        (:func:`~nodus.runner.attempt.outcome.classify`), and what follows from it here: the
        outputs of a success captured, a process its tree lost recorded."""
        ended = self._exit(status)
        outcome = classify(ended)
        if outcome.kind == AttemptOutcome.SUCCEEDED:
            self._capture_outputs()
        elif ended.loss is not None:
            self._record_loss(ended.loss, status)
        return outcome

    def _exit(self, status: int) -> Exit:
        """What the classification reads of the program that ended with ``status``; the
        catalog is read for a refusal only after a plain non-zero exit."""
        lost = self.process.supervisor_lost
        loss = self.process.interruption() if status > 0 and lost is None else None
        refusal = self._refusal() if status > 0 and lost is None and loss is None else ""
        return Exit(
            status=status,
            program=self.stage.command[0],
            supervisor_lost=lost,
            sent=tuple(self.process.signals_sent),
            oom=bool(self.process.ending and self.process.ending.oom),
            loss=loss,
            refusal=refusal,
        )

    def _record_loss(self, loss: Loss, status: int) -> None:
        """A process of the tree killed by a signal nodus did not send: the run says which."""
        self.context.event(
            "process_killed",
            {
                "pid": loss.pid,
                "command": loss.command,
                "signal": signal_name(loss.signal),
                "oom_kill": loss.oom,
                "exit_status": status,
                # its own status, the kernel's exit event, or a shell's 128+N
                "evidence": loss.evidence,
            },
        )

    def _refusal(self) -> str:
        """Why the integration refused this attempt (its event, ingested by now), or ''."""
        for event in self.ctx.catalog.events(self.ctx.run_id):
            mine = (event["stage"], event["attempt"]) == (self.stage.name, self.number)
            if mine and event["type"] == protocol.EVENT_REFUSED:
                reasons = "; ".join(str(r) for r in event["details"].get("reasons") or ())
                return f": {self.stage.integration} refused this attempt: {reasons}"
        return ""

    def _capture_outputs(self) -> None:
        """The stage's ``outputs`` captured as a snapshot of their own (none where this
        attempt's role captures nothing)."""
        from nodus.store.manifest import SnapshotInfo

        if not self.stage.outputs or not self.facts.role.captures:
            return
        info = SnapshotInfo(
            run=self.ctx.run_id,
            stage=self.stage.name,
            attempt=self.number,
            step=None,
            role="outputs",
        )
        into = self.ctx.store if self.uploads is None else self.uploads.staging
        try:
            # a superseded attempt never commits outputs (an upload is fenced when it is sent)
            manifest = into.capture(
                self.ws.copy,
                list(self.stage.outputs),
                info=info,
                guard=self.context.fence if self.uploads is None else None,
            )
        except (StoreError, OSError) as error:
            self.context.event("outputs_failed", {"error": str(error)})
            return
        if self.uploads is not None:  # `outputs_committed` once it is uploaded
            self.uploads.submit(manifest, "outputs", keep=True)
            return
        self.context.event("outputs_committed", {"snapshot": manifest.id})
