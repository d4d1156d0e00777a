"""One attempt: prepare its working copy, run the program, capture, and say how it ended.

The poll loop is the runner's only loop: every ``POLL_S`` it ingests the program's events and
save records, captures settled checkpoint folders, looks for a preemption notice (a signal to the
runner) and for control requests other nodus processes wrote into the catalog, and checks
whether the program ended. Nothing else ever blocks it except a capture.

How an attempt ends (:class:`~nodus.runner.catalog.phases.AttemptOutcome`; the program's end is
told by :func:`nodus.runner.attempt.outcome.classify`):

    succeeded    exit 0 (outputs captured)
    failed       non-zero exit, or the command could not start
    interrupted  killed by a signal nodus did not send; or a process of its tree was, and the
                 program (a launcher: ``sh -c``, ``torchrun``) then exited non-zero
    preempted    the runner got SIGTERM/SIGINT: the program was stopped and captured
    interrupted  (hung) no progress for ``hang_timeout``: the tree ended, then recovered like any
                 interruption (:mod:`nodus.runner.attempt.watch`); succeeded when the
                 integration had reported training ended and its final snapshot was committed
    paused       ``nodus runs pause`` (carried out by :mod:`nodus.runner.attempt.pausing`)
    cancelled    ``nodus runs cancel``, which wins over a pending pause
"""

from __future__ import annotations

import os
import signal
import socket
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, NoReturn

from nodus import protocol
from nodus._atomic import write_json_atomic
from nodus.errors import CatalogError, NotFoundError, StaleAttemptError, StoreError, redacted
from nodus.runner.attempt.context import RunContext
from nodus.runner.attempt.outcome import Exit, Outcome, classify
from nodus.runner.attempt.watch import Watch
from nodus.runner.capture.capturer import Capturer
from nodus.runner.capture.disk_guard import DiskGuard, staging_disk, stored_bytes
from nodus.runner.catalog.phases import AttemptOutcome, Phase
from nodus.runner.catalog.unrecorded import unrecorded_note
from nodus.runner.processes.containment import (
    attempt_token,
    kill_survivors,
    record_survivors,
)
from nodus.runner.processes.messages import Loss
from nodus.runner.processes.stage_process import CannotStartError, StageProcess, signal_name
from nodus.runner.recovery import suspects
from nodus.runner.recovery.decisions import Restore, restore_candidates
from nodus.runner.recovery.hangs import Hang
from nodus.runner.remote.uploads import Uploads
from nodus.runner.upkeep.lineage import Parent
from nodus.runner.upkeep.rotation import Rotation
from nodus.runner.workspace.launch import Launch, device_count, python_version
from nodus.runner.workspace.layout import (
    MissingSecretError,
    Workspace,
    secret_environment,
    stage_environment,
    write_integration,
)
from nodus.schemas import defaults
from nodus.schemas.resolved import ResolvedStage
from nodus.stages.directory import restored_checkpoint

if TYPE_CHECKING:
    from nodus.store.manifest import Manifest

__all__ = ["Attempt", "NothingIntactError", "Restore", "record_end"]


class NothingIntactError(Exception):
    """Every snapshot the attempt could continue from is damaged: it fails, never starts over."""


class Attempt:
    """One process lifetime of a stage; its number (allocated at once) is its fencing token."""

    def __init__(
        self,
        ctx: RunContext,
        stage: ResolvedStage,
        source: str,
        restore: Restore,
        overlays: Sequence[str] = (),
        recovering: bool = False,
        inherited: Parent | None = None,
    ) -> None:
        self.ctx = ctx
        # The run's parent, when this stage continues it: restored while the stage has no
        # restorable snapshot of its own (nodus.runner.upkeep.lineage).
        self.inherited = inherited
        self.warm_start = False  # laid out the parent's weights: training starts at step 0
        self.recovering = recovering  # the run stays RECOVERING until the program runs again
        self.stage = stage
        self.source = source  # the run's source snapshot id for this stage
        self.restore = restore
        self.overlays = tuple(overlays)  # outputs of earlier stages
        # The device count is recorded so a resume can insist on the same allocation.
        self.number = ctx.catalog.start_attempt(
            ctx.run_id, stage.name, host=socket.gethostname(), devices=device_count()
        )
        # What its workers (capture, rotation, uploads) share: ``ctx`` is the whole run's.
        self.context = ctx.attempt_context(stage, self.number)
        self.ws = Workspace.of(ctx.home, ctx.run_id, stage.name, self.number)
        self.process: StageProcess | None = None
        self._save_request = 0
        self.uploads: Uploads | None = None  # a remote store: the background uploads

    def run(self) -> Outcome:
        # Nothing of an earlier attempt runs, nor writes into the copy this one lays out again.
        # After an attempt of this runner whose supervisor reported its tree gone, nothing
        # can (a subreaper outlives every process below it), and a recovery skips the scan.
        if not self.ctx.tree_gone:
            self._sweep()
        self.ctx.tree_gone = False
        try:
            restored = self._prepare()
        except NothingIntactError as error:
            return self._end(Outcome(AttemptOutcome.FAILED, str(error)))
        finally:
            self.ws.discard_previous()  # what the restore did not take
        rotation = self._rotation()
        self.uploads = self._uploads(rotation)
        unrecorded: list = []
        outcome = None
        try:
            outcome = self._run(restored, rotation)
        finally:
            if self.uploads is not None:  # its remote commits still ask rotation for passes
                unrecorded = self.uploads.finish()
            # While the attempt lasts, the run is unfinished: holds stay. A recovery may
            # follow at once: it need not wait for an idle worker to go.
            interrupted = outcome is not None and outcome.kind == AttemptOutcome.INTERRUPTED
            rotation.close(hurry=interrupted)
        return self._end(_with_unrecorded(outcome, unrecorded))

    def _sweep(self) -> None:
        """Kill whatever an earlier attempt of the run left running."""
        kill_survivors(self.ctx.catalog, self.ctx.run_id)

    def _token(self) -> str:
        """The token every process of this attempt carries (containment)."""
        return attempt_token(self.ctx.run_id, self.stage.name, self.number)

    def _rotation(self) -> Rotation:
        """Retention after each commit, beside the capture loop."""
        return Rotation(self.context)

    def _uploads(self, rotation: Rotation) -> Uploads | None:
        """With a remote store: captures go to staging first and upload in the background."""
        if self.ctx.store.storage.is_local:
            return None
        return Uploads(self.context, home=self.ctx.home, ws=self.ws, rotation=rotation)

    def _run(self, restored: Manifest | None, rotation: Rotation) -> Outcome:
        """Start the program (under a supervisor of its own), supervise it and capture; how
        it ended."""
        capturer = self._capturer(restored, rotation)
        env = stage_environment(self.ws, self.stage, self.ctx.run_id, self.number, dict(os.environ))
        if self.warm_start:
            env[protocol.ENV_WARM_START] = "1"
        restored_env, resume_args = self._restored_launch(restored)
        env.update(restored_env)
        try:
            env.update(secret_environment(self.stage, os.environ))
            command, env = self._as_accepted(env)
            command += resume_args
            self.process = StageProcess(
                command,
                cwd=self.ws.copy,
                env=env,
                log_path=self.ws.log_path,
                prefix=self.stage.name,
                token=self._token(),
                grace_s=self.stage.execution.grace_period,
                terminal=self.ctx.terminal,
            )
            self.process.start()
        except (CannotStartError, MissingSecretError) as error:
            return Outcome(AttemptOutcome.FAILED, str(error))
        self.ctx.catalog.update_attempt(
            self.ctx.run_id, self.stage.name, self.number, pid=self.process.pid
        )
        self.ctx.catalog.set_phase(self.ctx.run_id, Phase.RUNNING, stage=self.stage.name)
        try:
            outcome = self._supervise(capturer)
        except StaleAttemptError as error:
            self.process.kill()
            outcome = Outcome(AttemptOutcome.FAILED, str(error))
        except BaseException:
            self.process.kill()  # whatever went wrong here, the program must not outlive it
            raise
        self.process.finish_output()
        return outcome

    def _restored_launch(self, restored: Manifest | None) -> tuple[dict[str, str], list[str]]:
        """What an attempt that restored a snapshot holding training state adds to the
        program's environment (its step, where its checkpoint lies in the copy) and to its
        command (``[continuity] resume_args``); nothing on a fresh or warm start."""
        if restored is None or self.warm_start or restored.step is None:
            return {}, []
        relative = restored_checkpoint(
            (entry.path for entry in restored.files),
            restored.step,
            self.stage.continuity.checkpoint_paths,
            self.stage.continuity.checkpoint_name,
        )
        checkpoint = os.path.join(self.ws.copy, relative)
        env = {protocol.ENV_RESTORED_CHECKPOINT: checkpoint}
        # A capture's count is no step of the program's: it is never handed over as one.
        step = None if restored.counted else restored.step
        if step is not None:
            env[protocol.ENV_RESTORED_STEP] = str(step)
        args = protocol.resume_arguments(self.stage.continuity.resume_args, checkpoint, step)
        return env, args

    def _capturer(self, restored: Manifest | None, rotation: Rotation) -> Capturer:
        continued = restored if restored is not None and not self.warm_start else None
        return Capturer(
            self.context,
            self.ws,
            restored_step=continued.step if continued else None,
            restored_snapshot=continued.id if continued else None,
            restored=continued,
            inherited_step=restored.step if restored and self.warm_start else None,
            rotation=rotation,
            disk_guard=self._disk_guard(restored),
            uploads=self.uploads,
        )

    def _disk_guard(self, restored: Manifest | None) -> DiskGuard:
        """The attempt's disk guard, checked before saves begin with the restored size."""
        guard = DiskGuard(
            staging_disk(self.ctx.store, self.ctx.home),
            self.ws.control,
            self.context.event,
        )
        if restored is not None:  # restored into the copy: a sparse file counts what it holds
            files = [(e.path, e.size, 0) for e in restored.held_files() if not e.is_link]
            guard.check(stored_bytes(self.ws.copy, files))
        return guard

    def _as_accepted(self, env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
        """The command and environment as accepted: the stored executable and the stored PATH.

        Whatever PATH this runner has (cron's), the program runs as it did when accepted. A run
        accepted before launches were stored runs its command as written.
        """
        launch = self.ctx.launches.get(self.stage.name)
        if launch is None:
            return list(self.stage.command), env
        missing = launch.missing()
        if missing:
            raise CannotStartError(missing)
        self._note_interpreter(launch)
        return launch.argv(self.stage.command), {**env, "PATH": launch.path}

    def _note_interpreter(self, launch: Launch) -> None:
        """An interpreter upgraded since acceptance runs on, and the run says so."""
        if launch.python is None:
            return
        now = python_version(launch.executable, launch.path)
        if now is not None and now != launch.python:
            self.context.event(
                "interpreter_changed",
                {"executable": launch.executable, "accepted": launch.python, "now": now},
            )

    # --- preparation ------------------------------------------------------------------------

    def _prepare(self) -> Manifest | None:
        """The copy laid out again: source, earlier outputs, restored selection; its manifest."""
        if not self.recovering:
            self.ctx.catalog.set_phase(self.ctx.run_id, Phase.PREPARING, stage=self.stage.name)
        restored = None
        candidates = self._candidates()
        # What the last attempt left may serve the restore without a copy, once verified.
        previous = self.ws.set_aside_copy() if candidates else None
        damaged: list[tuple[Any, str]] = []
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
                self.context.event(
                    "snapshot_damaged",
                    {"snapshot": manifest.id, "step": manifest.step, "error": str(error)},
                )
                continue
            restored = manifest
            break
        else:
            if damaged:  # there was state to continue from, and none of it is intact
                raise NothingIntactError(self._nothing_intact(damaged))
            self._lay_source()
        self.ws.make_private_folders()
        self.warm_start = restored is not None and self._warm(restored)
        step = restored.step if restored and not self.warm_start else None
        from_parent = restored is not None and self._from_parent(restored)
        write_integration(
            self.ws,
            self.stage,
            self.ctx.run_id,
            self.number,
            step,
            self.ctx.home,
            qualifying=self.ctx.qualifying,
            parent_mode=self.inherited.mode if from_parent and self.inherited else None,
            warm_start_step=restored.step if restored and self.warm_start else None,
        )
        if step is not None and restored is not None:
            commit = protocol.CommitRecord(step=step, snapshot=restored.id)
            write_json_atomic(self.ws.control.committed, commit.to_dict(), durable=False)
        self.ctx.catalog.update_attempt(
            self.ctx.run_id,
            self.stage.name,
            self.number,
            log_path=self.ws.log_path,
            restored_snapshot=restored.id if restored else None,
            restored_step=step,
        )
        if from_parent and self.inherited is not None:
            details = {**self.inherited.to_dict(), "warm_start": self.warm_start}
            self.context.event("parent_restored", details)
        return restored

    def _nothing_intact(self, damaged: list[tuple[Any, str]]) -> str:
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
        """The empty copy with the run's source, the earlier stages' outputs laid over it."""
        self.ws.reset_copy()
        self.ctx.store.restore(self.source, self.ws.copy)
        for snapshot in self.overlays:
            self.ctx.store.restore(snapshot, self.ws.copy, overlay=True)

    # --- supervision ------------------------------------------------------------------------

    def _supervise(self, capturer: Capturer) -> Outcome:
        assert self.process is not None
        watch = self._watch(capturer)
        try:
            return self._poll(capturer, watch)
        finally:
            if watch.longest_ms is not None:  # what a recovered attempt's timeout starts from
                self.ctx.longest_progress_ms[self.stage.name] = watch.longest_ms

    def _watch(self, capturer: Capturer) -> Watch:
        assert self.process is not None
        return Watch(
            self._hang_timeout(),
            self.ws,
            list(self.stage.continuity.checkpoint_paths),
            capturer,
            self.process,
            self.ctx.longest_progress_ms.get(self.stage.name),
        )

    def _hang_timeout(self) -> float | str:
        """The stage's ``hang_timeout`` as this attempt applies it."""
        return self.stage.execution.hang_timeout

    def _poll(self, capturer: Capturer, watch: Watch) -> Outcome:
        assert self.process is not None
        while True:
            if self.ctx.notice is not None:
                return self._preempt(capturer)
            if self.take_cancel():
                self.process.stop(signal.SIGTERM, self.stage.execution.grace_period)
                return Outcome(AttemptOutcome.CANCELLED, "cancelled by `nodus runs cancel`")
            paused = self._take_pause(capturer)
            if paused is not None:
                return paused
            lost = self.ctx.catalog.lost()
            if lost is not None:
                self._catalog_lost(capturer, lost)
            capturer.tick()
            status = self.process.poll()
            if status is None:
                status = self.process.wait(defaults.POLL_S)  # returns when the program ends
            if status is not None:  # straight on: the next attempt may be waiting for this
                died_at = self.died_at(status)
                self.process.finish_output()
                capturer.final_capture(died_at)
                return self.classify(status)
            hang = watch.look()
            if hang is not None:
                return self._hung(capturer, watch, hang)

    def _catalog_lost(self, capturer: Capturer, lost: str) -> NoReturn:
        """The run catalog was deleted or replaced under the runner: nothing it records would
        be read again, and no other nodus command could find the run. The program is stopped
        as a cancel stops it, its final state captured into the store (whose record of the run
        stays current), and the runner stops, saying what happened and what continues it."""
        assert self.process is not None
        self._say(f"{lost}: stopping the program")
        status = self.process.stop(signal.SIGTERM, self.stage.execution.grace_period)
        self.process.finish_output()
        capturer.final_capture(self.died_at(status))
        store = f" --store {redacted(self.ctx.store.url)}"
        raise CatalogError(
            f"{lost} while run {self.ctx.run_id} trained; its program was stopped and its last "
            f"state captured into its store, which keeps the run's record: `nodus runs resume "
            f"{self.ctx.run_id}{store}` continues it"
        )

    def _hung(self, capturer: Capturer, watch: Watch, hang: Hang) -> Outcome:
        """No progress for the stage's ``hang_timeout``: say so, end the whole tree (SIGTERM,
        the grace period, SIGKILL), capture what it left. An interruption, recovered from the
        newest snapshot; after its final snapshot (the integration reported that training
        ended, and that snapshot is committed) the stage has finished: it succeeds."""
        assert self.process is not None
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
        capturer.final_capture(self.died_at(status))
        if final is not None:
            self._capture_outputs()
            return Outcome(
                AttemptOutcome.SUCCEEDED,
                f"hung after its final snapshot (step {final}): ended after {seconds} s "
                "without progress",
            )
        return Outcome(
            AttemptOutcome.INTERRUPTED, f"hung: no progress for {seconds} s (last: {hang.last})"
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
        assert self.process is not None
        if status < 0 or (status > 0 and self.process.interruption() is not None):
            return time.time()
        return None

    def take_cancel(self) -> bool:
        """True (and the request marked handled) if a cancel is pending: it wins over a pause."""
        return self._take_control("cancel") is not None

    def _take_pause(self, capturer: Capturer) -> Outcome | None:
        """Carry out a pending pause; None when there is none or it was refused."""
        from nodus.runner.attempt.pausing import PauseDriver

        control = self._take_control("pause")
        if control is None:
            return None
        pause = self.ctx.catalog.pause_for_control(control["id"])
        if pause is None:  # a control row without its pause: written by a foreign tool
            return None
        return PauseDriver(self, capturer, pause).run()

    def _take_control(self, action: str) -> dict | None:
        """The oldest pending request of ``action``; other actions are left for their turn."""
        for control in self.ctx.catalog.pending_controls(self.ctx.run_id):
            if control["action"] == action:
                self.ctx.catalog.mark_handled(control["id"])
                return control
        return None

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
        assert self.process is not None
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

    def _preempt(self, capturer: Capturer) -> Outcome:
        """A preemption notice: save (integration) or forward SIGTERM, wait, capture, stop."""
        assert self.process is not None
        grace = self.stage.execution.grace_period
        signame = signal_name(self.ctx.notice or signal.SIGTERM)
        self.context.event("preemption_notice", {"signal": signame, "grace_period": grace})
        died_at = None
        if self.stage.integration is not None and capturer.watch_folders is False:
            self._await_stop_save(capturer, grace)
            self.process.kill()
        else:
            died_at = self.died_at(self.process.stop(signal.SIGTERM, grace))
        self.process.finish_output()
        capturer.final_capture(died_at)
        return Outcome(AttemptOutcome.PREEMPTED, f"runner received {signame} (preemption notice)")

    def request_save(self, then: str) -> int:
        """Ask the integration for a save at its next optimizer boundary; the request id."""
        self._save_request += 1
        request = protocol.SaveRequest(id=self._save_request, then=then)
        write_json_atomic(self.ws.control.request(request.id), request.to_dict())
        return request.id

    def _await_stop_save(self, capturer: Capturer, grace: float) -> None:
        """Ask the integration for a save then=stop and capture it, within the grace period."""
        request = self.request_save(protocol.THEN_STOP)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and request not in capturer.answered:
            if self.process is not None and self.process.poll() is not None:
                break
            capturer.tick()
            time.sleep(defaults.POLL_S)

    def _capture_outputs(self) -> None:
        from nodus.store.manifest import SnapshotInfo

        if not self.stage.outputs:
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

    def _end(self, outcome: Outcome) -> Outcome:
        if self.process is not None:  # what a lost supervisor left behind, killed by token
            record_survivors(self.ctx.catalog, self.ctx.run_id, self.process.survivors)
            self.ctx.tree_gone = self.process.tree_gone
        return record_end(self.ctx, self.stage.name, self.number, outcome)


def _with_unrecorded(outcome: Outcome, unrecorded: list) -> Outcome:
    """An attempt that left saves unrecorded says so; what training reached stays its kind."""
    if not unrecorded:
        return outcome
    return replace(outcome, detail=f"{outcome.detail}; {unrecorded_note(unrecorded)}")


def record_end(ctx: RunContext, stage: str, number: int, outcome: Outcome) -> Outcome:
    """An attempt's end in the catalog and its ``attempt_ended`` event, wherever it ran."""
    ctx.catalog.end_attempt(ctx.run_id, stage, number, outcome.kind, outcome.detail, announce=True)
    return outcome
