"""Issue 27 (1): a restored finished state finishes.

The quick-start at a constant learning rate with ``max_steps`` off an epoch boundary (12 steps
per epoch) is interrupted after its final snapshot (step ``MAX_STEPS``) was committed, while it
does its own work after ``train()``: the program SIGKILLed, the runner SIGKILLed and the run
continued by ``nodus run --key``, or the runner told to stop (SIGTERM) and ``runs resume``. The
restored attempt's ``train()`` runs no update (the Trainer would train step ``MAX_STEPS + 1``
before it looks at ``max_steps``): the run ends with ``global_step == MAX_STEPS`` and the weights,
optimizer and scheduler state of an uninterrupted bare run, and no snapshot past ``MAX_STEPS``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from hf_helpers import PROGRAM_ENV, PROGRAMS, once_per_session, quickstart_copy
from runner_e2e_helpers import Project, kill_program

from nodus import protocol
from nodus.qualify import weights_hash
from polling import WAIT_S, wait_for

pytestmark = [pytest.mark.hf, pytest.mark.slow]

PROGRAM = "finish_then_wait.py"
MAX_STEPS = 17  # inside epoch 1: the Trainer's resume would draw a batch of that epoch
KEY = "fin"


def _env(max_steps: int) -> dict[str, str]:
    return {"QUICKSTART_MAX_STEPS": str(max_steps)}


@pytest.fixture(scope="module")
def bare(tmp_path_factory) -> dict:
    """The program run bare (no nodus), uninterrupted: what it holds after ``train()``."""
    return _bare_run(tmp_path_factory.mktemp("bare-finish"), MAX_STEPS)


def _bare_run(root: Path, max_steps: int) -> dict:
    """Trained once per session for each ``max_steps`` (shared by xdist's workers)."""
    return once_per_session([PROGRAM, max_steps], lambda: _bare_train(root, max_steps))


def _bare_train(root: Path, max_steps: int) -> dict:
    copy = quickstart_copy(root, "code")
    proc = subprocess.run(
        [sys.executable, str(PROGRAMS / PROGRAM)],
        cwd=copy,
        capture_output=True,
        text=True,
        env={**os.environ, **PROGRAM_ENV, **_env(max_steps)},
        timeout=WAIT_S,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return _after_train(copy / "out" / "model")


def _after_train(model: Path) -> dict:
    after = json.loads((model / "after_train.json").read_text())
    return {**after, "weights": weights_hash(str(model))}


def _project(tmp_path: Path, max_steps: int = MAX_STEPS, **env: str) -> Project:
    return Project(
        tmp_path,
        program=PROGRAM,
        env={**_env(max_steps), "FINISH_WAIT": "1", **env},
        write_delay="0",
        execution={"grace_period": 3},
    )


def _waiting_after_the_final_snapshot(project: Project, runner, max_steps: int = MAX_STEPS) -> dict:
    """Attempt 1 once its snapshot of max_steps is committed and it waits after train()."""
    attempt = wait_for(lambda: project.running(KEY, 1), "attempt 1", runner)
    wait_for(
        lambda: max_steps in project.committed_steps(KEY, 1),
        f"the final snapshot (step {max_steps})",
        runner,
    )
    wait_for(
        lambda: "program: train() returned" in project.log_of(attempt),
        "the program past train()",
        runner,
    )
    return attempt


def _finished_like_the_bare_run(
    project: Project, bare: dict, restored_attempt: int, max_steps: int = MAX_STEPS
) -> dict:
    view = project.get(KEY)
    assert view["phase"] == "SUCCEEDED"
    attempts = view["stages"][0]["attempts"]
    assert attempts[-1]["number"] == restored_attempt
    assert attempts[-1]["restored_step"] == max_steps
    assert max(project.committed_steps(KEY)) == max_steps  # never a step past it
    assert not project.committed_steps(KEY, restored_attempt)  # nothing new to save
    log = project.log_of(project.attempts(KEY)[-1])
    assert "{'loss':" not in log  # not one update
    finished = [e for e in view["events"] if e["type"] == protocol.EVENT_RESTORED_FINISHED]
    assert [(e["attempt"], e["step"], e["max_steps"]) for e in finished] == [
        (restored_attempt, max_steps, max_steps)
    ]
    target = project.root / "outputs"
    proc = project.nodus("runs", "outputs", KEY, "--to", str(target))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    after = _after_train(target / "out" / "model")
    assert after["returned_step"] == after["global_step"] == max_steps
    assert after == bare  # weights, optimizer and scheduler state bit-identical
    return view


def test_program_killed_after_the_final_snapshot_finishes_without_another_step(tmp_path, bare):
    project = _project(tmp_path, RESUME_FROM_LATER="out/trainer/checkpoint-5")
    runner = project.start("run", str(project.file), "--key", KEY)
    kill_program(_waiting_after_the_final_snapshot(project, runner))
    assert runner.wait(timeout=300) == 0
    view = _finished_like_the_bare_run(project, bare, 2)
    outcomes = [a["outcome"] for a in view["stages"][0]["attempts"]]
    assert outcomes == ["lost", "succeeded"]
    # The program's own resume_from_checkpoint gave way to the newer restored snapshot.
    overridden = [e for e in view["events"] if e["type"] == protocol.EVENT_RESUME_OVERRIDDEN]
    assert [(e["attempt"], e["given"], e["step"]) for e in overridden] == [
        (2, "out/trainer/checkpoint-5", MAX_STEPS)
    ]
    assert overridden[0]["restored"].endswith(f"state/checkpoint-{MAX_STEPS}")


def test_runner_sigkilled_after_the_final_snapshot_then_run_key_finishes(tmp_path, bare):
    project = _project(tmp_path)
    runner = project.start("run", str(project.file), "--key", KEY)
    program = _waiting_after_the_final_snapshot(project, runner)
    os.kill(runner.pid, signal.SIGKILL)
    runner.wait(timeout=60)
    wait_for(lambda: not project.running(KEY, 1), "the program to die with its runner")
    again = project.nodus("run", str(project.file), "--key", KEY, timeout=300)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    view = _finished_like_the_bare_run(project, bare, 2)
    assert view["stages"][0]["attempts"][0]["detail"] == "its runner died"
    assert program["number"] == 1


def test_sigterm_after_the_final_snapshot_then_runs_resume_finishes(tmp_path, bare):
    project = _project(tmp_path)
    runner = project.start("run", str(project.file), "--key", KEY)
    _waiting_after_the_final_snapshot(project, runner)
    os.kill(runner.pid, signal.SIGTERM)  # a preemption notice: no boundary left to save at
    assert runner.wait(timeout=120) == 3
    resumed = project.nodus("runs", "resume", KEY, timeout=300)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    _finished_like_the_bare_run(project, bare, 2)


def test_restored_at_an_epoch_boundary_at_the_end_finishes_too(tmp_path_factory, tmp_path):
    """At an epoch boundary the Trainer draws no batch from a finished state by itself; the
    restored RNG states and the event come at the end of train() then."""
    boundary = 24  # the end of epoch 1
    bare = _bare_run(tmp_path_factory.mktemp("bare-boundary"), boundary)
    project = _project(tmp_path, boundary)
    runner = project.start("run", str(project.file), "--key", KEY)
    kill_program(_waiting_after_the_final_snapshot(project, runner, boundary))
    assert runner.wait(timeout=300) == 0
    _finished_like_the_bare_run(project, bare, 2, boundary)
