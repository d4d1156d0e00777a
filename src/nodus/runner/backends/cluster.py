"""An attempt whose program runs on cluster nodes, runner side: what Ray and Slurm share.

A cluster backend starts one node runner per node the stage asks for (``[execution] nodes``);
each runs an ordinary attempt there (:mod:`.node`) and reports its news: the events, the
attempt's row, the relayed pause, the program's output and, at its end, its outcome. This side
keeps the catalog: it records the node's events as the attempt's, runs retention for every
commit a node reports, relays a preemption notice, a cancel or a pause in, and decides how the
attempt ended. A backend says how its node runners are started, polled, told and stopped
(:class:`ClusterAttempt`'s hooks); Ray does it through actors (:mod:`.ray`), Slurm through a
job and files in a folder both sides reach (:mod:`.slurm`).

How an attempt on a cluster ends, beyond what a local one can:

    a lost node    its node runner no longer answers, its node died, was preempted or its job
                   ended: an interruption like any other (the run recovers on another node)
    several ranks  the first rank that ends other than succeeded decides, the others are
                   stopped; a rank interrupted or lost makes the attempt lost
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from nodus._atomic import create_private, private_folder
from nodus.runner.attempt.attempt import Restore, record_end
from nodus.runner.attempt.context import AttemptPlan, DriveState, RunContext
from nodus.runner.attempt.outcome import Outcome
from nodus.runner.backends.node import forwarded_environment
from nodus.runner.catalog.phases import AttemptOutcome, Phase
from nodus.runner.remote.adoption import record_of
from nodus.runner.upkeep.rotation import Rotation
from nodus.runner.workspace.layout import Workspace
from nodus.schemas import defaults
from nodus.store import restorable

RELAYED_CONTROLS = ("cancel", "pause")
NOTICE_SIGNALS = (signal.SIGTERM, signal.SIGINT)  # the runner's preemption notice
# The node pause's progress, as `runs pause` and `runs get` read it from the runner's row.
_RELAYED_PAUSE = (
    "state",
    "accepted_at",
    "save_bytes",
    "snapshot",
    "step",
    "failure",
    "timed_out",
    "resources_released",
    "ended_at",
)
RANKS_SETTLE_S = 10.0  # how long the other ranks get to report once one ended unsuccessfully

News = dict[str, Any]
"""One rank's news since the last poll (:meth:`nodus.runner.backends.node.NodeAgent.poll`)."""


class ClusterAttempt:
    """One attempt of a stage on cluster nodes; ``number`` is allocated in the runner's catalog
    (or given: the attempt a dead runner left, re-attached)."""

    def __init__(
        self,
        ctx: RunContext,
        state: DriveState,
        plan: AttemptPlan,
        number: int | None = None,
    ) -> None:
        self.ctx = ctx
        self.state = state  # the drive's: its preemption notice
        stage = self.stage = plan.stage
        self.source = plan.source
        self.restore = plan.restore
        self.overlays = list(plan.overlays)
        self.recovering = plan.recovering
        self.attached = number is not None  # a dead runner's attempt, still running
        self.number = (
            number
            if number is not None
            else ctx.catalog.start_attempt(ctx.run_id, stage.name, host=None, devices=0)
        )
        self.ws = Workspace.of(ctx.home, ctx.run_id, stage.name, self.number)
        self.ranks = stage.execution.nodes
        # Mirrored once: the run goes to RUNNING when its program runs. A re-attached attempt
        # whose runner died before that (as sbatch answered, or while the job waited for nodes)
        # still has to.
        self._started = self.attached and ctx.catalog.get_run(ctx.run_id).phase not in (
            Phase.PREPARING,
            Phase.RECOVERING,
        )
        self._pause: int | None = None  # the runner's pause row the node's is relayed to
        self._noticed = False

    # --- what a backend does ------------------------------------------------------------------

    def _start(self) -> Outcome | None:
        """Place and start the node runners; an outcome when the attempt could not start."""
        raise NotImplementedError

    def _poll(self) -> list[News] | Outcome:
        """Every rank's news since the last poll, or how the attempt was lost."""
        raise NotImplementedError

    def _send_notice(self, signum: int) -> None:
        """The runner's preemption notice, to every rank."""
        raise NotImplementedError

    def _send_control(self, action: str, args: dict[str, Any]) -> None:
        """A cancel or pause, to every rank's node attempt."""
        raise NotImplementedError

    def _release(self) -> None:
        """Stop whatever of the attempt still runs on the nodes."""
        raise NotImplementedError

    def _judge(self, outcome: Outcome) -> Outcome:
        """The attempt's outcome as the backend reads it (Slurm: a notice it sent is a loss)."""
        return outcome

    # --- the attempt --------------------------------------------------------------------------

    def run(self) -> Outcome:
        if not (self.recovering or self.attached):
            self.ctx.catalog.lifecycle.move(self.ctx.run_id, Phase.PREPARING, stage=self.stage.name)
        rotation = Rotation(self.ctx.attempt_context(self.stage, self.number))
        try:
            failed = self._start()
            outcome = failed if failed is not None else self._supervise(rotation)
        finally:
            self._release()
            rotation.close()
        return record_end(self.ctx, self.stage.name, self.number, self._judge(outcome))

    def chosen_restore(self) -> Restore:
        """The newest restorable snapshot, by step, so every rank lays out the same one."""
        if not self.restore.newest:
            return self.restore
        manifests = self.ctx.store.list(run=self.ctx.run_id, stage=self.stage.name)
        newest = restorable.newest_first(manifests)
        if not newest:
            return self.restore
        return Restore(step=newest[0].step, by_hand=self.restore.by_hand)

    def spec(self, rank: int, restore: Restore, env: dict[str, str]) -> dict[str, Any]:
        """What rank ``rank``'s node runner needs: the run's record, this attempt and its
        restore, and the environment it applies (nodus's settings, the rendezvous)."""
        record = record_of(self.ctx.catalog.get_run(self.ctx.run_id), None)
        for stage in record["stages"]:  # the node allocates this attempt's number itself
            if stage["name"] == self.stage.name:
                stage["attempts"] = [a for a in stage["attempts"] if a["number"] < self.number]
        return {
            "record": record,
            "store": self.ctx.store.url,
            "stage": self.stage.name,
            "number": self.number,
            "rank": rank,
            "source": self.source,
            "restore": {"newest": restore.newest, "step": restore.step, "by_hand": False},
            "overlays": self.overlays,
            "recovering": self.recovering,
            "env": dict(forwarded_environment(dict(os.environ)), **env),
        }

    def _supervise(self, rotation: Rotation) -> Outcome:
        ended: dict[int, Outcome] = {}
        settle_until: float | None = None
        while True:
            self._relay_in()
            polled = self._poll()
            if isinstance(polled, Outcome):
                return polled
            for rank, news in enumerate(polled):
                outcome = self._take(rank, news, rotation)
                if outcome is not None:
                    ended[rank] = outcome
            if settle_until is None and any(o.kind != "succeeded" for o in ended.values()):
                # A rank's loss breaks the others' collectives: they fail soon after. Wait a
                # moment for the rank that was interrupted to say so before deciding.
                settle_until = time.monotonic() + RANKS_SETTLE_S
            settled = settle_until is not None and time.monotonic() >= settle_until
            decided = decide(ended, self.ranks, settled)
            if decided is not None:
                return decided
            time.sleep(defaults.POLL_S)

    def _relay_in(self) -> None:
        """A preemption notice goes to every rank; a cancel or pause to the node attempt(s)."""
        if self.state.notice is not None and not self._noticed:
            self._noticed = True
            self._send_notice(self.state.notice or signal.SIGTERM)
        for control in list(self.ctx.catalog.pending_controls(self.ctx.run_id)):
            if control["action"] not in RELAYED_CONTROLS:
                continue
            self.ctx.catalog.mark_handled(control["id"])
            args = dict(control["args"])
            if control["action"] == "pause":
                pause = self.ctx.catalog.pause_for_control(control["id"])
                if pause is None:
                    continue
                self._pause = pause["id"]
                args["deadline_s"] = pause["deadline_s"]
            self._send_control(control["action"], args)

    def _take(self, rank: int, news: News, rotation: Rotation) -> Outcome | None:
        """Apply one rank's news here; its outcome once it ended."""
        if news["output"]:
            self._write_output(news["output"])
        for event in news["events"]:
            if event["type"] == "attempt_ended":
                continue  # this side records the attempt's end
            details = dict(event["details"], **({"rank": rank} if rank else {}))
            self.ctx.event(event["type"], details, self.stage.name, self.number)
            if event["type"] == "snapshot_committed":
                rotation.request()
        attempt = news["attempt"]
        if rank == 0 and attempt is not None:
            self._mirror(attempt)
        if rank == 0 and news["pause"] is not None and self._pause is not None:
            self._relay_pause(self._pause, news["pause"])
        if news["outcome"] is None:
            return None
        return Outcome(AttemptOutcome(news["outcome"]["kind"]), news["outcome"]["detail"])

    def _mirror(self, attempt: dict[str, Any]) -> None:
        """The node attempt's progress as this catalog shows it: restored snapshot, running."""
        catalog, run_id, stage = self.ctx.catalog, self.ctx.run_id, self.stage.name
        if attempt["pid"] is None or self._started:
            return
        self._started = True
        catalog.update_attempt(
            run_id,
            stage,
            self.number,
            pid=attempt["pid"],
            log_path=self.ws.log_path,
            restored_snapshot=attempt["restored_snapshot"],
            restored_step=attempt["restored_step"],
        )
        catalog.lifecycle.move(run_id, Phase.RUNNING, stage=stage)

    def _relay_pause(self, pause_id: int, pause: dict[str, Any]) -> None:
        values = {key: pause[key] for key in _RELAYED_PAUSE if key in pause}
        self.ctx.catalog.update_pause(pause_id, **values)

    def _write_output(self, data: bytes) -> None:
        private_folder(os.path.dirname(self.ws.log_path))
        with os.fdopen(create_private(self.ws.log_path, os.O_WRONLY | os.O_APPEND), "ab") as log:
            log.write(data)
        self.ctx.terminal.write(data.decode("utf-8", "replace"))
        self.ctx.terminal.flush()


def decide(ended: dict[int, Outcome], ranks: int, settled: bool) -> Outcome | None:
    """How the attempt ended, once it has: every rank succeeded (rank 0's outcome); a rank was
    interrupted (an interruption); or, once the ranks had ``RANKS_SETTLE_S`` to report, the
    lowest rank that ended otherwise."""
    unsuccessful = {r: o for r, o in ended.items() if o.kind != AttemptOutcome.SUCCEEDED}
    if not unsuccessful:
        return ended[0] if len(ended) == ranks else None
    interrupted = [r for r, o in unsuccessful.items() if o.kind == AttemptOutcome.LOST]
    if not (interrupted or settled or len(ended) == ranks or ranks == 1):
        return None
    rank = min(interrupted or unsuccessful)
    chosen = unsuccessful[rank]
    return chosen if ranks == 1 else Outcome(chosen.kind, f"rank {rank}: {chosen.detail}")
