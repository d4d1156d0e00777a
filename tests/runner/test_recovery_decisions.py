"""The recovery decisions and the outcome classification, branch by branch, over plain data.

What follows an attempt (:func:`nodus.runner.recovery.decisions.decide`), which snapshots the
next one tries (:func:`~nodus.runner.recovery.decisions.restore_candidates`) and how a program's
end is told (:func:`nodus.runner.attempt.outcome.classify`) read no catalog, store or process:
each case here is a row of facts and the decision a user would see follow from it. The runs
that carry the decisions out end to end are in test_runner_recovery.py, test_torn_checkpoints.py,
test_runner_pause.py and test_failures_named.py.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass, field

import pytest

from nodus.runner.attempt.outcome import Exit, Outcome, classify
from nodus.runner.catalog.phases import AttemptOutcome
from nodus.runner.processes.messages import Loss
from nodus.runner.recovery import suspects
from nodus.runner.recovery.decisions import (
    Action,
    Restore,
    Restored,
    decide,
    first_restore,
    judges_restore,
    restore_candidates,
)
from nodus.schemas.resolved import ResolvedContinuity, ResolvedExecution, ResolvedStage

RUN = "run_x"
SUCCEEDED = AttemptOutcome.SUCCEEDED
FAILED = AttemptOutcome.FAILED
LOST = AttemptOutcome.LOST
PREEMPTED = AttemptOutcome.PREEMPTED
PAUSED = AttemptOutcome.PAUSED
CANCELLED = AttemptOutcome.CANCELLED


def stage(mode: str = "checkpointed", resume: bool = True, max_recoveries: int = 3):
    return ResolvedStage(
        name="main",
        command=("python",),
        code="/",
        env={},
        outputs=(),
        integration=None,
        continuity=ResolvedContinuity(mode, resume, ("state",)),
        execution=ResolvedExecution(50, False, 1, 3, max_recoveries, 5.0, 7),
    )


@dataclass
class Snap:
    """A committed snapshot as the decisions read it (the fields of a store manifest)."""

    id: str
    step: int
    attempt: int = 1
    kinds: tuple[str, ...] = ("state",)
    files: list = field(default_factory=list)
    role: str = "checkpoint"

    @property
    def created(self) -> str:
        return f"2026-01-01T00:00:{self.step:02d}"


def suspect_event(snapshot: str, step: int) -> dict:
    return {
        "type": suspects.EVENT,
        "stage": "main",
        "details": {"snapshot": snapshot, "step": step},
    }


def commit_event(snapshot: str, step: int) -> dict:
    details = {"snapshot": snapshot, "step": step}
    return {"type": "snapshot_committed", "stage": "main", "details": details}


OLDER = (Snap("ckpt_10", 10),)
CRASHED = Outcome(FAILED, "python exited with status 1", program_failed=True)


def restored(**facts) -> Restored:
    """The snapshot at step 30 restored, nothing committed since, an older one at step 10."""
    return Restored(**{"snapshot": "ckpt_30", "step": 30, "error": "boom", "older": OLDER, **facts})


# --- what follows an attempt --------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """An attempt that ``ended`` so, and what follows: ``action``, the stage's end ``kind`` when
    the run stops, ``words`` of the detail (the phase's message), the next ``restore``."""

    ended: Outcome
    action: Action
    kind: AttemptOutcome | None = None
    words: str = ""
    restore: Restore | None = None
    stage: ResolvedStage = field(default_factory=stage)
    recoveries: int = 0
    facts: Restored | None = None  # what was restored, when the decision judges it


KILLED_BY = Outcome(LOST, "killed by SIGKILL, which nodus did not send")
REFUSED = Outcome(FAILED, "python exited with status 1: hf-trainer-v1 refused this attempt")
NEWEST = Restore(newest=True)
DECISIONS = {
    "succeeded: the next stage": Case(
        Outcome(SUCCEEDED, "exit status 0"), Action.NEXT_STAGE, words="exit status 0"
    ),
    "killed: recover from the newest snapshot": Case(
        KILLED_BY, Action.RECOVER, words="killed by SIGKILL", restore=NEWEST
    ),
    "killed, restartable: recover from the source": Case(
        KILLED_BY, Action.RECOVER, restore=Restore(), stage=stage("restartable")
    ),
    "its runner died: recover": Case(
        Outcome(LOST, "its runner died"),
        Action.RECOVER,
        words="its runner died",
        restore=NEWEST,
        recoveries=2,
    ),
    "killed, resume_on_interruption false: resumable by hand": Case(
        KILLED_BY,
        Action.STOP,
        PREEMPTED,
        f"resume_on_interruption is false: resume it with `nodus runs resume {RUN}`",
        stage=stage(resume=False),
    ),
    "killed, max_recoveries used up: fails": Case(
        KILLED_BY,
        Action.STOP,
        FAILED,
        "interrupted 4 times (killed by SIGKILL, which nodus did not send); max_recoveries = 3",
        recoveries=3,
    ),
    "killed, max_recoveries 0: fails at once": Case(
        KILLED_BY,
        Action.STOP,
        FAILED,
        "max_recoveries = 0 automatic recoveries are used up",
        stage=stage(max_recoveries=0),
    ),
    "a preemption notice: stops, resumable": Case(
        Outcome(PREEMPTED, "runner received SIGTERM (preemption notice)"),
        Action.STOP,
        PREEMPTED,
        "preemption notice",
    ),
    "paused": Case(Outcome(PAUSED, "paused at step 20"), Action.STOP, PAUSED, "step 20"),
    "cancelled": Case(
        Outcome(CANCELLED, "cancelled by `nodus runs cancel`"), Action.STOP, CANCELLED
    ),
    "nothing intact: fails, never starts over": Case(
        Outcome(FAILED, "no snapshot of stage 'main' could be restored"),
        Action.STOP,
        FAILED,
        "could be restored",
    ),
    "a refused resume says nothing of the snapshot": Case(
        REFUSED, Action.STOP, FAILED, "refused", facts=restored()
    ),
    "a restartable stage's failure: no snapshot to judge": Case(
        CRASHED, Action.STOP, FAILED, "status 1", stage=stage("restartable"), facts=restored()
    ),
    "failed after a fresh start": Case(CRASHED, Action.STOP, FAILED, "status 1", facts=Restored()),
    "failed after restoring the parent's snapshot: not ours to judge": Case(
        CRASHED, Action.STOP, FAILED, "status 1", facts=restored(from_parent=True)
    ),
    "failed after committing a snapshot of its own: it continued": Case(
        CRASHED, Action.STOP, FAILED, "status 1", facts=restored(committed=True)
    ),
    "failed after a restore: suspect, an older snapshot": Case(
        CRASHED,
        Action.RECOVER,
        words="restores of ckpt_30 (step 30) failed: stepping back to step 10",
        restore=Restore(newest=True, older_than="ckpt_30"),
        facts=restored(),
    ),
    "failed after a restore, nothing older": Case(
        CRASHED,
        Action.STOP,
        FAILED,
        "status 1; restores of ckpt_30 (step 30) failed and no older snapshot is left",
        facts=restored(older=()),
    ),
    "failed after a restore, max_recoveries used up": Case(
        CRASHED,
        Action.STOP,
        FAILED,
        "max_recoveries = 2 automatic recoveries are used up",
        stage=stage(max_recoveries=2),
        recoveries=2,
        facts=restored(),
    ),
}


@pytest.mark.parametrize("case", DECISIONS.values(), ids=DECISIONS.keys())
def test_what_follows_an_attempt(case: Case):
    decision = decide(case.stage, case.ended, case.recoveries, RUN, case.facts)
    assert (decision.action, decision.kind) == (case.action, case.kind)
    assert case.words in decision.detail
    assert decision.restore == case.restore
    if case.action is Action.STOP:  # every stop lands in a phase where the run stops
        assert case.kind is not None and case.kind.stops_run is not None


def test_a_suspect_is_named_before_the_run_steps_back_or_fails():
    back = decide(stage(), CRASHED, 0, RUN, restored())
    assert back.suspect == {
        "snapshot": "ckpt_30",
        "step": 30,
        "error": "boom",
        "exit": "python exited with status 1",
    }
    assert decide(stage(), CRASHED, 0, RUN, restored(older=())).suspect == back.suspect
    for facts in (Restored(), restored(from_parent=True), restored(committed=True)):
        assert decide(stage(), CRASHED, 0, RUN, facts).suspect is None


def test_stepping_back_stops_after_max_step_back_suspects_in_a_row():
    row = [suspect_event(f"ckpt_{n}", n) for n in range(40, 40 + suspects.MAX_STEP_BACK)]
    stopped = decide(stage(max_recoveries=99), CRASHED, 0, RUN, restored(row=row))
    assert stopped.action is Action.STOP and stopped.kind is FAILED
    assert f"at most {suspects.MAX_STEP_BACK} are stepped past" in stopped.detail
    # a commit ends the row: earlier suspects no longer count against this one
    fresh = [*row, commit_event("ckpt_30", 30)]
    assert decide(stage(max_recoveries=99), CRASHED, 0, RUN, restored(row=fresh)).action is (
        Action.RECOVER
    )


def test_only_a_programs_own_failure_in_a_checkpointed_stage_judges_its_restore():
    assert judges_restore(stage(), CRASHED)
    assert not judges_restore(stage("restartable"), CRASHED)
    assert not judges_restore(stage(), Outcome(FAILED, "could not start"))
    assert not judges_restore(stage(), Outcome(LOST, "killed", program_failed=True))


# --- what the first attempt of a drive restores -------------------------------------------------

# (stage, what was asked: None unless `nodus runs resume`, the stage has attempts) → restore
FIRST = {
    "a new stage: the source": (stage(), None, False, Restore()),
    "a stage with attempts: the newest": (stage(), None, True, NEWEST),
    "a restartable stage: the source": (stage("restartable"), None, True, Restore()),
    "runs resume: the newest, or fail loudly": (
        stage(),
        Restore(by_hand=True),
        True,
        Restore(newest=True, by_hand=True),
    ),
    "runs resume, restartable": (
        stage("restartable"),
        Restore(by_hand=True),
        True,
        Restore(by_hand=True),
    ),
    "runs resume --step 20": (stage(), Restore(step=20, by_hand=True), True, None),
}


@pytest.mark.parametrize("stage_, asked, attempted, expected", FIRST.values(), ids=FIRST.keys())
def test_what_the_first_attempt_restores(stage_, asked, attempted, expected):
    assert first_restore(stage_, asked, attempted) == (expected or asked)


# --- which snapshots an attempt tries -----------------------------------------------------------

OWN = [Snap("ckpt_10", 10), Snap("ckpt_20", 20), Snap("ckpt_30", 30)]
SUSPECT_30 = [suspect_event("ckpt_30", 30)]
GONE = [Snap("ckpt_10", 10, kinds=("weights",), files=[])]  # its training state deleted
# (restore, the stage's snapshots, suspect events, continues the parent) → steps, the parent's
CANDIDATES = {
    "the newest first": (NEWEST, OWN, [], False, [30, 20, 10], False),
    "a suspect is passed over": (NEWEST, OWN, SUSPECT_30, False, [20, 10], False),
    "a step back only steps back": (
        Restore(newest=True, older_than="ckpt_20"),
        OWN,
        [],
        False,
        [10],
        False,
    ),
    "a step back from the oldest finds nothing": (
        Restore(newest=True, older_than="ckpt_10"),
        OWN,
        [],
        False,
        [],
        False,
    ),
    "by hand at a step, even a suspect one": (
        Restore(step=30),
        OWN,
        SUSPECT_30,
        False,
        [30],
        False,
    ),
    "by hand at a step nothing holds": (Restore(step=25), OWN, [], False, [], False),
    "nothing asked: the source": (Restore(), OWN, [], False, [], False),
    "training state gone: nothing to try": (NEWEST, GONE, [], False, [], False),
    "a branch with nothing of its own: the parent's": (NEWEST, [], [], True, [], True),
    "a branch's first attempt: the parent's": (Restore(), [], [], True, [], True),
    "a branch with a snapshot of its own: its own": (NEWEST, OWN, [], True, [30, 20, 10], False),
    "a branch's own suspect passed over: the parent's": (
        NEWEST,
        [Snap("ckpt_30", 30)],
        SUSPECT_30,
        True,
        [],
        True,
    ),
}


@pytest.mark.parametrize(
    "restore, manifests, events, continues_parent, steps, parent",
    CANDIDATES.values(),
    ids=CANDIDATES.keys(),
)
def test_which_snapshots_an_attempt_tries(
    restore, manifests, events, continues_parent, steps, parent
):
    chosen = restore_candidates(restore, manifests, events, "main", continues_parent)
    assert [m.step for m in chosen.own] == steps
    assert chosen.parent is parent


def test_a_later_attempts_snapshot_is_newer_than_a_higher_step():
    snaps = [Snap("ckpt_a", 50, attempt=1), Snap("ckpt_b", 20, attempt=2)]
    chosen = restore_candidates(NEWEST, snaps, [], "main", False)
    assert [m.id for m in chosen.own] == ["ckpt_b", "ckpt_a"]


# --- how a program's end is told ----------------------------------------------------------------

CHILD = Loss(pid=12, command="python train.py", parent=1, signal=signal.SIGKILL)
OOM_CHILD = Loss(pid=12, command="python", parent=1, signal=signal.SIGKILL, oom=True)
SIGKILL, SIGTERM = -signal.SIGKILL, -signal.SIGTERM
# what the program's end showed → how the attempt ended, words of its detail, program_failed
CLASSIFIED = {
    "exit 0": (Exit(0, "python"), SUCCEEDED, "exit status 0", False),
    "a non-zero exit: the program failed": (
        Exit(1, "python"),
        FAILED,
        "python exited with status 1",
        True,
    ),
    "a refused attempt: not the program's failure": (
        Exit(2, "python", refusal=": hf-trainer-v1 refused this attempt: world size"),
        FAILED,
        "python exited with status 2: hf-trainer-v1 refused this attempt: world size",
        False,
    ),
    "a launcher whose child was killed": (
        Exit(137, "torchrun", loss=CHILD),
        LOST,
        "process 12 (python train.py) was killed by SIGKILL, which nodus did not send; "
        "torchrun then exited with status 137",
        False,
    ),
    "a launcher whose child was OOM-killed": (
        Exit(1, "sh", loss=OOM_CHILD),
        LOST,
        "killed by SIGKILL (an OOM kill)",
        False,
    ),
    "killed by a foreign signal": (
        Exit(SIGKILL, "python"),
        LOST,
        "killed by SIGKILL, which nodus did not send",
        False,
    ),
    "OOM-killed": (
        Exit(SIGKILL, "python", oom=True),
        LOST,
        "killed by SIGKILL (an OOM kill), which nodus did not send",
        False,
    ),
    "stopped by nodus": (
        Exit(SIGTERM, "python", sent=(signal.SIGTERM,)),
        FAILED,
        "stopped by SIGTERM from nodus",
        False,
    ),
    "its supervisor lost, even after exit 0": (
        Exit(0, "python", supervisor_lost="killed by SIGKILL"),
        LOST,
        "the attempt's supervisor was lost (killed by SIGKILL)",
        False,
    ),
}


@pytest.mark.parametrize(
    "ended, kind, detail, program_failed", CLASSIFIED.values(), ids=CLASSIFIED.keys()
)
def test_how_a_programs_end_is_told(ended, kind, detail, program_failed):
    outcome = classify(ended)
    assert (outcome.kind, outcome.program_failed) == (kind, program_failed)
    assert detail in outcome.detail
