"""`--key` idempotency, detached runs, and the commands that watch and control them."""

from __future__ import annotations

import os
import signal

from runner_helpers import committed_steps, kill_program, pid_alive, running_attempt

from nodus.testing.counter import expected_value
from polling import wait_for

STEPS, SAVE_EVERY, SLEEP = 400, 10, 0.01


def test_two_concurrent_runs_with_one_key_run_exactly_once(project):
    project.write(steps=STEPS, save_every=SAVE_EVERY, sleep=SLEEP, gated=True)
    first = project.start("run", "workload.toml", "--key", "nightly")
    second = project.start("run", "workload.toml", "--key", "nightly")
    # Once one of them has answered, the other's program may finish at full speed.
    wait_for(lambda: first.poll() is not None or second.poll() is not None, what="an answer")
    project.done_killing()
    results = [(p.wait(timeout=120), p.communicate()[1]) for p in (first, second)]
    codes = sorted(code for code, _ in results)
    assert codes == [0, 5], results
    refused = next(err for code, err in results if code == 5)
    assert "already running elsewhere (pid " in refused and "on host " in refused
    runs = project.catalog().list_runs()
    assert len(runs) == 1
    assert len(project.get("nightly")["stages"][0]["attempts"]) == 1


def test_a_finished_key_is_reported_with_its_status_and_not_rerun(project):
    project.write(steps=20, save_every=SAVE_EVERY, extra_args=("--fail-at", "5"))
    assert project.nodus("run", "workload.toml", "--key", "once").returncode == 1
    again = project.nodus("run", "workload.toml", "--key", "once")
    assert again.returncode == 1
    assert "has already finished: FAILED" in again.stderr
    assert len(project.get("once")["stages"][0]["attempts"]) == 1
    assert project.nodus("run", "workload.toml", "--key", "other").returncode == 1
    assert len(project.catalog().list_runs()) == 2  # without the same key: a new run


def test_a_changed_file_under_the_same_key_keeps_the_stored_resolution(project):
    project.write(steps=STEPS, save_every=SAVE_EVERY, sleep=SLEEP, gated=True)
    runner = project.start("run", "workload.toml", "--key", "kept")
    run_id = wait_for(lambda: project.catalog().find_by_key("kept"), what="the run").id
    wait_for(lambda: committed_steps(project, run_id), what="a snapshot")
    os.kill(runner.pid, signal.SIGKILL)
    runner.wait(timeout=30)
    project.write(steps=7, save_every=1)  # edited while the run was down
    project.done_killing()
    again = project.nodus("run", "workload.toml", "--key", "kept")
    assert again.returncode == 0, again.stderr
    assert "workload file changed" in again.stderr and "keeping the resolution" in again.stderr
    assert project.result(run_id) == {"steps": STEPS, "value": expected_value(STEPS)}


def test_detached_runs_are_waited_for_through_recovery_and_their_logs_followed(project):
    project.write(steps=STEPS, save_every=SAVE_EVERY, sleep=SLEEP, gated=True)
    detached = project.nodus("run", "workload.toml", "--key", "bg", "--detach")
    assert detached.returncode == 0, detached.stderr
    run_id = project.get("bg")["id"]
    waiter = project.start("runs", "wait", "bg", "--exit-status")
    follower = project.start("runs", "logs", run_id, "--follow")
    kill_program(project, run_id, after_step=0)
    project.done_killing()
    assert waiter.wait(timeout=120) == 0, waiter.communicate()
    out, _ = follower.communicate(timeout=60)
    assert "==> main, attempt 1 <==" in out and "==> main, attempt 2 <==" in out
    assert out.rstrip().endswith(f"counter: done at step {STEPS}")
    phases = [e["phase"] for e in project.get(run_id)["events"] if e["type"] == "phase"]
    assert "RECOVERING" in phases and phases[-1] == "SUCCEEDED"


def test_cancel_stops_the_program_and_the_run_ends_cancelled(project):
    project.write(steps=100000, save_every=SAVE_EVERY, sleep=SLEEP)
    assert project.nodus("run", "workload.toml", "--key", "c", "--detach").returncode == 0
    run_id = project.get("c")["id"]
    program = wait_for(lambda: running_attempt(project.catalog(), run_id), what="program")["pid"]
    cancel = project.nodus("runs", "cancel", "c")
    assert cancel.returncode == 0 and "CANCELLED" in cancel.stdout
    assert project.nodus("runs", "wait", run_id, "--exit-status").returncode == 4
    wait_for(lambda: not pid_alive(program), timeout=10, what="the program to stop")
    again = project.nodus("runs", "cancel", run_id)
    assert again.returncode == 2 and "already finished (CANCELLED)" in again.stderr


def test_a_paused_key_stays_paused_and_a_cancelled_one_stops_for_good(project):
    """`run --key` (cron) never undoes what a user did by hand: a paused run is reported, exit
    3, until `runs resume`; `runs cancel` stops a keyed run for good, reported with exit 4."""
    project.write(steps=STEPS, save_every=SAVE_EVERY, sleep=SLEEP, gated=True)
    runner = project.start("run", "workload.toml", "--key", "held")
    run_id = wait_for(lambda: _key_run(project, "held"), what="the run")
    wait_for(lambda: committed_steps(project, run_id), what="a snapshot")
    paused = project.nodus("runs", "pause", run_id, "--checkpoint", "latest")
    assert paused.returncode == 0, paused.stderr
    runner.communicate(timeout=120)
    assert runner.returncode == 3 and project.get(run_id)["phase"] == "PAUSED"
    cron = project.nodus("run", "workload.toml", "--key", "held")
    assert cron.returncode == 3
    assert "is PAUSED by `nodus runs pause` and stays paused" in cron.stderr
    assert f"`nodus runs resume {run_id}` continues it" in cron.stderr
    assert len(project.get(run_id)["stages"][0]["attempts"]) == 1  # nothing started
    assert project.nodus("runs", "cancel", run_id).returncode == 0
    final = project.nodus("run", "workload.toml", "--key", "held")
    assert final.returncode == 4 and "has already finished: CANCELLED" in final.stderr
    assert project.get(run_id)["phase"] == "CANCELLED"


def _key_run(project, key: str) -> str | None:
    if not (project.home / "nodus.db").exists():
        return None
    run = project.catalog().find_by_key(key)
    return run.id if run else None
