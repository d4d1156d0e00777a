"""Point 8 end to end: the unmodified quick-start program under real `nodus run` processes.

These tests prove the whole product as a user meets it: the runner supervises, captures and
recovers, and the final weights a user downloads with `nodus runs outputs` equal those of a bare
`python train.py` (the session's ``bare_hash``).
"""

from __future__ import annotations

import itertools
import os
import random
import signal

import pytest
from runner_e2e_helpers import (
    STEPS,
    Project,
    kill_program,
    steps_logged,
)

from nodus import protocol
from polling import wait_for

pytestmark = [pytest.mark.hf, pytest.mark.slow]


def test_program_sigkilled_three_times_once_mid_save_recovers_to_the_bare_weights(
    tmp_path, bare_hash
):
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    first = rng.choice([6, 12, 18])  # inside epoch 0, at the end of epoch 0, inside epoch 1
    second = rng.choice([24, 30])  # at the end of epoch 1, inside epoch 2
    mid_save = rng.choice([s for s in (30, 36, 42) if s > second])  # killed while it is written
    why = f"random seed {seed}: killed after {first}, after {second}, during the save of {mid_save}"
    project = Project(tmp_path)
    runner = project.start("run", str(project.file), "--key", "a")

    _kill_after_commit(project, runner, 1, first)
    _kill_after_commit(project, runner, 2, second)
    attempt = wait_for(lambda: project.running("a", 3), "attempt 3", runner)
    saving = wait_for(
        lambda: _building_from(project, 3, mid_save),
        f"attempt 3 writing the save of step {mid_save}",
        runner,
    )
    kill_program(attempt)
    in_flight = project.saving("a", 3)  # still half-built after the kill: it landed mid-save
    published = os.listdir(project.copy_of("a", 3) / protocol.STATE_DIR)  # gone after attempt 4
    recorded = os.path.exists(project.control("a", 3).save_record(saving))

    assert runner.wait(timeout=300) == 0, why
    view = project.get("a")
    attempts = view["stages"][0]["attempts"]
    assert view["phase"] == "SUCCEEDED"
    assert [a["outcome"] for a in attempts] == ["lost"] * 3 + ["succeeded"], why
    assert all("SIGKILL" in a["detail"] for a in attempts[:3])
    snapshots = project.snapshots("a")
    for before, after in itertools.pairwise(attempts):  # each recovery took the newest commit
        newest = max(m.step for m in snapshots if m.attempt <= before["number"])
        assert after["restored_step"] == newest, why
    # the save interrupted mid-write was never committed and never restored from
    assert in_flight == saving, f"{why}: the kill missed the save"
    # ... and it stayed under .nodus/tmp: neither published in state/ nor recorded as saved
    assert protocol.checkpoint_folder(saving) not in published and not recorded, why
    assert all(m.attempt == 4 for m in snapshots if m.step == saving), why
    assert attempts[3]["restored_step"] < saving
    assert project.committed_steps("a", 4)[-1] == STEPS
    assert project.outputs_hash("a") == bare_hash, why
    # every restored attempt went on from its restore: protected, never "not resuming"
    assert not [e for e in view["events"] if e["type"] == "restore_ignored"], why
    assert view["protection"]["state"] == "protected", why


def _kill_after_commit(project: Project, runner, number: int, step: int) -> None:
    """SIGKILL attempt ``number`` of run "a" once it has committed the snapshot of ``step``."""
    attempt = wait_for(lambda: project.running("a", number), f"attempt {number}", runner)
    wait_for(
        lambda: step in project.committed_steps("a", number),
        f"attempt {number} committing step {step}",
        runner,
    )
    kill_program(attempt)


def _building_from(project: Project, number: int, step: int) -> int | None:
    """The step attempt ``number`` of run "a" is writing, once it is ``step`` or later."""
    building = project.saving("a", number)
    return building if building is not None and building >= step else None


def test_sigterm_to_the_runner_saves_at_the_boundary_and_resume_loses_no_step(tmp_path, bare_hash):
    seed = random.randrange(1 << 30)
    notice_after = random.Random(seed).choice([6, 12, 18, 24, 30])
    why = f"random seed {seed}: SIGTERM after the commit of step {notice_after}"
    project = Project(tmp_path)
    runner = project.start("run", str(project.file), "--key", "b")
    wait_for(
        lambda: notice_after in project.committed_steps("b", 1),
        f"step {notice_after} committed",
        runner,
    )
    runner.send_signal(signal.SIGTERM)

    assert runner.wait(timeout=300) == 3, why
    view = project.get("b")
    assert (view["phase"], view["exit_status"]) == ("INTERRUPTED", 3)
    interrupted = view["stages"][0]["attempts"][0]
    assert interrupted["outcome"] == "preempted"
    reached = steps_logged(project.log_of(interrupted))  # the last step the program trained
    assert reached >= notice_after
    assert project.committed_steps("b", 1)[-1] == reached, why  # saved where it stopped

    resumed = project.nodus("runs", "resume", "b")
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    view = project.get("b")
    assert view["phase"] == "SUCCEEDED"
    assert view["stages"][0]["attempts"][1]["restored_step"] == reached, why  # zero steps lost
    assert project.outputs_hash("b") == bare_hash, why


def test_dataset_changed_between_attempts_fails_the_recovery_naming_it(tmp_path):
    data = tmp_path / "data" / "examples.txt"  # outside the code folder: not in the source
    data.parent.mkdir()
    data.write_text("96")
    project = Project(
        tmp_path, program="external_dataset.py", env={"QUICKSTART_DATA_FILE": str(data)}
    )
    runner = project.start("run", str(project.file), "--key", "c")
    attempt = wait_for(lambda: project.running("c", 1), "attempt 1", runner)
    wait_for(lambda: project.committed_steps("c", 1), "a committed snapshot", runner)
    data.write_text("80")
    kill_program(attempt)

    assert runner.wait(timeout=300) == 1
    view = project.get("c")
    assert (view["phase"], view["exit_status"]) == ("FAILED", 1)
    first, second = view["stages"][0]["attempts"]
    assert (first["outcome"], second["outcome"]) == ("lost", "failed")
    assert second["restored_step"] == project.committed_steps("c", 1)[-1]
    refused = [e for e in view["events"] if e["type"] == "integration_refused"]
    assert [e["attempt"] for e in refused] == [2]
    assert any("train dataset content differs" in reason for reason in refused[0]["reasons"])
    assert "train dataset content differs" in project.log_of(second)
    assert steps_logged(project.log_of(second)) == 0  # refused before a single step
    assert project.committed_steps("c", 2) == []  # nothing trained, nothing committed again


def test_sigterm_while_an_epoch_end_save_waits_is_answered_at_that_step(tmp_path):
    # A long write delay holds the program at the end of epoch 1 (step 24, a regular save)
    # while the save of step 18 is still being written: the notice arrives exactly there. The
    # delay must outlast six steps by a margin a poll can see (steps take 0.3 s on a busy
    # 2-core machine: at 2 s the program sometimes never waited).
    project = Project(tmp_path, write_delay="5.0")
    runner = project.start("run", str(project.file), "--key", "d")
    attempt = wait_for(lambda: project.running("d", 1), "attempt 1", runner)
    wait_for(
        lambda: steps_logged(project.log_of(attempt)) == 24 and project.saving("d", 1) == 18,
        "the program waiting at step 24 for the save of step 18",
        runner,
    )
    runner.send_signal(signal.SIGTERM)

    assert runner.wait(timeout=300) == 3
    steps = project.committed_steps("d", 1)
    assert steps[-1] == 24
    assert len(steps) == len(set(steps)), f"a step committed twice: {steps}"
