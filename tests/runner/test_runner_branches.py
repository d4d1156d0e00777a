"""Runs that start from another run's snapshot (directory contract): ``resume_from``, branches.

One finished parent (the shipped counter, 20 steps, a save every 5) serves every test; each
child is a real ``nodus`` process. The counter's value is a hash chain, so a child that
continued the parent's state ends with exactly the parent's value, and a warm start (a branch
from weights) ends with the chain restarted at step 0 from the parent's value.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import time

import pytest
from runner_helpers import Project, commits, running_attempt

from nodus.testing.counter import expected_value
from polling import wait_for
from run_phases import move_to

# Outside the quick tier: every test runs a parent and a branch with real `nodus run`s.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.xdist_group("branches_parent"),  # one worker makes the module's `parent` run
]

COUNTER = [sys.executable, "-m", "nodus.testing.counter", "--steps", "20", "--save-every", "5"]
SLOW = ["--sleep", "0.1"]  # saves settle between steps, so each one is captured


def _file(project: Project, name: str, body: str = "", command=None) -> str:
    path = project.root / name
    command = command or [*COUNTER, *SLOW]
    path.write_text(f'name = "counter"\ncommand = {json.dumps(command)}\noutputs = ["out"]\n{body}')
    return str(path)


@pytest.fixture(scope="module")
def parent(tmp_path_factory) -> Project:
    """A finished run (key ``parent``): state kept at steps 15 and 20 only, expiring at gc."""
    root = tmp_path_factory.mktemp("branches")
    project = Project(root / "project", root / "home")
    project.root.mkdir()
    body = "[execution]\nkeep_recoverable = 2\nretention_days = 0\n"
    proc = project.nodus("run", _file(project, "parent.toml", body), "--key", "parent")
    assert proc.returncode == 0, proc.stderr
    assert [c["step"] for c in commits(project, _id(project, "parent"))] == [5, 10, 15, 20]
    return project


_RESULTS: dict[str, dict] = {}


def _result(project: Project, run_id: str) -> dict:
    """The counter's result in the run's outputs (restored once per run)."""
    if run_id not in _RESULTS:
        _RESULTS[run_id] = project.result(run_id)
    return _RESULTS[run_id]


def _id(project: Project, ref: str) -> str:
    return project.get(ref)["id"]


def _snapshot(project: Project, step: int):
    parent = _id(project, "parent")
    return next(m for m in project.store().list(run=parent) if m.step == step)


def _new_run(project: Project, before: set[str]) -> str:
    runs = json.loads(project.nodus("runs", "list", "--json").stdout)
    (new,) = [run["id"] for run in runs if run["id"] not in before]
    return new


def _run_ids(project: Project) -> set[str]:
    return {run["id"] for run in json.loads(project.nodus("runs", "list", "--json").stdout)}


def test_resume_from_continues_the_parent_and_ends_as_it_did(parent):
    file = _file(parent, "child.toml", 'resume_from = "parent@15"\n')
    before = _run_ids(parent)
    proc = parent.nodus("run", file)
    assert proc.returncode == 0, proc.stderr
    assert "counter: starting at step 15" in proc.stdout
    child = _new_run(parent, before)
    assert _result(parent, child) == {"steps": 20, "value": expected_value(20)}
    assert _result(parent, child) == _result(parent, _id(parent, "parent"))
    data = parent.get(child)
    snapshot = _snapshot(parent, 15)
    assert data["parent"] == {
        "run": _id(parent, "parent"),
        "snapshot": snapshot.id,
        "step": 15,
        "stage": "main",
        "mode": "full-state",
    }
    assert data["stages"][0]["attempts"][0]["restored_snapshot"] == snapshot.id
    children = parent.get("parent")["children"]
    assert {"id": child, "mode": "full-state", "step": 15} in [
        {k: c[k] for k in ("id", "mode", "step")} for c in children
    ]
    # --resume-from on the command line does the same, overriding the file
    before = _run_ids(parent)
    proc = parent.nodus("run", _file(parent, "plain.toml"), "--resume-from", "parent@20")
    assert proc.returncode == 0, proc.stderr
    assert parent.get(_new_run(parent, before))["parent"]["step"] == 20


@pytest.mark.parametrize(
    ("body", "args", "expected"),
    [
        (
            'resume_from = "nosuchrun@5"\n',
            (),
            "resume_from: 'nosuchrun@5' — no run with id or key 'nosuchrun'",
        ),
        (
            'resume_from = "parent@7"\n',
            (),
            "resume_from: 'parent@7' — run_",  # … has no committed snapshot at step 7 …
        ),
        (
            'resume_from = "parent@5"\n',  # retention deleted it (keep_recoverable = 2)
            (),
            "has no committed snapshot at step 5; committed steps: 10, 15, 20",
        ),
        (
            'resume_from = "parent@15"\n',
            ("--store", "memory://elsewhere"),
            "resume_from: 'parent@15' — the source run run_",
        ),
    ],
)
def test_a_source_that_cannot_be_continued_is_refused_at_submit(parent, body, args, expected):
    before = _run_ids(parent)
    proc = parent.nodus("run", _file(parent, "refused.toml", body), *args)
    assert proc.returncode == 2, proc.stderr
    assert expected in proc.stderr and "Traceback" not in proc.stderr
    assert _run_ids(parent) == before


def test_what_must_equal_the_parent_is_refused_naming_both_values(parent):
    other = [*COUNTER[:-1], "9", *SLOW]  # another program: --save-every 9
    proc = parent.nodus(
        "run", _file(parent, "other.toml", 'resume_from = "parent@15"\n', command=other)
    )
    assert proc.returncode == 2, proc.stderr
    assert "stages[0].command: [" in proc.stderr and "'9'" in proc.stderr  # this run's value
    assert f"must equal the source run's {[*COUNTER, *SLOW]!r}" in proc.stderr
    proc = parent.nodus("runs", "branch", "parent@15", "--from", "full-state", "--set", "code=x")
    assert proc.returncode == 2 and "--set code: 'x' — may not change" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_an_unfinished_source_is_refused(parent):
    catalog = parent.catalog()
    from nodus.runner.catalog.phases import Phase

    run = catalog.get_run("parent")
    running = catalog.create_run(
        name="busy",
        workload=run.workload,
        store=run.store,
        key="busy",
        lock_name="busy",
        stage_names=["main"],
    )
    move_to(catalog, running, Phase.RUNNING)
    proc = parent.nodus("runs", "branch", "busy@5", "--from", "weights")
    assert proc.returncode == 2, proc.stderr
    assert f"SNAPSHOT: 'busy@5' — the source run {running} is RUNNING" in proc.stderr
    catalog.lifecycle.move(running, Phase.CANCELLED)


def test_a_full_state_branch_with_changes_continues_and_the_tree_shows_it(parent):
    before = _run_ids(parent)
    proc = parent.nodus(
        "runs",
        "branch",
        "parent@15",
        "--from",
        "full-state",
        "--name",
        "longer-keep",
        "--set",
        "execution.keep_recoverable=5",
        "--set",
        "env.NOTE=branch",
    )
    assert proc.returncode == 0, proc.stderr
    child = _new_run(parent, before)
    data = parent.get(child)
    assert data["name"] == "longer-keep" and data["parent"]["mode"] == "full-state"
    assert _result(parent, child) == {"steps": 20, "value": expected_value(20)}
    stored = parent.catalog().get_run(child).workload["stages"][0]
    assert stored["execution"]["keep_recoverable"] == 5 and stored["env"]["NOTE"] == "branch"
    tree = parent.nodus("runs", "list", "--tree").stdout.splitlines()
    parent_line = next(i for i, line in enumerate(tree) if _id(parent, "parent") in line)
    assert any(line.startswith(f"  {child}") for line in tree[parent_line + 1 :])


def test_a_weights_branch_starts_at_step_zero_from_the_parents_files(parent):
    before = _run_ids(parent)
    proc = parent.nodus("runs", "branch", "parent@15", "--from", "weights", "--json")
    assert proc.returncode == 0, proc.stderr
    child = _new_run(parent, before)
    # NODUS_WARM_START=1 reached the program, which found the parent's folder laid out
    assert "counter: warm start from the weights of checkpoint-15" in proc.stderr
    assert "counter: starting at step 0" in proc.stderr
    start = expected_value(15)
    assert _result(parent, child) == {"steps": 20, "value": expected_value(20, start=start)}
    # its own saves count from step 0; the parent's folder was never captured as its own
    assert [c["step"] for c in commits(parent, child)] == [5, 10, 15, 20]
    assert _snapshot(parent, 15).id not in {c["snapshot"] for c in commits(parent, child)}
    (attempt,) = parent.get(child)["stages"][0]["attempts"]
    assert attempt["restored_snapshot"] == _snapshot(parent, 15).id
    assert attempt["restored_step"] is None  # nothing resumed: a warm start


def test_the_branch_hold_keeps_the_source_until_the_branch_finishes(parent):
    """A killed runner leaves its branch unfinished: gc expires the parent's other snapshots,
    never the one the branch starts from; once the branch finished, that one expires too."""
    parent_id = _id(parent, "parent")
    source = _snapshot(parent, 20)
    before = _run_ids(parent)
    runner = parent.start("runs", "branch", "parent@10", "--from", "weights")
    child = wait_for(lambda: (_run_ids(parent) - before or {None}).pop(), what="the branch")
    wait_for(lambda: running_attempt(parent.catalog(), child), what="its program")
    os.kill(runner.pid, signal.SIGKILL)
    runner.wait()
    held = _snapshot(parent, 10)
    assert parent.nodus("gc").returncode == 0
    kept = {m.id: m for m in parent.store().list(run=parent_id)}
    assert held.id in kept and source.id not in kept
    assert "files" in kept[held.id].kinds and parent.store().check(held.id) == []
    proc = parent.nodus("runs", "resume", child)
    assert proc.returncode == 0, proc.stderr
    assert parent.nodus("gc").returncode == 0
    assert held.id not in {m.id for m in parent.store().list(run=parent_id)}


def test_lineage_survives_a_kill_of_runs_branch_at_a_random_point(tmp_path):
    project = Project(tmp_path / "project", tmp_path / "home")
    project.root.mkdir()
    body = "[execution]\nkeep_recoverable = 4\n"
    assert project.nodus("run", _file(project, "p.toml", body), "--key", "p").returncode == 0
    parent_id = _id(project, "p")
    seed = random.randrange(1 << 30)
    delay = random.Random(seed).uniform(0.0, 2.5)
    before = _run_ids(project)
    runner = project.start("runs", "branch", "p@10", "--from", "full-state")
    time.sleep(delay)  # where the kill lands; nothing is asserted about time
    os.kill(runner.pid, signal.SIGKILL)
    runner.wait()
    new = _run_ids(project) - before
    snapshot = next(m for m in project.store().list(run=parent_id) if m.step == 10)
    assert project.store().check(snapshot.id) == [], f"seed {seed}"
    assert "files" in project.store().get(snapshot.id).kinds, f"seed {seed}"
    if not new:
        return  # killed before the run was recorded: nothing half made
    (child,) = new
    assert project.catalog().get_run(child).parent["snapshot"] == snapshot.id, f"seed {seed}"
    if not project.catalog().get_run(child).phase.final:
        proc = project.nodus("runs", "resume", child)
        assert proc.returncode == 0, f"seed {seed}: {proc.stderr}"
    assert _result(project, child) == {"steps": 20, "value": expected_value(20)}, f"seed {seed}"
