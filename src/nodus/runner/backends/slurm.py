"""The Slurm backend, runner side: each attempt is a Slurm job, supervised through a folder.

The runner (on a login node, from cron there) submits one job per attempt with ``sbatch``
(:mod:`.slurm_jobs`); the job runs one node relay per node (:mod:`.slurm_node`), which starts
an ordinary node runner (:mod:`.node`) there. They talk through the attempt's job folder,
``<home>/work/<run>/<stage>/<attempt>/slurm/``, on a filesystem the nodes mount at the same path
(as home folders are on a Slurm cluster): this side writes each rank's spec and appends
controls; each rank appends its news (events, attempt row, pause, outcome) and its program's
output. What this side does with the news is every cluster backend's (:mod:`.cluster`).

The runner is not the job: a runner that dies leaves the job running, and the next runner
re-attaches to it (:meth:`SlurmAttempt.attach`: the attempt's row names its job) and goes on
reading the news from where the dead one stopped (``relay.json``). A job that ends, is
cancelled or requeued, or whose node is lost before every rank reported its end is a lost
attempt; Slurm's signal ahead of the job's end (``--signal``), which the program answered by
saving, is one too: the run continues from that snapshot in a new job.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import time
from typing import Any

from nodus._atomic import create_private, private_folder, write_json_atomic
from nodus.errors import UsageError
from nodus.runner.attempt.context import AttemptPlan, DriveState, RunContext
from nodus.runner.attempt.outcome import Outcome
from nodus.runner.backends import slurm_jobs
from nodus.runner.backends.cluster import ClusterAttempt, News
from nodus.runner.backends.node import read_from
from nodus.runner.catalog.phases import AttemptOutcome
from nodus.runner.workspace.layout import Workspace
from nodus.schemas import defaults

NODE_RELAY = "nodus.runner.backends.slurm_node"
"""The module each node's task runs (``python -m``)."""

_STATE_EVERY_S = 2.0  # how often the job's state is asked of Slurm
_LAST_NEWS_S = 3.0  # how long ranks get to report their end once their job ended
_RELEASE_S = 120.0  # how long a cancelled job gets to end (Slurm's KillWait is 30 s)
_OWN_END_S = 30.0  # how long a job whose ranks all ended gets to end on its own
_ENDING = frozenset({"RUNNING", "COMPLETING"})  # a requeued, pending job is cancelled at once


def job_folder(home: str, run_id: str, stage: str, number: int) -> str:
    """Where an attempt's job and the runner talk (on a filesystem the nodes share): in the
    attempt's folder of the home, so it goes with the run (``runs delete``)."""
    return os.path.join(Workspace.of(home, run_id, stage, number).attempt_folder, "slurm")


SUBMITTING = "SUBMITTING"
"""The job state said while ``sbatch`` runs: named, not yet numbered."""


def job_name(run_id: str, stage: str, number: int) -> str:
    """The attempt's job's name: one per attempt, so a job submitted unrecorded is found."""
    return f"nodus-{run_id}-{stage}-{number}"


JOB_OUTPUT = "slurm-%j.out"
"""The job's own output in its folder (``sbatch --output``; Slurm puts the job's id for ``%j``)."""
_STARTED = re.compile(re.escape(JOB_OUTPUT).replace("%j", r"(\d+)"))


def started_in(folder: str) -> str | None:
    """The id of the job that started in the attempt's ``folder``, from its output file.

    Slurm creates ``slurm-<id>.out`` there (``sbatch --output``) as the job starts, so a job
    whose runner died before writing its id down is known by it after Slurm has forgotten the
    job (squeue keeps an ended job for ``MinJobAge``, 300 s by default; cron comes back later).
    """
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return None
    ids = [m.group(1) for m in map(_STARTED.fullmatch, names) if m]
    return max(ids, key=int) if ids else None


def job_of(attempt: dict[str, Any]) -> dict[str, Any] | None:
    """An attempt row's Slurm job (the catalog keeps it as JSON): id, nodes, state."""
    job: dict[str, Any] | None = attempt.get("job")
    return job if job and job.get("scheduler") == "slurm" else None


class SlurmAttempt(ClusterAttempt):
    """One attempt of a stage as a Slurm job."""

    def __init__(
        self,
        ctx: RunContext,
        state: DriveState,
        plan: AttemptPlan,
        job: str | None = None,
        number: int | None = None,
    ) -> None:
        super().__init__(ctx, state, plan, number)
        self.folder = job_folder(ctx.home, ctx.run_id, plan.stage.name, self.number)
        self.job = job  # its Slurm job id, once submitted
        self.name = job_name(ctx.run_id, plan.stage.name, self.number)
        self._state: slurm_jobs.JobState | None = None
        self._state_at = 0.0
        self._ended_at: float | None = None  # when this side saw the job end
        self._offsets = {"news": [0] * self.ranks, "output": [0] * self.ranks}
        self._recorded: tuple[str, str] | None = None  # the job's state and nodes, as said
        self._asked: str | None = None  # the last control relayed: "cancel" or "pause"
        self._reported: set[int] = set()  # ranks whose outcome was read
        if self.attached:
            self._offsets = _read_json(os.path.join(self.folder, "relay.json")) or self._offsets

    @classmethod
    def attach(
        cls, ctx: RunContext, state: DriveState, plan: AttemptPlan, attempt: dict[str, Any]
    ) -> SlurmAttempt | None:
        """The attempt a dead runner left, if it has a job: supervised again. A job that ended
        meanwhile is read to its end as one that ends under its runner is: what its ranks said
        (their news stays in its folder) decides how the attempt ended, and a rank that never
        said makes it lost. None when no job was submitted (the attempt is then lost)."""
        job = job_of(attempt)
        if job is None:
            return None
        folder = job_folder(ctx.home, ctx.run_id, plan.stage.name, attempt["number"])
        try:  # the id written down; else the job Slurm knows by name; else its output's
            found_id = job["id"] or slurm_jobs.named(job["name"]) or started_in(folder)
            found = slurm_jobs.state(found_id) if found_id else None
        except slurm_jobs.SlurmError as error:
            raise UsageError(
                f"cannot tell whether slurm job {job['id'] or job['name']} of attempt "
                f"{attempt['number']} still runs ({error}); nothing was started: try again "
                "once Slurm answers"
            ) from None
        if found_id is None:
            return None  # never submitted, or never started and forgotten by Slurm
        said = found.state if found is not None else "gone"
        ctx.event("slurm_job_attached", {"job": found_id, "state": said}, plan.stage.name)
        attached = cls(ctx, state, plan, job=found_id, number=attempt["number"])
        if job["id"] is None:  # found by its name or its output: its id written down now
            attached._record(said, found.nodes if found is not None else "")
        return attached

    # --- the start ----------------------------------------------------------------------------

    def _start(self) -> Outcome | None:
        if self.attached:
            return None
        private_folder(self.folder)
        restore = self.chosen_restore()
        for rank in range(self.ranks):
            spec = self.spec(rank, restore, {})
            write_json_atomic(os.path.join(self.folder, f"spec-{rank}.json"), spec)
        script = os.path.join(self.folder, "job.sh")
        with open(script, "w", encoding="utf-8") as handle:
            relay = [sys.executable, "-m", NODE_RELAY, self.folder]
            handle.write(slurm_jobs.batch_script(relay, self.folder))
        output = os.path.join(self.folder, JOB_OUTPUT)
        argv = slurm_jobs.sbatch_argv(self.stage, self.name, output)
        # Named in the catalog before it exists: a runner that dies between sbatch and the next
        # write leaves a job the next runner still finds (by its name) and never runs twice.
        self._record(SUBMITTING, "")
        try:
            self.job = slurm_jobs.submit(argv, script)
        except slurm_jobs.SlurmError as error:
            return Outcome(AttemptOutcome.FAILED, f"sbatch refused the job: {error}")
        self._record("PENDING", "")
        self.ctx.event("slurm_job_submitted", {"job": self.job}, self.stage.name, self.number)
        return None

    def _record(self, job_state: str, nodes: str) -> None:
        """``runs get`` shows the attempt's job: its id, nodes and state."""
        if self._recorded == (job_state, nodes):
            return
        self._recorded = (job_state, nodes)
        job = {
            "scheduler": "slurm",
            "id": self.job,
            "name": self.name,
            "nodes": nodes,
            "state": job_state,
        }
        host = f"{nodes or 'pending'} (slurm job {self.job or self.name})"
        self.ctx.catalog.update_attempt(
            self.ctx.run_id, self.stage.name, self.number, job=job, host=host
        )

    # --- supervision --------------------------------------------------------------------------

    def _poll(self) -> list[News] | Outcome:
        before = {kind: list(at) for kind, at in self._offsets.items()}
        polled = [self._news(rank) for rank in range(self.ranks)]
        if self._offsets != before:  # where a re-attached runner reads on
            write_json_atomic(os.path.join(self.folder, "relay.json"), self._offsets, durable=False)
        self._reported |= {rank for rank, news in enumerate(polled) if news["outcome"]}
        return self._job_gone() or polled

    def _news(self, rank: int) -> News:
        """What rank ``rank`` appended since the last poll, as one piece of news."""
        news: News = {"events": [], "attempt": None, "pause": None, "output": b"", "outcome": None}
        path = os.path.join(self.folder, f"news-{rank}.jsonl")
        lines, self._offsets["news"][rank] = _lines_from(path, self._offsets["news"][rank])
        for line in lines:
            item = json.loads(line)
            news["events"] += item["events"]
            for key in ("attempt", "pause", "outcome"):
                news[key] = item[key] if item[key] is not None else news[key]
        output = os.path.join(self.folder, f"output-{rank}.log")
        news["output"] = read_from(output, self._offsets["output"][rank])
        self._offsets["output"][rank] += len(news["output"])
        return news

    def _job_gone(self) -> Outcome | None:
        """A lost attempt once its job no longer runs and a rank never said how it ended."""
        now = time.monotonic()
        if now - self._state_at >= _STATE_EVERY_S or self._ended_at is not None:
            self._state_at = now
            self._look_at_job()
        if self._ended_at is None or len(self._reported) == self.ranks:
            return None
        if self._state is not None and self._state.state == "PENDING" and self._asked_to_stop():
            return self._stopped_before_start()
        if now - self._ended_at < _LAST_NEWS_S:
            return None  # its ranks' last news may still be on its way
        said = self._state.state if self._state else "gone"
        reason = f" ({self._state.reason})" if self._state and self._state.reason != "None" else ""
        self.ctx.event(
            "node_lost",
            {
                "job": self.job,
                "state": said,
                "ranks": sorted(set(range(self.ranks)) - self._reported),
            },
            self.stage.name,
            self.number,
        )
        return Outcome(AttemptOutcome.LOST, f"slurm job {self.job} ended {said}{reason}")

    def _look_at_job(self) -> None:
        assert self.job is not None
        try:
            found = slurm_jobs.state(self.job)
        except slurm_jobs.SlurmError:
            return  # the controller did not answer: asked again at the next look
        waiting = found is not None and found.state == "PENDING"
        if waiting and self._asked_to_stop():  # a stop asked of a job that never started
            self._ended_at = self._ended_at or time.monotonic()
        if found is not None and self._state is not None and found == self._state:
            return
        self._state = found
        if found is not None:
            self._record(found.state, found.nodes)
        requeued = found is not None and found.restarts > 0
        if (found is None or not found.active or requeued) and self._ended_at is None:
            self._ended_at = time.monotonic()

    def _asked_to_stop(self) -> bool:
        return self._noticed or self._asked is not None

    def _stopped_before_start(self) -> Outcome:
        """A notice or a control that came while the job still waited: it never runs."""
        if self._asked == "cancel":
            return Outcome(AttemptOutcome.CANCELLED, "cancelled before its job started")
        if self._asked == "pause":
            return Outcome(AttemptOutcome.PAUSED, "paused before its job started")
        return Outcome(AttemptOutcome.PREEMPTED, "stopped before its job started")

    def _send_notice(self, signum: int) -> None:
        self._append_control({"signal": int(signum)})

    def _send_control(self, action: str, args: dict[str, Any]) -> None:
        self._append_control({"control": action, "args": args})
        self._asked = action

    def _append_control(self, control: dict[str, Any]) -> None:
        for rank in range(self.ranks):
            path = os.path.join(self.folder, f"controls-{rank}.jsonl")
            with os.fdopen(create_private(path, os.O_WRONLY | os.O_APPEND), "a") as handle:
                handle.write(json.dumps(control) + "\n")

    def _judge(self, outcome: Outcome) -> Outcome:
        """A program that stopped at a notice the runner never sent answered Slurm's: the job's
        end is near or came (time limit, preemption, ``scancel``, requeue), and the run goes on
        from the snapshot it saved, in a new job."""
        if outcome.kind is AttemptOutcome.PREEMPTED and not self._noticed:
            return Outcome(AttemptOutcome.LOST, f"slurm job {self.job}: {outcome.detail}")
        return outcome

    # --- the end ------------------------------------------------------------------------------

    def _release(self) -> None:
        """Let a job whose ranks all reported end on its own, cancel one that still runs, and
        wait until Slurm ended it: nothing of the attempt outlives it."""
        if self.job is None:
            return
        found = self._wait_for_job(0)
        if found is not None and found.state in _ENDING and len(self._reported) == self.ranks:
            # its step is ending: it needs no cancel, unless Slurm requeues it meanwhile
            found = self._wait_for_job(_OWN_END_S, while_in=_ENDING)
        if found is not None:
            slurm_jobs.cancel(self.job)
            self._wait_for_job(_RELEASE_S)
        for rank in range(self.ranks):  # the attempt's log holds what they held
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(self.folder, f"output-{rank}.log"))

    def _wait_for_job(
        self, seconds: float, while_in: frozenset[str] | None = None
    ) -> slurm_jobs.JobState | None:
        """The job's state while it still runs after ``seconds`` (or once its state is not one
        of ``while_in``); None once it ended."""
        assert self.job is not None
        deadline = time.monotonic() + seconds
        while True:
            found = _quietly_state(self.job)
            if found is not None:
                self._record(found.state, found.nodes)
            if found is None or not found.active:
                return None
            if time.monotonic() >= deadline or (while_in and found.state not in while_in):
                return found
            time.sleep(defaults.POLL_S)


def cancel_left(attempt: dict[str, Any]) -> None:
    """``scancel`` the job of an attempt a dead runner left, and wait until it ended."""
    job = job_of(attempt)
    if job is None:
        return
    try:
        found_id = job["id"] or slurm_jobs.named(job["name"])
    except slurm_jobs.SlurmError:
        found_id = None
    if found_id is None:
        return
    slurm_jobs.cancel(found_id)
    deadline = time.monotonic() + _RELEASE_S
    while time.monotonic() < deadline:
        found = _quietly_state(found_id)
        if found is None or not found.active:
            return
        time.sleep(defaults.POLL_S)


def _quietly_state(job: str) -> slurm_jobs.JobState | None:
    try:
        return slurm_jobs.state(job)
    except slurm_jobs.SlurmError:
        return None


def _lines_from(path: str, offset: int) -> tuple[list[str], int]:
    """Whole lines appended to ``path`` after ``offset``, and the offset past them."""
    data = read_from(path, offset)
    end = data.rfind(b"\n") + 1
    text = data[:end].decode("utf-8")
    return [line for line in text.splitlines() if line], offset + end


def _read_json(path: str) -> Any:
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


__all__ = [
    "NODE_RELAY",
    "SUBMITTING",
    "SlurmAttempt",
    "cancel_left",
    "job_folder",
    "job_name",
    "job_of",
]
