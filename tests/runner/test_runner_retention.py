"""Rotation at every commit under real runs: the kinds kept, holds honoured, bytes bounded.

The program is the shipped directory-contract counter: each checkpoint is ``state.json`` plus a
``weights.bin`` of STATE_BYTES that differs at every step, both of kind ``files`` (the whole
training state of such a program). Retention is tight (``keep_recoverable = 1``): while the
run is unfinished the newest snapshot is held as what a retry would restore, and the newest
unheld one keeps its state too, so exactly two snapshots hold ``files`` after any commit.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from pathlib import Path

import pytest
from runner_helpers import Project, commits, committed_steps, kill_program, running_attempt

from nodus.store.restorable import by_recency
from nodus.testing.counter import expected_value
from polling import wait_for

# Outside the quick tier: real runs that save many times under retention.
pytestmark = pytest.mark.slow

STATE_BYTES = 256 * 1024
TIGHT = "[execution]\nkeep_recoverable = 1\nkeep_adapters = 2\nmax_recoveries = 10\n"


def _counter(project: Project, steps: int, *extra: str, sleep: float = 0.02) -> Project:
    return project.write(
        steps=steps,
        save_every=10,
        sleep=sleep,
        extra_args=("--state-bytes", str(STATE_BYTES), *extra),
        body=TIGHT,
    )


def _blob_bytes(project: Project) -> int:
    total = 0
    for folder, _dirs, files in os.walk(project.home / "store" / "blobs"):
        total += sum(os.path.getsize(os.path.join(folder, name)) for name in files)
    return total


def _kinds(project: Project, run_id: str) -> dict[int, tuple[str, ...]]:
    """{step: kinds} of every committed snapshot, the newest first (one per step here)."""
    manifests = by_recency(project.store().list(run=run_id))
    assert len({m.step for m in manifests}) == len(manifests)
    return {m.step: m.kinds for m in manifests}


def _deleted_by_rotation(project: Project, run_id: str) -> list[dict]:
    events = project.get(run_id)["events"]
    assert not [e for e in events if e["type"] == "rotation_failed"]
    return [e for e in events if e["type"] == "snapshot_kind_deleted"]


def test_many_saves_keep_two_restorable_snapshots_and_the_store_stays_bounded(tmp_path):
    short = _counter(Project(_folder(tmp_path, "short"), tmp_path / "short-home"), 40)
    assert short.nodus("run", "workload.toml").returncode == 0
    after_4_saves = _blob_bytes(short)

    project = _counter(Project(_folder(tmp_path, "long"), tmp_path / "home"), 400, "--save-on-term")
    runner = project.start("run", "workload.toml", "--key", "dc")
    run_id = wait_for(lambda: _run_id(project, "dc"), what="the run")
    wait_for(lambda: len(commits(project, run_id)) >= 12, what="12 committed saves")
    assert project.nodus("runs", "pause", run_id, "--checkpoint", "save").returncode == 0
    runner.communicate(timeout=120)
    assert runner.returncode == 3  # PAUSED: a resume would restore the newest snapshot

    # Rotation left the newest (held: a resume restores it) and one more; the others are gone.
    steps = sorted({c["step"] for c in commits(project, run_id)}, reverse=True)
    newest, second, *older = steps
    assert len(steps) >= 12
    assert _kinds(project, run_id) == {newest: ("files",), second: ("files",)}
    assert sorted(e["step"] for e in _deleted_by_rotation(project, run_id)) == sorted(older)
    listed = json.loads(project.nodus("runs", "snapshots", run_id, "--json").stdout)
    assert [row["step"] for row in listed] == [second, newest]  # nothing left: not listed
    assert [h["type"] for h in listed[1]["holds"]] == ["resume_target"]
    # Bounded: after 12 or more saves the store holds no more than it held after 4.
    assert _blob_bytes(project) <= after_4_saves + STATE_BYTES / 4
    assert project.store().verify().sound

    gone = project.nodus("runs", "resume", run_id, "--step", str(older[0]))
    assert gone.returncode == 2 and f"no committed snapshot at step {older[0]}" in gone.stderr
    assert f"committed steps: {second}, {newest}" in gone.stderr
    # The fallback is whole: resuming from it ends where an uninterrupted run does.
    resumed = project.nodus("runs", "resume", run_id, "--step", str(second))
    assert resumed.returncode == 0, resumed.stderr
    assert project.get(run_id)["stages"][0]["attempts"][1]["restored_step"] == second
    assert project.result(run_id) == {"steps": 400, "value": expected_value(400)}


def test_a_snapshot_pinned_early_keeps_its_kinds(tmp_path):
    project = Project(_folder(tmp_path, "project"), tmp_path / "home")
    gate = tmp_path / "gate"
    counter = [sys.executable, "-m", "nodus.testing.counter", "--save-every", "10"]
    weights = ["--state-bytes", str(STATE_BYTES), "--sleep", "0.02"]
    # Two saves, then wait for the test to pin the first; then on to 120 (the counter resumes
    # from its newest checkpoint folder, so the hash chain runs on unbroken).
    script = (
        f"{_sh(counter)} --steps 20 {_sh(weights)} && "
        f"while [ ! -e {gate} ]; do sleep 0.05; done && "
        f"{_sh(counter)} --steps 120 {_sh(weights)}"
    )
    project.write(command=["sh", "-c", script], body=TIGHT)
    runner = project.start("run", "workload.toml", "--key", "pinned")
    run_id = wait_for(lambda: _run_id(project, "pinned"), what="the run")
    wait_for(lambda: committed_steps(project, run_id) == [10, 20], what="the first two saves")
    pinned = project.nodus("snapshots", "pin", "pinned@10")
    assert pinned.returncode == 0, pinned.stderr
    gate.touch()
    _out, err = runner.communicate(timeout=120)
    assert runner.returncode == 0, err
    assert project.result(run_id) == {"steps": 120, "value": expected_value(120)}

    steps = sorted({c["step"] for c in commits(project, run_id)}, reverse=True)
    newest, second, *_older, first = steps
    assert (newest, first) == (120, 10) and len(steps) >= 6
    assert _kinds(project, run_id) == {
        newest: ("files",),
        second: ("files",),
        10: ("files",),  # pinned: kept whole, and it did not count toward keep_recoverable
    }
    rows = json.loads(project.nodus("runs", "snapshots", run_id, "--json").stdout)
    listed = [(row["step"], row["pinned"]) for row in rows]
    assert listed == [(10, True), (second, False), (120, False)]
    early = project.store().list(run=run_id)[0]
    assert project.store().check(early.id) == []


def test_killed_and_recovered_many_times_under_tight_retention_ends_like_an_uninterrupted_run(
    project,
):
    steps = 600
    project.write(
        steps=steps,
        save_every=10,
        sleep=0.01,
        extra_args=("--state-bytes", str(STATE_BYTES)),
        body=TIGHT.replace("keep_adapters = 2", "keep_adapters = 1"),
    )
    runner = project.start("run", "workload.toml", "--key", "k")
    run_id = wait_for(lambda: _run_id(project, "k"), what="the run")
    rng = random.Random(12)
    kills = 4
    for number in range(1, kills + 1):
        # a random moment after a commit of this attempt: its rotation may be mid-deletion
        _wait_for_a_commit_of(project, run_id, number)
        time.sleep(rng.uniform(0.0, 0.3))
        assert kill_program(project, run_id) == number  # fails if the run finished first
    out, err = runner.communicate(timeout=180)
    assert runner.returncode == 0, err
    assert project.result(run_id) == {"steps": steps, "value": expected_value(steps)}
    attempts = project.get(run_id)["stages"][0]["attempts"]
    assert len(attempts) == kills + 1
    assert all(a["restored_step"] for a in attempts[1:])  # every recovery restored state
    assert out.count("counter: starting at step 0") == 1
    assert _deleted_by_rotation(project, run_id)
    held = [kinds for kinds in _kinds(project, run_id).values() if kinds]
    assert held == [("files",), ("files",)]
    assert project.store().verify().sound


def _wait_for_a_commit_of(project: Project, run_id: str, number: int) -> None:
    """Until attempt ``number`` runs and has committed a snapshot."""
    wait_for(
        lambda: (running_attempt(project.catalog(), run_id) or {}).get("number") == number,
        what=f"attempt {number} to run",
    )
    wait_for(
        lambda: any(m.attempt == number for m in project.store().list(run=run_id)),
        what=f"a snapshot of attempt {number}",
    )


def _folder(tmp_path: Path, name: str) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    return folder


def _sh(words: list[str]) -> str:
    return " ".join(words)


def _run_id(project: Project, key: str) -> str | None:
    run = project.catalog().find_by_key(key)
    return run.id if run else None
