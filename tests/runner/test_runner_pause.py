"""`nodus runs pause`, `runs resume [--step N]` and `runs cancel` against real runs.

Every run is a real `nodus` process driving a real program; pauses and cancels are asked for
through the command line, as a user would, while the run trains.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest
from pause_helpers import (
    SLOW_SAVES,
    STUBBORN,
    bare_weights,
    output_weights,
    pause_of,
    phase,
    run_id_of,
    trainer_project,
)
from runner_helpers import committed_steps, running_attempt

from nodus.testing.counter import expected_value
from polling import wait_for

STEPS = 120


def _counter(project, *extra: str, sleep: float = 0.05, save_every: int = 10, body: str = ""):
    return project.write(
        steps=STEPS, save_every=save_every, sleep=sleep, extra_args=extra, body=body, gated=True
    )


def _start_and_train(project, key: str, after_step: int | None = 0, env: dict | None = None):
    """`nodus run --key KEY` in the background, once its program runs (and has saved)."""
    runner = project.start("run", "workload.toml", "--key", key, env=env)
    run_id = run_id_of(project, key)
    wait_for(lambda: running_attempt(project.catalog(), run_id), what="the program")
    # The attempt records its program's pid, then the run's RUNNING: two writes, so a test
    # that reads the run's phase waits for the second too.
    wait_for(lambda: project.catalog().get_run(run_id).phase == "RUNNING", what="RUNNING")
    if after_step is not None:
        wait_for(
            lambda: any(s > after_step for s in committed_steps(project, run_id)),
            what=f"a snapshot after step {after_step}",
        )
    return runner, run_id


@pytest.mark.hf
@pytest.mark.slow
def test_pause_save_of_a_trainer_then_resume_ends_bit_identical(tmp_path):
    project = trainer_project(tmp_path / "project", tmp_path / "home")
    runner, run_id = _start_and_train(project, "hf", after_step=0, env=SLOW_SAVES)
    paused = project.nodus("runs", "pause", run_id, "--checkpoint", "save")
    assert paused.returncode == 0, paused.stderr
    assert "accepted" in paused.stdout
    out, err = runner.communicate(timeout=300)
    assert runner.returncode == 3, out[-2000:] + err[-2000:]

    view = project.get(run_id)
    pause = view["pause"]
    steps = committed_steps(project, run_id)
    assert view["phase"] == "PAUSED" and view["exit_status"] == 3
    assert (pause["policy"], pause["state"], pause["failure"]) == ("save", "paused", None)
    assert pause["resources_released"] and not pause["timed_out"]
    assert 0 < pause["save"]["step"] < 24 and pause["save"]["step"] == steps[-1]
    assert pause["save"]["bytes"] > 0
    assert project.nodus("runs", "wait", run_id, "--exit-status").returncode == 3

    resumed = project.nodus("runs", "resume", run_id, timeout=300, env=SLOW_SAVES)
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]
    attempts = project.get(run_id)["stages"][0]["attempts"]
    assert attempts[1]["restored_step"] == pause["save"]["step"]
    assert output_weights(project, run_id) == bare_weights(tmp_path)


def test_pause_save_under_the_directory_contract_then_resume_from_an_earlier_step(project):
    # retention keeps every save restorable, so an early step is there to resume from
    _counter(project, "--save-on-term", body="[execution]\nkeep_recoverable = 100\n")
    runner, run_id = _start_and_train(project, "dc", after_step=10)
    assert project.nodus("runs", "pause", "dc", "--checkpoint", "save").returncode == 0
    runner.communicate(timeout=120)
    assert runner.returncode == 3

    pause = pause_of(project, run_id)
    steps = committed_steps(project, run_id)
    # The counter saved the step it was at when SIGTERM came: the pause acknowledged that one.
    assert pause["state"] == "paused" and pause["save"]["step"] == steps[-1] > 10
    assert not (project.home / "work" / run_id / "main" / "copy").exists()
    assert not (project.home / "work" / run_id / "main" / "next").exists()

    missing = project.nodus("runs", "resume", run_id, "--step", "15")
    assert missing.returncode == 2 and "no committed snapshot at step 15" in missing.stderr
    assert phase(project, run_id) == "PAUSED"
    project.done_killing()  # the resumed program runs the steps left at full speed
    resumed = project.nodus("runs", "resume", run_id, "--step", "10")
    assert resumed.returncode == 0, resumed.stderr
    assert project.get(run_id)["stages"][0]["attempts"][1]["restored_step"] == 10
    assert project.result(run_id) == {"steps": STEPS, "value": expected_value(STEPS)}


def test_pause_latest_stops_at_once_and_resume_repeats_from_the_newest_snapshot(project):
    _counter(project)
    runner, run_id = _start_and_train(project, "latest", after_step=10)
    assert project.nodus("runs", "pause", run_id, "--checkpoint", "latest").returncode == 0
    runner.communicate(timeout=120)
    assert runner.returncode == 3

    pause = pause_of(project, run_id)
    newest = committed_steps(project, run_id)[-1]
    assert pause["state"] == "paused" and pause["save"]["step"] == newest
    assert pause["resources_released"]
    project.done_killing()  # the resumed program runs the steps left at full speed
    resumed = project.nodus("runs", "resume", run_id)
    assert resumed.returncode == 0, resumed.stderr
    assert project.get(run_id)["stages"][0]["attempts"][1]["restored_step"] == newest
    assert project.result(run_id) == {"steps": STEPS, "value": expected_value(STEPS)}


def test_pause_latest_is_refused_before_any_snapshot_and_cancel_ends_the_run(project):
    _counter(project, save_every=100000, sleep=0.1)
    runner, run_id = _start_and_train(project, "early", after_step=None)
    refused = project.nodus("runs", "pause", run_id, "--checkpoint", "latest")
    assert refused.returncode == 2
    assert "trained without any restorable state" in refused.stderr
    assert phase(project, run_id) == "RUNNING" and pause_of(project, run_id) is None

    cancelled = project.nodus("runs", "cancel", run_id)
    assert cancelled.returncode == 0 and "CANCELLED" in cancelled.stdout
    runner.communicate(timeout=60)
    assert runner.returncode == 4
    assert project.nodus("runs", "wait", run_id, "--exit-status").returncode == 4
    again = project.nodus("runs", "pause", run_id, "--checkpoint", "save")
    assert again.returncode == 2 and "already finished (CANCELLED)" in again.stderr


def _pause_a_stubborn_program(project, key: str, grace_period: int, deadline: str):
    """Start a program that ignores save requests and ask for a pause at a save."""
    (project.root / "stubborn.py").write_text(STUBBORN)
    project.write(
        command=[sys.executable, "stubborn.py"],
        body=f"[execution]\ngrace_period = {grace_period}\n",
    )
    runner, run_id = _start_and_train(project, key, after_step=0)
    asked = project.nodus("runs", "pause", run_id, "--checkpoint", "save", "--deadline", deadline)
    assert asked.returncode == 0, asked.stderr
    return runner, run_id


def test_cancel_during_a_pending_pause_wins_and_keeps_the_snapshots(project):
    runner, run_id = _pause_a_stubborn_program(project, "stubborn", grace_period=1, deadline="10m")
    wait_for(lambda: phase(project, run_id) == "PAUSING", what="PAUSING")

    cancelled = project.nodus("runs", "cancel", run_id)
    assert cancelled.returncode == 0, cancelled.stderr
    runner.communicate(timeout=60)
    assert runner.returncode == 4
    view = project.get(run_id)
    assert view["phase"] == "CANCELLED" and view["exit_status"] == 4
    assert view["pause"]["state"] == "cancelled"
    listed = project.nodus("runs", "snapshots", run_id, "--json")
    assert listed.returncode == 0, listed.stderr
    assert [s["step"] for s in json.loads(listed.stdout)] == [1]


def test_past_its_deadline_a_pause_is_timed_out_and_the_program_still_stopped(project):
    runner, run_id = _pause_a_stubborn_program(project, "late", grace_period=2, deadline="1s")
    wait_for(lambda: pause_of(project, run_id)["timed_out"], what="the pause to time out")
    program = project.catalog().attempts(run_id, "main")[0]["pid"]
    runner.communicate(timeout=60)
    assert runner.returncode == 3
    pause = pause_of(project, run_id)
    assert pause["state"] == "paused" and pause["timed_out"] and pause["resources_released"]
    assert pause["save"]["step"] == 1
    with pytest.raises(ProcessLookupError):
        os.kill(program, 0)


def test_refusals_name_the_reason_and_a_runnerless_run_can_still_be_cancelled(project):
    _counter(project, sleep=0.1)
    runner, run_id = _start_and_train(
        project, "gone", after_step=0, env={"CUDA_VISIBLE_DEVICES": "0,1"}
    )
    step = committed_steps(project, run_id)[0]
    os.killpg(runner.pid, signal.SIGKILL)  # the runner dies; its program dies with it
    runner.communicate(timeout=30)

    gone = project.nodus("runs", "pause", run_id, "--checkpoint", "save")
    assert gone.returncode == 2 and "its runner is gone" in gone.stderr
    not_paused = project.nodus(
        "runs", "resume", run_id, "--step", str(step), env={"CUDA_VISIBLE_DEVICES": "0,1"}
    )
    assert not_paused.returncode == 2 and "only to a PAUSED run" in not_paused.stderr
    devices = project.nodus("runs", "resume", run_id, env={"CUDA_VISIBLE_DEVICES": "0"})
    assert devices.returncode == 2
    assert "ran with 2 device(s) but this resume would have 1" in devices.stderr
    bad = project.nodus("runs", "pause", run_id, "--checkpoint", "save", "--deadline", "soon")
    assert bad.returncode == 2 and "--deadline 'soon'" in bad.stderr

    cancelled = project.nodus("runs", "cancel", run_id)
    assert cancelled.returncode == 0 and "CANCELLED" in cancelled.stdout
    assert committed_steps(project, run_id)[0] == step  # cancelling deletes no snapshot


def test_a_runner_dead_before_its_first_snapshot_is_continued_alike_by_resume_and_key(project):
    """One answer to "continue this run": a runner killed before anything was committed
    leaves nothing to lose, so `runs resume` starts it again from the beginning, saying so,
    exactly as `run --key` does (never a final FAILED that the other command would not give)."""
    _counter(project, save_every=100000, sleep=0.1)
    runner, run_id = _start_and_train(project, "nostate", after_step=None)
    os.killpg(runner.pid, signal.SIGKILL)
    runner.communicate(timeout=30)
    shown = project.get(run_id)
    assert shown["phase"] == "RUNNING" and shown["runner"]["state"] == "gone"
    assert shown["runner"]["continue_with"] == "nodus run FILE --key nostate"
    assert "RUNNING (runner gone)" in project.nodus("runs", "list").stdout
    text = project.nodus("runs", "get", run_id).stdout
    assert "runner gone (pid " in text and "`nodus run FILE --key nostate` continues it" in text
    waited = project.nodus("runs", "wait", run_id, "--exit-status")
    assert waited.returncode == 3 and "`nodus run FILE --key nostate` recovers it" in waited.stderr

    project.done_killing()
    resumed = project.nodus("runs", "resume", run_id)
    assert resumed.returncode == 0, resumed.stderr
    assert "starts again from the beginning: it committed no snapshot" in resumed.stderr
    view = project.get(run_id)
    assert view["phase"] == "SUCCEEDED" and view["runner"]["state"] is None
    assert [a["restored_step"] for a in view["stages"][0]["attempts"]] == [None, None]
    assert project.result(run_id) == {"steps": STEPS, "value": expected_value(STEPS)}


def _finishing(gate: Path) -> str:
    """STUBBORN that finishes, with a result, once the test creates ``gate`` (it never saves)."""
    return STUBBORN.replace(
        "time.sleep(3600)",
        f"while not os.path.exists({str(gate)!r}): time.sleep(0.02)\n"
        'os.makedirs("out", exist_ok=True)\n'
        'open("out/result.json", "w").write(json.dumps({"done": True}))',
    )


def test_a_run_that_finishes_during_a_pause_completes(project):
    gate = project.root.parent / "finish"  # outside the working copy
    (project.root / "finishing.py").write_text(_finishing(gate))
    project.write(command=[sys.executable, "finishing.py"], body="[execution]\ngrace_period = 30\n")
    runner, run_id = _start_and_train(project, "finishing", after_step=0)
    asked = project.nodus("runs", "pause", run_id, "--checkpoint", "save")
    assert asked.returncode == 0, asked.stderr
    gate.touch()  # the program finishes while the pause waits for its save
    runner.communicate(timeout=60)
    assert runner.returncode == 0
    view = project.get(run_id)
    assert (view["phase"], view["exit_status"]) == ("SUCCEEDED", 0)
    assert view["pause"]["state"] == "completed"
    assert project.result(run_id) == {"done": True}
