"""Protection is stated, never assumed: a run that nothing could continue says so in its final
line, `runs get` and its JSON; a restored program that starts over is caught as it happens."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

from runner_helpers import committed_steps, running_attempt

from polling import wait_for

STARTING_OVER = Path(__file__).parent / "programs" / "starting_over.py"
CHECKPOINTED = '[continuity]\nmode = "checkpointed"\ncheckpoint_paths = ["state"]\n'


def test_a_run_that_never_saved_ends_green_but_says_it_was_unprotected(project):
    project.write(steps=30, save_every=0, body=CHECKPOINTED)  # trains, never saves
    proc = project.nodus("run", "workload.toml", "--key", "bare")
    assert proc.returncode == 0, proc.stderr
    final = proc.stderr.strip().splitlines()[-1]
    assert final.endswith(
        "SUCCEEDED, unprotected: stage 'main' ended without a snapshot to continue from: "
        "nothing was saved into its selection (state)"
    ), final
    view = project.get("bare")
    assert view["protection"] == {
        "state": "unprotected",
        "stage": "main",
        "step": None,
        "why": "nothing was saved into its selection (state)",
    }
    shown = project.nodus("runs", "get", "bare").stdout
    assert "protection: unprotected: stage 'main' ended without a snapshot" in shown


def test_a_restored_program_that_starts_over_is_caught_and_the_run_is_not_resuming(project):
    command = [sys.executable, str(STARTING_OVER), str(project.gate)]
    command += ["--steps", "60", "--save-every", "10", "--sleep", "0.05"]
    project.write(command=command, body=CHECKPOINTED)
    runner = project.start("run", "workload.toml", "--key", "over")
    run_id = wait_for(lambda: _key_run(project, "over"), what="the run")
    wait_for(lambda: any(s >= 30 for s in committed_steps(project, run_id)), what="step 30")
    program = wait_for(lambda: running_attempt(project.catalog(), run_id), what="the program")
    os.kill(program["pid"], signal.SIGKILL)
    wait_for(  # attempt 2 saves step 10 while it is slow: below the restored step
        lambda: project.catalog().has_event(run_id, "restore_ignored"), what="the restore ignored"
    )
    project.done_killing()
    _, said = runner.communicate(timeout=120)
    assert runner.returncode == 0, said
    view = project.get(run_id)
    restored = view["stages"][0]["attempts"][1]["restored_step"]
    assert restored >= 30
    ignored = [e for e in view["events"] if e["type"] == "restore_ignored"]
    assert [(e["attempt"], e["restored_step"], e["step"]) for e in ignored] == [(2, restored, 10)]
    assert (
        f"attempt 2 of stage 'main' restored step {restored} but its program saved step 10: "
        "it started over" in said
    )
    assert "$NODUS_RESTORED_CHECKPOINT" in said
    assert view["protection"]["state"] == "not resuming"
    final = said.strip().splitlines()[-1]
    assert "SUCCEEDED, not resuming: stage 'main': attempt 2 restored step" in final
    assert (
        json.loads(project.nodus("runs", "get", run_id, "--json").stdout)["protection"]["state"]
        == "not resuming"
    )


def _key_run(project, key: str) -> str | None:
    if not (project.home / "nodus.db").exists():
        return None
    run = project.catalog().find_by_key(key)
    return run.id if run else None
