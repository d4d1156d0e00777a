"""Hangs end and recover under hf-trainer-v1 (``[execution] hang_timeout``).

The quick-start at a constant learning rate (``finish_then_wait.py``, ``max_steps`` 17) with a
short explicit timeout. A first attempt that stops making progress inside training (at the end
of step 14, after the saves of steps 6 and 12) is ended as hung and recovered from the newest
snapshot: the run ends with the weights, optimizer and scheduler state of an uninterrupted bare
run. A first attempt that hangs after ``train()`` returned, once its final snapshot was
committed, is ended too, and the stage succeeds: training had finished.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hf_helpers import PROGRAM_ENV, PROGRAMS, once_per_session, quickstart_copy
from runner_e2e_helpers import Project

from nodus.qualify import weights_hash
from polling import WAIT_S

pytestmark = [pytest.mark.hf, pytest.mark.slow]

PROGRAM = "finish_then_wait.py"
MAX_STEPS = 17  # as tests/hf/test_finished_restore.py, whose bare run this shares
TIMEOUT = "10s"  # steps report every second at most; start-up has its own allowance


@pytest.fixture(scope="module")
def bare(tmp_path_factory) -> dict:
    """The program run bare (no nodus), uninterrupted: what it holds after ``train()``."""
    root = tmp_path_factory.mktemp("bare-hang")
    return once_per_session([PROGRAM, MAX_STEPS], lambda: _bare_train(root))


def _bare_train(root: Path) -> dict:
    copy = quickstart_copy(root, "code")
    proc = subprocess.run(
        [sys.executable, str(PROGRAMS / PROGRAM)],
        cwd=copy,
        capture_output=True,
        text=True,
        env={**os.environ, **PROGRAM_ENV, "QUICKSTART_MAX_STEPS": str(MAX_STEPS)},
        timeout=WAIT_S,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return _after_train(copy / "out" / "model")


def _after_train(model: Path) -> dict:
    after = json.loads((model / "after_train.json").read_text())
    return {**after, "weights": weights_hash(str(model))}


def _project(tmp_path: Path, **env: str) -> Project:
    return Project(
        tmp_path,
        program=PROGRAM,
        env={"QUICKSTART_MAX_STEPS": str(MAX_STEPS), **env},
        write_delay="0",
        execution={"grace_period": 3, "hang_timeout": TIMEOUT},
    )


def _outputs(project: Project, key: str) -> dict:
    target = project.root / "outputs"
    proc = project.nodus("runs", "outputs", key, "--to", str(target))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return _after_train(target / "out" / "model")


def test_a_trainer_that_stops_making_progress_is_ended_and_recovers_equal(tmp_path, bare):
    project = _project(tmp_path, HANG_AT_STEP="14")
    proc = project.nodus("run", str(project.file), "--key", "hang", timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    view = project.get("hang")
    assert view["phase"] == "SUCCEEDED"
    first, second = view["stages"][0]["attempts"]
    assert first["outcome"] == "lost"
    assert first["detail"].startswith("hung: no progress for "), first["detail"]
    assert second["outcome"] == "succeeded"
    assert second["restored_step"] == 12 == max(project.committed_steps("hang", 1))
    (hang,) = [e for e in view["events"] if e["type"] == "hang_detected"]
    assert hang["attempt"] == 1 and hang["timeout_seconds"] == 10
    assert hang["final_snapshot_step"] is None
    assert _outputs(project, "hang") == bare


def test_a_hang_after_the_final_snapshot_finishes_the_stage(tmp_path, bare):
    project = _project(tmp_path, FINISH_WAIT="1")
    proc = project.nodus("run", str(project.file), "--key", "fin", timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "training had finished, so the stage succeeds" in proc.stdout
    # the narration says the attempt that succeeded so, as it says interruptions
    assert "nodus: attempt 1 succeeded (pid " in proc.stderr
    assert f"hung after its final snapshot (step {MAX_STEPS})" in proc.stderr
    view = project.get("fin")
    assert view["phase"] == "SUCCEEDED"
    (only,) = view["stages"][0]["attempts"]
    assert only["outcome"] == "succeeded"
    assert only["detail"].startswith(f"hung after its final snapshot (step {MAX_STEPS})")
    (hang,) = [e for e in view["events"] if e["type"] == "hang_detected"]
    assert hang["final_snapshot_step"] == MAX_STEPS
    assert max(project.committed_steps("fin")) == MAX_STEPS
    assert _outputs(project, "fin") == bare
