"""Carrying out ``nodus runs pause`` inside an attempt's poll loop.

``nodus runs pause`` records a pause row and a control row and returns; the runner picks the
control up at its next look and drives the pause to its end here:

    save    integration: a save request ``then: stop`` answered at the next optimizer boundary,
            committed, then the blocked program is ended. Directory contract: SIGTERM to the
            program's group, wait for it to exit, capture the selection once more.
    latest  end the program now without saving; a resume restores the newest snapshot that
            holds training state and repeats the updates after it.

While it waits the loop keeps capturing, reports save progress (bytes written so far), and
still answers a cancel, which wins over the pause. A program that finishes meanwhile completes
the stage instead. Past the deadline the pause is marked ``timed_out`` and the program gets one
grace period more before it is killed: a pause never leaves a program running.

Once the program is gone the attempt's working copy is removed (``resources_released``); the
engine then records PAUSED and the runner exits 3.
"""

from __future__ import annotations

import signal
import time
from typing import TYPE_CHECKING, Any, Protocol

from nodus import protocol
from nodus._atomic import tree_bytes
from nodus.runner.attempt.outcome import Outcome
from nodus.runner.catalog.core import now
from nodus.runner.catalog.phases import AttemptOutcome, Phase
from nodus.runner.recovery import suspects
from nodus.schemas import defaults

if TYPE_CHECKING:
    from collections.abc import Callable

    from nodus.runner.attempt.context import AttemptFacts, RunContext
    from nodus.runner.attempt.role import CaptureLoop
    from nodus.runner.catalog.attempt_context import AttemptContext
    from nodus.runner.processes.stage_process import StageProcess
    from nodus.runner.workspace.layout import Workspace
    from nodus.schemas.resolved import ResolvedStage
    from nodus.store.manifest import Manifest


class PausableAttempt(Protocol):
    """What a pause needs of the attempt it ends, as its supervision has it
    (:class:`nodus.runner.attempt.supervise.Supervision`)."""

    ctx: RunContext
    facts: AttemptFacts
    context: AttemptContext
    stage: ResolvedStage
    number: int
    ws: Workspace
    process: StageProcess

    def classify(self, status: int) -> Outcome: ...
    def died_at(self, status: int) -> float | None: ...
    def request_save(self, then: str) -> int: ...
    def take_cancel(self) -> bool: ...


class PauseDriver:
    """One pause of one attempt, from the runner taking it up to the program being gone."""

    def __init__(
        self, attempt: PausableAttempt, capturer: CaptureLoop, pause: dict[str, Any]
    ) -> None:
        self.attempt = attempt
        self.capturer = capturer
        self.pause = pause
        self.catalog = attempt.ctx.catalog
        self.process = attempt.process
        grace = attempt.stage.execution.grace_period
        # Monotonic clocks from the moment the runner took the pause up.
        self.deadline = time.monotonic() + float(pause["deadline_s"])
        self.kill_at = self.deadline + grace
        self.asked_by = "after SIGTERM"  # how the program was asked to stop, for the outcome

    def run(self) -> Outcome | None:
        """The attempt's outcome, or None when the pause was refused and training goes on."""
        self._update(state="pausing", accepted_at=now())
        self.attempt.ctx.catalog.lifecycle.move(
            self.attempt.ctx.run_id, Phase.PAUSING, stage=self.attempt.stage.name
        )
        self._event(
            "pause_accepted", {"policy": self.pause["policy"], "deadline": self.pause["deadline"]}
        )
        if self.pause["policy"] == "latest":
            return self._latest()
        if self._integration():
            return self._save_with_integration()
        if self._follower():
            return self._with_the_world()
        return self._save_with_signal()

    # --- policies -------------------------------------------------------------------------

    def _latest(self) -> Outcome | None:
        target = self._newest_restorable()
        if target is None:  # accepted by `runs pause`, but nothing is restorable any more
            self._end_pause(
                "failed",
                failure="no committed snapshot holds training state; "
                "pausing now would lose all training (use --checkpoint save)",
            )
            self.catalog.lifecycle.move(
                self.attempt.ctx.run_id, Phase.RUNNING, stage=self.attempt.stage.name
            )
            return None
        self.process.kill()
        self._update(snapshot=target.id, step=target.step, save_bytes=target.total_bytes)
        return self._paused(
            f"paused at the newest snapshot, step {target.step} (--checkpoint latest)"
        )

    def _save_with_integration(self) -> Outcome:
        request = self.attempt.request_save(protocol.THEN_STOP)
        ended = self._wait(lambda: request in self.capturer.answered)
        if ended is not None:
            return ended
        self.process.kill()  # after answering a stop request the program blocks until ended
        return self._acknowledge("paused after a save at the next optimizer boundary")

    def _save_with_signal(self) -> Outcome:
        self.process.signal_group(signal.SIGTERM)
        ended = self._wait(lambda: False, signalled=True)
        if ended is not None:
            return ended
        return self._acknowledge("paused after the program saved on SIGTERM")

    def _with_the_world(self) -> Outcome:
        """A follower node of a multi-node integration stage: rank 0 (on node 0, paused too)
        decides the stop save and every rank takes part in it, then this node's rank ends with
        the world. A SIGTERM here could end it in the middle of that save: none is sent, and the
        program is killed only one grace period after the pause deadline."""
        self.asked_by = "with its world (rank 0 stopped after its save)"
        ended = self._wait(lambda: False, signalled=True)
        return ended if ended is not None else self._acknowledge("paused with its world")

    # --- waiting ----------------------------------------------------------------------------

    def _wait(self, done: Callable[[], bool], signalled: bool = False) -> Outcome | None:
        """Poll until ``done()``; an Outcome if the attempt ended some other way meanwhile.

        With ``signalled`` the program was asked to stop by SIGTERM, so its exit *is* the pause
        (unless it exits 0: it says it finished, and a run that finishes during a pause
        completes).
        """

        while not done():
            if self.attempt.take_cancel():
                self._end_pause("cancelled", failure="cancelled before the pause completed")
                self.process.stop(signal.SIGTERM, self.attempt.stage.execution.grace_period)
                self.process.finish_output()
                return Outcome(
                    AttemptOutcome.CANCELLED, "cancelled by `nodus runs cancel` during a pause"
                )
            self.capturer.tick()
            self._report_progress()
            status = self.process.poll()
            if status is not None:
                return self._exited(status, signalled)
            if time.monotonic() > self.deadline and not self.pause["timed_out"]:
                self._update(timed_out=1)
                self._event("pause_timed_out", {"deadline": self.pause["deadline"]})
            if time.monotonic() > self.kill_at:
                self.process.kill()
                return self._acknowledge(
                    "paused: the program was killed one grace period after the pause deadline"
                )
            self.process.wait(defaults.POLL_S)
        return None

    def _exited(self, status: int, signalled: bool) -> Outcome | None:
        died_at = self.attempt.died_at(status)
        self.process.finish_output()
        self.capturer.final_capture(died_at)
        if status == 0:
            self._end_pause("completed", failure="the program finished before it could pause")
            return self.attempt.classify(status)
        if signalled:
            return self._acknowledge_captured(
                f"paused: the program exited with status {status} {self.asked_by}"
            )
        outcome = self.attempt.classify(status)
        self._end_pause("failed", failure=f"the program ended before saving: {outcome.detail}")
        return outcome

    # --- the end of a pause -------------------------------------------------------------------

    def _acknowledge(self, detail: str) -> Outcome:
        self.process.finish_output()
        self.capturer.final_capture(died_at=time.time())  # killed: what it wrote last may be cut
        return self._acknowledge_captured(detail)

    def _acknowledge_captured(self, detail: str) -> Outcome:
        self.capturer.finish_uploads()  # a remote store: the pause names a stored snapshot
        target = self._newest_restorable()
        if target is not None:
            self._update(snapshot=target.id, step=target.step, save_bytes=target.total_bytes)
        else:
            self._update(failure="no snapshot holding training state was committed")
        return self._paused(detail)

    def _paused(self, detail: str) -> Outcome:

        self.process.kill_leftovers()
        self.attempt.ws.discard_copy()
        self._end_pause("paused", resources_released=1)
        return Outcome(AttemptOutcome.PAUSED, detail)

    def _end_pause(self, state: str, **values: Any) -> None:
        self._update(state=state, ended_at=now(), **values)
        self._event(
            "pause_ended", {"state": state, **{k: v for k, v in values.items() if k == "failure"}}
        )

    # --- helpers ----------------------------------------------------------------------------

    def _integration(self) -> bool:
        return self.attempt.stage.integration is not None and not self.capturer.watch_folders

    def _follower(self) -> bool:
        """An integration stage's node that captures nothing (node k > 0): its rank follows
        rank 0's decisions."""
        return self.attempt.stage.integration is not None and not self.attempt.facts.role.captures

    def _newest_restorable(self) -> Manifest | None:
        """What a resume will restore: the newest snapshot, suspects passed over."""
        ctx, stage = self.attempt.ctx, self.attempt.stage.name
        manifests = ctx.store.list(run=ctx.run_id, stage=stage)
        events = ctx.catalog.events(ctx.run_id, types=(suspects.EVENT,))
        found = suspects.usable(manifests, events, stage)
        return found[0] if found else None

    def _report_progress(self) -> None:
        """Bytes of the checkpoint being written (integration) or of the state folder."""
        where = self.attempt.ws.control.build if self._integration() else self.attempt.ws.state
        written = tree_bytes(where)
        if written != self.pause["save_bytes"]:
            self._update(save_bytes=written)

    def _update(self, **values: Any) -> None:
        self.pause.update(values)
        self.catalog.update_pause(self.pause["id"], **values)

    def _event(self, type_: str, details: dict[str, Any]) -> None:
        self.attempt.context.event(type_, details)
