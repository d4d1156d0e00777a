"""A directory-contract program writes no progress: `runs get` shows its newest committed
snapshot's step, and nothing it cannot know (loss, speed, total)."""

from __future__ import annotations

from runner_helpers import committed_steps

from polling import wait_for


def test_a_directory_program_s_progress_is_its_newest_committed_step(project):
    project.write(steps=400, save_every=10, sleep=0.01, gated=True)
    runner = project.start("run", "workload.toml", "--key", "dir")
    run_id = wait_for(lambda: getattr(project.catalog().find_by_key("dir"), "id", None), "the run")
    wait_for(lambda: committed_steps(project, run_id), "a snapshot")
    progress = project.get("dir")["progress"]
    project.done_killing()
    runner.communicate(timeout=120)
    assert progress["step"] == progress["newest_snapshot"]["step"] and progress["step"] % 10 == 0
    assert progress["loss"] is None and progress["total_steps"] is None
    assert progress["steps_per_second"] is None and progress["eta_seconds"] is None
    assert project.get("dir")["progress"] is None  # SUCCEEDED: nothing goes on


def test_runs_wait_on_a_terminal_keeps_a_live_progress_line(project):
    import os
    import pty
    import subprocess

    from runner_helpers import NODUS

    project.write(steps=400, save_every=10, sleep=0.01, gated=True)
    assert project.nodus("run", "workload.toml", "--key", "live", "--detach").returncode == 0
    run_id = project.catalog().get_run("live").id
    wait_for(lambda: committed_steps(project, run_id), "a snapshot")
    leader, follower = pty.openpty()
    waiting = subprocess.Popen(
        [*NODUS, "runs", "wait", "live"],
        cwd=project.root,
        env=project.env(),
        stdout=subprocess.PIPE,
        stderr=follower,
        text=True,
    )
    os.close(follower)
    seen = b""
    while seen.count(b"newest snapshot: step") < 2:  # drawn, then redrawn a second later
        seen += os.read(leader, 4096)
    project.done_killing()
    out, _ = waiting.communicate(timeout=120)
    os.close(leader)
    assert waiting.returncode == 0 and out.strip() == f"{run_id} SUCCEEDED"
    assert seen.startswith(b"  step ")
    # said lines (a terminal gets each committed snapshot) go above it, then it is drawn again
    assert b"\r\x1b[Knodus: snapshot of step " in seen and b"\r\n  step " in seen
