"""The disk guard and failed captures, through `nodus run` with the counter program.

A store whose captures fail is a real one broken under the running program: its ``tmp/`` folder,
where every blob is written before it is linked into place, becomes a file. Low free space is
injected through the guard's free-space reader (``NODUS_FREE_BYTES``), so no disk is filled.
"""

from __future__ import annotations

import json
import os
import signal

from runner_helpers import Project, committed_steps

import doc_samples
from nodus.testing.counter import expected_value
from polling import wait_for


def _run_id(stderr: str) -> str:
    return stderr.split("accepted ")[1].split()[0]


def _break_store(project: Project) -> str:
    """Make every later blob write of the store fail; the error text it will give."""
    tmp = project.home / "store" / "tmp"
    blocker = tmp.with_name("tmp-blocker")
    blocker.write_text("not a folder: the store can write nothing here")
    # The running capture makes tmp/ again before each write, so it can reappear between
    # moving it aside and putting the file in its place: the rename onto it then fails, and
    # the folder it made is moved aside too, until the file holds the name.
    for aside in range(1000):
        if tmp.is_dir():
            os.rename(tmp, tmp.with_name(f"tmp-aside-{aside}"))
        try:
            os.rename(blocker, tmp)
            break
        except IsADirectoryError:
            continue
    assert tmp.is_file(), "the store's tmp/ kept coming back"
    return "File exists"  # the store makes its tmp/ folder before each write


def test_failed_captures_are_said_at_the_end_and_in_runs_get(project):
    project.write(steps=40, save_every=10, sleep=0.05)
    runner = project.start("run", "workload.toml", "--key", "broken")
    run_id = wait_for(lambda: _accepted(project), what="the run accepted")
    wait_for(lambda: committed_steps(project, run_id), what="a first snapshot")
    reason = _break_store(project)
    _stdout, stderr = runner.communicate(timeout=180)
    assert runner.returncode == 0, stderr

    newest = max(committed_steps(project, run_id))
    failed = [e for e in project.get(run_id)["events"] if e["type"] == "capture_failed"]
    assert failed, "breaking the store made no capture fail"
    said = [line for line in stderr.splitlines() if "captures failed" in line]
    count = len(failed) + 1  # the outputs could not be stored either
    assert said == [
        f"nodus: {count} captures failed ({reason}); the newest committed step is {newest}"
    ]
    # The final state was not stored: the phase line says so, it is no bare SUCCEEDED.
    assert f"nodus: {run_id} SUCCEEDED, but its final state was not stored ({reason})" in stderr
    doc_samples.check("capture-failures", stderr)

    data = project.get(run_id)
    assert data["capture_failures"] == {
        "count": count,
        "reasons": [reason],
        "newest_committed_step": newest,
        "final_state_stored": False,
    }
    text = project.nodus("runs", "get", run_id).stdout
    assert f"{count} captures failed ({reason}); the newest committed step is {newest}" in text
    assert "the newest capture was not stored" in text


def test_a_clean_run_says_nothing_about_captures(project):
    project.write(steps=20, save_every=10)
    proc = project.nodus("run", "workload.toml")
    assert proc.returncode == 0, proc.stderr
    run_id = _run_id(proc.stderr)
    assert f"nodus: {run_id} SUCCEEDED\n" in proc.stderr
    assert "captures failed" not in proc.stderr
    assert project.get(run_id)["capture_failures"] == {
        "count": 0,
        "reasons": [],
        "newest_committed_step": 20,
        "final_state_stored": True,
    }
    assert project.result(run_id) == {"steps": 20, "value": expected_value(20)}


def _accepted(project: Project) -> str | None:
    proc = project.nodus("runs", "list", "--json")
    runs = json.loads(proc.stdout) if proc.returncode == 0 else []
    return runs[0]["id"] if runs else None


def test_low_free_space_turns_periodic_saves_off_and_the_final_state_is_still_stored(project):
    # Each checkpoint holds 4 KB: three of them do not fit in the 10 KB the disk has left.
    project.write(steps=40, save_every=10, sleep=0.02, extra_args=("--state-bytes", "4096"))
    proc = project.nodus("run", "workload.toml", env={"NODUS_FREE_BYTES": "10000"})
    assert proc.returncode == 0, proc.stderr
    run_id = _run_id(proc.stderr)
    assert f"nodus: {run_id} SUCCEEDED\n" in proc.stderr

    data = project.get(run_id)
    disabled = [e for e in data["events"] if e["type"] == "checkpoint_disabled_disk"]
    assert len(disabled) == 1
    assert disabled[0]["free_bytes"] == 10000 and disabled[0]["snapshot_bytes"] >= 4096
    assert disabled[0]["disk"] == str(project.home / "store")
    # No periodic snapshot: the one checkpoint stored is the final state, captured at exit.
    assert committed_steps(project, run_id) == [40]
    assert project.result(run_id) == {"steps": 40, "value": expected_value(40)}
    assert data["capture_failures"]["count"] == 0


def test_enough_free_space_keeps_periodic_saves_on(project):
    project.write(steps=30, save_every=10, sleep=0.05, extra_args=("--state-bytes", "4096"))
    proc = project.nodus("run", "workload.toml", env={"NODUS_FREE_BYTES": str(10**9)})
    assert proc.returncode == 0, proc.stderr
    events = project.get(_run_id(proc.stderr))["events"]
    assert "checkpoint_disabled_disk" not in [e["type"] for e in events]
    periodic = [e for e in events if e["type"] == "snapshot_committed" and e["reason"] != "exit"]
    assert periodic, "no checkpoint folder was captured while the program ran"


def test_a_resumed_attempt_is_checked_before_its_program_saves(project):
    # The first runner has room and stores periodic snapshots; it dies with its program.
    project.write(steps=60, save_every=10, sleep=0.05, extra_args=("--state-bytes", "4096"))
    runner = project.start("run", "workload.toml", "--key", "full")
    run_id = wait_for(lambda: _accepted(project), what="the run accepted")
    wait_for(lambda: committed_steps(project, run_id), what="a first snapshot")
    os.killpg(runner.pid, signal.SIGKILL)
    runner.communicate(timeout=30)
    restored = project.store().list(run=run_id, stage="main")[-1]

    # Continued on a disk without room for three snapshots of the restored size.
    proc = project.nodus("run", "workload.toml", "--key", "full", env={"NODUS_FREE_BYTES": "10000"})
    assert proc.returncode == 0, proc.stderr
    events = project.get(run_id)["events"]
    disabled = [e for e in events if e["type"] == "checkpoint_disabled_disk"]
    assert len(disabled) == 1
    assert disabled[0]["snapshot_bytes"] == restored.total_bytes
    # Checked before the program started again (the phase went back to RUNNING afterwards).
    kinds = [(e["type"], e.get("phase")) for e in events]
    running_again = len(kinds) - 1 - kinds[::-1].index(("phase", "RUNNING"))
    assert kinds.index(("checkpoint_disabled_disk", None)) < running_again
    later = [e for e in events if e["attempt"] == disabled[0]["attempt"]]
    assert committed_steps(project, run_id)[-1] == 60
    periodic = [e for e in later if e["type"] == "snapshot_committed" and e["reason"] != "exit"]
    assert periodic == []
    assert project.result(run_id) == {"steps": 60, "value": expected_value(60)}
